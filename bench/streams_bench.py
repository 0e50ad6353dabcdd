"""Records/s of the named log streams API on one client (issue 15's goal: >= 1,000,000 records/s of
100 B records written and read, thanks to batching).

Starts a local ZooKeeper + 3 bookies (or uses --metadata-uri), creates a stream, and in the client's
reactor thread:
  * write_many: N records of `--size` bytes, submitted in chunks of 10,000 with up to 8 chunks
    unacknowledged; timed until the last record is acknowledged (E3 W2 A2);
  * write:      M records one `write()` call each (one Deferred and one DLSN per record);
  * read:       the N records back with `read_entries` (decoded batches, values materialized as bytes),
    and the first M with `read` (one Record object per record).
Prints the batched-vs-per-record ratio first, then records/s and MB/s.

    python bench/streams_bench.py [--records 2000000] [--size 100] [--metadata-uri zk+...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


async def bench(ns, name: str, records: int, single: int, size: int, batch_bytes: int) -> dict:
    from twisted.internet import defer

    from bkfast.streams import EARLIEST

    value = bytes(range(256)) * (size // 256 + 1)
    values = [value[i % 200:i % 200 + size] for i in range(10000)]
    out = {}
    w = await ns.open_writer(name, max_batch_bytes=batch_bytes, max_batch_records=100000, linger_ms=1,
                             max_inflight_batches=128)
    started = time.perf_counter()
    window = []
    for _ in range(records // 10000):
        window.append(w.write_many(values))
        if len(window) >= 8:
            await window.pop(0)
    for d in window:
        await d
    out["write_many_s"] = time.perf_counter() - started
    started = time.perf_counter()
    ds = [w.write(values[i % 10000]) for i in range(single)]
    await defer.gatherResults(ds)
    out["write_s"] = time.perf_counter() - started
    await w.close()

    r = await ns.open_reader(name, EARLIEST)
    started = time.perf_counter()
    n = 0
    while n < records + single:
        entries = await r.read_entries(256, 1000)
        for e in entries:
            n += len(e.batch.values(e.first_slot))
    out["read_entries_s"] = time.perf_counter() - started
    out["read_n"] = n
    r = await ns.open_reader(name, EARLIEST)
    started = time.perf_counter()
    m = 0
    while m < single:
        m += len(await r.read(10000, 1000))
    out["read_s"] = time.perf_counter() - started
    out["read_m"] = m
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--single", type=int, default=200_000, help="records written with one write() each")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch-bytes", type=int, default=256 * 1024)
    p.add_argument("--metadata-uri", default=None)
    args = p.parse_args(argv)

    from bkfast.client.blocking import call_in_reactor as _wait
    from bkfast.reactor import start_reactor_thread
    from bkfast.streams import AsyncNamespace

    workdir = Path(tempfile.mkdtemp(prefix="bkfast-streams-bench-"))
    sandbox = None
    uri = args.metadata_uri
    if uri is None:
        from bkfast.cli.sandbox import Sandbox

        sandbox = Sandbox(workdir, 3, True, None)
        sandbox.start()
        uri = sandbox.metadata_uri
    start_reactor_thread()
    try:
        ns = _wait(60, AsyncNamespace.connect, uri, None, throttle=0)
        name = f"bench-{int(time.time())}"
        _wait(60, ns.create_stream, name)
        r = _wait(3600, lambda: __import__("twisted.internet.defer", fromlist=["x"]).ensureDeferred(
            bench(ns, name, args.records, args.single, args.size, args.batch_bytes)))
        n, m, mb = args.records, args.single, args.records * args.size / 1e6
        print(f"{args.size} B records, batches of up to {args.batch_bytes // 1024} KiB, E3 W2 A2, 3 local bookies:")
        ratio = (n / r["write_many_s"]) / (m / r["write_s"])
        print(f"  write_many: {n / r['write_many_s']:>12,.0f} records/s {mb / r['write_many_s']:7.1f} MB/s   "
              f"({r['write_many_s'] / n * 1e6:.2f} us/record; {ratio:.1f}x per-record write())")
        print(f"  write():    {m / r['write_s']:>12,.0f} records/s (one Deferred + DLSN each)")
        print(f"  read_entries (batches, values as bytes): {r['read_n'] / r['read_entries_s']:>12,.0f} records/s")
        print(f"  read() (one Record each):                {r['read_m'] / r['read_s']:>12,.0f} records/s")
        _wait(60, ns.delete_stream, name)
        _wait(60, ns.close)
    finally:
        if sandbox is not None:
            sandbox.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
