"""Filling ensemble positions so that every write quorum meets a policy's rule: the search the topology-aware
policies share (Java's RRTopologyAwareCoverageEnsemble, made a search with backtracking).

A policy hands in `Rules`: `feasible(window)` says whether a write quorum's locations (None = a position not
filled yet) can still meet the rule once its open positions are filled, and `rank(location, neighbours)`
orders the choices for a position (0 = best: e.g. a rack none of the positions sharing a write quorum with
it has). `fill` assigns the open positions of an ensemble one by one. For each position it first draws a
few bookies at random (uniformly, or by weight) and takes the first of rank 0 that keeps every write quorum
through the position feasible, so the usual case costs a handful of draws; then it tries every location,
best rank first, each once (all bookies of a location are alike to the rules). A dead end backtracks; a
budget of tries bounds the work, so a rule that cannot be met costs a bounded time, never an exponential
one. Locations, not bookie ids, are what the rules see. Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import cast

from .placement import CandidateIndex, PlacementPolicy
from .topology import path_parts

__all__ = ["Rules", "fill", "best_spread", "FAST_DRAWS", "BUDGET"]

FAST_DRAWS = 24          # random draws per position before every location is tried in turn
BUDGET = 4000            # locations tried per fill before it gives up


@functools.lru_cache(maxsize=65536)
def top_level(location: str) -> str:
    """The first part of a location: the region of /region/rack, the zone of /zone/upgradedomain."""
    parts = path_parts(location)
    return parts[0] if parts else ""


def spread_by_top_level(location: str, neighbours: list) -> int:
    """Rank of a candidate beside its window's bookies: 0 in a region/zone none of them is in, 1 in a
    shared one but another rack/domain, 2 where one of them already is."""
    level = top_level(location)
    if all(top_level(n) != level for n in neighbours):
        return 0
    return 1 if location not in neighbours else 2


def any_window(window: list) -> bool:
    """The rule of a fallback search: every window is acceptable."""
    return True


@dataclass
class Rules:
    """`feasible(window) -> bool`, `rank(location, neighbours) -> int`; `prefer[position]` is a location to try
    first at that position (a replacement prefers the replaced bookie's rack, as Java does). `monotone`: a
    location of rank 0 (none of the neighbours has its rack / zone / region) never makes a feasible write quorum
    infeasible, so while every write quorum through an open position is feasible such a choice needs no check
    (true of the rules of the three topology-aware policies)."""

    feasible: Callable[[list], bool]
    rank: Callable[[str, list], int]
    prefer: dict[int, str] | None = None
    monotone: bool = False


@functools.lru_cache(maxsize=256)
def _geometry(e: int, w: int) -> tuple[tuple, tuple]:
    """Per position: the other positions sharing a write quorum with it, and the write quorums through it."""
    span = min(w - 1, e - 1)
    around = tuple(tuple(sorted({(p + d) % e for d in range(-span, span + 1) if d} - {p})) for p in range(e))
    windows: tuple[tuple[tuple[int, ...], ...], ...]
    if w >= e:
        windows = tuple((tuple(range(e)),) for _p in range(e))
    else:
        windows = tuple(tuple(tuple((s + j) % e for j in range(w)) for s in range(p - w + 1, p + 1))
                        for p in range(e))
    return around, windows


class _Exhausted(Exception):
    """The budget ran out (private control flow)."""


class _Search:
    def __init__(self, members: list[str | None], locations: list[str | None], write_quorum: int,
                 index: CandidateIndex, rules: Rules, used: set[str], rng: random.Random, budget: int):
        self.members = members
        self.locs = locations
        self.e = len(members)
        self.w = write_quorum
        self.index = index
        self.rules = rules
        self.used = used
        self.rng = rng
        self.budget = budget
        self.around, self.windows = _geometry(self.e, self.w)
        through_open = {window for p, b in enumerate(members) if b is None for window in self.windows[p]}
        self.trust_rank0 = rules.monotone and all(rules.feasible([locations[i] for i in window])
                                                  for window in through_open)

    def ok(self, position: int, location: str) -> bool:
        locs = self.locs
        locs[position] = location
        feasible = self.rules.feasible
        good = all(feasible([locs[i] for i in window]) for window in self.windows[position])
        locs[position] = None
        return good

    def choices(self, position: int):
        """(bookie, location) candidates for `position`, best first, each location at most once."""
        index, rng, used, rank = self.index, self.rng, self.used, self.rules.rank
        neighbours = [self.locs[i] for i in self.around[position] if self.locs[i] is not None]
        tried: set[str] = set()
        preferred = (self.rules.prefer or {}).get(position)
        if preferred is not None and preferred in index.by_loc:
            tried.add(preferred)
            bookie = index.pick(index.by_loc[preferred], rng, used)
            if bookie is not None and self._spend() and self.ok(position, preferred):
                yield bookie, preferred
        for _ in range(FAST_DRAWS if index.ids else 0):
            bookie = index.sample(rng)
            if bookie in used:
                continue
            location = index.loc[bookie]
            if location in tried or rank(location, neighbours) != 0:
                continue
            tried.add(location)
            if self._spend() and (self.trust_rank0 or self.ok(position, location)):
                yield bookie, location
        rest = [loc for loc in index.by_loc if loc not in tried]
        rng.shuffle(rest)
        rest.sort(key=lambda loc: rank(loc, neighbours))
        for location in rest:
            bookie = index.pick(index.by_loc[location], rng, used)
            if bookie is not None and self._spend() and self.ok(position, location):
                yield bookie, location

    def _spend(self) -> bool:
        self.budget -= 1
        if self.budget < 0:
            raise _Exhausted()
        return True

    def run(self, open_positions: list[int], k: int = 0) -> bool:
        if k == len(open_positions):
            return True
        position = open_positions[k]
        for bookie, location in self.choices(position):
            self.members[position], self.locs[position] = bookie, location
            self.used.add(bookie)
            if self.run(open_positions, k + 1):
                return True
            self.used.discard(bookie)
            self.members[position] = self.locs[position] = None
        return False


def fill(members: list[str | None], locations: list[str | None], write_quorum: int, index: CandidateIndex,
         rules: Rules, used: Collection[str], rng: random.Random, budget: int = BUDGET) -> list[str] | None:
    """`members` with every None position filled so that each write quorum stays feasible, or None when the
    search finds no way (or runs out of budget). `locations[i]` is the location of a filled position (None
    for open ones); `used` are bookies never to choose (the ensemble's, failed and excluded ones)."""
    open_positions = [i for i, b in enumerate(members) if b is None]
    search = _Search(list(members), list(locations), write_quorum, index, rules, set(used), rng, budget)
    try:
        # run() returns True only once every open position holds a bookie
        return cast("list[str]", search.members) if search.run(open_positions) else None
    except _Exhausted:
        return None


def best_spread(policy: PlacementPolicy, members: list[str | None], locations: list[str | None], write_quorum: int,
                index: CandidateIndex, rank: Callable[[str, list], int], prefer: dict | None, used: Collection[str],
                scope_id: int = 0) -> list[str]:
    """What a policy whose rule cannot be met, and is not enforced, falls back to: any placement, `rank` still
    spreading it as well as it can, counted in `policy.fallbacks` (the caller logs it);
    BKNotEnoughBookiesException when not even that is possible."""
    found = fill(members, locations, write_quorum, index, Rules(any_window, rank, prefer), used, policy.rng)
    if found is None:
        raise policy.not_enough(sum(1 for b in members if b is None), index, scope_id, used)
    policy.fallbacks += 1
    return found
