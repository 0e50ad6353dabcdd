"""One journal's stats under Java 4.16.7's names (JournalStats): scope `bookie_journal`, label journalIndex.

The journal records per batch, never per record: each enqueue call (one per add batch of the server, one
per single record) is a group with one enqueue time and a count, so a batch of N records enqueued by k
calls costs k C calls per latency stat, not N, and nothing is allocated per record.

What each one measures in bkfast (its journal thread writes AND syncs; Java hands the sync to a separate
ForceWriteThread):

- JOURNAL_QUEUE_SIZE: records (and FORCE_LEDGER markers) queued and not yet taken by the journal thread
  (+1 on enqueue, -1 when taken, as Java's counter).
- JOURNAL_QUEUE_LATENCY: per record, enqueue -> the journal thread takes its batch.
- JOURNAL_ADD_ENTRY: per record, enqueue -> its batch is durable and its completions handed over.
- JOURNAL_FORCE_LEDGER: per FORCE_LEDGER, enqueue -> everything before it durable.
- JOURNAL_PROCESS_TIME_LATENCY: per batch, taken -> written, synced and completions handed over.
- JOURNAL_FLUSH_LATENCY: per batch, the write (pwrite/pwritev, padding, pre-allocation) without the sync.
- JOURNAL_SYNC: per fdatasync (with journalSyncData=false: every journalPageCacheFlushIntervalMSec).
- JOURNAL_FORCE_WRITE_GROUPING_TOTAL: per fdatasync, the records it made durable.
- JOURNAL_FORCE_WRITE_BATCH_ENTRIES / _BYTES: per batch written, the records that wait for the sync (0
  with journalSyncData=false, as Java) and the bytes of all records with their length fields.
- JOURNAL_NUM_FLUSH_MAX_WAIT / _MAX_OUTSTANDING_BYTES / _EMPTY_QUEUE: why a batch was closed.
- JOURNAL_WRITE_BYTES: record bytes written (no length fields, no padding).
- JOURNAL_FORCE_WRITE_ENQUEUE, JOURNAL_FORCE_WRITE_QUEUE_SIZE: there is no force-write queue: always 0.
- callback_time {thread=0, threadPool=ForceWriteThread}: nanoseconds the journal thread spent handing
  completions over (the dispatcher: one reactor callFromThread per batch).
- JOURNAL_MEMORY_USED: bytes of the records queued or being written; JOURNAL_MEMORY_MAX: -1 (bkfast bounds
  the journal queue by journalQueueSize records, not by bytes).
"""

from __future__ import annotations

from bkfast._stats import now_ns

__all__ = ["JournalStats", "JournalBatch", "MAX_WAIT", "MAX_OUTSTANDING", "EMPTY_QUEUE"]

MAX_WAIT, MAX_OUTSTANDING, EMPTY_QUEUE = "max-wait", "max-outstanding", "empty-queue"


class JournalBatch:
    """A batch the journal thread took: records (None = force marker; a FramedRecords item holds several
    records), tokens, indices of ack-before-sync records and of force markers; for the stats, the enqueue
    groups (time, records), the force markers' enqueue times, the records' bytes with length fields, why it
    closed, when it was taken, and how many records and force markers it holds."""

    __slots__ = ("recs", "toks", "early", "forces", "enq_t", "enq_n", "force_t", "nbytes", "reason", "taken_ns",
                 "records")

    def __init__(self, recs, toks, early, forces, enq_t, enq_n, force_t, nbytes, reason, records):
        self.recs, self.toks, self.early, self.forces = recs, toks, early, forces
        self.enq_t, self.enq_n, self.force_t = enq_t, enq_n, force_t
        self.nbytes, self.reason = nbytes, reason
        self.records = records
        self.taken_ns = now_ns()


class JournalStats:
    """The stats of one Journal (see the module docstring); `memory_used()` is read at scrape time."""

    def __init__(self, logger, memory_used):
        op, counter = logger.op_stats, logger.counter
        self.add_entry = op("JOURNAL_ADD_ENTRY")
        self.force_ledger = op("JOURNAL_FORCE_LEDGER")
        self.sync = op("JOURNAL_SYNC")
        self.force_write_enqueue = op("JOURNAL_FORCE_WRITE_ENQUEUE")
        self.creation = op("JOURNAL_CREATION_LATENCY")
        self.flush = op("JOURNAL_FLUSH_LATENCY")
        self.queue_latency = op("JOURNAL_QUEUE_LATENCY")
        self.process_time = op("JOURNAL_PROCESS_TIME_LATENCY")
        self.grouping = op("JOURNAL_FORCE_WRITE_GROUPING_TOTAL")
        self.batch_entries = op("JOURNAL_FORCE_WRITE_BATCH_ENTRIES")
        self.batch_bytes = op("JOURNAL_FORCE_WRITE_BATCH_BYTES")
        self.queue_size = counter("JOURNAL_QUEUE_SIZE")
        self.force_write_queue_size = counter("JOURNAL_FORCE_WRITE_QUEUE_SIZE")
        self.write_bytes = counter("JOURNAL_WRITE_BYTES")
        self.closed_by = {MAX_WAIT: counter("JOURNAL_NUM_FLUSH_MAX_WAIT"),
                          MAX_OUTSTANDING: counter("JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES"),
                          EMPTY_QUEUE: counter("JOURNAL_NUM_FLUSH_EMPTY_QUEUE")}
        self.callback_time = logger.thread_scoped("ForceWriteThread", 0).counter("callback_time")
        logger.gauge("JOURNAL_MEMORY_MAX", lambda: -1)
        logger.gauge("JOURNAL_MEMORY_USED", memory_used)
        self.unsynced_records = 0     # written since the last fdatasync (journal thread only)

    def taken(self, batch) -> None:
        """The journal thread took `batch` off the queue (at batch.taken_ns)."""
        self.queue_size.add(-batch.records)
        taken, latency = batch.taken_ns, self.queue_latency
        for t, n in zip(batch.enq_t, batch.enq_n, strict=True):
            latency.ok_ns_many(n, taken - t)
        counter = self.closed_by.get(batch.reason)
        if counter is not None:
            counter.inc()

    def written(self, batch, records: int, write_ns: int, waiting: int) -> None:
        """`batch` (`records` records, `waiting` of them acknowledged only once synced) was written."""
        self.flush.ok_ns(write_ns)
        self.batch_entries.ok_value(waiting)
        self.batch_bytes.ok_value(batch.nbytes)
        self.write_bytes.add(batch.nbytes - 4 * records)
        self.unsynced_records += records

    def synced(self, sync_ns: int) -> None:
        self.sync.ok_ns(sync_ns)
        self.grouping.ok_value(self.unsynced_records)
        self.unsynced_records = 0

    def done(self, batch) -> None:
        """Every completion of `batch` was handed over: its records' and FORCE_LEDGERs' latencies."""
        now = now_ns()
        add_entry = self.add_entry
        for t, n in zip(batch.enq_t, batch.enq_n, strict=True):
            add_entry.ok_ns_many(n, now - t)
        for t in batch.force_t:
            self.force_ledger.ok_ns(now - t)
        self.process_time.ok_ns(now - batch.taken_ns)
