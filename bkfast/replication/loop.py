"""The one thread an AutoRecovery component (the auditor, the replication worker) runs its loop in, and the
registered bookies it judges others by.

Owns the thread's lifecycle: start, a stop that wakes the loop and joins it (never from the loop itself), the
interruptible sleep between rounds. Must never: run in the reactor thread.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable

from bkfast.errors import MetadataError
from bkfast.threads import NamedThread

__all__ = ["ThreadLoop", "available_bookies"]

_TIMEOUT_S = 60.0


class ThreadLoop(abc.ABC):
    """A component whose `_run` loops in one daemon thread named `thread_name` until `stop()`."""

    thread_name = "autorecovery"
    join_s = 30.0

    def __init__(self):
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def _run(self) -> None:
        """The thread's body: loop until self._stop is set (self._wake interrupts a wait)."""

    def start(self) -> None:
        self._thread = NamedThread(self._run, self.thread_name)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()


def available_bookies(driver, call: Callable) -> set[str]:
    """The registered bookies, writable and read-only (a read-only bookie still serves its entries)."""
    writable = set(call(driver.get_bookies, False, timeout=_TIMEOUT_S))
    try:
        read_only = set(call(driver.get_bookies, True, timeout=_TIMEOUT_S))
    except MetadataError:                     # a cluster made without the read-only directory
        read_only = set()
    return writable | read_only
