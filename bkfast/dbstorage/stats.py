"""The stats of one DbLedgerStorage directory, under Java 4.16.7's names (DbLedgerStorageStats,
EntryLocationIndexStats, LedgerMetadataIndexStats): scope `bookie`, labels indexDir and ledgerDir (each
dir's `current`, as Java labels them).

Made once per directory; the directory records into them (see bkfast.dbstorage.directory). Adds and reads
from memory are recorded per batch: an add or a cached read counts itself with ONE C call on an internal
counter (no Python object per request) and the Bookie hands the batch's per-request latency to
`record_adds` / `record_memory_reads`, which turn the counts into the OpStats events. The thread-scoped
stats (add_entry, read_entry, read_*_time, readahead_time, db_storage_thread_time) carry Java's thread
labels (bkfast.storage.thread_stats).
"""

from __future__ import annotations

from bkfast._stats import Counter
from bkfast.storage.thread_stats import (
    DB_STORAGE_POOL,
    HIGH_PRIORITY_POOL,
    WRITE_POOL,
    ThreadScoped,
    thread_labels,
)

__all__ = ["DbDirStats", "ReadThreadStats"]


class ReadThreadStats:
    """The thread-scoped read stats of one thread: Java's read-entry, read-locations-index-time,
    read-entrylog-time and readahead-time (the three counters in nanoseconds)."""

    __slots__ = ("read_entry", "locations_time", "entrylog_time", "readahead_time")

    def __init__(self, logger):
        self.read_entry = logger.op_stats("read_entry")
        self.locations_time = logger.counter("read_locations_index_time")
        self.entrylog_time = logger.counter("read_entrylog_time")
        self.readahead_time = logger.counter("readahead_time")


class DbDirStats:
    """Every stat of one SingleDirectoryDbLedgerStorage (see the module docstring)."""

    def __init__(self, logger, write_cache, read_cache, locations, ledgers):
        self.logger = logger
        self.reads = ThreadScoped(logger, ReadThreadStats)
        self.add_entry = logger.thread_scoped(WRITE_POOL, 0).op_stats("add_entry")
        self.add_entry_high = logger.thread_scoped(HIGH_PRIORITY_POOL, 0).op_stats("add_entry")
        # Adds stored since the last record_adds (normal, high priority): one inc() per add.
        self.pending_adds = Counter()
        self.pending_high_adds = Counter()
        # Reads answered from memory (get_entry_cached) since the last record_memory_reads.
        self.memory_write_cache_hits = Counter()
        self.memory_read_cache_hits = Counter()
        self.write_cache_hits = logger.counter("write_cache_hits")
        self.write_cache_misses = logger.counter("write_cache_misses")
        self.read_cache_hits = logger.counter("read_cache_hits")
        self.read_cache_misses = logger.counter("read_cache_misses")
        self.readahead_batch_count = logger.op_stats("readahead_batch_count")
        self.readahead_batch_size = logger.op_stats("readahead_batch_size")
        self.flush = logger.op_stats("flush")
        self.flush_entrylog = logger.op_stats("flush_entrylog")
        self.flush_locations_index = logger.op_stats("flush_locations_index")
        self.flush_ledger_index = logger.op_stats("flush_ledger_index")
        self.flush_size = logger.op_stats("flush_size")
        self.throttled_write = logger.op_stats("throttled_write")
        self.lookup_entry_location = logger.op_stats("lookup_entry_location")
        self.flush_thread_time = logger.thread_scoped(DB_STORAGE_POOL, 0).counter("db_storage_thread_time")
        self.flush_thread_time.add(0)
        logger.gauge("write_cache_size", lambda: write_cache.size)
        logger.gauge("write_cache_count", lambda: write_cache.count)
        logger.gauge("read_cache_size", lambda: read_cache.size)
        logger.gauge("read_cache_count", lambda: read_cache.count)
        logger.gauge("entries_count", locations.estimated_count)
        logger.gauge("ledgers_count", lambda: ledgers.count)

    def record_adds(self, nanos_each: int) -> None:
        """The adds stored since the last call took `nanos_each` each (the Bookie's batch time per add)."""
        for pending, stats in ((self.pending_adds, self.add_entry), (self.pending_high_adds, self.add_entry_high)):
            n = pending.value
            if n:
                pending.add(-n)
                stats.ok_ns_many(n, nanos_each)

    def record_memory_reads(self, nanos_each: int) -> None:
        """The reads answered from memory since the last call took `nanos_each` each: Java counts them as
        read_entry events and cache hits (a read-cache hit is a write-cache miss first)."""
        written, read = self.memory_write_cache_hits.value, self.memory_read_cache_hits.value
        if not (written or read):
            return
        self.memory_write_cache_hits.add(-written)
        self.memory_read_cache_hits.add(-read)
        self.write_cache_hits.add(written)
        self.write_cache_misses.add(read)
        self.read_cache_hits.add(read)
        self.reads.get(thread_labels()).read_entry.ok_ns_many(written + read, nanos_each)
