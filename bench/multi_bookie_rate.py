"""Open-loop tail latency of N bookies sharing one disk, each driven by its own `bkfast bench bookie`.

    .venv/bin/python bench/multi_bookie_rate.py [--bookies 3] [--rate 16700] [--seconds 10] [--size 1024]
        [--dir /work/bench-tmp] [-D key=value ...] [--no-debug-log]

Issue 5's p99 target goes through the client with 3 bookies at 25,000 adds/s and WQ=2, i.e. ~16,700
adds/s per bookie; this measures the bookies alone at that load. Each bookie is a fresh LocalBookie
(DbLedgerStorage, dbStorage_writeCacheMaxSizeMb=64, journal sync on, plus the -D overrides) in its own
temp dir under --dir (same file system as the repo by default). One bench-bookie per bookie runs the
open-loop rate phase at the same time (--rate per bookie, latency from the scheduled send time).

Prints per bookie and merged p50/p99/p99.9/max (merged from every add's sample, not averaged), the
bookies' CPU, the disk's write MB and average queue depth over the run (/proc/diskstats), and, from the
bookies' DEBUG log (`--log-level DEBUG`), their ledger-storage flushes (write / entry-log fdatasync /
index commit times), journal batches and cyclic-GC runs slower than 5 ms, plus how many of the merged tail (> p99) adds
were sent while some bookie's entry-log fdatasync was running. Every process is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bkfast.cli.local_cluster import LocalBookie, start_bookies  # noqa: E402
from bkfast.loadgen import percentile  # noqa: E402

BKFAST = str(REPO / ".venv" / "bin" / "bkfast")
DEFAULT_DIR = Path("/work/bench-tmp")

FLUSH_RE = re.compile(r"flush of .*?: (\d+) entries, (\d+) bytes; write ([\d.]+) ms, entry-log sync ([\d.]+) ms, "
                      r"index commit ([\d.]+) ms, free ([\d.]+) ms; started at monotonic ([\d.]+)")
SLOW_GC_RE = re.compile(r"slow gc: generation (\d+), ([\d.]+) ms, collected \d+; done at monotonic ([\d.]+)")
SLOW_JOURNAL_RE = re.compile(r"slow journal batch: (\d+) records, (\d+) bytes, write\+fdatasync ([\d.]+) ms, "
                             r"done at monotonic ([\d.]+)")


def summary_ms(latencies) -> dict:
    lat = sorted(latencies)
    return {k: (round(percentile(lat, p) * 1e3, 2) if lat else None)
            for k, p in (("p50", 50), ("p99", 99), ("p999", 99.9), ("max", 100))} | {"count": len(lat)}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_of(path: Path) -> str | None:
    """The /proc/diskstats name of the block device holding `path` (whole disk or partition)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            if int(parts[0]) == major and int(parts[1]) == minor:
                return parts[2]
    return None


def diskstats(name: str | None) -> tuple[int, int] | None:
    """(sectors written, weighted ms doing I/O) of a device."""
    if name is None:
        return None
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            if parts[2] == name:
                return int(parts[9]), int(parts[13])
    return None


