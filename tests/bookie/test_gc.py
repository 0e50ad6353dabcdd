"""Garbage collection on a real Bookie (DbLedgerStorage, real entry logs and RocksDB): ledgers deleted in the
metadata source leave the bookie, dead entry logs are removed, mostly-dead ones compacted, live data survives."""

import os
import threading
import time
from pathlib import Path

import pytest

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, encode_entry, master_key, peek_entry_ids
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKNoSuchLedgerExistsException

KEY = master_key(b"gc")
# The storage under test (both storages implement the GC contract): BKFAST_LEDGER_STORAGE=SortedLedgerStorage
STORAGE_CLASS = os.environ.get("BKFAST_LEDGER_STORAGE", "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage")


class LedgerSet:
    """The metadata store in miniature: a real set of the (scope, ledger) pairs that exist, answering
    `ledgers_exist` as a MetadataDriver does (or failing, as an unreachable store does)."""

    def __init__(self, ledgers):
        self.ledgers = set(ledgers)
        self.unreachable = False
        self.asked = 0

    def ledgers_exist(self, ledgers):
        self.asked += 1
        if self.unreachable:
            raise ConnectionError("metadata store unreachable")
        return {x for x in ledgers if (x.scope_id, x.ledger_id) in self.ledgers}


def gc_conf(tmp_path, **overrides):
    return ServerConfiguration({
        "journalDirectories": [str(tmp_path / "journal")],
        "ledgerDirectories": [str(tmp_path / "ledgers")],
        "ledgerStorageClass": STORAGE_CLASS,
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 4,
        "logSizeLimit": 1 << 20,
        "compactionRate": 1_000_000,
        **overrides,
    })


def make_entry(ledger, entry_id, size, scope_id=0):
    payload = bytes([(ledger * 31 + entry_id) % 251]) * size
    return encode_entry(ledger, entry_id, entry_id - 1, size * (entry_id + 1), payload, DigestType.CRC32C, b"",
                        scope_id)


def add_all(bookie, entries):
    """Add entries with many in flight; return once all are acknowledged (raise the first error)."""
    done = threading.Semaphore(0)
    errors = []

    def callback(error):
        if error is not None:
            errors.append(error)
        done.release()

    for e in entries:
        bookie.add_entry(e, KEY, callback)
    for _ in entries:
        assert done.acquire(timeout=30), "an add was never acknowledged"
    if errors:
        raise errors[0]


def entry_logs(ledger_dir: Path) -> dict[int, int]:
    current = ledger_dir / "current"
    return {int(n[:-4], 16): (current / n).stat().st_size for n in os.listdir(current) if n.endswith(".log")}


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ledgers_in_log(bookie, log_id) -> set[int]:
    logger = bookie.storage.entry_loggers()[0]
    return {r.ledger_id for r in logger.scan_records(log_id, with_data=False)}


