"""The Bookie's rules on real files: keys, fences, LAC, reads, durability order, checkpoint, replay.

Every test runs against each ledger storage: DbLedgerStorage (RocksDB index) and the file-based index
storage, with its sorted memtable (SortedLedgerStorage) and without (InterleavedLedgerStorage).
"""

import shutil
import threading

import pytest

from bkfast.bookie import logmark
from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, decode_lac, encode_entry, encode_lac, master_key
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.errors import (
    BKLedgerFencedException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKUnauthorizedAccessException,
    ConfigurationError,
)
from bkfast.indexstorage import IndexedLedgerStorage

KEY = master_key(b"pw")
OTHER_KEY = master_key(b"other")


STORAGE_CLASSES = {
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
}


@pytest.fixture(params=sorted(STORAGE_CLASSES), autouse=True)
def storage_class(request):
    return STORAGE_CLASSES[request.param]


@pytest.fixture
def make_conf(storage_class):
    def make(tmp_path, **overrides):
        return ServerConfiguration({
            "journalDirectories": [str(tmp_path / "journal")],
            "ledgerDirectories": [str(tmp_path / "ledgers")],
            "ledgerStorageClass": storage_class,
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            # Small index pages and pool for the file-based index, so page eviction is exercised.
            "pageSize": 256,
            "pageLimit": 8,
            **overrides,
        })
    return make


def entry(ledger, entry_id, payload=b"payload", scope_id=0):
    return encode_entry(ledger, entry_id, entry_id - 1, len(payload) * (entry_id + 1), payload,
                        DigestType.CRC32C, b"", scope_id)


@pytest.fixture
def bookie(tmp_path, make_conf):
    b = Bookie(make_conf(tmp_path))
    b.start()
    yield b
    b.stop()


def test_add_then_read_back_the_stored_bytes_and_the_last_entry(bookie):
    for i in range(5):
        bookie.add_entry_sync(entry(1, i, b"e%d" % i), KEY)
    assert bookie.read_entry(1, 3) == entry(1, 3, b"e3")
    assert bookie.read_entry(1, -1) == entry(1, 4, b"e4")
    assert bookie.entries_of_ledger(1) == [0, 1, 2, 3, 4]
    assert bookie.read_last_add_confirmed(1) == 3


def test_missing_ledger_and_missing_entry_are_distinct_errors(bookie):
    with pytest.raises(BKNoSuchLedgerExistsException):
        bookie.read_entry(42, 0)
    bookie.add_entry_sync(entry(42, 0), KEY)
    with pytest.raises(BKNoSuchEntryException):
        bookie.read_entry(42, 7)


def test_first_key_wins_and_a_wrong_key_is_unauthorized(bookie):
    bookie.add_entry_sync(entry(2, 0), KEY)
    with pytest.raises(BKUnauthorizedAccessException):
        bookie.add_entry_sync(entry(2, 1), OTHER_KEY)
    with pytest.raises(BKUnauthorizedAccessException):
        bookie.fence_sync(2, OTHER_KEY)
    assert not bookie.is_fenced(2)


def test_fenced_ledger_rejects_normal_add_but_accepts_recovery_add(bookie):
    bookie.add_entry_sync(entry(3, 0), KEY)
    bookie.fence_sync(3, KEY)
    with pytest.raises(BKLedgerFencedException):
        bookie.add_entry_sync(entry(3, 1), KEY)
    bookie.add_entry_sync(entry(3, 1), KEY, recovery=True)
    assert bookie.read_entry(3, -1) == entry(3, 1)
    bookie.fence_sync(3, KEY)  # fencing again completes at once


def test_fencing_an_unseen_ledger_creates_it_with_that_key(bookie):
    bookie.fence_sync(9, KEY)
    assert bookie.ledger_exists(9) and bookie.is_fenced(9)
    with pytest.raises(BKNoSuchEntryException):
        bookie.read_entry(9, -1)
    with pytest.raises(BKUnauthorizedAccessException):
        bookie.add_entry_sync(entry(9, 0), OTHER_KEY, recovery=True)


def test_explicit_lac_round_trip(bookie):
    bookie.add_entry_sync(entry(4, 0), KEY)
    lac = encode_lac(4, 0, DigestType.CRC32C)
    bookie.set_explicit_lac_sync(4, lac, KEY)
    assert decode_lac(bookie.get_explicit_lac(4), DigestType.CRC32C) == (0, 4, 0)


def test_scoped_ledgers_are_kept_apart_from_scope_zero(bookie):
    bookie.add_entry_sync(entry(5, 0, b"classic"), KEY)
    bookie.add_entry_sync(entry(5, 0, b"scoped", scope_id=77), OTHER_KEY)
    assert bookie.read_entry(5, 0)[-7:] == b"classic"
    assert bookie.read_entry(5, 0, scope_id=77)[-6:] == b"scoped"
    bookie.fence_sync(5, OTHER_KEY, scope_id=77)
    assert bookie.is_fenced(5, 77) and not bookie.is_fenced(5)


