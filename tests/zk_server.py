"""The test suite's real ZooKeeper server: `bkfast.cli.local_zookeeper` (shared with `bkfast sandbox --zk`)."""

from bkfast.cli.local_zookeeper import (  # noqa: F401 - re-exported for the tests
    ZooKeeperServer,
    ZooKeeperServerError,
    expire_session,
    find_classpath,
    four_letter_word,
    probe_session,
)