def test_gc_acceptance_50_ledgers_delete_40_dead_logs_removed_rest_compacted_live_data_intact(tmp_path):
    live = set(range(0, 50, 5))
    source = LedgerSet((0, lid) for lid in range(50))
    conf = gc_conf(tmp_path)
    bookie = Bookie(conf, ledger_exists_source=source)
    bookie.start()
    try:
        # Phase 1: only doomed ledgers, so some logs hold nothing that will survive.
        expected = {}
        phase1 = [make_entry(lid, e, 4000) for lid in range(50) if lid not in live for e in range(25)]
        add_all(bookie, phase1)
        bookie.checkpoint()
        # Phase 2: every ledger, so the later logs mix live and deleted data (a fifth live).
        phase2 = [make_entry(lid, e, 4000) for lid in range(50) for e in range(25, 35)]
        add_all(bookie, phase2)
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        for e in phase1 + phase2:
            _, _, lid, eid = peek_entry_ids(e)
            expected[(lid, eid)] = e
        logs_before = entry_logs(tmp_path / "ledgers")
        assert len(logs_before) >= 5
        only_dead = {lid for lid in logs_before if not ledgers_in_log(bookie, lid) & live}
        mixed = set(logs_before) - only_dead
        assert only_dead and mixed, (only_dead, mixed)
        usage_before = tree_bytes(tmp_path / "ledgers")

        source.ledgers -= {(0, lid) for lid in range(50) if lid not in live}
        stats = bookie.gc.run_once(force_major=True)

        assert sorted(bookie.storage.list_ledgers()) == sorted(live)
        logs_after = entry_logs(tmp_path / "ledgers")
        assert not only_dead & set(logs_after), f"logs with only deleted data survived: {only_dead & set(logs_after)}"
        assert not mixed & set(logs_after), f"mixed logs under the threshold survived: {mixed & set(logs_after)}"
        assert stats is not None and stats.logs_compacted == len(mixed)
        assert stats.entries_copied == len(live) * 10  # every live entry copied exactly once
        for (lid, eid), data in expected.items():
            if lid in live:
                assert bookie.read_entry(lid, eid) == data, f"ledger {lid} entry {eid} differs after GC"
            else:
                with pytest.raises(BKNoSuchLedgerExistsException):
                    bookie.read_entry(lid, eid)
        bookie.checkpoint()
        usage_after = tree_bytes(tmp_path / "ledgers")
        assert usage_after <= 0.3 * usage_before, f"disk usage {usage_before} -> {usage_after} bytes"
        state = bookie.gc_state()
        assert state["ledgers_deleted"] == 40
        assert state["logs_deleted"] == len(only_dead)
        assert state["logs_compacted"] == len(mixed)
        assert state["bytes_reclaimed"] >= 0.7 * sum(logs_before.values())
        assert state["last_gc_time"] is not None and state["last_major_compaction_time"] is not None
    finally:
        bookie.stop()

    # The relocated entries are found after a restart too (the index update was durable).
    bookie = Bookie(conf, ledger_exists_source=source)
    bookie.start()
    try:
        for (lid, eid), data in expected.items():
            if lid in live:
                assert bookie.read_entry(lid, eid) == data, f"ledger {lid} entry {eid} differs after restart"
        assert not set(entry_logs(tmp_path / "ledgers")) & (only_dead | mixed)
    finally:
        bookie.stop()


def test_failed_metadata_read_deletes_nothing(tmp_path):
    source = LedgerSet(set())
    source.unreachable = True
    bookie = Bookie(gc_conf(tmp_path), ledger_exists_source=source)
    bookie.start()
    try:
        add_all(bookie, [make_entry(lid, e, 1000) for lid in range(5) for e in range(20)])
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        before = entry_logs(tmp_path / "ledgers")
        bookie.gc.run_once(force_major=True)
        assert source.asked >= 1
        assert bookie.storage.list_ledgers() == [0, 1, 2, 3, 4]
        assert entry_logs(tmp_path / "ledgers") == before
        assert bookie.read_entry(3, 19) == make_entry(3, 19, 1000)
    finally:
        bookie.stop()


def test_without_a_metadata_source_gc_still_reclaims_ledgers_deleted_on_the_bookie(tmp_path):
    bookie = Bookie(gc_conf(tmp_path))
    bookie.start()
    try:
        add_all(bookie, [make_entry(lid, e, 3000) for lid in range(4) for e in range(100)])
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        before = entry_logs(tmp_path / "ledgers")
        for lid in (0, 1, 2):
            bookie.delete_ledger(lid)
        bookie.gc.run_once(force_major=True)
        after = entry_logs(tmp_path / "ledgers")
        assert sum(after.values()) < 0.4 * sum(before.values()), (before, after)
        assert bookie.storage.list_ledgers() == [3]
        for e in range(100):
            assert bookie.read_entry(3, e) == make_entry(3, e, 3000)
    finally:
        bookie.stop()


def test_the_current_entry_log_is_never_removed_even_when_all_its_data_is_dead(tmp_path):
    source = LedgerSet({(0, 1)})
    bookie = Bookie(gc_conf(tmp_path), ledger_exists_source=source)
    bookie.start()
    try:
        add_all(bookie, [make_entry(1, e, 500) for e in range(10)])
        bookie.checkpoint()
        current = bookie.storage.entry_loggers()[0].current_log_id
        assert current is not None
        source.ledgers.clear()
        bookie.gc.run_once(force_major=True)
        assert bookie.storage.list_ledgers() == []
        assert current in entry_logs(tmp_path / "ledgers")
        assert bookie.gc_state()["logs_deleted"] == 0
    finally:
        bookie.stop()


