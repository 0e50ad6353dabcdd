"""The file-based index storage (Sorted/InterleavedLedgerStorage) on real files: .idx bytes, pages, memtable."""

import hashlib
import itertools
import json
import os
import struct
import tarfile
from pathlib import Path

import pytest

from bkfast.bookie.storage_factory import open_ledger_storage, storage_kind
from bkfast.codec import DigestType, encode_entry, encode_lac
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.errors import (
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKUnauthorizedAccessException,
    ConfigurationError,
    StorageCorruptionError,
)
from bkfast.indexstorage import IndexedLedgerStorage
from bkfast.indexstorage.file_info import index_path, parse_header
from tests import VECTORS_DIR

KEY = bytes(range(20))
VECTORS = VECTORS_DIR / "java_bookie_dirs"


def conf(**overrides) -> ServerConfiguration:
    return ServerConfiguration({"pageSize": 8192, "pageLimit": -1, **overrides})


def entry(ledger, entry_id, payload=b"payload", scope_id=0):
    return encode_entry(ledger, entry_id, entry_id - 1, len(payload), payload, DigestType.CRC32C, b"", scope_id)


@pytest.fixture(params=["sorted", "interleaved"])
def kind(request):
    return request.param


def open_storage(path, kind, **overrides) -> IndexedLedgerStorage:
    return IndexedLedgerStorage.from_conf([str(path)], None, conf(**overrides), sorted=(kind == "sorted"))


