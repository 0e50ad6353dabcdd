"""Property tests of the placement policies over random topologies (fixed seeds): on small clusters the policy's
answer is checked against a brute force over every possible ensemble (it meets the rule exactly when some
ensemble can, and an enforced policy fails exactly when none can); on big ones, every answer meets the rule.
Replacements keep the other positions and meet the rule on every write quorum through a replaced position
whenever some replacement can."""

from __future__ import annotations

import itertools
import random

import pytest

from bkfast.client.placement import Adherence, write_quorums
from bkfast.client.placement_factory import policy_from_conf
from bkfast.conf import ClientConfiguration
from bkfast.errors import BKIncorrectParameterException, BKNotEnoughBookiesException, PlacementPolicyError
from bkfast.meta.driver import BookieInfo

RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
REGIONAWARE = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
ZONEAWARE = "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy"


def random_cluster(rng: random.Random, n_bookies: int, locations: list[str]):
    writable, where = {}, {}
    for i in range(n_bookies):
        bid = f"10.0.{i // 250}.{i % 250}:3181"
        writable[bid] = BookieInfo(bid, bid.split(":")[0], 3181, {"bkfast.scopeIds": "1"})
        where[bid] = rng.choice(locations)
    return writable, where


def make(name: str, where: dict, seed: int, **conf):
    p = policy_from_conf(ClientConfiguration({"ensemblePlacementPolicy": name, **conf}), rng=random.Random(seed))
    p.topology.apply(where)
    return p


def _best(p, writable, e, w, a) -> Adherence | None:
    """The best adherence any ensemble of E distinct candidates reaches (brute force), None if E > candidates."""
    ids = sorted(writable)
    if len(ids) < e:
        return None
    best = Adherence.FAIL
    for ensemble in itertools.permutations(ids, e):
        best = max(best, p.adherence(ensemble, w, a))
        if best == Adherence.MEETS_STRICT:
            break
    return best


def _shapes(rng):
    e = rng.randint(2, 4)
    w = rng.randint(2, e)
    return e, w, rng.randint(1, w)


@pytest.mark.parametrize("seed", range(40))
def test_enforced_rack_aware_places_exactly_when_some_ensemble_can(seed):
    rng = random.Random(seed)
    racks = [f"/r{i}" for i in range(rng.randint(1, 4))]
    writable, where = random_cluster(rng, rng.randint(3, 7), racks)
    e, w, a = _shapes(rng)
    p = make(RACKAWARE, where, seed, enforceMinNumRacksPerWriteQuorum=True,
             minNumRacksPerWriteQuorum=rng.choice([2, 2, 3]))
    best = _best(p, writable, e, w, a)
    try:
        ensemble = p.new_ensemble(writable, e, w, a)
    except PlacementPolicyError:
        assert best == Adherence.FAIL, (where, e, w)
        return
    except BKNotEnoughBookiesException:
        assert best is None
        return
    assert len(set(ensemble)) == e and set(ensemble) <= set(writable)
    assert p.adherence(ensemble, w, a) == Adherence.MEETS_STRICT


@pytest.mark.parametrize("seed", range(40))
def test_unenforced_rack_aware_always_places_and_meets_the_rule_when_it_can(seed):
    rng = random.Random(1000 + seed)
    racks = [f"/r{i}" for i in range(rng.randint(1, 4))]
    writable, where = random_cluster(rng, rng.randint(3, 7), racks)
    e, w, a = _shapes(rng)
    excluded = set(rng.sample(sorted(writable), rng.randint(0, 1)))
    p = make(RACKAWARE, where, seed)
    candidates = {b: i for b, i in writable.items() if b not in excluded}
    if len(candidates) < e:
        with pytest.raises(BKNotEnoughBookiesException):
            p.new_ensemble(writable, e, w, a, excluded=excluded)
        return
    ensemble = p.new_ensemble(writable, e, w, a, excluded=excluded)
    assert len(set(ensemble)) == e and not excluded & set(ensemble)
    if len(set(where[b] for b in candidates)) >= 2 and _best(p, candidates, e, w, a) == Adherence.MEETS_STRICT:
        assert p.adherence(ensemble, w, a) == Adherence.MEETS_STRICT


