"""Java 4.16's etcd key layout (metadata-drivers/etcd: EtcdUtils, EtcdConstants, Etcd64bitIdGenerator,
EtcdLayoutManager) as bkfast.meta.etcd_layout spells it: every key name, the UUID form of (scopeId, ledgerId)
that Java's `new UUID(scopeId, ledgerId).toString()` gives, the bucket id scheme, the layout value and the
metadata service URI forms."""

from __future__ import annotations

import pytest

from bkfast.errors import MetadataError
from bkfast.ids import LedgerId
from bkfast.meta.etcd_layout import (
    EtcdKeys,
    bucket_ledger_id,
    check_etcd_layout,
    format_etcd_layout,
    ledger_key_uuid,
    parse_etcd_uri,
    parse_ledger_uuid,
)

# java.util.UUID(most, least).toString(): the most significant long as 8-4-4 hex digits, the least as 4-12.
UUIDS = [
    (LedgerId(0, 0), "00000000-0000-0000-0000-000000000000"),
    (LedgerId(0, 1), "00000000-0000-0000-0000-000000000001"),
    (LedgerId(0, 0x0123456789ABCDEF), "00000000-0000-0000-0123-456789abcdef"),
    (LedgerId(7, 99), "00000000-0000-0007-0000-000000000063"),
    (LedgerId(2**64 - 1, 2**63 - 1), "ffffffff-ffff-ffff-7fff-ffffffffffff"),
    (LedgerId(0x1122334455667788, 0x19AABBCCDDEEFF00), "11223344-5566-7788-19aa-bbccddeeff00"),
]


@pytest.mark.parametrize("ledger,text", UUIDS)
def test_ledger_keys_are_javas_uuid_of_scope_and_ledger_id(ledger, text):
    assert ledger_key_uuid(ledger) == text
    assert parse_ledger_uuid(text) == ledger
    assert EtcdKeys("/ledgers").ledger(ledger) == f"/ledgers/ledgers/{text}".encode()


def test_every_key_of_a_scope_is_named_as_java_names_it():
    keys = EtcdKeys("/bk")
    assert (keys.root, keys.root_end) == (b"/bk", b"/bk0")
    assert keys.layout == b"/bk/layout" and keys.instance_id == b"/bk/instanceid"
    assert keys.cookie("10.0.0.1:3181") == b"/bk/cookies/10.0.0.1:3181"
    assert keys.bookie("10.0.0.1:3181", False) == b"/bk/bookies/writable/10.0.0.1:3181"
    assert keys.bookie("10.0.0.1:3181", True) == b"/bk/bookies/readonly/10.0.0.1:3181"
    assert EtcdKeys.children(keys.bookies(False)) == (b"/bk/bookies/writable/", b"/bk/bookies/writable0")
    assert [keys.bucket(b) for b in (0, 7, 127)] == [b"/bk/buckets/000", b"/bk/buckets/007", b"/bk/buckets/127"]
    assert keys.underreplication_dir == b"/bk/underreplication" and keys.ledgers_dir == b"/bk/ledgers"


def test_ledger_ids_are_the_bucket_in_the_top_byte_and_its_version_below():
    assert bucket_ledger_id(0, 1) == 1
    assert bucket_ledger_id(5, 3) == 5 << 56 | 3
    assert bucket_ledger_id(127, 2**56 - 1) == 0x7FFFFFFFFFFFFFFF       # the largest id: still a positive long


def test_the_layout_is_javas_etcd_ledger_manager_factory_at_version_0():
    assert format_etcd_layout() == b"2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0"
    check_etcd_layout(format_etcd_layout(), "/bk/layout")
    with pytest.raises(MetadataError, match="not Java's etcd one"):
        check_etcd_layout(b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1", "/bk/layout")
    with pytest.raises(MetadataError, match="unsupported layout"):
        check_etcd_layout(b"garbage", "/bk/layout")


@pytest.mark.parametrize("uri,endpoints,scope,protocol", [
    ("etcd://127.0.0.1:2379/ledgers", (("127.0.0.1", 2379),), "/ledgers", "http"),
    ("etcd+http://a:1,b:2;c:3/x/y/", (("a", 1), ("b", 2), ("c", 3)), "/x/y", "http"),
    ("etcd+https://[::1]:2379/bk", (("::1", 2379),), "/bk", "https"),
])
def test_metadata_service_uris(uri, endpoints, scope, protocol):
    parsed = parse_etcd_uri(uri)
    assert (parsed.endpoints, parsed.scope, parsed.protocol) == (endpoints, scope, protocol)


@pytest.mark.parametrize("uri,error", [("etcd://127.0.0.1:2379", "names no scope"),
                                       ("etcd://127.0.0.1/ledgers", "expected host:port"),
                                       ("zk://127.0.0.1:2181/ledgers", "not an etcd metadata service URI")])
def test_bad_uris_are_one_clear_error(uri, error):
    with pytest.raises(MetadataError, match=error):
        parse_etcd_uri(uri)
