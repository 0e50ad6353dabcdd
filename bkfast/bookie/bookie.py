"""The Bookie: the storage server's brain, without sockets.

Owns: the rules of a bookie — master-key checks on first sight of a ledger and on every add or fence
after, fencing (normal adds refused, recovery adds accepted), explicit LAC, reads including "the last
entry" — and the order that makes acknowledged data durable: an add goes to ledger storage (memory),
then to the journal, and is acknowledged only after its journal record is on disk. Also owns the
checkpoint (take every journal's mark, flush ledger storage, persist each journal's lastMark, trim old
journals) and the replay of every journal from its own lastMark at start-up. With several journal
directories each ledger's records all go to one journal, chosen as Java does (bookie/journals.py).

Must never: touch sockets or import net/ (the server calls this class through its small callback
interface), or acknowledge an add or fence before its journal record is durable (unless the operator
turned journalSyncData off, or the client asked for DEFERRED_SYNC).

Completions: every operation takes `callback(error)` (None on success). Callbacks for a whole journal
batch are handed to `dispatcher(run, batch)` at once; the default runs them on the journal thread,
the network server passes a dispatcher that does ONE reactor.callFromThread per batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from bkfast._entrysource import EntrySource
from bkfast._stats import now_ns
from bkfast.bookie import journal as journal_mod
from bkfast.bookie._admission import AddAdmission
from bkfast.bookie.blocking import SYNC_WAIT_SECONDS, BlockingCalls  # noqa: F401  (SYNC_WAIT_SECONDS: re-exported)
from bkfast.bookie.disk_checker import DiskChecker, is_no_space
from bkfast.bookie.fast_adds import FastAdds
from bkfast.bookie.gc import GarbageCollector
from bkfast.bookie.interface import BookieMetricsSink
from bkfast.bookie.journals import JournalSet
from bkfast.bookie.lac import LacReads, LacTracker, lac_of_buffer
from bkfast.bookie.read_only import ReadOnlyState
from bkfast.bookie.settings import BookieSettings
from bkfast.bookie.stats import BookieStats
from bkfast.conf import ServerConfiguration
from bkfast.errors import (
    BKBookieIOException,
    BKError,
    BKUnauthorizedAccessException,
    StorageBusyError,
)
from bkfast.stats import StatsLogger, StatsRegistry
from bkfast.storage import thread_stats
from bkfast.storage.interface import LedgerStorage
from bkfast.threads import SYNC as SYNC_THREAD
from bkfast.threads import NamedThread

log = logging.getLogger(__name__)

Callback = Callable[[BaseException | None], None]

CURRENT_DIR = "current"


def _run_batch(batch: list[tuple[Callback, BaseException | None]]) -> None:
    for callback, error in batch:
        try:
            callback(error)
        except Exception:  # a failing callback must not stop the others of its batch
            log.exception("bookie completion callback failed")


def _inline_dispatcher(run: Callable[[list], None], batch: list) -> None:
    run(batch)


class Bookie(ReadOnlyState, BlockingCalls, LacReads):
    """A bookie's storage: journal + ledger storage + checkpoint, driven by callbacks."""

    def __init__(self, conf: ServerConfiguration, dispatcher: Callable[[Callable, list], None] | None = None,
                 ledger_exists_source=None, stats: StatsLogger | None = None):
        """`ledger_exists_source`: what the garbage collector asks which ledgers still exist (a
        MetadataDriver, or anything with its `ledgers_exist`); None = GC deletes no ledger (it still
        removes and compacts entry logs of ledgers deleted otherwise). `stats`: the root StatsLogger
        the Bookie and its parts record Java's stats into (scope `bookie`, ...); None records nothing."""
        self.conf = conf
        # Parsed once here; the parts get their pieces. The journals and the ledger storage still take the
        # configuration itself (they are built from it: bkfast.bookie.journals, storage_factory).
        self.settings = settings = BookieSettings.from_conf(conf)
        self.stats_root = stats if stats is not None else StatsRegistry(enabled=False).logger()
        self.stats = BookieStats(self.stats_root)
        self._dispatcher = dispatcher or _inline_dispatcher
        self.journal_dirs = [Path(d) for d in settings.journal_dirs]
        self.journal_dir = self.journal_dirs[0]
        self.ledger_dirs = [Path(d) for d in settings.ledger_dirs]
        self.index_dirs = [Path(d) for d in settings.index_dirs]
        # One journal per journal dir. A dir list that does not fit the lastMark files is refused
        # (ConfigurationError) before anything is created or opened.
        self.journals = JournalSet(self.journal_dirs, self.ledger_dirs, conf, self._on_journal_batch,
                                   self._on_journal_error, stats=self.stats.logger)
        self.journals.check_dirs()
        for d in [*self.journal_dirs, *self.ledger_dirs, *self.index_dirs]:
            (d / CURRENT_DIR).mkdir(parents=True, exist_ok=True)
        # ledgerStorageClass -> DbLedgerStorage or the file-based index storage (Sorted/Interleaved);
        # anything else is a ConfigurationError naming the key.
        from bkfast.bookie.storage_factory import open_ledger_storage

        self.storage: LedgerStorage = open_ledger_storage(conf, self.ledger_dirs, self.index_dirs,
                                                          stats=self.stats.logger)
        # Bound once: the reactor's memory-read fast path calls it for every plain read.
        self._read_cached = self.storage.get_entry_cached
        # Serialises the check-then-act of master keys and fences (reactor and replay threads).
        self._ledger_lock = threading.Lock()
        # (scope, ledger) -> callbacks of fencing requests waiting for a fence record to be durable
        self._fences_in_flight: dict[tuple[int, int], list[Callback]] = {}
        # (scope, ledger) fenced in ledger storage whose fence record the journal failed to make durable
        self._fences_unrecorded: set[tuple[int, int]] = set()
        self._checkpoint_lock = threading.Lock()
        self._stop_checkpointing = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None
        self._flush_interval_s = settings.flush_interval_s
        self.replayed_records = 0
        self.started = False
        self._init_read_only_state(settings.force_read_only)
        self.gc = GarbageCollector(self.storage, settings.gc, ledger_exists_source)
        self.disk_checker = DiskChecker(
            [*self.journal_dirs, *self.ledger_dirs, *self.index_dirs], settings.disk, self._on_disk_state)
        from bkfast.bookie.storage_full import StorageFullState

        self.storage_full = StorageFullState(self)
        self.storage.set_error_listener(self._note_io_error)
        self.stats.register_gauges(settings.journal_queue_size, self.journal_dirs, self.ledger_dirs, self.index_dirs,
                                   self.disk_checker)
        # bkfast.http.metrics.BookieMetrics when the admin HTTP server is on; None costs one check per op.
        self.metrics: BookieMetricsSink | None = None
        # Per ledger: known LAC and long-poll waiters (reactor thread; see bkfast.bookie.lac).
        self.lac = LacTracker()
        self._init_fast_adds()
        self._room_listener: Callable[[], None] | None = None

    def _init_fast_adds(self) -> None:
        """The reactor's add fast path: the ledgers admitted, and a socket read's adds stored in one C run;
        it forgets a ledger the GC deletes, and reports the LACs of ledgers a reader tracks."""
        self.fast_adds = FastAdds(self.storage, self.journals, self._ledger_lock, self.stats, self.lac,
                                  lambda: self.read_only)
        self.gc.on_ledger_deleted = self.fast_adds.forget_deleted
        self.lac.on_tracking = self.fast_adds.watch_lac

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Replay every journal from its lastMark into ledger storage, then open new journals and serve.

        A full ledger disk does not stop the start (see bkfast.bookie.storage_full): replay stops where
        ledger storage takes no more, and the bookie serves read-only until the disk has room again."""
        t0 = now_ns()
        self.storage_full.replay(self.journals.read_marks())
        self.replayed(t0, 0)
        log.info("bookie replayed %d journal records", self.replayed_records)
        self.journals.start()
        self.storage_full.journal_started([journal.last_log_mark.journal_id for journal in self.journals])
        # Everything replayed is now in ledger storage; checkpointing it makes the next start fast.
        self.storage_full.checkpoint_after_start()
        self._checkpoint_thread = NamedThread(self._checkpoint_loop, SYNC_THREAD)
        self._checkpoint_thread.start()
        self.disk_checker.check()
        self.disk_checker.start()
        self.gc.start()
        self.started = True

    def stop(self) -> None:
        """Finish queued journal writes, flush ledger storage, checkpoint, close. Idempotent."""
        if not self.started:
            return
        self.started = False
        self.gc.stop()
        self.disk_checker.stop()
        self._stop_checkpointing.set()
        if self._checkpoint_thread is not None:
            self._checkpoint_thread.join()
        self.journals.stop()
        try:
            self.checkpoint()
        except Exception as error:
            if not is_no_space(error):
                raise
            log.error("final checkpoint failed, the ledger disk is full (%s); lastMark stays, so the next "
                      "start replays from the journal what ledger storage could not take", error)
        try:
            self.storage.close()
        except Exception as error:
            if not is_no_space(error):
                raise
            log.error("closing ledger storage on a full disk: %s (the journal covers it)", error)
        log.info("bookie stopped cleanly")

    def __enter__(self) -> Bookie:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def journal(self) -> JournalSet:
        """All journals (summed counters, stop, sync observer): what metrics and tests see as one."""
        return self.journals

    # --- journal plumbing --------------------------------------------------------------------------
    # Tokens are None for every record of a Journal.log_records call but its last: skipped here.
    def _on_journal_batch(self, tokens: list) -> None:
        self._dispatcher(_run_batch, [(callback, None) for callback in tokens if callback is not None])

    def _on_journal_error(self, tokens: list, error: BaseException) -> None:
        log.error("journal write failed for %d requests: %s", len(tokens), error)
        if is_no_space(error):
            # A journal is fail-stop: none of its adds can be durable until the disk checker sees room
            # again and it recovers in a new file (_recover_journal). The whole bookie turns read-only.
            self.disk_checker.full = True
            self.set_read_only_reason("journal-enospc", True, f"journal write failed: {error}")
        failure = BKBookieIOException(f"journal write failed: {error}")
        self._dispatcher(_run_batch, [(callback, failure) for callback in tokens if callback is not None])

    def _fail(self, callback: Callback, error: BaseException) -> None:
        self._dispatcher(_run_batch, [(callback, error)])

    # --- master keys and fences --------------------------------------------------------------------
    def admit_ledger(self, scope_id: int, ledger_id: int, master_key: bytes) -> None:
        """Check the key of a ledger the bookie knows; remember (and journal) it on first sight.

        Called with _ledger_lock held. The key record is queued before the request's own record, so
        replay always learns a ledger's key before its entries, fence or LAC.
        """
        stored = self.storage.get_master_key(ledger_id, scope_id)
        if stored is None:
            self.storage_full.check_journaled_key(ledger_id, master_key, scope_id)
            self.storage.set_master_key(ledger_id, bytes(master_key), scope_id)
            # A control record: admitted past the journal queue's bound, never waits (bookie/journal.py).
            self.journals.for_ledger(ledger_id).log_record(
                journal_mod.master_key_record(ledger_id, master_key, scope_id), _ignore, bounded=False)
        elif bytes(stored) != bytes(master_key):
            raise BKUnauthorizedAccessException(
                f"wrong master key for ledger {ledger_id}" + (f" scope {scope_id}" if scope_id else ""))

    # --- operations ------------------------------------------------------------------------------
    def add_entry(self, entry, master_key: bytes, callback: Callback, recovery: bool = False,
                  ack_before_sync: bool = False, high_priority: bool = False) -> None:
        """Store an entry (the bytes exactly as the client packaged them); callback after it is durable."""
        t0 = now_ns()
        try:
            with self._ledger_lock:
                admission = AddAdmission(self)
                admission.admit(0, entry, master_key, recovery, high_priority)
                ledger_id, entry = admission.store_one(self.storage)
            self._advance_lacs(admission.lacs)
            # Served (a room listener is set), this runs on the reactor, which must not wait for the
            # journal: the rare single add (DEFERRED_SYNC, unbatched v2) is admitted past the queue's
            # bound, its bytes already held by ledger storage and the server's in-flight add bound.
            self.journals.for_ledger(ledger_id).log_record(entry, callback, ack_before_sync=ack_before_sync,
                                                           bounded=self._room_listener is None)
        except BKError as error:
            self.stats.add_failed(recovery, len(entry), t0, error)
            self._fail(callback, error)
        except Exception as error:  # anything unexpected is an I/O error for the client, and logged
            log.exception("add failed")
            self.stats.add_failed(recovery, len(entry), t0, error)
            self._note_io_error(error)
            self._fail(callback, BKBookieIOException(str(error)))
        else:
            self.stats.add_done(recovery, len(entry), t0)
            self.storage.record_adds(now_ns() - t0)

    def add_entries(self, adds: list, callback: Callable[[list | None, BaseException | None], None]) -> list:
        """Store several entries (one network read's ADDs) with one journal enqueue and one completion.

        `adds`: [(entry, master_key, recovery, high_priority)], checked exactly as add_entry checks each.
        Returns [(index, error)] of the adds refused at once (not stored, not journaled). The accepted
        ones are journaled in order, each on its ledger's journal; `callback(accepted, error)` runs
        (through the dispatcher, from the journal thread) once per journal they went to, when that
        journal's share is durable: `accepted` is the share's indices, or None when the whole batch went to
        one journal and every add was accepted. No accepted add: no callback.

        Stats: the batch's time split evenly over its adds is each add's BOOKIE_ADD_ENTRY (or
        BOOKIE_RECOVERY_ADD_ENTRY) latency, recorded with one call per batch (bkfast.bookie.stats).
        """
        if self._room_listener is not None and not self.journals.room_for(adds):
            # Never wait for a journal queue on the caller's (the reactor's) thread: the server holds
            # these adds and offers them again when the journal announces room (room_for asked it to).
            busy = StorageBusyError("journal queue full")
            return [(i, busy) for i in range(len(adds))]
        t0 = now_ns()
        failures, accepted, records, which, recoveries = self._store_adds(adds)
        t_stored = now_ns()
        stored_failures = len(failures)
        journaled = self._journal_adds(records, accepted, which, failures, callback) if records else 0
        self.stats.record_add_batch(adds, records, accepted, recoveries, failures, stored_failures, t0, journaled)
        self.storage.record_adds((t_stored - t0) // max(1, len(records)))  # the stored adds: storage's add_entry
        return failures

    def _store_adds(self, adds: list) -> tuple[list, list[int], list[bytes], list[int] | None, int]:
        """The admission of each add, then one ledger storage call for the admitted ones, under the ledger
        lock: (failures, accepted indices, their records, each record's journal (several journals only),
        accepted recovery adds)."""
        failures: list = []
        with self._ledger_lock:
            admission = AddAdmission(self)
            # anything unexpected is an I/O error for the client, and logged (_unexpected_add_error)
            admission.admit_all(adds, failures, self._unexpected_add_error)
            admission.store(self.storage, failures, len(adds), self._unexpected_add_error)
        self._advance_lacs(admission.lacs)
        return failures, admission.indices, admission.entries, admission.journals(len(self.journals)), \
            admission.recoveries

    def _unexpected_add_error(self, index: int, error: Exception) -> BKBookieIOException:
        log.error("add of entry %d failed", index, exc_info=error)
        self._note_io_error(error)
        return BKBookieIOException(str(error))

    def _advance_lacs(self, lacs: dict[tuple[int, int], int]) -> None:
        advance = self.lac.advance
        for (scope_id, ledger_id), lac in lacs.items():
            advance(scope_id, ledger_id, lac)

    def _journal_adds(self, records: list[bytes], accepted: list[int], which: list[int] | None, failures: list,
                      callback: Callable[[list[int] | None, BaseException | None], None]) -> int:
        """Queue the stored adds' records (one completion for all); refusals go to `failures`. Returns the
        bytes queued (records with their length fields)."""
        completion = _BatchCompletion(accepted, failures, callback)
        if which is not None:
            return self.journals.log_split(records, which, completion.share_done, completion.refused)
        try:
            return self.journals[0].log_records(records, completion.done)
        except BKError as error:
            # Nothing was queued: every accepted add fails now (they stay in ledger storage unacknowledged,
            # as a single add whose journal enqueue fails).
            failures.extend((i, error) for i in accepted)
            return 0

    def fence(self, ledger_id: int, master_key: bytes, callback: Callback, scope_id: int = 0) -> None:
        """Fence a ledger (creating it with this key if unseen); callback once the fence is durable.

        As an add: ledger storage takes the fenced flag at once (in memory, an unsynced index write), so
        every later normal add is refused, and the answer waits for the fence record's journal sync, off
        this thread. The next checkpoint makes the flag durable in ledger storage before lastMark passes
        the record. Nothing here syncs: the caller is the reactor (issue 26)."""
        key = (scope_id, ledger_id)
        try:
            with self._ledger_lock:
                self.admit_ledger(scope_id, ledger_id, master_key)
                self.fast_adds.forget(ledger_id, scope_id)
                newly_fenced = self.storage.set_fenced(ledger_id, scope_id)
                waiters = self._fences_in_flight.get(key)
                if waiters is not None:
                    # Already fenced, but its fence record is not durable yet: answer with it.
                    waiters.append(callback)
                    return
                if newly_fenced or key in self._fences_unrecorded:
                    if newly_fenced:
                        log.info("fenced ledger %d%s", ledger_id, f" scope {scope_id}" if scope_id else "")
                    self._record_fence(key, callback)
                    return
            # Already fenced and durable (recorded earlier, replayed, or stored): nothing to wait for.
            # Recovery reads every entry with the fence flag, so this path must not cost a journal sync.
            callback(None)
        except BKError as error:
            self._fail(callback, error)

    def _record_fence(self, key: tuple[int, int], callback: Callback) -> None:
        """Journal the fence record of `key` (ledger lock held); callback and later fences of the ledger
        are answered when it is durable."""
        scope_id, ledger_id = key
        self._fences_in_flight[key] = []
        self._fences_unrecorded.discard(key)
        try:
            # Past the queue's bound (never waits): the fence is answered only by this record's sync.
            self.journals.for_ledger(ledger_id).log_record(
                journal_mod.fence_record(ledger_id, scope_id),
                lambda error: self._fence_durable(key, callback, error), bounded=False)
        except BaseException:
            del self._fences_in_flight[key]
            self._fences_unrecorded.add(key)
            raise

    def _fence_durable(self, key, callback: Callback, error: BaseException | None) -> None:
        with self._ledger_lock:
            waiters = self._fences_in_flight.pop(key, [])
            if error is not None:
                # The flag is set but its record is not durable (nor, until a checkpoint, the flag): the
                # next fence request of this ledger journals the record again instead of answering at once.
                self._fences_unrecorded.add(key)
        for waiter in (callback, *waiters):
            waiter(error)

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, master_key: bytes, callback: Callback,
                         scope_id: int = 0) -> None:
        try:
            with self._ledger_lock:
                self.admit_ledger(scope_id, ledger_id, master_key)
                self.storage.set_explicit_lac(ledger_id, bytes(lac_buffer), scope_id)
            if (scope_id, ledger_id) in self.lac:
                self.lac.advance(scope_id, ledger_id, lac_of_buffer(lac_buffer))
            self.journals.for_ledger(ledger_id).log_record(
                journal_mod.explicit_lac_record(ledger_id, lac_buffer, scope_id), callback, bounded=False)
        except BKError as error:
            self._fail(callback, error)

    def force_ledger(self, ledger_id: int, callback: Callback, scope_id: int = 0) -> None:
        """Complete once every entry of the ledger queued before this call is durable (FORCE_LEDGER)."""
        self.stats.force_ledger.inc()
        self.journals.for_ledger(ledger_id).force(callback)

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        return self.storage_full.get_explicit_lac(ledger_id, scope_id)

    def read_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0, high_priority: bool = False) -> bytes:
        """The stored entry (entry -1: the highest one). Raises BKNoSuchLedgerExists / BKNoSuchEntry.
        While a full ledger disk keeps journal records out of ledger storage, those are read from the
        journal (bkfast.bookie.storage_full). `high_priority`: a fencing or recovery read (ledger storage's
        thread-scoped stats then count it as Java's BookieHighPriorityThread's)."""
        stats = self.stats
        t0 = now_ns()
        try:
            if high_priority:
                with thread_stats.high_priority():
                    data = self.storage_full.get_entry(ledger_id, entry_id, scope_id)
            else:
                data = self.storage_full.get_entry(ledger_id, entry_id, scope_id)
        except BaseException as error:
            stats.read_failed(t0)
            if self.metrics is not None:
                self.metrics.read_failed(error)
            raise
        stats.read_done(len(data), t0)
        if self.metrics is not None:
            self.metrics.read_ok((now_ns() - t0) / 1e9)
        return data

    def read_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry if ledger storage holds it in memory (write cache, read-ahead cache), else None:
        never touches the disk, so the reactor may call it (a miss goes to the server's read pool)."""
        return self._read_cached(ledger_id, entry_id, scope_id)

    def add_runs(self) -> FastAdds | None:
        return self.fast_adds if self.fast_adds.run is not None else None

    def memory_lookup(self) -> EntrySource | Callable[[int, int, int], bytes | None]:
        """Ledger storage's C entry source (DbLedgerStorage's caches), else read_entry_cached's storage call."""
        source = self.storage.memory_entries
        return source if source is not None else self._read_cached

    def count_reads_from_memory(self, n: int, seconds: float) -> None:
        """The server answered n reads from memory (read_entry_cached) in `seconds`: for the metrics, and
        ledger storage's read_entry and cache hit stats (the hits it counted get `seconds / n` each)."""
        if n:
            self.storage.record_memory_reads(int(seconds * 1e9) // n)
        if self.metrics is not None and n:
            self.metrics.reads_from_memory(n, seconds)

    def read_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        return self.storage_full.get_last_add_confirmed(ledger_id, scope_id)

    # --- room for adds (the reactor never waits) --------------------------------------------------------
    def set_room_listener(self, listener: Callable[[], None]) -> None:
        """Switch to non-waiting adds: when the write cache or the journal queue is full, add_entries
        refuses the adds at once with StorageBusyError (not stored, not journaled) instead of waiting, and
        `listener()` is called (from the flush or journal thread) once room may be back."""
        self._room_listener = listener
        self.storage.set_room_listener(listener)
        self.journals.room_listener = listener

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self.storage_full.ledger_exists(ledger_id, scope_id)

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self.storage_full.is_fenced(ledger_id, scope_id)

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        """Java's getListOfEntriesOfLedger (BOOKIE_GET_LIST_OF_ENTRIES_OF_LEDGER)."""
        t0 = now_ns()
        try:
            entries = self.storage_full.entries_of_ledger(ledger_id, scope_id)
        except BaseException:
            self.stats.get_list_of_entries_of_ledger.fail_since(t0)
            raise
        self.stats.get_list_of_entries_of_ledger.ok_since(t0)
        return entries

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        self.fast_adds.forget_deleted(ledger_id, scope_id)
        self.storage.delete_ledger(ledger_id, scope_id)
        self.storage_full.forget_ledger(ledger_id, scope_id)
        self.lac.drop(scope_id, ledger_id)
        log.info("deleted ledger %d%s", ledger_id, f" scope {scope_id}" if scope_id else "")

    # --- garbage collection --------------------------------------------------------------------------
    def gc_state(self) -> dict:
        """Garbage collection state: per-log live ratio, last GC/compaction times, bytes reclaimed."""
        state = self.gc.state()
        state["read_only"] = self.read_only
        state["read_only_reasons"] = self.read_only_reasons
        state["disk_usage"] = dict(self.disk_checker.usages)
        state["journal_served_entries"] = self.storage_full.journal_served_entries
        return state

    # --- checkpoint and replay ---------------------------------------------------------------------
    def checkpoint(self) -> tuple[int, int]:
        """Mark every journal, flush ledger storage, persist each journal's lastMark in every ledger dir,
        trim old journals. Returns the first journal's mark ((0, 0) before start).

        Nothing while a journal is not fully replayed (a full ledger disk at start): no lastMark may pass
        records that are not in ledger storage yet."""
        if self.storage_full.holds_journals:
            return (0, 0)
        with self._checkpoint_lock:
            # The marks are taken first: every record before a journal's mark is already in ledger
            # storage's memory (storage is written before the journal), so the flush below covers all of
            # them, and each journal's mark is only what that journal made durable.
            marks = self.journals.marks()
            self.storage.checkpoint()
            if marks is None:
                return (0, 0)
            self.journals.persist(marks)
            journal_id, offset = marks[0]
            return (journal_id, offset)

    def _checkpoint_loop(self) -> None:
        thread_time = self.stats.sync_thread_time
        while not self._stop_checkpointing.wait(self._flush_interval_s):
            if self.storage_full.active:
                continue                 # the disk checker's recovery checkpoints once there is room
            t0 = now_ns()
            try:
                self.checkpoint()
            except Exception as error:
                log.exception("checkpoint failed; will retry in %.1f s", self._flush_interval_s)
                self._note_io_error(error)
            finally:
                thread_time.add(now_ns() - t0)

    def replayed(self, t0: int, before: int) -> None:
        """A replay that began at t0 stored records (replayed_records - before): ledger storage's add_entry
        stats get their average time."""
        self.storage.record_adds((now_ns() - t0) // max(1, self.replayed_records - before))

    def replay_record(self, record: bytes, lock: bool = False) -> None:
        """Store one journal record (entry, master key, fence, explicit LAC) in ledger storage. `lock`: the
        bookie serves meanwhile (a replay resumed by bkfast.bookie.storage_full), so the record takes the
        ledger lock, as the request path's check-then-act of keys and fences does."""
        if lock:
            with self._ledger_lock:
                self._replay_record(record)
        else:
            self._replay_record(record)

    def _replay_record(self, record: bytes) -> None:
        r = journal_mod.parse_record(record)
        kind = r.kind
        if kind == journal_mod.RecordKind.ENTRY:
            self.storage.add_entry(bytes(record))
        elif kind == journal_mod.RecordKind.MASTER_KEY:
            if self.storage.get_master_key(r.ledger_id, r.scope_id) is None:
                self.storage.set_master_key(r.ledger_id, bytes(r.body), r.scope_id)
        elif kind == journal_mod.RecordKind.FENCE:
            self.storage.set_fenced(r.ledger_id, r.scope_id)
        elif kind == journal_mod.RecordKind.EXPLICIT_LAC:
            self.storage.set_explicit_lac(r.ledger_id, bytes(r.body), r.scope_id)
        else:
            return
        self.replayed_records += 1


class _BatchCompletion:
    """The completions of a batch's journal records: `callback(accepted, error)` per journal share, with
    its accepted indices (None: the batch went to one journal and every add of it was accepted)."""

    __slots__ = ("_accepted", "_failures", "_callback", "_whole")

    def __init__(self, accepted: list[int], failures: list,
                 callback: Callable[[list[int] | None, BaseException | None], None]):
        self._accepted = accepted
        self._failures = failures
        self._callback = callback
        self._whole: list[int] | None = accepted if failures else None

    def done(self, error: BaseException | None) -> None:
        """The batch's records went to one journal, and are durable (or failed)."""
        self._callback(self._whole, error)

    def share_done(self, positions: list[int], error: BaseException | None) -> None:
        """One journal's share (positions in the accepted adds) is durable (or failed)."""
        accepted = self._accepted
        self._callback([accepted[k] for k in positions], error)

    def refused(self, positions: list[int], error: BaseException) -> None:
        """A journal refused its share: those adds fail now."""
        self._failures.extend((self._accepted[k], error) for k in positions)


def _ignore(error: BaseException | None) -> None:
    """Completion of records nobody waits for (a ledger's master key record precedes its first add)."""
    if error is not None:
        log.error("journal record failed: %s", error)

