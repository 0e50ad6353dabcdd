"""The Bookie's own stats, scope `bookie`, under Java 4.16.7's names (BookieStats in Java): made once when
the Bookie is built, recorded by the Bookie and by the server's read fast path (which answers reads from
memory without a Bookie call per read, and records them here in one call per batch or in Cython).

Latencies go in with `ok_ns`/`ok_since`/`ok_ns_many` (bkfast._stats.now_ns() is the clock), sizes with
`ok_value`; see docs/metrics.md for what each measures.
"""

from __future__ import annotations

from bkfast.stats import StatsLogger

__all__ = ["BookieStats"]


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
