"""Bugs the fault campaigns found in bkfast, each pinned by a test on a real cluster (loopback, no faults
harness needed)."""

from __future__ import annotations

import pytest

from bkfast import BookKeeper
from tests.client_cluster import Cluster

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
