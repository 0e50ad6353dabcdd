"""Free disk space of the writable bookies, for placement weighted by it (Java's BookieInfoReader).

With diskWeightBasedPlacementEnabled the client asks every writable bookie for its free and total disk space
(GET_BOOKIE_INFO, v3) when it starts, when bookies join, and every getBookieInfoIntervalSeconds; a bookie that
does not answer is asked again after getBookieInfoRetryIntervalSeconds. Each round ends by handing the free
space per bookie to the placement policy (`set_free_disk_space`), whose picks then follow Java's weights
(placement.disk_weights). Bookies that left are forgotten. Reactor thread only; never blocks.
"""

from __future__ import annotations

import logging

from twisted.internet import defer, task

__all__ = ["DiskWeights"]

log = logging.getLogger(__name__)


class DiskWeights:
    """See the module docstring. `bk` is the AsyncBookKeeper whose bookies and placement policy it serves."""

    def __init__(self, bk):
        self.bk = bk
        self.interval_s = bk.settings.bookie_info_interval_s
        self.retry_s = bk.settings.bookie_info_retry_interval_s
        self.free: dict[str, int] = {}
        self.rounds = 0
        self._loop: task.LoopingCall | None = None
        self._retry = None
        self._stopped = False

    def start(self) -> None:
        self._loop = task.LoopingCall(self.refresh)
        self._loop.clock = self.bk.reactor
        self._loop.start(self.interval_s, now=True)

    def stop(self) -> None:
        self._stopped = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()

    def on_bookies(self, writable) -> None:
        """Bookies changed: forget the gone ones, ask the new ones."""
        for gone in set(self.free) - set(writable):
            del self.free[gone]
        new = [b for b in writable if b not in self.free]
        if new and not self._stopped:
            self.refresh(new)

    def refresh(self, bookies=None) -> defer.Deferred:
        """Ask `bookies` (default: every writable one); fires when the round is done."""
        wanted = sorted(bookies if bookies is not None else self.bk.writable_bookies)
        asks = [self.bk.bookie_client.get_bookie_info(b) for b in wanted]
        d = defer.DeferredList(asks, consumeErrors=True)
        d.addCallback(self._answers, wanted)
        return d

    def _answers(self, results, wanted) -> None:
        if self._stopped:
            return
        missing = []
        for bookie, (ok, value) in zip(wanted, results, strict=True):
            if ok:
                self.free[bookie] = max(0, int(value[0]))
            else:
                missing.append(bookie)
                log.info("bookie %s did not tell its free disk space (%s); asking again in %d s", bookie,
                         value.getErrorMessage(), self.retry_s)
        self.rounds += 1
        self.bk.placement.set_free_disk_space({b: f for b, f in self.free.items() if b in self.bk.writable_bookies})
        if missing and (self._retry is None or not self._retry.active()):
            self._retry = self.bk.reactor.callLater(self.retry_s, self.refresh, missing)