def test_index_file_is_bkle_version_1_byte_for_byte(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    s.set_master_key(0x1234, KEY)
    s.add_entry(entry(0x1234, 0))
    s.add_entry(entry(0x1234, 2))
    s.set_fenced(0x1234)
    lac = encode_lac(0x1234, 1, DigestType.CRC32C)
    s.set_explicit_lac(0x1234, lac)
    s.flush()
    raw = (tmp_path / "current" / "12" / "34" / "1234.idx").read_bytes()
    s.close()
    header = (b"BKLE" + struct.pack(">ii", 1, 20) + KEY + struct.pack(">i", 1) + struct.pack(">i", len(lac)) + lac)
    assert raw[:len(header)] == header
    assert raw[len(header):1024] == bytes(1024 - len(header))
    assert len(raw) == 1024 + 8192  # one whole page, as Java writes it
    loc0, loc1, loc2 = struct.unpack_from(">qqq", raw, 1024)
    assert loc0 >> 32 == 0 and loc0 & 0xFFFFFFFF >= 1024 + 4 and loc1 == 0 and loc2 > loc0
    assert raw[1024 + 24:] == bytes(8192 - 24)


def test_scoped_ledgers_use_the_scoped_layout(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    s.set_master_key(5, KEY, scope_id=0xABC)
    s.set_master_key(5, b"k" * 20)
    s.add_entry(entry(5, 0, b"scoped", scope_id=0xABC))
    s.add_entry(entry(5, 0, b"classic"))
    s.close()
    assert (tmp_path / "current" / "scoped" / "0000000000000abc" / "0" / "5" / "5.idx").is_file()
    assert index_path(tmp_path, 0xABC, 5) == tmp_path / "current" / "scoped" / "0000000000000abc" / "0" / "5" / "5.idx"
    s = open_storage(tmp_path, kind)
    try:
        assert s.get_entry(5, 0, scope_id=0xABC)[-6:] == b"scoped"
        assert s.get_entry(5, 0)[-7:] == b"classic"
        assert s.all_ledgers() == [(0, 5), (0xABC, 5)]
        assert s.list_ledgers(0xABC) == [5] and s.list_ledgers() == [5]
    finally:
        s.close()


def test_many_ledgers_and_pages_through_a_tiny_page_pool_and_open_file_limit(tmp_path, kind):
    # 8 entries per page, 4 pages in memory, 3 open index files: every path of eviction is taken.
    s = open_storage(tmp_path, kind, pageSize=64, pageLimit=4, openFileLimit=3, skipListSizeLimit=4096)
    expected = {}
    for i in range(600):
        ledger, e = i % 12, i // 12
        s.set_master_key(ledger, KEY)
        data = entry(ledger, e, os.urandom(i % 50))
        s.add_entry(data)
        expected[(ledger, e)] = data
    cache = s.ledger_cache
    for (ledger, e), data in sorted(expected.items(), key=lambda kv: hash(kv[0])):
        assert s.get_entry(ledger, e) == data
        assert cache.cached_pages <= 4
    assert s.get_last_entry_id(7) == 49 and s.entries_of_ledger(7) == list(range(50))
    s.close()
    s = open_storage(tmp_path, kind, pageSize=64, pageLimit=4, openFileLimit=3)
    try:
        assert all(s.get_entry(ledger, e) == data for (ledger, e), data in expected.items())
        assert s.get_entry(11, -1) == expected[(11, 49)]
        assert s.list_ledgers() == list(range(12))
    finally:
        s.close()


def test_reads_see_memtable_entries_and_a_flush_writes_each_ledger_contiguously(tmp_path):
    s = open_storage(tmp_path, "sorted")
    for ledger in (1, 2, 3):
        s.set_master_key(ledger, KEY)
    for e in range(50):
        for ledger in (3, 1, 2):
            s.add_entry(entry(ledger, e, b"x" * 10))
    assert s.write_cache_size > 0
    assert s.get_entry(2, 17) == entry(2, 17, b"x" * 10)
    assert s.get_last_entry_id(1) == 49 and s.entries_of_ledger(3) == list(range(50))
    assert s.entry_location(0, 1, 0) is None  # still only in memory
    s.flush()
    assert s.write_cache_size == 0
    size = len(entry(1, 0, b"x" * 10)) + 4
    for ledger in (1, 2, 3):
        locations = [s.entry_location(0, ledger, e) for e in range(50)]
        assert all(b - a == size for a, b in itertools.pairwise(locations)), f"ledger {ledger} not contiguous"
    assert s.entry_location(0, 1, 49) + size == s.entry_location(0, 2, 0)
    s.close()


def test_interleaved_storage_writes_in_arrival_order(tmp_path):
    s = open_storage(tmp_path, "interleaved")
    for ledger in (1, 2):
        s.set_master_key(ledger, KEY)
    s.add_entry(entry(1, 0))
    s.add_entry(entry(2, 0))
    s.add_entry(entry(1, 1))
    assert s.entry_location(0, 1, 0) < s.entry_location(0, 2, 0) < s.entry_location(0, 1, 1)
    s.close()


def test_header_state_keys_fences_and_errors(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    try:
        with pytest.raises(BKNoSuchLedgerExistsException, match="ledger 9"):
            s.is_fenced(9)
        with pytest.raises(BKNoSuchLedgerExistsException, match="ledger 9"):
            s.get_entry(9, 0)
        s.set_master_key(9, KEY)
        with pytest.raises(BKUnauthorizedAccessException, match="ledger 9"):
            s.set_master_key(9, b"y" * 20)
        with pytest.raises(BKNoSuchEntryException, match="entry 3 of ledger 9"):
            s.get_entry(9, 3)
        with pytest.raises(BKNoSuchEntryException):
            s.get_entry(9, -1)
        assert s.set_fenced(9) and not s.set_fenced(9) and s.is_fenced(9)
        assert s.get_explicit_lac(9) is None
    finally:
        s.close()


def test_re_adding_entries_is_idempotent_and_delete_removes_the_index_file(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    s.set_master_key(4, KEY)
    for _ in range(3):  # journal replay re-adds what is already stored
        for e in range(10):
            s.add_entry(entry(4, e))
        s.flush()
    assert s.entries_of_ledger(4) == list(range(10)) and s.get_entry(4, 9) == entry(4, 9)
    s.add_entry(entry(4, 10))
    s.delete_ledger(4)
    assert not (tmp_path / "current" / "0" / "4" / "4.idx").exists()
    assert not s.ledger_exists(4) and s.list_ledgers() == []
    s.close()
    s = open_storage(tmp_path, kind)
    assert not s.ledger_exists(4)
    s.close()


def test_compaction_contract_moves_locations_and_skips_deleted_ledgers(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    for ledger in (1, 2):
        s.set_master_key(ledger, KEY)
        for e in range(5):
            s.add_entry(entry(ledger, e, b"old"))
    s.flush()
    (logger,) = s.entry_loggers()
    old_log = s.entry_location(0, 1, 0) >> 32
    logger.roll()
    moved = [(0, 1, e, logger.add_entry(1, s.get_entry(1, e))) for e in range(5)]
    s.delete_ledger(2)
    s.update_entry_locations(moved + [(0, 2, 0, moved[0][3])])
    s.flush()
    assert not s.ledger_exists(2)
    assert [s.entry_location(0, 1, e) for e in range(5)] == [m[3] for m in moved]
    s.close()
    s = open_storage(tmp_path, kind)
    try:
        (logger,) = s.entry_loggers()
        assert logger.remove_log(old_log)
        assert [s.get_entry(1, e) for e in range(5)] == [entry(1, e, b"old") for e in range(5)]
        assert s.all_ledgers() == [(0, 1)]
    finally:
        s.close()


def test_an_index_pointing_at_a_removed_log_is_a_clear_error(tmp_path, kind):
    s = open_storage(tmp_path, kind)
    s.set_master_key(1, KEY)
    s.add_entry(entry(1, 0))
    s.close()
    for f in (tmp_path / "current").glob("*.log"):
        f.unlink()
    s = open_storage(tmp_path, kind)
    try:
        with pytest.raises(StorageCorruptionError, match="entry 1:0.*missing"):
            s.get_entry(1, 0)
    finally:
        s.close()


def test_java_sorted_storage_index_files_open_without_the_journal(tmp_path, kind):
    manifest = json.loads((VECTORS / "sorted_clean.manifest.json").read_text())
    with tarfile.open(VECTORS / "sorted_clean.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    ledgers = tmp_path / "sorted_clean" / "ledgers"
    raw = (ledgers / "current" / "0" / "3" / "3.idx").read_bytes()
    version, key, bits, lac = parse_header(raw[:1024], Path("3.idx"))
    assert (version, key.hex(), bits, lac[:16]) == (1, manifest["ledgers"][3]["masterKey"], 0,
                                                     struct.pack(">qq", 3, 399))
    s = open_storage(ledgers, kind)
    try:
        assert s.list_ledgers() == [lg["ledgerId"] for lg in manifest["ledgers"]]
        for lg in manifest["ledgers"]:
            lid = lg["ledgerId"]
            assert s.get_master_key(lid).hex() == lg["masterKey"] and s.is_fenced(lid) == lg["fenced"]
            assert s.entries_of_ledger(lid) == [e["entryId"] for e in lg["entries"]]
            for e in lg["entries"]:
                assert hashlib.sha256(s.get_entry(lid, e["entryId"])).hexdigest() == e["storedSha256"]
            assert s.get_last_add_confirmed(lid) == lg["entries"][-1]["lastAddConfirmed"]
    finally:
        s.close()


@pytest.mark.parametrize("name, kind", [
    ("org.apache.bookkeeper.bookie.SortedLedgerStorage", "sorted"),
    ("SortedLedgerStorage", "sorted"),
    ("org.apache.bookkeeper.bookie.InterleavedLedgerStorage", "interleaved"),
    ("InterleavedLedgerStorage", "interleaved"),
    ("org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage", "db"),
    ("DbLedgerStorage", "db"),
])
def test_storage_class_names_map_to_implementations(name, kind):
    assert storage_kind(name) == kind


def test_factory_opens_the_named_storage_and_refuses_others(tmp_path):
    s = open_ledger_storage(conf(ledgerStorageClass="InterleavedLedgerStorage"), [tmp_path / "a"], None)
    assert isinstance(s, IndexedLedgerStorage) and s.write_cache_size == 0
    s.close()
    s = open_ledger_storage(conf(ledgerStorageClass="DbLedgerStorage", dbStorage_writeCacheMaxSizeMb=4,
                                 dbStorage_readAheadCacheMaxSizeMb=4), [tmp_path / "b"], None)
    assert isinstance(s, DbLedgerStorage)
    s.close()
    with pytest.raises(ConfigurationError, match="ledgerStorageClass: 'com.example.Nope'"):
        open_ledger_storage(conf(ledgerStorageClass="com.example.Nope"), [tmp_path / "c"], None)


def test_an_index_file_whose_header_was_never_written_counts_as_absent(tmp_path, kind):
    """A crash between creating an .idx file and writing its header leaves zeros; replay recreates it."""
    torn = tmp_path / "current" / "0" / "7" / "7.idx"
    torn.parent.mkdir(parents=True)
    torn.write_bytes(bytes(100))
    s = open_storage(tmp_path, kind)
    try:
        assert not s.ledger_exists(7) and s.get_master_key(7) is None
        s.set_master_key(7, KEY)
        s.add_entry(entry(7, 0))
        s.flush()
        assert torn.read_bytes()[:4] == b"BKLE"
    finally:
        s.close()
    s = open_storage(tmp_path, kind)
    try:
        assert s.get_entry(7, 0) == entry(7, 0) and s.get_master_key(7) == KEY
    finally:
        s.close()


def test_a_corrupt_index_header_is_reported_with_its_path(tmp_path, kind):
    bad = tmp_path / "current" / "0" / "8" / "8.idx"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"XXXX" + bytes(1020))
    s = open_storage(tmp_path, kind)
    try:
        with pytest.raises(StorageCorruptionError, match=r"0/8/8\.idx.*signature"):
            s.ledger_exists(8)
    finally:
        s.close()


def test_several_ledger_and_index_dirs(tmp_path, kind):
    ledger_dirs = [str(tmp_path / "l1"), str(tmp_path / "l2")]
    index_dirs = [str(tmp_path / "i1"), str(tmp_path / "i2"), str(tmp_path / "i3")]
    c = conf(logSizeLimit=64 << 10)  # small logs, so new logs land round-robin in both ledger dirs

    def reopen():
        return IndexedLedgerStorage.from_conf(ledger_dirs, index_dirs, c, sorted=(kind == "sorted"))

    s = reopen()
    for ledger in range(9):
        s.set_master_key(ledger, KEY)
        for e in range(40):
            s.add_entry(entry(ledger, e, bytes([ledger]) * 500))
    s.close()
    assert all(list((Path(d) / "current").glob("*.log")) for d in ledger_dirs)
    assert all(list((Path(d) / "current").glob("*/*/*.idx")) for d in index_dirs)
    assert not list((tmp_path / "l1" / "current").glob("*/*/*.idx"))
    s = reopen()
    try:
        assert s.list_ledgers() == list(range(9))
        assert all(s.get_entry(ledger, e) == entry(ledger, e, bytes([ledger]) * 500)
                   for ledger in range(9) for e in range(40))
    finally:
        s.close()


def test_concurrent_adds_reads_flushes_and_deletes_stay_consistent(tmp_path, kind):
    import threading

    s = open_storage(tmp_path, kind, pageSize=128, pageLimit=6, openFileLimit=4, skipListSizeLimit=8192)
    added: dict[tuple[int, int], bytes] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(first_ledger):
        try:
            for i in range(1500):
                ledger, e = first_ledger + i % 3, i // 3
                if e == 0:
                    s.set_master_key(ledger, KEY)
                data = entry(ledger, e, os.urandom(i % 40))
                s.add_entry(data)
                added[(ledger, e)] = data
        except BaseException as ex:  # noqa: BLE001 - reported by the main thread
            errors.append(ex)

    def reader():
        rng = __import__("random").Random(3)
        try:
            while not stop.is_set():
                keys = list(added)
                for key in rng.sample(keys, min(50, len(keys))):
                    assert s.get_entry(*key) == added[key], f"ledger {key[0]} entry {key[1]}"
        except BaseException as ex:  # noqa: BLE001
            errors.append(ex)

    def flusher():
        try:
            while not stop.is_set():
                s.flush()
                s.set_master_key(99, KEY)
                s.add_entry(entry(99, 0))
                s.delete_ledger(99)
        except BaseException as ex:  # noqa: BLE001
            errors.append(ex)

    writers = [threading.Thread(target=writer, args=(base,)) for base in (0, 10, 20)]
    others = [threading.Thread(target=reader), threading.Thread(target=flusher)]
    for t in writers + others:
        t.start()
    for t in writers:
        t.join(60)
    stop.set()
    for t in others:
        t.join(60)
    assert not errors, errors[0]
    s.close()
    s = open_storage(tmp_path, kind)
    try:
        assert not s.ledger_exists(99)
        assert all(s.get_entry(*key) == data for key, data in added.items())
        assert s.list_ledgers() == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    finally:
        s.close()


def test_an_evicted_index_page_only_points_at_entry_log_bytes_already_in_the_file(tmp_path, kind):
    """Eviction writes index pages before any checkpoint; the entry-log bytes they point at must be in
    the log file (synced) by then, never only in the entry logger's write buffer."""
    s = open_storage(tmp_path, kind, pageSize=64, pageLimit=2, skipListSizeLimit=2048, writeBufferSizeBytes=1 << 20)
    try:
        for ledger in range(6):
            s.set_master_key(ledger, KEY)
        for e in range(64):
            for ledger in range(6):
                s.add_entry(entry(ledger, e, b"z" * 30))
        s._drain_memtable()  # sorted: what the background thread does when the memtable is full (no sync)
        checked = 0
        for idx in (tmp_path / "current").glob("*/*/*.idx"):
            raw = idx.read_bytes()
            ledger = int(idx.stem, 16)
            for slot, (location,) in enumerate(struct.iter_unpack(">q", raw[1024:])):
                if not location:
                    continue
                log_file = tmp_path / "current" / f"{location >> 32:x}.log"
                with open(log_file, "rb") as f:
                    f.seek((location & 0xFFFFFFFF) - 4)
                    stored = f.read(4 + len(entry(ledger, slot, b"z" * 30)))
                assert stored[4:] == entry(ledger, slot, b"z" * 30), f"{idx.name} entry {slot} -> {location:#x}"
                checked += 1
        assert checked > 100  # evictions really wrote pages before any flush
    finally:
        s.close()
