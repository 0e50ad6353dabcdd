"""The ledger storage interface: what the Bookie, its journal replay, GC and compaction call on a storage.

Two implementations, checked against it by the type checker (bkfast/storage/conformance.py):
`bkfast.dbstorage.storage.DbLedgerStorage` (Java's DbLedgerStorage) and
`bkfast.indexstorage.storage.IndexedLedgerStorage` (Java's Interleaved- and SortedLedgerStorage). A
capability one storage lacks is still a method of both, with a documented meaning where it does nothing
(no memory cache: get_entry_cached answers None; adds never wait for room: set_room_listener keeps no
listener), so callers never probe with hasattr/getattr.

Ids: every method takes `(ledger_id, ..., scope_id=0)` except those of the GC/compaction contract, which
take `(scope_id, ledger_id, entry_id)` as their index keys are ordered. Entries are bytes exactly as the
client packaged them; a storage never verifies or rewrites them. Errors: BKNoSuchLedgerExistsException /
BKNoSuchEntryException for what is not there, BKUnauthorizedAccessException for a wrong master key,
StorageBusyError from add_entry when a room listener is set and the storage has no room now.

Must never import a storage implementation (they import it) or anything above bkfast.storage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from bkfast._entrysource import EntrySource
from bkfast._writecache import WriteCacheHalf
from bkfast.stats import StatsLogger
from bkfast.storage.entrylogger import EntryLogger

__all__ = ["AddRunDirectory", "LedgerStorage", "StorageDirectory", "EntryBytes", "add_each"]

EntryBytes = bytes | bytearray | memoryview


def add_each(add_entry: Callable[[bytes, bool], object], entries: list[bytes], high_priority: list[bool],
             start: int = 0) -> tuple[int, BaseException | None]:
    """LedgerStorage.add_entries over entries[start:] by one add_entry call each (a storage without a batch
    path, or the rest of a batch its fast path left)."""
    for i in range(start, len(entries)):
        try:
            add_entry(entries[i], high_priority[i])
        except Exception as error:
            return i, error
    return len(entries), None


class StorageDirectory(Protocol):
    """One directory of a storage as the bookie's metrics see it (bytes held in its memory caches)."""

    @property
    def write_cache_size(self) -> int: ...

    @property
    def read_cache_size(self) -> int: ...


class AddRunDirectory(Protocol):
    """A ledger directory whose write cache the reactor's add fast path (bkfast.bookie.fast_adds) fills
    directly, one run (a socket read's adds) at a time."""

    def hold_write_half(self) -> WriteCacheHalf:
        """The active write-cache half, locked against a swap until release_write_half."""
        ...

    def release_write_half(self, stored: int) -> None:
        """The run stored `stored` entries in the held half (counted as add_entry counts them)."""
        ...

    @property
    def write_half_limit(self) -> int:
        """The bytes a half may hold: a put past it is refused (the general path then makes room)."""
        ...


