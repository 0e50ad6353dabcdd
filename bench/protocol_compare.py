"""v3 against v2 on one bkfast bookie, in the same run: adds/s and the bookie's CPU per 1 KiB add, and the
bookie's CPU per warm 1 KiB read (issue 12: v3 adds at most 1.3x a v2 add's CPU and at least 80% of v2's
adds/s; warm reads at most 4 us of bookie CPU, v2 and v3).

    .venv/bin/python bench/protocol_compare.py [--runs 2] [--adds 200000] [--reads 200000]
        [--bookie-pythonpath DIR]     # run the bookie from another checkout (A/B against older code)

Each run starts a fresh `bkfast bookie` (DbLedgerStorage, default caches, journal sync on), writes with
`bkfast bench bookie --protocol v2` then `--protocol v3` (10,000 in flight), then reads the entries just
written (warm: in the write cache) with bench/read_load.py over v2 and v3. Prints one JSON line per run:
ratios first, then absolute figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_load import read_range  # noqa: E402
from server_targets import BKFAST, DEFAULT_BOOKIE_CONF, cpu_seconds  # noqa: E402

from bkfast.cli.local_cluster import LocalBookie  # noqa: E402


@contextlib.contextmanager
def from_checkout(pythonpath: str | None):
    """Processes started inside run from the checkout at `pythonpath` (None: this one). Its code must come
    first on their sys.path: `python -m` puts the working directory before PYTHONPATH, so they start there."""
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath
        os.chdir(pythonpath)
    try:
        yield
    finally:
        if pythonpath:
            os.chdir(cwd)
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def start_bookie(data_dir: Path, pythonpath: str | None, extra_conf: dict | None = None) -> LocalBookie:
    """A fresh bookie; `pythonpath`: run it from that checkout instead (`from_checkout`)."""
    with from_checkout(pythonpath):
        conf = {**DEFAULT_BOOKIE_CONF, **(extra_conf or {})}
        return LocalBookie(Path(data_dir).resolve(), 0, extra_conf=conf).start()


def bench_adds(port: int, protocol: str, count: int, first_ledger: int) -> dict:
    out = subprocess.run([*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--json", "--protocol", protocol,
                          "--throughput-count", str(count), "--outstanding", "10000", "--size", "1024",
                          "--latency-count", "0", "--first-ledger-id", str(first_ledger)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["throughput"]


def one_run(base: Path, adds: int, reads: int, pythonpath: str | None) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="bkfast-protocols-", dir=base))
    bookie = start_bookie(data_dir, pythonpath)
    pid, port = bookie.proc.pid, bookie.port
    result: dict = {}
    try:
        for protocol, ledger in (("v2", 1000), ("v3", 2000)):
            cpu0 = cpu_seconds(pid)
            r = bench_adds(port, protocol, adds, ledger)
            cpu = cpu_seconds(pid) - cpu0
            result[f"{protocol}_adds_per_s"] = round(r["adds_per_s"])
            result[f"{protocol}_bookie_us_per_add"] = round(cpu * 1e6 / adds, 2)
        for protocol, ledger in (("v2", 1000), ("v3", 2000)):
            n = min(reads, adds)
            cpu0 = cpu_seconds(pid)
            r = read_range("127.0.0.1", port, ledger, 0, n - 1, protocol)
            cpu = cpu_seconds(pid) - cpu0
            assert r["errors"] == 0 and r["entries"] == n, r
            result[f"{protocol}_reads_per_s"] = round(r["entries"] / r["seconds"])
            result[f"{protocol}_bookie_us_per_read"] = round(cpu * 1e6 / n, 2)
    finally:
        bookie.stop(60)
        shutil.rmtree(data_dir, ignore_errors=True)
    ratios = {"v3_over_v2_adds_per_s": round(result["v3_adds_per_s"] / result["v2_adds_per_s"], 3),
              "v3_over_v2_cpu_per_add": round(result["v3_bookie_us_per_add"] / result["v2_bookie_us_per_add"], 3)}
    return {**ratios, **result, "loadavg": open("/proc/loadavg").read().split()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--adds", type=int, default=200000)
    ap.add_argument("--reads", type=int, default=200000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--bookie-pythonpath", default=None)
    args = ap.parse_args()
    for _ in range(args.runs):
        print(json.dumps(one_run(Path(args.dir), args.adds, args.reads, args.bookie_pythonpath)), flush=True)


if __name__ == "__main__":
    main()
