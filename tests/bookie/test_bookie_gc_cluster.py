"""Garbage collection end to end: a bookie process asks ZooKeeper which ledgers exist and drops the
ones a client deleted (the metadata driver wired into `bkfast bookie`)."""

from __future__ import annotations

import time

import pytest

from bkfast import BookKeeper
from bkfast.errors import BKNoSuchLedgerExistsException
from tests.client_cluster import Cluster
from tests.reactor_thread import call

pytestmark = pytest.mark.zookeeper


def test_bookies_drop_ledgers_deleted_in_zookeeper(zookeeper_server, tmp_path):
    cluster = Cluster(zookeeper_server, tmp_path, bookies=3, gcWaitTime="500",
                      minorCompactionInterval="0", majorCompactionInterval="0")
    try:
        with BookKeeper(cluster.metadata_uri) as bk:
            kept = bk.create_ledger(3, 3, 3, password=b"gc")
            gone = bk.create_ledger(3, 3, 3, password=b"gc")
            for lh in (kept, gone):
                lh.add_entries([b"gc-%d" % i for i in range(50)])
                lh.close()
            bk.delete_ledger(gone.ledger_id)
            client = bk.async_client.bookie_client
            deadline = time.monotonic() + 30
            remaining = {b.bookie_id for b in cluster.bookies}
            while remaining and time.monotonic() < deadline:
                for bookie in list(remaining):
                    try:
                        call(client.read_entry, bookie, gone.ledger_id, 0)
                    except BKNoSuchLedgerExistsException:
                        remaining.discard(bookie)
                time.sleep(0.2)
            assert not remaining, f"bookies {remaining} still hold deleted ledger {gone.ledger_id}"
            for bookie in cluster.bookies:
                data = call(client.read_entry, bookie.bookie_id, kept.ledger_id, 49)
                assert data.endswith(b"gc-49")
            rh = bk.open_ledger(kept.ledger_id, b"gc")
            assert [e.data for e in rh.read_entries(0, 49)] == [b"gc-%d" % i for i in range(50)]
    finally:
        cluster.stop()


def test_full_disk_moves_the_registration_to_read_only(zookeeper_server, tmp_path):
    """A bookie whose disks are over diskUsageThreshold turns read-only and moves its ZooKeeper
    registration to available/readonly (the threshold is set below this disk's real usage)."""
    from bkfast.cli.local_cluster import LocalBookie, free_port
    from bkfast.errors import BKWriteOnReadOnlyBookieException

    cluster = Cluster(zookeeper_server, tmp_path / "writable", bookies=3)
    full = LocalBookie(tmp_path / "full", free_port(), cluster.metadata_uri,
                       {"diskUsageThreshold": "0.0001", "diskUsageWarnThreshold": "0.00005",
                        "diskUsageLwmThreshold": "0.00005", "diskCheckInterval": "200"})
    try:
        full.start()
        readonly_node = f"{cluster.root}/available/readonly/{full.bookie_id}"
        deadline = time.monotonic() + 30
        while cluster.zk.exists(readonly_node) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cluster.zk.exists(readonly_node) is not None
        assert cluster.zk.exists(f"{cluster.root}/available/{full.bookie_id}") is None
        with BookKeeper(cluster.metadata_uri) as bk:
            assert full.bookie_id in bk.async_client.read_only_bookies or cluster.zk.exists(readonly_node)
            for _ in range(5):      # never placed on the read-only bookie
                lh = bk.create_ledger(3, 2, 2, password=b"ro")
                assert full.bookie_id not in lh.metadata.ensembles[0][1]
                lh.close()
            entry = lh.async_handle.digest.encode(0, -1, 1, b"x")
            with pytest.raises(BKWriteOnReadOnlyBookieException):
                call(bk.async_client.bookie_client.add_entry, full.bookie_id, lh.ledger_id, 0, entry,
                     lh.async_handle.digest.master_key)
        assert full.alive()
    finally:
        full.stop()
        cluster.stop()
