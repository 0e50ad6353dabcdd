"""AutoRecovery on etcd, which Java's etcd driver cannot run (its under-replication manager and auditor election
do not exist there): 5 real bookies with autoRecoveryDaemonEnabled and their metadata in a real etcd. A bookie
killed with SIGKILL under live writers is healed while the writers go on; with AutoRecovery disabled from the
shell, the auditor's bookie killed hands the election over and the marks made before are processed once it is
enabled again. The test bodies are test_replication_autorecovery's, run on this etcd cluster."""

from __future__ import annotations

import pytest

from tests.client_cluster import Cluster
from tests.replication import test_replication_autorecovery as on_zookeeper

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    c = Cluster(etcd_server.endpoint, tmp_path_factory.mktemp("autorecovery-etcd"), 5, "etcd",
                **on_zookeeper.DAEMON_CONF)
    try:
        yield c
    finally:
        c.stop()


test_kill_9_one_bookie_under_live_writers_heals = on_zookeeper.test_kill_9_one_bookie_under_live_writers_heals
test_disable_then_auditor_failover_processes_earlier_marks = \
    on_zookeeper.test_disable_then_auditor_failover_processes_earlier_marks
