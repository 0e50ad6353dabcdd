"""The history checker: what a fault campaign's clients saw, against what the healed cluster holds.

Input: the merged history (one dict per event, in time order; see client_proc.py for the events) and
the final state written by the ``final`` client (every ledger recovered, read, and every entry read
from every bookie of its write set). Checks, per ledger:

  * durability   every acknowledged entry is in the recovered ledger, byte-identical (same SHA-256
                 prefix), and at least AQ bookies of its write set answer it; no bookie answers other bytes;
  * persistence  no acknowledged entry lies beyond the closed ledger's last entry;
  * fencing      no add the writer started after a recovery of its ledger had completed was acknowledged;
  * agreement    every recovery, the writer's own close and the final check see the same last entry,
                 and readers of the closed ledger see the same contents;
  * no vanishing every entry any reader saw is still there, with the same bytes;
  * underreplicated  (AutoRecovery) after healing and the final's bounded settle wait, no under-replication
                 mark is left for a ledger that could be healed (it exists, every bookie of its ensembles
                 is registered, and so is a bookie outside them to copy onto), and every entry of a ledger
                 that was CLOSED before the final check is present on every bookie of its write set (other
                 bytes are durability violations),
                 but for what BookKeeper itself leaves short (one missed run of writes, see `_replica_gaps`:
                 counted, not a violation); a bookie AutoRecovery put into a segment must hold all of its
                 share; each ledger's missing entries are named per bookie and segment.
Stream records are checked by stream_checker.py (its kinds start with ``stream_``).

A violation names its witnesses (history indexes); `slice_for` gives the shortest stretch of history
that shows it: the events of that ledger (and the nemesis's) from the first witness to the last.
Pure functions of data: no I/O, no cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Violation", "Report", "check", "slice_for", "load_history"]

MAX_SLICE = 40


@dataclass
class Violation:
    kind: str
    ledger: int
    message: str
    witnesses: list[int] = field(default_factory=list)


@dataclass
class Report:
    violations: list[Violation]
    acked_checked: int
    ledgers: int
    operations: int
    extra: dict = field(default_factory=dict)       # stream and replication counts

    def summary(self) -> dict:
        kinds: dict[str, int] = {}
        for v in self.violations:
            kinds[v.kind] = kinds.get(v.kind, 0) + 1
        return {"operations": self.operations, "ledgers": self.ledgers, "acked_checked": self.acked_checked,
                "violations": len(self.violations), "violation_kinds": kinds, **self.extra}


def load_history(paths) -> list[dict]:
    """Every event of every history file, in time order."""
    events = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:      # a line cut by SIGKILL: never an acknowledged op
                        continue
    events.sort(key=lambda e: e["t"])
    return events


def _is_operation(e: dict) -> bool:
    return e.get("phase") in ("ok", "fail") or e["op"] in ("read", "sread") or \
        (e["op"] == "fault" and e["phase"] == "start")


def check(history: list[dict], final: dict) -> Report:
    violations: list[Violation] = []
    ledgers = {int(k): v for k, v in final.get("ledgers", {}).items()}
    errors = {int(k): v for k, v in final.get("errors", {}).items()}
    invokes: dict[tuple[int, int], int] = {}
    acked: dict[tuple[int, int], int] = {}           # (ledger, entry) -> index of the ack
    first_recovery: dict[int, int] = {}              # ledger -> index of the first completed recovery
    lacs: dict[int, list[int]] = {}                  # ledger -> indexes of events that saw it closed
    reads: list[int] = []
    writer_of: dict[int, str] = {}
    for i, e in enumerate(history):
        op, phase, ledger = e["op"], e.get("phase"), e.get("ledger")
        if op == "create" and phase == "ok":
            writer_of[ledger] = e["p"]
        elif op == "add" and phase == "invoke":
            invokes[(ledger, e["seq"])] = i
        elif op == "add" and phase == "ok":
            key = (ledger, e["entry"])
            if key in acked and history[acked[key]]["h"] != e["h"]:
                violations.append(Violation("persistence", ledger, f"entry {e['entry']} acknowledged twice with "
                                            "different contents", [acked[key], i]))
            acked.setdefault(key, i)
            start = first_recovery.get(ledger)
            if start is not None and invokes.get((ledger, e["seq"]), -1) > start:
                violations.append(Violation(
                    "fencing", ledger, f"add of entry {e['entry']} started after the ledger was recovered "
                    f"(by {history[start]['p']}) and was acknowledged", [start, invokes[(ledger, e["seq"])], i]))
        elif op == "recover" and phase == "ok":
            first_recovery.setdefault(ledger, i)
            lacs.setdefault(ledger, []).append(i)
        elif op == "close" and phase == "ok":
            lacs.setdefault(ledger, []).append(i)
        elif op == "read":
            reads.append(i)

    acked_checked = 0
    short: set[tuple[int, int]] = set()             # entries reported on too few bookies (not again below)
    for (ledger, entry), i in sorted(acked.items()):
        h = history[i]["h"]
        md = ledgers.get(ledger)
        if md is None:
            why = errors.get(ledger, "the ledger is gone from the metadata")
            violations.append(Violation("durability", ledger, f"entry {entry} was acknowledged but the ledger could "
                                        f"not be recovered and read at the end: {why}", [i]))
            continue
        acked_checked += 1
        if entry > md["lac"]:
            closers = [j for j in lacs.get(ledger, []) if history[j]["lac"] < entry]
            violations.append(Violation("persistence", ledger, f"entry {entry} was acknowledged but the closed "
                                        f"ledger ends at entry {md['lac']}", sorted(closers[:1] + [i])))
            continue
        if md["entries"][entry] != h:
            violations.append(Violation("durability", ledger, f"entry {entry}: recovered contents "
                                        f"{md['entries'][entry]} differ from the acknowledged {h}", [i]))
        answers = md["replicas"].get(str(entry), md["replicas"].get(entry, {}))
        holding = [b for b, a in answers.items() if a == h]
        other = {b: a for b, a in answers.items() if a != h and a != "missing" and not a.startswith("error:")}
        aq = md["ewa"][2]
        if len(holding) < aq:
            short.add((ledger, entry))
            violations.append(Violation("durability", ledger, f"entry {entry} is on {len(holding)} bookie(s) of "
                                        f"its write set, fewer than AQ={aq}: {answers}", [i]))
        if other:
            violations.append(Violation("durability", ledger, f"entry {entry}: bookies answer other bytes than "
                                        f"the acknowledged {h}: {other}", [i]))

    for ledger, seen in lacs.items():
        md = ledgers.get(ledger)
        observed = {history[j]["lac"] for j in seen}
        if md is not None:
            observed.add(md["lac"])
        if len(observed) > 1:
            violations.append(Violation("agreement", ledger, f"readers of the closed ledger disagree on its last "
                                        f"entry: {sorted(observed)} (final {md and md['lac']})", list(seen)))

    for j in reads:
        e = history[j]
        md = ledgers.get(e["ledger"])
        if md is None:
            continue
        for offset, h in enumerate(e["hashes"]):
            entry = e["first"] + offset
            have = md["entries"][entry] if entry <= md["lac"] else None
            if have != h:
                kind = "agreement" if e.get("closed") else "vanished"
                violations.append(Violation(kind, e["ledger"], f"{e['p']} read entry {entry} as {h}; the recovered "
                                            f"ledger has {have or 'nothing'} (last entry {md['lac']})", [j]))
                break
    extra = _check_replication(ledgers, final, violations, short)
    from .stream_checker import check_stream

    stream_violations, stream_stats = check_stream(history, final)
    violations.extend(stream_violations)
    extra.update(stream_stats)
    operations = sum(1 for e in history if _is_operation(e))
    return Report(violations, acked_checked, len(ledgers), operations, extra)


def _check_replication(ledgers: dict, final: dict, violations: list[Violation], short: set) -> dict:
    """The AutoRecovery checks (when the final recorded the replication state): marks left for healable
    ledgers, and entries of ledgers closed before the final check missing from a bookie of their write set
    (but not those `short` of AQ: durability violations already)."""
    state = final.get("replication")
    if state is None:
        return {}
    available = set(state.get("available", []))
    marks = {int(k): v for k, v in state.get("marks", {}).items()}
    unhealable = 0
    for ledger, replicas in sorted(marks.items()):
        md = ledgers.get(ledger)
        if md is None:
            continue                                  # gone or unreadable: the durability check names it
        bookies = {b for _start, ens in md["ensembles"] for b in ens}
        unhealable += bookies >= available
        # AutoRecovery heals by copying onto a bookie outside the segment's ensemble (BookKeeper never rewrites
        # a replica in place): when the ledger's ensembles already hold every registered bookie (E=5 on 5
        # bookies), no worker can heal it and the mark stays, in Java as here.
        if bookies <= available and available - bookies:
            violations.append(Violation("underreplicated", ledger, f"still marked under-replicated (missing "
                                        f"{replicas}) {state.get('settle_s')} s after healing, though every "
                                        f"bookie of its ensembles is registered and a spare one is too"))
    installed = {(int(lid), int(start), b) for lid, start, b in final.get("rereplicated", [])}
    at_write = 0
    for ledger, md in sorted(ledgers.items()):
        if not md.get("closed_before"):
            continue
        bad: dict[str, list[int]] = {}
        for bookie, entries, segment, why in _replica_gaps(md, {entry for lid, entry in short if lid == ledger}):
            if why is None and (ledger, segment, bookie) not in installed:
                at_write += len(entries)              # BookKeeper's own: acknowledged on AQ, then the bookie failed
            else:
                bad.setdefault(f"{bookie} (segment at {segment}: {why or 'put there by AutoRecovery'})",
                               []).extend(entries)
        if bad:
            shown = "; ".join(f"{b}: entries {_ranges(ids)}" for b, ids in sorted(bad.items()))
            violations.append(Violation("underreplicated", ledger, f"closed ledger (E/W/A {md['ewa']}) is missing "
                                        f"entries on bookies of their write set: {shown}"))
    return {"underreplicated_left": len(marks), "underreplicated_unhealable": unhealable,
            "replica_entries_missing_at_write": at_write,
            "rereplicated_segments": len(installed), "replication_settle_s": state.get("settle_s")}


def _replica_gaps(md: dict, skip: set[int]) -> list[tuple[str, list[int], int, str | None]]:
    """(bookie, entries, segment start, why) for every bookie of a closed ledger's segment that does not answer
    (or answers with an error) some entries of its share of the segment, but for the entries in `skip`.

    `why` is None for what BookKeeper leaves as it is: a bookie that missed one run of consecutive writes of
    its share (it was down or cut off while AQ others acknowledged them; the writer then replaced it or
    gave up, and a recovery re-adds only the entries past the LAC, possibly to it again). Scattered holes
    say why (the caller also reports any gap of a bookie AutoRecovery put into the segment)."""
    out = []
    ensembles = [(int(start), list(bookies)) for start, bookies in md["ensembles"]]
    e, w = md["ewa"][0], md["ewa"][1]
    for n, (start, bookies) in enumerate(ensembles):
        end = (ensembles[n + 1][0] - 1) if n + 1 < len(ensembles) else md["lac"]
        for index, bookie in enumerate(bookies):
            share = [x for x in range(start, end + 1) if (index - x) % e < w and x not in skip]
            held = []
            for x in share:
                answer = md["replicas"].get(str(x), md["replicas"].get(x, {})).get(bookie)
                held.append(not (answer is None or answer == "missing" or answer.startswith("error:")))
            missing = [x for x, ok in zip(share, held, strict=True) if not ok]
            if not missing:
                continue
            runs = sum(1 for i, ok in enumerate(held) if not ok and (i == 0 or held[i - 1]))
            out.append((bookie, missing, start, None if runs == 1 else f"{runs} separate runs missing"))
    return out


def _ranges(ids: list[int]) -> str:
    out: list[list[int]] = []
    for x in ids:
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def slice_for(history: list[dict], v: Violation) -> list[dict]:
    """The events of v's ledger and the nemesis from its first witness to its last (at most MAX_SLICE,
    witnesses and faults kept first)."""
    if not v.witnesses:
        return []
    lo, hi = min(v.witnesses), max(v.witnesses)
    stream = v.kind.startswith("stream_")
    picked = [i for i in range(lo, hi + 1)
              if i in v.witnesses or history[i].get("p") == "nemesis"
              or (history[i].get("ledger") == v.ledger if not stream else history[i]["op"] != "add"
                  and history[i]["op"].startswith("s"))]
    if len(picked) > MAX_SLICE:
        keep = set(v.witnesses) | {i for i in picked if history[i].get("p") == "nemesis"}
        rest = [i for i in picked if i not in keep][:max(0, MAX_SLICE - len(keep))]
        picked = sorted(keep | set(rest))
    return [dict(history[i], index=i) for i in picked]


def format_violation(history: list[dict], v: Violation) -> str:
    lines = [f"VIOLATION {v.kind} ledger {v.ledger}: {v.message}"]
    t0 = history[min(v.witnesses)]["t"] if v.witnesses else 0
    for e in slice_for(history, v):
        shown = {k: val for k, val in e.items() if k not in ("t", "index", "hashes", "recs")}
        if "hashes" in e:
            shown["entries"] = f"{e['first']}..{e['first'] + len(e['hashes']) - 1}"
        if e.get("recs"):
            first, last = e["recs"][0], e["recs"][-1]
            shown["records"] = f"seq {first[3]}..{last[3]} at {':'.join(map(str, first[:3]))}.." \
                               f"{':'.join(map(str, last[:3]))}"
        lines.append(f"  #{e['index']} +{(e['t'] - t0) / 1e6:.1f}ms {json.dumps(shown, separators=(',', ':'))}")
    return "\n".join(lines)
