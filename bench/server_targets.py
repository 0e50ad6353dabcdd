"""Issue 4's bookie benchmark targets, each run N times against a fresh `bkfast bookie`; medians.

    .venv/bin/python bench/server_targets.py [--runs 3] [--cases 1k,16k,rate,lat,latq] [--dir /tmp/x]
        [--conf KEY=VALUE ...] [--journals N | --journal-dir DIR --journal-dir DIR ...] [--ledgers N]

Cases: 1k (200,000 x 1 KiB, 10,000 outstanding), 16k (same shape, 16 KiB), 16k-nosync (diagnostic:
journalSyncData=false), rate (open loop 50,000/s 1 KiB), lat (one at a time), latq (one at a time,
journalFlushWhenQueueEmpty=true). Also reported per run: the bookie's CPU (all threads, user+sys) per
add, the load generator's CPU, and the load average before the run. Each run starts a
fresh bookie (DbLedgerStorage, journal sync on, the flags of tests/server_support.py) in a new temp dir
on the same file system as --dir, and removes it afterwards. Prints one JSON line per run and a summary
with the load average.

Journal directories (journalDirectories): one inside the run's dir by default; `--journals N` puts N of
them there (the same disk); `--journal-dir DIR` (repeatable) puts one in a fresh temp dir under each DIR
(a dedicated journal disk each), removed after the run. A ledger's adds all go to one journal (ledger id
mod the number of journals), so compare journal counts with `--ledgers` of at least that many (the
adds are spread round robin over the ledgers; default 1 ledger).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bkfast.cli.local_cluster import LocalBookie
from bkfast.conf import DEFAULT_DB_STORAGE_CACHE_MB
from bkfast.stats.thread_cpu import stat_cpu_s

# The load generator runs from this interpreter (and so the bkfast it imports), as the bookie does.
BKFAST = [sys.executable, "-m", "bkfast.cli.main"]
# The bookie's own cache defaults (LocalBookie's are smaller, for tests and sandboxes).
# diskUsageThreshold: the benchmark host's disk is shared and often > 95 % used (statvfs f_bavail); a
# run writes ~6 GB and is deleted afterwards, so it must not turn the bookie read-only mid-run.
DEFAULT_BOOKIE_CONF = {"dbStorage_writeCacheMaxSizeMb": str(DEFAULT_DB_STORAGE_CACHE_MB),
                       "dbStorage_readAheadCacheMaxSizeMb": str(DEFAULT_DB_STORAGE_CACHE_MB),
                       "diskUsageThreshold": "0.995", "diskUsageWarnThreshold": "0.99"}

CASES = {
    "1k": (["--throughput-count", "200000", "--outstanding", "10000", "--size", "1024", "--latency-count", "0"],
           [], "throughput"),
    "16k": (["--throughput-count", "200000", "--outstanding", "10000", "--size", "16384",
             "--latency-count", "0"], [], "throughput"),
    "rate": (["--throughput-count", "0", "--rate", "50000", "--rate-count", "200000", "--outstanding", "10000",
              "--size", "1024", "--latency-count", "0"], [], "rate"),
    "16k-nosync": (["--throughput-count", "200000", "--outstanding", "10000", "--size", "16384",
                    "--latency-count", "0"], ["-D", "journalSyncData=false"], "throughput"),
    "lat": (["--throughput-count", "0", "--latency-count", "5000", "--warmup-count", "200", "--size", "1024"],
            [], "latency"),
    "latq": (["--throughput-count", "0", "--latency-count", "5000", "--warmup-count", "200", "--size", "1024"],
             ["-D", "journalFlushWhenQueueEmpty=true"], "latency"),
}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    return stat_cpu_s(f"/proc/{pid}/stat")


def journal_dirs_for(data_dir: Path, journals: int, journal_bases: list[str]) -> list[Path]:
    if journal_bases:
        return [Path(tempfile.mkdtemp(prefix="bkfast-targets-journal-", dir=b)) for b in journal_bases]
    if journals == 1:
        return [data_dir / "journal"]
    return [data_dir / f"journal{i}" for i in range(journals)]


def run_case(name: str, base: Path, conf_overrides: dict | None = None, journals: int = 1,
             journal_bases: list[str] | None = None, ledgers: int = 1) -> dict:
    bench_args, bookie_args, phase = CASES[name]
    data_dir = Path(tempfile.mkdtemp(prefix=f"bkfast-targets-{name}-", dir=base))
    jdirs = journal_dirs_for(data_dir, journals, journal_bases or [])
    conf = {**DEFAULT_BOOKIE_CONF, "journalDirectories": ",".join(map(str, jdirs)), **(conf_overrides or {})}
    bookie = LocalBookie(data_dir, 0, extra_conf=conf, extra_args=list(bookie_args)).start()
    proc, port = bookie.proc, bookie.port
    try:
        cpu0 = cpu_seconds(proc.pid)
        t0 = os.times()
        out = subprocess.run([*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--json",
                              "--ledgers", str(ledgers), *bench_args],
                             capture_output=True, text=True, timeout=900)
        t1 = os.times()
        loadgen_cpu = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
        if out.returncode != 0:
            raise RuntimeError(f"bench failed ({out.returncode}): {out.stderr[-2000:]}")
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        doc["_case"] = name
        cpu = cpu_seconds(proc.pid) - cpu0
    finally:
        bookie.stop(60)
        shutil.rmtree(data_dir, ignore_errors=True)
        for d in jdirs:
            shutil.rmtree(d, ignore_errors=True)
    r = doc[phase]
    return {"case": name, "journal_dirs": len(jdirs), "ledgers": ledgers, "adds_per_s": r["adds_per_s"],
            "mb_per_s": r.get("mb_per_s"), "mean_ms": r["mean_ms"],
            "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "p999_ms": r["p999_ms"], "errors": doc["errors"],
            "loadgen_cpu_s": round(loadgen_cpu, 2),
            "bookie_cpu_us_per_add": round(cpu * 1e6 / max(1, r.get("count") or doc_count(doc, phase)), 2)}


def doc_count(doc: dict, phase: str) -> int:
    """Adds of the phase (the bench's own count when reported, else the requested count)."""
    args = CASES[doc["_case"]][0]
    flag = {"throughput": "--throughput-count", "rate": "--rate-count", "latency": "--latency-count"}[phase]
    return int(args[args.index(flag) + 1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default="1k,16k,rate,lat,latq", help=f"comma-separated, of {sorted(CASES)}")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="bookie configuration override (repeatable), e.g. journalDirectWrites=false")
    ap.add_argument("--journals", type=int, default=1, help="journal directories inside each run's dir")
    ap.add_argument("--journal-dir", action="append", default=[], metavar="DIR",
                    help="a journal directory under DIR (repeatable: one journal per DIR, e.g. per disk)")
    ap.add_argument("--ledgers", type=int, default=1, help="ledgers the adds are spread over (bench bookie)")
    args = ap.parse_args()
    if args.journals < 1:
        ap.error("--journals must be at least 1")
    overrides = dict(kv.split("=", 1) for kv in args.conf)
    base = Path(args.dir)
    summary = {}
    for name in args.cases.split(","):
        runs = []
        for _ in range(args.runs):
            load = open("/proc/loadavg").read().split()[0]
            r = run_case(name, base, overrides, args.journals, args.journal_dir, args.ledgers)
            r["load_before"] = float(load)
            print(json.dumps(r), flush=True)
            runs.append(r)
        summary[name] = {k: statistics.median(r[k] for r in runs)
                         for k in ("adds_per_s", "mean_ms", "p50_ms", "p99_ms", "p999_ms", "bookie_cpu_us_per_add")}
        if runs[0]["mb_per_s"] is not None:
            summary[name]["mb_per_s"] = statistics.median(r["mb_per_s"] for r in runs)
    print("MEDIANS", json.dumps(summary), "loadavg", open("/proc/loadavg").read().strip(), file=sys.stderr)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
