"""BookKeeper's RegionAwareEnsemblePlacementPolicy: ensembles spread over regions so that every acknowledged
entry is in several regions.

A location is `/region/rack` (a one-level location is a region of its own, as in Java); bookies the topology
does not place are in `/default-region/default-rack`. The regions written to are those of
`reppRegionsToWrite` (';'-separated) when it is set, else every region with bookies. The rule (Java's
RackOrRegionDurabilityCoverageSet), with m = reppMinimumRegionsForDurability > 1: in every write quorum, the
m - 1 regions holding the most of its bookies hold at most A - 1 of them, so any A bookies that acknowledge
an entry are in at least m regions. Java refuses, as bkfast does (BKIncorrectParameterException), an ack
quorum below m or one that a region failure would leave unable to meet the rule (A <= W - W / m), and a
`reppRegionsToWrite` naming fewer than m regions. The rule binds new ensembles always (PlacementPolicyError
when the bookies' regions cannot meet it) and replacements when reppEnableDurabilityEnforcementInReplace is
on (else a replacement only prefers it). Within the rule, each position prefers a region, then a rack, that
the positions sharing a write quorum with it do not have; a replacement first tries the replaced bookie's
rack (Java's replaceFromRack).

Unlike Java 4.16, whose region-aware `isEnsembleAdheringToPlacementPolicy` always answers MEETS_STRICT (left
unfinished there), `adherence` here checks the rule, so the auditor's placement check sees region-aware ledgers
that break it. Reads prefer bookies of the client's own region (reorderReadSequenceEnabled).
"""

from __future__ import annotations

from collections.abc import Collection

from bkfast.errors import BKIncorrectParameterException, PlacementPolicyError

from .placement import Adherence, CandidateIndex, PlacementPolicy, write_quorums
from .placement_rack import repair
from .placement_search import Rules, best_spread, fill, spread_by_top_level, top_level
from .topology import DEFAULT_REGION_AND_RACK

__all__ = ["RegionAwareEnsemblePlacementPolicy", "REGIONAWARE_POLICY", "region_of"]

REGIONAWARE_POLICY = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"


region_of = top_level
_rank = spread_by_top_level


class RegionAwareEnsemblePlacementPolicy(PlacementPolicy):
    """Any ack quorum of a write quorum in reppMinimumRegionsForDurability regions (the rule above)."""

    name = REGIONAWARE_POLICY
    default_location = DEFAULT_REGION_AND_RACK

    def local_key(self, location: str) -> str:
        return region_of(location)

    def _in_regions(self, location: str) -> bool:
        return region_of(location) in (self.settings.regions_to_write or ())

    def placement_index(self, writable, scope_id: int):
        keep = self._in_regions if self.settings.regions_to_write is not None else None
        return self.candidates(writable, scope_id, keep)

    def _durable(self, ack_quorum: int):
        m = self.settings.min_regions

        def feasible(window: list) -> bool:
            if m <= 1:
                return True
            counts: dict[str, int] = {}
            open_positions = 0
            for loc in window:
                if loc is None:
                    open_positions += 1
                else:
                    region = region_of(loc)
                    counts[region] = counts.get(region, 0) + 1
            ordered = sorted([*counts.values(), *[1] * open_positions], reverse=True)
            return sum(ordered[:m - 1]) <= ack_quorum - 1

        return feasible

    def check_quorums(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        m = self.settings.min_regions
        if m <= 0:
            return
        if ack_quorum < m:
            raise BKIncorrectParameterException(f"ack quorum {ack_quorum} is below reppMinimumRegionsForDurability="
                                                f"{m}: an acknowledged entry could not be in {m} regions")
        if ack_quorum <= write_quorum - write_quorum // m:
            floor = write_quorum - write_quorum // m
            raise BKIncorrectParameterException(
                f"ack quorum {ack_quorum} with write quorum {write_quorum} cannot keep entries in {m} regions once "
                f"a region is down (Java's rule: the ack quorum must be above W - W/m = {floor})")

    def _fail(self, what: str, write_quorum: int, ack_quorum: int, index, used) -> Exception:
        regions = sorted({region_of(index.loc[b]) for b in index.ids if b not in used})
        return PlacementPolicyError(
            f"{what}: no placement of W={write_quorum} A={ack_quorum} keeps every acknowledged entry in "
            f"{self.settings.min_regions} regions with the available bookies (regions: {', '.join(regions) or 'none'})")

    def place_new(self, index: CandidateIndex, ensemble_size: int, write_quorum: int, ack_quorum: int,
                  used: set[str]) -> tuple[str, ...]:
        found = fill([None] * ensemble_size, [None] * ensemble_size, write_quorum, index,
                     Rules(self._durable(ack_quorum), _rank, monotone=True), used, self.rng)
        if found is None:
            raise self._fail("new ensemble", write_quorum, ack_quorum, index, used)
        return tuple(found)

    def place_replacements(self, index: CandidateIndex, ensemble: tuple[str, ...], write_quorum: int,
                           ack_quorum: int, failed: set[str], excluded: Collection[str],
                           scope_id: int) -> tuple[str, ...]:
        members, locations, prefer, used = self.replacement_slots(ensemble, failed, excluded)
        rules = Rules(self._durable(ack_quorum), _rank, prefer, monotone=True)
        found = fill(members, locations, write_quorum, index, rules, used, self.rng)
        if found is None and self.settings.enforce_durability_in_replace and self.settings.min_regions > 1:
            raise self._fail("ensemble change", write_quorum, ack_quorum, index, used)
        if found is None:
            found = best_spread(self, members, locations, write_quorum, index, _rank, prefer, used, scope_id)
            self.warn_once("fallback", "%s: a replacement could not keep entries in %d regions "
                           "(reppEnableDurabilityEnforcementInReplace is off); using %s. This is logged once",
                           self.name, self.settings.min_regions, ",".join(found))
        return tuple(found)

    def adherence(self, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int) -> Adherence:
        feasible = self._durable(ack_quorum)
        locations = [self.topology.location(b) for b in ensemble]
        for window in write_quorums(len(ensemble), write_quorum):
            if not feasible([locations[i] for i in window]):
                return Adherence.FAIL
        return Adherence.MEETS_STRICT

    def replace_to_adhere(self, writable, ensemble, write_quorum, ack_quorum, scope_id=0, excluded=()):
        if self.adherence(ensemble, write_quorum, ack_quorum) != Adherence.FAIL:
            return tuple(ensemble)
        return repair(self, ensemble, write_quorum, self.placement_index(writable, scope_id), self._durable(ack_quorum),
                      _rank, set(excluded))

    def fault_domains_needed(self, write_quorum: int) -> int:
        return min(write_quorum, self.settings.min_racks)
