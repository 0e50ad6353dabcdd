"""The client's `throttle`: at most N adds per second per ledger handle, as Java's LedgerHandle does
(a RateLimiter of `throttle` permits per second; 0 turns it off).

Java blocks the adding thread until a permit is free. The reactor must never block, so here an add
without a permit waits in a FIFO queue and is released when its permit comes; entry ids are still
given out at call time and adds keep their order. Permits accrue at the rate while the handle is idle,
up to one second's worth (Guava's SmoothBursty with its default burst of one second).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AddThrottle", "WaitingAdd"]


@dataclass(slots=True)
class WaitingAdd:
    """An add that has its entry id but not yet its permit: what the handle needs to send it, or to
    fail it if the handle fails first (`callback(error, entry_id, ctx)`, or else `deferred`)."""

    entry_id: int
    data: Any
    callback: Callable | None
    ctx: Any
    deferred: Any


class AddThrottle:
    """Token bucket of `rate` permits per second; `submit(add)` calls `send(add)` now or when its
    permit comes, in submission order. The entry ids of the adds still waiting are known in O(1)
    (`entry_id in throttle`), so a WriteHandleAdv can refuse a duplicate id without a scan."""

    def __init__(self, rate: float, reactor, send: Callable[[WaitingAdd], object],
                 clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError("throttle rate must be > 0")
        self.rate = float(rate)
        self.reactor = reactor
        self.send = send
        self.clock = clock
        self.capacity = max(1.0, self.rate)          # one second of permits
        self.permits = 1.0                           # the first add goes at once (as Guava's first acquire)
        self.updated = clock()
        self.waiting: deque[WaitingAdd] = deque()
        self.waiting_ids: set[int] = set()
        self.release_call = None

    def __len__(self) -> int:
        return len(self.waiting)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self.waiting_ids

    def _refill(self) -> None:
        now = self.clock()
        self.permits = min(self.capacity, self.permits + (now - self.updated) * self.rate)
        self.updated = now

    def submit(self, add: WaitingAdd) -> None:
        if not self.waiting:
            self._refill()
            if self.permits >= 1.0:
                self.permits -= 1.0
                self.send(add)
                return
        self.waiting.append(add)
        self.waiting_ids.add(add.entry_id)
        self._schedule()

    def _schedule(self) -> None:
        if self.release_call is None and self.waiting:
            delay = max(0.0, (1.0 - self.permits) / self.rate)
            self.release_call = self.reactor.callLater(delay, self._release)

    def _release(self) -> None:
        self.release_call = None
        self._refill()
        while self.waiting and self.permits >= 1.0:
            self.permits -= 1.0
            add = self.waiting.popleft()
            self.waiting_ids.discard(add.entry_id)
            self.send(add)
        self._schedule()

    def drop(self) -> list[WaitingAdd]:
        """Forget the waiting adds (the handle failed); returns them, oldest first."""
        if self.release_call is not None and self.release_call.active():
            self.release_call.cancel()
        self.release_call = None
        adds, self.waiting = list(self.waiting), deque()
        self.waiting_ids.clear()
        return adds
