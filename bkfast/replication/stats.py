"""AutoRecovery's stats: Java's (AuditorStats, ReplicationWorker, LedgerFragmentReplicator: scopes `auditor` and
`replication_worker` under the StatsLogger AutoRecovery is given, `replication` in a bookie, none in the
stand-alone process) and bkfast's own counters with their Prometheus collector (`bkfast_replication_*`).

Java's series and where they are measured:
  auditor_AUDIT_BOOKIES_TIME                    a whole bookie audit (index, lost bookies, marks)
  auditor_BOOKIE_TO_LEDGERS_MAP_CREATION_TIME   reading every ledger's metadata into bookie -> ledgers
  auditor_URL_PUBLISH_TIME_FOR_LOST_BOOKIE      from the audit's start until every lost bookie's marks are written
  auditor_NUM_UNDER_REPLICATED_LEDGERS          value: ledgers marked per lost bookie (per bad ledger in a check)
  auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE   value: the sum of those ledgers' lengths
  auditor_CHECK_ALL_LEDGERS_TIME                a checkAllLedgers run; auditor_NUM_LEDGERS_CHECKED its ledgers,
  auditor_NUM_FRAGMENTS_PER_LEDGER / _NUM_BOOKIES_PER_LEDGER  values: segments / distinct bookies of each
  auditor_NUM_BOOKIE_AUDITS_DELAYED             audits put off by lostBookieRecoveryDelay
  auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED   put-off audits cancelled (bookie back, delay changed, more lost)
  auditor_PLACEMENT_POLICY_CHECK_TIME           the placement policy check; its gauges
  auditor_NUM_LEDGERS_(NOT|SOFTLY)_ADHERING_TO_PLACEMENT_POLICY read num_ledgers_*_placement_policy below
  auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD, REPLICAS_CHECK_TIME and the
  auditor_NUM_LEDGERS_HAVING_* gauges           AuditorStats attributes of checks bkfast does not run (0)
  auditor_NUM_ENTRIES_*, _NUM_BYTES_*, _*_DATA_LATENCY   the auditor copies nothing (Java's neither): 0
  replication_worker_rereplicate                one marked ledger, from its lock to its outcome (success: the
                                                mark is resolved as replicated)
  replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED  ledgers with at least one segment moved
  replication_worker_NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER  failed ledgers whose lock release waits
  replication_worker_NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION      entries no surviving replica gave
  replication_worker_NUM_ENTRIES_READ/_WRITTEN, _NUM_BYTES_READ/_WRITTEN (values: payload bytes per entry
                                                read / per replacement written), _READ/WRITE_DATA_LATENCY
  replication_worker_exceptions_<BKException>   failed passes by error class

bkfast's own counters (shown on the bookie's `/metrics`):

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

from bkfast.stats import StatsRegistry

__all__ = ["ReplicationStats", "ReplicationCollector", "AuditorStats", "WorkerStats", "ReplicatorStats"]

# Java's auditor gauges of checks bkfast does not run -> the AuditorStats attribute each reads.
_AUDITOR_GAUGES = (
    ("NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD", "ur_ledgers_elapsed_recovery_grace_period"),
    ("NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY", "ledgers_having_no_replica_of_an_entry"),
    ("NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY", "ledgers_having_less_than_aq_replicas_of_an_entry"),
    ("NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY", "ledgers_having_less_than_wq_replicas_of_an_entry"),
)
# ... and those of the placement check -> the ReplicationStats attribute each reads.
_PLACEMENT_GAUGES = (
    ("NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY", "num_ledgers_not_adhering_to_placement_policy"),
    ("NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY", "num_ledgers_softly_adhering_to_placement_policy"),
)


def _disabled_logger():
    return StatsRegistry(enabled=False).logger()


def _gauges(logger, holder, table) -> None:
    for name, attr in table:
        logger.gauge(name, lambda attr=attr: getattr(holder, attr))


class ReplicatorStats:
    """Java's LedgerFragmentReplicator stats: what copying entries read and wrote."""

    def __init__(self, logger, entries_unreadable=None):
        self.entries_read = logger.counter("NUM_ENTRIES_READ")
        self.bytes_read = logger.op_stats("NUM_BYTES_READ")
        self.read_latency = logger.op_stats("READ_DATA_LATENCY")
        self.entries_written = logger.counter("NUM_ENTRIES_WRITTEN")
        self.bytes_written = logger.op_stats("NUM_BYTES_WRITTEN")
        self.write_latency = logger.op_stats("WRITE_DATA_LATENCY")
        self.entries_unreadable = entries_unreadable     # a Counter where Java counts them (the worker's)


