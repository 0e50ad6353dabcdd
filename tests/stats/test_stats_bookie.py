"""Java 4.16.7's `bookie_*` stats of a real Bookie (issue 25), on real files, through Java's text.

- with DbLedgerStorage, after adds (batched and single), a fence, a refused and a recovery add, reads from
  the read pool (disk, read-ahead cache, a high-priority one, a missing entry), reads from memory, a
  FORCE_LEDGER, checkpoints, a deleted ledger collected and a compaction: every `bookie_*` series of
  tests/vectors/java_metrics_4.16.7.txt (but SERVER_STATUS and the ZooKeeper session's, which the server
  owns) is served with Java's kind and label keys, and the values add up (bytes added, entries journaled,
  entries flushed, reads by thread pool, ledgers deleted);
- with the file-based storages, the storage-independent ones, the collector's under Java's `gc` scope;
- with two ledger dirs and two journal dirs, one set per directory and per journal, summing to the same;
- the write cache's throttled_write, waiting and non-waiting.
"""

from __future__ import annotations

import threading
import time

import pytest

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.write_cache import WriteCache
from bkfast.errors import BKLedgerFencedException, BKNoSuchEntryException, StorageBusyError, WriteCacheFullError
from bkfast.stats import OpStats, StatsRegistry, write_java_text
from tests.metrics_text import java_series, label_keys, parse, value

KEY = master_key(b"stats")
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
PAYLOAD = 1000
# The series of the vector this suite covers: the bookie's own, not the server's status or its ZooKeeper session.
NOT_HERE = ("bookie_SERVER_STATUS", "bookie_bookie_zk_", "bookie_bookie_watcher_state_")


def mine(name: str) -> bool:
    return name.startswith("bookie_") and not name.startswith(NOT_HERE)


class LedgerSet:
    """The metadata store in miniature: which (scope, ledger) pairs exist (MetadataDriver.ledgers_exist)."""

    def __init__(self, ledgers):
        self.ledgers = set(ledgers)

    def ledgers_exist(self, ledgers):
        return {x for x in ledgers if (x.scope_id, x.ledger_id) in self.ledgers}


def entry(ledger: int, entry_id: int, size: int = PAYLOAD) -> bytes:
    payload = bytes([(ledger * 7 + entry_id) % 251]) * size
    return encode_entry(ledger, entry_id, entry_id - 1, size * (entry_id + 1), payload, DigestType.CRC32C, b"")


def make_conf(tmp_path, storage=DB, journals=1, ledger_dirs=1, **overrides) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [str(tmp_path / f"journal{i}") for i in range(journals)],
        "ledgerDirectories": [str(tmp_path / f"ledgers{i}") for i in range(ledger_dirs)],
        "ledgerStorageClass": storage,
        "dbStorage_writeCacheMaxSizeMb": 1,
        "dbStorage_readAheadCacheMaxSizeMb": 4,
        "dbStorage_readAheadCacheBatchSize": 20,
        "logSizeLimit": 256 << 10,
        "flushInterval": 60_000,
        "gcWaitTime": 3_600_000,
        "majorCompactionThreshold": 1.0,
        **overrides,
    })


def add_batch(bookie: Bookie, entries, recovery: bool = False) -> list:
    """Bookie.add_entries (the server's path); the refused ones' errors once the rest is durable."""
    done = threading.Event()
    refused = bookie.add_entries([(e, KEY, recovery, recovery) for e in entries], lambda accepted, error: done.set())
    if len(refused) < len(entries):
        assert done.wait(10)
    return refused


def read_on(thread_name: str, read) -> object:
    """Run `read` on a thread with that name (the read pool's are read-<i>); its result or error."""
    out: list = []

    def run():
        try:
            out.append(read())
        except Exception as error:  # noqa: BLE001 - returned to the test
            out.append(error)

    t = threading.Thread(target=run, name=thread_name)
    t.start()
    t.join()
    return out[0]


