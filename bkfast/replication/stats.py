"""AutoRecovery counters and their Prometheus collector (shown on the bookie's `/metrics`).

  bkfast_replication_marked_ledgers_total        marks written by this process's auditor
  bkfast_replication_replicated_ledgers_total    marks this worker resolved (copied, or nothing was left to copy)
  bkfast_replication_failed_ledgers_total        worker passes that failed (lock released, retried later)
  bkfast_replication_unrecoverable_ledgers_total ledgers whose entries no surviving replica holds (reported once)
  bkfast_replication_entries_copied_total, bkfast_replication_bytes_copied_total
  bkfast_replication_rate_bytes_per_second       copy rate of the last ledger the worker copied
  bkfast_replication_auditor_elections_total     times this process became the auditor
  bkfast_replication_is_auditor                  1 while this process is the auditor
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["ReplicationStats", "ReplicationCollector"]


@dataclass
class ReplicationStats:
    marked_ledgers: int = 0
    replicated_ledgers: int = 0
    failed_ledgers: int = 0
    unrecoverable_ledgers: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    rate_bytes_per_second: float = 0.0
    auditor_elections: int = 0
    is_auditor: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class ReplicationCollector:
    """A prometheus_client collector reading a ReplicationStats at scrape time."""

    _COUNTERS = (
        ("bkfast_replication_marked_ledgers", "Under-replication marks written by the auditor", "marked_ledgers"),
        ("bkfast_replication_replicated_ledgers", "Under-replicated ledgers resolved by the worker",
         "replicated_ledgers"),
        ("bkfast_replication_failed_ledgers", "Failed re-replication passes", "failed_ledgers"),
        ("bkfast_replication_unrecoverable_ledgers", "Ledgers with entries no replica holds",
         "unrecoverable_ledgers"),
        ("bkfast_replication_entries_copied", "Entries copied by re-replication", "entries_copied"),
        ("bkfast_replication_bytes_copied", "Bytes copied by re-replication", "bytes_copied"),
        ("bkfast_replication_auditor_elections", "Times this process became the auditor", "auditor_elections"),
    )

    def __init__(self, stats: ReplicationStats):
        self.stats = stats

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, doc, attr in self._COUNTERS:
            family = CounterMetricFamily(name, doc)
            family.add_metric([], getattr(self.stats, attr))
            yield family
        rate = GaugeMetricFamily("bkfast_replication_rate_bytes_per_second", "Copy rate of the last ledger copied")
        rate.add_metric([], self.stats.rate_bytes_per_second)
        yield rate
        auditor = GaugeMetricFamily("bkfast_replication_is_auditor", "1 while this process is the auditor")
        auditor.add_metric([], 1.0 if self.stats.is_auditor else 0.0)
        yield auditor
