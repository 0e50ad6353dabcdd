"""BookKeeper's RackawareEnsemblePlacementPolicy (Java's default policy): every write quorum spans racks.

The rule: each write quorum (W consecutive positions of the ensemble, wrapping) holds bookies of at least
min(W, minNumRacksPerWriteQuorum) racks (with enforceMinNumFaultDomainsForWrite: minNumRacksPerWriteQuorum).
A location is a rack, whatever its depth (`/rack1`, or `/region/rack` from a shared script); bookies the
topology does not place are in `/default-rack`. As Java does:
- a new ensemble starts, when the client's own rack is known (and ignoreLocalNodeInPlacementPolicy is off),
  with a bookie of that rack, then spreads over racks (placement_search); with fewer than two racks it is
  random;
- a replacement prefers the replaced bookie's rack, then any rack that keeps every write quorum through the
  position spanning enough racks;
- when no placement meets the rule: with enforceMinNumRacksPerWriteQuorum the create or ensemble change fails
  (PlacementPolicyError, a BKNotEnoughBookiesException) and bookies of the default rack are never chosen;
  otherwise the best spread found is used and the fallback is logged once;
- with enforceMinNumFaultDomainsForWrite an add is acknowledged only once its acknowledgements come from
  min(W, minNumRacksPerWriteQuorum) racks (`fault_domains`, used by the write path).
`replace_to_adhere` (AutoRecovery's placement repair) moves as few positions as it can.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection

from bkfast.errors import PlacementPolicyError

from .placement import Adherence, CandidateIndex, PlacementPolicy, random_pick, random_replacements, write_quorums
from .placement_search import Rules, best_spread, fill
from .topology import DEFAULT_RACK

__all__ = ["RackawareEnsemblePlacementPolicy", "RACKAWARE_POLICY"]

RACKAWARE_POLICY = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
MAX_REPAIR_TRIES = 200


def _spread_rank(location: str, neighbours: list) -> int:
    return 1 if location in neighbours else 0


class RackawareEnsemblePlacementPolicy(PlacementPolicy):
    """Every write quorum over min(W, minNumRacksPerWriteQuorum) racks (the rule and Java's choices above)."""

    name = RACKAWARE_POLICY
    default_location = DEFAULT_RACK

    # --- the rule ---------------------------------------------------------------------------------------
    def racks_needed(self, write_quorum: int) -> int:
        return min(write_quorum, self.settings.min_racks)

    def _feasible(self, write_quorum: int):
        need = self.racks_needed(write_quorum)

        def feasible(window: list) -> bool:
            filled = [loc for loc in window if loc is not None]
            return len(set(filled)) + len(window) - len(filled) >= need

        return feasible

    def _not_default(self, location: str) -> bool:
        return location != self.default_location

    def placement_index(self, writable, scope_id: int) -> CandidateIndex:
        return self.candidates(writable, scope_id, self._not_default if self.settings.enforce_min_racks else None)

    def _fail(self, what: str, ensemble_size: int, write_quorum: int, index: CandidateIndex, used) -> Exception:
        racks = sorted({index.loc[b] for b in index.ids if b not in used})
        excluded = ", default-rack bookies excluded" if self.settings.enforce_min_racks else ""
        return PlacementPolicyError(
            f"{what}: no placement of E={ensemble_size} W={write_quorum} puts every write quorum on "
            f"{self.racks_needed(write_quorum)} racks with the available bookies (racks: {', '.join(racks) or 'none'};"
            f" enforceMinNumRacksPerWriteQuorum is on{excluded})")

    def _place(self, what: str, members: list, locations: list, write_quorum: int, index: CandidateIndex,
               used: set, prefer: dict | None) -> tuple[str, ...]:
        strict = Rules(self._feasible(write_quorum), _spread_rank, prefer, monotone=True)
        found = fill(members, locations, write_quorum, index, strict, used, self.rng)
        if found is not None:
            return tuple(found)
        if self.settings.enforce_min_racks:
            raise self._fail(what, len(members), write_quorum, index, used)
        found = best_spread(self, members, locations, write_quorum, index, _spread_rank, prefer, used)
        self.warn_once("fallback", "%s: no placement puts every write quorum of E=%d W=%d on %d racks; using the "
                       "best spread found (%s). This is logged once", self.name, len(members), write_quorum,
                       self.racks_needed(write_quorum), ",".join(found))
        return tuple(found)

    # --- the interface ----------------------------------------------------------------------------------
    def place_new(self, index: CandidateIndex, ensemble_size: int, write_quorum: int, ack_quorum: int,
                  used: set[str]) -> tuple[str, ...]:
        if len(index.by_loc) < 2 and self.racks_needed(write_quorum) > 1:
            if self.settings.enforce_min_racks:
                raise self._fail("new ensemble", ensemble_size, write_quorum, index, used)
            return tuple(random_pick(index, ensemble_size, used, self.rng))     # one rack: random, as Java
        local = self.topology.local_location
        prefer = {0: local} if self.settings.prefer_local_node and local and local != self.default_location else None
        return self._place("new ensemble", [None] * ensemble_size, [None] * ensemble_size, write_quorum, index, used,
                           prefer)

    def place_replacements(self, index: CandidateIndex, ensemble: tuple[str, ...], write_quorum: int,
                           ack_quorum: int, failed: set[str], excluded: Collection[str],
                           scope_id: int) -> tuple[str, ...]:
        if len(index.by_loc) < 2 and not self.settings.enforce_min_racks:
            return random_replacements(index, ensemble, failed, excluded, self.rng)
        members, locations, prefer, used = self.replacement_slots(ensemble, failed, excluded)
        return self._place("ensemble change", members, locations, write_quorum, index, used, prefer)

    def adherence(self, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int) -> Adherence:
        need = self.settings.min_racks if self.settings.enforce_min_fault_domains else self.racks_needed(write_quorum)
        locations = [self.topology.location(b) for b in ensemble]
        for window in write_quorums(len(ensemble), write_quorum):
            if len({locations[i] for i in window}) < need:
                return Adherence.FAIL
        return Adherence.MEETS_STRICT

    def replace_to_adhere(self, writable, ensemble, write_quorum, ack_quorum, scope_id=0, excluded=()):
        if self.adherence(ensemble, write_quorum, ack_quorum) != Adherence.FAIL:
            return tuple(ensemble)
        index = self.placement_index(writable, scope_id)
        return repair(self, ensemble, write_quorum, index, self._feasible(write_quorum), _spread_rank,
                      set(excluded))

    def fault_domains_needed(self, write_quorum: int) -> int:
        return self.racks_needed(write_quorum)


def repair(policy: PlacementPolicy, ensemble: tuple[str, ...], write_quorum: int, index: CandidateIndex, feasible,
           rank, excluded: set) -> tuple[str, ...] | None:
    """An ensemble meeting `feasible` in every write quorum that changes as few positions of `ensemble` as it
    can (positions in breaking write quorums first), or None. Shared by the policies' replace_to_adhere."""
    e = len(ensemble)
    locations = [policy.topology.location(b) for b in ensemble]
    windows = write_quorums(e, write_quorum)
    breaking = [w for w in windows if not feasible([locations[i] for i in w])]
    weight = {p: sum(p in w for w in breaking) for p in range(e)}
    order = sorted(range(e), key=lambda p: -weight[p])
    used = set(ensemble) | excluded
    tries = 0
    for k in range(1, e + 1):
        for positions in itertools.combinations(order, k):
            if not all(any(p in w for p in positions) for w in breaking):
                continue
            tries += 1
            if tries > MAX_REPAIR_TRIES:
                return None
            members = [None if i in positions else b for i, b in enumerate(ensemble)]
            locs = [None if i in positions else loc for i, loc in enumerate(locations)]
            found = fill(members, locs, write_quorum, index, Rules(feasible, rank, monotone=True), used, policy.rng,
                         budget=400)
            if found is not None:
                return tuple(found)
    return None
