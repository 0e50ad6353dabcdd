"""A running bookie's threads carry their names into the kernel (issue "every core", point 3): `top -H`
and bench/thread_cpu_scaling.py tell the reactor, each journal, each flush thread and the read pool apart.
A real `bkfast bookie` process with two journal dirs and two ledger dirs; its /proc/<pid>/task/*/comm."""

from __future__ import annotations

import collections

from bkfast.cli.local_cluster import LocalBookie
from bkfast.stats.thread_cpu import sample
from tests.waiting import wait_until


def test_every_bookie_thread_has_its_own_name(tmp_path):
    journals = f"{tmp_path / 'journal0'},{tmp_path / 'journal1'}"
    ledgers = f"{tmp_path / 'ledgers0'},{tmp_path / 'ledgers1'}"
    bookie = LocalBookie(tmp_path, 0, extra_conf={
        "journalDirectories": journals, "ledgerDirectories": ledgers, "numReadWorkerThreads": "3",
        "numAddWorkerThreads": "1"}).start()
    try:
        names: collections.Counter = collections.Counter()

        def named() -> bool:
            names.clear()
            names.update(t.name for t in sample(bookie.pid).values())
            return "bookie-io" in names
        wait_until("the reactor thread named bookie-io", named)
        for name in ("bookie-io", "add-worker-0", "journal-0", "journal-1", "flush-0", "flush-1", "read-0",
                     "read-1", "read-2", "bookie-sync", "bookie-gc", "disk-check"):
            assert names[name] == 1, (name, names)
        assert "read-3" not in names
        # Python's threads are all named by bkfast; what is left is native: RocksDB's pool names its threads
        # `rocksdb:*`, and its timer thread keeps the interpreter's name.
        unnamed = {n: c for n, c in names.items() if n.startswith(("python", "bkfast"))}
        assert sum(unnamed.values()) <= 1, names
    finally:
        bookie.stop(30)
