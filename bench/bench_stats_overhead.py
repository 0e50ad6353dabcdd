"""What Java's stats cost a bookie: add throughput (v2 and v3, 1 KiB) with the Prometheus stats provider on
against the default NullStatsProvider, in the same run, alternating (issue 25: on/off at least 0.97x).

    .venv/bin/python bench/bench_stats_overhead.py [--rounds 8] [--adds 150000] [--dir /tmp/x]
        [--outstanding 10000] [--server-path-only]

First, in-process and without disk: the CPU per add of the server's own add path (frame split, decode,
submit, answer; 200 adds of 1 KiB per socket read, a bookie that completes at once) with stats off and on
(SERVER_PATH): what bkfast.net and bkfast/http/metrics.py add per add, free of the host's noise.
Then the same for a real Bookie in-process (BOOKIE_PATH: DbLedgerStorage, journal writes without
fdatasync, CPU of every thread per add): what bookie/, dbstorage/ and the journal's stats add.

Measured on the 2-core sandbox (2026-11-28): SERVER_PATH v2 0.417 -> 0.413 us/add, v3 0.422 -> 0.438;
BOOKIE_PATH 3.257 -> 3.175 us/add (on/off 0.975: below the noise); bookie processes, 16 rounds of 150,000
1 KiB adds: v2 best on/off 0.998, median of paired rounds 1.05; v3 best 1.019, paired 0.966 (rounds vary by
+-15% on this host, far more than the stats' cost).

Each round starts two fresh `bkfast bookie` processes side by side (DbLedgerStorage, journal sync on, the
caches of bench/server_targets.py): "off" with the default configuration (NullStatsProvider: no stats
recorded, no metrics port) and "on" with statsProviderClass=...PrometheusMetricsProvider and
prometheusStatsHttpPort set to a free port (Java's stats recorded, bkfast's own `bkfast_*` metrics too,
/metrics served), and loads both with `bkfast bench bookie` (v2 then v3; the order of the two bookies
alternates every round so that neither always runs first). Prints one JSON line per run, then per
protocol the median adds/s and bookie CPU per add of each side and their ratios (on / off), the median of
the rounds' paired ratios and the best run of each side: on a shared host the paired and best figures
are the steadier ones. Every round the "on" bookie is scraped: its bookkeeper_server_ADD_ENTRY_REQUEST
count must be every add it took.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_targets import BKFAST, DEFAULT_BOOKIE_CONF, cpu_seconds  # noqa: E402

from bkfast.cli.local_cluster import LocalBookie  # noqa: E402

PROMETHEUS = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
PROTOCOLS = ("v2", "v3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(base: Path, name: str, extra: dict) -> LocalBookie:
    data_dir = Path(tempfile.mkdtemp(prefix=f"bkfast-stats-{name}-", dir=base))
    return LocalBookie(data_dir.resolve(), 0, extra_conf={**DEFAULT_BOOKIE_CONF, **extra}).start()


def load(bookie: LocalBookie, protocol: str, adds: int, first_ledger: int, outstanding: int) -> dict:
    cpu0 = cpu_seconds(bookie.proc.pid)
    out = subprocess.run([*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{bookie.port}", "--json",
                          "--protocol", protocol, "--throughput-count", str(adds), "--outstanding",
                          str(outstanding), "--size", "1024", "--latency-count", "0",
                          "--first-ledger-id", str(first_ledger)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"bench failed: {out.stderr[-2000:]}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    if doc.get("errors"):
        raise RuntimeError(f"adds failed: {doc['errors']}")
    cpu = cpu_seconds(bookie.proc.pid) - cpu0
    return {"adds_per_s": doc["throughput"]["adds_per_s"], "cpu_us_per_add": cpu * 1e6 / adds}


def scraped_adds(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    m = re.search(r'^bookkeeper_server_ADD_ENTRY_REQUEST_count\{success="true"\} (\S+)$', text, re.M)
    if m is None:
        raise RuntimeError("bookkeeper_server_ADD_ENTRY_REQUEST not served by the bookie with stats on")
    return float(m.group(1))


def summary(runs: list[dict]) -> dict:
    """Per protocol: medians of each side and their ratio (on / off), the median of the rounds' own ratios
    (each round's two runs are back to back, so they share the host's load), and the best of each side."""
    out = {}
    for protocol in PROTOCOLS:
        side = {s: [r for r in runs if r["protocol"] == protocol and r["stats"] == s] for s in ("off", "on")}
        med = {s: {k: statistics.median(r[k] for r in side[s]) for k in ("adds_per_s", "cpu_us_per_add")}
               for s in side}
        paired = [on["adds_per_s"] / off["adds_per_s"] for off, on in zip(side["off"], side["on"], strict=True)]
        paired_cpu = [on["cpu_us_per_add"] / off["cpu_us_per_add"]
                      for off, on in zip(side["off"], side["on"], strict=True)]
        best = {s: max(r["adds_per_s"] for r in side[s]) for s in side}
        out[protocol] = {
            "off_adds_per_s": round(med["off"]["adds_per_s"]), "on_adds_per_s": round(med["on"]["adds_per_s"]),
            "ratio_adds_per_s": round(med["on"]["adds_per_s"] / med["off"]["adds_per_s"], 3),
            "median_round_ratio_adds_per_s": round(statistics.median(paired), 3),
            "best_off_adds_per_s": round(best["off"]), "best_on_adds_per_s": round(best["on"]),
            "ratio_best_adds_per_s": round(best["on"] / best["off"], 3),
            "off_cpu_us_per_add": round(med["off"]["cpu_us_per_add"], 2),
            "on_cpu_us_per_add": round(med["on"]["cpu_us_per_add"], 2),
            "ratio_cpu_per_add": round(med["on"]["cpu_us_per_add"] / med["off"]["cpu_us_per_add"], 3),
            "median_round_ratio_cpu_per_add": round(statistics.median(paired_cpu), 3),
        }
    return out


class _InstantBookie:
    """Stands for the Bookie in the in-process server measure: takes a batch and completes it at once."""

    ledger_dirs: list = []

    def __init__(self, registry, with_metrics: bool):
        from bkfast.http.metrics import BookieMetrics

        self.stats_root = registry.logger()
        self.metrics = BookieMetrics(self) if with_metrics else None
        self.journal = None

    def add_entries(self, adds, callback):
        callback(None, None)
        return []


class _NullTransport:
    def write(self, data):
        pass

    def getPeer(self):
        raise OSError("none")

    def registerProducer(self, producer, streaming):
        pass


def server_path_us_per_add(protocol: str, enabled: bool, batches: int = 3000, per_batch: int = 200) -> float:
    """CPU (process time) per add of the server's own add path (frame split, decode, submit, answer) with
    stats on or off, against an instant bookie: what net/ and http/metrics.py add, without disk or
    journal noise."""
    import time

    from twisted.internet import task

    from bkfast import codec
    from bkfast.net.server import BookieServerFactory, ServerSettings
    from bkfast.stats import StatsRegistry

    factory = BookieServerFactory(_InstantBookie(StatsRegistry(enabled=enabled), enabled),
                                  ServerSettings(max_pending_adds=0), reactor=task.Clock())
    proto = factory.buildProtocol(None)
    proto.makeConnection(_NullTransport())
    key, payload = codec.master_key(b"bench"), b"x" * 1024
    out = codec.FrameBuilder()
    crc = codec.DigestType.CRC32C
    for e in range(per_batch):
        if protocol == "v2":
            out.add_frame(codec.encode_add_request(key, 1, e, e - 1, (e + 1) * 1024, payload, crc)[4:])
        else:
            out.add_v3_add_request(key, 1, e, e - 1, (e + 1) * 1024, payload, crc, b"", e + 1)
    data = bytes(out.take())
    t0 = time.process_time()
    for _ in range(batches):
        proto.dataReceived(data)
        factory.flush()
    return (time.process_time() - t0) * 1e6 / (batches * per_batch)


def server_path_summary(repeats: int = 5) -> dict:
    out = {}
    for protocol in PROTOCOLS:
        off, on = [], []
        for _ in range(repeats):
            off.append(server_path_us_per_add(protocol, False))
            on.append(server_path_us_per_add(protocol, True))
        out[protocol] = {"off_us_per_add": round(min(off), 3), "on_us_per_add": round(min(on), 3),
                         "added_us_per_add": round(min(on) - min(off), 3)}
    return out


def bookie_path_us_per_add(enabled: bool, base: Path, batches: int = 150, per_batch: int = 200) -> float:
    """CPU of the whole process (every thread: reactor-side admission, journal, flush) per add of a real
    Bookie (DbLedgerStorage, journal writes without fdatasync so the disk's latency is out of it) taking
    batches of 1 KiB adds, stats on or off: what bookie/, dbstorage/ and the journal's stats add."""
    import threading
    import time

    from bkfast import codec
    from bkfast.bookie.bookie import Bookie
    from bkfast.conf import ServerConfiguration
    from bkfast.stats import StatsRegistry

    data_dir = Path(tempfile.mkdtemp(dir=base))
    conf = ServerConfiguration({"journalDirectories": [str(data_dir / "journal")],
                                "ledgerDirectories": [str(data_dir / "ledgers")],
                                "journalSyncData": False, "dbStorage_writeCacheMaxSizeMb": 256})
    bookie = Bookie(conf, stats=StatsRegistry(enabled=enabled).logger())
    bookie.start()
    try:
        key, payload = codec.master_key(b"bench"), b"x" * 1024
        crc = codec.DigestType.CRC32C
        batches_of_adds = [[(codec.encode_entry(1 + b, e, e - 1, (e + 1) * 1024, payload, crc, b""), key, False, False)
                            for e in range(per_batch)] for b in range(batches)]
        done = threading.Semaphore(0)
        t0 = time.process_time()
        for adds in batches_of_adds:
            failures = bookie.add_entries(adds, lambda accepted, error: done.release())
            assert not failures, failures[:1]
        for _ in batches_of_adds:
            done.acquire()
        return (time.process_time() - t0) * 1e6 / (batches * per_batch)
    finally:
        bookie.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def bookie_path_summary(base: Path, repeats: int = 5) -> dict:
    off, on = [], []
    for _ in range(repeats):
        off.append(bookie_path_us_per_add(False, base))
        on.append(bookie_path_us_per_add(True, base))
    return {"off_us_per_add": round(min(off), 3), "on_us_per_add": round(min(on), 3),
            "ratio": round(min(on) / min(off), 3)}


def one_round(base: Path, rnd: int, adds: int, outstanding: int) -> list[dict]:
    """A fresh pair of bookies (the same state for both: nothing written before), loaded v2 then v3, the
    order of the two alternating with the round; the "on" one is scraped before it stops."""
    stats_port = free_port()
    bookies = {"off": start(base, "off", {}),
               "on": start(base, "on", {"statsProviderClass": PROMETHEUS, "prometheusStatsHttpPort": str(stats_port),
                                        "prometheusStatsHttpAddress": "127.0.0.1"})}
    runs: list[dict] = []
    try:
        order = ("off", "on") if rnd % 2 == 0 else ("on", "off")
        for ledger, protocol in enumerate(PROTOCOLS, start=1):
            for side in order:
                r = load(bookies[side], protocol, adds, ledger * 1000, outstanding)
                r.update(round=rnd, protocol=protocol, stats=side)
                runs.append(r)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
        served = scraped_adds(stats_port)
        if served != adds * len(PROTOCOLS):
            raise RuntimeError(f"stats on: ADD_ENTRY_REQUEST counted {served} of {adds * len(PROTOCOLS)} adds")
    finally:
        for bookie in bookies.values():
            bookie.stop(60)
            shutil.rmtree(bookie.data_dir, ignore_errors=True)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--adds", type=int, default=150000)
    ap.add_argument("--outstanding", type=int, default=10000)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--server-path-only", action="store_true",
                    help="only the in-process measures of the server's and the Bookie's add paths (no bookie "
                         "processes)")
    args = ap.parse_args()
    print("SERVER_PATH", json.dumps(server_path_summary()), flush=True)
    print("BOOKIE_PATH", json.dumps(bookie_path_summary(Path(args.dir))), flush=True)
    if args.server_path_only:
        return
    runs: list[dict] = []
    for rnd in range(args.rounds):
        runs += one_round(Path(args.dir), rnd, args.adds, args.outstanding)
    print("SUMMARY", json.dumps(summary(runs)), "loadavg", open("/proc/loadavg").read().split()[0], flush=True)


if __name__ == "__main__":
    main()
