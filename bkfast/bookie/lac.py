"""What the bookie knows of each ledger's last-add-confirmed (LAC), and who waits for it to move.

Owns: per ledger, the highest LAC seen (the LAC piggy-backed on each entry as it reaches ledger storage,
and explicit LACs), when it last moved (the v3 `lacUpdateTimestamp`), and the long-poll readers waiting
for it to pass a value. A ledger is tracked from the first time a reader asks about it; adds to ledgers
nobody reads cost one dictionary miss. Tracked ledgers are dropped with the ledger, and when idle
(no reader asked, no waiter) for `idle_timeout_s`, so memory follows the ledgers being read, not every
ledger ever written. Also where an explicit-LAC buffer's LAC is read from (lac_of_buffer); an entry's
piggy-backed LAC is read by bkfast.storage.entry_header.entry_lac.

Waking waiters when the entry reaches storage, before its journal sync, is safe: the LAC a writer
piggy-backs is already acknowledged by an ack quorum, so every entry up to it is durable elsewhere
(Java's bookie does the same, through its FileInfo/LedgerDescriptor watchers).

Who else must know which ledgers are tracked: `on_tracking(scope_id, ledger_id, tracked)` is called when a
ledger starts and stops being tracked (the Bookie's add fast path then reports the LACs of its adds).

Threads: the reactor thread only (the Bookie updates it from add_entries / set_explicit_lac, which the
server calls on the reactor); waiters are called synchronously from `advance`.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from bkfast.errors import BKNoSuchEntryException

DEFAULT_IDLE_TIMEOUT_S = 300.0
_LONG = struct.Struct(">q")


def lac_of_buffer(buf) -> int:
    """The LAC inside an explicit-LAC buffer (spec §3.5; scoped layout when the top bit is set)."""
    if buf and buf[0] & 0x80:
        return _LONG.unpack_from(buf, 17)[0] if len(buf) >= 25 else -1
    return _LONG.unpack_from(buf, 8)[0] if len(buf) >= 16 else -1


class LacWaiter:
    """A long-poll read waiting for a ledger's LAC to pass `previous_lac`; `callback()` runs once."""

    __slots__ = ("previous_lac", "callback", "done", "timer")

    def __init__(self, previous_lac: int, callback: Callable[[], None]):
        self.previous_lac = previous_lac
        self.callback = callback
        self.done = False
        self.timer = None

    def fire(self) -> None:
        if self.done:
            return
        self.done = True
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.callback()


class _LedgerLac:
    __slots__ = ("lac", "update_ms", "waiters", "used")

    def __init__(self, lac: int, now: float):
        self.lac = lac
        self.update_ms = int(time.time() * 1000)
        self.waiters: list[LacWaiter] = []
        self.used = now


