"""The garbage collector's stats under Java 4.16.7's names (GarbageCollectorStats), one set per entry logger.

Java runs one GarbageCollectorThread per DbLedgerStorage directory (its stats carry the directory's
indexDir/ledgerDir labels) and one for InterleavedLedgerStorage/SortedLedgerStorage (scope `gc`, no
labels): the storage says where each of its entry loggers' stats go (`gc_stats_loggers()`). bkfast runs
one collector thread over every entry logger, so a cycle, a compaction run and its kind count in every
set; what is per log or per ledger (deleted ledgers, reclaimed bytes, active logs and ledgers) counts in
the set of the logger it belongs to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bkfast.storage.interface import LedgerStorage

__all__ = ["GcStats", "gc_stats_for"]


class GcStats:
    """Java's GarbageCollectorStats of one collector (see the module docstring)."""

    def __init__(self, logger):
        self.minor_compactions = logger.counter("MINOR_COMPACTION_TOTAL")
        self.major_compactions = logger.counter("MAJOR_COMPACTION_TOTAL")
        self.entry_location_compactions = logger.counter("ENTRY_LOCATION_COMPACTION_TOTAL")
        self.reclaimed_by_compaction = logger.counter("RECLAIMED_COMPACTION_SPACE_BYTES")
        self.reclaimed_by_deletion = logger.counter("RECLAIMED_DELETION_SPACE_BYTES")
        self.deleted_ledgers = logger.counter("DELETED_LEDGER_TOTAL")
        self.runtime = logger.op_stats("THREAD_RUNTIME")
        # What the last cycle found: finished logs still holding live data, their live bytes, the ledgers.
        self.active_logs = 0
        self.active_log_bytes = 0
        self.active_ledgers = 0
        logger.gauge("ACTIVE_ENTRY_LOG_TOTAL", lambda: self.active_logs)
        logger.gauge("ACTIVE_ENTRY_LOG_SPACE_BYTES", lambda: self.active_log_bytes)
        logger.gauge("ACTIVE_LEDGER_TOTAL", lambda: self.active_ledgers)


def gc_stats_for(storage: LedgerStorage) -> list[GcStats]:
    """One GcStats per entry logger of `storage`, recorded where the storage says (gc_stats_loggers)."""
    return [GcStats(logger) for logger in storage.gc_stats_loggers()]
