"""Entry-log compaction: copy the live entries of a mostly-dead entry log into the current log, then delete it.

Owns the copy loop of one log, its throttle (`compactionRate` entries/s, or `compactionRateByBytes`
bytes/s when `isThrottleByBytes`; <= 0 = unthrottled) and its time bound (`minor/majorCompactionMaxTimeMillis`).
Which logs to compact, and when, is the garbage collector's decision (bkfast.bookie.gc).

Works against the ledger storage contract only (DbLedgerStorage and the file-based index storage):
`entry_location`, `update_entry_locations`, `flush`, and the storage's `entry_loggers()`.

The crash-safety order (a SIGKILL anywhere loses nothing and never leaves the index pointing at a
removed log):

    1. scan the old log; an entry is live iff the index still points at that exact location
    2. append each live entry to the current log (same entry logger, so the same directory)
    3. EntryLogger.flush()            -- the copies are durable
    4. storage.update_entry_locations -- the index points at the copies (synced)
    5. storage.flush()
    6. EntryLogger.remove_log(old)    -- only now is the old log deleted

A kill before 4 leaves unreferenced copies (garbage for a later compaction); a kill between 4 and 6
leaves an old log nothing points into (deleted by a later compaction, which finds no live entry in it).

Must never: compact the log being written, or delete a log before step 5 returned.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from bkfast.bookie.settings import CompactionSettings
from bkfast.storage.entrylogger import EntryLogger, log_file_name

__all__ = ["CompactionStats", "Compactor", "Throttle", "log_size"]

log = logging.getLogger(__name__)

_COMMIT_BYTES = 64 << 20  # copies are committed to the index at least every 64 MiB of a big log


class Throttle:
    """At most `rate` units per second on average since the start (entries or bytes); <= 0 = off."""

    def __init__(self, rate: float, by_bytes: bool, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(rate)
        self.by_bytes = by_bytes
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._units = 0.0

    def acquire(self, nbytes: int, stop: threading.Event | None = None) -> None:
        if self.rate <= 0:
            return
        self._units += nbytes if self.by_bytes else 1
        ahead = self._units / self.rate - (self._clock() - self._start)
        if ahead > 0:
            if stop is not None:
                stop.wait(ahead)
            else:
                self._sleep(ahead)


@dataclass
class CompactionStats:
    """What one compaction run did."""

    logs_compacted: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    bytes_reclaimed: int = 0
    seconds: float = 0.0
    aborted: bool = False


class Compactor:
    """Copies live entries out of entry logs of one ledger storage (see the module docstring)."""

    def __init__(self, storage, settings: CompactionSettings, stop: threading.Event | None = None):
        self.storage = storage
        self.settings = settings
        self.stop = stop or threading.Event()
        # Test hook for the crash test: called with the step name ("copied", "flushed", "indexed",
        # "removed") after each step of a log's compaction.
        self.step_hook = None

    def throttle(self) -> Throttle:
        return Throttle(self.settings.rate, self.settings.throttle_by_bytes)

    def _step(self, name: str, log_id: int) -> None:
        hook = self.step_hook
        if hook is not None:
            hook(name, log_id)

    def _commit(self, logger: EntryLogger, updates: list) -> None:
        if not updates:
            return
        logger.flush()                                # 3. copies durable ...
        self.storage.update_entry_locations(updates)  # 4. ... before the index points at them
        self.storage.flush()                          # 5.

    def compact_log(self, logger: EntryLogger, log_id: int, throttle: Throttle,
                    deadline: float | None = None, stats: CompactionStats | None = None,
                    live_ledgers: set[tuple[int, int]] | None = None) -> bool:
        """Copy the live entries of `log_id` and remove it; False (log kept) when stopped or out of time.

        `live_ledgers` (optional): the (scope, ledger) pairs the storage has; entries of other ledgers are
        dead without asking the index."""
        stats = stats if stats is not None else CompactionStats()
        if logger.current_log_id == log_id:
            raise ValueError(f"entry log {log_id:x} is being written; it cannot be compacted")
        size = log_size(logger, log_id)
        location_of = self.storage.entry_location
        updates: list[tuple[int, int, int, int]] = []
        pending = 0
        copied = 0
        copied_bytes = 0
        complete = True
        for r in logger.scan_records(log_id, with_data=True):
            if self.stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                complete = False
                break
            if live_ledgers is not None and (r.scope_id, r.ledger_id) not in live_ledgers:
                continue
            if location_of(r.scope_id, r.ledger_id, r.entry_id) != r.location:
                continue  # deleted, or overwritten by a later copy: dead
            new_location = logger.add_entry(r.ledger_id, r.data)
            updates.append((r.scope_id, r.ledger_id, r.entry_id, new_location))
            copied += 1
            copied_bytes += r.size + 4
            pending += r.size + 4
            stats.entries_copied += 1
            stats.bytes_copied += r.size + 4
            if pending >= _COMMIT_BYTES:
                self._step("copied", log_id)
                self._commit(logger, updates)
                updates, pending = [], 0
            throttle.acquire(r.size + 4, self.stop)
        self._step("copied", log_id)
        self._commit(logger, updates)
        self._step("indexed", log_id)
        if not complete:
            log.info("compaction of entry log %x stopped after %d entries; the log is kept", log_id, copied)
            stats.aborted = True
            return False
        logger.remove_log(log_id)
        self._step("removed", log_id)
        stats.logs_compacted += 1
        stats.bytes_reclaimed += max(0, size - copied_bytes)
        log.info("compacted entry log %x: %d live entries (%d bytes) copied, %d bytes reclaimed",
                 log_id, copied, copied_bytes, max(0, size - copied_bytes))
        return True


def log_size(logger: EntryLogger, log_id: int) -> int:
    """Size in bytes of an entry log file (0 when it is gone)."""
    for d in logger._dirs:  # noqa: SLF001 - the logger has no public path lookup
        try:
            return os.stat(d / log_file_name(log_id)).st_size
        except FileNotFoundError:
            continue
    return 0
