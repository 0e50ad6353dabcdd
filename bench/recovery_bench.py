"""Re-replication throughput and its cost to foreground writers (issue 13), and the auditor at scale.

    .venv/bin/python bench/recovery_bench.py data [--mb 1024] [--ledgers 20] [--rate-mb 20] [--fg-rate 200]
    .venv/bin/python bench/recovery_bench.py scale [--ledgers 100000]

`data`: a real ZooKeeper and 5 `bkfast bookie` processes; 20 ledgers E=3 W=2 A=2 on bookies A, B, V holding
`--mb` MB of 1 KiB-64 KiB entries in total; 2 more bookies start empty, then V is stopped. Measured:
  1. manual: `recover_bookies` (the code of `bkfast shell recover V`) -> entries/s and MB/s copied;
  2. foreground: an open-loop writer (`--fg-rate` 1 KiB adds/s, E=W=A=2 on the surviving bookies) alone, then
     during a manual recovery with replicationRateByBytes = `--rate-mb` MB/s -> p50/p99 of its adds;
  3. autorecovery: the same data again, bookies restarted with autoRecoveryDaemonEnabled=true and
     lostBookieRecoveryDelay=0, V killed with SIGKILL; the time until every mark is gone and no segment lists
     V -> entries/s and MB/s.
`scale`: a real ZooKeeper only; `--ledgers` ledger metadata (E=3 over 5 bookie ids, 4 registered) created
through the metadata driver; the auditor's audit of the lost 5th bookie (scan + marks) and
`listunderreplicated` are timed.
Prints one JSON line per phase. Goals: >= 100 MB/s unthrottled; foreground p99 throttled <= 2x alone; scan < 60 s.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from kazoo.client import KazooClient

from bkfast import BookKeeper
from bkfast.cli.local_cluster import LocalBookie, free_port, start_bookies
from bkfast.cli.local_zookeeper import ZooKeeperServer
from bkfast.meta import zk_layout

PASSWORD = b"recovery-bench"


def _cluster(zk_connect: str, data: Path, n: int, conf: dict, root: str):
    uri = f"zk+hierarchical://{zk_connect}{root}"
    bookies = [LocalBookie(data / f"bookie-{i}", free_port(), uri, {"journalMaxGroupWaitMSec": "1", **conf})
               for i in range(n)]
    return uri, bookies


def _write_data(bk, total_mb: int, ledgers: int, seed: int = 1) -> tuple[int, int]:
    rng = random.Random(seed)
    per_ledger = total_mb * 1_000_000 // ledgers
    entries = nbytes = 0
    blob = rng.randbytes(65536 * 2)
    for _ in range(ledgers):
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        written = 0
        batch = []
        while written < per_ledger:
            size = rng.randint(1024, 65536)
            off = rng.randint(0, 65536)
            batch.append(blob[off:off + size])
            written += size
            if len(batch) == 500:
                lh.add_entries(batch, max_outstanding=200)
                batch = []
        if batch:
            lh.add_entries(batch, max_outstanding=200)
        lh.close()
        md = bk.get_ledger_metadata(lh.ledger_id)
        entries += md.last_entry_id + 1
        nbytes += written
    return entries, nbytes


class _OpenLoopWriter(threading.Thread):
    """`rate` adds/s of 1 KiB at fixed send times; latency counted from the scheduled send time."""

    def __init__(self, bk, rate: int, seconds: float):
        super().__init__(daemon=True)
        self.lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        self.rate, self.seconds = rate, seconds
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self):
        payload = b"x" * 1024
        start = time.monotonic()
        pendings = []
        for i in range(int(self.rate * self.seconds)):
            if self.stop.is_set():
                break
            due = start + i / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pendings.append((due, self.lh.add_entry_async(payload)))
            while pendings and pendings[0][1].done():
                due0, p = pendings.pop(0)
                p.wait(60)
                self.latencies.append(time.monotonic() - due0)
        for due0, p in pendings:
            p.wait(60)
            self.latencies.append(time.monotonic() - due0)

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        return {"adds": len(lat), "p50_ms": round(lat[len(lat) // 2] * 1e3, 2),
                "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 2)}


def _recover(uri: str, victim: str, rate_bytes: int = -1) -> dict:
    """`bkfast shell recover` as its own process (as an operator runs it); open ledgers (the foreground
    writer's) are left alone."""
    cmd = [sys.executable, "-m", "bkfast.cli.main", "shell", "recover", victim, "--json", "--rate", str(rate_bytes),
           "--skip-open-ledgers", "--metadata-uri", uri]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"recover failed: {done.stderr.strip()}")
    out = json.loads(done.stdout)
    return {k: out[k] for k in ("ok", "ledgersReplicated", "entriesCopied", "bytesCopied", "elapsedSeconds",
                                "entriesPerSecond", "megabytesPerSecond")}


