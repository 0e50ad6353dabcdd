"""Named log streams on a cluster whose metadata is in a real etcd (`<scope>/streams/<name>`, CAS on the key's
version): the stream record's CRUD and compare-and-set, records read back once in order across segment rolls,
a new writer fencing the old one, and truncation. The bodies of the cluster tests are test_streams'."""

from __future__ import annotations

import pytest

from bkfast.meta.etcd_layout import EtcdKeys
from bkfast.streams import Namespace
from tests.cluster_factory import cluster_fixture
from tests.streams import test_streams as on_zookeeper

pytestmark = pytest.mark.etcd

cluster = cluster_fixture(bookies=3, store="etcd")


@pytest.fixture(scope="module")
def ns(cluster):
    with Namespace(cluster.metadata_uri, timeout=60) as namespace:
        yield namespace


def test_etcd_driver_stores_streams_with_versions_and_cas(cluster):
    with Namespace(cluster.metadata_uri, timeout=30) as ns:
        on_zookeeper._stream_crud_and_cas(ns)
        assert cluster.kv.get(EtcdKeys(cluster.root).stream("orders")) is not None
        ns.delete_stream("orders")
        assert cluster.kv.get(EtcdKeys(cluster.root).stream("orders")) is None


test_records_read_back_once_in_order_across_segment_rolls = \
    on_zookeeper.test_records_read_back_once_in_order_across_segment_rolls
test_new_writer_fences_the_old_one_and_readers_see_every_acknowledged_record_once = \
    on_zookeeper.test_new_writer_fences_the_old_one_and_readers_see_every_acknowledged_record_once
test_truncation_and_retention_delete_ledgers_before_the_cut_and_nothing_after = \
    on_zookeeper.test_truncation_and_retention_delete_ledgers_before_the_cut_and_nothing_after
