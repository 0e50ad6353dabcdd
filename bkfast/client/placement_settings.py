"""What the placement policies read from a client configuration, read once at the edge (`from_conf`): the
policies take these values and never parse the configuration themselves. The keys are BookKeeper's."""

from __future__ import annotations

from dataclasses import dataclass

from bkfast.errors import ConfigurationError

__all__ = ["PlacementSettings"]


@dataclass(frozen=True)
class PlacementSettings:
    enforce_min_fault_domains: bool           # enforceMinNumFaultDomainsForWrite
    max_weight_multiple: int                  # bookieMaxWeightMultipleForWeightBasedPlacement
    min_racks: int                            # minNumRacksPerWriteQuorum
    enforce_min_racks: bool                   # enforceMinNumRacksPerWriteQuorum
    prefer_local_node: bool                   # not ignoreLocalNodeInPlacementPolicy
    min_regions: int                          # reppMinimumRegionsForDurability
    enforce_durability_in_replace: bool       # reppEnableDurabilityEnforcementInReplace
    regions_to_write: tuple[str, ...] | None  # reppRegionsToWrite ("r1;r2;r3"), None: any region
    min_zones: int                            # minNumZonesPerWriteQuorum
    desired_zones: int                        # desiredNumZonesPerWriteQuorum
    strict_zones: bool                        # enforceStrictZoneawarePlacement

    @classmethod
    def from_conf(cls, conf) -> "PlacementSettings":
        text = conf.get("reppRegionsToWrite")
        regions = tuple(r.strip().strip("/") for r in text.split(";") if r.strip().strip("/")) if text else None
        min_regions = conf.get("reppMinimumRegionsForDurability")
        if regions is not None and len(regions) < min_regions:
            raise ConfigurationError(f"reppRegionsToWrite names {len(regions)} regions ({text}), fewer than "
                                     f"reppMinimumRegionsForDurability={min_regions}")
        return cls(
            enforce_min_fault_domains=conf.get("enforceMinNumFaultDomainsForWrite"),
            max_weight_multiple=conf.get("bookieMaxWeightMultipleForWeightBasedPlacement"),
            min_racks=conf.get("minNumRacksPerWriteQuorum"),
            enforce_min_racks=conf.get("enforceMinNumRacksPerWriteQuorum"),
            prefer_local_node=not conf.get("ignoreLocalNodeInPlacementPolicy"),
            min_regions=min_regions,
            enforce_durability_in_replace=conf.get("reppEnableDurabilityEnforcementInReplace"),
            regions_to_write=regions,
            min_zones=conf.get("minNumZonesPerWriteQuorum"),
            desired_zones=conf.get("desiredNumZonesPerWriteQuorum"),
            strict_zones=conf.get("enforceStrictZoneawarePlacement"),
        )

    @classmethod
    def defaults(cls) -> "PlacementSettings":
        """BookKeeper's defaults (those of a fresh ClientConfiguration)."""
        from bkfast.conf import ClientConfiguration

        return cls.from_conf(ClientConfiguration())
