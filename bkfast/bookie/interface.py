"""The bookie as the network server sees it: every call bkfast.net's server and its v2/v3 handlers make.

`bkfast.bookie.bookie.Bookie` implements it (checked by the type checker: bkfast/bookie/conformance.py);
the server's tests drive the server with small doubles of it. The server never probes a bookie for a
capability: everything it may call is here.

Threads: the server calls all of it on the reactor thread, so nothing here may wait on the disk except
read_entry, entries_of_ledger and get_explicit_lac, which the server runs on its read pool (or, with
numReadWorkerThreads=0, accepts on the reactor). Completions (`callback`) come back through the
Bookie's dispatcher, on the reactor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from bkfast._entrysource import EntrySource
from bkfast.bookie._addrun import AddRun
from bkfast.bookie.lac import LacWaiter
from bkfast.bookie.stats import BookieStats
from bkfast.stats import StatsLogger

__all__ = ["AddRuns", "ServerBookie", "BookieMetricsSink", "Completion", "BatchCompletion", "TakenAnswer"]

# callback(error): None once the operation is durable (or done), else the BKError refusing it.
Completion = Callable[[BaseException | None], None]
# callback(accepted, error) of a batch of adds: `accepted` the indices it answers, None: every add taken.
BatchCompletion = Callable[[list[int] | None, BaseException | None], None]


# answer(error, taken, count) of an add run's share: `count` adds (`taken`: their packed ids, for
# FrameBuilder.add_taken_add_responses) are durable (error None) or failed.
TakenAnswer = Callable[[BaseException | None, bytes, int], object]


class AddRuns(Protocol):
    """The reactor's add fast path (bkfast.bookie.fast_adds.FastAdds): a socket read's plain v2 ADDs to
    admitted ledgers, taken by the frame splitter from an open run."""

    def open(self, limit: int) -> AddRun | None:
        """A run armed for at most `limit` adds (it takes its locks at the feed's first plain add), or
        None. The caller feeds the splitter with it and must close it (in a `finally`)."""
        ...

    def close(self, run: AddRun, answer: TakenAnswer,
              lacs_to: list | None = None) -> tuple[int, list[tuple[BaseException, bytes, int]]]:
        """Journal what the run took; (adds taken, [(error, taken, count)] of the shares refused now, for
        the caller to answer). Off the reactor, `lacs_to` gets the watched ledgers' LACs instead of their
        being advanced (advance_lacs, on the reactor)."""
        ...

    def advance_lacs(self, lacs: list[tuple[int, int]]) -> None:
        """Advance the LACs a close() left in `lacs_to` (the reactor)."""
        ...


class BookieMetricsSink(Protocol):
    """The part of bkfast.http.metrics.BookieMetrics the server and the Bookie record into (http/ sits above
    both)."""

    def adds_answered(self, n: int, error: BaseException | None, seconds: float) -> None: ...

    def read_ok(self, seconds: float) -> None: ...

    def read_failed(self, error: BaseException) -> None: ...

    def reads_from_memory(self, n: int, seconds: float) -> None: ...


class ServerBookie(Protocol):
    """What bkfast.net.server hands requests to (see the module docstring)."""

    @property
    def stats_root(self) -> StatsLogger:
        """The root StatsLogger; the server records Java's `bookkeeper_server` stats into it."""
        ...

    @property
    def stats(self) -> BookieStats:
        """The Bookie's own stats; the server's memory-read fast path records BOOKIE_READ_ENTRY into them."""
        ...

    @property
    def metrics(self) -> BookieMetricsSink | None:
        """bkfast's own metrics (bkfast.http.metrics.BookieMetrics) when the admin HTTP server is on, else
        None; the server counts each batch of answered adds into them."""
        ...

    @property
    def ledger_dirs(self) -> Sequence[Path]:
        """Whose file systems GET_BOOKIE_INFO reports (total and free bytes)."""
        ...

    # --- adds -----------------------------------------------------------------------------------------
    def add_entry(self, entry: bytes, master_key: bytes, callback: Completion, recovery: bool = False,
                  ack_before_sync: bool = False, high_priority: bool = False) -> None:
        """Store one entry; callback once it is durable (ack_before_sync: once written, DEFERRED_SYNC)."""
        ...

    def add_entries(self, adds: list, callback: BatchCompletion) -> list:
        """`adds`: [(entry, master_key, recovery, high_priority)] of one socket read. Returns [(index, error)]
        of the adds refused at once (StorageBusyError: no room now, that add and the rest of the batch wait
        for the room listener). The taken ones complete through `callback(accepted, error)`, called once
        per group made durable together, each naming its adds (None: every add of the batch)."""
        ...

    def fence(self, ledger_id: int, master_key: bytes, callback: Completion, scope_id: int = 0) -> None: ...

    def set_explicit_lac(self, ledger_id: int, lac_buffer: bytes, master_key: bytes, callback: Completion,
                         scope_id: int = 0) -> None: ...

    def force_ledger(self, ledger_id: int, callback: Completion, scope_id: int = 0) -> None: ...

    # --- reads --------------------------------------------------------------------------------------------
    def read_entry(self, ledger_id: int, entry_id: int, scope_id: int = 0, high_priority: bool = False) -> bytes:
        """The stored entry (entry -1: the ledger's highest); may read the disk."""
        ...

    def read_entry_cached(self, ledger_id: int, entry_id: int, scope_id: int = 0) -> bytes | None:
        """The entry if it is in memory, else None; never touches the disk."""
        ...

    def add_runs(self) -> AddRuns | None:
        """The add fast path when ledger storage supports it (DbLedgerStorage), else None."""
        ...

    def memory_lookup(self) -> EntrySource | Callable[[int, int, int], bytes | None]:
        """What the reactor's read loops look plain reads up in: ledger storage's C entry source when it
        has one (no Python call per read), else read_entry_cached."""
        ...

    def count_reads_from_memory(self, n: int, seconds: float) -> None:
        """The server answered n reads from memory (read_entry_cached) in `seconds`."""
        ...

    def get_explicit_lac(self, ledger_id: int, scope_id: int = 0) -> bytes | None: ...

    def entries_of_ledger(self, ledger_id: int, scope_id: int = 0) -> list[int]: ...

    # --- the LAC and long polls -------------------------------------------------------------------------
    def known_lac(self, scope_id: int, ledger_id: int) -> int: ...

    def lac_update_time(self, scope_id: int, ledger_id: int) -> int: ...

    def watch_lac(self, scope_id: int, ledger_id: int, previous_lac: int,
                  callback: Callable[[], None]) -> LacWaiter: ...

    def unwatch_lac(self, scope_id: int, ledger_id: int, waiter: LacWaiter) -> None: ...

    # --- room and state -----------------------------------------------------------------------------------
    def set_room_listener(self, listener: Callable[[], None]) -> None:
        """Adds never wait for room (StorageBusyError instead); listener() once room may be back."""
        ...

    def add_state_listener(self, listener: Callable[[bool], None]) -> None:
        """listener(read_only) on every writable <-> read-only transition."""
        ...
