"""Reads isolated from writes (issue 12): one bookie, an open-loop writer at 20,000 1 KiB adds/s for 30 s,
measured alone and then with a concurrent catch-up reader that reads a 2 GB ledger written beforehand,
sequentially, after its entry-log pages were dropped from the page cache.

    .venv/bin/python bench/read_isolation.py [--runs 1] [--gb 2] [--seconds 30] [--rate 20000]
        [--entry-size 16384] [--window 64] [--dir /tmp] [--journal-dir DIR] [--bookie-pythonpath DIR]

Per run: a fresh `bkfast bookie` (DbLedgerStorage, default caches, journal sync on) in a new dir; the big
ledger is written with `bkfast bench bookie` (16 KiB entries by default), the bookie is stopped cleanly
(everything flushed and checkpointed) and started again, and the page cache of its files is dropped
(`/proc/sys/vm/drop_caches` as root, else posix_fadvise(DONTNEED) on every file of the data dir). Then:
writer alone (`bkfast bench bookie --rate`), drop the cache again, writer + reader (bench/read_load.py,
`--window` reads in flight, v2). Prints one JSON line per run: the writer's p99 with the reader over
alone (goal <= 1.5) and the reader's MB/s (goal >= 150) first, then the absolute figures.
`--bookie-pythonpath` runs the bookie from another checkout (A/B against older code). `--journal-dir`
puts the journal on another file system (a fresh dir under it per run): on a host with one disk the
reader's reads slow the journal's fdatasyncs, which is the writer's latency; BookKeeper's answer is a
journal disk of its own, and this shows what that gives.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_compare import start_bookie  # noqa: E402
from read_load import read_range  # noqa: E402
from server_targets import BKFAST  # noqa: E402

BIG_LEDGER = 7000
WRITER_LEDGER = 9000


def drop_page_cache(data_dir: Path) -> str:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError:
        for root, _, files in os.walk(data_dir):
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        return "fadvise"


def bench(port: int, *args: str) -> dict:
    out = subprocess.run([*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--json", *args],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def writer(port: int, rate: int, seconds: int, first_ledger: int) -> dict:
    doc = bench(port, "--throughput-count", "0", "--latency-count", "0", "--rate", str(rate), "--rate-count",
                str(rate * seconds), "--outstanding", "10000", "--size", "1024", "--first-ledger-id", str(first_ledger))
    r = doc["rate"]
    return {k: r[k] for k in ("adds_per_s", "p50_ms", "p99_ms", "p999_ms", "max_ms", "errors")}


def one_run(args, base: Path) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="bkfast-isolation-", dir=base))
    extra = {}
    journal_dir = None
    if args.journal_dir:
        journal_dir = Path(tempfile.mkdtemp(prefix="bkfast-isolation-journal-", dir=args.journal_dir))
        extra["journalDirectory"] = str(journal_dir)
    entries = args.gb * (1 << 30) // args.entry_size
    bookie = start_bookie(data_dir, args.bookie_pythonpath, extra)
    try:
        t0 = time.perf_counter()
        bench(bookie.port, "--throughput-count", str(entries), "--latency-count", "0", "--outstanding", "2000",
              "--size", str(args.entry_size), "--first-ledger-id", str(BIG_LEDGER))
        write_s = time.perf_counter() - t0
        bookie.stop(120)
        bookie = start_bookie(data_dir, args.bookie_pythonpath, extra)
        how = drop_page_cache(data_dir)
        alone = writer(bookie.port, args.rate, args.seconds, WRITER_LEDGER)
        drop_page_cache(data_dir)
        reader: dict = {}
        stop_at = time.monotonic() + args.seconds

        def read():
            reader.update(read_range("127.0.0.1", bookie.port, BIG_LEDGER, 0, entries - 1, "v2", args.window, stop_at))

        t = threading.Thread(target=read)
        t.start()
        together = writer(bookie.port, args.rate, args.seconds, WRITER_LEDGER + 1)
        t.join()
    finally:
        bookie.stop(120)
        shutil.rmtree(data_dir, ignore_errors=True)
        if journal_dir is not None:
            shutil.rmtree(journal_dir, ignore_errors=True)
    mb_s = reader["bytes"] / reader["seconds"] / 1e6
    return {"p99_with_reader_over_alone": round(together["p99_ms"] / alone["p99_ms"], 2),
            "reader_mb_per_s": round(mb_s, 1),
            "reader_entries_per_s": round(reader["entries"] / reader["seconds"]),
            "reader_errors": reader["errors"], "writer_alone": alone, "writer_with_reader": together,
            "big_ledger_gb": args.gb, "entry_size": args.entry_size, "big_ledger_write_s": round(write_s, 1),
            "journal_dir": args.journal_dir or "with the ledgers", "cache_drop": how,
            "loadavg": open("/proc/loadavg").read().split()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--gb", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--entry-size", type=int, default=16384)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--journal-dir", default=None, help="put the journal under this dir (another disk)")
    ap.add_argument("--bookie-pythonpath", default=None)
    args = ap.parse_args()
    for _ in range(args.runs):
        print(json.dumps(one_run(args, Path(args.dir))), flush=True)


if __name__ == "__main__":
    main()
