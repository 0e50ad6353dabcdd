"""What a ledger client's handles, reads, recovery and disk-weight poller read from its ClientConfiguration,
read once by `from_conf` when the client (AsyncBookKeeper) is built: nothing below it parses the
configuration per operation. The keys (and their defaults, in bkfast.conf_keys) are BookKeeper's."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClientSettings"]


@dataclass(frozen=True)
class ClientSettings:
    zk_timeout_s: float                  # zkTimeout: how long start() waits for the metadata store
    digest_type: str                     # digestType: the default of create_ledger
    store_ctime: bool                    # storeSystemtimeAsLedgerCreationTime
    disk_weight_placement: bool          # diskWeightBasedPlacementEnabled
    bookie_info_interval_s: float        # getBookieInfoIntervalSeconds
    bookie_info_retry_interval_s: float  # getBookieInfoRetryIntervalSeconds
    reorder_read_sequence: bool          # reorderReadSequenceEnabled
    speculative_read_timeout_s: float | None  # speculativeReadTimeout (None: off)
    throttle: int                        # throttle: adds in flight per handle (<= 0: unbounded)
    explicit_lac_interval_s: float | None     # explicitLacInterval (None: off)
    recovery_read_batch_size: int        # recoveryReadBatchSize (at least 1)

    @classmethod
    def from_conf(cls, conf) -> ClientSettings:
        speculative_ms = conf.get("speculativeReadTimeout")
        explicit_lac_ms = conf.get("explicitLacInterval")
        return cls(
            zk_timeout_s=conf.get("zkTimeout") / 1000.0,
            digest_type=conf.get("digestType"),
            store_ctime=bool(conf.get("storeSystemtimeAsLedgerCreationTime")),
            disk_weight_placement=bool(conf.get("diskWeightBasedPlacementEnabled")),
            bookie_info_interval_s=conf.get("getBookieInfoIntervalSeconds"),
            bookie_info_retry_interval_s=conf.get("getBookieInfoRetryIntervalSeconds"),
            reorder_read_sequence=bool(conf.get("reorderReadSequenceEnabled")),
            speculative_read_timeout_s=speculative_ms / 1000.0 if speculative_ms > 0 else None,
            throttle=conf.get("throttle"),
            explicit_lac_interval_s=explicit_lac_ms / 1000.0 if explicit_lac_ms > 0 else None,
            recovery_read_batch_size=max(1, conf.get("recoveryReadBatchSize")),
        )