def test_acknowledgements_of_one_batch_arrive_in_one_dispatch(tmp_path, make_conf):
    batches = []

    def dispatcher(run, batch):
        batches.append(len(batch))
        run(batch)

    b = Bookie(make_conf(tmp_path, journalMaxGroupWaitMSec=50), dispatcher=dispatcher)
    b.start()
    try:
        done = threading.Semaphore(0)
        for i in range(200):
            b.add_entry(entry(6, i), KEY, lambda error: done.release())
        for _ in range(200):
            assert done.acquire(timeout=30)
        assert sum(batches) >= 200 and len(batches) < 200
    finally:
        b.stop()


def test_entries_survive_a_clean_restart_and_a_restart_without_checkpoint(tmp_path, make_conf):
    conf = make_conf(tmp_path)
    b = Bookie(conf)
    b.start()
    for i in range(100):
        b.add_entry_sync(entry(7, i, bytes([i]) * (i + 1)), KEY)
    b.fence_sync(7, KEY)
    b.stop()
    b = Bookie(conf)
    b.start()
    assert [b.read_entry(7, i) for i in range(100)] == [entry(7, i, bytes([i]) * (i + 1)) for i in range(100)]
    assert b.is_fenced(7)
    b.stop()


def test_checkpoint_writes_last_mark_in_every_ledger_dir(tmp_path, make_conf):
    conf = make_conf(tmp_path, ledgerDirectories=[str(tmp_path / "l1"), str(tmp_path / "l2")])
    b = Bookie(conf)
    b.start()
    try:
        b.add_entry_sync(entry(8, 0), KEY)
        mark = b.checkpoint()
        for d in ("l1", "l2"):
            raw = (tmp_path / d / "current" / "lastMark").read_bytes()
            assert len(raw) == 16
            assert (int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")) == tuple(mark)
        assert tuple(logmark.read_last_mark([str(tmp_path / "l1")])) == tuple(mark)
    finally:
        b.stop()


def test_an_unknown_storage_class_is_refused_with_the_key_named(tmp_path, make_conf):
    with pytest.raises(ConfigurationError, match="ledgerStorageClass.*org.example.FancyLedgerStorage"):
        Bookie(make_conf(tmp_path, ledgerStorageClass="org.example.FancyLedgerStorage"))


def test_the_storage_class_selects_the_storage_implementation(tmp_path, make_conf, storage_class):
    b = Bookie(make_conf(tmp_path))
    try:
        expected = DbLedgerStorage if storage_class.endswith("DbLedgerStorage") else IndexedLedgerStorage
        assert type(b.storage) is expected
        if expected is IndexedLedgerStorage:
            assert (b.storage.write_cache_size == 0) and (
                (b.storage._memtable is not None) == storage_class.endswith("SortedLedgerStorage"))
    finally:
        b.storage.close()


def test_deleted_ledger_is_gone_for_reads_and_listing(bookie):
    for i in range(3):
        bookie.add_entry_sync(entry(11, i), KEY)
    bookie.checkpoint()
    bookie.add_entry_sync(entry(11, 3), KEY)
    bookie.delete_ledger(11)
    assert not bookie.ledger_exists(11)
    with pytest.raises(BKNoSuchLedgerExistsException):
        bookie.read_entry(11, 0)
    with pytest.raises(BKNoSuchLedgerExistsException):
        bookie.entries_of_ledger(11)


def test_unflushed_adds_and_fences_are_recovered_by_journal_replay(tmp_path, make_conf):
    """A bookie that dies with no checkpoint after its adds (storage never flushed) loses nothing."""
    conf = make_conf(tmp_path / "live", flushInterval=3_600_000)
    b = Bookie(conf)
    b.start()
    for i in range(300):
        b.add_entry_sync(entry(12, i, bytes([i % 251]) * (i % 37 + 1)), KEY)
    b.fence_sync(12, KEY)
    # A process crash: the files as they are now (page cache included), storage never flushed.
    b._stop_checkpointing.set()
    b._checkpoint_thread.join()
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    b.journal.stop()
    b.storage.close()
    conf = make_conf(tmp_path / "crashed", flushInterval=3_600_000)
    b = Bookie(conf)
    b.start()
    try:
        assert b.replayed_records >= 300
        assert [b.read_entry(12, i) for i in range(300)] == [
            entry(12, i, bytes([i % 251]) * (i % 37 + 1)) for i in range(300)]
        assert b.is_fenced(12)
        assert b.entries_of_ledger(12) == list(range(300))
    finally:
        b.stop()
