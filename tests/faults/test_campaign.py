"""The bounded fault campaign `make test` runs: three seeds, each with every fault type once (in a
seed-drawn order) against a real cluster in network namespaces (ZooKeeper, 5 bookies running AutoRecovery,
2 writers, a recovering reader, a tailing reader, a stream writer and a tailing stream reader). Each must
end with every acknowledged entry and stream record checked, no under-replication mark left and no
violation; on the real history of the first seed, the checker must also report the two violations the
issue names, a lost stream record and a mark left behind once they are injected.
BKFAST_FAULT_SEEDS (comma-separated) and BKFAST_FAULT_SECONDS change the run; a failing seed is printed
and replays with `python -m tests.faults --seed S`.
"""

from __future__ import annotations

import copy
import os
import random

import pytest

from tests.faults.campaign import all_fault_orders, run_campaign
from tests.faults.checker import check
from tests.faults.nemesis import FAULTS
from tests.faults.netns import netns_available

SEEDS = [int(s) for s in os.environ.get("BKFAST_FAULT_SEEDS", "1701,2802,3903").split(",")]
SECONDS = float(os.environ.get("BKFAST_FAULT_SECONDS", "40"))

pytestmark = [
    pytest.mark.zookeeper,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs `make test` as root)"),
]


@pytest.fixture(scope="module")
def first_history():
    return {}


@pytest.mark.parametrize("seed", SEEDS)
def test_campaign_with_every_fault_type_finds_no_violation(seed, tmp_path, first_history):
    problem = netns_available()
    assert problem is None, problem
    lines = []
    summary, report, history = run_campaign(seed, SECONDS, tmp_path, all_fault_orders(seed),
                                            prefix=f"bkc{os.getpid()}", log=lines.append)
    print("\n".join(lines))
    assert summary["faults"] == {kind: 1 for kind in FAULTS}, summary
    assert summary["acked_checked"] > 100, summary
    assert summary["unrecovered_ledgers"] == 0, summary
    assert summary["stream_records_checked"] > 100, summary
    # a mark may stay only where no registered bookie is outside the ledger's ensembles (E=5 on 5 bookies)
    assert summary["underreplicated_left"] == summary["underreplicated_unhealable"], summary
    assert report.violations == [], "\n".join(lines)
    if not first_history:
        first_history.update(history=history, final=_final(tmp_path))
        _checker_catches_injections_on_real_history(history, first_history["final"], seed)


def _final(work_dir):
    import json

    return json.loads((work_dir / "final.json").read_text())


def _checker_catches_injections_on_real_history(history, final, seed):
    rng = random.Random(seed)
    acks = [(i, e) for i, e in enumerate(history) if e["op"] == "add" and e.get("phase") == "ok"]
    # 1. an acknowledged entry removed from a bookie's answer (every bookie that has it: below AQ for any mix)
    i, ack = rng.choice(acks)
    removed = copy.deepcopy(final)
    answers = removed["ledgers"][str(ack["ledger"])]["replicas"][str(ack["entry"])]
    for bookie in answers:
        answers[bookie] = "missing"
    violations = check(history, removed).violations
    assert [(v.kind, v.ledger, i in v.witnesses) for v in violations] == [("durability", ack["ledger"], True)]
    # 2. an add acknowledged after the close: the entry after a closed ledger's last one
    closed = [(j, e) for j, e in enumerate(history) if e["op"] in ("recover", "close") and e.get("phase") == "ok"]
    j, close = rng.choice(closed)
    late = {"t": history[-1]["t"] + 1, "p": "w1", "op": "add", "phase": "ok", "ledger": close["ledger"],
            "seq": 10**6, "h": "0" * 16, "entry": final["ledgers"][str(close["ledger"])]["lac"] + 1}
    violations = check(history + [late], final).violations
    assert [v.kind for v in violations] == ["persistence"]
    assert violations[0].witnesses[-1] == len(history)

    # 3. an acknowledged stream record gone from the final read of the stream
    appends = [(k, e) for k, e in enumerate(history) if e["op"] == "sappend" and e.get("phase") == "ok"]
    k, append = rng.choice(appends)
    lost = copy.deepcopy(final)
    lost["stream"]["records"] = [r for r in lost["stream"]["records"] if r[3] != append["seq"]]
    violations = check(history, lost).violations
    assert {v.kind for v in violations} <= {"stream_lost", "stream_gap"}, violations
    assert any(v.kind == "stream_lost" and v.witnesses == [k] for v in violations), violations
    # 4. an under-replication mark left for a ledger whose bookies are all registered, with a spare one (a
    # ledger whose ensembles name a bookie that is gone, or every bookie, is rightly not healable)
    available = set(final["replication"]["available"])
    healable = [lid for lid, md in final["ledgers"].items()
                if _ensemble_bookies(md) <= available and available - _ensemble_bookies(md)]
    ledger = rng.choice(sorted(healable))
    marked = copy.deepcopy(final)
    marked["replication"]["marks"] = {ledger: [marked["replication"]["available"][0]]}
    assert [(v.kind, v.ledger) for v in check(history, marked).violations] == [("underreplicated", int(ledger))]


def _ensemble_bookies(ledger_final: dict) -> set:
    return {bookie for _start, ensemble in ledger_final["ensembles"] for bookie in ensemble}
