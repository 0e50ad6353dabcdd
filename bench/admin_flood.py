"""The data path under a flood of unauthenticated admin GETs (issue 24, point 6): a bookie's add latency
alone and while 32 threads send `--requests` heavy GETs to its admin API (`httpServerReadOnlyOpen`, the
default, serves them to anyone).

    .venv/bin/python bench/admin_flood.py [--runs 2] [--rate 5000] [--seconds 10] [--requests 2000]
        [--parallel 32] [--ledgers 300] [--bookie-conf key=value ...] [--bookie-pythonpath DIR]

A real ZooKeeper and one `bkfast bookie` with the admin API on; `--ledgers` ledgers created beforehand so
that listing them with their metadata is real work. Per run: the writer alone (`bkfast bench bookie --rate`,
open loop, latency from the scheduled send time), then the writer again during the flood (which stops
sending when the writer is done, so it may end before `--requests`). The GETs
cycle through ledger/list with metadata (decoded and not), ledger/metadata, list_bookie_info,
server_config and /metrics. Prints one JSON line per run: the add p99 with the flood over alone (goal
<= 1.5) first, then the absolute figures and what the flood got (answers by status, GETs/s).
`--bookie-conf httpServerMaxConcurrentRequests=64 --bookie-conf httpServerCpuShare=1` approximates the API
before the admission gate (no bound) for an A/B in the same run.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from kazoo.client import KazooClient

from bkfast import BookKeeper
from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.cli.local_zookeeper import ZooKeeperServer
from bkfast.meta import zk_layout

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_compare import from_checkout  # noqa: E402
from server_targets import BKFAST  # noqa: E402


def heavy_paths(ledger_id: int) -> list[str]:
    return ["/api/v1/ledger/list?print_metadata=true&decode_meta=true",
            "/api/v1/ledger/list?print_metadata=true",
            f"/api/v1/ledger/metadata?ledger_id={ledger_id}",
            "/api/v1/bookie/list_bookie_info",
            "/api/v1/config/server_config",
            "/metrics"]


def flood(port: int, paths: list[str], requests: int, parallel: int, stop: threading.Event) -> dict:
    """Up to `requests` GETs, `parallel` at a time, until `stop` is set (the writer's run is over)."""
    statuses: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def one(i: int) -> None:
        if stop.is_set():
            return
        url = f"http://127.0.0.1:{port}{paths[i % len(paths)]}"
        try:
            with urllib.request.urlopen(url, timeout=120) as resp:
                resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            status = err.code
        except OSError:
            status = "error"
        with lock:
            statuses[status] += 1

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(requests)))
    seconds = time.monotonic() - started
    answered = sum(statuses.values())
    return {"answers": dict(statuses), "seconds": round(seconds, 1), "gets_per_s": round(answered / seconds, 1)}


def rate_run(port: int, rate: int, seconds: float, first_ledger: int) -> dict:
    out = subprocess.run([*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--json",
                          "--rate", str(rate), "--rate-count", str(int(rate * seconds)), "--latency-count", "0",
                          "--throughput-count", "0", "--size", "1024", "--first-ledger-id", str(first_ledger)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"bench bookie failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["rate"]


def one_run(zk_connect: str, base: Path, run: int, args, extra_conf: dict) -> dict:
    root = f"/flood-{run}/ledgers"
    zk = KazooClient(hosts=zk_connect, timeout=30)
    zk.start(30)
    zk_layout.init_new_cluster(zk, root)
    zk.stop()
    uri = f"zk+hierarchical://{zk_connect}{root}"
    http_port = free_port()
    bookie = LocalBookie(base / f"bookie-{run}", free_port(), uri,
                         {"httpServerEnabled": "true", "httpServerPort": str(http_port), **extra_conf})
    with from_checkout(args.bookie_pythonpath):
        bookie.start()
    try:
        with BookKeeper(uri, timeout=60) as bk:
            for i in range(args.ledgers):
                lh = bk.create_ledger(1, 1, 1, password=b"flood")
                if i == 0:
                    lh.add_entries([b"x" * 100] * 10)
                lh.close()
            some_ledger = lh.ledger_id
        alone = rate_run(bookie.port, args.rate, args.seconds, 10_000 + run * 1000)
        result: dict = {}
        stop = threading.Event()
        flooder = threading.Thread(target=lambda: result.update(
            flood(http_port, heavy_paths(some_ledger), args.requests, args.parallel, stop)), daemon=True)
        flooder.start()
        time.sleep(1.0)                              # the flood is at full strength before the writer starts
        with_flood = rate_run(bookie.port, args.rate, args.seconds, 20_000 + run * 1000)
        flood_still_running = flooder.is_alive()
        stop.set()                                   # what is in flight finishes; nothing more is sent
        flooder.join()
        return {"p99_ratio": round(with_flood["p99_ms"] / alone["p99_ms"], 2),
                "p999_ratio": round(with_flood["p999_ms"] / alone["p999_ms"], 2),
                "alone": {k: alone[k] for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")},
                "with_flood": {k: with_flood[k] for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")},
                "flood_outlasted_writer": flood_still_running, "flood": result, "bookie_conf": extra_conf,
                "bookie_code": args.bookie_pythonpath or "this checkout"}
    finally:
        bookie.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--parallel", type=int, default=32)
    ap.add_argument("--ledgers", type=int, default=300)
    ap.add_argument("--bookie-conf", action="append", default=[], help="key=value for the bookie (repeatable)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--bookie-pythonpath", default=None, help="run the bookie from this checkout (A/B)")
    args = ap.parse_args()
    extra_conf = dict(kv.split("=", 1) for kv in args.bookie_conf)
    with ZooKeeperServer() as zk_server, tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for run in range(args.runs):
            print(json.dumps(one_run(zk_server.connect_string, Path(tmp), run, args, extra_conf)), flush=True)


if __name__ == "__main__":
    main()