def parse_log(path: Path, since: float) -> tuple[list, list]:
    flushes, slow = [], []
    for line in path.read_text(errors="replace").splitlines():
        m = SLOW_GC_RE.search(line)
        if m and float(m.group(3)) >= since:
            slow.append({"gc_generation": int(m.group(1)), "ms": float(m.group(2)), "end": float(m.group(3))})
            continue
        m = FLUSH_RE.search(line)
        if m and float(m.group(7)) >= since:
            n, b, w, s, c, fr, t = m.groups()
            flushes.append({"entries": int(n), "bytes": int(b), "write_ms": float(w), "sync_ms": float(s),
                            "commit_ms": float(c), "free_ms": float(fr), "start": float(t)})
            continue
        m = SLOW_JOURNAL_RE.search(line)
        if m and float(m.group(4)) >= since:
            slow.append({"records": int(m.group(1)), "bytes": int(m.group(2)), "ms": float(m.group(3)),
                         "end": float(m.group(4))})
    return flushes, slow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bookies", type=int, default=3)
    ap.add_argument("--rate", type=float, default=16700.0, help="adds/s per bookie")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--outstanding", type=int, default=10000)
    ap.add_argument("--dir", default=None, help=f"parent of the bookies' temp dirs (default {DEFAULT_DIR})")
    ap.add_argument("-D", dest="conf", action="append", default=[], metavar="KEY=VALUE", help="bookie conf")
    ap.add_argument("--no-debug-log", action="store_true", help="run the bookies at INFO (no flush timings)")
    ap.add_argument("--json", action="store_true", help="also print one JSON summary line")
    ap.add_argument("--keep", action="store_true", help="keep the bookies' dirs, logs and samples")
    args = ap.parse_args()

    base = Path(args.dir) if args.dir else DEFAULT_DIR
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bkfast-multi-", dir=base))
    # The benchmark host's disk is shared and often > 95 % used (statvfs f_bavail): without this the
    # bookies may turn read-only mid-run. A -D diskUsageThreshold=... still wins.
    extra = {"diskUsageThreshold": "0.995", "diskUsageWarnThreshold": "0.99"}
    extra.update(kv.split("=", 1) for kv in args.conf)
    log_args = [] if args.no_debug_log else ["--log-level", "DEBUG"]
    bookies = [LocalBookie(root / f"b{i}", 0, extra_conf=dict(extra), extra_args=list(log_args))
               for i in range(args.bookies)]
    count = max(1, int(args.rate * args.seconds))
    benches: list[subprocess.Popen] = []
    load_before = open("/proc/loadavg").read().split()[0]
    disk = disk_of(root)
    try:
        start_bookies(bookies)
        cpu0 = [cpu_seconds(b.pid) for b in bookies]
        disk0 = diskstats(disk)
        t_start = time.monotonic()
        for i, b in enumerate(bookies):
            benches.append(subprocess.Popen(
                [BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{b.port}", "--json",
                 "--rate", str(args.rate), "--rate-count", str(count), "--throughput-count", "0",
                 "--latency-count", "0", "--outstanding", str(args.outstanding), "--size", str(args.size),
                 "--samples-out", str(root / f"samples{i}.bin")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        docs = []
        for p in benches:
            out, err = p.communicate(timeout=args.seconds * 10 + 120)
            if p.returncode not in (0, 1):
                raise RuntimeError(f"bench failed ({p.returncode}): {err[-2000:]}")
            docs.append(json.loads(out.strip().splitlines()[-1]))
        elapsed = time.monotonic() - t_start
        disk1 = diskstats(disk)
        cpu = [cpu_seconds(b.pid) - c for b, c in zip(bookies, cpu0, strict=True)]
    finally:
        for p in benches:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for b in bookies:
            b.stop(60)
    load_after = open("/proc/loadavg").read().strip()

    merged: list[float] = []
    tails_starts: list[tuple[float, float]] = []
    per_bookie = []
    for i, doc in enumerate(docs):
        samples = array("d")
        with open(root / f"samples{i}.bin", "rb") as f:
            samples.frombytes(f.read())
        starts, lats = samples[0::2], samples[1::2]
        merged.extend(lats)
        tails_starts.extend(zip(starts, lats, strict=True))
        r = doc["rate"]
        s = summary_ms(lats)
        per_bookie.append({"bookie": i, "adds_per_s": round(r["adds_per_s"]), "errors": doc["errors"], **s,
                           "cpu_us_per_add": round(cpu[i] * 1e6 / max(1, r["ok"] if "ok" in r else count), 1)})
    total = summary_ms(merged)

    print(f"{args.bookies} bookies x {args.rate:,.0f} adds/s x {args.size} B for {args.seconds:g} s; conf {extra}; "
          f"loadavg before {load_before}, after {load_after}")
    for r in per_bookie:
        print(f"  bookie {r['bookie']}: {r['adds_per_s']:>7,} adds/s  p50 {r['p50']} p99 {r['p99']} "
              f"p99.9 {r['p999']} max {r['max']} ms  errors {r['errors']}  cpu {r['cpu_us_per_add']} us/add")
    print(f"  merged:   p50 {total['p50']} p99 {total['p99']} p99.9 {total['p999']} max {total['max']} ms "
          f"({total['count']:,} adds)")
    if disk0 and disk1:
        mb = (disk1[0] - disk0[0]) * 512 / 1e6
        print(f"  disk {disk}: {mb:,.0f} MB written ({mb / elapsed:,.0f} MB/s), "
              f"avg queue {(disk1[1] - disk0[1]) / 1e3 / elapsed:.2f}")

    out = {"per_bookie": per_bookie, "merged": total, "load_before": float(load_before)}
    if not args.no_debug_log:
        flushes_all, slow_all, sync_windows = [], [], []
        for i, b in enumerate(bookies):
            flushes, slow = parse_log(b.log_path, t_start)
            flushes_all += flushes
            for fl in flushes:
                w0 = fl["start"] + fl["write_ms"] / 1e3
                sync_windows.append((w0, w0 + fl["sync_ms"] / 1e3))
            if flushes:
                print(f"  bookie {i} flushes: " + "; ".join(
                    f"{fl['bytes'] / 1e6:.0f} MB w {fl['write_ms']:.0f} sync {fl['sync_ms']:.0f} "
                    f"idx {fl['commit_ms']:.0f} free {fl['free_ms']:.0f} ms" for fl in flushes))
            gcs = sorted(x["ms"] for x in slow if "gc_generation" in x)
            if gcs:
                print(f"  bookie {i} GC runs > 5 ms: {len(gcs)}, max {gcs[-1]:.1f} ms")
            slow = [x for x in slow if "gc_generation" not in x]
            slow_all += slow
            if slow:
                ms = sorted(x["ms"] for x in slow)
                print(f"  bookie {i} journal batches > 5 ms: {len(slow)} (> 10 ms: {sum(m > 10 for m in ms)}, "
                      f"> 20 ms: {sum(m > 20 for m in ms)}), max {ms[-1]:.1f} ms")
        p99 = total["p99"] / 1e3 if total["p99"] is not None else None
        if p99 is not None and sync_windows:
            tail = [(s, lat) for s, lat in tails_starts if lat > p99]
            during = sum(any(w0 <= s + lat and s <= w1 for w0, w1 in sync_windows) for s, lat in tail)
            print(f"  tail adds (> merged p99): {len(tail)}, of which {during} were in flight during some "
                  f"bookie's entry-log fdatasync")
        out["flushes"] = len(flushes_all)
        out["slow_journal_batches"] = len(slow_all)
    if args.json:
        print(json.dumps(out))
    if args.keep:
        print(f"  kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
