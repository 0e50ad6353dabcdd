"""DbLedgerStorage microbenchmarks (pytest-benchmark) on real files and RocksDB.

Run: .venv/bin/pytest bench/test_dbstorage_bench.py --benchmark-only
Each round handles BATCH entries; divide BATCH by the round time for entries/s (stored in extra_info).
Compare the cold-read and warm-read groups for the cache speedup (the machine-independent figure).
"""

from __future__ import annotations

import itertools
import os
import random

import pytest

from bkfast.codec import DigestType, encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage

BATCH = 10_000
PAYLOAD = os.urandom(1024 - 36)   # 1 KiB stored entries (32-byte header + 4-byte CRC32C digest)
LEDGERS = 8
READ_ENTRIES = 50_000


def _entries(ledger_id: int, first: int, count: int) -> list[bytes]:
    return [encode_entry(ledger_id, e, e - 1, 1024 * (e + 1), PAYLOAD, DigestType.CRC32C)
            for e in range(first, first + count)]


def _storage(path, **overrides) -> DbLedgerStorage:
    values = {"dbStorage_writeCacheMaxSizeMb": 512, "dbStorage_readAheadCacheMaxSizeMb": 256}
    values.update(overrides)
    return DbLedgerStorage.from_conf([path], None, ServerConfiguration(values))


def _rate(benchmark, count: int) -> None:
    benchmark.extra_info["entries"] = count
    if benchmark.stats is not None:
        benchmark.extra_info["entries_per_s"] = round(count / benchmark.stats.stats.median)


@pytest.mark.parametrize("with_flush", [False, True], ids=["write-cache-only", "add+flush(fsync)"])
def test_add_entry_1kib(benchmark, tmp_path, with_flush):
    storage = _storage(tmp_path / "s")
    next_id = itertools.count(0, BATCH)
    for lid in range(LEDGERS):
        storage.set_master_key(lid, b"k" * 20)

    def prepare():
        first = next(next_id)
        # Round-robin over ledgers, as a bookie sees interleaved writers.
        runs = [_entries(lid, first, BATCH // LEDGERS) for lid in range(LEDGERS)]
        entries = [e for batch in zip(*runs, strict=True) for e in batch]
        storage.flush()  # every round starts with an empty write cache
        return (entries,), {}

    def run(entries):
        add = storage.add_entry
        for e in entries:
            add(e)
        if with_flush:
            storage.flush()

    benchmark.group = "add-1KiB"
    benchmark.pedantic(run, setup=prepare, rounds=8, iterations=1)
    _rate(benchmark, BATCH)
    storage.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A storage directory holding READ_ENTRIES 1 KiB entries over LEDGERS ledgers, flushed and closed."""
    path = tmp_path_factory.mktemp("dbstorage-read")
    storage = _storage(path)
    per = READ_ENTRIES // LEDGERS
    for lid in range(LEDGERS):
        storage.set_master_key(lid, b"k" * 20)
        for e in _entries(lid, 0, per):
            storage.add_entry(e)
    storage.close()
    return path, per


def _random_keys(per: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(LEDGERS), rng.randrange(per)) for _ in range(BATCH)]


def test_random_read_cold_index_and_pread(benchmark, filled):
    path, per = filled
    # No read-ahead cache: every read is a RocksDB point lookup plus a pread of the entry log.
    storage = _storage(path, dbStorage_readAheadCacheMaxSizeMb=0)
    seeds = itertools.count()

    def run(keys):
        get = storage.get_entry
        for lid, eid in keys:
            get(lid, eid)

    benchmark.group = "read-1KiB-random"
    benchmark.pedantic(run, setup=lambda: ((_random_keys(per, next(seeds)),), {}), rounds=8, iterations=1)
    _rate(benchmark, BATCH)
    storage.close()


def test_random_read_cold_with_read_ahead(benchmark, filled):
    path, per = filled
    # Java's default behaviour: each miss also reads the next 100 entries of the ledger into the cache;
    # later reads of a round hit what earlier misses brought in (10k reads over 50k entries).
    storage = _storage(path)
    seeds = itertools.count(1000)

    def run(keys):
        get = storage.get_entry
        for lid, eid in keys:
            get(lid, eid)

    def prepare():
        storage.directories[0]._read_cache.clear()  # every round starts cold
        return (_random_keys(per, next(seeds)),), {}

    benchmark.group = "read-1KiB-random"
    benchmark.pedantic(run, setup=prepare, rounds=5, iterations=1)
    _rate(benchmark, BATCH)
    storage.close()


def test_random_read_warm_read_ahead_cache(benchmark, filled):
    path, per = filled
    storage = _storage(path)
    for lid in range(LEDGERS):   # sequential pass: read-ahead brings every entry into the cache
        for eid in range(per):
            storage.get_entry(lid, eid)
    seeds = itertools.count(2000)

    def run(keys):
        get = storage.get_entry
        for lid, eid in keys:
            get(lid, eid)

    benchmark.group = "read-1KiB-random"
    benchmark.pedantic(run, setup=lambda: ((_random_keys(per, next(seeds)),), {}), rounds=8, iterations=1)
    _rate(benchmark, BATCH)
    storage.close()


def test_sequential_read_with_read_ahead(benchmark, filled):
    path, per = filled
    storage = _storage(path)
    ledgers = itertools.cycle(range(LEDGERS))

    def run(lid):
        get = storage.get_entry
        for eid in range(per):
            get(lid, eid)

    def prepare():
        storage.directories[0]._read_cache.clear()
        return (next(ledgers),), {}

    benchmark.group = "read-1KiB-sequential"
    benchmark.pedantic(run, setup=prepare, rounds=6, iterations=1)
    _rate(benchmark, per)
    storage.close()
