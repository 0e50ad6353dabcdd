"""The thread labels of Java's thread-scoped stats (`thread`, `threadPool`), for ledger storage's stats.

Java's ThreadRegistry knows which pool each bookie thread belongs to, and a thread-scoped stat records
under the calling thread's (pool, index); a thread nobody registered records under `?`/`?`. bkfast's
threads are told apart the same way: a thread may register itself (`register_thread`), and otherwise its
name says it: the read pool's `read-<i>` is Java's `BookieReadThreadPool` thread i. A DbLedgerStorage
flush thread registers as `db-storage` thread 0 (each directory has its own, as in Java). Every other
thread (the reactor, the checkpoint thread, a test's) is `?`/`?`, as an unregistered Java thread is.

A read the Bookie serves for a fencing or recovery request runs under `high_priority()`: it then records
as Java's `BookieHighPriorityThread` (thread index kept), where Java's high-priority pool would run it.

Must never: cost more than a thread-local lookup per call once a thread's labels are known.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

__all__ = ["UNKNOWN", "READ_POOL", "HIGH_PRIORITY_POOL", "WRITE_POOL", "DB_STORAGE_POOL", "register_thread",
           "thread_labels", "high_priority", "ThreadScoped"]

UNKNOWN = ("?", "?")
READ_POOL = "BookieReadThreadPool"
HIGH_PRIORITY_POOL = "BookieHighPriorityThread"
WRITE_POOL = "BookieWriteThreadPool"
DB_STORAGE_POOL = "db-storage"

# The read pool's threads are read-<i> (bkfast.threads.READ); a DbLedgerStorage flush thread registers itself.
_NAMED = ((re.compile(r"read-(\d+)$"), READ_POOL),)
_local = threading.local()


def _from_name(name: str) -> tuple[str, str]:
    for pattern, pool in _NAMED:
        match = pattern.match(name)
        if match is not None:
            return pool, match.group(1) or "0"
    return UNKNOWN


def register_thread(pool: str, index: int) -> None:
    """The calling thread is thread `index` of `pool` (Java's ThreadRegistry.register)."""
    _local.labels = (pool, str(index))


def thread_labels() -> tuple[str, str]:
    """(threadPool, thread) of the calling thread."""
    labels = getattr(_local, "labels", None)
    if labels is None:
        labels = _local.labels = _from_name(threading.current_thread().name)
    if getattr(_local, "high", False):
        return HIGH_PRIORITY_POOL, labels[1] if labels is not UNKNOWN else "0"
    return labels


class high_priority:  # noqa: N801 - used as a `with` statement, like a function
    """`with high_priority():` the calling thread records as Java's BookieHighPriorityThread."""

    __slots__ = ("_was",)

    def __enter__(self) -> high_priority:
        self._was = getattr(_local, "high", False)
        _local.high = True
        return self

    def __exit__(self, *exc) -> None:
        _local.high = self._was


class ThreadScoped:
    """One bundle of stats per (threadPool, thread): `factory(logger.thread_scoped(pool, thread))`, made on
    a thread's first call and then found with one dictionary lookup."""

    __slots__ = ("_logger", "_factory", "_bundles", "_lock")

    def __init__(self, logger, factory: Callable[[object], object]):
        self._logger = logger
        self._factory = factory
        self._bundles: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def get(self, labels: tuple[str, str] | None = None):
        """The bundle of the calling thread (or of `labels`)."""
        labels = labels or thread_labels()
        bundle = self._bundles.get(labels)
        if bundle is None:
            with self._lock:
                bundle = self._bundles.get(labels)
                if bundle is None:
                    bundle = self._bundles[labels] = self._factory(self._logger.thread_scoped(*labels))
        return bundle
