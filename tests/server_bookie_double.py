"""A double of the bookie as the server sees it (bkfast.bookie.interface.ServerBookie), for in-process
server tests: adds wait until the test completes them, like a journal that has not synced yet.

It has the part of ServerBookie these tests drive: adds (single and batched), the memory-read lookup
and the LAC (it holds no ledger: every read misses, no LAC is known), the room and state listeners, and the stats roots.
"""

from __future__ import annotations

from bkfast.bookie.stats import BookieStats
from bkfast.errors import BKNoSuchLedgerExistsException
from bkfast.stats import StatsLogger, StatsRegistry


class HeldAddsBookie:
    """Each add, batched or not, completes on its own when the test calls complete() (the server answers
    whatever group a batch callback names), so tests can complete adds one by one."""

    ledger_dirs: list = []
    metrics = None

    def __init__(self, stats_root: StatsLogger | None = None):
        self.stats_root = stats_root if stats_root is not None else StatsRegistry(enabled=False).logger()
        self.stats = BookieStats(self.stats_root)
        self.pending: list = []
        self.room_listeners: list = []
        self.state_listeners: list = []

    def add_entry(self, entry, key, callback, recovery=False, ack_before_sync=False, high_priority=False):
        self.pending.append(callback)

    def add_entries(self, adds, callback):
        for i in range(len(adds)):
            self.pending.append(lambda error, i=i: callback([i], error))
        return []

    def complete(self, n=None, error=None):
        if n is None:
            n = len(self.pending)
        batch, self.pending = self.pending[:n], self.pending[n:]
        for callback in batch:
            callback(error)

    def read_entry_cached(self, ledger_id, entry_id, scope_id=0):
        return None

    def memory_lookup(self):
        return self.read_entry_cached

    def add_runs(self):
        return None             # no add fast path: every add reaches add_entry / add_entries here

    def count_reads_from_memory(self, n, seconds):
        pass

    def known_lac(self, scope_id, ledger_id):
        raise BKNoSuchLedgerExistsException(f"ledger {ledger_id} not found")

    def set_room_listener(self, listener):
        self.room_listeners.append(listener)

    def add_state_listener(self, listener):
        self.state_listeners.append(listener)
