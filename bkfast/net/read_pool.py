"""The bookie's read pool: reads that ledger storage cannot answer from memory run here, off the reactor.

Owns: `numReadWorkerThreads` threads, each with its own queue. A read is queued on the thread chosen by
its ledger (as Java's ordered read executor), so the reads of one ledger run in arrival order: the
protocol relies on it for fencing reads and long-poll answers. Finished reads go back to the reactor in
batches (bkfast.net.hand_back): whatever has finished when the reactor gets to it is delivered in ONE
callFromThread, then the dirty connections are flushed once (the same coalesced writer as journal
completions).

Stats: each thread counts the reads it ran, those that raised something other than a BKError (a bug,
not an answer) and those refused because its queue was full; `register_gauges` exposes them as Java's
OrderedExecutor does (`thread_executor_*{thread="BookieReadThreadPool-OrderedExecutor-<i>-0"}`, and the
pool's `_threads` / `_max_queue_size`), read at scrape time from another thread.

Must never: touch a connection from a pool thread (results are delivered on the reactor), or let one
thread's queue grow past `maxPendingReadRequestsPerThread` (the caller gets False and answers
ETOOMANYREQUESTS).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import cast

from bkfast.errors import BKError
from bkfast.net.hand_back import HandBack
from bkfast.threads import READ, NamedThread

_STOP = object()
_Job = tuple[Callable[[], object], Callable[[object], None]]    # (read, deliver)


class ReadPool:
    """submit(ledger_key, read, deliver): deliver(result or exception) runs later on the reactor."""

    def __init__(self, reactor, threads: int, max_pending_per_thread: int, after_delivery: Callable[[], None]):
        self.reactor = reactor
        self.max_pending_per_thread = max_pending_per_thread if max_pending_per_thread > 0 else 1 << 62
        self.max_queue_size = max_pending_per_thread if max_pending_per_thread > 0 else -1   # Java's: -1 unbounded
        self._queues: list[queue.SimpleQueue[_Job | object]] = [     # jobs, or _STOP
            queue.SimpleQueue() for _ in range(max(1, threads))]
        self._pending = [0] * len(self._queues)
        # Per thread: reads run, reads that raised a non-BKError (each written by its own thread only),
        # reads refused with a full queue (reactor).
        self.completed = [0] * len(self._queues)
        self.failed = [0] * len(self._queues)
        self.rejected = [0] * len(self._queues)
        self._hand_back = HandBack(reactor, self._delivered, after_delivery, "a read")
        self._threads = [NamedThread(self._work, f"{READ}-{i}", args=(i,))
                         for i in range(len(self._queues))]
        for t in self._threads:
            t.start()

    @property
    def size(self) -> int:
        return len(self._threads)

    def thread_of(self, ledger_key: int) -> int:
        """The index of the thread that runs the reads of this ledger."""
        return ledger_key % len(self._queues)

    def submit(self, ledger_key: int, read: Callable[[], object], deliver: Callable[[object], None]) -> bool:
        """Queue `read` on the ledger's thread (reactor thread only). False: that thread's queue is full."""
        i = ledger_key % len(self._queues)
        if self._pending[i] >= self.max_pending_per_thread:
            self.rejected[i] += 1
            return False
        self._pending[i] += 1
        self._queues[i].put((read, deliver))
        return True

    def stop(self) -> None:
        for q in self._queues:
            q.put(_STOP)
        for t in self._threads:
            t.join(timeout=5)

    def _work(self, i: int) -> None:
        q = self._queues[i]
        while True:
            job = q.get()
            if job is _STOP:
                return
            read, deliver = cast(_Job, job)     # not _STOP: a job
            try:
                result = read()
            except BaseException as error:  # delivered as the read's outcome
                result = error
                if not isinstance(error, BKError):
                    self.failed[i] += 1
            self.completed[i] += 1
            self._hand_back.post((i, deliver, result))

    def _delivered(self, done: tuple) -> None:
        """On the reactor: a read finished on thread i."""
        i, deliver, result = done
        self._pending[i] -= 1
        deliver(result)

    def register_gauges(self, logger, pool_name: str) -> None:
        """Java's executor gauges of this pool under `logger` (scope bookkeeper_server): `<pool>_threads`,
        `<pool>_max_queue_size`, and per thread `thread_executor_{completed,queue,tasks_completed,
        tasks_failed,tasks_rejected}{thread="<pool>-OrderedExecutor-<i>-0"}`."""
        logger.gauge(f"{pool_name}_threads", lambda: len(self._threads))
        logger.gauge(f"{pool_name}_max_queue_size", lambda: self.max_queue_size)
        for i, q in enumerate(self._queues):
            thread = logger.scope_label("thread", f"{pool_name}-OrderedExecutor-{i}-0")
            thread.gauge("thread_executor_completed", lambda i=i: self.completed[i])
            thread.gauge("thread_executor_queue", q.qsize)
            thread.gauge("thread_executor_tasks_completed", lambda i=i: self.completed[i] - self.failed[i])
            thread.gauge("thread_executor_tasks_failed", lambda i=i: self.failed[i])
            thread.gauge("thread_executor_tasks_rejected", lambda i=i: self.rejected[i])
