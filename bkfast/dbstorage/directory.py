"""DbLedgerStorage of one ledger directory (Java's SingleDirectoryDbLedgerStorage).

Owns, for one ledger dir and its index dir: the entry logger, the write cache, the read-ahead cache,
the location index and the ledger metadata index, the flush (write cache -> entry log -> fsync ->
index commit) and the background flush thread, and the read path

    write cache (active, flushing) -> read-ahead cache -> location index -> entry log pread

with read-ahead on a miss: the next `dbStorage_readAheadCacheBatchSize` entries of the same ledger that
follow the entry in its log (a flush writes each ledger contiguously) are cached.

Flush ordering (the durability contract): entries are appended to the entry log, the entry log is
fsynced (EntryLogger.flush), and only THEN are their locations committed to RocksDB (one synced batch
per store). An index entry therefore never points at data that a crash could lose. The ledger metadata
store is synced at the end of every flush, so after flush() returns the Bookie may move its lastMark.

The flush thread: when an add finds the active half of the write cache full it wakes this thread,
which runs flush() (swapping the halves first, so adds continue at once into the empty half). Adds
block only while both halves are full, for at most `dbStorage_maxThrottleTimeMs` (default 10000, as in
Java), then fail with WriteCacheFullError. Periodic checkpoints are the Bookie's job (it calls flush()).

Must never: hold the flush lock while waiting for cache room, commit locations before the entries are
durable, or verify digests (entries are stored and returned verbatim).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from pathlib import Path

from bkfast._stats import now_ns
from bkfast._writecache import PUT_ENTRIES_DONE, MemoryEntries, ReadCacheRing
from bkfast.codec import peek_entry_ids
from bkfast.dbstorage._flushslices import FlushSlices
from bkfast.dbstorage.flush_writer import (  # noqa: F401  (FLUSH_*: re-exported, tests and benchmarks use them)
    FLUSH_PACE_LEAD,
    FLUSH_PACE_MIN_BYTES_PER_S,
    FLUSH_PACE_SLEEP_S,
    FLUSH_SLICE_BYTES,
    FLUSH_SLICE_ENTRIES,
    Pacer,
    SliceWriter,
)
from bkfast.dbstorage.index import LocationBatch, LocationIndex, qualified_key
from bkfast.dbstorage.ledger_index import LedgerMetadataIndex
from bkfast.dbstorage.settings import DbStorageSettings
from bkfast.dbstorage.stats import DbDirStats
from bkfast.dbstorage.write_cache import WriteCache, WriteCacheHalf
from bkfast.errors import (
    BKIllegalOpException,
    BKNoSuchLedgerExistsException,
    StorageCorruptionError,
    ledger_name,
    missing_entry_error,
)
from bkfast.stats import StatsLogger, StatsRegistry
from bkfast.storage.entry_header import entry_lac
from bkfast.storage.entrylogger import EntryLogger
from bkfast.storage.thread_stats import DB_STORAGE_POOL, register_thread
from bkfast.threads import FLUSH, NamedThread

__all__ = ["SingleDirectoryDbLedgerStorage"]

log = logging.getLogger(__name__)

_READ_AHEAD_MAX_BYTES = 4 << 20  # cap per miss when dbStorage_readAheadCacheBatchBytesSize is off
_MAX_RUN_CONTINUATIONS = 4096   # ledgers whose next read-ahead start is remembered (cleared when full)
FULL_DISK_MAX_WAIT_S = 0.5   # an add's wait for cache room while the index is read-only (full disk)


class SingleDirectoryDbLedgerStorage:
    """Entries and ledger metadata of the ledgers a DbLedgerStorage routes to one directory."""

    def __init__(self, ledger_dir, index_dir, settings: DbStorageSettings, entry_logger: EntryLogger | None = None, *,
                 write_cache_bytes: int, read_cache_bytes: int, stats: StatsLogger | None = None,
                 dir_index: int = 0):
        """`stats`: the `bookie` scope logger; this directory's stats carry its indexDir and ledgerDir.
        `dir_index`: its place in ledgerDirectories (its flush thread is flush-<dir_index>)."""
        self.ledger_dir = Path(ledger_dir)
        self.index_dir = Path(index_dir)
        current = self.index_dir / "current"
        current.mkdir(parents=True, exist_ok=True)
        self._owns_logger = entry_logger is None
        self._entry_logger = (entry_logger if entry_logger is not None
                              else EntryLogger([self.ledger_dir], settings.entry_logger))
        self._locations = LocationIndex(current, settings.block_cache_bytes)
        self._ledgers = LedgerMetadataIndex(current)
        self._flush_event = threading.Event()
        max_wait_s = settings.max_throttle_s
        self._write_cache = WriteCache(write_cache_bytes, max_wait_s, self._flush_event.set)
        self._max_wait_s = max_wait_s
        if self.read_only:
            # Opened on a full disk: no flush can make room, so an add finding the cache full fails after
            # the swap of the halves instead of waiting dbStorage_maxThrottleTimeMs (replay stops there).
            self._write_cache.max_wait_s = min(max_wait_s, FULL_DISK_MAX_WAIT_S)
        self._read_cache = ReadCacheRing(read_cache_bytes)
        self._read_ahead_count = settings.read_ahead_batch_entries
        batch_bytes = settings.read_ahead_batch_bytes
        self._read_ahead_bytes = batch_bytes if batch_bytes > 0 else _READ_AHEAD_MAX_BYTES
        self._read_ahead_on = self._read_cache.enabled and self._read_ahead_count > 0
        # ledger key -> (entry id, location) of the entry right after the last full read-ahead run: a
        # sequential reader's next miss is read from there without a location-index lookup (see get_entry).
        self._run_continuations: dict[int, tuple[int, int, int]] = {}
        self._flush_lock = threading.Lock()
        logger = stats if stats is not None else StatsRegistry(enabled=False).logger()
        self.stats_logger = logger.scope_label("indexDir", str(current)).scope_label(
            "ledgerDir", str(self.ledger_dir / "current"))
        self._stats = DbDirStats(self.stats_logger, self._write_cache, self._read_cache, self._locations,
                                 self._ledgers)
        self._locations.lookup_stats = self._stats.lookup_entry_location
        self._write_cache.throttle_stats = self._stats.throttled_write
        # Counted on the hot paths with one C call each (see bkfast.dbstorage.stats).
        self._pending_adds, self._pending_high_adds = self._stats.pending_adds, self._stats.pending_high_adds
        self._memory_write_hits = self._stats.memory_write_cache_hits
        self._memory_read_hits = self._stats.memory_read_cache_hits
        # Test hooks (0 in production): make entry-log reads / write-cache flushes slow on purpose, so
        # tests can show what a slow disk does to the rest of the bookie.
        self._test_read_delay_s = settings.test_read_delay_s
        self._test_flush_delay_s = settings.test_flush_delay_s
        self._closed = False
        self.last_flush_error: BaseException | None = None
        self.continuation_reads = 0  # cache misses read where the last read-ahead run ended (no index lookup)
        self.flush_slices = 0  # entry-logger calls (and GIL hand-overs) of all flushes so far
        self.flushed_entries = 0  # entries written to the entry log by all flushes so far
        self.error_listener = None  # callable(error) told about background flush failures (the Bookie's)
        self._flush_thread = NamedThread(self._flush_loop, f"{FLUSH}-{dir_index}")
        self._flush_thread.start()

    # -- ledger metadata (same signatures as DbLedgerStorage, which may hand these out directly) -------

    def set_master_key(self, ledger_id: int, key: bytes, scope_id: int = 0) -> None:
        self._ledgers.set_master_key(scope_id, ledger_id, key)

    def get_master_key(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        data = self._ledgers.get(scope_id, ledger_id)
        return None if data is None else data.masterKey

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self._ledgers.exists(scope_id, ledger_id)

    def set_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self._ledgers.set_fenced(scope_id, ledger_id)

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        data = self._ledgers.get(scope_id, ledger_id)
        if data is None:
            raise BKNoSuchLedgerExistsException(f"No such ledger exists: {ledger_name(scope_id, ledger_id)}")
        return data.fenced

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, scope_id: int = 0) -> None:
        self._ledgers.set_explicit_lac(scope_id, ledger_id, lac_buffer)

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        data = self._ledgers.get(scope_id, ledger_id)
        if data is None:
            raise BKNoSuchLedgerExistsException(f"No such ledger exists: {ledger_name(scope_id, ledger_id)}")
        return data.explicitLac if data.HasField("explicitLac") else None

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        return self._ledgers.list(scope_id)

    # -- entries -----------------------------------------------------------------------------------

    def add_entry(self, entry_bytes, high_priority: bool = False) -> tuple[int, int, int]:
        """Store an entry as received; its ids come from its own header. `high_priority` (a recovery
        add): its add_entry stat is Java's BookieHighPriorityThread's, not BookieWriteThreadPool's."""
        _, scope_id, ledger_id, entry_id = peek_entry_ids(entry_bytes)
        self.put_entry(scope_id, ledger_id, entry_id, entry_bytes, high_priority)
        return scope_id, ledger_id, entry_id

    def add_entries(self, entries: list[bytes], high_priority: list[bool]) -> tuple[int, BaseException | None]:
        """LedgerStorage.add_entries: runs of entries that fit the active half in one C call each
        (bkfast._writecache.put_entries); the entry that does not fit (or is malformed) goes through
        add_entry, which waits for room, refuses it (StorageBusyError with a room listener) or raises what
        is wrong with it. Counted as add_entry counts, one call per run."""
        if self._closed:
            raise ValueError("the ledger storage is closed")
        n, start = len(entries), 0
        while start < n:
            end, why = self._write_cache.put_entries(entries, start)
            high = sum(high_priority[start:end])
            self._pending_high_adds.add(high)
            self._pending_adds.add(end - start - high)
            if why == PUT_ENTRIES_DONE:
                break
            try:
                self.add_entry(entries[end], high_priority[end])
            except Exception as error:
                return end, error
            start = end + 1
        return n, None

    def put_entry(self, scope_id: int, ledger_id: int, entry_id: int, entry_bytes,
                  high_priority: bool = False) -> None:
        """add_entry with the ids already peeked (the multi-directory router has them). The add is
        counted (one C call); record_adds gives the count its latency."""
        if ledger_id < 0 or entry_id < 0:
            raise BKIllegalOpException(f"entry {entry_id} of ledger {ledger_id}: ids must not be negative")
        if self._closed:
            raise ValueError("the ledger storage is closed")
        data = entry_bytes if type(entry_bytes) is bytes else bytes(entry_bytes)
        self._write_cache.put(ledger_id if not scope_id else (scope_id << 64) | ledger_id, entry_id, data)
        (self._pending_high_adds if high_priority else self._pending_adds).inc()

    def hold_write_half(self) -> WriteCacheHalf:
        """AddRunDirectory.hold_write_half: the active half, locked against a swap until release."""
        if self._closed:
            raise ValueError("the ledger storage is closed")
        return self._write_cache.hold_active()

    def release_write_half(self, stored: int) -> None:
        """AddRunDirectory.release_write_half: `stored` adds counted as add_entry counts them."""
        self._pending_adds.add(stored)
        self._write_cache.release_active()

    @property
    def write_half_limit(self) -> int:
        return self._write_cache.half_size

    def record_adds(self, nanos_each: int) -> None:
        """The adds stored since the last call took `nanos_each` each (add_entry stats; the Bookie's)."""
        self._stats.record_adds(nanos_each)

    def record_memory_reads(self, nanos_each: int) -> None:
        """The get_entry_cached hits since the last call took `nanos_each` each (read_entry, cache hits)."""
        self._stats.record_memory_reads(nanos_each)

    def _missing(self, scope_id: int, ledger_id: int, entry_id: int) -> Exception:
        return missing_entry_error(self._ledgers.exists(scope_id, ledger_id), scope_id, ledger_id, entry_id)

    def get_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry from the write cache or the read-ahead cache; None when only the disk has it (or
        nobody does). No I/O and no RocksDB lookup: safe on the reactor thread."""
        if entry_id < 0:
            return None
        key = ledger_id if not scope_id else (scope_id << 64) | ledger_id  # qualified_key, inlined
        data = self._write_cache.get(key, entry_id)
        if data is not None:
            self._memory_write_hits.inc()
            return data
        data = self._read_cache.get(key, entry_id)
        if data is not None:
            self._memory_read_hits.inc()
        return data

    def publish_memory(self, memory: MemoryEntries, directory: int) -> None:
        """Keep `memory` (the reactor's C view of what is in memory) told which halves this directory's
        write cache and read-ahead cache use, and which counters its hits go to; `directory` is this
        directory's position in DbLedgerStorage's routing."""
        memory.set_hit_counters(directory, self._memory_write_hits, self._memory_read_hits)
        self._write_cache.on_change = lambda halves: memory.set_write_halves(directory, halves)
        self._read_cache.on_change = lambda halves: memory.set_read_halves(directory, halves)
        memory.set_write_halves(directory, self._write_cache.halves)
        memory.set_read_halves(directory, self._read_cache.halves)

    def set_room_listener(self, listener) -> None:
        """Non-waiting adds (see WriteCache.room_listener)."""
        self._write_cache.room_listener = listener

    def get_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        if entry_id < 0:
            return self._get_last_entry(scope_id, ledger_id)
        stats = self._stats
        reads = stats.reads.get()
        t0 = now_ns()
        key = ledger_id if not scope_id else (scope_id << 64) | ledger_id  # qualified_key, inlined
        try:
            data = self._write_cache.get(key, entry_id)
            if data is not None:
                stats.write_cache_hits.inc()
            else:
                stats.write_cache_misses.inc()
                data = self._read_cache.get(key, entry_id)
                if data is not None:
                    stats.read_cache_hits.inc()
                else:
                    stats.read_cache_misses.inc()
                    data = self._read_from_disk(key, scope_id, ledger_id, entry_id, reads)
        except BaseException:
            reads.read_entry.fail_since(t0)
            raise
        reads.read_entry.ok_since(t0)
        return data

    def _read_from_disk(self, key: int, scope_id: int, ledger_id: int, entry_id: int, reads) -> bytes:
        """A read neither cache answered: a run continuation, or the location index and the entry log."""
        continuation = self._run_continuations.pop(key, None)
        if continuation is not None and continuation[0] == entry_id:
            # A catch-up reader's next entry, where the last read-ahead run ended. Reading it there skips
            # the index lookup, which on a cold index is a disk read done while holding the GIL (rocksdict
            # does not release it): measured as the writers' p99 under a catch-up reader. The entry is
            # read as the head of the next run (one direct read for both, no page-cache read of its
            # own); its ids are checked, and anything else there (a log that rolled or was compacted
            # away) falls back to the index.
            if self._test_read_delay_s:
                time.sleep(self._test_read_delay_s)
            data = self._read_continuation(key, scope_id, ledger_id, entry_id, continuation)
            if data is not None:
                self.continuation_reads += 1
                return data
        t0 = now_ns()
        location = self._locations.get(scope_id, ledger_id, entry_id)
        reads.locations_time.add(now_ns() - t0)
        if location is None:
            # The entry may have left the write cache for the index between the two lookups.
            data = self._write_cache.get(key, entry_id)
            if data is not None:
                return data
            raise self._missing(scope_id, ledger_id, entry_id)
        if self._test_read_delay_s:
            time.sleep(self._test_read_delay_s)
        t0 = now_ns()
        try:
            data = self._entry_logger.read_entry(ledger_id, entry_id, location, scope_id)
        except (StorageCorruptionError, ValueError, OSError):
            # Compaction may have moved the entry and removed its old log between the index lookup and
            # the read: read again from where the index points now, and fail only if it did not move.
            moved = self._locations.get(scope_id, ledger_id, entry_id)
            if moved is None or moved == location:
                raise
            location = moved
            data = self._entry_logger.read_entry(ledger_id, entry_id, location, scope_id)
        finally:
            reads.entrylog_time.add(now_ns() - t0)
        if self._read_ahead_on:
            # The entry itself too (Java caches only the ones after it): a reader coming back to where it
            # started would otherwise miss here again, and a miss sends its ledger's later reads through
            # the read pool until the pool has answered it (answers of a ledger keep their order).
            self._read_cache.put(key, entry_id, data)
            self._read_ahead(key, scope_id, ledger_id, location + len(data) + 4, len(data))
        return data

    def _read_continuation(self, key: int, scope_id: int, ledger_id: int, entry_id: int,
                           continuation: tuple[int, int, int]) -> bytes | None:
        """The entry at a run continuation, or None (then the index is asked)."""
        _, location, last_size = continuation
        if self._read_ahead_on:
            run = self._read_ahead(key, scope_id, ledger_id, location, last_size, with_first=True)
            if run and run[0][0] == entry_id:
                return run[0][2]
        try:
            data = self._entry_logger.read_entry(ledger_id, entry_id, location, scope_id)
        except (StorageCorruptionError, ValueError, OSError):
            return None
        if self._read_ahead_on:
            self._read_ahead(key, scope_id, ledger_id, location + len(data) + 4, len(data))
        return data

    def _read_ahead(self, key: int, scope_id: int, ledger_id: int, next_location: int, size: int,
                    with_first: bool = False) -> list | None:
        """Read the run from next_location into the read-ahead cache and return it (None on failure).
        `with_first`: the entry at next_location is being asked for, one more than the batch size."""
        count = self._read_ahead_count + (1 if with_first else 0)
        # Bytes to read: as much as batch-size entries like this one would take, within the byte cap.
        budget = min(self._read_ahead_bytes, count * (size + 4))
        t0 = now_ns()
        try:
            run = self._entry_logger.read_run(scope_id, ledger_id, next_location, count, budget)
        except Exception as e:  # read-ahead is an optimisation: the entry asked for is already read
            log.debug("read-ahead after %s failed: %s", ledger_name(scope_id, ledger_id), e)
            run = None
        self._read_ahead_done(run, t0)
        if run:
            self._read_cache.put_run(key, run)
            last_entry, last_location, last_data = run[-1]
            consumed = sum(len(data) + 4 for _, _, data in run)
            if len(run) >= count or consumed + len(last_data) + 4 > budget:
                # The run stopped at its budget, not at another ledger's entry: the next one is likely
                # this ledger's next entry.
                continuations = self._run_continuations
                if len(continuations) >= _MAX_RUN_CONTINUATIONS:
                    continuations.clear()
                continuations[key] = (last_entry + 1, last_location + len(last_data) + 4, len(last_data))
        return run

    def _read_ahead_done(self, run: list | None, t0: int) -> None:
        """Java's readahead stats of one run: entries, bytes (entry bytes, no length fields) and time."""
        stats = self._stats
        stats.reads.get().readahead_time.add(now_ns() - t0)
        stats.readahead_batch_count.ok_value(len(run) if run else 0)
        stats.readahead_batch_size.ok_value(sum(len(data) for _, _, data in run) if run else 0)

    def get_last_entry_id(self, ledger_id: int, scope_id: int = 0) -> int:
        """Highest entry id stored for the ledger (write cache or index), -1 when none."""
        cached = self._write_cache.last_entry(qualified_key(scope_id, ledger_id))
        indexed = self._locations.last_entry(scope_id, ledger_id)
        return max(cached, indexed[0] if indexed is not None else -1)

    def _get_last_entry(self, scope_id: int, ledger_id: int) -> bytes:
        last = self.get_last_entry_id(ledger_id, scope_id)
        if last < 0:
            raise self._missing(scope_id, ledger_id, -1)
        return self.get_entry(ledger_id, last, scope_id)

    def get_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        data = self.get_entry(ledger_id, -1, scope_id)
        return entry_lac(data)

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        ids = set(self._locations.entries(scope_id, ledger_id))
        ids |= self._write_cache.entry_ids(qualified_key(scope_id, ledger_id))
        return sorted(ids)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        key = qualified_key(scope_id, ledger_id)
        # Under the flush lock, so a flush in progress cannot re-insert the ledger's locations after
        # the deleteRange. The entry-log bytes are reclaimed later by garbage collection.
        with self._flush_lock:
            self._write_cache.delete_ledger(key)
            self._read_cache.delete_ledger(key)
            self._run_continuations.pop(key, None)
            self._locations.delete_ledger(scope_id, ledger_id)
            self._ledgers.delete(scope_id, ledger_id)

    # -- garbage collection and compaction (the storage contract of bkfast.bookie.gc) ---------------

    @property
    def entry_logger(self) -> EntryLogger:
        return self._entry_logger

    def all_ledgers(self) -> list[tuple[int, int]]:
        """(scope_id, ledger_id) of every ledger with metadata in this directory."""
        return self._ledgers.keys()

    def entry_location(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None:
        """Where the index says the entry is (None: not indexed, e.g. deleted or still in the write cache)."""
        return self._locations.get(scope_id, ledger_id, entry_id)

    def update_entry_locations(self, updates) -> int:
        """Point entries at their compacted copies, in one synced batch per store; return how many.

        Runs under the flush lock, so it cannot race a ledger deletion: an entry that is no longer
        indexed (its ledger was deleted meanwhile) is skipped instead of being brought back.
        The caller made the copies durable (EntryLogger.flush) before calling this.
        """
        with self._flush_lock:
            batch = LocationBatch()
            get = self._locations.get
            for scope_id, ledger_id, entry_id, location in updates:
                if get(scope_id, ledger_id, entry_id) is None:
                    continue
                batch.add(scope_id, ledger_id, (entry_id,), (location,))
            if batch.count:
                self._locations.commit(batch)
            return batch.count

    # -- flushing ----------------------------------------------------------------------------------

    def flush(self, paced: bool = False) -> None:
        """Make every entry added before the call durable and indexed; sync ledger metadata.

        `paced`: while adds keep arriving, write no faster than needed to stay ahead of them (see
        FLUSH_PACE_LEAD); the durability contract is the same, the flush only takes longer. A flush
        that wrote entries is one `flush` event (and `flush_size`, the entry bytes written), as Java's."""
        stats = self._stats
        with self._flush_lock:
            t0 = now_ns()
            flushed = -1                # entry bytes written; -1: no half had entries
            try:
                while True:
                    half, retry = self._write_cache.begin_flush()
                    times = None
                    if half.count:
                        flushed = max(flushed, 0)
                        times = self._flush_half(half, retry, paced)
                        flushed += times[0]
                    self._write_cache.end_flush()
                    if times is not None and log.isEnabledFor(logging.DEBUG):
                        self._log_flush(half, *times[1:])
                    if not retry:
                        break
                t_index = now_ns()
                self._ledgers.sync()
            except BaseException:
                if flushed >= 0:
                    stats.flush.fail_since(t0)
                raise
            if flushed >= 0:
                stats.flush_ledger_index.ok_since(t_index)
                stats.flush.ok_since(t0)
                stats.flush_size.ok_value(flushed)
            self.last_flush_error = None

    def _flush_half(self, half, retry: bool, paced: bool) -> tuple[int, float, float, float, float]:
        """Write a half to the entry log, sync it, commit its locations. Returns its entry bytes and the
        perf_counter times the flush started, wrote, synced and indexed (for the debug log)."""
        t_start = time.perf_counter()
        if self._test_flush_delay_s:
            time.sleep(self._test_flush_delay_s)
        batch = LocationBatch()
        pace = not self._closed
        pacer = Pacer(self._write_cache, half.size, t_start) if paced and pace and not retry else None
        writer = SliceWriter(self._entry_logger, batch, pacer, pace)
        # Slices of <= ~1 MiB or FLUSH_SLICE_ENTRIES with a GIL hand-over (sleep(0)) after each, whatever
        # the number of ledgers in it: a C call over a whole half (memcpy of 170k entries into the log
        # buffer) held the GIL >100 ms and drove the open-loop p99, while a hand-over per ledger cost
        # ~70 us each (the timer slack of sleep(0)): 81 s to stop a bookie holding 1,000,000 one-entry
        # ledgers.
        for piece in FlushSlices(half, FLUSH_SLICE_ENTRIES, FLUSH_SLICE_BYTES):
            writer.add_slice(piece)     # a slice is a copy: it holds nothing of the half (end_flush frees it)
        writer.write()
        self.flush_slices += writer.slices
        self.flushed_entries += half.count
        t_written = time.perf_counter()
        t0 = now_ns()
        self._entry_logger.flush()      # entries durable ...
        self._stats.flush_entrylog.ok_since(t0)
        t_synced = time.perf_counter()
        t0 = now_ns()
        self._locations.commit(batch)   # ... before the index points at them
        self._stats.flush_locations_index.ok_since(t0)
        return writer.entry_bytes, t_start, t_written, t_synced, time.perf_counter()

    def _log_flush(self, half, t_start: float, t_written: float, t_synced: float, t_indexed: float) -> None:
        log.debug("flush of %s: %d entries, %d bytes; write %.1f ms, entry-log sync %.1f ms, index commit %.1f "
                  "ms, free %.1f ms; started at monotonic %.4f", self.ledger_dir, half.count, half.size,
                  (t_written - t_start) * 1e3, (t_synced - t_written) * 1e3, (t_indexed - t_synced) * 1e3,
                  (time.perf_counter() - t_indexed) * 1e3, t_start)

    def checkpoint(self) -> None:
        """flush(paced=True), then record each index store's durable sequence number (see
        RocksStore.record_checkpoint: the next open refuses a store found behind it)."""
        self.flush(paced=True)
        self._record_checkpoint()

    def _record_checkpoint(self) -> None:
        self._locations.record_checkpoint()
        self._ledgers.record_checkpoint()

    def _flush_loop(self) -> None:
        register_thread(DB_STORAGE_POOL, 0)
        thread_time = self._stats.flush_thread_time
        while True:
            self._flush_event.wait()
            self._flush_event.clear()
            if self._closed:
                return
            t0 = now_ns()
            try:
                self.flush(paced=True)
            except Exception as e:  # noqa: BLE001 - reported, and the next flush retries the same half
                self.last_flush_error = e
                log.error("background flush of %s failed: %s", self.ledger_dir, e)
                listener = self.error_listener
                if listener is not None:
                    try:
                        listener(e)
                    except Exception:  # noqa: BLE001 - a listener must not stop the flush thread
                        log.exception("flush error listener failed")
            finally:
                thread_time.add(now_ns() - t0)

    @property
    def read_only(self) -> bool:
        """An index store was opened read-only on a full disk: entries stay in the write cache, reads
        work, flushes fail with OSError(ENOSPC) until reopen_writable()."""
        return self._locations.read_only or self._ledgers.read_only

    def reopen_writable(self) -> None:
        """The disk has room again: open the index stores for writing (pending metadata is written)."""
        self._locations.reopen_writable()
        self._ledgers.reopen_writable()
        self._write_cache.max_wait_s = self._max_wait_s

    @property
    def write_cache_size(self) -> int:
        return self._write_cache.size

    @property
    def read_cache_size(self) -> int:
        return self._read_cache.size

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # refuse new adds first, so the final flush below really is final
        self._flush_event.set()
        self._flush_thread.join()
        try:
            try:
                self.flush()
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # A full disk: what the cache holds is in the journal, and the Bookie did not move its
                # lastMark past it (its checkpoint failed the same way); the next start replays it.
                log.error("final flush of %s failed (%s); the journal keeps its %d cached entries for the "
                          "next start", self.ledger_dir, e, self._write_cache.count)
            else:
                self._record_checkpoint()
                # What a shutdown with many small ledgers costs is visible here: entry-log writes are
                # slices of many ledgers (one per ledger made stopping 1,000,000 ledgers take 81 s).
                log.info("DbLedgerStorage %s closed: %d entries flushed since start, in %d entry-log writes",
                         self.ledger_dir, self.flushed_entries, self.flush_slices)
            if self._owns_logger:
                self._entry_logger.close()
            else:
                self._entry_logger.flush()
        finally:
            try:
                self._locations.close()
            finally:
                self._ledgers.close()