@pytest.mark.parametrize("seed", range(40))
def test_rack_aware_replacement_keeps_the_rest_and_covers_when_it_can(seed):
    rng = random.Random(2000 + seed)
    racks = [f"/r{i}" for i in range(rng.randint(2, 4))]
    writable, where = random_cluster(rng, rng.randint(4, 8), racks)
    e, w, a = _shapes(rng)
    ensemble = tuple(rng.sample(sorted(writable), e))
    failed = set(rng.sample(ensemble, rng.randint(1, min(2, e))))
    p = make(RACKAWARE, where, seed, enforceMinNumRacksPerWriteQuorum=True)
    need = min(w, 2)
    positions = [i for i, b in enumerate(ensemble) if b in failed]
    spare = sorted(set(writable) - set(ensemble))

    def through_replaced_ok(candidate):
        return all(len({where[candidate[i]] for i in q}) >= need
                   for q in write_quorums(e, w) if set(q) & set(positions))

    possible = any(through_replaced_ok(tuple(dict(zip(positions, pick, strict=True)).get(i, b)
                                              for i, b in enumerate(ensemble)))
                   for pick in itertools.permutations(spare, len(positions)))
    try:
        new = p.replace_bookies(writable, ensemble, w, a, failed)
    except PlacementPolicyError:
        assert not possible
        return
    except BKNotEnoughBookiesException:
        assert len(spare) < len(positions)
        return
    assert [b for i, b in enumerate(new) if i not in positions] == [b for b in ensemble if b not in failed]
    assert len(set(new)) == e and not failed & set(new)
    assert through_replaced_ok(new)


@pytest.mark.parametrize("seed", range(30))
def test_strict_zone_aware_reaches_the_best_adherence_any_ensemble_can(seed):
    rng = random.Random(3000 + seed)
    zones = [f"/az{z}/ud{u}" for z in range(rng.randint(1, 3)) for u in range(rng.randint(1, 2))]
    writable, where = random_cluster(rng, rng.randint(3, 7), zones)
    w = 3
    e = rng.choice([3, 6]) if len(writable) >= 6 else 3
    p = make(ZONEAWARE, where, seed)
    best = _best(p, writable, e, w, 2) if e == 3 else None
    try:
        ensemble = p.new_ensemble(writable, e, w, 2)
    except PlacementPolicyError:
        assert best in (Adherence.FAIL, None)
        return
    got = p.adherence(ensemble, w, 2)
    assert got >= Adherence.MEETS_SOFT
    if best is not None:
        assert got == best


@pytest.mark.parametrize("seed", range(30))
def test_region_aware_keeps_any_ack_quorum_in_two_regions_whenever_it_can(seed):
    rng = random.Random(4000 + seed)
    locations = [f"/reg{r}/rack{k}" for r in range(rng.randint(1, 3)) for k in range(2)]
    writable, where = random_cluster(rng, rng.randint(3, 7), locations)
    e = rng.randint(2, 4)
    w = rng.randint(2, e)
    a = rng.randint(1, w)
    p = make(REGIONAWARE, where, seed)
    try:
        ensemble = p.new_ensemble(writable, e, w, a)
    except BKIncorrectParameterException:
        assert a < 2 or a <= w - w // 2
        return
    except PlacementPolicyError:
        assert _best(p, writable, e, w, a) == Adherence.FAIL
        return
    except BKNotEnoughBookiesException:
        assert len(writable) < e
        return
    for q in write_quorums(e, w):
        for acked in itertools.combinations(q, a):
            assert len({where[ensemble[i]].split("/")[1] for i in acked}) >= 2, (ensemble, q)


@pytest.mark.parametrize("seed", range(10))
def test_big_random_clusters_always_get_covering_ensembles(seed):
    rng = random.Random(5000 + seed)
    racks = [f"/r{i}" for i in range(rng.randint(3, 40))]
    writable, where = random_cluster(rng, rng.randint(60, 400), racks)
    p = make(RACKAWARE, where, seed, enforceMinNumRacksPerWriteQuorum=True)
    for _ in range(100):
        e = rng.randint(3, 9)
        w = rng.randint(2, min(e, 5))
        ensemble = p.new_ensemble(writable, e, w, 2)
        assert len(set(ensemble)) == e and p.adherence(ensemble, w, 2) == Adherence.MEETS_STRICT
        failed = set(rng.sample(ensemble, rng.randint(1, 2)))
        new = p.replace_bookies(writable, ensemble, w, 2, failed)
        assert p.adherence(new, w, 2) == Adherence.MEETS_STRICT and not failed & set(new)
