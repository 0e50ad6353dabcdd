"""IndexedLedgerStorage: BookKeeper's InterleavedLedgerStorage (and, with a memtable, SortedLedgerStorage).

Owns the public storage API the Bookie calls (the same as bkfast.dbstorage.storage.DbLedgerStorage) over
entry logs (one EntryLogger spanning every ledger dir, as Java's InterleavedLedgerStorage does: new logs
round-robin, logs found in any dir) and a file-based index (ledger_cache: one `.idx` file per ledger,
found in any index dir). With `sorted=True` adds go to a sorted memtable first (memtable) and are
drained to the entry log when it reaches `skipListSizeLimit` (by a background thread) or at a flush.

Read path: memtable (active, snapshot) -> ledger cache page -> entry log pread.

Durability (the contract with the Bookie's checkpoint): flush() drains the memtable, fsyncs the entry
logs, and only then writes and fsyncs index pages and headers. Any index page written earlier (cache
eviction) is preceded by an entry-log fsync too (the ledger cache's before_page_write hook), so an
index never points at entry-log bytes a crash could lose. Re-adding an entry (journal replay after a
crash) just stores it again and points the index at the new copy: adds are idempotent.

Must never: verify digests (entries are stored and returned verbatim), write an index page before the
entry-log bytes it points at are synced, or resurrect a deleted ledger from a compaction update.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from bkfast._entrysource import EntrySource
from bkfast._stats import now_ns
from bkfast.codec import peek_entry_ids
from bkfast.errors import (
    BKIllegalOpException,
    StorageCorruptionError,
    missing_entry_error,
)
from bkfast.indexstorage.ledger_cache import LedgerCache
from bkfast.indexstorage.memtable import Memtable
from bkfast.indexstorage.settings import IndexStorageSettings
from bkfast.stats import StatsLogger, StatsRegistry
from bkfast.storage.entry_header import entry_lac
from bkfast.storage.entrylogger import EntryLogger
from bkfast.storage.interface import AddRunDirectory, add_each
from bkfast.threads import FLUSH, NamedThread

__all__ = ["IndexedLedgerStorage"]

log = logging.getLogger(__name__)



class IndexedLedgerStorage:
    """Entries on entry logs, locations and ledger headers in per-ledger `.idx` files."""

    def __init__(self, ledger_dirs: Sequence[str | os.PathLike[str]],
                 index_dirs: Sequence[str | os.PathLike[str]] | None, settings: IndexStorageSettings, *,
                 sorted: bool = True,
                 entry_logger: EntryLogger | None = None, stats: StatsLogger | None = None):
        """`stats`: the `bookie` scope logger. Java's InterleavedLedgerStorage records STORAGE_GET_OFFSET and
        STORAGE_GET_ENTRY there, and its garbage collector under scope `gc` (gc_stats_loggers)."""
        ledger_dirs = [str(d) for d in ledger_dirs]
        index_dirs = [str(d) for d in index_dirs] if index_dirs else list(ledger_dirs)
        if not ledger_dirs:
            raise ValueError("IndexedLedgerStorage needs at least one ledger directory")
        self.ledger_dirs = ledger_dirs
        self.index_dirs = index_dirs
        self._owns_logger = entry_logger is None
        self._logger = (entry_logger if entry_logger is not None
                        else EntryLogger(ledger_dirs, settings.entry_logger))
        self._cache = LedgerCache(index_dirs, settings.page_size, settings.page_limit, settings.open_file_limit,
                                  settings.file_info_version, self._sync_entry_logs)
        self._log_unsynced = False
        self._flush_lock = threading.Lock()   # one memtable drain at a time; delete vs drain
        self._add_lock = threading.Lock()     # interleaved add (log append + index put) vs delete
        self._closed = False
        self.last_flush_error: BaseException | None = None
        self.stats_logger = stats if stats is not None else StatsRegistry(enabled=False).logger()
        self._get_offset_stats = self.stats_logger.op_stats("STORAGE_GET_OFFSET")
        self._get_entry_stats = self.stats_logger.op_stats("STORAGE_GET_ENTRY")
        self._memtable: Memtable | None = None
        self.memory_entries: EntrySource | None = None     # the memtable is read by get_entry_cached
        self.add_run_directories: Sequence[AddRunDirectory] | None = None   # no write cache to fill directly
        self._flush_thread: threading.Thread | None = None
        self._flush_event = threading.Event()
        if sorted:
            self._memtable = Memtable(settings.skip_list_size_limit)
            self._flush_thread = NamedThread(self._flush_loop, f"{FLUSH}-0")
            self._flush_thread.start()
        log.info("file-based index storage (%s) on ledger dirs %s, index dirs %s: pageSize %d, pageLimit %d, "
                 "open files %d", "sorted" if sorted else "interleaved", ledger_dirs, index_dirs,
                 settings.page_size, self._cache.page_limit, self._cache.open_file_limit)

    @classmethod
    def from_conf(cls, ledger_dirs: Sequence[str | os.PathLike[str]],
                  index_dirs: Sequence[str | os.PathLike[str]] | None, conf, *, sorted: bool = True,
                  entry_logger: EntryLogger | None = None, stats: StatsLogger | None = None) -> IndexedLedgerStorage:
        """The storage with the index and entry-log keys of a ServerConfiguration."""
        return cls(ledger_dirs, index_dirs, IndexStorageSettings.from_conf(conf), sorted=sorted,
                   entry_logger=entry_logger, stats=stats)

    # -- ledger metadata ---------------------------------------------------------------------------

    def set_master_key(self, ledger_id: int, key: bytes, scope_id: int = 0) -> None:
        """Create the ledger with this master key, or check it (BKUnauthorizedAccessException on mismatch)."""
        self._cache.set_master_key(scope_id, ledger_id, key)

    def get_master_key(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        return self._cache.get_master_key(scope_id, ledger_id)

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self._cache.exists(scope_id, ledger_id)

    def set_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """Fence the ledger; True if it was not fenced before. Durable at the next flush (the journal
        holds the fence record until then)."""
        return self._cache.set_fenced(scope_id, ledger_id)

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self._cache.is_fenced(scope_id, ledger_id)

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, scope_id: int = 0) -> None:
        self._cache.set_explicit_lac(scope_id, ledger_id, lac_buffer)

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        return self._cache.get_explicit_lac(scope_id, ledger_id)

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        return self._cache.list_ledgers(scope_id)

    # -- entries -----------------------------------------------------------------------------------

    def add_entries(self, entries: list[bytes], high_priority: list[bool]) -> tuple[int, BaseException | None]:
        return add_each(self.add_entry, entries, high_priority)

    def add_entry(self, entry_bytes, high_priority: bool = False) -> tuple[int, int, int]:
        """Store an entry as received; return its (scope_id, ledger_id, entry_id). (`high_priority`: the
        storages' common signature; Java's file-based storages have no per-thread add stats.)"""
        _, scope_id, ledger_id, entry_id = peek_entry_ids(entry_bytes)
        if ledger_id < 0 or entry_id < 0:
            raise BKIllegalOpException(f"entry {entry_id} of ledger {ledger_id}: ids must not be negative")
        if self._closed:
            raise ValueError("the ledger storage is closed")
        data = entry_bytes if type(entry_bytes) is bytes else bytes(entry_bytes)
        memtable = self._memtable
        if memtable is not None:
            if memtable.put((scope_id, ledger_id), entry_id, data):
                self._flush_event.set()
        else:
            with self._add_lock:
                location = self._logger.add_entry(ledger_id, data)
                self._log_unsynced = True
                self._cache.put_location(scope_id, ledger_id, entry_id, location)
        return scope_id, ledger_id, entry_id

    def _missing(self, scope_id: int, ledger_id: int, entry_id: int) -> Exception:
        return missing_entry_error(self._cache.exists(scope_id, ledger_id), scope_id, ledger_id, entry_id)

    def directory_index(self, ledger_id: int, scope_id: int = 0) -> int:
        """LedgerStorage.directory_index: no add-run directories, so 0."""
        return 0

    def get_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry if the memtable still holds it, else None; never touches the disk."""
        memtable = self._memtable
        if memtable is None or entry_id < 0:
            return None
        return memtable.get((scope_id, ledger_id), entry_id)

    def get_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        """The stored entry; entry_id -1 reads the last one. BKNoSuchLedgerExists / BKNoSuchEntry."""
        if entry_id < 0:
            last = self.get_last_entry_id(ledger_id, scope_id)
            if last < 0:
                raise self._missing(scope_id, ledger_id, -1)
            entry_id = last
        memtable = self._memtable
        # Twice with a memtable: the entry may move from it to the index between the two lookups.
        for _attempt in range(2 if memtable is not None else 1):
            if memtable is not None:
                data = memtable.get((scope_id, ledger_id), entry_id)
                if data is not None:
                    return data
            t0 = now_ns()
            location = self._cache.get_location(scope_id, ledger_id, entry_id)
            if location is not None:
                self._get_offset_stats.ok_since(t0)
                break
        else:
            self._get_offset_stats.fail_since(t0)
            raise self._missing(scope_id, ledger_id, entry_id)
        t0 = now_ns()
        try:
            data = self._read_at(ledger_id, entry_id, location, scope_id)
        except BaseException:
            self._get_entry_stats.fail_since(t0)
            raise
        self._get_entry_stats.ok_since(t0)
        return data

    def _read_at(self, ledger_id: int, entry_id: int, location: int, scope_id: int) -> bytes:
        try:
            return self._logger.read_entry(ledger_id, entry_id, location, scope_id)
        except (StorageCorruptionError, ValueError, OSError):
            # Compaction may have moved the entry and removed its old log between lookup and read.
            moved = self._cache.get_location(scope_id, ledger_id, entry_id)
            if moved is None or moved == location:
                raise
            return self._logger.read_entry(ledger_id, entry_id, moved, scope_id)

    def set_room_listener(self, listener: Callable[[], None]) -> None:
        """Keeps no listener: adds never wait for room here (the memtable takes every add and a background
        thread drains it), so there is never a StorageBusyError to announce the end of."""

    def set_error_listener(self, listener: Callable[[BaseException], None]) -> None:
        """Keeps no listener: a failed memtable drain keeps its snapshot (last_flush_error) and the next
        flush() drains it again and raises, so the Bookie's checkpoint sees the error."""

    @property
    def read_only(self) -> bool:
        """Always False: `.idx` files have no read-only open (a full disk fails the flush instead)."""
        return False

    def reopen_writable(self) -> None:
        """Nothing to reopen (never read_only)."""

    def record_adds(self, nanos_each: int) -> None:
        """(The storages' common contract: Java's file-based storages keep no add_entry stat.)"""

    def record_memory_reads(self, nanos_each: int) -> None:
        """(The storages' common contract: memtable hits are not Java read_entry stats.)"""

    def get_last_entry_id(self, ledger_id: int, scope_id: int = 0) -> int:
        """Highest stored entry id of the ledger (memtable or index), -1 when none."""
        cached = self._memtable.last_entry((scope_id, ledger_id)) if self._memtable is not None else -1
        return max(cached, self._cache.last_entry(scope_id, ledger_id))

    def get_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        """The LAC piggy-backed on the ledger's last entry (offset 16; 25 for a scoped entry)."""
        data = self.get_entry(ledger_id, -1, scope_id)
        return entry_lac(data)

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        ids = set(self._cache.entries(scope_id, ledger_id))
        if self._memtable is not None:
            ids |= self._memtable.entry_ids((scope_id, ledger_id))
        return sorted(ids)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        """Forget a ledger: memtable entries, cached pages and its index file. Entry-log bytes are
        reclaimed by garbage collection."""
        with self._flush_lock, self._add_lock:
            if self._memtable is not None:
                self._memtable.delete_ledger((scope_id, ledger_id))
            self._cache.delete(scope_id, ledger_id)

    # -- GC / compaction contract --------------------------------------------------------------------

    def entry_loggers(self) -> list[EntryLogger]:
        """The entry loggers (one, spanning every ledger dir, as in Java's InterleavedLedgerStorage)."""
        return [self._logger]

    def all_ledgers(self) -> list[tuple[int, int]]:
        """(scope_id, ledger_id) of every ledger in the index."""
        return self._cache.all_ledgers()

    def gc_stats_loggers(self) -> list[StatsLogger]:
        """Where the garbage collector records (Java: the storage's logger, scope `gc`, no dir labels)."""
        return [self.stats_logger.scope("gc")]

    def ledger_stats_index(self, ledger_id: int, scope_id: int = 0) -> int:
        return 0

    def update_entry_locations(self, updates: list[tuple[int, int, int, int]]) -> None:
        """Point entries at new locations (compaction); ledgers deleted meanwhile are skipped.
        Durable after the next flush()."""
        with self._add_lock:
            self._log_unsynced = True  # the new copies must be synced before pages pointing at them
            for scope_id, ledger_id, entry_id, location in updates:
                self._cache.update_location(scope_id, ledger_id, entry_id, location)

    def entry_location(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None:
        """The entry's current location in the index (None when absent)."""
        return self._cache.get_location(scope_id, ledger_id, entry_id)

    # -- flushing ----------------------------------------------------------------------------------

    def _sync_entry_logs(self) -> None:
        """before_page_write hook of the ledger cache: entry-log bytes first, then index pages."""
        if self._log_unsynced:
            self._log_unsynced = False
            try:
                self._logger.flush()
            except BaseException:
                self._log_unsynced = True
                raise

    def _drain_memtable(self) -> None:
        memtable = self._memtable
        if memtable is None:
            return
        with self._flush_lock:
            runs = memtable.snapshot()
            if not runs:
                return
            add_entries, put_locations = self._logger.add_entries, self._cache.put_locations
            for (scope_id, ledger_id), entry_ids, datas in runs:
                locations = add_entries(ledger_id, datas)
                self._log_unsynced = True
                put_locations(scope_id, ledger_id, entry_ids, locations)
            memtable.clear_snapshot()

    def _flush_loop(self) -> None:
        while True:
            self._flush_event.wait()
            self._flush_event.clear()
            if self._closed:
                return
            try:
                self._drain_memtable()
                self.last_flush_error = None
            except Exception as e:  # noqa: BLE001 - reported; the snapshot is kept and retried
                self.last_flush_error = e
                log.error("memtable flush to entry log failed: %s", e)

    def flush(self) -> None:
        """Make every entry and header change made before the call durable: memtable -> entry log,
        fsync entry logs, then write and fsync index pages and headers."""
        self._drain_memtable()
        self._log_unsynced = True
        self._sync_entry_logs()
        self._cache.flush()

    def checkpoint(self) -> None:
        """flush(); the Bookie persists its journal lastMark after this returns."""
        self.flush()

    @property
    def directories(self) -> list[IndexedLedgerStorage]:
        return [self]

    @property
    def write_cache_size(self) -> int:
        return self._memtable.size if self._memtable is not None else 0

    @property
    def read_cache_size(self) -> int:
        return 0

    @property
    def ledger_cache(self) -> LedgerCache:
        return self._cache

    def close(self) -> None:
        """Flush, close the entry logger and every index file (reopenable in-process)."""
        if self._closed:
            return
        self._closed = True
        if self._flush_thread is not None:
            self._flush_event.set()
            self._flush_thread.join()
        self.flush()
        if self._owns_logger:
            self._logger.close()
        else:
            self._logger.flush()
        self._cache.close()
