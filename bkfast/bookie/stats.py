"""The Bookie's own stats, scope `bookie`, under Java 4.16.7's names (BookieStats in Java): made once when
the Bookie is built, recorded by the Bookie and by the server's read fast path (which answers reads from
memory without a Bookie call per read, and records them here in one call per batch or in Cython).

Latencies go in with `ok_ns`/`ok_since`/`ok_ns_many` (bkfast._stats.now_ns() is the clock), sizes with
`ok_value`; see docs/metrics.md for what each measures. Also here: the Bookie's gauges (JOURNAL_DIRS,
JOURNAL_QUEUE_MAX_SIZE, and Java's LedgerDirsManager gauges `ledger_*` / `index_*`), and the checkpoint
thread's `sync_thread_time`.
"""

from __future__ import annotations

import functools
import os

from bkfast._stats import now_ns
from bkfast.bookie.disk_checker import disk_usage
from bkfast.errors import BKWriteOnReadOnlyBookieException, StorageBusyError
from bkfast.stats import StatsLogger

__all__ = ["BookieStats", "register_dir_gauges", "NOT_AN_ADD"]

# Refusals that are not a failed Bookie.addEntry in Java: a read-only bookie refuses the add before it
# reaches the Bookie; a full write cache or journal queue makes the server offer the add again later.
NOT_AN_ADD = (BKWriteOnReadOnlyBookieException, StorageBusyError)


class BookieStats:
    def __init__(self, root: StatsLogger):
        self.logger = bookie = root.scope("bookie")
        # Bookie.addEntry / recoveryAddEntry: admission to the write cache and the journal enqueue
        self.add_entry = bookie.op_stats("BOOKIE_ADD_ENTRY")
        self.recovery_add_entry = bookie.op_stats("BOOKIE_RECOVERY_ADD_ENTRY")
        self.add_entry_bytes = bookie.op_stats("BOOKIE_ADD_ENTRY_BYTES")
        self.write_bytes = bookie.counter("WRITE_BYTES")
        # Bookie.readEntry, from memory or from disk
        self.read_entry = bookie.op_stats("BOOKIE_READ_ENTRY")
        self.read_entry_bytes = bookie.op_stats("BOOKIE_READ_ENTRY_BYTES")
        self.read_bytes = bookie.counter("READ_BYTES")
        self.force_ledger = bookie.counter("BOOKIE_FORCE_LEDGER")
        self.get_list_of_entries_of_ledger = bookie.op_stats("BOOKIE_GET_LIST_OF_ENTRIES_OF_LEDGER")
        # Java's SyncThread: nanoseconds spent checkpointing. Java never registers that thread, so its
        # thread-scoped counter carries thread="?", threadPool="?"; so does this one.
        self.sync_thread_time = bookie.thread_scoped("?", "?").counter("sync_thread_time")

    # --- adds ------------------------------------------------------------------------------------------
    def add_done(self, recovery: bool, size: int, t0: int) -> None:
        """One add (Bookie.add_entry) stored and journaled, begun at t0."""
        (self.recovery_add_entry if recovery else self.add_entry).ok_since(t0)
        self.add_entry_bytes.ok_value(size)
        self.write_bytes.add(size)

    def add_failed(self, recovery: bool, size: int, t0: int, error: BaseException) -> None:
        if isinstance(error, NOT_AN_ADD):
            return
        (self.recovery_add_entry if recovery else self.add_entry).fail_since(t0)
        self.add_entry_bytes.fail_value(size)

    def record_add_batch(self, adds: list, records: list, accepted: list[int], recoveries: int, failures: list,
                         stored_failures: int, t0: int, journaled: int) -> None:
        """One Bookie.add_entries batch begun at t0: `records` (of `adds[accepted[k]]`, `recoveries` of them
        recovery adds) were stored and offered to the journal, which queued `journaled` bytes (with 4-byte
        length fields); `failures[:stored_failures]` failed before (but NOT_AN_ADD), the rest were refused
        by a journal. Each add took the batch's time / its adds."""
        refused = failures[stored_failures:]
        failed = [(i, e) for i, e in failures[:stored_failures] if not isinstance(e, NOT_AN_ADD)]
        n = len(records) + len(failed)
        if not n:
            return
        each = (now_ns() - t0) // n
        if refused:
            gone = {i for i, _ in refused}
            failed += refused
            records = [r for k, r in enumerate(records) if accepted[k] not in gone]
            recoveries -= sum(1 for i in gone if adds[i][2])
        for i, _ in failed:
            entry, _, recovery, _ = adds[i]
            (self.recovery_add_entry if recovery else self.add_entry).fail_ns(each)
            self.add_entry_bytes.fail_value(len(entry))
        if records:
            self.add_entry.ok_ns_many(len(records) - recoveries, each)
            self.recovery_add_entry.ok_ns_many(recoveries, each)
            self.add_entry_bytes.ok_lengths(records)
            self.write_bytes.add(journaled - 4 * len(records))

    # --- reads -----------------------------------------------------------------------------------------
    def read_done(self, size: int, t0: int) -> None:
        self.read_entry.ok_since(t0)
        self.read_entry_bytes.ok_value(size)
        self.read_bytes.add(size)

    def read_failed(self, t0: int) -> None:
        self.read_entry.fail_since(t0)
        self.read_entry_bytes.fail_value(0)

    # --- gauges ----------------------------------------------------------------------------------------
    def register_gauges(self, queue_size: int, journal_dirs, ledger_dirs, index_dirs, disk_checker) -> None:
        """JOURNAL_DIRS and JOURNAL_QUEUE_MAX_SIZE (journalQueueSize; Java's BookieStats), and the ledger
        (and, when they are other directories, index) dirs' gauges of Java's LedgerDirsManager."""
        journals = len(journal_dirs)
        self.logger.gauge("JOURNAL_DIRS", lambda: journals)
        self.logger.gauge("JOURNAL_QUEUE_MAX_SIZE", lambda: queue_size)
        register_dir_gauges(self.logger.scope("ledger"), ledger_dirs, disk_checker)
        if [os.fspath(d) for d in index_dirs] != [os.fspath(d) for d in ledger_dirs]:
            register_dir_gauges(self.logger.scope("index"), index_dirs, disk_checker)


def register_dir_gauges(logger: StatsLogger, dirs, disk_checker) -> None:
    """Java's LedgerDirsManager gauges: `dir_<path>_usage` per directory (percent used; `/` in the path
    becomes `_`: bookie_ledger_dir__data_bookkeeper_ledgers_usage), `num_dirs` and `writable_dirs` (not
    full: below diskUsageThreshold, or below diskUsageLwmThreshold while the disks count as full)."""
    dirs = [os.fspath(d) for d in dirs]
    for d in dirs:
        logger.gauge(f"dir_{d}_usage", functools.partial(_usage_percent, disk_checker, d))
    logger.gauge("num_dirs", lambda: len(dirs))
    logger.gauge("writable_dirs", lambda: _writable(disk_checker, dirs))


def _usage(disk_checker, path: str) -> float:
    """The disk checker's last measure of the directory, or a fresh one before its first check."""
    used = disk_checker.usages.get(path)
    return used if used is not None else disk_usage(path)


def _usage_percent(disk_checker, path: str) -> float:
    return 100.0 * _usage(disk_checker, path)


def _writable(disk_checker, dirs: list[str]) -> int:
    limit = disk_checker.lwm_threshold if disk_checker.full else disk_checker.threshold
    return sum(1 for d in dirs if _usage(disk_checker, d) < limit)