def run_data(args) -> None:
    with ZooKeeperServer() as zk_server, tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        zk = KazooClient(hosts=zk_server.connect_string)
        zk.start(30)
        for phase in ("manual", "auto"):
            root = f"/bench-{phase}/ledgers"
            zk_layout.init_new_cluster(zk, root)
            conf = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "0", "zkTimeout": "4000",
                    "auditorPeriodicCheckInterval": "0"} if phase == "auto" else {}
            uri, bookies = _cluster(zk_server.connect_string, Path(tmp) / phase, 5, conf, root)
            start_bookies(bookies[:3])
            try:
                with BookKeeper(uri, timeout=120) as bk:
                    entries, nbytes = _write_data(bk, args.mb, args.ledgers)
                    victim = bookies[2]
                    start_bookies(bookies[3:])
                    time.sleep(1.0)
                    print(json.dumps({"phase": f"{phase}-written", "entries": entries, "mb": round(nbytes / 1e6, 1)}),
                          flush=True)
                    if phase == "manual":
                        victim.stop()
                        time.sleep(1.0)
                        alone = _OpenLoopWriter(bk, args.fg_rate, args.fg_seconds)
                        alone.start()
                        alone.join()
                        fg_fast = _OpenLoopWriter(bk, args.fg_rate, 3600)
                        fg_fast.start()
                        out = _recover(uri, victim.bookie_id)
                        fg_fast.stop.set()
                        fg_fast.join()
                        print(json.dumps({"phase": "manual-unthrottled", **out}), flush=True)
                        # throttled: re-replicate the data the first run put on the replacement bookie (it stays
                        # up; its share is copied to the other spare) with the foreground writer running
                        fg = _OpenLoopWriter(bk, args.fg_rate, 3600)
                        fg.start()
                        out = _recover(uri, bookies[3].bookie_id, int(args.rate_mb * 1e6))
                        fg.stop.set()
                        fg.join()
                        print(json.dumps({"phase": "manual-throttled", "rateLimitMBps": args.rate_mb, **out}),
                              flush=True)
                        a, u, f = alone.summary(), fg_fast.summary(), fg.summary()
                        print(json.dumps({"phase": "foreground", "alone": a, "withUnthrottledRecovery": u,
                                          "withThrottledRecovery": f,
                                          "p99RatioThrottled": round(f["p99_ms"] / max(a["p99_ms"], 1e-9), 2),
                                          "p99RatioUnthrottled": round(u["p99_ms"] / max(a["p99_ms"], 1e-9), 2)}),
                              flush=True)
                    else:
                        from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager

                        urm = UnderReplicationManager(zk, root)
                        ids = bk.list_ledgers()
                        held = sum(1 for lid in ids if victim.bookie_id in bk.get_ledger_metadata(lid).all_bookies)
                        started = time.monotonic()
                        victim.kill()
                        while not urm.list_marked():
                            time.sleep(0.05)
                        marked = time.monotonic()
                        while urm.list_marked() or any(victim.bookie_id in bk.get_ledger_metadata(lid).all_bookies
                                                       for lid in ids):
                            time.sleep(0.1)
                        healed = time.monotonic()
                        copied = nbytes * 2 / 3          # V held the write-set share 2/3 of E=3 W=2
                        copy_s = healed - marked
                        print(json.dumps({"phase": "autorecovery", "ledgers": held,
                                          "killToMarkedSeconds": round(marked - started, 2),
                                          "markedToHealedSeconds": round(copy_s, 2),
                                          "entriesPerSecond": round(entries * 2 / 3 / copy_s, 1),
                                          "megabytesPerSecond": round(copied / copy_s / 1e6, 2),
                                          "note": "kill-to-marked is the 4 s ZooKeeper session timeout"}),
                              flush=True)
            finally:
                for b in bookies:
                    try:
                        b.stop(20)
                    except Exception:
                        b.kill()
        zk.stop()
        zk.close()


