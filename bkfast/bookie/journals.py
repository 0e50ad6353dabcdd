"""The bookie's journals: one Journal per journal directory, and which ledger goes to which.

Owns: the ledger -> journal rule (Java 4.16's `BookieImpl.getJournal`: journal number `ledgerId mod
count`, in the order of journalDirectories; a scoped 128-bit ledger uses its 64-bit ledger id alone), the
per-journal lastMark files (`lastMark` with one journal, `lastMark.<index>` with several, in every ledger
dir), replaying every journal from its own mark (and resuming where a replay stopped: see
bookie/storage_full.py), the marks a checkpoint persists, splitting one batch of records over the
journals with one completion for all of it, queue room for the non-waiting adds (the room listener is set
on every journal) and the recovery of every journal a full disk stopped.

Every record of a ledger (master key, entries, fence, explicit LAC, force) goes to the same journal, so
one journal's order is the ledger's order and replaying the journals one after another is correct.

Must never: persist a mark that is not durable in its own journal, or take one journal's mark for another
(each is taken, before the ledger storage flush, from the journal it names).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import partial

from bkfast.attributes import Summed
from bkfast.bookie import journal as journal_mod
from bkfast.bookie import logmark
from bkfast.bookie.journal import Journal
from bkfast.bookie.logmark import LogMark
from bkfast.codec import peek_entry_ids
from bkfast.errors import BKError, ConfigurationError, ReplayInterrupted

log = logging.getLogger(__name__)


def journal_index(ledger_id: int, journal_count: int) -> int:
    """Which journal a ledger's records go to (Java's `MathUtils.signSafeMod(ledgerId, journals.size())`)."""
    return ledger_id % journal_count


class JournalSet:
    """The journals of one bookie, in journalDirectories order. `completion_sink` and `error_sink` are
    shared by all of them (each journal calls them from its own thread)."""

    def __init__(self, journal_dirs, ledger_dirs, conf, completion_sink: Callable[[list], object],
                 error_sink: Callable[[list, BaseException], object], stats=None):
        """`stats`: the `bookie` scope StatsLogger; journal i records under `bookie_journal_*` with
        journalIndex=i, as Java's journals."""
        self.journal_dirs = [os.fspath(d) for d in journal_dirs]
        twice = sorted({d for d in self.journal_dirs if self.journal_dirs.count(d) > 1})
        if twice:
            raise ConfigurationError(f"journalDirectories lists {', '.join(twice)} more than once: "
                                     "give each journal its own directory")
        self.ledger_dirs = [os.fspath(d) for d in ledger_dirs]
        self.conf = conf
        self.count = len(self.journal_dirs)
        scope = stats.scope("journal") if stats is not None else None
        self.journals = [Journal(d, conf, completion_sink, error_sink,
                                 stats=scope.scope_label("journalIndex", i) if scope is not None else None,
                                 index=i)
                         for i, d in enumerate(self.journal_dirs)]
        self.started = False

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return iter(self.journals)

    def __getitem__(self, index: int) -> Journal:
        return self.journals[index]

    def for_ledger(self, ledger_id: int) -> Journal:
        return self.journals[ledger_id % self.count]

    # --- lastMark and replay ----------------------------------------------------------------------
    def _mark_index(self, index: int) -> int | None:
        return logmark.journal_index_for(index, self.count)

    def check_dirs(self) -> None:
        """ConfigurationError if the lastMark copies were written by a bookie with other journal dirs."""
        logmark.check_journal_count(self.ledger_dirs, self.journal_dirs)

    def read_marks(self) -> list[LogMark]:
        return [logmark.read_last_mark(self.ledger_dirs, self._mark_index(i)) for i in range(self.count)]

    def replay(self, pending: dict[int, LogMark], visitor: Callable[[bytes], object], skip_invalid: bool = False,
               before_journal_ids: list[int] | None = None) -> None:
        """Replay journal i from `pending[i]` for every i in `pending`, in index order, removing each one
        once it is fully replayed (journal files from `before_journal_ids[i]` on are left out, if given).

        A visitor failure stops it: `pending[i]` of the journal being replayed becomes the position to
        resume from (that record again, nothing before it), later journals keep their marks, and
        ReplayInterrupted (its cause the visitor's exception) propagates. Calling again resumes.
        """
        for i in sorted(pending):
            journal_dir = self.journal_dirs[i]
            log.info("bookie replaying journal %d (%s) from mark %s", i, journal_dir, tuple(pending[i]))
            try:
                journal_mod.replay(journal_dir, pending[i], visitor, skip_invalid=skip_invalid,
                                   before_journal_id=None if before_journal_ids is None else before_journal_ids[i],
                                   interruptible=True)
            except ReplayInterrupted as stop:
                pending[i] = stop.mark
                raise
            del pending[i]

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        for journal in self.journals:
            journal.start()
        self.started = True

    def stop(self) -> None:
        """Stop every journal (each writes and syncs what it has queued). Idempotent."""
        for journal in self.journals:
            journal.stop()

    def recover(self) -> None:
        """Every journal stopped by a write error continues in a new file (Journal.recover; a running one
        is left alone). OSError when one still cannot: those recovered before it stay recovered."""
        for journal in self.journals:
            journal.recover()

    # --- room for adds (the reactor never waits) ------------------------------------------------------
    @property
    def room_listener(self):
        return self.journals[0].room_listener

    @room_listener.setter
    def room_listener(self, listener) -> None:
        """Called (from a journal thread) once a journal that was asked for room took its queued batch."""
        for journal in self.journals:
            journal.room_listener = listener

    def room_for(self, adds: list) -> bool:
        """Whether every journal the adds (`(entry, ...)` tuples) go to has queue room for its share. When
        one has not, it is asked to call room_listener once it has (want_room) and False is returned."""
        if self.count == 1:
            journal = self.journals[0]
            if journal.has_room(len(adds)):
                return True
            journal.want_room()
            return False
        shares = [0] * self.count
        count = self.count
        for add in adds:
            try:
                ledger_id = peek_entry_ids(add[0])[2]
            except Exception:  # noqa: BLE001 - a malformed entry is refused by the add itself, not here
                continue
            shares[ledger_id % count] += 1
        room = True
        for journal, share in zip(self.journals, shares, strict=True):
            if share and not journal.has_room(share):
                journal.want_room()
                room = False
        return room

    # --- checkpoint -------------------------------------------------------------------------------
    def marks(self) -> list[LogMark] | None:
        """Each journal's durable position now (None before start): take them BEFORE flushing storage."""
        if not self.started:
            return None
        return [journal.last_log_mark for journal in self.journals]

    def persist(self, marks: list[LogMark]) -> None:
        """Write each journal's mark to its lastMark file in every ledger dir, then trim its old files."""
        for i, mark in enumerate(marks):
            logmark.write_last_mark(self.ledger_dirs, mark, self._mark_index(i))
        for journal, mark in zip(self.journals, marks, strict=True):
            journal.gc_journals(mark)

    # --- several records at once ------------------------------------------------------------------
    def log_split(self, records: list, which: list[int], on_share: Callable[[list[int], BaseException | None], object],
                  on_refused: Callable[[list[int], BaseException], object]) -> int:
        """Queue `records[k]` on journal `which[k]`, each journal's share with one log_records call.

        `on_share(positions, error)` runs for each queued share once it is durable (its journal's
        completion, in that journal's order: a share is answered when its own journal synced, not held for
        the slowest, as Java answers each add from its own journal). A share a journal refuses (queue full,
        journal stopped) is handed to `on_refused(positions, error)` at once and never completes. Returns
        the bytes (with length fields) of the shares queued.
        """
        shares: dict[int, list[int]] = {}
        for k, j in enumerate(which):
            shares.setdefault(j, []).append(k)
        size = 0
        for j, positions in shares.items():
            try:
                size += self.journals[j].log_records([records[k] for k in positions], partial(on_share, positions))
            except BKError as error:
                on_refused(positions, error)
        return size

    # --- counters, summed over the journals (admin metrics) --------------------------------------------
    batch_count = Summed("journals")
    sync_count = Summed("journals")
    records_written = Summed("journals")
    bytes_written = Summed("journals")
    queue_length = Summed("journals")

    @property
    def sync_latency_observer(self):
        return self.journals[0].sync_latency_observer

    @sync_latency_observer.setter
    def sync_latency_observer(self, observer) -> None:
        for journal in self.journals:
            journal.sync_latency_observer = observer