def families_of(registry: StatsRegistry) -> dict[str, dict]:
    return parse(write_java_text(registry))


def missing_or_wrong(families: dict, ledger_dirs) -> tuple[list, list]:
    """The vector's series of this suite that `families` lacks, or serves with another kind or label keys."""
    missing, wrong = [], []
    for series in java_series():
        if not mine(series.name):
            continue
        name = series.name
        if name == "bookie_ledger_dir__data_bookkeeper_ledgers_usage":
            name = "bookie_ledger_dir_" + str(ledger_dirs[0]).replace("/", "_").replace("-", "_") + "_usage"
        family = families.get(name)
        if family is None:
            missing.append(name)
        elif family["kind"] != series.kind:
            wrong.append(f"{name}: {family['kind']}, Java: {series.kind}")
        elif series.labels not in label_keys(family):
            wrong.append(f"{name}: labels {label_keys(family)}, Java: {sorted(series.labels)}")
    return missing, wrong


def wait_for(what, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def labelled(families: dict, name: str, **labels) -> float:
    return value(families, name, **labels)


def test_db_storage_bookie_serves_every_bookie_series_of_java_with_values_that_add_up(tmp_path):
    registry = StatsRegistry(enabled=True)
    source = LedgerSet({(0, 1), (0, 2), (0, 4)})
    conf = make_conf(tmp_path)
    bookie = Bookie(conf, ledger_exists_source=source, stats=registry.logger())
    bookie.start()
    written = journaled = 0
    try:
        # ledger 1: 600 KB in batches (fills the 512 KB active half: a background flush), then flushed
        ledger1 = [entry(1, i) for i in range(600)]
        for k in range(0, 600, 50):
            assert add_batch(bookie, ledger1[k:k + 50]) == []
        bookie.checkpoint()
        # ledger 2: batches and single adds; fenced; a normal add refused, a recovery add taken
        ledger2 = [entry(2, i) for i in range(300)]
        assert add_batch(bookie, ledger2[:290]) == []
        for e in ledger2[290:299]:
            bookie.add_entry_sync(e, KEY)
        bookie.fence_sync(2, KEY)
        with pytest.raises(BKLedgerFencedException):
            bookie.add_entry_sync(ledger2[299], KEY)
        assert add_batch(bookie, ledger2[299:], recovery=True) == []
        written = sum(map(len, ledger1 + ledger2))
        journaled = 600 + 300 + 2 + 1          # entries, a master key per ledger, the fence
        bookie.checkpoint()
        forced = threading.Event()
        bookie.force_ledger(2, lambda error: forced.set())
        assert forced.wait(10)
        assert bookie.entries_of_ledger(2) == list(range(300))

        # reads on the read pool: from disk (with read-ahead), then from the read-ahead cache; a fencing
        # read on the high-priority pool; a missing entry
        assert read_on("read-0", lambda: bookie.read_entry(2, 10)) == ledger2[10]
        assert read_on("read-0", lambda: bookie.read_entry(2, 11)) == ledger2[11]
        assert read_on("read-1", lambda: bookie.read_entry(2, 200, high_priority=True)) == ledger2[200]
        assert isinstance(read_on("read-1", lambda: bookie.read_entry(2, 999, high_priority=True)),
                          BKNoSuchEntryException)
        # reads from memory (the server's fast path): ledger 4's entries are still in the write cache
        ledger4 = [entry(4, i, 100) for i in range(5)]
        assert add_batch(bookie, ledger4) == []
        written += sum(map(len, ledger4))
        journaled += 5 + 1
        assert [bookie.read_entry_cached(4, i) for i in range(5)] == ledger4
        bookie.count_reads_from_memory(5, 0.0005)

        # ledger 1 deleted from the metadata: the collector deletes it, removes its logs, compacts the mixed one
        source.ledgers.discard((0, 1))
        bookie.gc.run_once(force_major=True)
        families = families_of(registry)
        missing, wrong = missing_or_wrong(families, conf.get("ledgerDirectories"))
        assert not missing, missing
        assert not wrong, wrong
        check_bookie_values(families, written, journaled)
        check_journal_values(families, bookie, journaled)
        check_db_storage_values(families, bookie, tmp_path)
    finally:
        bookie.stop()


def check_bookie_values(families: dict, written: int, journaled: int) -> None:
    assert labelled(families, "bookie_WRITE_BYTES") == written
    assert labelled(families, "bookie_BOOKIE_ADD_ENTRY_count", success="true") == 600 + 299 + 5
    assert labelled(families, "bookie_BOOKIE_ADD_ENTRY_count", success="false") == 1        # the fenced one
    assert labelled(families, "bookie_BOOKIE_RECOVERY_ADD_ENTRY_count", success="true") == 1
    assert labelled(families, "bookie_BOOKIE_ADD_ENTRY_BYTES_count", success="true") == 600 + 300 + 5
    assert labelled(families, "bookie_BOOKIE_ADD_ENTRY_BYTES_sum", success="true") == written
    assert labelled(families, "bookie_BOOKIE_ADD_ENTRY_sum", success="true") > 0
    assert labelled(families, "bookie_BOOKIE_READ_ENTRY_count", success="true") == 3
    assert labelled(families, "bookie_BOOKIE_READ_ENTRY_count", success="false") == 1
    assert labelled(families, "bookie_READ_BYTES") == 3 * len(entry(2, 0))
    assert labelled(families, "bookie_BOOKIE_READ_ENTRY_BYTES_sum", success="true") == 3 * len(entry(2, 0))
    assert labelled(families, "bookie_BOOKIE_FORCE_LEDGER") == 1
    assert labelled(families, "bookie_BOOKIE_GET_LIST_OF_ENTRIES_OF_LEDGER_count", success="true") == 1
    assert labelled(families, "bookie_JOURNAL_DIRS") == 1
    assert labelled(families, "bookie_JOURNAL_QUEUE_MAX_SIZE") == 10000
    assert labelled(families, "bookie_ledger_num_dirs") == 1
    assert labelled(families, "bookie_ledger_writable_dirs") == 1
    usage = [f for f in families if f.startswith("bookie_ledger_dir_") and f.endswith("_usage")]
    assert len(usage) == 1 and 0 < labelled(families, usage[0]) <= 100


def check_journal_values(families: dict, bookie: Bookie, journaled: int) -> None:
    journal = bookie.journal[0]
    index = {"journalIndex": "0"}
    assert journal.records_written == journaled
    assert labelled(families, "bookie_journal_JOURNAL_ADD_ENTRY_count", success="true", **index) == journaled
    assert labelled(families, "bookie_journal_JOURNAL_QUEUE_LATENCY_count", success="true", **index) == journaled
    assert labelled(families, "bookie_journal_JOURNAL_QUEUE_SIZE", **index) == 0
    assert labelled(families, "bookie_journal_JOURNAL_FORCE_LEDGER_count", success="true", **index) == 1
    record_bytes = labelled(families, "bookie_journal_JOURNAL_WRITE_BYTES", **index)
    assert record_bytes > labelled(families, "bookie_WRITE_BYTES")          # and the meta records
    assert labelled(families, "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES_sum", success="true",
                    **index) == record_bytes + 4 * journaled
    batches = labelled(families, "bookie_journal_JOURNAL_FLUSH_LATENCY_count", success="true", **index)
    assert batches == journal.batch_count
    assert labelled(families, "bookie_journal_JOURNAL_PROCESS_TIME_LATENCY_count", success="true", **index) == batches
    assert labelled(families, "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES_sum", success="true",
                    **index) == journaled                                  # journalSyncData: all wait for the sync
    closed = sum(labelled(families, f"bookie_journal_JOURNAL_NUM_FLUSH_{why}", **index)
                 for why in ("MAX_WAIT", "MAX_OUTSTANDING_BYTES", "EMPTY_QUEUE"))
    assert closed == batches
    assert labelled(families, "bookie_journal_JOURNAL_SYNC_count", success="true", **index) == journal.sync_count
    assert labelled(families, "bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_TOTAL_sum", success="true",
                    **index) == journaled
    assert labelled(families, "bookie_journal_JOURNAL_CREATION_LATENCY_count", success="true", **index) == 1
    assert labelled(families, "bookie_journal_callback_time", threadPool="ForceWriteThread", **index) > 0
    assert labelled(families, "bookie_journal_JOURNAL_MEMORY_USED", **index) == 0


def check_db_storage_values(families: dict, bookie: Bookie, tmp_path) -> None:
    current = str(tmp_path / "ledgers0" / "current")
    d = {"indexDir": current, "ledgerDir": current}
    pool = dict(d, thread="0", threadPool="BookieReadThreadPool")
    high = dict(d, thread="1", threadPool="BookieHighPriorityThread")
    assert labelled(families, "bookie_add_entry_count", success="true", threadPool="BookieWriteThreadPool",
                    **d) == 600 + 299 + 5
    assert labelled(families, "bookie_add_entry_count", success="true", threadPool="BookieHighPriorityThread",
                    **d) == 1
    # every entry added was flushed once (ledger 4's by the collector's flush); each flush wrote what it says
    assert labelled(families, "bookie_flush_size_sum", success="true", **d) == labelled(families, "bookie_WRITE_BYTES")
    flushes = labelled(families, "bookie_flush_count", success="true", **d)
    assert flushes >= 4                                        # background (cache full), 2 checkpoints, the GC's
    for part in ("flush_entrylog", "flush_locations_index"):
        assert labelled(families, f"bookie_{part}_count", success="true", **d) >= flushes
    assert labelled(families, "bookie_flush_ledger_index_count", success="true", **d) == flushes
    assert labelled(families, "bookie_db_storage_thread_time", threadPool="db-storage", **d) > 0
    assert labelled(families, "bookie_write_cache_max_size") == 1 << 20
    assert labelled(families, "bookie_readahead_max_batch_size") == 20
    assert labelled(families, "bookie_write_cache_count", **d) == 0
    # the pool's reads: entry 10 from disk (read-ahead of 20), 11 from the read-ahead cache; 200 from disk
    # on the high-priority pool; 999 missing; ledger 4's 5 from memory on the caller ("?") thread
    assert labelled(families, "bookie_read_entry_count", success="true", **pool) == 2
    assert labelled(families, "bookie_read_entry_count", success="true", **high) == 1
    assert labelled(families, "bookie_read_entry_count", success="false", **high) == 1
    assert labelled(families, "bookie_read_entry_count", success="true", thread="?", threadPool="?", **d) == 5
    assert labelled(families, "bookie_write_cache_hits", **d) == 5
    assert labelled(families, "bookie_write_cache_misses", **d) == 4
    assert labelled(families, "bookie_read_cache_hits", **d) == 1
    assert labelled(families, "bookie_read_cache_misses", **d) == 3
    assert labelled(families, "bookie_lookup_entry_location_count", success="true", **d) >= 2
    assert labelled(families, "bookie_lookup_entry_location_count", success="false", **d) >= 1
    assert labelled(families, "bookie_readahead_batch_count_count", success="true", **d) == 2
    assert labelled(families, "bookie_readahead_batch_count_sum", success="true", **d) == 40
    assert labelled(families, "bookie_readahead_batch_size_sum", success="true", **d) == 40 * len(entry(2, 0))
    for counter in ("read_locations_index_time", "read_entrylog_time", "readahead_time"):
        assert labelled(families, f"bookie_{counter}", **pool) > 0
        assert labelled(families, f"bookie_{counter}", **high) > 0
    # the collector: ledger 1 deleted, its logs removed or compacted away; ledgers 2 and 4 left
    assert labelled(families, "bookie_DELETED_LEDGER_TOTAL", **d) == 1
    assert labelled(families, "bookie_RECLAIMED_DELETION_SPACE_BYTES", **d) > 256 << 10
    assert labelled(families, "bookie_RECLAIMED_COMPACTION_SPACE_BYTES", **d) > 0
    assert labelled(families, "bookie_MAJOR_COMPACTION_TOTAL", **d) == 1
    assert labelled(families, "bookie_MINOR_COMPACTION_TOTAL", **d) == 0
    assert labelled(families, "bookie_THREAD_RUNTIME_count", success="true", **d) == 1
    assert labelled(families, "bookie_ACTIVE_LEDGER_TOTAL", **d) == 2
    assert labelled(families, "bookie_ACTIVE_ENTRY_LOG_TOTAL", **d) >= 1
    assert labelled(families, "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES", **d) > 0
    assert labelled(families, "bookie_ledgers_count", **d) == 2
    assert labelled(families, "bookie_entries_count", **d) > 0        # RocksDB's estimate of ledgers 2 and 4's


@pytest.mark.parametrize("storage", ["org.apache.bookkeeper.bookie.SortedLedgerStorage",
                                     "org.apache.bookkeeper.bookie.InterleavedLedgerStorage"])
def test_file_based_storage_serves_the_storage_independent_series(tmp_path, storage):
    registry = StatsRegistry(enabled=True)
    source = LedgerSet({(0, 1), (0, 2)})
    conf = make_conf(tmp_path, storage)
    bookie = Bookie(conf, ledger_exists_source=source, stats=registry.logger())
    bookie.start()
    try:
        entries = [entry(1, i) for i in range(300)] + [entry(2, i) for i in range(10)]
        assert add_batch(bookie, entries) == []
        bookie.checkpoint()
        assert read_on("read-0", lambda: bookie.read_entry(2, 3)) == entries[303]
        source.ledgers.discard((0, 1))
        bookie.gc.run_once(force_major=True)
        families = families_of(registry)
    finally:
        bookie.stop()
    db_only = set()
    for series in java_series():
        if not mine(series.name):
            continue
        gc_name = "bookie_gc_" + series.name[len("bookie_"):]
        if series.labels >= {"indexDir", "ledgerDir"} and gc_name in families:
            # the collector's: Java's file-based storages record them under `gc`, without directory labels
            assert families[gc_name]["kind"] == series.kind and label_keys(families[gc_name]) == {frozenset()}
        elif series.labels >= {"indexDir", "ledgerDir"} or series.name in (
                "bookie_write_cache_max_size", "bookie_readahead_max_batch_size"):
            db_only.add(series.name)
            assert series.name not in families
        elif not series.name.startswith("bookie_ledger_dir_"):
            assert families[series.name]["kind"] == series.kind, series.name
    assert "bookie_read_entry" in db_only and "bookie_THREAD_RUNTIME" not in db_only
    assert value(families, "bookie_WRITE_BYTES") == sum(map(len, entries))
    assert value(families, "bookie_journal_JOURNAL_ADD_ENTRY_count", success="true") == 312
    assert value(families, "bookie_gc_DELETED_LEDGER_TOTAL") == 1
    assert value(families, "bookie_gc_MAJOR_COMPACTION_TOTAL") == 1
    assert value(families, "bookie_gc_ACTIVE_LEDGER_TOTAL") == 1
    assert value(families, "bookie_gc_RECLAIMED_DELETION_SPACE_BYTES") > 200 << 10   # a whole log of ledger 1
    assert value(families, "bookie_STORAGE_GET_OFFSET_count", success="true") == 1
    assert value(families, "bookie_STORAGE_GET_ENTRY_count", success="true") == 1


def test_two_ledger_dirs_and_two_journals_keep_a_set_each_that_sums_to_the_bookie(tmp_path):
    registry = StatsRegistry(enabled=True)
    conf = make_conf(tmp_path, journals=2, ledger_dirs=2, dbStorage_writeCacheMaxSizeMb=16)
    bookie = Bookie(conf, stats=registry.logger())
    bookie.start()
    try:
        entries = [entry(ledger, i, 200) for ledger in (10, 11, 12) for i in range(40)]
        assert add_batch(bookie, entries) == []
        bookie.checkpoint()
        for ledger in (10, 11, 12):
            assert read_on("read-3", lambda ledger=ledger: bookie.read_entry(ledger, 5)) == \
                entry(ledger, 5, 200)
        families = families_of(registry)
    finally:
        bookie.stop()
    assert value(families, "bookie_WRITE_BYTES") == sum(map(len, entries))
    # ledger mod 2: 10 and 12 to journal 0, 11 to journal 1 (each ledger's master key record too)
    assert value(families, "bookie_journal_JOURNAL_ADD_ENTRY_count", success="true", journalIndex="0") == 82
    assert value(families, "bookie_journal_JOURNAL_ADD_ENTRY_count", success="true", journalIndex="1") == 41
    assert value(families, "bookie_JOURNAL_DIRS") == 2
    assert value(families, "bookie_ledger_num_dirs") == 2
    dirs = [str(tmp_path / f"ledgers{i}" / "current") for i in range(2)]
    per_dir = [value(families, "bookie_add_entry_count", success="true", indexDir=d, ledgerDir=d) for d in dirs]
    assert sorted(per_dir) == [40, 80]                     # ledger mod 2 again: 10 and 12, then 11
    assert sum(value(families, "bookie_flush_size_sum", success="true", indexDir=d, ledgerDir=d)
               for d in dirs) == sum(map(len, entries))
    assert value(families, "bookie_read_entry_count", success="true", threadPool="BookieReadThreadPool",
                 thread="3") == 3


def test_the_checkpoint_thread_counts_its_time(tmp_path):
    registry = StatsRegistry(enabled=True)
    bookie = Bookie(make_conf(tmp_path, flushInterval=50), stats=registry.logger())
    bookie.start()
    try:
        assert add_batch(bookie, [entry(1, i) for i in range(10)]) == []
        wait_for("the checkpoint thread's time", lambda: value(families_of(registry), "bookie_sync_thread_time",
                                                                thread="?", threadPool="?") > 0)
    finally:
        bookie.stop()


def test_throttled_write_counts_adds_that_found_the_write_cache_full():
    stats = OpStats()
    cache = WriteCache(4096, 0.05, lambda: None)
    cache.throttle_stats = stats
    cache.put(1, 0, b"x" * 1500)
    with pytest.raises(WriteCacheFullError):                  # waits 50 ms for a flush that never comes
        cache.put(1, 1, b"x" * 1500)
    assert (stats.count(True), stats.count(False)) == (0, 1) and stats.total(False) >= 50
    cache.room_listener = lambda: None                          # the server's non-waiting adds
    for i in (2, 3):
        with pytest.raises(StorageBusyError):
            cache.put(1, i, b"x" * 1500)
    time.sleep(0.01)
    cache.begin_flush()                                         # the swap makes room: both counted, waited
    assert stats.count(True) == 2 and stats.total(True) >= 2 * 10


def test_a_bookie_without_stats_records_nothing(tmp_path):
    registry = StatsRegistry(enabled=False)
    bookie = Bookie(make_conf(tmp_path), stats=registry.logger())
    bookie.start()
    try:
        assert add_batch(bookie, [entry(1, i) for i in range(10)]) == []
        bookie.checkpoint()
        assert bookie.read_entry(1, 3) == entry(1, 3)
    finally:
        bookie.stop()
    assert registry.families() == [] and write_java_text(registry) == ""
