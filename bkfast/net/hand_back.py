"""Results that worker threads hand back to the reactor, delivered in batches.

Owns: the list of results posted and not yet delivered, and whether a delivery is scheduled. Whatever has
been posted when the reactor gets to it is delivered in ONE `callFromThread` (one wake-up of the reactor
for a burst of results), each result to `deliver_one` in the order posted, then `after_delivery()` once
(the coalesced flush of the connections the results answered). The read pool (bkfast.net.read_pool) and
the add worker (bkfast.net.add_workers) hand back through it.

Must never: run `deliver_one` off the reactor, or let one failing result stop the others of its batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["HandBack"]


class HandBack:
    """post(result) from any thread; deliver_one(result) later on the reactor (see the module)."""

    def __init__(self, reactor, deliver_one: Callable[[Any], object], after_delivery: Callable[[], object],
                 what: str):
        self._reactor = reactor
        self._deliver_one = deliver_one
        self._after_delivery = after_delivery
        self._what = what                   # for the log line of a result whose delivery raised
        self._lock = threading.Lock()
        self._posted: list = []
        self._scheduled = False

    def post(self, result) -> None:
        with self._lock:
            self._posted.append(result)
            schedule = not self._scheduled
            self._scheduled = True
        if schedule:
            self._reactor.callFromThread(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            posted, self._posted = self._posted, []
            self._scheduled = False
        deliver_one = self._deliver_one
        for result in posted:
            try:
                deliver_one(result)
            except Exception:
                log.exception("delivering %s failed", self._what)
        self._after_delivery()
