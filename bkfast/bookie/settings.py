"""The bookie's settings as typed values: what the Bookie and its parts (garbage collector, compactor, disk
checker, read-only state, replay, stats) read from the configuration, built once by `from_conf` where the
Bookie is constructed and handed down in pieces. The parts take these objects and never parse a
configuration; the keys are BookKeeper's (bkfast.conf_keys holds their defaults and limits).

The journal (bkfast.bookie.journal) and the ledger storages are not covered here: the journals still read
the configuration they are given, and the storages are built from one by bkfast.bookie.storage_factory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BookieSettings", "CompactionKindSettings", "CompactionSettings", "DiskCheckerSettings", "GcSettings"]


@dataclass(frozen=True)
class DiskCheckerSettings:
    """The disk checker's keys (fractions of a disk used; the interval in seconds)."""

    threshold: float = 0.95                               # diskUsageThreshold
    warn_threshold: float = 0.90                          # diskUsageWarnThreshold
    lwm_threshold: float = 0.95                           # diskUsageLwmThreshold (unset: diskUsageThreshold)
    interval_s: float = 10.0                              # diskCheckInterval (ms there, at least 1)

    @classmethod
    def from_conf(cls, conf) -> DiskCheckerSettings:
        threshold = float(conf.get("diskUsageThreshold"))
        lwm = conf.get("diskUsageLwmThreshold")
        return cls(threshold=threshold, warn_threshold=float(conf.get("diskUsageWarnThreshold")),
                   lwm_threshold=float(lwm if lwm is not None else threshold),
                   interval_s=max(1, int(conf.get("diskCheckInterval"))) / 1000.0)


@dataclass(frozen=True)
class CompactionKindSettings:
    """One kind of compaction (major or minor): how often, below which live fraction, for how long."""

    interval_s: int                                       # <kind>CompactionInterval (<= 0: off)
    threshold: float                                      # <kind>CompactionThreshold (<= 0: off)
    max_time_ms: int = -1                                 # <kind>CompactionMaxTimeMillis (<= 0: unbounded)

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0 and self.threshold > 0

    @classmethod
    def from_conf(cls, conf, kind: str) -> CompactionKindSettings:
        return cls(interval_s=conf.get(f"{kind}CompactionInterval"),
                   threshold=float(conf.get(f"{kind}CompactionThreshold")),
                   max_time_ms=int(conf.get(f"{kind}CompactionMaxTimeMillis")))


@dataclass(frozen=True)
class CompactionSettings:
    """The compactor's throttle and the two kinds of compaction."""

    throttle_by_bytes: bool = False                       # isThrottleByBytes
    rate: int = 1000                                      # compactionRateByBytes if by bytes, else compactionRate
    major: CompactionKindSettings = field(default_factory=lambda: CompactionKindSettings(86400, 0.8))
    minor: CompactionKindSettings = field(default_factory=lambda: CompactionKindSettings(3600, 0.2))

    @classmethod
    def from_conf(cls, conf) -> CompactionSettings:
        by_bytes = bool(conf.get("isThrottleByBytes"))
        return cls(throttle_by_bytes=by_bytes,
                   rate=conf.get("compactionRateByBytes") if by_bytes else conf.get("compactionRate"),
                   major=CompactionKindSettings.from_conf(conf, "major"),
                   minor=CompactionKindSettings.from_conf(conf, "minor"))


@dataclass(frozen=True)
class GcSettings:
    """The garbage collector's keys and its compactor's."""

    wait_s: float = 600.0                                 # gcWaitTime (ms there, at least 1)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)

    @classmethod
    def from_conf(cls, conf) -> GcSettings:
        return cls(wait_s=max(1, int(conf.get("gcWaitTime"))) / 1000.0,
                   compaction=CompactionSettings.from_conf(conf))


@dataclass(frozen=True)
class BookieSettings:
    """The Bookie's own keys, and its parts'."""

    journal_dirs: tuple[str, ...] = ("/tmp/bk-txn",)      # journalDirectories (unset: journalDirectory)
    ledger_dirs: tuple[str, ...] = ("/tmp/bk-data",)      # ledgerDirectories
    index_dirs: tuple[str, ...] = ("/tmp/bk-data",)       # indexDirectories (unset: ledgerDirectories)
    flush_interval_s: float = 10.0                        # flushInterval (ms there, at least 1)
    force_read_only: bool = False                         # forceReadOnlyBookie
    read_only_mode_enabled: bool = True                   # readOnlyModeEnabled
    skip_invalid_journal_record: bool = False             # skipInvalidJournalRecord
    journal_queue_size: int = 10000                       # journalQueueSize
    gc: GcSettings = field(default_factory=GcSettings)
    disk: DiskCheckerSettings = field(default_factory=DiskCheckerSettings)

    @classmethod
    def from_conf(cls, conf) -> BookieSettings:
        ledger_dirs = tuple(conf.get("ledgerDirectories"))
        return cls(journal_dirs=tuple(conf.get("journalDirectories") or [conf.get("journalDirectory")]),
                   ledger_dirs=ledger_dirs, index_dirs=tuple(conf.get("indexDirectories") or ledger_dirs),
                   flush_interval_s=max(conf.get("flushInterval"), 1) / 1000.0,
                   force_read_only=bool(conf.get("forceReadOnlyBookie")),
                   read_only_mode_enabled=bool(conf.get("readOnlyModeEnabled")),
                   skip_invalid_journal_record=bool(conf.get("skipInvalidJournalRecord")),
                   journal_queue_size=int(conf.get("journalQueueSize")),
                   gc=GcSettings.from_conf(conf), disk=DiskCheckerSettings.from_conf(conf))
