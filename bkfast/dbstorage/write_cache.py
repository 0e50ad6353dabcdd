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

Must never: do I/O, or block an add for longer than max_wait_s. Ledgers are named by an opaque int key
(bkfast.dbstorage.index.qualified_key); entry ids are ints. Sizes count each entry's bytes plus a fixed
per-entry overhead standing for the Python objects that hold it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from itertools import islice

from bkfast._stats import OpStats, now_ns
from bkfast.errors import StorageBusyError, WriteCacheFullError

__all__ = ["ENTRY_OVERHEAD", "WriteCache", "WriteCacheHalf"]

ENTRY_OVERHEAD = 64
"""Bytes charged per cached entry besides its data (dict slot and bytes object header)."""
LEDGER_OVERHEAD = 320
"""Bytes charged per ledger in a half (its _Ledger, entry dict, key and slot: ~300 B measured), so that a
half of many one-entry ledgers stays within its size (1,000,000 such ledgers held ~300 MB uncounted)."""


class _Ledger:
    __slots__ = ("entries", "last")

    def __init__(self):
        self.entries: dict[int, bytes] = {}
        self.last = -1


class WriteCacheHalf:
    """One half: {ledger key: {entry id: bytes}} plus each ledger's highest entry id."""

    __slots__ = ("ledgers", "size", "count")

    def __init__(self):
        self.ledgers: dict[int, _Ledger] = {}
        self.size = 0
        self.count = 0

    def put(self, key: int, entry_id: int, data: bytes) -> None:
        ledger = self.ledgers.get(key)
        if ledger is None:
            ledger = self.ledgers[key] = _Ledger()
            self.size += LEDGER_OVERHEAD
        old = ledger.entries.get(entry_id)
        ledger.entries[entry_id] = data
        if old is None:
            self.count += 1
            self.size += len(data) + ENTRY_OVERHEAD
        else:
            self.size += len(data) - len(old)
        if entry_id > ledger.last:
            ledger.last = entry_id

    def get(self, key: int, entry_id: int) -> bytes | None:
        ledger = self.ledgers.get(key)
        return None if ledger is None else ledger.entries.get(entry_id)

    def last_entry(self, key: int) -> int:
        ledger = self.ledgers.get(key)
        return -1 if ledger is None else ledger.last

    def entry_ids(self, key: int) -> list[int]:
        ledger = self.ledgers.get(key)
        return [] if ledger is None else list(ledger.entries)

    def delete_ledger(self, key: int) -> None:
        ledger = self.ledgers.pop(key, None)
        if ledger is not None:
            self.count -= len(ledger.entries)
            self.size -= sum(len(d) + ENTRY_OVERHEAD for d in ledger.entries.values()) + LEDGER_OVERHEAD

    def sorted_runs(self) -> Iterator[tuple[int, list[int], list[bytes]]]:
        """(ledger key, entry ids ascending, their data) for each ledger, by ascending key."""
        for key in sorted(self.ledgers):
            entries = self.ledgers[key].entries
            ids = sorted(entries)
            yield key, ids, [entries[i] for i in ids]


class WriteCache:
    """Active and flushing halves with a bounded wait for room."""

    def __init__(self, max_size_bytes: int, max_wait_s: float, request_flush: Callable[[], None]):
        self.half_size = max(1, max_size_bytes // 2)
        self.max_wait_s = max_wait_s
        self._request_flush = request_flush
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._active = WriteCacheHalf()
        self._flushing = WriteCacheHalf()
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
        need = len(data) + ENTRY_OVERHEAD
        # The common case, WriteCacheHalf.put inlined, under the bare lock (a Condition's __enter__ is
        # Python code): this runs once per add on the reactor thread.
        with self._lock:
            active = self._active
            ledger = active.ledgers.get(key)
            if active.size + need + (LEDGER_OVERHEAD if ledger is None else 0) <= self.half_size:
                if ledger is None:
                    ledger = active.ledgers[key] = _Ledger()
                    active.size += LEDGER_OVERHEAD
                entries = ledger.entries
                old = entries.get(entry_id)
                entries[entry_id] = data
                if old is None:
                    active.count += 1
                    active.size += need
                else:
                    active.size += len(data) - len(old)
                if entry_id > ledger.last:
                    ledger.last = entry_id
                return
        need += LEDGER_OVERHEAD          # at most: the ledger may be new to the half it goes to
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
        self._wait_and_put(key, entry_id, data, need)

    def _wait_and_put(self, key: int, entry_id: int, data: bytes, need: int) -> None:
        deadline = time.monotonic() + self.max_wait_s
        t0 = now_ns()
        self._request_flush()
        with self._cond:
            while True:
                active = self._active
                if active.size + need <= self.half_size:
                    active.put(key, entry_id, data)
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
        # (WriteCacheHalf.get inlined: this is on every read.)
        ledger = self._active.ledgers.get(key)
        if ledger is not None:
            data = ledger.entries.get(entry_id)
            if data is not None:
                return data
        ledger = self._flushing.ledgers.get(key)
        return None if ledger is None else ledger.entries.get(entry_id)

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
            half, self._active = self._active, WriteCacheHalf()
            self._flushing = half
            self._cond.notify_all()
        self._announce_room()
        return half, False

    def _announce_room(self) -> None:
        listener = self.room_listener
        if listener is not None and self._room_wanted:
            self._room_wanted = False
            refused, self._refused = self._refused, 0
            if refused:
                self.throttle_stats.ok_ns_many(refused, now_ns() - self._refused_since)
            listener()

    def end_flush(self) -> None:
        """The flushing half is in the entry log and indexed: drop it (its room opens for adds)."""
        with self._cond:
            flushed, self._flushing = self._flushing, WriteCacheHalf()
            self._cond.notify_all()
        self._announce_room()
        # Freeing a half (up to hundreds of thousands of entries) takes milliseconds: do it after the
        # lock is released, so adds interleave with it instead of queueing on the lock (profiled: 11%
        # of the reactor thread's time was spent waiting here), and in slices handing the GIL over in
        # between (one dealloc of a whole half held the GIL ~7 ms per 170k entries).
        _free_in_slices(flushed)


FREE_SLICE = 4096
"""Entries freed per slice when a flushed half is dropped."""


def _free_in_slices(half: WriteCacheHalf) -> None:
    ledgers = half.ledgers
    while ledgers:
        _, ledger = ledgers.popitem()
        entries = ledger.entries
        while len(entries) > FREE_SLICE:
            for entry_id in list(islice(entries, FREE_SLICE)):
                del entries[entry_id]
            time.sleep(0)
        entries.clear()
