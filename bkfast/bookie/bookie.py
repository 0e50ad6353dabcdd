"""The Bookie: the storage server's brain, without sockets.

Owns: the rules of a bookie — master-key checks on first sight of a ledger and on every add or fence
after, fencing (normal adds refused, recovery adds accepted), explicit LAC, reads including "the last
entry" — and the order that makes acknowledged data durable: an add goes to ledger storage (memory),
then to the journal, and is acknowledged only after its journal record is on disk. Also owns the
checkpoint (take the journal mark, flush ledger storage, persist lastMark, trim old journals) and the
replay of journals from lastMark at start-up.

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
import time
from collections.abc import Callable
from pathlib import Path

from bkfast.bookie import journal as journal_mod
from bkfast.bookie import logmark
from bkfast.bookie.journal import Journal
from bkfast.codec import peek_entry_ids
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.errors import (
    BKBookieIOException,
    BKError,
    BKIllegalOpException,
    BKLedgerFencedException,
    BKNoSuchLedgerExistsException,
    BKTimeoutException,
    BKUnauthorizedAccessException,
    BKWriteOnReadOnlyBookieException,
    ConfigurationError,
)

log = logging.getLogger(__name__)

Callback = Callable[[BaseException | None], None]

CURRENT_DIR = "current"
DB_LEDGER_STORAGE_NAMES = frozenset({
    "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage", "DbLedgerStorage", "db",
})
SYNC_WAIT_SECONDS = 30.0


def _run_batch(batch: list[tuple[Callback, BaseException | None]]) -> None:
    for callback, error in batch:
        try:
            callback(error)
        except Exception:  # a failing callback must not stop the others of its batch
            log.exception("bookie completion callback failed")


def _inline_dispatcher(run: Callable[[list], None], batch: list) -> None:
    run(batch)


class Bookie:
    """A bookie's storage: journal + ledger storage + checkpoint, driven by callbacks."""

    def __init__(self, conf: ServerConfiguration, dispatcher: Callable[[Callable, list], None] | None = None):
        self.conf = conf
        self._dispatcher = dispatcher or _inline_dispatcher
        journal_dirs = conf.get("journalDirectories") or [conf.get("journalDirectory")]
        self.journal_dir = Path(journal_dirs[0])
        self.ledger_dirs = [Path(d) for d in conf.get("ledgerDirectories")]
        self.index_dirs = [Path(d) for d in (conf.get("indexDirectories") or conf.get("ledgerDirectories"))]
        for d in [self.journal_dir, *self.ledger_dirs, *self.index_dirs]:
            (d / CURRENT_DIR).mkdir(parents=True, exist_ok=True)
        storage_class = conf.get("ledgerStorageClass")
        if storage_class not in DB_LEDGER_STORAGE_NAMES:
            # Refuse rather than silently write another on-disk format than the operator asked for.
            raise ConfigurationError(
                f"ledgerStorageClass: {storage_class!r} is not available yet; bkfast serves "
                f"org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage (the file-based index storage "
                f"behind SortedLedgerStorage/InterleavedLedgerStorage is not built yet)")
        self.storage = DbLedgerStorage([str(d) for d in self.ledger_dirs], [str(d) for d in self.index_dirs], conf)
        self.journal: Journal | None = None
        # Serialises the check-then-act of master keys and fences (reactor and replay threads).
        self._ledger_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._stop_checkpointing = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None
        self._flush_interval_s = max(conf.get("flushInterval"), 1) / 1000.0
        self.replayed_records = 0
        self.started = False
        # Read-only bookie (forceReadOnlyBookie, or later the disk checker): adds are refused with
        # EREADONLY unless high priority (recovery), as Java does with high-priority writes allowed.
        self.read_only = False
        # bkfast.http.metrics.BookieMetrics when the admin HTTP server is on; None costs one check per op.
        self.metrics = None

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Replay journals from lastMark into ledger storage, then open a new journal and serve."""
        mark = logmark.read_last_mark(self._ledger_dir_names())
        log.info("bookie replaying journal %s from mark %s", self.journal_dir, mark)
        journal_mod.replay(str(self.journal_dir), mark, self._replay_record,
                           skip_invalid=self.conf.get("skipInvalidJournalRecord"))
        log.info("bookie replayed %d journal records", self.replayed_records)
        self.journal = Journal(str(self.journal_dir), self.conf, self._on_journal_batch, self._on_journal_error)
        self.journal.start()
        # Everything replayed is now in ledger storage; checkpointing it makes the next start fast.
        self.checkpoint()
        self._checkpoint_thread = threading.Thread(target=self._checkpoint_loop, name="bookie-sync", daemon=True)
        self._checkpoint_thread.start()
        self.started = True

    def stop(self) -> None:
        """Finish queued journal writes, flush ledger storage, checkpoint, close. Idempotent."""
        if not self.started:
            return
        self.started = False
        self._stop_checkpointing.set()
        if self._checkpoint_thread is not None:
            self._checkpoint_thread.join()
        self.journal.stop()
        self.checkpoint()
        self.storage.close()
        log.info("bookie stopped cleanly")

    def __enter__(self) -> Bookie:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _ledger_dir_names(self) -> list[str]:
        # The lastMark helpers add `current/` themselves.
        return [str(d) for d in self.ledger_dirs]

    # --- journal plumbing --------------------------------------------------------------------------
    def _on_journal_batch(self, tokens: list) -> None:
        self._dispatcher(_run_batch, [(callback, None) for callback in tokens])

    def _on_journal_error(self, tokens: list, error: BaseException) -> None:
        log.error("journal write failed for %d requests: %s", len(tokens), error)
        failure = BKBookieIOException(f"journal write failed: {error}")
        self._dispatcher(_run_batch, [(callback, failure) for callback in tokens])

    def _fail(self, callback: Callback, error: BaseException) -> None:
        self._dispatcher(_run_batch, [(callback, error)])

    # --- master keys and fences --------------------------------------------------------------------
    def _admit(self, scope_id: int, ledger_id: int, master_key: bytes) -> None:
        """Check the key of a ledger the bookie knows; remember (and journal) it on first sight.

        Called with _ledger_lock held. The key record is queued before the request's own record, so
        replay always learns a ledger's key before its entries, fence or LAC.
        """
        stored = self.storage.get_master_key(ledger_id, scope_id)
        if stored is None:
            self.storage.set_master_key(ledger_id, bytes(master_key), scope_id)
            self.journal.log_record(journal_mod.master_key_record(ledger_id, master_key, scope_id), _ignore)
        elif bytes(stored) != bytes(master_key):
            raise BKUnauthorizedAccessException(
                f"wrong master key for ledger {ledger_id}" + (f" scope {scope_id}" if scope_id else ""))

    # --- operations ------------------------------------------------------------------------------
    def add_entry(self, entry, master_key: bytes, callback: Callback, recovery: bool = False,
                  ack_before_sync: bool = False, high_priority: bool = False) -> None:
        """Store an entry (the bytes exactly as the client packaged them); callback after it is durable."""
        if self.metrics is not None:
            callback = self.metrics.timed_add(callback)
        try:
            if self.read_only and not (recovery or high_priority):
                raise BKWriteOnReadOnlyBookieException("bookie is read-only")
            _, scope_id, ledger_id, entry_id = peek_entry_ids(entry)
            if ledger_id < 0 or entry_id < 0:
                raise BKIllegalOpException(f"add with invalid ids: ledger {ledger_id} entry {entry_id}")
            entry = bytes(entry)
            with self._ledger_lock:
                self._admit(scope_id, ledger_id, master_key)
                if not recovery and self.storage.is_fenced(ledger_id, scope_id):
                    raise BKLedgerFencedException(f"ledger {ledger_id} is fenced")
                self.storage.add_entry(entry)
            self.journal.log_record(entry, callback, ack_before_sync=ack_before_sync)
        except BKError as error:
            self._fail(callback, error)
        except Exception as error:  # anything unexpected is an I/O error for the client, and logged
            log.exception("add failed")
            self._fail(callback, BKBookieIOException(str(error)))

    def fence(self, ledger_id: int, master_key: bytes, callback: Callback, scope_id: int = 0) -> None:
        """Fence a ledger (creating it with this key if unseen); callback once the fence is durable."""
        try:
            with self._ledger_lock:
                self._admit(scope_id, ledger_id, master_key)
                newly_fenced = self.storage.set_fenced(ledger_id, scope_id)
                if newly_fenced:
                    log.info("fenced ledger %d%s", ledger_id, f" scope {scope_id}" if scope_id else "")
                    self.journal.log_record(journal_mod.fence_record(ledger_id, scope_id), callback)
                else:
                    # Already fenced: done once the earlier fence record (queued before us) is durable.
                    self.journal.force(callback)
        except BKError as error:
            self._fail(callback, error)

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, master_key: bytes, callback: Callback,
                         scope_id: int = 0) -> None:
        try:
            with self._ledger_lock:
                self._admit(scope_id, ledger_id, master_key)
                self.storage.set_explicit_lac(ledger_id, bytes(lac_buffer), scope_id)
            self.journal.log_record(journal_mod.explicit_lac_record(ledger_id, lac_buffer, scope_id), callback)
        except BKError as error:
            self._fail(callback, error)

    def force_ledger(self, ledger_id: int, callback: Callback, scope_id: int = 0) -> None:
        """Complete once every entry queued before this call is durable (FORCE_LEDGER)."""
        self.journal.force(callback)

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        if not self.storage.ledger_exists(ledger_id, scope_id):
            raise BKNoSuchLedgerExistsException(f"ledger {ledger_id} not found")
        return self.storage.get_explicit_lac(ledger_id, scope_id)

    def read_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        """The stored entry (entry -1: the highest one). Raises BKNoSuchLedgerExists / BKNoSuchEntry."""
        metrics = self.metrics
        if metrics is None:
            return self.storage.get_entry(ledger_id, entry_id, scope_id)
        t0 = time.perf_counter()
        try:
            data = self.storage.get_entry(ledger_id, entry_id, scope_id)
        except BaseException as error:
            metrics.read_failed(error)
            raise
        metrics.read_ok(time.perf_counter() - t0)
        return data

    def read_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        return self.storage.get_last_add_confirmed(ledger_id, scope_id)

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self.storage.ledger_exists(ledger_id, scope_id)

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        return self.storage.is_fenced(ledger_id, scope_id)

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        if not self.storage.ledger_exists(ledger_id, scope_id):
            raise BKNoSuchLedgerExistsException(f"ledger {ledger_id} not found")
        return self.storage.entries_of_ledger(ledger_id, scope_id)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        self.storage.delete_ledger(ledger_id, scope_id)
        log.info("deleted ledger %d%s", ledger_id, f" scope {scope_id}" if scope_id else "")

    # --- blocking conveniences (scripts, tests, the crash-test child) -----------------------------
    def _wait(self, start: Callable[[Callback], None]) -> None:
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def callback(error):
            outcome.append(error)
            done.set()

        start(callback)
        if not done.wait(SYNC_WAIT_SECONDS):
            raise BKTimeoutException(f"bookie operation not durable after {SYNC_WAIT_SECONDS} s")
        if outcome[0] is not None:
            raise outcome[0]

    def add_entry_sync(self, entry, master_key: bytes, recovery: bool = False) -> None:
        self._wait(lambda cb: self.add_entry(entry, master_key, cb, recovery=recovery))

    def fence_sync(self, ledger_id: int, master_key: bytes, scope_id: int = 0) -> None:
        self._wait(lambda cb: self.fence(ledger_id, master_key, cb, scope_id))

    def set_explicit_lac_sync(self, ledger_id: int, lac_buffer: bytes, master_key: bytes, scope_id: int = 0):
        self._wait(lambda cb: self.set_explicit_lac(ledger_id, lac_buffer, master_key, cb, scope_id))

    # --- checkpoint and replay ---------------------------------------------------------------------
    def checkpoint(self) -> tuple[int, int]:
        """Mark, flush ledger storage, persist lastMark in every ledger dir, trim old journals."""
        with self._checkpoint_lock:
            # The mark is taken first: every record before it is already in ledger storage's memory
            # (storage is written before the journal), so the flush below covers all of them.
            mark = self.journal.last_log_mark if self.journal is not None else None
            self.storage.checkpoint()
            if mark is None:
                return (0, 0)
            logmark.write_last_mark(self._ledger_dir_names(), mark)
            self.journal.gc_journals(mark)
            return tuple(mark)

    def _checkpoint_loop(self) -> None:
        while not self._stop_checkpointing.wait(self._flush_interval_s):
            try:
                self.checkpoint()
            except Exception:
                log.exception("checkpoint failed; will retry in %.1f s", self._flush_interval_s)

    def _replay_record(self, record) -> None:
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


def _ignore(error: BaseException | None) -> None:
    """Completion of records nobody waits for (a ledger's master key record precedes its first add)."""
    if error is not None:
        log.error("journal record failed: %s", error)

