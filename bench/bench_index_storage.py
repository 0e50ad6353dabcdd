"""Index lookups and Bookie.add throughput: file-based index (Sorted/Interleaved) vs DbLedgerStorage.

    .venv/bin/python bench/bench_index_storage.py [--ledgers 20] [--entries 5000] [--lookups 50000]
        [--adds 30000] [--size 1024] [--dir /tmp/x] [--json]

For each storage it writes ledgers x entries entries (100-byte payloads), flushes and closes, then on a
freshly opened storage measures:
  * index lookups (`entry_location`: the location of an existing entry) cold (freshly opened storage,
    one key per ledger and 1024-entry page in random order, so each lookup needs an index page or
    RocksDB block not yet in memory; the OS page cache is NOT dropped) and warm (uniformly random keys
    once everything is cached, best of 3 passes);
  * reads of existing entries (`get_entry`: index lookup + entry-log pread), cold and warm likewise;
  * Bookie.add throughput: --adds entries of --size bytes, 1000 in flight, journal fdatasync on.
Printed first: the file-based figures as a ratio to DbLedgerStorage measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

from bkfast.bookie.bookie import Bookie
from bkfast.bookie.storage_factory import open_ledger_storage
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.conf import ServerConfiguration

STORAGES = {
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
}


def make_conf(data_dir: str, storage: str) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [os.path.join(data_dir, "journal")],
        "ledgerDirectories": [os.path.join(data_dir, "ledgers")],
        "ledgerStorageClass": STORAGES[storage],
        "dbStorage_writeCacheMaxSizeMb": 256,
        "dbStorage_readAheadCacheMaxSizeMb": 64,
    })


def lookups(storage, keys) -> float:
    t0 = time.perf_counter()
    for ledger, entry_id in keys:
        if storage.entry_location(0, ledger, entry_id) is None:
            raise AssertionError(f"entry {entry_id} of ledger {ledger} has no location")
    return len(keys) / (time.perf_counter() - t0)


def reads(storage, keys) -> float:
    t0 = time.perf_counter()
    for ledger, entry_id in keys:
        storage.get_entry(ledger, entry_id)
    return len(keys) / (time.perf_counter() - t0)


def index_bench(root: str, storage: str, args) -> dict:
    conf = make_conf(root, storage)
    dirs = [os.path.join(root, "ledgers")]
    s = open_ledger_storage(conf, dirs, None)
    payload = os.urandom(100)
    for ledger in range(args.ledgers):
        s.set_master_key(ledger, b"k" * 20)
    t0 = time.perf_counter()
    for e in range(args.entries):
        for ledger in range(args.ledgers):
            s.add_entry(encode_entry(ledger, e, e - 1, 100, payload, DigestType.CRC32C))
    s.flush()
    load_rate = args.ledgers * args.entries / (time.perf_counter() - t0)
    s.close()
    rng = random.Random(1)
    # Cold: one key per (ledger, 1024-entry index page), random order, first pass after opening, so
    # every lookup needs an index page (or RocksDB block) not yet in memory. Warm: uniform random keys
    # once everything is cached; best of 3 passes.
    cold_keys = [(ledger, min(args.entries - 1, page + rng.randrange(1024)))
                 for ledger in range(args.ledgers) for page in range(0, args.entries, 1024)]
    rng.shuffle(cold_keys)
    warm_keys = [(rng.randrange(args.ledgers), rng.randrange(args.entries)) for _ in range(args.lookups)]
    out = {"load_entries_per_s": load_rate}
    for name, fn in (("lookup", lookups), ("read", reads)):
        s = open_ledger_storage(conf, dirs, None)
        try:
            out[f"{name}_cold_per_s"] = fn(s, cold_keys)
            fn(s, warm_keys)
            out[f"{name}_warm_per_s"] = max(fn(s, warm_keys) for _ in range(3))
        finally:
            s.close()
    return out


def add_bench(root: str, storage: str, args) -> float:
    bookie = Bookie(make_conf(root, storage))
    bookie.start()
    key = master_key(b"bench")
    payload = os.urandom(max(1, args.size - 36))
    entries = [encode_entry(i % 10, i // 10, i // 10 - 1, len(payload), payload, DigestType.CRC32C)
               for i in range(args.adds)]
    window = threading.BoundedSemaphore(1000)
    done = threading.Semaphore(0)
    errors: list[BaseException] = []

    def callback(error):
        if error is not None:
            errors.append(error)
        window.release()
        done.release()

    try:
        t0 = time.perf_counter()
        for e in entries:
            window.acquire()
            bookie.add_entry(e, key, callback)
        for _ in entries:
            done.acquire()
        rate = len(entries) / (time.perf_counter() - t0)
    finally:
        bookie.stop()
    if errors:
        raise errors[0]
    return rate


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ledgers", type=int, default=50)
    p.add_argument("--entries", type=int, default=20000)
    p.add_argument("--lookups", type=int, default=50000)
    p.add_argument("--adds", type=int, default=30000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dir")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="bkfast-bench-index-")
    results: dict[str, dict] = {}
    try:
        for storage in STORAGES:
            results[storage] = index_bench(os.path.join(base, storage, "index"), storage, args)
            results[storage]["bookie_add_per_s"] = add_bench(os.path.join(base, storage, "add"), storage, args)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    metrics = list(results["db"])
    print("ratio to DbLedgerStorage (same run):")
    for storage in ("sorted", "interleaved"):
        print(f"  {storage:12s} " + "  ".join(f"{m}={results[storage][m] / results['db'][m]:.2f}x" for m in metrics))
    print("absolute (operations/s):")
    for storage, r in results.items():
        print(f"  {storage:12s} " + "  ".join(f"{m}={r[m]:,.0f}" for m in metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
