"""Bugs the fault campaigns found in bkfast, each pinned by a test on a real cluster (on loopback, or in
the harness's namespaces when the bug needs a partition)."""

from __future__ import annotations

import os
import time

import pytest

from bkfast import BookKeeper
from tests.client_cluster import Cluster
from tests.faults.cluster import SESSION_TIMEOUT_MS, ZK_PORT, FaultCluster
from tests.faults.netns import run_in_netns

pytestmark = pytest.mark.zookeeper

PASSWORD = b"regressions"


def test_ensemble_change_uses_a_recently_failed_bookie_rather_than_failing_the_writer(zookeeper_server, tmp_path):
    """Campaign seed 1 (kill_bookie after a pause): a writer's ensemble change refused the only spare bookie
    because it had failed within the last minute, and the writer failed with 'need 1 writable bookies, have
    0'. Java's BookieWatcher prefers non-quarantined bookies but falls back to quarantined ones."""
    cluster = Cluster(zookeeper_server, tmp_path, bookies=4)
    try:
        with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as bk:
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
            ensemble = lh.metadata.ensembles[0][1]
            spare = next(b.bookie_id for b in cluster.bookies if b.bookie_id not in ensemble)
            bk.async_client.note_failed_bookies([spare])        # it failed a moment ago, now it is back
            for i in range(20):
                lh.add_entry(b"before %d" % i)
            cluster.by_id(ensemble[0]).kill()
            for i in range(20):
                lh.add_entry(b"after %d" % i)
            assert lh.metadata.ensembles[-1][1] == (spare, *ensemble[1:])
            lh.close()
            assert [e.data for e in lh.read_entries(0, 39)] == \
                [b"before %d" % i for i in range(20)] + [b"after %d" % i for i in range(20)]
    finally:
        cluster.stop()



def _children(cluster, path: str) -> list[str]:
    """ZooKeeper's children of `path`, asked from the checker's host (the test's own thread is outside
    the cluster's namespaces)."""
    from kazoo.client import KazooClient

    def ask():
        client = KazooClient(hosts=f"{cluster.net.hosts['zk']}:{ZK_PORT}", timeout=10.0)
        client.start(timeout=30)
        try:
            return client.get_children(path)
        finally:
            client.stop()
            client.close()

    return run_in_netns(cluster.net.ns("chk"), ask)


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_registration_follows_a_read_only_switch_made_while_zookeeper_was_unreachable(tmp_path):
    """Campaign seed 100 (disk_full during zk_restart): the bookie turned read-only while its ZooKeeper
    connection was down; moving the registration failed (ConnectionLoss, an unhandled error in the log) and
    was never tried again, and the session's re-registration re-created the old, writable node. Clients
    kept choosing a bookie that refused every add."""
    with FaultCluster(tmp_path, bookies=1, prefix=f"bkr{os.getpid()}") as cluster:
        bookie_id = cluster.bookies["b1"].bookie_id
        assert _children(cluster, "/ledgers/available/readonly") == []
        cluster.net.cut("b1", ["zk"])
        cluster.fill_disk()                      # the disk checker (every 500 ms) turns the bookie read-only
        time.sleep(3 * SESSION_TIMEOUT_MS / 1000.0)
        cluster.net.uncut("b1")
        deadline = time.monotonic() + 30
        while _children(cluster, "/ledgers/available/readonly") != [bookie_id]:
            assert time.monotonic() < deadline, _children(cluster, "/ledgers/available")
            time.sleep(0.5)
        assert bookie_id not in _children(cluster, "/ledgers/available")
        cluster.empty_disk()                     # and back to writable, with ZooKeeper reachable
        deadline = time.monotonic() + 30
        while bookie_id not in _children(cluster, "/ledgers/available"):
            assert time.monotonic() < deadline, _children(cluster, "/ledgers/available")
            time.sleep(0.5)
        assert _children(cluster, "/ledgers/available/readonly") == []


def test_failed_recovery_adds_leave_no_unhandled_errors(zookeeper_server, tmp_path):
    """Campaign seed 101: a recovery whose re-adds could not replace a dead bookie failed as it should
    (BKLedgerRecoveryException), but every re-add's Deferred was dropped failed, and Twisted logged each as
    'Unhandled error in Deferred' with a traceback, which reads like a crash of the client."""
    import gc

    from twisted.logger import globalLogPublisher

    from bkfast.errors import BKLedgerRecoveryException

    unhandled = []

    def observer(event):
        if "Unhandled error in Deferred" in str(event.get("log_format", "")):
            unhandled.append(event)

    cluster = Cluster(zookeeper_server, tmp_path, bookies=3)
    globalLogPublisher.addObserver(observer)
    try:
        with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as writer, \
                BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as reader:
            lh = writer.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
            for i in range(10):
                lh.add_entry(b"entry %d" % i)       # entry 9 carries LAC 8: recovery re-adds entry 9
            cluster.by_id(lh.metadata.ensembles[0][1][0]).kill()
            with pytest.raises(BKLedgerRecoveryException):
                reader.open_ledger(lh.ledger_id, PASSWORD)
            gc.collect()
            time.sleep(0.5)                          # the reactor thread finishes the failed handle
            gc.collect()
        assert unhandled == []
    finally:
        globalLogPublisher.removeObserver(observer)
        cluster.stop()
