"""The write half of a DbLedgerStorage flush: slices of the write cache's runs into the entry logger, paced.

Owns how a flush writes a half (bkfast.dbstorage.directory decides when, and commits the index after):
slices of any number of ledgers, <= FLUSH_SLICE_BYTES / FLUSH_SLICE_ENTRIES each, one entry-logger call
each, a GIL hand-over after each, and the pacing of flushes while adds keep arriving. A scope-0 slice comes
framed as the log stores it (bkfast.dbstorage._flushslices) and goes in with one copy; a scoped one, or
one larger than a whole log, goes ledger by ledger (`add`, EntryLogger.add_runs).

Must never: sync or index anything (the directory syncs the entry log, then commits the locations).
"""

from __future__ import annotations

import time

from bkfast.dbstorage._flushslices import FlushSlice
from bkfast.dbstorage.index import LocationBatch
from bkfast.dbstorage.write_cache import ENTRY_OVERHEAD, WriteCache
from bkfast.storage.entrylogger import EntryLogger

__all__ = ["SliceWriter", "Pacer", "FLUSH_SLICE_ENTRIES", "FLUSH_SLICE_BYTES", "FLUSH_PACE_LEAD",
           "FLUSH_PACE_MIN_BYTES_PER_S", "FLUSH_PACE_SLEEP_S"]

# A flush writes and indexes a ledger's run in slices of at most this many entries / bytes.
FLUSH_SLICE_ENTRIES = 1024
FLUSH_SLICE_BYTES = 1 << 20
# Paced flushes (background and checkpoint flushes while adds keep arriving) write a half no faster than
# needed to stay FLUSH_PACE_LEAD (a fraction of a half) ahead of the adds filling the other half, and never
# slower than FLUSH_PACE_MIN_BYTES_PER_S. Why: bookies sharing a disk (or the client's WQ copies) fill
# their halves at the same rate and flushed them at the same moment, each as fast as it could: ~100 MB
# of pwrite + writeback in ~200 ms saturated the disk and both cores, and the open-loop p99/p99.9 of
# every bookie came from those windows (3 bookies x 16,700 adds/s: p99 ~30 ms). Spread over the fill
# time, the same bytes cost the disk ~1/5 of its bandwidth and the reactors keep their CPU.
FLUSH_PACE_LEAD = 0.25
FLUSH_PACE_MIN_BYTES_PER_S = 16 << 20
FLUSH_PACE_SLEEP_S = 0.002


class SliceWriter:
    """Gathers a flush's runs (any number of ledgers) into slices of <= FLUSH_SLICE_BYTES /
    FLUSH_SLICE_ENTRIES; each slice is one entry-logger call, then its locations go into the batch and the
    GIL is handed over once (paced or not)."""

    __slots__ = ("logger", "batch", "pacer", "pace", "runs", "meta", "nbytes", "nentries", "slices", "entry_bytes")

    def __init__(self, logger: EntryLogger, batch: LocationBatch, pacer: Pacer | None, pace: bool):
        self.logger, self.batch, self.pacer, self.pace = logger, batch, pacer, pace
        self.runs: list = []
        self.meta: list = []
        self.nbytes = self.nentries = self.slices = 0
        self.entry_bytes = 0     # of every slice written

    def add_slice(self, piece: FlushSlice) -> None:
        """Write one flush slice: framed in one entry-logger call when it can be, else ledger by ledger."""
        if not piece.scoped and piece.min_length >= 16:
            self.write()                        # what add() gathered goes first: the log keeps the order
            placed = self.logger.add_framed(piece.framed, piece.ledgers, piece.max_length)
            if placed is not None:
                self.batch.add_slice(piece, *placed)
                self._wrote(piece.nbytes, piece.count)
                return
        for scope_id, ledger_id, entry_ids, datas in piece.runs():
            self.add(scope_id, ledger_id, entry_ids, datas, sum(map(len, datas)))

    def add(self, scope_id: int, ledger_id: int, entry_ids: list[int], datas: list, nbytes: int) -> None:
        if self.runs and (self.nbytes + nbytes > FLUSH_SLICE_BYTES
                          or self.nentries + len(datas) > FLUSH_SLICE_ENTRIES):
            self.write()
        self.runs.append((ledger_id, datas))
        self.meta.append((scope_id, ledger_id, entry_ids))
        self.nbytes += nbytes
        self.nentries += len(datas)

    def write(self) -> None:
        if not self.runs:
            return
        locations = self.logger.add_runs(self.runs)
        self.batch.add_runs(self.meta, locations)
        nbytes, nentries = self.nbytes, self.nentries
        self.runs, self.meta = [], []
        self.nbytes = self.nentries = 0
        self._wrote(nbytes, nentries)

    def _wrote(self, nbytes: int, nentries: int) -> None:
        """A slice of `nentries` entries, `nbytes` bytes, is in the log: count it, then pace or hand the
        GIL over."""
        written = nbytes + ENTRY_OVERHEAD * nentries
        self.entry_bytes += nbytes
        self.slices += 1
        if self.pacer is not None:
            self.pacer.wrote(written)
        elif self.pace:
            time.sleep(0)


class Pacer:
    """Sleeps between a paced flush's slices while it is ahead of the adds filling the active half."""

    __slots__ = ("cache", "total", "t0", "done", "last_active")

    def __init__(self, cache: WriteCache, total: int, t0: float):
        self.cache = cache
        self.total = max(1, total)
        self.t0 = t0
        self.done = 0
        self.last_active = cache.active_size

    def wrote(self, nbytes: int) -> None:
        self.done += nbytes
        cache = self.cache
        progress = self.done / self.total
        while True:
            active = cache.active_size
            arriving, self.last_active = active != self.last_active, active
            # Sleep only while adds arrive (an idle bookie flushes at full speed), the flush is more than
            # the lead ahead of the active half's fill, and it is above the minimum rate.
            if (not arriving or progress - active / cache.half_size <= FLUSH_PACE_LEAD
                    or self.done <= (time.perf_counter() - self.t0) * FLUSH_PACE_MIN_BYTES_PER_S):
                time.sleep(0)   # still hand the GIL over between slices
                return
            time.sleep(FLUSH_PACE_SLEEP_S)
