"""Print the cost of one ensemble choice with 1,000 bookies in 50 racks (10,000 ledger creates per case), each
topology-aware policy against the random default policy measured in the same run, the ratio first.

    .venv/bin/python bench/placement_bench.py [--bookies 1000] [--racks 50] [--creates 10000]

A case is `new_ensemble` (what `create_ledger` asks the policy, the metadata write aside) or `replace_bookies`
(an ensemble change / AutoRecovery's replacement of one bookie). Each figure is the best of 3 runs of
--creates calls on one core; the index of the bookies (built once per topology change) is built before the
timing and reported apart. The issue's target: under 100 us per choice.
"""

from __future__ import annotations

import argparse
import random
import time

from bkfast.client.placement_factory import policy_from_conf
from bkfast.conf import ClientConfiguration
from bkfast.meta.driver import BookieInfo

TARGET_US = 100.0
RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
REGIONAWARE = "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
ZONEAWARE = "org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy"
DEFAULT = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"


def cluster(n_bookies: int, n_racks: int, shape: str):
    """{id: BookieInfo}, {id: location}: bookies dealt round-robin over the racks; `shape` names a location."""
    writable, where = {}, {}
    for i in range(n_bookies):
        bid = f"10.{i // 250}.{i % 250}.1:3181"
        writable[bid] = BookieInfo(bid, bid.split(":")[0], 3181, {"bkfast.scopeIds": "1"})
        r = i % n_racks
        where[bid] = {"rack": f"/rack-{r}", "region": f"/region-{r % 5}/rack-{r}",
                      "zone": f"/zone-{r % 10}/ud-{r // 10}"}[shape]
    return writable, where


def per_call_us(fn, calls: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


CASES = [  # (label, policy, location shape, E, W, A, conf)
    ("rack-aware E=3 W=2 A=2 enforced", RACKAWARE, "rack", 3, 2, 2, {"enforceMinNumRacksPerWriteQuorum": True}),
    ("rack-aware E=5 W=3 A=2 enforced", RACKAWARE, "rack", 5, 3, 2, {"enforceMinNumRacksPerWriteQuorum": True}),
    ("rack-aware E=3 W=2 A=2 disk-weighted", RACKAWARE, "rack", 3, 2, 2, {"diskWeightBasedPlacementEnabled": True}),
    ("region-aware E=3 W=2 A=2", REGIONAWARE, "region", 3, 2, 2, {}),
    ("zone-aware E=6 W=3 A=2", ZONEAWARE, "zone", 6, 3, 2, {}),
]


def run_case(args, name, shape, e, w, a, conf, seed=1):
    writable, where = cluster(args.bookies, args.racks, shape)
    policy = policy_from_conf(ClientConfiguration({"ensemblePlacementPolicy": name, **conf}), rng=random.Random(seed))
    policy.topology.apply(where)
    if conf.get("diskWeightBasedPlacementEnabled"):
        rng = random.Random(seed)
        policy.set_free_disk_space({b: rng.randint(1, 10) * 2**40 for b in writable})
    start = time.perf_counter()
    first = policy.new_ensemble(writable, e, w, a)
    index_ms = (time.perf_counter() - start) * 1e3
    create = per_call_us(lambda: policy.new_ensemble(writable, e, w, a), args.creates)
    victim = {first[0]}
    replace = per_call_us(lambda: policy.replace_bookies(writable, first, w, a, victim), args.creates)
    return create, replace, index_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bookies", type=int, default=1000)
    parser.add_argument("--racks", type=int, default=50)
    parser.add_argument("--creates", type=int, default=10000)
    args = parser.parse_args()
    print(f"{args.bookies} bookies in {args.racks} racks, {args.creates} choices per case, best of 3 runs")
    base = {}
    for e, w, a in ((3, 2, 2), (5, 3, 2), (6, 3, 2)):
        base[e] = run_case(args, DEFAULT, "rack", e, w, a, {})[0]
    print(f"{'case':40} {'x random':>9} {'create us':>10} {'replace us':>11} {'index ms':>9}  target {TARGET_US:g} us")
    worst = 0.0
    for label, name, shape, e, w, a, conf in CASES:
        create, replace, index_ms = run_case(args, name, shape, e, w, a, conf)
        worst = max(worst, create, replace)
        print(f"{label:40} {create / base[e]:>8.1f}x {create:>10.1f} {replace:>11.1f} {index_ms:>9.2f}  "
              f"{'ok' if max(create, replace) < TARGET_US else 'OVER'}")
    print(f"{'random (DefaultEnsemblePlacementPolicy)':40} {1.0:>8.1f}x {base[3]:>10.1f}  (E=3; E=5: {base[5]:.1f} us)")
    print(f"worst choice: {worst:.1f} us ({'under' if worst < TARGET_US else 'OVER'} the {TARGET_US:g} us target)")


if __name__ == "__main__":
    main()
