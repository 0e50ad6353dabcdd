"""TLS against plaintext, in one run, on this machine: `bkfast bench bookie --tls` (one bookie, 1 KiB
adds: one-at-a-time latency and closed-loop throughput) and `bkfast bench ledger --tls` (3 bookies on a
real ZooKeeper, E=3 WQ=2 AQ=2 through the bkfast client). The bookies have TLS on (START_TLS) without
client authentication, so both runs use the same processes; certificates come from a throwaway CA.

    .venv/bin/python bench/tls_compare.py [--size 1024] [--latency-count 3000] [--throughput-count 100000]
        [--ledger-duration 8] [--protocol v2|v3] [--json]

Goal (issue 16): TLS at least 0.7x plaintext throughput for 1 KiB adds, at most +1 ms one-at-a-time latency.
Two default runs (v2, 1 KiB) on the 2-core development machine with nothing else running, 2026-11-26,
plaintext -> TLS (`uptime` load 0.6 and 2.2 at the start):
  run 1: bench bookie 298k -> 225k adds/s (0.75x), closed-loop p99 5.9 -> 7.7 ms; one-at-a-time p50 2.33 ->
    2.47 ms (+0.13), p99 2.53 -> 3.37 ms (+0.84). bench ledger E3/WQ2/AQ2 186k -> 134k adds/s (0.72x), p50 52
    -> 69 ms, p99 88 -> 151 ms, client CPU 3.4 -> 4.8 us/add.
  run 2: bench bookie 268k -> 217k adds/s (0.81x), closed-loop p99 8.3 -> 7.7 ms; one-at-a-time p50 2.34 ->
    2.47 ms (+0.13), p99 2.56 -> 3.37 ms (+0.82). bench ledger 182k -> 125k adds/s (0.69x), p50 53 -> 73 ms,
    p99 97 -> 163 ms, client CPU 3.5 -> 5.2 us/add.
With other work on the machine the same runs spread from 0.33x to 0.79x (bench bookie) and one-at-a-time p99
moved 5 ms either way: measure on a quiet machine. The ledger latencies are closed-loop with 10,000 adds
outstanding (queueing, not per-add cost). TLS always runs second, on bookies that already hold the plaintext
run's entries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bkfast.cli.local_cluster import LocalBookie, free_port, start_bookies
from bkfast.cli.local_zookeeper import ZooKeeperServer
from bkfast.tls.certs import CertificateAuthority

FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"


def make_pki(d: Path) -> tuple[dict, Path]:
    ca = CertificateAuthority("bench CA")
    key, cert = ca.issue("127.0.0.1", hosts=("127.0.0.1",)).write_pem(d, "bookie")
    ca_path = ca.write_pem(d / "ca.pem")
    client_conf = d / "client.conf"
    client_conf.write_text(f"tlsProviderFactoryClass={FACTORY}\ntlsTrustStoreType=PEM\ntlsTrustStore={ca_path}\n")
    return ({"tlsProviderFactoryClass": FACTORY, "tlsKeyStoreType": "PEM", "tlsKeyStore": str(key),
             "tlsCertificatePath": str(cert), "dbStorage_writeCacheMaxSizeMb": "256"}, client_conf)


def bkfast(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", *args, "--json"],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"bkfast bench {' '.join(args)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--latency-count", type=int, default=3000)
    ap.add_argument("--throughput-count", type=int, default=100000)
    ap.add_argument("--ledger-duration", type=float, default=8.0)
    ap.add_argument("--protocol", choices=["v2", "v3"], default="v2")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bkfast-tls-bench-"))
    report: dict = {}
    try:
        bookie_conf, client_conf = make_pki(work)
        single = LocalBookie(work / "single", 0, extra_conf=dict(bookie_conf))
        single.start()
        try:
            r = bkfast("bookie", "--bookie", single.bookie_id, "--protocol", args.protocol, "--size", str(args.size),
                       "--warmup-count", "2000", "--latency-count", str(args.latency_count),
                       "--throughput-count", str(args.throughput_count), "--tls", "--tls-conf", str(client_conf))
        finally:
            single.stop()
        report["bench_bookie"] = {
            "plaintext": {"adds_per_s": r["plaintext"]["throughput"]["adds_per_s"],
                          "p99_ms": r["plaintext"]["throughput"]["p99_ms"],
                          "one_at_a_time_p50_ms": r["plaintext"]["latency"]["p50_ms"],
                          "one_at_a_time_p99_ms": r["plaintext"]["latency"]["p99_ms"]},
            "tls": {"adds_per_s": r["tls"]["throughput"]["adds_per_s"], "p99_ms": r["tls"]["throughput"]["p99_ms"],
                    "one_at_a_time_p50_ms": r["tls"]["latency"]["p50_ms"],
                    "one_at_a_time_p99_ms": r["tls"]["latency"]["p99_ms"]},
            "tls_vs_plaintext": r["tls_vs_plaintext"]}
        with ZooKeeperServer(work / "zk") as zk:
            from kazoo.client import KazooClient

            from bkfast.meta import zk_layout

            client = KazooClient(hosts=zk.connect_string)
            client.start(timeout=30)
            zk_layout.init_new_cluster(client, "/ledgers")
            client.stop()
            client.close()
            uri = f"zk+hierarchical://{zk.connect_string}/ledgers"
            bookies = [LocalBookie(work / f"b{i}", free_port(), uri, dict(bookie_conf)) for i in range(3)]
            start_bookies(bookies)
            try:
                r = bkfast("ledger", "--metadata-uri", uri, "--protocol", args.protocol, "--size", str(args.size),
                           "--duration", str(args.ledger_duration), "--no-read", "--tailing", "0",
                           "--tls", "--tls-conf", str(client_conf))
            finally:
                for b in bookies:
                    b.stop()
        report["bench_ledger"] = {
            name: {k: r[name][k] for k in ("adds_per_s", "p50_ms", "p99_ms", "client_cpu_us_per_add")}
            for name in ("plaintext", "tls")}
        report["bench_ledger"]["tls_vs_plaintext"] = r["tls_vs_plaintext"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return
    for name, part in report.items():
        for mode in ("plaintext", "tls"):
            print(f"{name:<13} {mode:<9} " + "  ".join(f"{k} {v}" for k, v in part[mode].items()))
        print(f"{name:<13} tls/plain " + "  ".join(f"{k} {v}" for k, v in part["tls_vs_plaintext"].items()))


if __name__ == "__main__":
    main()
