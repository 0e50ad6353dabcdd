"""RollGuard: what keeps a stream writer's failing segments from becoming unbounded work and metadata.

When a segment fails (an add error, a ledger fenced by a reader), the writer recovers it and rolls to
a new one. If the failure follows the writes rather than the segment (bookies that refuse every add,
say), each roll is one more ledger and one more segment in the stream's metadata, and rolling at once
and forever is how a stream znode grows until ZooKeeper runs out of memory. So, counting from the last
write acknowledged:

- backoff: the n-th roll after a failed segment first waits `roll_backoff_ms * 2**(n-1)` (at most
  MAX_BACKOFF_S);
- give up: a failed segment beyond `max_failed_rolls` of them stops the writer (its pending writes
  fail with StreamWriterStoppedError, naming the last error);
- rate: at most `max_failed_segments_per_minute` segments are created within any 60 s; the roll that
  would create one more waits until the oldest of them is a minute old.

An acknowledged write resets all three. Closing the writer hurries it: close() flushes, so a backoff
ends at once and the roll goes ahead (still bounded by `max_failed_rolls`), but a roll the rate holds
stops the writer instead, since close() must not sit out the rest of a minute.
"""

from __future__ import annotations

import time
from collections import deque

from twisted.internet import defer

from bkfast.errors import StreamWriterStoppedError

__all__ = ["RollGuard", "MAX_BACKOFF_S", "RATE_WINDOW_S"]

MAX_BACKOFF_S = 30.0
RATE_WINDOW_S = 60.0


class RollGuard:
    def __init__(self, reactor, name: str, max_failed_rolls: int, roll_backoff_ms: float,
                 max_segments_per_minute: int):
        self.reactor = reactor
        self.name = name
        self.max_failed_rolls = max_failed_rolls
        self.backoff_s = roll_backoff_ms / 1000.0
        self.max_segments = max_segments_per_minute
        self.failed_rolls = 0
        self._created: deque[float] = deque()       # when each segment since the last success was created
        self._sleep: tuple | None = None            # (DelayedCall, Deferred, held by the rate?) of a wait
        self._interrupted = False

    def succeeded(self) -> None:
        """A write was acknowledged: the writer is making progress."""
        self.failed_rolls = 0
        self._created.clear()

    def created(self) -> None:
        """The writer created a segment."""
        self._created.append(time.monotonic())

    def may_roll(self) -> bool:
        """A segment failed: True if the writer may roll to a new one, False if it must stop."""
        self.failed_rolls += 1
        return self.failed_rolls <= self.max_failed_rolls

    def wait_before_new_segment(self, failed: bool) -> defer.Deferred:
        """Fires when the writer may create its next segment (`failed`: the roll follows a failed one);
        fails with StreamWriterStoppedError if the rate holds it while the writer is closing."""
        backoff = min(self.backoff_s * 2 ** (self.failed_rolls - 1), MAX_BACKOFF_S) if failed else 0.0
        now = time.monotonic()
        while self._created and self._created[0] <= now - RATE_WINDOW_S:
            self._created.popleft()
        rate = self._created[0] + RATE_WINDOW_S - now if len(self._created) >= self.max_segments else 0.0
        if self._interrupted:
            return defer.fail(self._closed_error()) if rate > 0 else defer.succeed(None)
        delay = max(backoff, rate)
        if delay <= 0:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._sleep = (self.reactor.callLater(delay, self._woke, d), d, rate > 0)
        return d

    def _woke(self, d: defer.Deferred) -> None:
        self._sleep = None
        d.callback(None)

    def interrupt(self) -> None:
        """The writer is closing: no more backoff; a wait for the rate fails (now, and from now on)."""
        self._interrupted = True
        if self._sleep is not None:
            call, d, held_by_rate = self._sleep
            self._sleep = None
            if call.active():
                call.cancel()
            if held_by_rate:
                d.errback(self._closed_error())
            else:
                d.callback(None)

    def _closed_error(self) -> StreamWriterStoppedError:
        return StreamWriterStoppedError(
            f"stream {self.name!r}: writer closed while waiting to roll after {self.failed_rolls} failed "
            f"segment(s) with no write acknowledged")
