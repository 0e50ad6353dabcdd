"""DbLedgerStorage: the ledger storage the Bookie calls (Java's DbLedgerStorage), over one or more dirs.

Owns the public API of the storage and the routing of ledgers to directories. As in Java, each ledger
directory is a separate SingleDirectoryDbLedgerStorage (its own entry logs, RocksDB index stores and
caches; cache sizes are divided by the number of dirs), and a scope-0 ledger lives in directory
`ledgerId mod n` (Java's signSafeMod), so a Java bookie's multi-directory layout opens unchanged.
Scoped ledgers (scope != 0) go to `(scopeId xor ledgerId) mod n`. The i-th index dir holds the index
of the i-th ledger dir (index dirs default to the ledger dirs).

Must never: route one ledger to two directories, or verify digests. Entries are stored verbatim:
add_entry takes the ids from the entry itself (v1 or scoped v2 layout, bkfast.codec.peek_entry_ids).

Threads: add_entry, get_entry and the metadata calls may come from several threads; flush/checkpoint
from the Bookie's sync thread; each directory also runs its own background flush thread (see
bkfast.dbstorage.directory). close() flushes, closes the entry loggers and releases every RocksDB
handle, so the same directories can be reopened in the same process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bkfast._writecache import MemoryEntries
from bkfast.codec import peek_entry_ids
from bkfast.dbstorage.directory import SingleDirectoryDbLedgerStorage
from bkfast.dbstorage.settings import DbStorageSettings
from bkfast.errors import ConfigurationError
from bkfast.stats import StatsLogger
from bkfast.storage.entrylogger import EntryLogger
from bkfast.storage.interface import add_each

__all__ = ["DbLedgerStorage"]

_DIRECT_METHODS = (
    "set_master_key", "get_master_key", "ledger_exists", "set_fenced", "is_fenced", "set_explicit_lac",
    "get_explicit_lac", "list_ledgers", "add_entry", "get_entry", "get_last_entry_id", "add_entries",
    "get_last_add_confirmed", "entries_of_ledger", "delete_ledger", "get_entry_cached", "record_adds",
    "record_memory_reads",
)


class DbLedgerStorage:
    """Entries, entry locations and ledger metadata of a bookie, on entry logs and RocksDB."""

    def __init__(self, ledger_dirs: Sequence[str | os.PathLike[str]],
                 index_dirs: Sequence[str | os.PathLike[str]] | None, settings: DbStorageSettings,
                 entry_logger: EntryLogger | Sequence[EntryLogger] | None = None, stats: StatsLogger | None = None):
        """`stats`: the `bookie` scope logger (Java's DbLedgerStorage stats go there, each directory's with
        its indexDir and ledgerDir labels); None records nothing."""
        ledger_dirs = list(ledger_dirs)
        index_dirs = list(index_dirs) if index_dirs else list(ledger_dirs)
        if not ledger_dirs:
            raise ConfigurationError("DbLedgerStorage needs at least one ledger directory")
        if len(index_dirs) != len(ledger_dirs):
            raise ConfigurationError(
                f"{len(ledger_dirs)} ledger dirs but {len(index_dirs)} index dirs: DbLedgerStorage pairs them")
        n = len(ledger_dirs)
        if entry_logger is None:
            loggers: list[EntryLogger | None] = [None] * n
        elif isinstance(entry_logger, EntryLogger):
            if n != 1:
                raise ConfigurationError("one entry logger given for several ledger dirs; give one per dir")
            loggers = [entry_logger]
        else:
            loggers = list(entry_logger)
            if len(loggers) != n:
                raise ConfigurationError(f"{len(loggers)} entry loggers for {n} ledger dirs")
        write_cache = settings.write_cache_bytes // n
        read_cache = settings.read_cache_bytes // n
        self._dirs: list[SingleDirectoryDbLedgerStorage] = []
        try:
            for dir_index, (ledger_dir, index_dir, logger) in enumerate(
                    zip(ledger_dirs, index_dirs, loggers, strict=True)):
                self._dirs.append(SingleDirectoryDbLedgerStorage(
                    ledger_dir, index_dir, settings, logger, write_cache_bytes=write_cache,
                    read_cache_bytes=read_cache, stats=stats, dir_index=dir_index))
        except BaseException:
            for d in self._dirs:
                d.close()
            raise
        # What the reactor's read loops look in: every directory's write cache and read-ahead cache, in C.
        self.memory_entries = MemoryEntries(n)
        for dir_index, d in enumerate(self._dirs):
            d.publish_memory(self.memory_entries, dir_index)
        # Each directory's position in entry_loggers() (a shared logger is listed once): ledger_stats_index.
        loggers_list = self.entry_loggers()
        self._stats_index = [next(i for i, lg in enumerate(loggers_list) if lg is d.entry_logger) for d in self._dirs]
        if stats is not None:
            max_size = settings.write_cache_bytes
            batch = settings.read_ahead_batch_entries
            stats.gauge("write_cache_max_size", lambda: max_size)
            stats.gauge("readahead_max_batch_size", lambda: batch)
        if n == 1:
            # One directory routes nothing: hand out its methods (same signatures) and skip a call
            # level on the hot paths.
            single = self._dirs[0]
            for name in _DIRECT_METHODS:
                setattr(self, name, getattr(single, name))

    @classmethod
    def from_conf(cls, ledger_dirs: Sequence[str | os.PathLike[str]],
                  index_dirs: Sequence[str | os.PathLike[str]] | None, conf,
                  entry_logger: EntryLogger | Sequence[EntryLogger] | None = None,
                  stats: StatsLogger | None = None) -> DbLedgerStorage:
        """The storage with the dbStorage_* and entry-log keys of a ServerConfiguration."""
        return cls(ledger_dirs, index_dirs, DbStorageSettings.from_conf(conf), entry_logger, stats)

    def directory_index(self, ledger_id: int, scope_id: int = 0) -> int:
        """The directory that stores the ledger: its position in `directories`."""
        return (ledger_id if not scope_id else scope_id ^ ledger_id) % len(self._dirs)

    def _dir(self, ledger_id: int, scope_id: int) -> SingleDirectoryDbLedgerStorage:
        return self._dirs[self.directory_index(ledger_id, scope_id)]

    @property
    def directories(self) -> list[SingleDirectoryDbLedgerStorage]:
        return list(self._dirs)

    @property
    def add_run_directories(self) -> list[SingleDirectoryDbLedgerStorage]:
        """LedgerStorage.add_run_directories: every directory (routed by directory_index)."""
        return list(self._dirs)

    # -- ledger metadata ---------------------------------------------------------------------------

    def set_master_key(self, ledger_id: int, key: bytes, scope_id: int = 0) -> None:
        """Create the ledger with this master key, or check it against the stored one
        (BKUnauthorizedAccessException when a different non-zero key is already stored)."""
        self._dir(ledger_id, scope_id).set_master_key(ledger_id, key, scope_id)

    def get_master_key(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        return self._dir(ledger_id, scope_id).get_master_key(ledger_id, scope_id)

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self._dir(ledger_id, scope_id).ledger_exists(ledger_id, scope_id)

    def set_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """Fence the ledger; True if it was not fenced before. Durable at the next flush/checkpoint (the
        Bookie's journal record covers it until then). BKNoSuchLedgerExistsException when the ledger has
        no master key yet."""
        return self._dir(ledger_id, scope_id).set_fenced(ledger_id, scope_id)

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """BKNoSuchLedgerExistsException when the ledger is unknown."""
        return self._dir(ledger_id, scope_id).is_fenced(ledger_id, scope_id)

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, scope_id: int = 0) -> None:
        """Store the explicit-LAC buffer (spec §3.5) verbatim in LedgerData.explicitLac.
        BKNoSuchLedgerExistsException when the ledger has no master key yet."""
        self._dir(ledger_id, scope_id).set_explicit_lac(ledger_id, lac_buffer, scope_id)

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        """The stored explicit-LAC buffer, None when none was written."""
        return self._dir(ledger_id, scope_id).get_explicit_lac(ledger_id, scope_id)

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        """Ledger ids (with metadata) of one scope, ascending."""
        return sorted(lid for d in self._dirs for lid in d.list_ledgers(scope_id))

    # -- entries -----------------------------------------------------------------------------------

    def add_entries(self, entries: list[bytes], high_priority: list[bool]) -> tuple[int, BaseException | None]:
        """Several directories: each entry routed by its ids (one directory has its own batch path)."""
        return add_each(self.add_entry, entries, high_priority)

    def add_entry(self, entry_bytes, high_priority: bool = False) -> tuple[int, int, int]:
        """Store an entry as received; return its (scope_id, ledger_id, entry_id). `high_priority`: a
        recovery add (its add_entry stat is the high-priority thread's)."""
        _, scope_id, ledger_id, entry_id = peek_entry_ids(entry_bytes)
        self._dir(ledger_id, scope_id).put_entry(scope_id, ledger_id, entry_id, entry_bytes, high_priority)
        return scope_id, ledger_id, entry_id

    def record_adds(self, nanos_each: int) -> None:
        """The adds stored since the last call took `nanos_each` each: every directory's add_entry stat."""
        for d in self._dirs:
            d.record_adds(nanos_each)

    def record_memory_reads(self, nanos_each: int) -> None:
        """The get_entry_cached hits since the last call took `nanos_each` each (read_entry, cache hits)."""
        for d in self._dirs:
            d.record_memory_reads(nanos_each)

    def get_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        """The stored entry; entry_id -1 reads the last entry. BKNoSuchLedgerExistsException when the
        ledger is unknown, BKNoSuchEntryException when it has no such entry."""
        return self._dir(ledger_id, scope_id).get_entry(ledger_id, entry_id, scope_id)

    def get_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry if a memory cache holds it, else None; never touches the disk."""
        return self._dir(ledger_id, scope_id).get_entry_cached(ledger_id, entry_id, scope_id)

    def set_room_listener(self, listener) -> None:
        """Adds never wait for write-cache room: a full cache raises StorageBusyError at once, and
        listener() is called (flush thread) when room is made."""
        for d in self._dirs:
            d.set_room_listener(listener)

    def get_last_entry_id(self, ledger_id: int, scope_id: int = 0) -> int:
        """Highest stored entry id of the ledger, -1 when it has none."""
        return self._dir(ledger_id, scope_id).get_last_entry_id(ledger_id, scope_id)

    def get_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        """The LAC piggy-backed on the ledger's last entry (offset 16; 25 for a scoped entry)."""
        return self._dir(ledger_id, scope_id).get_last_add_confirmed(ledger_id, scope_id)

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        """Sorted ids of every stored entry of the ledger."""
        return self._dir(ledger_id, scope_id).entries_of_ledger(ledger_id, scope_id)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        """Forget a ledger: its cached entries, its locations (deleteRange) and its metadata."""
        self._dir(ledger_id, scope_id).delete_ledger(ledger_id, scope_id)

    # -- garbage collection and compaction (the storage contract of bkfast.bookie.gc) ---------------

    def entry_loggers(self) -> list[EntryLogger]:
        """The entry logger of every directory (one per ledger dir; a shared one is listed once)."""
        out: list[EntryLogger] = []
        for d in self._dirs:
            if all(d.entry_logger is not known for known in out):
                out.append(d.entry_logger)
        return out

    def all_ledgers(self) -> list[tuple[int, int]]:
        """(scope_id, ledger_id) of every ledger in the index, sorted."""
        return sorted(key for d in self._dirs for key in d.all_ledgers())

    def gc_stats_loggers(self) -> list[StatsLogger]:
        """Where the garbage collector records for each of entry_loggers(): Java runs one collector per
        directory, with the directory's labels."""
        loggers = self.entry_loggers()
        return [next(d.stats_logger for d in self._dirs if d.entry_logger is lg) for lg in loggers]

    def ledger_stats_index(self, ledger_id: int, scope_id: int = 0) -> int:
        """The position in entry_loggers() (and gc_stats_loggers()) of the directory holding the ledger."""
        selector = ledger_id if not scope_id else scope_id ^ ledger_id
        return self._stats_index[selector % len(self._dirs)]

    def entry_location(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None:
        """The entry's current location in the index; None when it is not indexed."""
        return self._dir(ledger_id, scope_id).entry_location(scope_id, ledger_id, entry_id)

    def update_entry_locations(self, updates) -> None:
        """[(scope_id, ledger_id, entry_id, new_location)]: the index points at compacted copies
        (synced at once; entries whose ledger was deleted meanwhile are skipped)."""
        if len(self._dirs) == 1:
            self._dirs[0].update_entry_locations(updates)
            return
        by_dir: dict[int, list] = {}
        for update in updates:
            scope_id, ledger_id = update[0], update[1]
            selector = ledger_id if not scope_id else scope_id ^ ledger_id
            by_dir.setdefault(selector % len(self._dirs), []).append(update)
        for i, part in by_dir.items():
            self._dirs[i].update_entry_locations(part)

    def set_error_listener(self, listener) -> None:
        """listener(error) is called when a background flush fails (the Bookie turns read-only on ENOSPC)."""
        for d in self._dirs:
            d.error_listener = listener

    # -- a full disk at start ------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """Some directory's index opened read-only on a full disk (see RocksStore): reads work, adds
        stay in the write cache, flushes fail until reopen_writable()."""
        return any(d.read_only for d in self._dirs)

    def reopen_writable(self) -> None:
        """Open every read-only index for writing; raises (OSError ENOSPC) while a disk is still full."""
        for d in self._dirs:
            if d.read_only:
                d.reopen_writable()

    # -- lifecycle ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write cached entries to the entry logs, fsync them, then commit their locations and sync
        the ledger metadata. When it returns, everything added before the call is durable."""
        for d in self._dirs:
            d.flush()

    def checkpoint(self) -> None:
        """flush(), paced while adds arrive (see SingleDirectoryDbLedgerStorage.flush), and each index
        store's durable sequence number recorded (checked at the next open); the Bookie persists its
        journal lastMark after this returns."""
        for d in self._dirs:
            d.checkpoint()

    def close(self) -> None:
        """Flush, close the entry loggers and release every RocksDB handle (reopenable in-process)."""
        first_error: BaseException | None = None
        for d in self._dirs:
            try:
                d.close()
            except BaseException as e:  # close every directory even if one fails
                first_error = first_error or e
        if first_error is not None:
            raise first_error
