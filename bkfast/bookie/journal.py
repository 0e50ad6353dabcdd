"""The bookie's journal: BookKeeper's Journal + JournalChannel (spec bookkeeper-formats.md §4.2-4.3).

Owns: writing the journal files `<journalDir>/current/<hex id>.txn` (header, rolling, garbage
collection) with group commit on one dedicated journal thread. Their format, the meta records and
reading them back (scan, replay) are in bkfast.bookie.journal_files, the `lastMark` files in
bkfast.bookie.logmark; the names readers use are re-exported here.

Must never: import Twisted or touch sockets (completions leave through `completion_sink`, which the
bookie turns into one reactor.callFromThread per batch), acknowledge a record before it is durable
(unless journalSyncData=false or ack_before_sync), or read past a corrupt record as if the log ended.

Group commit: producers append to one pending batch under a lock; the journal thread closes it when its
oldest record has waited journalMaxGroupWaitMSec, when more than journalBufferedWritesThreshold bytes or
journalBufferedEntriesThreshold entries (if > 0) are pending, when journalQueueSize is reached, or as
soon as it wakes when journalFlushWhenQueueEmpty applies (forced on by a max wait <= 0). The batch is
written, padded and fdatasync'ed by bkfast._journal in one GIL-free call, then `completion_sink(tokens)`
runs once with all its tokens in queue order; ack-before-sync tokens (DEFERRED_SYNC, or all adds with
journalSyncData=false) come in one earlier call, right after the write. Unlike Java, a burst that
arrived at once is not cut at the thresholds; Java cuts it and merges the pieces into one force-write,
the same single sync. `force(token)` (FORCE_LEDGER) is never written and completes once everything
queued before it is durable, even with journalSyncData=false (Java acks it unsynced there).

The queue bound (journalQueueSize) counts bounded records only: entries. Control records (master key,
fence, explicit LAC: `bounded=False`) and force markers are admitted past it at once, because their
callers run on the bookie's reactor, which must never wait for the journal thread's sync to make room;
they are small, one per request the server already bounds, and the adds that would fill the queue are
refused first (`has_room`). Refusing them instead would answer a fence or LAC write with an error the
client turns into a retry, for no memory saved. A bounded record waits up to enqueue_timeout_s for room.

Errors are fail-stop, as in Java (an IOException ends the journal thread): the failed batch goes to
`error_sink(tokens, exc)`, everything still queued to one more call, one line is logged and new records
are refused. Retrying is unsafe: after a failed fdatasync Linux may drop the dirty pages, so a later
"successful" sync proves nothing. What the failed batch left on disk reads back as a torn tail.
`recover()` (the bookie calls it once the journal disk has room again) never writes that file again: it
cuts it at its last durable position, opens a new file, writes there first the records of the failed
batch and of the queue (their requests failed, but their state is in ledger storage already, so the
journal must hold them too: a master key above all), then serves. Replay reads each record once.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bkfast import _journal
from bkfast._journal import (  # noqa: F401  (re-exported: the record layouts live with the hot path)
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_FORCE_LEDGER,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    PADDING_MASK,
    SCOPED_META_FLAGS,
    JournalRecord,
    RecordKind,
    parse_record,
)
from bkfast._stats import now_ns
from bkfast.bookie.journal_direct import enable_direct
from bkfast.bookie.journal_files import (  # noqa: F401  (re-exported: readers of journals import them here)
    CURRENT_DIR,
    CURRENT_JOURNAL_FORMAT_VERSION,
    DEFAULT_MAX_RECORD_SIZE,
    HEADER_SIZE,
    MAGIC,
    V5,
    delete_old_journals,
    explicit_lac_record,
    fence_record,
    journal_path,
    list_journal_ids,
    master_key_record,
    replay,
    scan_journal,
)
from bkfast.bookie.journal_stats import EMPTY_QUEUE, MAX_OUTSTANDING, MAX_WAIT, JournalBatch, JournalStats
from bkfast.bookie.logmark import LogMark, fsync_dir, read_last_mark, write_last_mark  # noqa: F401
from bkfast.errors import BKBookieIOException, BKTooManyRequestsException
from bkfast.stats import StatsLogger, StatsRegistry
from bkfast.threads import JOURNAL, NamedThread

log = logging.getLogger(__name__)

SLOW_SYNC_LOG_S = 0.005   # journal batches slower than this are logged at DEBUG (tail-latency diagnosis)
CACHE_DROP_LAG_BYTES = 8 * 1024 * 1024      # JournalChannel keeps this much behind the sync in cache
JOURNAL_TIMER_SLACK_NS = 1000   # the group wait is a latency the user configured: do not let it stretch
_INT = struct.Struct(">i")
_MiB = 1024 * 1024


# --- the journal ------------------------------------------------------------------------------------

_NEW, _RUNNING, _STOPPING, _STOPPED, _FAILED = "new", "running", "stopping", "stopped", "failed"


class _Failed(Exception):
    """Unwinds the journal thread after a fail-stop (the tokens were already handed to error_sink)."""


@dataclass(frozen=True)
class JournalSettings:
    """The journal keys (BookKeeper's names in `from_conf`), read once at the edge."""

    format_version: int
    alignment_size: int
    pre_alloc_size_mb: int
    max_size_mb: int
    max_backups: int
    max_group_wait_ms: float
    flush_when_queue_empty: bool
    buffered_writes_threshold: int
    queue_size: int
    buffered_entries_threshold: int
    sync_data: bool
    page_cache_flush_interval_ms: float
    remove_from_page_cache: bool
    direct_writes: bool

    @classmethod
    def from_conf(cls, conf) -> JournalSettings:
        return cls(conf.journal_format_version_to_write, conf.journal_alignment_size, conf.journal_pre_alloc_size_mb,
                   conf.journal_max_size_mb, conf.journal_max_backups, conf.journal_max_group_wait_ms,
                   conf.journal_flush_when_queue_empty, conf.journal_buffered_writes_threshold,
                   conf.journal_queue_size, conf.journal_buffered_entries_threshold, conf.journal_sync_data,
                   conf.journal_page_cache_flush_interval_ms, conf.journal_remove_from_page_cache,
                   conf.journal_direct_writes)


class Journal:
    """One journal directory's writer thread. See the module docstring for group commit and errors.

    `completion_sink(tokens)` and `error_sink(tokens, exc)` run on the journal thread and must be quick
    (the bookie hands them to the reactor with one callFromThread). `exc` is a BKBookieIOException whose
    __cause__ is the OSError. Records must be non-empty bytes-like objects that nobody mutates afterwards.
    """

    def __init__(self, journal_dir, conf, completion_sink: Callable[[list], object],
                 error_sink: Callable[[list, BaseException], object] | None = None,
                 enqueue_timeout_s: float = 5.0, stats: StatsLogger | None = None, index: int = 0):
        """`stats`: its Java stats (`bookie_journal`, journalIndex label); `index`: its thread is journal-<index>."""
        self.index, self.journal_dir = index, os.fspath(journal_dir)
        self.current_dir = os.path.join(self.journal_dir, CURRENT_DIR)
        self._completion_sink = completion_sink
        self._error_sink = error_sink
        self._enqueue_timeout = enqueue_timeout_s
        settings = conf if isinstance(conf, JournalSettings) else JournalSettings.from_conf(conf)
        self._version = settings.format_version
        self._align = settings.alignment_size
        # journalPreAllocSizeMB, rounded down to whole alignment blocks (JournalChannel).
        self._prealloc_step = max(self._align, settings.pre_alloc_size_mb * _MiB // self._align * self._align)
        self._max_size = settings.max_size_mb * _MiB
        self._max_backups = settings.max_backups
        self._max_wait = settings.max_group_wait_ms / 1000.0
        self._flush_when_empty = settings.flush_when_queue_empty
        self._bytes_threshold = settings.buffered_writes_threshold
        self._queue_size = settings.queue_size
        entries = settings.buffered_entries_threshold
        # A batch closes at this many records: "more than journalBufferedEntriesThreshold", or a full queue.
        self._close_count = min(self._queue_size, entries + 1) if entries > 0 else self._queue_size
        self._sync_data = settings.sync_data
        self._page_flush_interval = settings.page_cache_flush_interval_ms / 1000.0
        self._drop_cache_lag = CACHE_DROP_LAG_BYTES if settings.remove_from_page_cache else -1
        # Direct writes need every batch to end aligned: only the V5+ formats pad.
        self._direct = settings.direct_writes and self._version >= V5

        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)     # the journal thread waits here
        self._space = threading.Condition(self._lock)      # producers wait here when the queue is full
        self._clear_pending()
        self._inflight_bytes = 0     # of the batch being written
        self._bytes = 0              # of the pending batch, with length fields
        self.stats = JournalStats(stats if stats is not None else StatsRegistry(enabled=False).logger(),
                                  lambda: self._bytes + self._inflight_bytes)
        self._queued = self.stats.queue_size
        self._bounded = 0     # queued records that count against journalQueueSize (module docstring)
        # The bookie server's non-waiting adds: called (journal thread) when a batch is taken after want_room().
        self.room_listener = None
        self._room_wanted = False
        self._first_t = 0.0          # the pending batch's oldest record's enqueue time
        self._consumer_waiting, self._producers_waiting = False, 0
        self._state = _NEW
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

        self._journal_id: int | None = None
        self._failed_recs: list = []    # records of the failed batch and queue, for recover()
        self._cut: LogMark | None = None    # where the failed batch began (None: cut at the durable mark)
        self._fd = -1
        self._writer: _journal.JournalWriter | None = None
        self._mark, self._last_sync_t = LogMark(0, 0), 0.0
        self.batch_count = 0     # batches written (one write call each)
        self.sync_count = 0      # fdatasyncs of batches (file creation syncs are not counted)
        self.records_written = 0
        self.bytes_written = 0   # record, length and padding bytes
        # Optional `observe(seconds)` of each synced batch's write + fdatasync (admin metrics); journal thread.
        self.sync_latency_observer: Callable[[float], object] | None = None

    def _clear_pending(self) -> None:
        """No pending batch: its records (None = force marker), tokens, and indices of ack-before-sync records
        and of force markers; for the stats, each enqueue call's time (ns) and record count, each force's time."""
        self._recs: list[bytes | None] = []
        self._toks: list = []
        self._early: list[int] = []
        self._forces: list[int] = []
        self._enq_t: list[int] = []
        self._enq_n: list[int] = []
        self._force_t: list[int] = []
        self._nrecs = 0              # records (and force markers) pending: a FramedRecords item holds many

    # --- public API -----------------------------------------------------------------------------------
    @property
    def last_log_mark(self) -> LogMark:
        """Position after the last durable record: (current id, header end) until the first sync."""
        return self._mark

    @property
    def current_journal_id(self) -> int | None:
        return self._journal_id

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the journal, or None."""
        return self._failure

    @property
    def queue_length(self) -> int:
        """Records (and force markers) queued and not yet taken by the journal thread."""
        return self._nrecs

    def start(self) -> None:
        """Open a new journal file (id = newest + 1, or now in ms + 1) and start the journal thread."""
        with self._lock:
            if self._state != _NEW:
                raise RuntimeError(f"journal {self.journal_dir} was already started")
            os.makedirs(self.current_dir, exist_ok=True)
            self._open_new_file()
            journal_id, writer = self._open_file()
            self._mark = LogMark(journal_id, writer.position)
            self._last_sync_t = time.monotonic()
            self._state = _RUNNING
        self._thread = NamedThread(self._run, f"{JOURNAL}-{self.index}")
        self._thread.start()

    def log_record(self, record, token, ack_before_sync: bool = False, bounded: bool = True) -> None:
        """Queue `record`; `token` goes to completion_sink once it is durable (or written, if ack_before_sync).

        `bounded`: blocks up to enqueue_timeout_s while the queue is full, then raises
        BKTooManyRequestsException; unbounded (control) records never wait (module docstring).
        Raises BKBookieIOException when the journal is not running (stopped, or failed).
        """
        size = len(record)
        if size <= 0:
            raise ValueError("an empty journal record would read back as the end of the log")
        t = now_ns()
        with self._lock:
            self._admit(bounded, 1)
            recs = self._recs
            recs.append(record)
            self._toks.append(token)
            self._enq_t.append(t)
            self._enq_n.append(1)
            self._queued.inc()
            self._nrecs += 1
            n = len(recs)
            if ack_before_sync:
                self._early.append(n - 1)
            if n == 1:
                self._first_t = time.monotonic()
            self._bytes += 4 + size
            if self._consumer_waiting and (n == 1 or self._bytes > self._bytes_threshold
                                           or self._nrecs >= self._close_count):
                self._wakeup.notify()

    def log_records(self, records: list, token, bounded: bool = True) -> int:
        """Queue several records at once; `token` completes once the LAST of them is durable. Returns
        their bytes with length fields (4 + len each).

        The records are appended in order under one lock hold (so they usually share one batch; if the
        queue splits them, the earlier ones are in earlier batches, durable first). No ack-before-sync.
        Errors, blocking and `bounded` as log_record; on an error none of the records was queued.
        """
        n_new = len(records)
        if not n_new:
            raise ValueError("log_records needs at least one record")
        if not all(records):
            raise ValueError("an empty journal record would read back as the end of the log")
        size = sum(map(len, records)) + 4 * n_new
        self._enqueue(records, n_new, size, token, bounded)
        return size

    def log_framed(self, runs: list[_journal.FramedRecords], token, bounded: bool = True) -> int:
        """log_records for records already framed (`int len | record` each: FramedRecords, one object for
        many records, which the writer copies as they are); `token` completes once the last is durable.
        Returns their bytes. Errors, blocking and `bounded` as log_record: on an error none was queued."""
        if not runs:
            raise ValueError("log_framed needs at least one run of records")
        size = sum(run.nbytes for run in runs)
        self._enqueue(runs, sum(run.count for run in runs), size, token, bounded)
        return size

    def _enqueue(self, items: list, n_new: int, size: int, token, bounded: bool) -> None:
        """Queue `items` (records, or FramedRecords) holding `n_new` records of `size` bytes with their
        length fields, in order under one lock hold; `token` goes with the last item."""
        t = now_ns()
        with self._lock:
            self._admit(bounded, n_new)
            recs = self._recs
            first = not recs
            recs.extend(items)
            toks = self._toks
            if len(items) > 1:
                toks.extend([None] * (len(items) - 1))
            toks.append(token)
            self._enq_t.append(t)
            self._enq_n.append(n_new)
            self._queued.add(n_new)
            self._nrecs += n_new
            if first:
                self._first_t = time.monotonic()
            self._bytes += size
            if self._consumer_waiting and (first or self._bytes > self._bytes_threshold
                                           or self._nrecs >= self._close_count):
                self._wakeup.notify()

    def force(self, token) -> None:
        """Complete `token` once every record queued before it is durable (FORCE_LEDGER; never written).
        Never waits for room: the marker holds no bytes, and its caller is the reactor."""
        t = now_ns()
        with self._lock:
            self._admit(False, 0)
            recs = self._recs
            recs.append(None)
            self._toks.append(token)
            self._force_t.append(t)
            self._queued.inc()
            self._nrecs += 1
            n = len(recs)
            self._forces.append(n - 1)
            if n == 1:
                self._first_t = time.monotonic()
            if self._consumer_waiting and (n == 1 or self._nrecs >= self._close_count):
                self._wakeup.notify()

    def stop(self) -> None:
        """Write and sync everything queued, close the file, end the thread. Idempotent."""
        with self._lock:
            if self._state == _NEW:
                self._state = _STOPPED
                return
            if self._state == _RUNNING:
                self._state = _STOPPING
                self._wakeup.notify()
                self._space.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def recover(self) -> None:
        """After a fail-stop: continue in a new journal file (see the module docstring). Raises OSError
        when the new file cannot be made (still no room): the journal stays failed, call again later."""
        with self._lock:
            if self._state == _RUNNING:
                return
            if self._state != _FAILED:
                raise RuntimeError(f"journal {self.journal_dir} is {self._state}, not failed")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._cut_at_mark()
        self._open_new_file()
        journal_id, writer = self._open_file()
        with self._lock:
            recs, self._failed_recs, self._cut = self._failed_recs, [], None
            self._recs, self._toks, self._early, self._forces = recs, [None] * len(recs), [], []
            records = sum(r.count if type(r) is _journal.FramedRecords else 1 for r in recs)
            now = now_ns()
            self._enq_t, self._enq_n, self._force_t = ([now], [records], []) if recs else ([], [], [])
            self._queued.add(records)
            self._nrecs = records
            self._bytes = sum(len(r) if type(r) is _journal.FramedRecords else 4 + len(r) for r in recs)
            self._bounded = records
            self._first_t = self._last_sync_t = time.monotonic()
            self._mark = LogMark(journal_id, writer.position)
            self._failure = None
            self._state = _RUNNING
        self._thread = NamedThread(self._run, f"{JOURNAL}-{self.index}")
        self._thread.start()
        log.warning("journal %s recovered: writing %s, where the %d records of the failed batch and queue "
                    "are journaled again first", self.journal_dir, os.path.basename(journal_path(
                        self.journal_dir, journal_id)), records)

    def _cut_at_mark(self) -> None:
        """Truncate the failed file where the failed batch began (or, failing elsewhere, at the durable
        mark): what follows is journaled again, or was never durably written."""
        mark = self._cut or self._mark
        if not mark.journal_id:
            return
        try:
            fd = os.open(journal_path(self.journal_dir, mark.journal_id), os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if os.fstat(fd).st_size > mark.offset:
                os.ftruncate(fd, mark.offset)
                os.fsync(fd)
        finally:
            os.close(fd)

    def gc_journals(self, mark) -> list[int]:
        """Delete journals older than `mark`'s beyond the newest journalMaxBackups of them; return their ids."""
        return delete_old_journals(self.journal_dir, LogMark(*mark).journal_id, self._journal_id, self._max_backups)

    # --- producer side helpers (lock held) ------------------------------------------------------------
    def _admit(self, bounded: bool, n: int) -> None:
        """Let `n` more records in (waiting for room if they are bounded), or raise."""
        if bounded:
            if self._state != _RUNNING or self._bounded >= self._queue_size:
                self._wait_for_space()
            self._bounded += n
        elif self._state != _RUNNING:
            self._wait_for_space()      # raises at once: it waits only while the journal runs

    def _wait_for_space(self) -> None:
        deadline = time.monotonic() + self._enqueue_timeout
        self._wakeup.notify()               # a full queue closes the batch: make sure the thread knows
        while self._state == _RUNNING and self._bounded >= self._queue_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BKTooManyRequestsException(
                    f"journal queue full: {self._bounded} records (journalQueueSize={self._queue_size}) "
                    f"still waiting after {self._enqueue_timeout:.1f} s; the journal disk is not keeping up")
            self._producers_waiting += 1
            try:
                self._space.wait(left)
            finally:
                self._producers_waiting -= 1
        if self._state != _RUNNING:
            why = f"failed: {self._failure}" if self._failure is not None else f"is not running ({self._state})"
            raise BKBookieIOException(f"journal {self.journal_dir} {why}") from self._failure

    # --- the journal thread ---------------------------------------------------------------------------
    def _next_batch(self) -> JournalBatch | None:
        """Wait until the pending batch closes (see module docstring); take it. None = stopped and empty."""
        with self._lock:
            while True:
                reason = self._close_reason()
                if reason is not None:
                    break
                if not self._recs:
                    if self._state != _RUNNING:
                        return None
                    remaining = None
                else:
                    remaining = self._max_wait - (time.monotonic() - self._first_t)
                self._consumer_waiting = True
                self._wakeup.wait(remaining)
                self._consumer_waiting = False
            batch = JournalBatch(self._recs, self._toks, self._early, self._forces, self._enq_t, self._enq_n,
                                 self._force_t, self._bytes, reason, self._nrecs)
            self._clear_pending()
            self._inflight_bytes, self._bytes = self._bytes, 0
            self._bounded = 0
            if self._producers_waiting:
                self._space.notify_all()
            room_wanted, self._room_wanted = self._room_wanted, False
        self.stats.taken(batch)
        if room_wanted and self.room_listener is not None:
            self.room_listener()
        return batch

    def _close_reason(self) -> str | None:
        """Why the pending batch closes now (lock held): MAX_OUTSTANDING (records or bytes over their
        threshold, or a full queue), EMPTY_QUEUE (flush when the queue is empty), MAX_WAIT (its oldest record
        waited journalMaxGroupWaitMSec), "stop"; None: it stays open (or there is none)."""
        if not self._recs:
            return None
        if self._state != _RUNNING:
            return "stop"
        if self._nrecs >= self._close_count or self._bytes > self._bytes_threshold:
            return MAX_OUTSTANDING
        if self._flush_when_empty:
            return EMPTY_QUEUE
        if self._max_wait - (time.monotonic() - self._first_t) <= 0:
            return MAX_WAIT
        return None

    def has_room(self, records: int) -> bool:
        """Whether `records` more records fit the queue now (an empty queue takes any number). Only
        meaningful to the one thread that enqueues (the reactor): the journal thread only empties it.
        Control records do not count (module docstring)."""
        return records <= self.room()

    def room(self) -> int:
        """How many more records fit the queue now (sys.maxsize while it is empty: it takes any number)."""
        queued = self._bounded
        return self._queue_size - queued if queued else sys.maxsize

    def want_room(self) -> None:
        """Call room_listener() once the journal thread takes the queued batch (so room is back)."""
        with self._lock:
            self._room_wanted = True
            self._wakeup.notify()

    def _run(self) -> None:
        _journal.set_thread_timer_slack(JOURNAL_TIMER_SLACK_NS)
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    break
                self._commit(batch)
            self._close_file(sync=True)
            with self._lock:
                self._state = _STOPPED
            log.info("journal %s stopped at %s", self.journal_dir, tuple(self._mark))
        except _Failed:
            pass
        except Exception as err:   # a bug, not an I/O error: still fail-stop rather than hang producers
            log.exception("journal thread crashed")
            try:
                self._fail(err, [], "journal thread")
            except _Failed:
                pass

    def _split_tokens(self, toks: list, early: list[int], forces: list[int]) -> tuple[list, list]:
        """Tokens that may complete once written (before any sync), and those that wait for the sync."""
        if not self._sync_data and not forces:
            return toks, []
        if early or not self._sync_data:
            pick = set(early) if self._sync_data else set(range(len(toks))).difference(forces)
            return [t for i, t in enumerate(toks) if i in pick], [t for i, t in enumerate(toks) if i not in pick]
        return [], toks

    def _commit(self, batch: JournalBatch) -> None:
        journal_id, writer = self._open_file()
        recs, toks, forces = batch.recs, batch.toks, batch.forces
        sync = (self._sync_data or bool(forces)
                or time.monotonic() - self._last_sync_t >= self._page_flush_interval)
        early_toks, late_toks = self._split_tokens(toks, batch.early, forces)
        start = writer.position
        acked_early = False
        observer = self.sync_latency_observer if sync else None
        t0 = time.perf_counter()
        try:
            if sync and early_toks:
                writer.write(recs, False)
                self._deliver(early_toks)
                acked_early = True
                writer.sync()
            else:
                writer.write(recs, sync)
        except OSError as err:
            self._failed_recs = [r for r in recs if r is not None]      # recover() journals them again
            self._cut = LogMark(journal_id, start)                      # ... and cuts the file here
            self._fail(err, late_toks if acked_early else toks, f"batch at offset {start}")
        records = batch.records - len(forces)
        self.batch_count += 1
        self.records_written += records
        self.bytes_written += writer.position - start
        self.stats.written(batch, records, writer.last_write_ns, records - len(batch.early) if self._sync_data else 0)
        if sync:
            self._synced()
            elapsed = time.perf_counter() - t0
            if observer is not None:
                observer(elapsed)
            if elapsed >= SLOW_SYNC_LOG_S and log.isEnabledFor(logging.DEBUG):
                log.debug("slow journal batch: %d records, %d bytes, write+fdatasync %.1f ms, done at "
                          "monotonic %.4f", records, writer.position - start, elapsed * 1e3,
                          time.perf_counter())
        if early_toks and not acked_early:
            self._deliver(early_toks)
        if late_toks:
            self._deliver(late_toks)
        self._inflight_bytes = 0
        self.stats.done(batch)
        if writer.position > self._max_size:
            self._roll()

    def _synced(self) -> None:
        journal_id, writer = self._open_file()
        self.stats.synced(writer.last_sync_ns)
        self.sync_count += 1
        self._last_sync_t = time.monotonic()
        self._mark = LogMark(journal_id, writer.synced_position)

    def _open_file(self) -> tuple[int, _journal.JournalWriter]:
        """The open journal file's id and writer (there is one from start() until stop or a failure)."""
        writer, journal_id = self._writer, self._journal_id
        assert writer is not None and journal_id is not None, f"journal {self.journal_dir}: no file is open"
        return journal_id, writer

    def _deliver(self, tokens: list) -> None:
        t0 = now_ns()
        try:
            self._completion_sink(tokens)
        except Exception:
            log.exception("journal completion sink failed for %d tokens", len(tokens))
        self.stats.callback_time.add(now_ns() - t0)

    def _roll(self) -> None:
        old = self._journal_id
        try:
            self._close_file(sync=True)
            self._open_new_file()
        except OSError as err:
            self._fail(err, [], f"rolling journal {old:x}")
        log.info("journal rolled from %x.txn to %x.txn", old, self._journal_id)

    def _open_new_file(self) -> None:
        t0 = now_ns()
        ids = list_journal_ids(self.journal_dir)
        journal_id = ids[-1] + 1 if ids else int(time.time() * 1000) + 1
        if self._journal_id is not None:
            journal_id = max(journal_id, self._journal_id + 1)
        path = journal_path(self.journal_dir, journal_id)
        header = MAGIC + _INT.pack(self._version)
        if self._version >= V5:
            header = header.ljust(HEADER_SIZE, b"\0")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            if os.pwrite(fd, header, 0) != len(header):
                raise OSError(f"short write of the header of {path}")
            writer = _journal.JournalWriter(fd, len(header), self._align, self._prealloc_step,
                                            padding=self._version >= V5, drop_cache_lag=self._drop_cache_lag)
            if self._direct:
                self._direct = enable_direct(fd, writer, self.journal_dir, header)
            writer.ensure_preallocated()   # JournalChannel pre-allocates the first step on creation
            os.fsync(fd)                   # header and size durable before any record counts on them
            fsync_dir(self.current_dir)   # and the name: fdatasync of the file does not cover it
        except BaseException as err:
            os.close(fd)
            try:
                os.unlink(path)         # never used: a full disk must not leave a trail of stub journals
            except OSError:
                pass
            if isinstance(err, OSError) and err.errno and err.filename is None:
                raise OSError(err.errno, err.strerror, path) from err    # name the file (and so its dir)
            raise
        self._fd, self._writer, self._journal_id = fd, writer, journal_id
        self.stats.creation.ok_since(t0)
        log.info("opened journal %s (format V%d, %s writes)", path, self._version,
                 "O_DIRECT" if self._direct else "buffered")

    def _close_file(self, sync: bool) -> None:
        writer = self._writer
        if writer is None:
            return
        if sync and writer.synced_position < writer.position:
            try:
                writer.sync()
            except OSError as err:
                self._fail(err, [], f"final sync of journal {self._journal_id:x}")   # closes the fd
            self._synced()
        self._writer = None
        fd, self._fd = self._fd, -1
        os.close(fd)

    def _fail(self, err: BaseException, tokens: list, what: str) -> None:
        """Fail-stop: error every given and queued token, refuse new records, end the thread."""
        offset = self._writer.position if self._writer is not None else -1
        path = journal_path(self.journal_dir, self._journal_id) if self._journal_id is not None else "?"
        exc = BKBookieIOException(f"journal {path}: {what} failed: {err}; the journal stopped "
                                  f"(durable up to {tuple(self._mark)})")
        exc.__cause__ = err
        with self._lock:
            self._failure = exc
            self._state = _FAILED
            self._failed_recs.extend(r for r in self._recs if r is not None)
            rest = self._toks
            self._queued.add(-self._nrecs)
            self._clear_pending()
            self._bytes = self._inflight_bytes = self._bounded = 0
            self._space.notify_all()
        log.error("journal %s: %s failed at offset %d: %s; failing %d in-flight and %d queued requests, "
                  "refusing new ones (durable up to %s)", path, what, offset, err, len(tokens), len(rest),
                  tuple(self._mark))
        for group in (tokens, rest):
            try:
                if group and self._error_sink is not None:
                    self._error_sink(group, exc)
            except Exception:
                log.exception("journal error sink failed")
        if self._writer is not None:
            self._writer, fd, self._fd = None, self._fd, -1
            os.close(fd)
        raise _Failed()

