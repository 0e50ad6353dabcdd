"""The placement policies against Java's rules (RackawareEnsemblePlacementPolicy, RegionAwareEnsemblePlacementPolicy,
ZoneawareEnsemblePlacementPolicy, DefaultEnsemblePlacementPolicy): write-quorum coverage, fallback and its
single log line, enforcement errors, replacements that keep coverage, read reordering, fault domains of an
add's acknowledgements, disk weights. Pure: the policies are fed bookies and locations, no I/O."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest

from bkfast.client.placement import Adherence, DefaultEnsemblePlacementPolicy, disk_weights, write_quorums
from bkfast.client.placement_factory import policy_class, policy_from_conf
from bkfast.client.placement_rack import RackawareEnsemblePlacementPolicy
from bkfast.client.placement_region import RegionAwareEnsemblePlacementPolicy
from bkfast.client.placement_zone import ZoneawareEnsemblePlacementPolicy
from bkfast.client.topology import RackTableMapping
from bkfast.conf import ClientConfiguration, ServerConfiguration
from bkfast.errors import (
    BKIncorrectParameterException,
    BKNotEnoughBookiesException,
    ConfigurationError,
    PlacementPolicyError,
)
from bkfast.meta.driver import BookieInfo

RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
REGIONAWARE = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
ZONEAWARE = "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy"
DEFAULT = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"


def bookies(layout: dict[str, int], read_only: set[str] = frozenset()) -> tuple[dict, dict]:
    """({id: BookieInfo}, {id: location}) for {location: count}; ids 10.<rack>.0.<i>:3181."""
    writable, locations = {}, {}
    for r, (location, count) in enumerate(layout.items()):
        for i in range(count):
            bid = f"10.{r}.0.{i}:3181"
            writable[bid] = BookieInfo(bid, f"10.{r}.0.{i}", 3181, {"bkfast.scopeIds": "1"}, bid in read_only)
            locations[bid] = location
    return writable, locations


def policy(name=RACKAWARE, locations=None, seed=7, **conf):
    p = policy_from_conf(ClientConfiguration({"ensemblePlacementPolicy": name, **conf}), rng=random.Random(seed))
    if locations:
        p.topology.apply(locations)
    return p


def racks_of(ensemble, locations) -> list[str]:
    return [locations[b] for b in ensemble]


def every_write_quorum_spans(ensemble, w, locations, n) -> bool:
    return all(len({locations[ensemble[i]] for i in q}) >= n for q in write_quorums(len(ensemble), w))


# --- the configuration -------------------------------------------------------------------------------------

def test_defaults_are_javas():
    conf = ClientConfiguration()
    assert conf.get("ensemblePlacementPolicy") == RACKAWARE
    assert conf.get("reppDnsResolverClass") == "org.apache.bookkeeper.net.ScriptBasedMapping"
    assert conf.get("networkTopologyScriptNumberArgs") == 100
    assert conf.get("minNumRacksPerWriteQuorum") == 2
    assert conf.get("enforceMinNumRacksPerWriteQuorum") is False
    assert conf.get("reppMinimumRegionsForDurability") == 2
    assert conf.get("reppEnableDurabilityEnforcementInReplace") is True
    assert (conf.get("minNumZonesPerWriteQuorum"), conf.get("desiredNumZonesPerWriteQuorum")) == (2, 3)
    assert conf.get("enforceStrictZoneawarePlacement") is True
    assert conf.get("reorderReadSequenceEnabled") is False
    assert conf.get("diskWeightBasedPlacementEnabled") is False
    assert conf.get("bookieMaxWeightMultipleForWeightBasedPlacement") == 3
    server = ServerConfiguration()
    assert server.get("repairedPlacementPolicyNotAdheringBookieEnable") is False
    assert server.get("auditorPeriodicPlacementPolicyCheckInterval") == 0
    assert server.ensemble_placement_policy == RACKAWARE              # AutoRecovery's clients read them too


def test_policies_are_named_by_java_class_names_and_a_typo_is_one_line():
    assert policy_class(RACKAWARE) is RackawareEnsemblePlacementPolicy
    assert policy_class(REGIONAWARE) is RegionAwareEnsemblePlacementPolicy
    assert policy_class(ZONEAWARE) is ZoneawareEnsemblePlacementPolicy
    assert policy_class(DEFAULT) is DefaultEnsemblePlacementPolicy
    assert policy_class("org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy") \
        is RackawareEnsemblePlacementPolicy
    with pytest.raises(ConfigurationError, match="RackawareEnsemblePlacementPolicy"):
        policy_class("org.apache.bookkeeper.client.RackAwareEnsemblePlacementPolicy")   # Java's is "Rackaware"


def test_write_quorums_are_the_wrapping_runs_of_w_positions():
    assert write_quorums(3, 2) == [[0, 1], [1, 2], [2, 0]]
    assert write_quorums(5, 3)[3:] == [[3, 4, 0], [4, 0, 1]]
    assert write_quorums(3, 3) == [[0, 1, 2]]


# --- rack-aware -------------------------------------------------------------------------------------------

def test_rack_aware_spreads_every_write_quorum_over_two_racks():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2})
    p = policy(locations=locations, enforceMinNumRacksPerWriteQuorum=True)
    for _ in range(200):
        e = p.new_ensemble(writable, 3, 2, 2)
        assert len(set(e)) == 3 and every_write_quorum_spans(e, 2, locations, 2)
        assert p.adherence(e, 2, 2) == Adherence.MEETS_STRICT
        e = p.new_ensemble(writable, 5, 3, 2)
        assert every_write_quorum_spans(e, 3, locations, 2)


def test_the_issues_case_random_placement_puts_a_write_quorum_in_one_rack_twelve_times_in_twenty():
    import itertools

    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2})
    p = policy(locations=locations)
    bad = [e for e in itertools.combinations(sorted(writable), 3) if p.adherence(e, 2, 2) == Adherence.FAIL]
    assert len(bad) == 12


def test_enforced_rack_aware_fails_with_a_clear_error_when_racks_cannot_cover():
    writable, locations = bookies({"/r1": 3, "/r2": 3})      # E=3 W=2 needs three racks (an odd cycle)
    p = policy(locations=locations, enforceMinNumRacksPerWriteQuorum=True)
    with pytest.raises(PlacementPolicyError, match=r"every write quorum on 2 racks.*/r1, /r2") as err:
        p.new_ensemble(writable, 3, 2, 2)
    assert isinstance(err.value, BKNotEnoughBookiesException)         # what Java throws
    assert every_write_quorum_spans(p.new_ensemble(writable, 4, 2, 2), 2, locations, 2)   # an even ring fits


def test_unenforced_rack_aware_falls_back_and_logs_it_once(caplog):
    writable, locations = bookies({"/r1": 3, "/r2": 3})
    p = policy(locations=locations)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            e = p.new_ensemble(writable, 3, 2, 2)
            assert len(set(e)) == 3 and {locations[b] for b in e} == {"/r1", "/r2"}    # still spread
    assert p.fallbacks == 5
    assert len([r for r in caplog.records if "best spread" in r.getMessage()]) == 1


def test_one_rack_is_random_unless_enforced():
    writable, locations = bookies({"/r1": 5})
    assert len(set(policy(locations=locations).new_ensemble(writable, 3, 2, 2))) == 3
    with pytest.raises(PlacementPolicyError):
        policy(locations=locations, enforceMinNumRacksPerWriteQuorum=True).new_ensemble(writable, 3, 2, 2)
    # no topology at all (the default: every bookie in /default-rack) is today's random placement, no error
    assert len(set(policy().new_ensemble(writable, 3, 2, 2))) == 3


def test_enforcement_never_chooses_default_rack_bookies():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 1})
    unplaced = {b for b, loc in locations.items() if loc == "/r3"}
    p = policy(locations={b: loc for b, loc in locations.items() if b not in unplaced},
               enforceMinNumRacksPerWriteQuorum=True)
    for _ in range(50):
        assert not unplaced & set(p.new_ensemble(writable, 4, 2, 2))
    with pytest.raises(PlacementPolicyError):
        p.new_ensemble(writable, 3, 2, 2)             # r1 + r2 alone cannot cover E=3 W=2


def test_min_racks_above_the_write_quorum_means_every_bookie_of_a_quorum_in_its_own_rack():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2, "/r4": 2})
    p = policy(locations=locations, minNumRacksPerWriteQuorum=3, enforceMinNumRacksPerWriteQuorum=True)
    for _ in range(50):
        assert every_write_quorum_spans(p.new_ensemble(writable, 6, 3, 2), 3, locations, 3)
        assert every_write_quorum_spans(p.new_ensemble(writable, 3, 2, 2), 2, locations, 2)   # min(W, 3)


def test_first_bookie_comes_from_the_clients_own_rack_unless_told_otherwise():
    writable, locations = bookies({"/r1": 3, "/r2": 3, "/r3": 3})
    p = policy(locations=locations)
    p.topology.local_location = "/r2"
    assert all(locations[p.new_ensemble(writable, 3, 2, 2)[0]] == "/r2" for _ in range(30))
    q = policy(locations=locations, ignoreLocalNodeInPlacementPolicy=True)
    q.topology.local_location = "/r2"
    assert {locations[q.new_ensemble(writable, 3, 2, 2)[0]] for _ in range(60)} == {"/r1", "/r2", "/r3"}


def test_replacement_prefers_the_failed_bookies_rack_then_keeps_coverage():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2})
    p = policy(locations=locations, enforceMinNumRacksPerWriteQuorum=True)
    ensemble = ("10.0.0.0:3181", "10.1.0.0:3181", "10.2.0.0:3181")
    new = p.replace_bookies(writable, ensemble, 2, 2, {"10.1.0.0:3181"})
    assert new == ("10.0.0.0:3181", "10.1.0.1:3181", "10.2.0.0:3181")         # the same rack's other bookie
    # that rack's other bookie is gone too: no rack keeps both write quorums on two racks
    with pytest.raises(PlacementPolicyError):
        p.replace_bookies(writable, ensemble, 2, 2, {"10.1.0.0:3181"}, excluded={"10.1.0.1:3181"})
    # E=4 W=2: r1 r2 r1 r2 -> lose r2's first: it must come from r2 or r3 (never r1, between two r1s)
    writable4, locations4 = bookies({"/r1": 2, "/r2": 2, "/r3": 1})
    q = policy(locations=locations4, enforceMinNumRacksPerWriteQuorum=True)
    ring = ("10.0.0.0:3181", "10.1.0.0:3181", "10.0.0.1:3181", "10.1.0.1:3181")
    for _ in range(20):
        new = q.replace_bookies(writable4, ring, 2, 2, {"10.1.0.0:3181"})
        assert new[1] in {"10.2.0.0:3181"} and every_write_quorum_spans(new, 2, locations4, 2)


def test_unenforced_replacement_keeps_replicating_when_coverage_is_impossible():
    writable, locations = bookies({"/r1": 2, "/r2": 2})
    p = policy(locations=locations)
    ensemble = ("10.0.0.0:3181", "10.1.0.0:3181", "10.9.0.0:3181")       # the third rack is gone
    new = p.replace_bookies(writable, ensemble, 2, 2, {"10.9.0.0:3181"})
    assert new[:2] == ensemble[:2] and new[2] in {"10.0.0.1:3181", "10.1.0.1:3181"}


def test_enforce_min_num_fault_domains_for_write_needs_acks_from_two_racks():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2})
    p = policy(locations=locations, enforceMinNumFaultDomainsForWrite=True)
    ensemble = ("10.0.0.0:3181", "10.0.0.1:3181", "10.1.0.0:3181", "10.2.0.0:3181", "10.1.0.1:3181")
    domains, need = p.fault_domains(ensemble, 3)
    assert need == 2 and domains[0] == domains[1] != domains[2]
    assert policy(locations=locations).fault_domains(ensemble, 3) is None


def test_replace_to_adhere_moves_as_few_bookies_as_it_can():
    writable, locations = bookies({"/r1": 3, "/r2": 2, "/r3": 2})
    p = policy(locations=locations)
    ensemble = ("10.0.0.0:3181", "10.0.0.1:3181", "10.1.0.0:3181")          # r1 r1 r2: quorum 0 in one rack
    assert p.adherence(ensemble, 2, 2) == Adherence.FAIL
    fixed = p.replace_to_adhere(writable, ensemble, 2, 2)
    assert p.adherence(fixed, 2, 2) == Adherence.MEETS_STRICT
    assert sum(a != b for a, b in zip(ensemble, fixed, strict=True)) == 1
    assert p.replace_to_adhere(writable, fixed, 2, 2) == fixed


# --- region-aware -----------------------------------------------------------------------------------------

REGIONS = {"/east/r1": 2, "/east/r2": 2, "/west/r1": 2, "/west/r2": 2, "/south/r1": 2}


def _regions_of(ensemble, locations, window):
    return Counter(locations[ensemble[i]].split("/")[1] for i in window)


def test_region_aware_keeps_every_acknowledged_entry_in_two_regions():
    writable, locations = bookies(REGIONS)
    p = policy(REGIONAWARE, locations)
    for _ in range(100):
        e = p.new_ensemble(writable, 3, 2, 2)
        assert all(max(_regions_of(e, locations, q).values()) <= 1 for q in write_quorums(3, 2))
        e = p.new_ensemble(writable, 6, 3, 3)                       # W=3 A=3: at most 2 of a quorum in one region
        assert all(max(_regions_of(e, locations, q).values()) <= 2 for q in write_quorums(6, 3))
        assert p.adherence(e, 3, 3) == Adherence.MEETS_STRICT


def test_region_aware_refuses_quorums_java_refuses():
    writable, locations = bookies(REGIONS)
    p = policy(REGIONAWARE, locations)
    with pytest.raises(BKIncorrectParameterException, match="W - W/m"):
        p.new_ensemble(writable, 3, 3, 2)                # A=2 <= 3 - 3//2: a region down breaks durability
    with pytest.raises(BKIncorrectParameterException, match="below"):
        policy(REGIONAWARE, locations, reppMinimumRegionsForDurability=3).new_ensemble(writable, 3, 3, 2)
    with pytest.raises(ConfigurationError, match="reppRegionsToWrite"):
        policy(REGIONAWARE, locations, reppRegionsToWrite="east")


def test_region_aware_writes_only_to_the_regions_it_is_given():
    writable, locations = bookies(REGIONS)
    p = policy(REGIONAWARE, locations, reppRegionsToWrite="east;west")
    for _ in range(50):
        assert {locations[b].split("/")[1] for b in p.new_ensemble(writable, 4, 2, 2)} == {"east", "west"}


def test_region_aware_fails_a_new_ensemble_in_a_single_region():
    writable, locations = bookies({"/east/r1": 3, "/east/r2": 3})
    with pytest.raises(PlacementPolicyError, match="2 regions"):
        policy(REGIONAWARE, locations).new_ensemble(writable, 3, 2, 2)


def test_region_aware_replacement_enforces_durability_unless_turned_off():
    writable, locations = bookies({"/east/r1": 2, "/west/r1": 1})
    ensemble = ("10.0.0.0:3181", "10.1.0.0:3181")
    with pytest.raises(PlacementPolicyError):
        policy(REGIONAWARE, locations).replace_bookies(writable, ensemble, 2, 2, {"10.1.0.0:3181"})
    new = policy(REGIONAWARE, locations, reppEnableDurabilityEnforcementInReplace=False).replace_bookies(
        writable, ensemble, 2, 2, {"10.1.0.0:3181"})
    assert new == ("10.0.0.0:3181", "10.0.0.1:3181")


# --- zone-aware -------------------------------------------------------------------------------------------

ZONES = {"/az1/ud1": 2, "/az1/ud2": 2, "/az2/ud1": 2, "/az2/ud2": 2, "/az3/ud1": 2, "/az3/ud2": 2}


def test_zone_aware_reaches_the_desired_zones_when_it_can():
    writable, locations = bookies(ZONES)
    p = policy(ZONEAWARE, locations)
    for _ in range(100):
        e = p.new_ensemble(writable, 6, 3, 2)
        zones = {b: locations[b].split("/")[1] for b in e}
        assert every_write_quorum_spans(e, 3, zones, 3)
        assert p.adherence(e, 3, 2) == Adherence.MEETS_STRICT


def test_zone_aware_settles_for_the_minimum_and_reports_it_soft():
    writable, locations = bookies({"/az1/ud1": 2, "/az1/ud2": 2, "/az2/ud1": 2, "/az2/ud2": 2})
    p = policy(ZONEAWARE, locations)
    e = p.new_ensemble(writable, 3, 3, 2)
    assert p.adherence(e, 3, 2) == Adherence.MEETS_SOFT
    zones = Counter(locations[b].split("/")[1] for b in e)
    assert sorted(zones.values()) == [1, 2]
    same_zone = [locations[b] for b in e if zones[locations[b].split("/")[1]] == 2]
    assert len(set(same_zone)) == 2                           # the two of one zone: different upgrade domains


def test_strict_zone_aware_refuses_what_java_refuses():
    writable, locations = bookies(ZONES)
    p = policy(ZONEAWARE, locations)
    with pytest.raises(BKIncorrectParameterException, match="not a multiple"):
        p.new_ensemble(writable, 5, 3, 2)
    with pytest.raises(BKIncorrectParameterException, match="not above minNumZonesPerWriteQuorum"):
        p.new_ensemble(writable, 4, 2, 2)
    loose = policy(ZONEAWARE, locations, enforceStrictZoneawarePlacement=False)
    assert len(set(loose.new_ensemble(writable, 5, 3, 2))) == 5


def test_zone_aware_never_places_on_unplaced_bookies_when_strict_and_judges_them_failing():
    writable, locations = bookies({**ZONES, "/oops": 3})
    unplaced = {b for b, loc in locations.items() if loc == "/oops"}     # one level: not a zone location
    p = policy(ZONEAWARE, locations)
    assert p.topology.location(next(iter(unplaced))) == "/default-zone/default-upgradedomain"
    for _ in range(30):
        assert not unplaced & set(p.new_ensemble(writable, 3, 3, 2))
    assert p.adherence(tuple(sorted(unplaced)), 3, 2) == Adherence.FAIL


def test_zone_aware_fails_strict_placement_with_one_zone():
    writable, locations = bookies({"/az1/ud1": 3, "/az1/ud2": 3})
    with pytest.raises(PlacementPolicyError, match="2 zones"):
        policy(ZONEAWARE, locations).new_ensemble(writable, 3, 3, 2)


# --- reads, weights, the default policy -------------------------------------------------------------------

def test_reorder_reads_local_rack_first_then_others_read_only_slow_and_gone_last():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2})
    p = policy(locations=locations)
    p.topology.local_location = "/r2"
    ensemble = ("10.0.0.0:3181", "10.1.0.0:3181", "10.2.0.0:3181", "10.0.0.1:3181", "10.9.9.9:3181")
    read_only = {"10.0.0.1:3181": writable.pop("10.0.0.1:3181")}
    assert p.reorder_read_sequence(ensemble, [0, 1, 2], writable, read_only, set()) == [1, 0, 2]
    assert p.reorder_read_sequence(ensemble, [4, 3, 2, 1], writable, read_only, {"10.2.0.0:3181"}) == [1, 3, 2, 4]
    region = policy(REGIONAWARE, {"10.0.0.0:3181": "/east/a", "10.1.0.0:3181": "/west/b", "10.2.0.0:3181": "/east/c"})
    region.topology.local_location = "/east/z"
    assert region.reorder_read_sequence(ensemble, [1, 2, 0], writable, read_only, set()) == [2, 0, 1]


def test_disk_weights_follow_javas_weighted_random_selection():
    weights = disk_weights({"a": 100, "b": 100, "c": 1000, "d": 0}, max_multiple=3)
    total = 1200
    assert weights["a"] == weights["b"] == pytest.approx(100 / total)
    assert weights["c"] == pytest.approx(3 * 100 / total)           # capped at 3x the median (100)
    assert weights["d"] == pytest.approx(100 / total)               # no space: the smallest share
    assert disk_weights({"a": 100, "c": 1000}, max_multiple=0)["c"] == pytest.approx(1000 / 1100)


def test_weighted_placement_prefers_bookies_with_free_space():
    writable, locations = bookies({"/r1": 5, "/r2": 5})
    p = policy(locations=locations, diskWeightBasedPlacementEnabled=True, seed=3)
    full = {b for b in writable if b.endswith(".0:3181") or b.endswith(".1:3181")}
    p.set_free_disk_space({b: (1 if b in full else 10**12) for b in writable})
    chosen = Counter(b for _ in range(400) for b in p.new_ensemble(writable, 2, 2, 2))
    assert sum(chosen[b] for b in full) < sum(chosen.values()) * 0.05


def test_default_policy_is_random_and_ignores_racks():
    writable, locations = bookies({"/r1": 3})
    p = policy(DEFAULT, locations)
    seen = Counter(b for _ in range(300) for b in p.new_ensemble(writable, 2, 2, 2))
    assert set(seen) == set(writable) and p.adherence(("10.0.0.0:3181", "10.0.0.1:3181"), 2, 2) == \
        Adherence.MEETS_STRICT
    with pytest.raises(BKNotEnoughBookiesException, match="need 4"):
        p.new_ensemble(writable, 4, 2, 2)


def test_read_only_and_scope_blind_bookies_are_never_chosen():
    writable, locations = bookies({"/r1": 2, "/r2": 2, "/r3": 2}, read_only={"10.0.0.0:3181"})
    blind = "10.1.0.1:3181"
    writable[blind] = BookieInfo(blind, "10.1.0.1", 3181, {})
    p = policy(locations=locations)
    for _ in range(50):
        assert "10.0.0.0:3181" not in p.new_ensemble(writable, 4, 2, 2)
        assert blind not in p.new_ensemble(writable, 4, 2, 2, scope_id=7)


def test_rack_table_mapping_places_bookies_by_id_then_host():
    table = {"default": {"10.0.0.0:3181": {"rack": "r1"}, "10.1.0.0:3181": {"rack": "/r2", "hostname": "b2"}},
             "other": {"10.2.0.0:4000": {"rack": "/r3/"}}}
    mapping = RackTableMapping(table)
    assert mapping.resolve([("10.0.0.0:3181", "10.0.0.0"), ("x:1", "b2"), ("10.2.0.0:3181", "10.2.0.0"),
                            ("10.7.0.0:3181", "10.7.0.0")]) == ["/r1", "/r2", "/r3", None]


def test_the_add_tracker_completes_an_add_once_its_acks_span_the_fault_domains():
    """enforceMinNumFaultDomainsForWrite in the write path's AddTracker (Cython): AQ acks from one rack do not
    complete an add; an ack from another rack does; a write quorum all in one rack completes once all of it
    acknowledged (no other ack can come)."""
    from twisted.internet import defer

    from bkfast._clientpath import AddTracker, PendingAdd

    done: list[int] = []
    tracker = AddTracker(3, 3, 2, -1, 0, False, False, 0.0, lambda pos: None, lambda p, pos: None, lambda e: b"",
                         lambda *error: None, lambda: None)
    tracker.domains, tracker.min_domains = [0, 0, 1], 2
    for entry in (0, 1):
        d = defer.Deferred()
        d.addCallback(done.append)
        tracker.push(PendingAdd(entry, b"x", entry + 1, d))
    tracker.on_ack(0, 0, 0)
    tracker.on_ack(1, 0, 0)
    assert done == []                                   # two acks, both from rack 0
    tracker.on_ack(2, 0, 0)
    assert done == [0]
    tracker.domains = [0, 0, 0]                         # an ensemble change left one rack
    tracker.on_ack(0, 1, 0)
    tracker.on_ack(1, 1, 0)
    assert done == [0]
    tracker.on_ack(2, 1, 0)
    assert done == [0, 1]
    plain = AddTracker(3, 3, 2, -1, 0, False, False, 0.0, lambda pos: None, lambda p, pos: None, lambda e: b"",
                       lambda *error: None, lambda: None)
    d = defer.Deferred()
    plain.push(PendingAdd(0, b"x", 1, d))
    plain.on_ack(0, 0, 0)
    plain.on_ack(1, 0, 0)
    assert d.called                                     # no rule: AQ acks complete it
