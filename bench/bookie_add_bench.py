"""Bookie.add throughput and latency: DbLedgerStorage, journal sync on, entries of a fixed size.

    .venv/bin/python bench/bookie_add_bench.py [--dir /tmp/x] [--count 300000] [--size 1024]
        [--ledgers 10] [--outstanding 5000] [--busy-thread] [--switch-interval-ms N] [--json]

Latency is measured from the add call to its acknowledgement (journal batch durable). --busy-thread runs
a CPU-bound Python thread alongside, standing in for a busy reactor: the journal thread then has to win
the GIL back after each fdatasync (see notes on the switch interval).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from functools import partial

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.conf import ServerConfiguration
from bkfast.loadgen import percentiles_ms


def run(args) -> dict:
    data_dir = args.dir or tempfile.mkdtemp(prefix="bkfast-bench-bookie-")
    conf = ServerConfiguration({
        "journalDirectories": [os.path.join(data_dir, "journal")],
        "ledgerDirectories": [os.path.join(data_dir, "ledgers")],
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 512,
        "dbStorage_readAheadCacheMaxSizeMb": 64,
    })
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    key = master_key(b"bench")
    payload = os.urandom(args.size)
    entries = [encode_entry(ledger, entry_id, entry_id - 1, args.size * (entry_id + 1), payload, DigestType.CRC32C)
               for entry_id in range(args.count // args.ledgers + 1) for ledger in range(1, args.ledgers + 1)]
    entries = entries[:args.count]
    n = len(entries)
    sent = [0.0] * n
    latencies = [0.0] * n
    errors = []
    completed = [0]          # written only by the thread that runs completions
    window_open = threading.Condition()
    waiting = [False]
    stop_busy = threading.Event()
    perf = time.perf_counter

    def done(i, error):
        latencies[i] = perf() - sent[i]
        if error is not None:
            errors.append(error)
        completed[0] += 1
        if waiting[0] or completed[0] == n:
            with window_open:
                window_open.notify()

    def busy():
        x = 0
        while not stop_busy.is_set():
            x += 1

    bookie = Bookie(conf)
    bookie.start()
    busy_thread = threading.Thread(target=busy, daemon=True) if args.busy_thread else None
    if busy_thread:
        busy_thread.start()
    try:
        start = perf()
        for i, entry in enumerate(entries):
            if i - completed[0] >= args.outstanding:
                # The harness must cost less than the bookie: block only when the window is full.
                with window_open:
                    waiting[0] = True
                    while i - completed[0] >= args.outstanding:
                        window_open.wait(0.1)
                    waiting[0] = False
            sent[i] = perf()
            bookie.add_entry(entry, key, partial(done, i))
        with window_open:
            while completed[0] < n:
                window_open.wait(0.1)
        elapsed = perf() - start
    finally:
        stop_busy.set()
        bookie.stop()
        if not args.dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    lat = sorted(latencies)
    return {
        "entries": len(entries), "entry_size": args.size, "errors": len(errors),
        "adds_per_s": len(entries) / elapsed, "mb_per_s": len(entries) * args.size / elapsed / 1e6,
        **percentiles_ms(lat, (50, 99, 99.9), 4), "busy_thread": bool(args.busy_thread),
        "switch_interval_ms": sys.getswitchinterval() * 1e3,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir")
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--ledgers", type=int, default=10)
    parser.add_argument("--outstanding", type=int, default=5000)
    parser.add_argument("--busy-thread", action="store_true")
    parser.add_argument("--switch-interval-ms", type=float, default=0.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['adds_per_s']:,.0f} adds/s ({result['mb_per_s']:,.0f} MB/s) of {args.size} B, "
              f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, p99.9 {result['p999_ms']:.2f} ms, "
              f"errors {result['errors']}, busy thread {result['busy_thread']}, "
              f"switch interval {result['switch_interval_ms']:.2f} ms")


if __name__ == "__main__":
    main()