def test_scoped_ledgers_are_collected_and_compacted_like_classic_ones(tmp_path):
    source = LedgerSet({(7, 1), (7, 2), (0, 1)})
    bookie = Bookie(gc_conf(tmp_path), ledger_exists_source=source)
    bookie.start()
    try:
        entries = ([make_entry(1, e, 2000, scope_id=7) for e in range(100)]
                   + [make_entry(2, e, 2000, scope_id=7) for e in range(100)]
                   + [make_entry(1, e, 2000) for e in range(100)])
        add_all(bookie, entries)
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        before = sum(entry_logs(tmp_path / "ledgers").values())
        source.ledgers.discard((7, 2))
        source.ledgers.discard((0, 1))
        bookie.gc.run_once(force_major=True)
        assert bookie.storage.all_ledgers() == [(7, 1)]
        after = sum(entry_logs(tmp_path / "ledgers").values())
        assert after < 0.45 * before, (before, after)
        for e in range(100):
            assert bookie.read_entry(1, e, scope_id=7) == make_entry(1, e, 2000, scope_id=7)
        with pytest.raises(BKNoSuchLedgerExistsException):
            bookie.read_entry(2, 0, scope_id=7)
        ratios = [x["live_ratio"] for x in bookie.gc_state()["logs"]]
        assert all(r >= 0.8 for r in ratios), ratios
    finally:
        bookie.stop()


def test_gc_thread_runs_every_gc_wait_time(tmp_path):
    source = LedgerSet({(0, 1), (0, 2)})
    bookie = Bookie(gc_conf(tmp_path, gcWaitTime=100), ledger_exists_source=source)
    bookie.start()
    try:
        add_all(bookie, [make_entry(1, e, 4000) for e in range(300)])
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        add_all(bookie, [make_entry(2, 0, 100)])
        assert entry_logs(tmp_path / "ledgers")
        source.ledgers.discard((0, 1))
        deadline = time.monotonic() + 10
        while bookie.storage.ledger_exists(1) or bookie.gc_state()["logs_deleted"] == 0:
            assert time.monotonic() < deadline, f"GC thread did not collect: {bookie.gc_state()}"
            time.sleep(0.05)
        assert bookie.gc_state()["cycles"] >= 1
        assert bookie.read_entry(2, 0) == make_entry(2, 0, 100)
    finally:
        bookie.stop()


class ReactorLedgerSet(LedgerSet):
    """Answers like a real MetadataDriver: only in the reactor thread, later, through a Deferred."""

    def ledgers_exist(self, ledgers):
        from twisted.internet import defer
        from twisted.python.threadable import isInIOThread

        from tests.reactor_thread import reactor

        assert isInIOThread(), "a MetadataDriver must be called in the reactor thread"
        d = defer.Deferred()

        def answer():
            try:
                d.callback(LedgerSet.ledgers_exist(self, ledgers))
            except ConnectionError as e:
                d.errback(e)

        reactor.callLater(0.01, answer)
        return d


def test_a_deferred_answering_source_is_asked_in_the_reactor_thread(tmp_path):
    from tests.reactor_thread import reactor

    assert reactor.running
    source = ReactorLedgerSet({(0, 1), (0, 2)})
    bookie = Bookie(gc_conf(tmp_path), ledger_exists_source=source)
    bookie.start()
    try:
        add_all(bookie, [make_entry(lid, e, 1000) for lid in (1, 2) for e in range(10)])
        bookie.checkpoint()
        source.unreachable = True
        bookie.gc.run_once()
        assert bookie.storage.list_ledgers() == [1, 2]  # a failed Deferred deletes nothing
        source.unreachable = False
        source.ledgers.discard((0, 2))
        bookie.gc.run_once()
        assert bookie.storage.list_ledgers() == [1]
        assert source.asked == 2
    finally:
        bookie.stop()
