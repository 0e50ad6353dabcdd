"""The client acceptance tests of test_client_cluster on a cluster whose metadata is in a real etcd (Java's etcd
layout, bkfast.meta.etcd_driver): create/add/read, a wrong password, an ensemble change after a bookie is
killed with SIGKILL, fencing under a concurrent writer, recovery of a half-written entry, tailing reads, and
every acknowledged entry surviving the whole ensemble's SIGKILL. The test bodies are test_client_cluster's,
run here against `running` on etcd; those that read ZooKeeper's znodes themselves stay there."""

from __future__ import annotations

import pytest

from bkfast import BookKeeper
from tests.client import test_client_cluster as on_zookeeper
from tests.cluster_factory import cluster_fixture

pytestmark = pytest.mark.etcd

cluster = cluster_fixture(bookies=5, store="etcd")


@pytest.fixture
def running(cluster):
    cluster.ensure_all_running()
    return cluster


protocol = on_zookeeper.protocol

test_e3_w2_a2_ten_thousand_random_entries_read_back = on_zookeeper.test_e3_w2_a2_ten_thousand_random_entries_read_back
test_wrong_password_and_missing_ledger = on_zookeeper.test_wrong_password_and_missing_ledger
test_kill_bookie_while_writing_changes_ensemble = on_zookeeper.test_kill_bookie_while_writing_changes_ensemble
test_fencing_persistence_property = on_zookeeper.test_fencing_persistence_property
test_recovery_of_entry_written_to_one_bookie = on_zookeeper.test_recovery_of_entry_written_to_one_bookie
test_tailing_reader_sees_every_entry = on_zookeeper.test_tailing_reader_sees_every_entry
test_explicit_lac_and_force = on_zookeeper.test_explicit_lac_and_force
test_every_acknowledged_entry_survives_killing_the_whole_ensemble = \
    on_zookeeper.test_every_acknowledged_entry_survives_killing_the_whole_ensemble


def test_ledger_ids_and_keys_follow_javas_etcd_layout(running):
    """The ledger's metadata is at <scope>/ledgers/<UUID(0, id)>, its id from Java's buckets, in the binary
    format a ZooKeeper cluster stores."""
    import uuid

    from bkfast.meta.ledger_metadata import parse_metadata

    with BookKeeper(running.metadata_uri, timeout=60) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=on_zookeeper.PASSWORD)
        lh.add_entry(b"one")
        lh.close()
    key = f"{running.root}/ledgers/{uuid.UUID(int=lh.ledger_id)}".encode()
    stored = running.kv.get(key)
    assert stored is not None and stored.version == 2            # created, then closed
    assert parse_metadata(stored.value).last_entry_id == 0
    bucket = lh.ledger_id >> 56
    assert 0 <= bucket < 128
    assert running.kv.get(f"{running.root}/buckets/{bucket:03d}".encode()).version == lh.ledger_id & (2**56 - 1)
