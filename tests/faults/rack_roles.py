"""Client processes of the rack-failure test (test_rack_failure.py), run inside a host's network namespace.

Roles (``python -m tests.faults.rack_roles ROLE URI OUT SECONDS SCRIPT [HISTORIES...]``):
  * ``rackwriter``   ledgers of E/W/A 3/2/2 and 5/3/2 in turn, 30 entries each (8 in flight), under the
                     rack-aware policy with enforcement (enforceMinNumRacksPerWriteQuorum and
                     enforceMinNumFaultDomainsForWrite), racks from the topology SCRIPT;
  * ``randomwriter`` the same under the random DefaultEnsemblePlacementPolicy;
  * ``check``        waits (at most SECONDS) until AutoRecovery has left no under-replication mark but those of
                     ledgers it cannot re-replicate (an ensemble larger than the bookies left), then reads every
                     entry the writers' HISTORIES say was acknowledged (no recovery: nothing is fenced or
                     re-added) and writes {ledger: {"ensembles", "entries": {entry: hash | "error:<name>"}}}.
Writers log each acknowledged add, each ledger's ensembles (after its adds) and failures as JSON lines (the
client_proc History), payloads as the first 16 hex digits of their SHA-256.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from twisted.internet import defer, task, threads

from .client_proc import CLIENT_CONF, PASSWORD, History, _replication_state, bounded, connect_until, digest, sleep

MIXES = ((3, 2, 2), (5, 3, 2))
ENTRIES = 30
DEPTH = 8
PAUSE_S = 0.3
OP_TIMEOUT_S = 15.0
RACKAWARE = "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
POLICIES = {
    "rackwriter": {"ensemblePlacementPolicy": RACKAWARE, "enforceMinNumRacksPerWriteQuorum": True,
                   "enforceMinNumFaultDomainsForWrite": True},
    "randomwriter": {"ensemblePlacementPolicy": "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"},
    "check": {"ensemblePlacementPolicy": RACKAWARE, "reorderReadSequenceEnabled": True},
}


def _ensembles(lh) -> list:
    return [[first, list(bookies)] for first, bookies in lh.metadata.ensembles]


async def _write_one(reactor, lh, rec, rng) -> bool:
    """ENTRIES adds, at most DEPTH in flight; False once one failed."""
    failed, outstanding = [], []
    for seq in range(ENTRIES):
        if failed:
            break
        payload = f"{lh.ledger_id}/{seq}/".encode() + rng.randbytes(rng.randint(10, 200))
        h = digest(payload)
        d = lh.add_entry(payload)
        d.addCallbacks(lambda entry, h=h, seq=seq: rec("add", phase="ok", ledger=lh.ledger_id, seq=seq, entry=entry,
                                                       h=h),
                       lambda f, seq=seq: failed.append(seq) or rec("add", phase="fail", ledger=lh.ledger_id,
                                                                    seq=seq, err=type(f.value).__name__))
        outstanding = [x for x in outstanding + [d] if not x.called]
        if len(outstanding) >= DEPTH:
            await bounded(reactor, outstanding[0], OP_TIMEOUT_S)
    for d in outstanding:
        await bounded(reactor, d, OP_TIMEOUT_S)
    return not failed


async def writer(reactor, bk, rec: History, rng: random.Random, until: float) -> None:
    n = 0
    while time.monotonic() < until:
        ewa = MIXES[n % len(MIXES)]
        n += 1
        status, lh = await bounded(reactor, bk.create_ledger(*ewa, digest_type="CRC32C", password=PASSWORD),
                                   OP_TIMEOUT_S)
        if status != "ok":
            rec("create", phase="fail", ewa=ewa, err=lh or status)
            await sleep(reactor, 0.5)
            continue
        rec("create", phase="ok", ledger=lh.ledger_id, ewa=ewa, ensembles=_ensembles(lh))
        done = await _write_one(reactor, lh, rec, rng)
        rec("ensembles", ledger=lh.ledger_id, ewa=ewa, ensembles=_ensembles(lh))
        if done:
            status, value = await bounded(reactor, lh.close(), OP_TIMEOUT_S)
            rec("close", phase=status, ledger=lh.ledger_id, ensembles=_ensembles(lh))
        await sleep(reactor, PAUSE_S)            # a few ledgers a second: AutoRecovery's work stays small


def acknowledged(paths: list[str]) -> dict[int, dict]:
    """{ledger: {"ewa", "entries": {entry: hash}}} from writer histories."""
    out: dict[int, dict] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                event = json.loads(line)
                if event["op"] == "create" and event["phase"] == "ok":
                    out[event["ledger"]] = {"ewa": event["ewa"], "entries": {}, "writer": event["p"]}
                elif event["op"] == "add" and event["phase"] == "ok":
                    out[event["ledger"]]["entries"][event["entry"]] = event["h"]
    return out


async def _settled(reactor, bk, uri: str, until: float) -> dict:
    """Wait until every mark left names a ledger larger than the bookies left (it cannot be re-replicated)."""
    started = time.monotonic()
    state: dict = {}
    while time.monotonic() < until:
        state = await threads.deferToThread(_replication_state, uri)
        alive = len(state["available"])
        stuck = []
        for lid in state["marks"]:
            status, md = await bounded(reactor, bk.get_ledger_metadata(int(lid)), OP_TIMEOUT_S)
            if status != "ok" or md.ensemble_size <= alive:
                break
            stuck.append(lid)
        else:
            state["unrepairable"] = stuck
            break
        await sleep(reactor, 1.0)
    state["settle_s"] = round(time.monotonic() - started, 1)
    return state


async def _read_all(reactor, bk, ledger: int, expected: dict) -> dict:
    status, lh = await bounded(reactor, bk.open_ledger(ledger, PASSWORD, recovery=False), OP_TIMEOUT_S)
    if status != "ok":
        return {"ensembles": [], "entries": {str(e): f"error:open:{lh or status}" for e in expected}}
    got = {}
    for entry in sorted(expected):
        status, value = await bounded(reactor, lh.read_unconfirmed_entries(entry, entry), OP_TIMEOUT_S)
        got[str(entry)] = digest(value[0].data) if status == "ok" else f"error:{value or status}"
    return {"ensembles": _ensembles(lh), "entries": got}


async def check(reactor, bk, out_path: str, until: float, uri: str, histories: list[str]) -> None:
    result = {"replication": await _settled(reactor, bk, uri, until), "ledgers": {}}
    for ledger, info in sorted(acknowledged(histories).items()):
        result["ledgers"][str(ledger)] = await _read_all(reactor, bk, ledger, info["entries"])
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)


async def main(reactor, role: str, uri: str, out: str, seconds: str, script: str, *histories: str) -> None:
    until = time.monotonic() + float(seconds)
    conf = {**CLIENT_CONF, **POLICIES[role], "networkTopologyScriptFileName": script}
    bk = await connect_until(reactor, uri, until, **conf)
    try:
        if role == "check":
            await check(reactor, bk, out, until, uri, list(histories))
        else:
            rec = History(out, role)
            await writer(reactor, bk, rec, random.Random(role), until)
            rec("done")
    finally:
        await bounded(reactor, bk.close(), 10.0)


if __name__ == "__main__":
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, *sys.argv[1:])))
