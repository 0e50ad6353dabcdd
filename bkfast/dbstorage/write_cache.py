"""The write cache of DbLedgerStorage: entries held in memory until a flush writes them to entry logs.

Owns: two halves (as Java's two WriteCaches), each allowed half of `dbStorage_writeCacheMaxSizeMb`
(already divided across ledger dirs by the caller). Adds go to the active half; a flush swaps the halves
and writes the now-flushing half while adds continue into the fresh active one. Reads look in the active
half, then in the flushing one. A flush takes a half's entries grouped by ledger in (ledger, entry)
order, so each ledger's entries land contiguously in the entry log (read-ahead depends on that).

Backpressure: when an entry does not fit the active half, `request_flush` (the storage's flush thread
trigger) is called and the add waits — at most `max_wait_s` (Java's dbStorage_maxThrottleTimeMs) — for
a swap to make room. When both halves stay full that long, WriteCacheFullError (ETOOMANYREQUESTS).
The bookie server never lets an add wait on its reactor: it sets `room_listener`, and then a put that
does not fit raises StorageBusyError at once and the listener is called when a swap or a finished
flush makes room (the server holds the add meanwhile and stops reading from that connection).

Each half is a C structure (bkfast._writecache: entry bytes in arena segments, a C index, its own mutex),
so no cached entry is a Python object and code running without the GIL can put and look up entries.

Must never: do I/O, or block an add for longer than max_wait_s. Ledgers are named by an opaque int key
(bkfast.dbstorage.index.qualified_key); entry ids are ints. Sizes count each entry's bytes plus a fixed
per-entry (and per-ledger) overhead standing for the index that holds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from bkfast._stats import OpStats, now_ns
from bkfast._writecache import ENTRY_OVERHEAD, LEDGER_OVERHEAD, SEGMENT_BYTES, SegmentPool, WriteCacheHalf, put_entries
from bkfast.errors import StorageBusyError, WriteCacheFullError

__all__ = ["ENTRY_OVERHEAD", "LEDGER_OVERHEAD", "WriteCache", "WriteCacheHalf"]


class WriteCache:
    """Active and flushing halves with a bounded wait for room."""

    def __init__(self, max_size_bytes: int, max_wait_s: float, request_flush: Callable[[], None]):
        self.half_size = max(1, max_size_bytes // 2)
        self.max_wait_s = max_wait_s
        self._request_flush = request_flush
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Both halves' worth of arena segments are kept warm between halves (see SegmentPool).
        self._pool = SegmentPool(2 * (self.half_size // SEGMENT_BYTES + 1))
        self._active = WriteCacheHalf(self._pool)
        self._flushing = WriteCacheHalf(self._pool)
        # Told (active, flushing) whenever a half is replaced: the storage's MemoryEntries looks in them.
        self.on_change: Callable[[tuple[WriteCacheHalf, WriteCacheHalf]], None] | None = None
        # Set by the bookie server: puts never wait, and room_listener() runs when a swap or a finished
        # flush makes room after a refused put.
        self.room_listener: Callable[[], None] | None = None
        self._room_wanted = False
        # Java's throttled_write: an add that found the cache full, and how long until it had room. A
        # waiting add records its own wait; refused (non-waiting) adds count here until the room comes.
        self.throttle_stats = OpStats(False)
        self._refused = 0
        self._refused_since = 0

    @property
    def size(self) -> int:
        return self._active.size + self._flushing.size

    @property
    def count(self) -> int:
        return self._active.count + self._flushing.count

    @property
    def active_size(self) -> int:
        return self._active.size

    def put(self, key: int, entry_id: int, data: bytes) -> None:
        # The common case first, under the bare lock (a Condition's __enter__ is Python code): this runs
        # once per add on the reactor thread. (The half has its own mutex too: this lock orders puts
        # against swaps, and is what a waiting put sleeps on.)
        with self._lock:
            if self._active.try_put(key, entry_id, data, self.half_size):
                return
        need = len(data) + ENTRY_OVERHEAD + LEDGER_OVERHEAD   # at most: the ledger may be new to the half
        if need > self.half_size:
            raise WriteCacheFullError(
                f"an entry of {len(data)} bytes is larger than half the write cache ({self.half_size} bytes)")
        if self.room_listener is not None:
            # Non-waiting mode (the bookie server): refuse now, flush, and announce the room it makes.
            self._room_wanted = True
            if not self._refused:
                self._refused_since = now_ns()
            self._refused += 1
            self._request_flush()
            raise StorageBusyError(f"write cache full ({self.half_size} bytes per half); flushing")
        self._wait_and_put(key, entry_id, data)

    def hold_active(self) -> WriteCacheHalf:
        """The active half, with the lock held so that no swap replaces it until release_active: the
        reactor's add fast path puts into it directly (the half's own mutex orders it against readers)."""
        self._lock.acquire()
        return self._active

    def release_active(self) -> None:
        self._lock.release()

    def put_entries(self, entries: list[bytes], start: int) -> tuple[int, int]:
        """put for entries[start:] (ids from their headers) while they fit the active half, in one C call:
        bkfast._writecache.put_entries' (first entry not stored, why). That entry is the caller's (put
        waits or refuses; a malformed one gets its precise error there)."""
        with self._lock:
            return put_entries(self._active, entries, start, self.half_size)

    def _wait_and_put(self, key: int, entry_id: int, data: bytes) -> None:
        deadline = time.monotonic() + self.max_wait_s
        t0 = now_ns()
        self._request_flush()
        with self._cond:
            while True:
                if self._active.try_put(key, entry_id, data, self.half_size):
                    self.throttle_stats.ok_since(t0)
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.throttle_stats.fail_since(t0)
                    raise WriteCacheFullError(
                        f"write cache full: both halves hold {self.half_size} bytes and no flush made room "
                        f"within {self.max_wait_s:.3f} s")
                self._cond.wait(min(remaining, 0.05))
                self._request_flush()

    def get(self, key: int, entry_id: int) -> bytes | None:
        # Active first, then flushing: an entry moves from active to flushing at a swap, and leaves the
        # flushing half only after its location is committed, so one of the three places has it.
        data = self._active.get(key, entry_id)
        return data if data is not None else self._flushing.get(key, entry_id)

    def last_entry(self, key: int) -> int:
        """Highest cached entry id of a ledger, -1 when none."""
        return max(self._active.last_entry(key), self._flushing.last_entry(key))

    def entry_ids(self, key: int) -> set[int]:
        return set(self._active.entry_ids(key)) | set(self._flushing.entry_ids(key))

    def delete_ledger(self, key: int) -> None:
        with self._cond:
            self._active.delete_ledger(key)
            self._flushing.delete_ledger(key)
            self._cond.notify_all()

    def begin_flush(self) -> tuple[WriteCacheHalf, bool]:
        """The half to flush and whether it is a retry of a failed flush (then the active half is left
        in place and must be flushed next). Otherwise the halves swap. The caller serializes flushes."""
        with self._cond:
            if self._flushing.count:
                return self._flushing, True
            half, self._active = self._active, WriteCacheHalf(self._pool)
            self._flushing = half
            self._publish()
            self._cond.notify_all()
        self._announce_room()
        return half, False

    @property
    def halves(self) -> tuple[WriteCacheHalf, WriteCacheHalf]:
        """(active, flushing): where a read looks, in that order."""
        return self._active, self._flushing

    def _publish(self) -> None:
        if self.on_change is not None:
            self.on_change((self._active, self._flushing))

    def _announce_room(self) -> None:
        listener = self.room_listener
        if listener is not None and self._room_wanted:
            self._room_wanted = False
            refused, self._refused = self._refused, 0
            if refused:
                self.throttle_stats.ok_ns_many(refused, now_ns() - self._refused_since)
            listener()

    def end_flush(self) -> None:
        """The flushing half is in the entry log and indexed: drop it (its room opens for adds). Dropping
        a C half hands its arena segments to the pool: nothing to spread over GIL hand-overs."""
        with self._cond:
            self._flushing = WriteCacheHalf(self._pool)
            self._publish()
            self._cond.notify_all()
        self._announce_room()