class LedgerStorage(Protocol):
    """A bookie's ledger storage (see the module docstring)."""

    @property
    def memory_entries(self) -> EntrySource | None:
        """What the reactor's read loops look in without a Python call per read (bkfast._entrysource);
        None for a storage whose memory get_entry_cached alone can answer."""
        ...

    @property
    def add_run_directories(self) -> Sequence[AddRunDirectory] | None:
        """Each ledger directory's write cache for the add fast path, in directory_index order; None for a
        storage that has no such cache (every add goes through add_entries)."""
        ...

    def directory_index(self, ledger_id: int, scope_id: int = 0) -> int:
        """The position in add_run_directories of the directory that stores this ledger (0 for one)."""
        ...

    # --- ledger metadata ------------------------------------------------------------------------------
    def set_master_key(self, ledger_id: int, key: bytes, scope_id: int = 0) -> None:
        """Create the ledger with this master key (BKUnauthorizedAccessException: another key is stored)."""
        ...

    def get_master_key(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        """The stored master key; None for a ledger the storage does not know."""
        ...

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool: ...

    def set_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """Fence the ledger; True if it was not fenced before."""
        ...

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """BKNoSuchLedgerExistsException for an unknown ledger."""
        ...

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, scope_id: int = 0) -> None: ...

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        """The stored explicit-LAC buffer, None when none was written."""
        ...

    def list_ledgers(self, scope_id: int = 0) -> list[int]: ...

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None: ...

    # --- entries ------------------------------------------------------------------------------------
    def add_entry(self, entry_bytes: EntryBytes, high_priority: bool = False) -> tuple[int, int, int]:
        """Store an entry as received; its (scope_id, ledger_id, entry_id)."""
        ...

    def add_entries(self, entries: list[bytes], high_priority: list[bool]) -> tuple[int, BaseException | None]:
        """add_entry for each entry in order (the flags as add_entry's `high_priority`), stopping at the
        first one refused: (how many were stored, the error add_entry raised for the next one, or None)."""
        ...

    def get_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        """The stored entry; entry_id -1: the ledger's highest."""
        ...

    def get_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry if a memory cache holds it, else None (always None for a storage without one);
        never touches the disk, so the reactor may call it."""
        ...

    def get_last_entry_id(self, ledger_id: int, scope_id: int = 0) -> int:
        """The ledger's highest stored entry id, -1 when it has none."""
        ...

    def get_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        """The LAC piggy-backed on the ledger's highest entry."""
        ...

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]: ...

    def record_adds(self, nanos_each: int) -> None:
        """The adds stored since the last call took `nanos_each` each (no-op: a storage keeping no such stat)."""
        ...

    def record_memory_reads(self, nanos_each: int) -> None:
        """The get_entry_cached hits since the last call took `nanos_each` each (no-op: no such stat)."""
        ...

    # --- room, errors and a full disk ---------------------------------------------------------------------
    def set_room_listener(self, listener: Callable[[], None]) -> None:
        """From now on add_entry never waits for room: StorageBusyError at once, then listener() once room
        is made. A storage whose adds never wait keeps no listener."""
        ...

    def set_error_listener(self, listener: Callable[[BaseException], None]) -> None:
        """listener(error) when a background flush fails. A storage without a background flush that could
        fail unseen keeps no listener (its errors surface at the next flush/checkpoint)."""
        ...

    @property
    def read_only(self) -> bool:
        """Its indexes opened read-only (a full disk at start): reads work, flushes fail until
        reopen_writable(). Always False for a storage without a read-only open."""
        ...

    def reopen_writable(self) -> None:
        """Open read-only indexes for writing; raises while the disk is still full."""
        ...

    # --- garbage collection and compaction (bkfast.bookie.gc, bkfast.bookie.compaction) -------------------
    def entry_loggers(self) -> list[EntryLogger]: ...

    def all_ledgers(self) -> list[tuple[int, int]]:
        """(scope_id, ledger_id) of every ledger in the index."""
        ...

    def gc_stats_loggers(self) -> list[StatsLogger]:
        """Where the garbage collector records, one per entry_loggers() entry."""
        ...

    def ledger_stats_index(self, ledger_id: int, scope_id: int = 0) -> int:
        """The position in entry_loggers() of the ledger's directory."""
        ...

    def entry_location(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None: ...

    def update_entry_locations(self, updates: list[tuple[int, int, int, int]]) -> None:
        """[(scope_id, ledger_id, entry_id, new_location)]: point the index at compacted copies."""
        ...

    # --- lifecycle ---------------------------------------------------------------------------------
    @property
    def directories(self) -> Sequence[StorageDirectory]: ...

    def flush(self) -> None:
        """Everything added before the call is durable when it returns."""
        ...

    def checkpoint(self) -> None:
        """flush(); the Bookie persists its journal lastMark after this returns."""
        ...

    def close(self) -> None: ...
