"""The Bookie's side of the reactor's add fast path (bkfast.bookie._addrun): when a socket read's plain adds
(v2 ADDs, v3 ADD_ENTRYs) may skip the general path, and what a run's adds become once the splitter has
handed them over.

A run: `open` (the reactor, or the add worker of bkfast.net.add_workers, once per socket read) arms it; the
read's first plain add opens it (_start), after checking that nothing would make the general path refuse an
add the table admits (the bookie read-only), by taking the Bookie's ledger lock (so no fence comes between an
add's check and its store) and each ledger directory's active write-cache half; the splitter offers the adds;
`close` releases both and hands each journal its share of records (framed: FramedRecords) with one completion,
which the caller's `answer` turns into the responses once durable. A read with no add takes no lock.
A ledger whose LAC a reader tracks (bkfast.bookie.lac) is watched in the table: `close` advances its LAC
to the highest its taken adds carried, which wakes its long-poll readers, as the general path does.

Stats are those of Bookie.add_entries: BOOKIE_ADD_ENTRY (the run's time split over its adds), its bytes,
WRITE_BYTES, and ledger storage's add_entry count and latency.

Must never: open a run the general path's verdict could differ from, or leave a lock held (close runs in
the caller's `finally`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from bkfast._addsink import MASTER_KEY_BYTES, TAKEN_ADD_BYTES
from bkfast._stats import now_ns
from bkfast.bookie._addrun import AddRun
from bkfast.bookie.journals import JournalSet, journal_index
from bkfast.errors import BKError

if TYPE_CHECKING:
    import threading

    from bkfast.bookie.interface import TakenAnswer
    from bkfast.bookie.lac import LacTracker
    from bkfast.bookie.stats import BookieStats
    from bkfast.storage.interface import AddRunDirectory, LedgerStorage

log = logging.getLogger(__name__)

__all__ = ["FastAdds"]


def _share_done(answer: TakenAnswer, taken: bytes, count: int, error: BaseException | None) -> None:
    """A journal's completion token for its share of a run."""
    answer(error, taken, count)


class FastAdds:
    """The admitted-ledger table of one Bookie and the runs over it (see the module docstring)."""

    def __init__(self, storage: LedgerStorage, journals: JournalSet, ledger_lock: threading.Lock,
                 stats: BookieStats, lac: LacTracker, read_only: Callable[[], bool]):
        self._storage = storage
        self._journals = journals
        self._ledger_lock = ledger_lock
        self._stats = stats
        self._lac = lac
        self._read_only = read_only
        directories = storage.add_run_directories
        self._directories: Sequence[AddRunDirectory] = directories or ()
        self.run: AddRun | None = AddRun(len(journals), len(directories)) if directories else None
        self._opened_ns = 0

    # --- the table (the general path's admission fills it; fences and deletes empty it) -------------
    def note_admitted(self, ledger_id: int, master_key: bytes) -> None:
        """An add of this unscoped ledger passed the general path's admission, not fenced (lock held)."""
        if self.run is not None and type(master_key) is bytes and len(master_key) == MASTER_KEY_BYTES:
            self.run.admit(ledger_id, master_key, journal_index(ledger_id, len(self._journals)),
                           self._storage.directory_index(ledger_id), (0, ledger_id) in self._lac)

    def forget(self, ledger_id: int, scope_id: int = 0) -> None:
        """The ledger was fenced or deleted: its adds go through the general path again."""
        if self.run is not None and not scope_id:
            self.run.forget(ledger_id)

    def forget_deleted(self, ledger_id: int, scope_id: int = 0) -> None:
        """forget() for the garbage collector's thread: under the ledger lock, which a run holds, so the
        table never changes while a run reads it with the GIL released."""
        with self._ledger_lock:
            self.forget(ledger_id, scope_id)

    def watch_lac(self, scope_id: int, ledger_id: int, tracked: bool) -> None:
        """A reader started or stopped tracking the ledger's LAC (LacTracker.on_tracking): under the ledger
        lock, so a run on the add worker sees the watch from its start or not at all."""
        if self.run is not None and not scope_id:
            with self._ledger_lock:
                self.run.watch(ledger_id, tracked)

    # --- a run ----------------------------------------------------------------------------------------
    def open(self, limit: int) -> AddRun | None:
        """Arm a run of at most `limit` adds for the next feed (it opens at the feed's first plain add:
        _start); None when there is none."""
        run = self.run
        if run is None or limit <= 0:
            return None
        run.arm(self._start, limit)
        return run

    def _start(self, limit: int) -> bool:
        """Open the armed run, from its first add: False when adds must take the general path now."""
        run = self.run
        if run is None or self._read_only():
            return False
        halves: list = []
        self._ledger_lock.acquire()
        try:
            for directory in self._directories:
                halves.append(directory.hold_write_half())
            run.open(halves, [d.write_half_limit for d in self._directories],
                     [journal.room() for journal in self._journals], limit)
        except BaseException:
            for directory in self._directories[:len(halves)]:
                directory.release_write_half(0)
            self._ledger_lock.release()
            raise
        self._opened_ns = now_ns()
        return True

    def close(self, run: AddRun, answer: TakenAnswer,
              lacs_to: list | None = None) -> tuple[int, list[tuple[BaseException, bytes, int]]]:
        """End the run and journal what it took: each journal's share is answered through `answer` once
        durable. Returns (the adds taken, [(error, taken, count)] of the shares a journal refused: nothing of
        them was queued, and the caller answers them). The watched ledgers' LACs are advanced now, or, off
        the reactor (the LAC tracker and its waiters are the reactor's), appended to `lacs_to` for
        advance_lacs."""
        if not run.is_open:
            run.close()             # disarmed: no add came, nothing was locked
            return 0, []
        stored = [0] * len(self._directories)
        try:
            closed = run.close()
            assert closed is not None
            shares, stored, lacs = closed
        finally:
            for directory, count in zip(self._directories, stored, strict=True):
                directory.release_write_half(count)
            self._ledger_lock.release()
        if lacs:
            if lacs_to is None:
                self._lac.advance_many(0, lacs)
            else:
                lacs_to.extend(lacs)
        return run.count, self._journal(shares, answer, run.count, run.taken_bytes) if shares else []

    def advance_lacs(self, lacs: list[tuple[int, int]]) -> None:
        """The LACs close() left in `lacs_to`, advanced on the reactor (which wakes their long polls)."""
        self._lac.advance_many(0, lacs)

    def _journal(self, shares: list, answer: TakenAnswer, count: int, taken_bytes: int) -> list:
        stats = self._stats
        each = (now_ns() - self._opened_ns) // count
        self._storage.record_adds(each)
        journals = self._journals
        refused = []
        run = self.run
        assert run is not None
        for journal, pieces, taken, nbytes in shares:
            adds = len(taken) // TAKEN_ADD_BYTES
            try:
                journals[journal].log_framed(pieces, partial(_share_done, answer, taken, adds))
            except BKError as error:
                # Nothing of this share was queued: its adds fail (they stay in ledger storage
                # unacknowledged, as Bookie.add_entries leaves them).
                log.error("journal %d refused %d adds: %s", journal, adds, error)
                stats.add_entry.fail_ns_many(adds, each)
                run.record_lengths(pieces, stats.add_entry_bytes, False)
                refused.append((error, taken, adds))
                count -= adds
                taken_bytes -= nbytes
                continue
            run.record_lengths(pieces, stats.add_entry_bytes, True)
        if count:
            stats.add_entry.ok_ns_many(count, each)
            stats.write_bytes.add(taken_bytes)
        return refused
