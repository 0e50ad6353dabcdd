"""One fault campaign: a cluster in namespaces, the workload, the nemesis, healing, the final read, the check.

By default the bookies run AutoRecovery and the workload includes the named-stream writer and reader.

`run_campaign(seed, seconds, work_dir)` returns the summary dict (operations, faults per type,
acked_checked, violations, ...) and the Report; the history files stay in `work_dir` for a failing run.
Everything the campaign starts is torn down before it returns or raises.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from pathlib import Path

from .checker import Report, check, format_violation, load_history
from .cluster import FaultCluster
from .nemesis import FAULTS, STREAM_HOSTS, Nemesis

__all__ = ["run_campaign", "FAULTS"]

WRITERS = ("w1", "w2")
FINAL_TIMEOUT_S = 120.0
SETTLE_S = 60.0               # at most this long for AutoRecovery to clear every mark after healing


def run_campaign(seed: int, seconds: float, work_dir: Path, faults: list[str] | None = None,
                 bookies: int = 5, prefix: str | None = None, log=None, overlap: float = 0.0,
                 autorecovery: bool = True, streams: bool = True) -> tuple[dict, Report, list[dict]]:
    """Workload for `seconds` under the nemesis (the given faults in order, or random ones, two at once
    with probability `overlap`), then check. `autorecovery`: the bookies run AutoRecovery and the final
    check waits (bounded) for it to settle; `streams`: a stream writer and a tailing stream reader join.

    Returns (summary, report, history)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    work_dir = Path(work_dir)
    rng = random.Random(seed)
    log(f"fault campaign: seed {seed}, {seconds:.0f} s, dir {work_dir}, autorecovery {autorecovery}, "
        f"streams {streams}")
    hosts = (*WRITERS, "r1", "t1", *(STREAM_HOSTS if streams else ()))
    hist = {h: work_dir / f"{h}.jsonl" for h in hosts}
    nemesis_file, final_file, hint = work_dir / "nemesis.jsonl", work_dir / "final.json", work_dir / "recover.hint"
    cluster = FaultCluster(work_dir, bookies=bookies, prefix=prefix or f"bkf{os.getpid()}", autorecovery=autorecovery)
    nemesis = None
    started = time.monotonic()
    try:
        cluster.start()
        cluster.add_client_hosts(list(hist))
        procs = [cluster.run_client(w, "writer", hist[w], seconds, seed=seed) for w in WRITERS]
        procs.append(cluster.run_client("r1", "recoverer", hist["r1"], seconds, seed=seed, hint=hint))
        procs.append(cluster.run_client("t1", "tailer", hist["t1"], seconds, seed=seed))
        if streams:
            writer_host, reader_host = STREAM_HOSTS
            procs.append(cluster.run_client(writer_host, "swriter", hist[writer_host], seconds, seed=seed))
            procs.append(cluster.run_client(reader_host, "sreader", hist[reader_host], seconds, seed=seed))
        nemesis = Nemesis(cluster, rng, nemesis_file, {w: hist[w] for w in WRITERS}, hint)
        time.sleep(min(2.0, seconds / 4))              # let the writers get going
        nemesis.run(started + seconds, faults, overlap)
        nemesis.heal()
        for proc in procs:                              # each stops by itself once `seconds` are over
            try:
                proc.wait(max(1.0, started + seconds + 60 - time.monotonic()))
            except Exception:
                cluster._kill(proc)
                log(f"client pid {proc.pid} did not stop in time; killed")
        nemesis.heal()                                  # a process restarted late is healed too
        cluster.run_client("chk", "final", final_file, FINAL_TIMEOUT_S + SETTLE_S, wait=True, seed=seed,
                           hint=str(SETTLE_S) if autorecovery else None)
        counts = dict(nemesis.counts)
    finally:
        if nemesis is not None:
            nemesis.close()
        cluster.close()
    import json

    history = load_history([*hist.values(), nemesis_file])
    final = json.loads(final_file.read_text())
    final["rereplicated"] = rereplicated_segments(work_dir, cluster.bookies)
    final_file.write_text(json.dumps(final))
    report = check(history, final)
    summary = {"seed": seed, "autorecovery": autorecovery, "streams": streams, **report.summary(), "faults": counts,
               "unrecovered_ledgers": len(final.get("errors", {})),
               "seconds": round(time.monotonic() - started, 1)}
    for v in report.violations[:20]:
        log(format_violation(history, v))
    log(f"fault campaign seed {seed}: {json.dumps(summary)}")
    return summary, report, history


_COPIED = re.compile(r"bkfast\.replication\.copier: ledger (\d+): segment at entry (\d+) now (\S+) \(was (\S+)\)")


def rereplicated_segments(work_dir: Path, bookies) -> list[list]:
    """[ledger, segment start, bookie] for every bookie AutoRecovery put into a segment, from the bookies' logs."""
    out = []
    for name in bookies:
        log_path = Path(work_dir) / name / "bookie.log"
        if not log_path.exists():
            continue
        for m in _COPIED.finditer(log_path.read_text(errors="replace")):
            for bookie in set(m.group(3).split(",")) - set(m.group(4).split(",")):
                out.append([int(m.group(1)), int(m.group(2)), bookie])
    return out


def all_fault_orders(seed: int) -> list[str]:
    """Every fault type once, in an order drawn from the seed."""
    order = list(FAULTS)
    random.Random(seed).shuffle(order)
    return order