def run_scale(args) -> None:
    from twisted.internet import defer

    from bkfast.client.blocking import call_in_reactor
    from bkfast.conf import ServerConfiguration
    from bkfast.ids import LedgerId
    from bkfast.meta.ledger_metadata import LedgerMetadata, LedgerState
    from bkfast.meta.zk_driver import ZkMetadataDriver
    from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager
    from bkfast.reactor import call
    from bkfast.replication import admin_ops
    from bkfast.replication.auditor import Auditor
    from bkfast.replication.settings import AuditorSettings
    from bkfast.replication.stats import ReplicationStats

    with ZooKeeperServer(heap="512m") as zk_server:
        zk = KazooClient(hosts=zk_server.connect_string, timeout=30)
        zk.start(30)
        root = "/scale/ledgers"
        zk_layout.init_new_cluster(zk, root)
        uri = f"zk+hierarchical://{zk_server.connect_string}{root}"
        driver = ZkMetadataDriver(uri, client=zk, max_threads=16)
        call_in_reactor(60, driver.start)
        bookies = [f"10.0.0.{i}:3181" for i in range(1, 6)]
        rng = random.Random(5)

        def create_all():
            sem = defer.DeferredSemaphore(256)
            ds = []
            for lid in range(args.ledgers):
                md = LedgerMetadata(3, 2, 2, ((0, tuple(rng.sample(bookies, 3))),), password=b"p",
                                    state=LedgerState.CLOSED, last_entry_id=99, length=1000)
                ds.append(sem.run(driver.create_ledger_metadata, LedgerId(0, lid), md))
            return defer.gatherResults(ds)

        started = time.monotonic()
        call_in_reactor(3600, create_all)
        print(json.dumps({"phase": "scale-created", "ledgers": args.ledgers,
                          "seconds": round(time.monotonic() - started, 1)}), flush=True)
        for b in bookies[:4]:
            zk.create(f"{root}/available/{b}", b"", ephemeral=True)
        conf = ServerConfiguration({"metadataServiceUri": uri})
        urm = UnderReplicationManager(zk, root)
        # audit() reads ledger metadata through the client's driver only: the driver stands in for a client
        auditor = Auditor(urm, AuditorSettings.from_conf(conf), SimpleNamespace(driver=driver), ReplicationStats(),
                          call)
        out = auditor.audit()
        print(json.dumps({"phase": "scale-audit", **out}), flush=True)
        started = time.monotonic()
        rows = admin_ops.list_under_replicated(urm)
        print(json.dumps({"phase": "scale-listunderreplicated", "marked": len(rows),
                          "seconds": round(time.monotonic() - started, 2)}), flush=True)
        call_in_reactor(60, driver.close)
        zk.stop()
        zk.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("data")
    d.add_argument("--mb", type=int, default=1024)
    d.add_argument("--ledgers", type=int, default=20)
    d.add_argument("--rate-mb", type=float, default=20.0)
    d.add_argument("--fg-rate", type=int, default=200)
    d.add_argument("--fg-seconds", type=float, default=10.0)
    d.add_argument("--dir", default=None)
    s = sub.add_parser("scale")
    s.add_argument("--ledgers", type=int, default=100_000)
    args = p.parse_args()
    (run_data if args.mode == "data" else run_scale)(args)


if __name__ == "__main__":
    sys.exit(main())
