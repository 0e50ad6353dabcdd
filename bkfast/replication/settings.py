"""AutoRecovery's settings as typed values: what the auditor, the replication worker and the daemon read from
the configuration, each built once by `from_conf` where the daemon is constructed (the configuration's
edge). The auditor and the worker take these objects and never parse a configuration; the keys are
BookKeeper's (bkfast.conf_keys holds their defaults and limits).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AuditorSettings", "WorkerSettings", "AutoRecoverySettings"]


@dataclass(frozen=True)
class AuditorSettings:
    """The auditor's keys (intervals in seconds; 0 turns a periodic task off)."""

    lost_bookie_recovery_delay_s: int = 0                 # lostBookieRecoveryDelay
    bookie_check_interval_s: int = 86400                  # auditorPeriodicBookieCheckInterval
    check_all_ledgers_interval_s: int = 604800            # auditorPeriodicCheckInterval
    placement_check_interval_s: int = 0                   # auditorPeriodicPlacementPolicyCheckInterval
    verification_percentage: int = 0                      # auditorLedgerVerificationPercentage
    repair_placement: bool = False                        # repairedPlacementPolicyNotAdheringBookieEnable

    @classmethod
    def from_conf(cls, conf) -> AuditorSettings:
        return cls(lost_bookie_recovery_delay_s=conf.get("lostBookieRecoveryDelay"),
                   bookie_check_interval_s=conf.get("auditorPeriodicBookieCheckInterval"),
                   check_all_ledgers_interval_s=conf.get("auditorPeriodicCheckInterval"),
                   placement_check_interval_s=conf.get("auditorPeriodicPlacementPolicyCheckInterval"),
                   verification_percentage=conf.get("auditorLedgerVerificationPercentage"),
                   repair_placement=conf.get("repairedPlacementPolicyNotAdheringBookieEnable"))


@dataclass(frozen=True)
class WorkerSettings:
    """The replication worker's keys (times in seconds here; the configuration's are ms)."""

    rate_bytes: int = -1                                  # replicationRateByBytes (<= 0: not throttled)
    open_ledger_grace_s: float = 30.0                     # openLedgerRereplicationGracePeriod
    backoff_s: float = 5.0                                # rwRereplicateBackoffMs
    lock_grace_s: float = 300.0                           # lockReleaseOfFailedLedgerGracePeriod
    repair_placement: bool = False                        # repairedPlacementPolicyNotAdheringBookieEnable
    verification_percentage: int = 0                      # auditorLedgerVerificationPercentage

    @classmethod
    def from_conf(cls, conf) -> WorkerSettings:
        return cls(rate_bytes=conf.get("replicationRateByBytes"),
                   open_ledger_grace_s=conf.get("openLedgerRereplicationGracePeriod") / 1000.0,
                   backoff_s=conf.get("rwRereplicateBackoffMs") / 1000.0,
                   lock_grace_s=conf.get("lockReleaseOfFailedLedgerGracePeriod") / 1000.0,
                   repair_placement=conf.get("repairedPlacementPolicyNotAdheringBookieEnable"),
                   verification_percentage=conf.get("auditorLedgerVerificationPercentage"))


@dataclass(frozen=True)
class AutoRecoverySettings:
    """The daemon's own keys, and its auditor's and worker's."""

    metadata_service_uri: str
    zk_timeout_s: float
    store_ctime: bool                                     # storeSystemTimeAsLedgerUnderreplicatedMarkTime
    auditor: AuditorSettings
    worker: WorkerSettings

    @classmethod
    def from_conf(cls, conf) -> AutoRecoverySettings:
        return cls(metadata_service_uri=conf.get("metadataServiceUri"),
                   zk_timeout_s=conf.get("zkTimeout") / 1000.0,
                   store_ctime=conf.get("storeSystemTimeAsLedgerUnderreplicatedMarkTime"),
                   auditor=AuditorSettings.from_conf(conf), worker=WorkerSettings.from_conf(conf))
