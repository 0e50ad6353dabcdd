"""The test suite's real etcd server (`bkfast.cli.local_etcd`, shared with `bkfast sandbox --etcd`): one
single-member etcd on 127.0.0.1 that tests can also kill, pause and restart by pid."""

from __future__ import annotations

from bkfast.cli.local_etcd import (  # noqa: F401 - re-exported for the tests
    EtcdServer,
    EtcdServerError,
    EtcdTls,
    etcd_health,
    find_etcd,
)
