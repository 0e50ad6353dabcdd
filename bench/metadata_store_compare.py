"""Create + close ledgers on etcd vs ZooKeeper, same run, alternating: the metadata path of the ledger client.

    .venv/bin/python bench/metadata_store_compare.py [--ledgers 10000] [--in-flight 64] [--rounds 2] [--json]

Starts a local ZooKeeper (Debian's zookeeper package) and a local etcd (Debian's etcd-server), each on its own
data dir on the same disk, initializes a cluster in each (Java's layouts) and registers three bookie ids in each
(create and close of an empty ledger never contact a bookie, so none runs). Then, per round and per store in
turn, one AsyncBookKeeper creates and closes `--ledgers` ledgers (E=3 W=2 A=2) with `--in-flight` of them
under way at once: an id, the metadata create and the CAS to CLOSED, three metadata writes each, every one
synced to disk by the store. Prints ledgers/s and each ledger's create+close latency percentiles per store and
round, and the etcd / ZooKeeper throughput ratio. Every process is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from twisted.internet import defer  # noqa: E402

from bkfast.cli.local_etcd import EtcdServer  # noqa: E402
from bkfast.cli.local_zookeeper import ZooKeeperServer  # noqa: E402
from bkfast.client.bookkeeper import AsyncBookKeeper  # noqa: E402
from bkfast.loadgen import percentiles_ms  # noqa: E402
from bkfast.meta.registration import bookie_service_info  # noqa: E402
from bkfast.reactor import call, start_reactor_thread  # noqa: E402

BOOKIES = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def init_zookeeper(connect: str) -> str:
    from kazoo.client import KazooClient

    from bkfast.meta import zk_layout

    zk = KazooClient(hosts=connect, timeout=15.0)
    zk.start(timeout=30)
    try:
        zk_layout.init_new_cluster(zk, "/ledgers")
    finally:
        zk.stop()
        zk.close()
    return f"zk+hierarchical://{connect}/ledgers"


def init_etcd(endpoint: str) -> str:
    from bkfast.meta.etcd_cluster import init_new_etcd_cluster
    from bkfast.meta.etcd_driver import etcd_client_from_conf

    uri = f"etcd://{endpoint}/ledgers"
    kv = etcd_client_from_conf(uri)
    try:
        init_new_etcd_cluster(kv, "/ledgers")
    finally:
        kv.close()
    return uri


@defer.inlineCallbacks
def create_and_close(bk: AsyncBookKeeper, count: int, in_flight: int):
    """Fires with (seconds, sorted per-ledger latencies) once `count` ledgers were created and closed."""
    latencies: list[float] = []
    started = time.perf_counter()
    remaining = [count]

    @defer.inlineCallbacks
    def one_lane():
        while remaining[0] > 0:
            remaining[0] -= 1
            began = time.perf_counter()
            lh = yield bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=b"bench")
            yield lh.close()
            latencies.append(time.perf_counter() - began)

    yield defer.gatherResults([one_lane() for _ in range(in_flight)], consumeErrors=True)
    return time.perf_counter() - started, sorted(latencies)


def measure(uri: str, ledgers: int, in_flight: int) -> dict:
    bk = call(AsyncBookKeeper.connect, uri, timeout=60)
    try:
        seconds, latencies = call(create_and_close, bk, ledgers, in_flight, timeout=3600)
    finally:
        call(bk.close, timeout=60)
    return {"ledgers": ledgers, "seconds": round(seconds, 3), "ledgers_per_s": round(ledgers / seconds, 1),
            **percentiles_ms(latencies)}


def register_bookies(uri: str) -> object:
    """A driver holding three bookie registrations (its session keeps them) for the client's placement."""
    from bkfast.meta.factory import open_metadata_driver

    driver = open_metadata_driver(uri)
    call(driver.start, timeout=60)
    for bookie in BOOKIES:
        host, port = bookie.split(":")
        call(driver.register_bookie, bookie, bookie_service_info(host, int(port)), timeout=30)
    return driver


def run(args) -> dict:
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bkfast-metastore-bench-"))
    zookeeper = ZooKeeperServer(work / "zookeeper").start()
    etcd = EtcdServer(work / "etcd").start()
    drivers = []
    try:
        start_reactor_thread()
        uris = {"zookeeper": init_zookeeper(zookeeper.connect_string), "etcd": init_etcd(etcd.endpoint)}
        drivers = [register_bookies(uri) for uri in uris.values()]
        results: dict[str, list[dict]] = {"zookeeper": [], "etcd": []}
        for round_no in range(args.rounds):
            order = ("etcd", "zookeeper") if round_no % 2 == 0 else ("zookeeper", "etcd")
            for store in order:
                result = measure(uris[store], args.ledgers, args.in_flight)
                results[store].append(result)
                if not args.json:
                    print(f"round {round_no + 1} {store:9s}: {result['ledgers_per_s']:9,.1f} ledgers/s  "
                          f"p50 {result['p50_ms']} ms  p99 {result['p99_ms']} ms  ({result['seconds']} s)")
        best = {store: max(r["ledgers_per_s"] for r in rounds) for store, rounds in results.items()}
        return {"results": results, "best_ledgers_per_s": best,
                "etcd_over_zookeeper": round(best["etcd"] / best["zookeeper"], 3)}
    finally:
        for driver in drivers:
            call(driver.close, timeout=30)
        etcd.stop()
        zookeeper.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=10000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the stores keep their data (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"best: etcd {out['best_ledgers_per_s']['etcd']:,.1f} ledgers/s, ZooKeeper "
              f"{out['best_ledgers_per_s']['zookeeper']:,.1f} ledgers/s: etcd / ZooKeeper = "
              f"{out['etcd_over_zookeeper']}")


if __name__ == "__main__":
    main()