class LacTracker:
    """(scope_id, ledger_id) -> known LAC, last update time and long-poll waiters."""

    def __init__(self, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, clock: Callable[[], float] = time.monotonic):
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._ledgers: dict[tuple[int, int], _LedgerLac] = {}
        self._next_sweep = clock() + idle_timeout_s
        self.on_tracking: Callable[[int, int, bool], None] | None = None

    @property
    def tracked(self) -> dict:
        """The tracked ledgers' keys (a dict: `key in tracked` is the hot path's membership test)."""
        return self._ledgers

    def __len__(self) -> int:
        return len(self._ledgers)

    def __contains__(self, key: tuple[int, int]) -> bool:
        return key in self._ledgers

    def known(self, scope_id: int, ledger_id: int, load: Callable[[], int]) -> int:
        """The LAC the bookie knows; `load()` computes it from storage the first time (may raise)."""
        now = self._clock()
        state = self._ledgers.get((scope_id, ledger_id))
        if state is None:
            if now >= self._next_sweep:
                self._sweep(now)
            # Told before the load: an add a run takes from now on reports its LAC, and one taken before
            # is in storage when load() reads it (the add worker's runs end before on_tracking returns).
            if self.on_tracking is not None:
                self.on_tracking(scope_id, ledger_id, True)
            try:
                lac = load()
            except BaseException:
                if self.on_tracking is not None:
                    self.on_tracking(scope_id, ledger_id, False)
                raise
            state = self._ledgers[(scope_id, ledger_id)] = _LedgerLac(lac, now)
        state.used = now
        return state.lac

    def update_time_ms(self, scope_id: int, ledger_id: int) -> int:
        state = self._ledgers.get((scope_id, ledger_id))
        return state.update_ms if state is not None else int(time.time() * 1000)

    def advance(self, scope_id: int, ledger_id: int, lac: int) -> None:
        """A LAC reached storage: remember it if it is higher, and wake the waiters it satisfies."""
        state = self._ledgers.get((scope_id, ledger_id))
        if state is not None and lac > state.lac:
            self._moved(state, lac, int(time.time() * 1000))

    def advance_many(self, scope_id: int, lacs: list[tuple[int, int]]) -> None:
        """advance() for each (ledger_id, lac) of one add run, with one clock read."""
        now_ms = int(time.time() * 1000)
        ledgers = self._ledgers
        for ledger_id, lac in lacs:
            state = ledgers.get((scope_id, ledger_id))
            if state is not None and lac > state.lac:
                self._moved(state, lac, now_ms)

    @staticmethod
    def _moved(state: _LedgerLac, lac: int, now_ms: int) -> None:
        state.lac = lac
        state.update_ms = now_ms
        waiters = state.waiters
        if not waiters:
            return
        still = []
        for waiter in waiters:
            if waiter.done:
                continue
            if lac > waiter.previous_lac:
                waiter.fire()
            else:
                still.append(waiter)
        state.waiters = still

    def watch(self, scope_id: int, ledger_id: int, waiter: LacWaiter) -> None:
        """Wait for the LAC to pass waiter.previous_lac (the ledger must be tracked: call known() first)."""
        self._ledgers[(scope_id, ledger_id)].waiters.append(waiter)

    def unwatch(self, scope_id: int, ledger_id: int, waiter: LacWaiter) -> None:
        state = self._ledgers.get((scope_id, ledger_id))
        if state is not None and waiter in state.waiters:
            state.waiters.remove(waiter)

    def drop(self, scope_id: int, ledger_id: int) -> None:
        """The ledger was deleted: forget it, and answer its waiters (they read the ledger's new state)."""
        state = self._ledgers.pop((scope_id, ledger_id), None)
        if state is not None:
            if self.on_tracking is not None:
                self.on_tracking(scope_id, ledger_id, False)
            for waiter in state.waiters:
                waiter.fire()

    def _sweep(self, now: float) -> None:
        cutoff = now - self.idle_timeout_s
        idle = [key for key, state in self._ledgers.items() if state.used < cutoff and not state.waiters]
        for key in idle:
            del self._ledgers[key]
            if self.on_tracking is not None:
                self.on_tracking(*key, False)
        self._next_sweep = now + self.idle_timeout_s


class LacReads:
    """Mixed into the Bookie: the LAC its readers see (maxLAC, long poll), over its `lac` tracker and its
    read view (`storage_full`)."""

    def known_lac(self, scope_id: int, ledger_id: int) -> int:
        """max(LAC of the last stored entry, explicit LAC), tracked from the first ask on (one dictionary
        lookup per read after that). Raises BKNoSuchLedgerExistsException."""
        return self.lac.known(scope_id, ledger_id, lambda: self._load_lac(scope_id, ledger_id))

    def _load_lac(self, scope_id: int, ledger_id: int) -> int:
        lac = -1
        try:
            lac = self.storage_full.get_last_add_confirmed(ledger_id, scope_id)
        except BKNoSuchEntryException:
            pass
        explicit = self.get_explicit_lac(ledger_id, scope_id)
        if explicit:
            lac = max(lac, lac_of_buffer(explicit))
        return lac

    def lac_update_time(self, scope_id: int, ledger_id: int) -> int:
        return self.lac.update_time_ms(scope_id, ledger_id)

    def watch_lac(self, scope_id: int, ledger_id: int, previous_lac: int, callback) -> LacWaiter:
        """callback() once the known LAC passes previous_lac (call known_lac first)."""
        waiter = LacWaiter(previous_lac, callback)
        self.lac.watch(scope_id, ledger_id, waiter)
        return waiter

    def unwatch_lac(self, scope_id: int, ledger_id: int, waiter: LacWaiter) -> None:
        self.lac.unwatch(scope_id, ledger_id, waiter)
