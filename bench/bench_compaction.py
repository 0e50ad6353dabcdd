"""Compaction throughput: MB/s of entry logs compacted by the garbage collector (DbLedgerStorage, real files).

    .venv/bin/python bench/bench_compaction.py [--dir /tmp] [--mb 128] [--entry-size 4096] [--live 0.5]

Writes `--mb` MB of entries to `--ledgers` ledgers (entry logs of 16 MiB), deletes all but a `--live`
fraction of the ledgers in the metadata source, and times one forced major compaction (unthrottled:
compactionRate=0): MB of logs processed per second (scanned + live entries copied + index updated + log
removed) and MB/s of live data copied. The baseline, measured in the same run on the same machine, copies
the same live bytes with plain Python (read the logs, write one file, fdatasync): the first line is
compaction / baseline, then the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bkfast.bookie.gc import GarbageCollector
from bkfast.bookie.settings import GcSettings
from bkfast.codec import DigestType, encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage

MiB = 1 << 20


class LiveLedgers:
    def __init__(self, ledgers):
        self.ledgers = set(ledgers)

    def ledgers_exist(self, ledgers):
        return {x for x in ledgers if (x.scope_id, x.ledger_id) in self.ledgers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--entry-size", type=int, default=4096)
    parser.add_argument("--ledgers", type=int, default=100)
    parser.add_argument("--live", type=float, default=0.5, help="fraction of ledgers kept")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-compaction-", dir=args.dir))
    try:
        conf = ServerConfiguration({
            "journalDirectories": [str(root / "journal")],
            "ledgerDirectories": [str(root / "ledgers")],
            "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
            "dbStorage_writeCacheMaxSizeMb": 64,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "logSizeLimit": 16 * MiB,
            "compactionRate": 0,
        })
        storage = DbLedgerStorage.from_conf([root / "ledgers"], None, conf)
        payload = os.urandom(args.entry_size)
        count = args.mb * MiB // (args.entry_size + 60)
        for lid in range(args.ledgers):
            storage.set_master_key(lid, b"k" * 20)
        t0 = time.perf_counter()
        for i in range(count):
            lid, eid = i % args.ledgers, i // args.ledgers
            storage.add_entry(encode_entry(lid, eid, eid - 1, 0, payload, DigestType.DUMMY, b""))
        storage.flush()
        for logger in storage.entry_loggers():
            logger.roll()
            logger.flush()
        write_s = time.perf_counter() - t0
        keep = max(1, int(args.ledgers * args.live))
        source = LiveLedgers((0, lid) for lid in range(0, args.ledgers, max(1, args.ledgers // keep)))
        logs_dir = root / "ledgers" / "current"
        logs_before = {n: (logs_dir / n).stat().st_size for n in os.listdir(logs_dir) if n.endswith(".log")}
        total_mb = sum(logs_before.values()) / MiB

        gc = GarbageCollector(storage, GcSettings.from_conf(conf), source)
        t0 = time.perf_counter()
        stats = gc.run_once(force_major=True)
        gc_s = time.perf_counter() - t0
        copied_mb = stats.bytes_copied / MiB

        # Baseline: the same live bytes copied by plain Python, read + write + fdatasync.
        base_dir = root / "baseline"
        base_dir.mkdir()
        shutil.copytree(logs_dir, base_dir / "src", ignore=shutil.ignore_patterns("*.log.*", "lastId"))
        srcs = sorted((base_dir / "src").glob("*.log"))
        t0 = time.perf_counter()
        left = stats.bytes_copied
        fd = os.open(base_dir / "out", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for src in srcs:
                with open(src, "rb") as f:
                    while left > 0:
                        chunk = f.read(min(MiB, left))
                        if not chunk:
                            break
                        os.write(fd, chunk)
                        left -= len(chunk)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        base_s = time.perf_counter() - t0
        storage.close()

        rate = total_mb / gc_s
        copy_rate = copied_mb / gc_s
        base_rate = copied_mb / base_s if base_s > 0 else float("inf")
        print(f"compaction / plain-python copy of the live bytes: {copy_rate / base_rate:.3f}")
        print(f"entry logs: {len(logs_before)} x 16 MiB, {total_mb:.1f} MB written in {write_s:.2f} s; "
              f"{len(source.ledgers)}/{args.ledgers} ledgers live, entry {args.entry_size} B")
        print(f"gc + major compaction: {gc_s:.2f} s, {rate:.1f} MB/s of entry logs processed, "
              f"{copy_rate:.1f} MB/s live data copied ({copied_mb:.1f} MB, {stats.entries_copied} entries, "
              f"{stats.logs_compacted} logs compacted, {gc.state()['bytes_reclaimed'] / MiB:.1f} MB reclaimed)")
        print(f"baseline plain copy: {base_rate:.1f} MB/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
