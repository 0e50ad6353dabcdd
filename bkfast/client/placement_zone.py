"""BookKeeper's ZoneawareEnsemblePlacementPolicy: write quorums over zones (cloud availability zones), and
within a zone over upgrade domains (groups of bookies that are restarted together).

A location is `/zone/upgradedomain`, exactly two levels; anything else, and bookies the topology does not
place, is `/default-zone/default-upgradedomain`. The rule for each write quorum (W consecutive positions,
wrapping): its bookies are in at least minNumZonesPerWriteQuorum zones (else FAIL), two of them in one zone
are in different upgrade domains (else FAIL), and they should be in min(W, desiredNumZonesPerWriteQuorum)
zones (else MEETS_SOFT). As Java does with enforceStrictZoneawarePlacement (the default): an ensemble size
that is not a multiple of the write quorum, or a write quorum not above minNumZonesPerWriteQuorum, is refused
(BKIncorrectParameterException: a wrapped write quorum would get fewer zones); bookies of the default zone are
never chosen; a new ensemble or a replacement meets the desired zones if it can, else the minimum, else fails
(PlacementPolicyError). Without it, the same preferences apply but the best spread found is used (logged
once). Acknowledgements must come from min(W, minNumZonesPerWriteQuorum) zones with
enforceMinNumFaultDomainsForWrite. Reads prefer the client's own zone.
"""

from __future__ import annotations

from collections.abc import Collection

from bkfast.errors import BKIncorrectParameterException, PlacementPolicyError

from .placement import Adherence, CandidateIndex, PlacementPolicy, write_quorums
from .placement_rack import repair
from .placement_search import Rules, best_spread, fill, spread_by_top_level, top_level
from .topology import DEFAULT_ZONE_AND_UPGRADE_DOMAIN, path_parts

__all__ = ["ZoneawareEnsemblePlacementPolicy", "ZONEAWARE_POLICY", "zone_of"]

ZONEAWARE_POLICY = "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy"
DEFAULT_ZONE_NAME = path_parts(DEFAULT_ZONE_AND_UPGRADE_DOMAIN)[0]


zone_of = top_level
_rank = spread_by_top_level


def _zones_at_least(zones: int):
    """Feasible while the filled bookies have distinct locations (a zone's bookies in distinct upgrade
    domains) and the zones they span plus the open positions reach `zones`."""

    def feasible(window: list) -> bool:
        filled = [loc for loc in window if loc is not None]
        if len(set(filled)) != len(filled):
            return False
        return len({zone_of(loc) for loc in filled}) + len(window) - len(filled) >= zones

    return feasible


class ZoneawareEnsemblePlacementPolicy(PlacementPolicy):
    """Write quorums over zones, and over upgrade domains within a zone (the rule above)."""

    name = ZONEAWARE_POLICY
    default_location = DEFAULT_ZONE_AND_UPGRADE_DOMAIN

    @staticmethod
    def valid_location(location: str) -> bool:
        return len(path_parts(location)) == 2

    def local_key(self, location: str) -> str:
        return zone_of(location)

    def _not_default_zone(self, location: str) -> bool:
        return zone_of(location) != DEFAULT_ZONE_NAME

    def placement_index(self, writable, scope_id: int):
        return self.candidates(writable, scope_id, self._not_default_zone if self.settings.strict_zones else None)

    def check_quorums(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        if not self.settings.strict_zones:
            return
        if ensemble_size % write_quorum:
            raise BKIncorrectParameterException(
                f"ensemble size {ensemble_size} is not a multiple of write quorum {write_quorum} "
                "(enforceStrictZoneawarePlacement: a wrapped write quorum would span fewer zones)")
        if write_quorum <= self.settings.min_zones:
            raise BKIncorrectParameterException(
                f"write quorum {write_quorum} is not above minNumZonesPerWriteQuorum={self.settings.min_zones} "
                "(enforceStrictZoneawarePlacement)")

    def _targets(self, write_quorum: int) -> list[int]:
        desired = min(write_quorum, self.settings.desired_zones)
        return sorted({desired, min(desired, self.settings.min_zones)}, reverse=True)

    def _place(self, what: str, members: list, locations: list, write_quorum: int, index, used: set,
               prefer: dict | None) -> tuple[str, ...]:
        for zones in self._targets(write_quorum):
            rules = Rules(_zones_at_least(zones), _rank, prefer, monotone=True)
            found = fill(members, locations, write_quorum, index, rules, used, self.rng)
            if found is not None:
                return tuple(found)
        if self.settings.strict_zones:
            available = sorted({zone_of(index.loc[b]) for b in index.ids if b not in used})
            raise PlacementPolicyError(
                f"{what}: no placement of E={len(members)} W={write_quorum} puts every write quorum on "
                f"{self.settings.min_zones} zones in distinct upgrade domains "
                f"(zones: {', '.join(available) or 'none'}; "
                "enforceStrictZoneawarePlacement is on, default-zone bookies excluded)")
        found = best_spread(self, members, locations, write_quorum, index, _rank, prefer, used)
        self.warn_once("fallback", "%s: no placement of E=%d W=%d meets minNumZonesPerWriteQuorum=%d; using the best "
                       "spread found (%s). This is logged once", self.name, len(members), write_quorum,
                       self.settings.min_zones, ",".join(found))
        return tuple(found)

    def place_new(self, index: CandidateIndex, ensemble_size: int, write_quorum: int, ack_quorum: int,
                  used: set[str]) -> tuple[str, ...]:
        return self._place("new ensemble", [None] * ensemble_size, [None] * ensemble_size, write_quorum, index, used,
                           None)

    def place_replacements(self, index: CandidateIndex, ensemble: tuple[str, ...], write_quorum: int,
                           ack_quorum: int, failed: set[str], excluded: Collection[str],
                           scope_id: int) -> tuple[str, ...]:
        members, locations, prefer, used = self.replacement_slots(ensemble, failed, excluded)
        return self._place("ensemble change", members, locations, write_quorum, index, used, prefer)

    def adherence(self, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int) -> Adherence:
        if len(ensemble) % write_quorum:
            return Adherence.FAIL
        locations = [self.topology.location(b) for b in ensemble]
        if any(zone_of(loc) == DEFAULT_ZONE_NAME for loc in locations):
            return Adherence.FAIL
        desired = min(write_quorum, self.settings.desired_zones)
        result = Adherence.MEETS_STRICT
        for window in write_quorums(len(ensemble), write_quorum):
            locs = [locations[i] for i in window]
            zones = len({zone_of(loc) for loc in locs})
            if zones < self.settings.min_zones or len(set(locs)) != len(locs):
                return Adherence.FAIL
            if zones < desired:
                result = Adherence.MEETS_SOFT
        return result

    def replace_to_adhere(self, writable, ensemble, write_quorum, ack_quorum, scope_id=0, excluded=()):
        if self.adherence(ensemble, write_quorum, ack_quorum) != Adherence.FAIL:
            return tuple(ensemble)
        return repair(self, ensemble, write_quorum, self.placement_index(writable, scope_id),
                      _zones_at_least(min(write_quorum, self.settings.min_zones)), _rank, set(excluded))

    def fault_domains_needed(self, write_quorum: int) -> int:
        return min(write_quorum, self.settings.min_zones)

    def fault_domain(self, location: str) -> str:
        return zone_of(location)
