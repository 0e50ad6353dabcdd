"""A bookie whose ledger disk is full at start: replay what fits, serve read-only, recover when room returns.

Owns the "storage-full" read-only reason of the Bookie. At start-up, ledger storage may be unable to
take the journal's records: its RocksDB indexes opened read-only (no room to open them for writing, see
bkfast.dbstorage.index.RocksStore), or the write cache filled and no flush could make room. Java starts
read-only in this case; so does bkfast: the replay stops at the first record that does not fit (the
position is kept: with several journal directories, each journal's own — the one being replayed where
it stopped, the journals after it at their lastMark), the start-up checkpoint is skipped, and the bookie
serves reads (and recovery adds) read-only, registered under available/readonly.

While the replay is incomplete: no checkpoint may move lastMark (records after the stop are only in the
journal), and what the replay could not store is served from the journal itself: at the stop, every
record after the stop positions is indexed (bookie/journal_index.py: each entry's journal file, offset
and length; each ledger's master key, fence and explicit LAC from its meta records), and the Bookie's
reads, last entry, LAC, explicit LAC, fence checks and master-key checks go through the read view below:
ledger storage, then that index. Every acknowledged entry stays readable. A ledger or entry neither has
is "no such entry" only when the index holds every unreplayed record; when it could not (its bound, a
corrupt record), it answers an I/O error: that entry may be among the records not indexed, and a
client's ledger recovery must not count this bookie as not having it.

When the disk checker sees room again (below diskUsageLwmThreshold), `recover` reopens the indexes for
writing, replays the rest of every journal from where it stopped (journal files opened before this start
only, per journal directory: what this process journaled is in ledger storage already, so nothing is
replayed twice), checkpoints, and the bookie is writable. Each entry the resumed replay stores leaves
the index (reads find it in ledger storage from then on); the index is dropped once the replay is
complete, before the checkpoint that may garbage-collect the journal files it pointed into. If that
fails, the bookie stays read-only (with what is left indexed) and the next disk check tries again.

Must never: move lastMark past a record that is not in ledger storage, or answer "no such entry" while
records are missing and not indexed.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol

from bkfast._stats import now_ns
from bkfast.bookie import journal as journal_mod
from bkfast.bookie.disk_checker import is_no_space
from bkfast.bookie.journal_index import JournalIndex
from bkfast.bookie.lac import lac_of_buffer
from bkfast.errors import (
    BKBookieIOException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKUnauthorizedAccessException,
    ReplayInterrupted,
    WriteCacheFullError,
    missing_entry_error,
)
from bkfast.storage.entry_header import entry_lac
from bkfast.storage.interface import LedgerStorage

if TYPE_CHECKING:
    from bkfast.bookie.disk_checker import DiskChecker
    from bkfast.bookie.journals import JournalSet
    from bkfast.bookie.settings import BookieSettings

__all__ = ["REASON", "StorageFullState", "ReplayingBookie"]

log = logging.getLogger(__name__)

REASON = "storage-full"


def _no_room(error: BaseException | None) -> bool:
    return isinstance(error, WriteCacheFullError) or is_no_space(error)


class ReplayingBookie(Protocol):
    """What this state reads and calls of the Bookie it belongs to (a Protocol: the Bookie imports this
    module, so this module cannot import it)."""

    settings: BookieSettings
    journals: JournalSet
    storage: LedgerStorage
    disk_checker: DiskChecker
    replayed_records: int

    def replay_record(self, record: bytes, lock: bool = False) -> None: ...

    def replayed(self, t0: int, before: int) -> None: ...

    def checkpoint(self) -> tuple[int, int]: ...

    def set_read_only_reason(self, reason: str, on: bool, detail: str) -> None: ...


class StorageFullState:
    """The Bookie's state for a ledger disk that was full at start (see the module docstring)."""

    def __init__(self, bookie: ReplayingBookie):
        self.bookie = bookie
        self.active = False
        # journal index -> where its replay resumes (the journals not fully replayed); None: all are
        self.replay_pending: dict[int, journal_mod.LogMark] | None = None
        self._first_new_journals: list[int] | None = None
        self._lock = threading.Lock()
        # The unreplayed records, served from the journal while replay_pending; None otherwise.
        self.index: JournalIndex | None = None

    @property
    def journal_served_entries(self) -> int:
        """Acknowledged entries that only the journal holds now (read through the journal files)."""
        index = self.index
        return 0 if index is None else len(index)

    @property
    def holds_journals(self) -> bool:
        """The journal files after lastMark are still needed: no checkpoint, so no journal GC."""
        return self.replay_pending is not None or self.index is not None

    def replay(self, marks) -> None:
        """Start-up replay of every journal from its lastMark (`marks`, in journalDirectories order);
        stops (keeping each journal's position) when ledger storage takes no more."""
        b = self.bookie
        pending = dict(enumerate(marks))
        try:
            b.journals.replay(pending, b.replay_record, skip_invalid=b.settings.skip_invalid_journal_record)
        except ReplayInterrupted as stop:
            cause = stop.__cause__
            if cause is None or not _no_room(cause):
                raise (cause or stop) from None
            self.replay_pending = pending
            log.error("journal replay stopped at %s: ledger storage has no room (%s); the rest is replayed "
                      "once the ledger disk has room again", self.describe_pending(), cause)
            self._index_rest(pending)

    def _index_rest(self, pending: dict[int, journal_mod.LogMark]) -> None:
        b = self.bookie
        try:
            index = JournalIndex.build(
                [(b.journals.journal_dirs[i], mark) for i, mark in sorted(pending.items())],
                skip_invalid=b.settings.skip_invalid_journal_record)
        except Exception as error:  # noqa: BLE001 - still start read-only; reads of those records answer EIO
            log.error("journal-served entries: 0: indexing the unreplayed journal records failed: %s", error)
            return
        self.index = index
        log.warning("journal-served entries: %d (%d bytes, %d ledgers) are read from the journal files until "
                    "the replay stores them%s", len(index), index.bytes, index.ledgers,
                    "" if index.complete else "; not every unreplayed record could be indexed")

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
        elif b.storage.read_only:
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
        b.set_read_only_reason(REASON, True, detail)

    def check_missing(self, error: BaseException) -> None:
        """A read found no such ledger/entry: while records are neither replayed nor indexed, that is an
        I/O error."""
        index = self.index
        if self.replay_pending is not None and (index is None or not index.complete):
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
                if b.storage.read_only:
                    b.storage.reopen_writable()
                if self.replay_pending is not None:
                    self._resume_replay(self.replay_pending)
                b.checkpoint()
            except Exception as error:  # noqa: BLE001 - still no room (or another I/O error): stay read-only
                log.warning("the ledger disk has room (%s) but ledger storage still cannot take the journal: "
                            "%s; read-only until the next disk check", detail, error)
                b.disk_checker.full = True
                return False
            self.active = False
        log.info("ledger storage has room again and the journal is fully replayed")
        b.set_read_only_reason(REASON, False, detail)
        return True

    def _resume_replay(self, pending: dict[int, journal_mod.LogMark]) -> None:
        b = self.bookie
        index = self.index

        def visit(record) -> None:
            # The bookie serves meanwhile: meta records take the ledger lock as the request path does.
            r = journal_mod.parse_record(record)
            if r.kind == journal_mod.RecordKind.ENTRY:
                b.replay_record(record)
                if index is not None:
                    index.forget_entry(r.scope_id, r.ledger_id, r.entry_id)
            else:
                b.replay_record(record, lock=True)

        before = b.replayed_records
        t0 = now_ns()
        try:
            # Each journal resumes where it stopped; replay_pending keeps the positions if it stops again.
            b.journals.replay(pending, visit, skip_invalid=b.settings.skip_invalid_journal_record,
                              before_journal_ids=self._first_new_journals)
        except ReplayInterrupted as stop:
            log.warning("journal-served entries: %d are still read from the journal files",
                        self.journal_served_entries)
            raise (stop.__cause__ or stop) from None
        finally:
            b.replayed(t0, before)
        # Dropped before replay_pending: the checkpoint that follows may delete the journals it pointed into.
        self.index = None
        log.info("journal replay finished: %d more records; journal-served entries: 0",
                 b.replayed_records - before)
        self.replay_pending = None

    # --- the Bookie's read view: ledger storage, then the unreplayed records ------------------------------
    def get_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes:
        """The entry (entry -1: the ledger's highest), from ledger storage or the journal."""
        storage = self.bookie.storage
        index = self.index
        try:
            if index is not None:
                # The index first: the replay stores an entry before it leaves the index, so a miss here
                # finds it in ledger storage.
                wanted = entry_id
                if entry_id < 0:
                    wanted = index.last_entry(scope_id, ledger_id)
                    if wanted >= 0 and wanted <= self._stored_last_entry(ledger_id, scope_id):
                        wanted = -1
                if wanted >= 0:
                    data = index.read_entry(scope_id, ledger_id, wanted)
                    if data is not None:
                        return data
                    entry_id = wanted
            return storage.get_entry(ledger_id, entry_id, scope_id)
        except (BKNoSuchLedgerExistsException, BKNoSuchEntryException) as error:
            self.check_missing(error)
            if isinstance(error, BKNoSuchLedgerExistsException) and index is not None and \
                    index.knows(scope_id, ledger_id):
                raise missing_entry_error(True, scope_id, ledger_id, entry_id) from None
            raise

    def _stored_last_entry(self, ledger_id: int, scope_id: int) -> int:
        try:
            return self.bookie.storage.get_last_entry_id(ledger_id, scope_id)
        except BKNoSuchLedgerExistsException:
            return -1

    def get_last_add_confirmed(self, ledger_id: int, scope_id: int = 0) -> int:
        """The LAC piggy-backed on the ledger's highest entry."""
        if self.index is None:
            try:
                return self.bookie.storage.get_last_add_confirmed(ledger_id, scope_id)
            except (BKNoSuchLedgerExistsException, BKNoSuchEntryException) as error:
                self.check_missing(error)
                raise
        return entry_lac(self.get_entry(ledger_id, -1, scope_id))

    def ledger_exists(self, ledger_id: int, scope_id: int = 0) -> bool:
        index = self.index
        return self.bookie.storage.ledger_exists(ledger_id, scope_id) or (
            index is not None and index.knows(scope_id, ledger_id))

    def fence_check(self):
        """`is_fenced(ledger_id, scope_id)` of ledger storage, or this view's while an index exists."""
        return self.bookie.storage.is_fenced if self.index is None else self.is_fenced

    def is_fenced(self, ledger_id: int, scope_id: int = 0) -> bool:
        """BKNoSuchLedgerExistsException when neither ledger storage nor the journal knows the ledger."""
        index = self.index
        if index is None:
            return self.bookie.storage.is_fenced(ledger_id, scope_id)
        if index.fenced(scope_id, ledger_id):
            return True
        try:
            return self.bookie.storage.is_fenced(ledger_id, scope_id)
        except BKNoSuchLedgerExistsException:
            if index.knows(scope_id, ledger_id):
                return False
            raise

    def check_journaled_key(self, ledger_id: int, master_key: bytes, scope_id: int = 0) -> None:
        """Ledger storage has no key for the ledger: the key a journal record not replayed yet gave it
        must match (BKUnauthorizedAccessException)."""
        index = self.index
        journaled = None if index is None else index.master_key(scope_id, ledger_id)
        if journaled is not None and journaled != bytes(master_key):
            raise BKUnauthorizedAccessException(
                f"wrong master key for ledger {ledger_id}" + (f" scope {scope_id}" if scope_id else ""))

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None:
        """The ledger's explicit-LAC buffer (the one with the higher LAC when both ledger storage and an
        unreplayed record have one); BKNoSuchLedgerExistsException for an unknown ledger."""
        storage = self.bookie.storage
        index = self.index
        journaled = None
        if index is not None and index.knows(scope_id, ledger_id):
            journaled = index.explicit_lac(scope_id, ledger_id)
            if not storage.ledger_exists(ledger_id, scope_id):
                return journaled
        elif not storage.ledger_exists(ledger_id, scope_id):
            raise BKNoSuchLedgerExistsException(f"ledger {ledger_id} not found")
        stored = storage.get_explicit_lac(ledger_id, scope_id)
        if journaled is None or (stored is not None and lac_of_buffer(stored) > lac_of_buffer(journaled)):
            return stored
        return journaled

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]:
        storage = self.bookie.storage
        index = self.index
        in_index = set() if index is None else index.entry_ids(scope_id, ledger_id)
        if not storage.ledger_exists(ledger_id, scope_id):
            if index is None or not index.knows(scope_id, ledger_id):
                raise BKNoSuchLedgerExistsException(f"ledger {ledger_id} not found")
            return sorted(in_index)
        stored = storage.entries_of_ledger(ledger_id, scope_id)
        return sorted(set(stored) | in_index) if in_index else stored

    def forget_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        index = self.index
        if index is not None:
            index.forget_ledger(scope_id, ledger_id)
