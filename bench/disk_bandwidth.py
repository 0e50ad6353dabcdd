"""The disk's sequential write bandwidth, plain and in the bookie's shape, for issue 4's 16 KiB target.

    .venv/bin/python bench/disk_bandwidth.py [--dir /tmp] [--mb 2048] [--runs 3]

`single`: one file, 1 MiB writes, one fdatasync at the end (what `dd bs=1M conv=fdatasync` measures).
`bookie`: the bookie's double write on one file system, at once: a journal stream (1 MiB writes, each
fdatasync'ed, as group commits) and an entry-log stream (1 MiB writes, fdatasync every 512 MiB, as
write-cache flushes), each writing --mb. Its `user_mb_per_s` (bytes of ONE stream / wall time) is the
most a bookie could acknowledge: every entry is written twice. The `*_direct` columns are the same with
O_DIRECT (page-aligned buffer): on a VM the buffered columns can be bound by the CPU copying into the page
cache rather than by the disk (here: 436 MB/s buffered at 73% of a core, 1.0-1.5 GB/s O_DIRECT at 10-25%),
so the direct ones are the disk's own bandwidth. Prints one JSON line per run and medians.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import tempfile
import threading
import time

CHUNK = 1 << 20


def _stream(path: str, total: int, sync_every: int, direct: bool = False) -> None:
    buf = mmap.mmap(-1, CHUNK)          # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(CHUNK))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    try:
        written = since_sync = 0
        while written < total:
            os.write(fd, buf)
            written += CHUNK
            since_sync += CHUNK
            if since_sync >= sync_every:
                os.fdatasync(fd)
                since_sync = 0
        os.fdatasync(fd)
    finally:
        os.close(fd)
        os.unlink(path)


def single(d: str, total: int, direct: bool = False) -> float:
    t0 = time.perf_counter()
    _stream(os.path.join(d, "single"), total, total, direct)
    return total / (time.perf_counter() - t0) / 1e6


def bookie(d: str, total: int, direct: bool = False) -> float:
    threads = [threading.Thread(target=_stream, args=(os.path.join(d, "journal"), total, CHUNK, direct)),
               threading.Thread(target=_stream, args=(os.path.join(d, "entrylog"), total, 512 << 20, direct))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total / (time.perf_counter() - t0) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--mb", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bkfast-disk-", dir=args.dir)
    total = args.mb << 20
    rows = []
    try:
        for _ in range(args.runs):
            row = {"single_mb_per_s": round(single(d, total), 1), "bookie_user_mb_per_s": round(bookie(d, total), 1),
                   "single_direct_mb_per_s": round(single(d, total, True), 1),
                   "bookie_direct_user_mb_per_s": round(bookie(d, total, True), 1),
                   "loadavg": open("/proc/loadavg").read().split()[0]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        os.rmdir(d)
    print("MEDIANS", json.dumps({k: statistics.median(r[k] for r in rows)
                                 for k in ("single_mb_per_s", "bookie_user_mb_per_s", "single_direct_mb_per_s",
                                           "bookie_direct_user_mb_per_s")}))


if __name__ == "__main__":
    main()
