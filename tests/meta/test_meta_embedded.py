"""Embedded metadata driver (RocksDB via rocksdict): persistence across reopen, one shared store per
directory, ephemeral bookies, listener delivery rules. The shared behaviour is in test_meta_driver_contract."""

from __future__ import annotations

import threading

import pytest
from rocksdict import Options, Rdict
from twisted.internet import defer

from bkfast.errors import BKMetaStoreException, BKNoSuchLedgerExistsException
from bkfast.ids import LedgerId
from bkfast.meta import MetadataError, bookie_service_info
from bkfast.meta.embedded import EmbeddedMetadataDriver, open_stores
from bkfast.meta.factory import open_metadata_driver
from bkfast.meta.ledger_metadata import LedgerMetadataFormatError, LedgerState, parse_metadata
from tests.meta.test_meta_driver_contract import Events, make_md
from tests.reactor_thread import call


@pytest.fixture
def uri(tmp_path):
    return f"embedded://{tmp_path}/meta"


def start(uri):
    driver = open_metadata_driver(uri)
    assert isinstance(driver, EmbeddedMetadataDriver)
    call(driver.start)
    return driver


def test_ledgers_and_the_id_counter_survive_a_reopen(uri, tmp_path):
    driver = start(uri)
    ids = [call(driver.generate_ledger_id) for _ in range(3)]
    v0 = call(driver.create_ledger_metadata, LedgerId.classic(ids[0]), make_md())
    v1 = call(driver.write_ledger_metadata, LedgerId.classic(ids[0]), v0.metadata.closed(9, 99), 0)
    call(driver.create_ledger_metadata, LedgerId(4, 2**62), make_md())
    call(driver.register_bookie, "127.0.0.1:3181", bookie_service_info("127.0.0.1", 3181))
    call(driver.close)
    assert str(tmp_path / "meta") not in open_stores()           # really closed: RocksDB released
    again = start(uri)
    try:
        assert call(again.read_ledger_metadata, LedgerId.classic(ids[0])) == v1
        assert call(again.list_ledgers) == [ids[0]] and call(again.list_ledgers, 4) == [2**62]
        assert ids == [0, 1, 2]
        after = [call(again.generate_ledger_id) for _ in range(3)]
        assert after[0] > ids[-1] and after == sorted(set(after))
        assert call(again.get_bookies) == {}                     # registrations are not persisted
    finally:
        call(again.close)


def test_metadata_is_stored_as_v3_bytes_with_its_version(uri, tmp_path):
    driver = start(uri)
    created = call(driver.create_ledger_metadata, LedgerId.classic(5), make_md())
    call(driver.write_ledger_metadata, LedgerId.classic(5), created.metadata.closed(0, 1), 0)
    call(driver.close)
    db = Rdict(str(tmp_path / "meta"), Options(raw_mode=True))
    try:
        raw = db[b"L" + (0).to_bytes(8, "big") + (5).to_bytes(8, "big")]
    finally:
        db.close()
        del db
    assert int.from_bytes(raw[:8], "big") == 1
    assert raw[8:].startswith(b"BookieMetadataFormatVersion\t3\n")
    assert parse_metadata(raw[8:]).state == LedgerState.CLOSED


def test_drivers_on_one_directory_share_one_store_until_the_last_closes(uri, tmp_path):
    first, second = start(uri), start(uri)
    path = str((tmp_path / "meta").resolve())
    assert open_stores() == {path: 2}
    call(first.create_ledger_metadata, LedgerId.classic(1), make_md())
    assert call(second.list_ledgers) == [1]
    assert call(second.generate_ledger_id) == 0 and call(first.generate_ledger_id) == 1
    call(first.close)
    assert open_stores() == {path: 1}
    assert call(second.read_ledger_metadata, LedgerId.classic(1)).version == 0
    with pytest.raises(BKMetaStoreException, match="closed"):
        call(first.read_ledger_metadata, LedgerId.classic(1))
    call(second.close)
    assert open_stores() == {}


def test_bookies_of_a_closed_driver_disappear_for_the_others(uri):
    bookie, client = start(uri), start(uri)
    try:
        events = Events()
        call(client.watch_bookies, events)
        call(bookie.register_bookie, "127.0.0.1:3181", bookie_service_info("127.0.0.1", 3181))
        events.wait_len(2)
        with pytest.raises(MetadataError, match="already registered"):
            call(client.register_bookie, "127.0.0.1:3181", b"")
        call(bookie.close)
        assert events.wait_len(3)[-1] == ({}, {})
    finally:
        call(client.close)


def test_listeners_run_later_never_inside_the_mutating_call(uri):
    driver = start(uri)
    try:
        lid = LedgerId.classic(8)
        v0 = call(driver.create_ledger_metadata, lid, make_md())
        events = Events()
        call(driver.watch_ledger_metadata, lid, events)
        events.wait_len(1)
        seen_during_call = []

        def write_and_look():
            d = driver.write_ledger_metadata(lid, v0.metadata.closed(1, 1), 0)
            seen_during_call.append(len(events.items))         # listener must not have run yet
            return d
        call(write_and_look)
        assert seen_during_call == [1]
        assert events.wait_len(2)[1].version == 1
        reactor_name = call(lambda: threading.current_thread().name)
        assert events.threads == {reactor_name}
    finally:
        call(driver.close)


def test_corrupt_stored_metadata_is_reported_with_the_ledger(uri, tmp_path):
    driver = start(uri)
    call(driver.create_ledger_metadata, LedgerId.classic(3), make_md())
    call(driver.close)
    db = Rdict(str(tmp_path / "meta"), Options(raw_mode=True))
    db[b"L" + (0).to_bytes(8, "big") + (3).to_bytes(8, "big")] = (0).to_bytes(8, "big") + b"garbage"
    db.close()
    del db
    driver = start(uri)
    try:
        with pytest.raises(LedgerMetadataFormatError, match="ledger 3"):
            call(driver.read_ledger_metadata, LedgerId.classic(3))
        with pytest.raises(BKNoSuchLedgerExistsException):
            call(driver.read_ledger_metadata, LedgerId.classic(4))
    finally:
        call(driver.close)


@pytest.mark.parametrize("bad", ["embedded://relative/dir", "embedded:relative", "embedded://host/abs"])
def test_uri_must_name_an_absolute_directory(bad):
    with pytest.raises(MetadataError, match="absolute"):
        EmbeddedMetadataDriver(bad)


def test_unknown_scheme_is_refused():
    with pytest.raises(MetadataError, match="unsupported metadata service URI"):
        open_metadata_driver("consul://127.0.0.1:8500/ledgers")


def test_ids_stay_unique_across_reserved_blocks_and_reopens(uri):
    seen = []
    for _ in range(3):
        driver = start(uri)
        try:
            seen += call(lambda d=driver: defer.gatherResults([d.generate_ledger_id() for _ in range(1500)]))
        finally:
            call(driver.close)
    assert seen == sorted(set(seen)) and len(seen) == 4500
