"""Java's request stats of the bookie server (4.16.7's RequestStats, scope `bookkeeper_server`), recorded
as its BookieRequestProcessor and *Processor classes record them:

- `X_REQUEST`: from the request's arrival (the socket read that brought it) to its response written
  (`success="false"` when the status is not EOK); `X`: the processing itself (for adds: admission, write
  cache, journal enqueue, until the journal made it durable).
- READ_ENTRY_SCHEDULING_DELAY: arrival to the start of a read's processing (on its read pool thread);
  WRITE_THREAD_QUEUED_LATENCY (v2 adds, as Java): arrival to the start of an add's processing, which
  includes the time it was held while the connection waited for room.
- ADD_ENTRY_BLOCKED_WAIT / READ_ENTRY_BLOCKED_WAIT: how long a connection stopped taking requests because
  of too many adds (write cache or journal full, too many in flight) or too many reads on the pool;
  CHANNEL_WRITE: how long a connection's output was paused because the peer did not read (failure: it
  was disconnected for it). ADD_ENTRY_REJECTED / READ_ENTRY_REJECTED: ETOOMANYREQUESTS answers.

bkfast's threads as Java's (docs/metrics.md): the reactor does what Java's BookieWriteThreadPool (one thread
by default) does, so stats it records carry {threadPool="BookieWriteThreadPool", thread="0"}: adds, and
the reads it answers from memory (and every read when numReadWorkerThreads=0); a journal's completions
(its force-write) carry {threadPool="ForceWriteThread", thread="0"}; the read pool's thread i
{threadPool="BookieReadThreadPool", thread="i"}. There is no high-priority pool (fencing reads go to the
read pool).

Cost: nothing here is per request on the add or memory-read paths: one timestamp per socket read, and one
call per batch of requests that share their arrival and completion (`ok_ns_many`). A disabled registry
hands out stats that record nothing.
"""

from __future__ import annotations

from bkfast.stats import OpStats, StatsLogger, now_ns

__all__ = ["RequestStats", "WRITE_POOL", "READ_POOL", "HIGH_PRIORITY_POOL", "FORCE_WRITE_THREAD"]

WRITE_POOL = "BookieWriteThreadPool"
READ_POOL = "BookieReadThreadPool"
HIGH_PRIORITY_POOL = "BookieHighPriorityThread"
FORCE_WRITE_THREAD = "ForceWriteThread"


def record(stat: OpStats, ok: bool, since_ns: int, n: int = 1) -> None:
    """n events that began at since_ns and ended now, successful or not."""
    elapsed = now_ns() - since_ns
    if ok:
        stat.ok_ns_many(n, elapsed)
    else:
        stat.fail_ns_many(n, elapsed)


