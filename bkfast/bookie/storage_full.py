"""A bookie whose ledger disk is full at start: replay what fits, serve read-only, recover when room returns.

Owns the "storage-full" read-only reason of the Bookie. At start-up, ledger storage may be unable to
take the journal's records: its RocksDB indexes opened read-only (no room to open them for writing, see
bkfast.dbstorage.index.RocksStore), or the write cache filled and no flush could make room. Java starts
read-only in this case; so does bkfast: the replay stops at the first record that does not fit (the
position is kept: with several journal directories, each journal's own — the one being replayed where
it stopped, the journals after it at their lastMark), the start-up checkpoint is skipped, and the bookie
serves reads (and recovery adds) read-only, registered under available/readonly.

While the replay is incomplete: no checkpoint may move lastMark (records after the stop are only in the
journal), and a read of a ledger or entry the storage does not have answers an I/O error, never "no such
entry" — that entry may be among the records not replayed yet, and a client's ledger recovery must not
count this bookie as not having it.

When the disk checker sees room again (below diskUsageLwmThreshold), `recover` reopens the indexes for
writing, replays the rest of every journal from where it stopped (journal files opened before this start
only, per journal directory: what this process journaled is in ledger storage already, so nothing is
replayed twice), checkpoints, and the bookie is writable. If that fails, it stays read-only and the next
disk check tries again.

Must never: move lastMark past a record that is not in ledger storage, or answer "no such entry" while
records are missing.
"""

from __future__ import annotations

import logging
import threading

from bkfast.bookie import journal as journal_mod
from bkfast.bookie.disk_checker import is_no_space
from bkfast.errors import BKBookieIOException, ReplayInterrupted, WriteCacheFullError

__all__ = ["REASON", "StorageFullState"]

log = logging.getLogger(__name__)

REASON = "storage-full"


def _no_room(error: BaseException | None) -> bool:
    return isinstance(error, WriteCacheFullError) or is_no_space(error)


class StorageFullState:
    """The Bookie's state for a ledger disk that was full at start (see the module docstring)."""

    def __init__(self, bookie):
        self.bookie = bookie
        self.active = False
        # journal index -> where its replay resumes (the journals not fully replayed); None: all are
        self.replay_pending: dict[int, journal_mod.LogMark] | None = None
        self._first_new_journals: list[int] | None = None
        self._lock = threading.Lock()

    def replay(self, marks) -> None:
        """Start-up replay of every journal from its lastMark (`marks`, in journalDirectories order);
        stops (keeping each journal's position) when ledger storage takes no more."""
        b = self.bookie
        pending = dict(enumerate(marks))
        try:
            b.journals.replay(pending, b._replay_record, skip_invalid=b.conf.get("skipInvalidJournalRecord"))
        except ReplayInterrupted as stop:
            cause = stop.__cause__
            if not _no_room(cause):
                raise cause from None
            self.replay_pending = pending
            log.error("journal replay stopped at %s: ledger storage has no room (%s); the rest is replayed "
                      "once the ledger disk has room again", self.describe_pending(), cause)

    def describe_pending(self) -> str:
        """Where the replay resumes: `(journalId, offset)`, or one such per journal with several."""
        pending = self.replay_pending or {}
        if len(self.bookie.journals) == 1:
            return ", ".join(str(tuple(mark)) for mark in pending.values())
        return ", ".join(f"journal {i} at {tuple(mark)}" for i, mark in sorted(pending.items()))

    def journal_started(self, journal_ids: list[int]) -> None:
        """The first journal file this process writes, per journal directory: files from it on are never
        replayed by `recover`."""
        self._first_new_journals = list(journal_ids)

    def checkpoint_after_start(self) -> None:
        """The start-up checkpoint, or read-only when the replay stopped or storage cannot write."""
        b = self.bookie
        if self.replay_pending is not None:
            detail = f"journal replay stopped at {self.describe_pending()}: the ledger disk is full"
        elif getattr(b.storage, "read_only", False):
            detail = "ledger storage indexes opened read-only: the ledger disk is full"
        else:
            try:
                b.checkpoint()
                return
            except Exception as error:
                if not _no_room(error):
                    raise
                detail = f"checkpoint after journal replay failed: {error}"
        log.error("bookie starts read-only: %s", detail)
        self.active = True
        b.disk_checker.full = True          # writable again only through the checker's low-water mark
        b._set_read_only_reason(REASON, True, detail)

    def check_missing(self, error: BaseException) -> None:
        """A read found no such ledger/entry: while records are not replayed, that is an I/O error."""
        if self.replay_pending is not None:
            raise BKBookieIOException(
                f"{error}; but this bookie has not replayed its whole journal yet (its ledger disk is full), "
                "so it cannot tell") from error

    def recover(self, detail: str) -> bool:
        """The disk checker sees room: make storage writable, finish the replay, checkpoint. True when
        the bookie may be writable again (or was never in this state)."""
        if not self.active:
            return True
        b = self.bookie
        with self._lock:
            try:
                if getattr(b.storage, "read_only", False):
                    b.storage.reopen_writable()
                if self.replay_pending is not None:
                    self._resume_replay()
                b.checkpoint()
            except Exception as error:  # noqa: BLE001 - still no room (or another I/O error): stay read-only
                log.warning("the ledger disk has room (%s) but ledger storage still cannot take the journal: "
                            "%s; read-only until the next disk check", detail, error)
                b.disk_checker.full = True
                return False
            self.active = False
        log.info("ledger storage has room again and the journal is fully replayed")
        b._set_read_only_reason(REASON, False, detail)
        return True

    def _resume_replay(self) -> None:
        b = self.bookie

        def visit(record) -> None:
            # The bookie serves meanwhile: meta records take the ledger lock as the request path does.
            kind = journal_mod.parse_record(record).kind
            if kind == journal_mod.RecordKind.ENTRY:
                b._replay_record(record)
            else:
                with b._ledger_lock:
                    b._replay_record(record)

        before = b.replayed_records
        try:
            # Each journal resumes where it stopped; replay_pending keeps the positions if it stops again.
            b.journals.replay(self.replay_pending, visit, skip_invalid=b.conf.get("skipInvalidJournalRecord"),
                              before_journal_ids=self._first_new_journals)
        except ReplayInterrupted as stop:
            raise stop.__cause__ from None
        log.info("journal replay finished: %d more records", b.replayed_records - before)
        self.replay_pending = None
