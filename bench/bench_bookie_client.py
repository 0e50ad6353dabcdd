"""BookieClient throughput and latency: 1 KiB adds, then reads, to bkfast bookie subprocesses.

    .venv/bin/python bench/bench_bookie_client.py [--count 200000] [--outstanding 2000] [--size 1024]
        [--protocol v2|v3] [--bookies 1] [--ledgers 10] [--channels 1] [--no-baseline] [--json]

Closed loop: `--outstanding` requests in flight in total (each completion issues the next); each add goes
to every bookie (like a ledger with ensemble = write quorum = ack quorum = --bookies), each read to one
bookie (round robin). Entries are encoded (CRC32C) on the fly, as a ledger client would.

Printed first, the machine-independent figure: BookieClient's add rate as a ratio of the raw bench client's
(`bkfast.loadgen`, one connection, same bookie, same window) measured in the same run; then absolute
adds/s, reads/s, p50/p99 latency, and this process's CPU time per request (the client's own cost: the
"adds/s per client core" line is 1 / that).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from twisted.internet import defer

from bkfast import loadgen
from bkfast.cli.local_cluster import LocalBookie
from bkfast.codec import DigestType, encode_entry, mac_key, master_key
from bkfast.conf import ClientConfiguration
from bkfast.net.bookie_client import BookieClient

KEY = master_key(b"bench")
MAC = mac_key(b"bench")


def start_bookie(data_dir: Path) -> LocalBookie:
    return LocalBookie(data_dir, 0, extra_conf={"dbStorage_writeCacheMaxSizeMb": "256",
                                                "dbStorage_readAheadCacheMaxSizeMb": "64",
                                                "maxPendingAddRequestsPerThread": "0"}).start()


class AllAcked(defer.Deferred):
    """Fires once every add of an entry succeeded (a ledger's ack quorum = all); fails on the first error.

    Lighter than gatherResults, so the bench measures BookieClient rather than DeferredList.
    """

    def __init__(self, ds):
        super().__init__()
        self.left = len(ds)
        for d in ds:
            d.addCallbacks(self._one, self._failed)

    def _one(self, _):
        self.left -= 1
        if self.left == 0 and not self.called:
            self.callback(None)

    def _failed(self, failure):
        if not self.called:
            self.errback(failure)


class Loop:
    """Keeps `window` requests in flight until `count` are done; records per-request latency."""

    def __init__(self, count, window, issue):
        self.count = count
        self.window = window
        self.issue = issue          # issue(i) -> Deferred
        self.next = 0
        self.completed = 0
        self.errors = 0
        self.first_error = None
        self.latencies = []
        self.done = defer.Deferred()

    def start(self):
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        for _ in range(min(self.window, self.count)):
            self._one()
        return self.done

    def _one(self):
        i = self.next
        self.next = i + 1
        self.issue(i).addCallbacks(self._ok, self._err, callbackArgs=(time.perf_counter(),))

    def _ok(self, _, started):
        self.latencies.append(time.perf_counter() - started)
        self._completed()

    def _err(self, failure):
        self.errors += 1
        if self.first_error is None:
            self.first_error = failure.getErrorMessage()
        self._completed()

    def _completed(self):
        self.completed += 1
        if self.next < self.count:
            self._one()
        elif self.completed == self.count:
            elapsed = time.perf_counter() - self.t0
            cpu = time.process_time() - self.cpu0
            lat = sorted(self.latencies)
            self.done.callback({
                "requests": self.count, "errors": self.errors, "first_error": self.first_error,
                "per_s": round(self.count / elapsed, 1), "seconds": round(elapsed, 3),
                **loadgen.percentiles_ms(lat, (50, 99)),
                "client_cpu_us_per_request": round(cpu / self.count * 1e6, 2),
            })


async def run(reactor, args, ports):
    conf = ClientConfiguration({"useV2WireProtocol": args.protocol == "v2",
                                "numChannelsPerBookie": args.channels, "readTimeout": 60})
    client = BookieClient(reactor, conf)
    bookies = [f"127.0.0.1:{p}" for p in ports]
    payload = os.urandom(args.size)
    n_ledgers = args.ledgers
    first_ledger = 1000

    def add(i):
        ledger = first_ledger + i % n_ledgers
        e = i // n_ledgers
        data = encode_entry(ledger, e, e - 1, (e + 1) * args.size, payload, DigestType.CRC32C, MAC)
        if len(bookies) == 1:
            return client.add_entry(bookies[0], ledger, e, data, KEY)
        return AllAcked([client.add_entry(b, ledger, e, data, KEY) for b in bookies])

    def read(i):
        ledger = first_ledger + i % n_ledgers
        return client.read_entry(bookies[i % len(bookies)], ledger, i // n_ledgers)

    # warm up: connections made, code paths hot
    warm = min(5000, args.count)
    await Loop(warm, args.outstanding, lambda i: add(args.count + i)).start()
    results = {}
    results["add"] = await Loop(args.count, args.outstanding, add).start()
    results["read"] = await Loop(args.count, args.outstanding, read).start()
    await client.close()
    if not args.no_baseline:
        raw = await loadgen.run_bench(reactor, "127.0.0.1", ports[0], protocol_version=args.protocol,
                                      size=args.size, ledgers=n_ledgers, first_ledger_id=50000,
                                      outstanding=args.outstanding, warmup_count=warm,
                                      throughput_count=args.count // len(bookies))
        results["raw_baseline_add"] = raw["throughput"]
    return results


def report(args, results):
    if args.json:
        print(json.dumps({"args": vars(args), **results}, indent=2))
        return
    add, read = results["add"], results["read"]
    per_add_requests = len(args.ports)
    if "raw_baseline_add" in results:
        raw = results["raw_baseline_add"]["adds_per_s"]
        print(f"BookieClient / raw loadgen client, add requests/s: "
              f"{add['per_s'] * per_add_requests / raw:.2f} (to bookie 1 of {per_add_requests})")
    print(f"protocol {args.protocol}, {args.size} B entries, {args.outstanding} outstanding, "
          f"{per_add_requests} bookie(s), {args.ledgers} ledgers, {args.channels} channel(s) per bookie")
    print(f"adds : {add['per_s']:>10.0f} entries/s ({add['per_s'] * per_add_requests:.0f} add requests/s)  "
          f"p50 {add['p50_ms']} ms  p99 {add['p99_ms']} ms  errors {add['errors']}  "
          f"client CPU {add['client_cpu_us_per_request'] / per_add_requests:.1f} us/add request "
          f"(= {1e6 * per_add_requests / add['client_cpu_us_per_request']:.0f} add requests/s per client core)")
    print(f"reads: {read['per_s']:>10.0f} entries/s  p50 {read['p50_ms']} ms  p99 {read['p99_ms']} ms  "
          f"errors {read['errors']}  client CPU {read['client_cpu_us_per_request']:.1f} us/read")
    if "raw_baseline_add" in results:
        raw = results["raw_baseline_add"]
        print(f"raw loadgen client (baseline): {raw['adds_per_s']:.0f} adds/s  p50 {raw['p50_ms']} ms  "
              f"p99 {raw['p99_ms']} ms")
    for name in ("add", "read"):
        if results[name]["errors"]:
            print(f"first {name} error: {results[name]['first_error']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200000)
    ap.add_argument("--outstanding", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--protocol", choices=("v2", "v3"), default="v2")
    ap.add_argument("--bookies", type=int, default=1)
    ap.add_argument("--ledgers", type=int, default=10)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bkfast-bench-client-"))
    procs = []
    try:
        for i in range(args.bookies):
            procs.append(start_bookie(tmp / f"bookie{i}"))
        args.ports = [bookie.port for bookie in procs]
        out = {}

        def go(reactor):
            d = defer.ensureDeferred(run(reactor, args, args.ports))
            d.addCallback(out.update)
            return d

        from twisted.internet import reactor as the_reactor

        d = go(the_reactor)
        d.addBoth(lambda r: (the_reactor.stop(), r)[1])
        d.addErrback(lambda f: out.setdefault("failure", f))
        the_reactor.run()
        if "failure" in out:
            out["failure"].raiseException()
        report(args, out)
    finally:
        for bookie in procs:
            bookie.stop(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