class RequestStats:
    """The `bookkeeper_server` stats of one server; `bookie` (optional) gives bkfast's own metrics
    (`bookie.metrics`, set later by the service) their per-batch add counts."""

    def __init__(self, root: StatsLogger, read_threads: int, bookie=None):
        self.bookie = bookie
        self.logger = server = root.scope("bookkeeper_server")
        reactor = server.thread_scoped(WRITE_POOL, 0)
        op = server.op_stats
        self.add_request = op("ADD_ENTRY_REQUEST")
        self.add_entry = reactor.op_stats("ADD_ENTRY")            # processed (refused) on the reactor
        self.add_entry_durable = server.thread_scoped(FORCE_WRITE_THREAD, 0).op_stats("ADD_ENTRY")
        self.write_queued = reactor.op_stats("WRITE_THREAD_QUEUED_LATENCY")
        self.add_rejected = server.counter("ADD_ENTRY_REJECTED")
        self.add_blocked_wait = op("ADD_ENTRY_BLOCKED_WAIT")
        self.read_request = op("READ_ENTRY_REQUEST")
        self.read_entry_reactor = reactor.op_stats("READ_ENTRY")
        self.read_entry_pool = [server.thread_scoped(READ_POOL, i).op_stats("READ_ENTRY")
                                for i in range(read_threads)]
        self.read_scheduling_delay = op("READ_ENTRY_SCHEDULING_DELAY")
        self.read_rejected = server.counter("READ_ENTRY_REJECTED")
        self.read_blocked_wait = op("READ_ENTRY_BLOCKED_WAIT")
        self.read_last_entry_noentry = server.counter("READ_LAST_ENTRY_NOENTRY_ERROR")
        self.fence_request, self.fence_read, self.fence_wait = (
            op("READ_ENTRY_FENCE_REQUEST"), op("READ_ENTRY_FENCE_READ"), op("READ_ENTRY_FENCE_WAIT"))
        self.long_poll_request, self.long_poll_pre_wait = (op("READ_ENTRY_LONG_POLL_REQUEST"),
                                                           op("READ_ENTRY_LONG_POLL_PRE_WAIT"))
        self.long_poll_wait, self.long_poll_read = op("READ_ENTRY_LONG_POLL_WAIT"), op("READ_ENTRY_LONG_POLL_READ")
        self.read_lac, self.read_lac_request = op("READ_LAC"), op("READ_LAC_REQUEST")
        self.write_lac, self.write_lac_request = op("WRITE_LAC"), op("WRITE_LAC_REQUEST")
        self.force_ledger, self.force_ledger_request = op("FORCE_LEDGER"), op("FORCE_LEDGER_REQUEST")
        self.bookie_info, self.bookie_info_request = op("GET_BOOKIE_INFO"), op("GET_BOOKIE_INFO_REQUEST")
        self.entries_of_ledger = op("GET_LIST_OF_ENTRIES_OF_LEDGER")
        self.entries_of_ledger_request = op("GET_LIST_OF_ENTRIES_OF_LEDGER_REQUEST")
        self.channel_write = op("CHANNEL_WRITE")
        # The reactor as the write pool's thread 0 (thread_executor_* of BookieWriteThreadPool-OrderedExecutor-0-0).
        self.reactor_tasks = 0          # add requests processed
        self.reactor_failed = 0         # adds of batches that raised (a bug; they are answered EIO)
        self.reactor_rejected = 0       # adds refused before processing (too many pending)

    # --- adds ------------------------------------------------------------------------------------------
    def _metrics_answered(self, n: int, error, took_ns: int) -> None:
        metrics = self.bookie.metrics if self.bookie is not None else None
        if metrics is not None and n:
            metrics.adds_answered(n, error, took_ns / 1e9)

    def adds_rejected(self, n: int, error, arrival_ns: int, request_stat: bool = True) -> None:
        """n adds answered ETOOMANYREQUESTS (error) before any processing (too many pending: Java's
        executor rejection); `request_stat` False: their reply records ADD_ENTRY_REQUEST."""
        self.add_rejected.add(n)
        self.reactor_rejected += n
        took = now_ns() - arrival_ns
        if request_stat:
            self.add_request.fail_ns_many(n, took)
        self._metrics_answered(n, error, took)

    def adds_refused(self, n: int, error, arrival_ns: int, start_ns: int, rejected: bool = False) -> None:
        """n adds refused while processed on the reactor (error: the answer's exception); `rejected`:
        ETOOMANYREQUESTS after the throttle time (Java's OperationRejectedException)."""
        now = now_ns()
        if rejected:
            self.add_rejected.add(n)
        self.add_entry.fail_ns_many(n, now - start_ns)
        self.add_request.fail_ns_many(n, now - arrival_ns)
        self._metrics_answered(n, error, now - start_ns)

    def adds_done(self, n: int, error, arrival_ns: int, start_ns: int) -> None:
        """n adds of one batch completed by their journal (error None: durable, acknowledged EOK)."""
        now = now_ns()
        took = now - start_ns
        if error is None:
            self.add_entry_durable.ok_ns_many(n, took)
            self.add_request.ok_ns_many(n, now - arrival_ns)
        else:
            self.add_entry_durable.fail_ns_many(n, took)
            self.add_request.fail_ns_many(n, now - arrival_ns)
        self._metrics_answered(n, error, took)

    def add_processed(self, error, start_ns: int) -> None:
        """One add of the single-add path completed (its request stat is recorded with its answer)."""
        took = now_ns() - start_ns
        if error is None:
            self.add_entry_durable.ok_ns(took)
        else:
            self.add_entry.fail_ns(took)
        self._metrics_answered(1, error, took)

    # --- reads -----------------------------------------------------------------------------------------
    def reads_from_memory(self, bookie_stats, hits: int, arrival_ns: int, start_ns: int) -> int:
        """`hits` reads answered from memory on the reactor in one batch that started at start_ns; their
        sizes went into bookie_stats in the batch call. Returns the batch's duration in ns."""
        now = now_ns()
        took = now - start_ns
        if hits > 0:
            each = took // hits
            self.read_scheduling_delay.ok_ns_many(hits, start_ns - arrival_ns)
            self.read_entry_reactor.ok_ns_many(hits, each)
            self.read_request.ok_ns_many(hits, now - arrival_ns)
            if bookie_stats is not None:
                bookie_stats.read_entry.ok_ns_many(hits, each)
        return took

    def read_entry_of(self, pool, ledger_id: int) -> OpStats:
        """READ_ENTRY of the thread that reads this ledger: its read pool thread, else the reactor."""
        if pool is None or not self.read_entry_pool:
            return self.read_entry_reactor
        return self.read_entry_pool[pool.thread_of(ledger_id)]

    def timed(self, read, processing: OpStats, arrival_ns: int | None = None, begin_ns: int | None = None):
        """`read` wrapped for the read pool: the processing stat from its start (or from begin_ns, when
        its processing began earlier, e.g. with a fence), and READ_ENTRY_SCHEDULING_DELAY from
        arrival_ns to its start when given."""
        scheduling = self.read_scheduling_delay

        def job():
            start = now_ns()
            if arrival_ns is not None:
                scheduling.ok_ns(start - arrival_ns)
            begin = start if begin_ns is None else begin_ns
            try:
                result = read()
            except BaseException:
                processing.fail_since(begin)
                raise
            if isinstance(result, BaseException):      # a read that returns its failure (batch reads)
                processing.fail_since(begin)
            else:
                processing.ok_since(begin)
            return result

        return job