class AuditorStats:
    """Java's AuditorStats under the `auditor` scope (the placement gauges: ReplicationStats.for_logger)."""

    def __init__(self, logger):
        self.num_under_replicated_ledgers = logger.op_stats("NUM_UNDER_REPLICATED_LEDGERS")
        self.under_replicated_ledgers_total_size = logger.op_stats("UNDER_REPLICATED_LEDGERS_TOTAL_SIZE")
        self.url_publish_time_for_lost_bookie = logger.op_stats("URL_PUBLISH_TIME_FOR_LOST_BOOKIE")
        self.bookie_to_ledgers_map_creation_time = logger.op_stats("BOOKIE_TO_LEDGERS_MAP_CREATION_TIME")
        self.check_all_ledgers_time = logger.op_stats("CHECK_ALL_LEDGERS_TIME")
        self.placement_policy_check_time = logger.op_stats("PLACEMENT_POLICY_CHECK_TIME")
        self.replicas_check_time = logger.op_stats("REPLICAS_CHECK_TIME")
        self.audit_bookies_time = logger.op_stats("AUDIT_BOOKIES_TIME")
        self.num_ledgers_checked = logger.counter("NUM_LEDGERS_CHECKED")
        self.num_fragments_per_ledger = logger.op_stats("NUM_FRAGMENTS_PER_LEDGER")
        self.num_bookies_per_ledger = logger.op_stats("NUM_BOOKIES_PER_LEDGER")
        self.num_bookie_audits_delayed = logger.counter("NUM_BOOKIE_AUDITS_DELAYED")
        self.num_delayed_bookie_audits_cancelled = logger.counter("NUM_DELAYED_BOOKIE_AUDITS_CANCELLED")
        self.replicator = ReplicatorStats(logger)
        for _name, attr in _AUDITOR_GAUGES:
            setattr(self, attr, 0)
        _gauges(logger, self, _AUDITOR_GAUGES)

    @classmethod
    def disabled(cls) -> AuditorStats:
        return cls(_disabled_logger())


class WorkerStats:
    """Java's ReplicationWorker stats under the `replication_worker` scope (its LedgerFragmentReplicator's
    too: `replicator`)."""

    def __init__(self, logger):
        self._exceptions = logger.scope("exceptions")
        self.rereplicate = logger.op_stats("rereplicate")
        self.ledgers_replicated = logger.counter("NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED")
        self.not_adhering_placement_ledgers_replicated = logger.counter("NUM_NOT_ADHERING_PLACEMENT_LEDGERS_REPLICATED")
        self.defer_lock_release_of_failed_ledger = logger.counter("NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER")
        self.replicator = ReplicatorStats(logger, logger.counter("NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION"))

    def exception(self, name: str) -> None:
        """Java's `exceptions_<class>` counter of a failed pass (made at its first use, as Java's)."""
        self._exceptions.counter(name).inc()

    @classmethod
    def disabled(cls) -> WorkerStats:
        return cls(_disabled_logger())


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
    # the auditor's last placement policy check (gauges; Java's NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY
    # and NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY)
    num_ledgers_not_adhering_to_placement_policy: int = 0
    num_ledgers_softly_adhering_to_placement_policy: int = 0
    auditor: AuditorStats = field(default_factory=AuditorStats.disabled, repr=False)     # Java's
    worker: WorkerStats = field(default_factory=WorkerStats.disabled, repr=False)        # Java's
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_logger(cls, logger) -> ReplicationStats:
        """bkfast's counters plus Java's stats under `logger` (scopes `auditor`, `replication_worker`)."""
        auditor = logger.scope("auditor")
        stats = cls(auditor=AuditorStats(auditor), worker=WorkerStats(logger.scope("replication_worker")))
        _gauges(auditor, stats, _PLACEMENT_GAUGES)
        return stats

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in ("auditor", "worker")}


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
