"""Compaction on real entry logs and RocksDB: what is live, thresholds and schedules, throttling, time bounds,
reads and deletions racing a compaction."""

import threading
import time
from dataclasses import replace

from bkfast.bookie.bookie import Bookie
from bkfast.bookie.compaction import Throttle
from tests.bookie.test_gc import LedgerSet, add_all, entry_logs, gc_conf, make_entry


def start_bookie(tmp_path, source=None, **overrides):
    bookie = Bookie(gc_conf(tmp_path, **overrides), ledger_exists_source=source)
    bookie.start()
    return bookie


def finish_logs(bookie):
    bookie.checkpoint()
    bookie.storage.entry_loggers()[0].roll()


def test_only_the_copy_the_index_points_at_is_copied(tmp_path):
    bookie = start_bookie(tmp_path)
    try:
        add_all(bookie, [make_entry(1, e, 1000) for e in range(20)])
        finish_logs(bookie)
        (old_log,) = entry_logs(tmp_path / "ledgers")
        add_all(bookie, [make_entry(1, e, 1000) for e in range(20)])  # same entries again: a newer copy
        finish_logs(bookie)
        logger = bookie.storage.entry_loggers()[0]
        assert bookie.gc.compactor.compact_log(logger, old_log, Throttle(0, False)) is True
        assert old_log not in entry_logs(tmp_path / "ledgers")
        assert logger.current_log_id is None  # nothing was copied: the index points at the newer copies
        for e in range(20):
            assert bookie.read_entry(1, e) == make_entry(1, e, 1000)
    finally:
        bookie.stop()


def _half_dead_log(tmp_path, **overrides):
    source = LedgerSet({(0, 1), (0, 2)})
    bookie = start_bookie(tmp_path, source, **overrides)
    add_all(bookie, [make_entry(lid, e, 2000) for lid in (1, 2) for e in range(100)])
    finish_logs(bookie)
    source.ledgers.discard((0, 2))
    return bookie


def test_minor_threshold_leaves_a_half_live_log_that_major_compacts(tmp_path):
    bookie = _half_dead_log(tmp_path)
    try:
        before = entry_logs(tmp_path / "ledgers")
        stats = bookie.gc.run_once(force_minor=True)
        assert stats is not None and stats.logs_compacted == 0  # 0.5 live is above minor's 0.2
        assert entry_logs(tmp_path / "ledgers") == before
        assert [round(x["live_ratio"], 2) for x in bookie.gc_state()["logs"]] == [0.5]
        stats = bookie.gc.run_once(force_major=True)  # ... and below major's 0.8
        assert stats.logs_compacted == 1 and stats.entries_copied == 100
        assert not set(entry_logs(tmp_path / "ledgers")) & set(before)
        for e in range(100):
            assert bookie.read_entry(1, e) == make_entry(1, e, 2000)
    finally:
        bookie.stop()


def test_compaction_with_intervals_off_never_runs_unforced(tmp_path):
    bookie = _half_dead_log(tmp_path, minorCompactionInterval=0, majorCompactionInterval=0)
    try:
        before = entry_logs(tmp_path / "ledgers")
        assert bookie.gc.run_once() is None
        assert entry_logs(tmp_path / "ledgers") == before
        assert bookie.gc_state()["last_major_compaction_time"] is None
    finally:
        bookie.stop()


def test_the_gc_thread_runs_minor_compaction_when_its_interval_has_passed(tmp_path):
    bookie = _half_dead_log(tmp_path, gcWaitTime=300, minorCompactionInterval=1, minorCompactionThreshold=0.6,
                            majorCompactionInterval=0)
    try:
        before = set(entry_logs(tmp_path / "ledgers"))
        t0 = time.monotonic()
        while bookie.gc_state()["last_minor_compaction_time"] is None:
            assert time.monotonic() - t0 < 5, bookie.gc_state()
            time.sleep(0.02)
        assert time.monotonic() - t0 >= 0.5  # not before its interval (the clock starts with the collector)
        assert bookie.gc_state()["cycles"] >= 2
        assert not before & set(entry_logs(tmp_path / "ledgers"))
        assert bookie.gc_state()["last_major_compaction_time"] is None
        for e in range(100):
            assert bookie.read_entry(1, e) == make_entry(1, e, 2000)
    finally:
        bookie.stop()


def test_throttle_by_entries_and_by_bytes():
    t0 = time.monotonic()
    throttle = Throttle(200, by_bytes=False)
    for _ in range(100):
        throttle.acquire(10_000)
    assert time.monotonic() - t0 >= 0.45
    t0 = time.monotonic()
    throttle = Throttle(100_000, by_bytes=True)
    for _ in range(5):
        throttle.acquire(10_000)
    elapsed = time.monotonic() - t0
    assert 0.45 <= elapsed < 2.0, elapsed
    t0 = time.monotonic()
    throttle = Throttle(0, by_bytes=False)
    for _ in range(10_000):
        throttle.acquire(10_000)
    assert time.monotonic() - t0 < 0.5


def test_compaction_rate_throttles_a_real_compaction(tmp_path):
    bookie = _half_dead_log(tmp_path, compactionRate=250)
    try:
        t0 = time.monotonic()
        stats = bookie.gc.run_once(force_major=True)
        assert stats.entries_copied == 100
        assert time.monotonic() - t0 >= 0.35
    finally:
        bookie.stop()


def test_compaction_out_of_time_keeps_the_log_and_loses_nothing(tmp_path):
    bookie = _half_dead_log(tmp_path, compactionRate=200, majorCompactionMaxTimeMillis=150)
    try:
        before = set(entry_logs(tmp_path / "ledgers"))
        stats = bookie.gc.run_once(force_major=True)
        assert stats.aborted and stats.logs_compacted == 0
        assert 0 < stats.entries_copied < 100
        assert before <= set(entry_logs(tmp_path / "ledgers"))
        for e in range(100):
            assert bookie.read_entry(1, e) == make_entry(1, e, 2000)
        # Unbounded and unthrottled from now on (the settings are fixed when the Bookie is built).
        compaction = bookie.gc.settings.compaction
        compaction = replace(compaction, rate=0, major=replace(compaction.major, max_time_ms=-1))
        bookie.gc.settings = replace(bookie.gc.settings, compaction=compaction)
        bookie.gc.compactor.settings = compaction
        stats = bookie.gc.run_once(force_major=True)
        assert stats.logs_compacted == 1
        assert not before & set(entry_logs(tmp_path / "ledgers"))
        for e in range(100):
            assert bookie.read_entry(1, e) == make_entry(1, e, 2000)
    finally:
        bookie.stop()


def test_reads_during_compaction_always_find_their_entry(tmp_path):
    bookie = _half_dead_log(tmp_path, compactionRate=400, dbStorage_readAheadCacheMaxSizeMb=0)
    errors = []
    reads = [0]
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for e in range(0, 100, 7):
                try:
                    if bookie.read_entry(1, e) != make_entry(1, e, 2000):
                        errors.append(f"entry {e} differs")
                except Exception as ex:  # noqa: BLE001 - collected and asserted below
                    errors.append(repr(ex))
                reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        stats = bookie.gc.run_once(force_major=True)
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        assert stats.logs_compacted == 1
        assert not errors, errors[:5]
        assert reads[0] > 100
    finally:
        bookie.stop()


def test_a_ledger_deleted_while_its_entries_are_copied_is_not_brought_back(tmp_path):
    bookie = _half_dead_log(tmp_path)
    try:
        bookie.gc.compactor.step_hook = lambda step, log_id: step == "copied" and bookie.delete_ledger(1)
        stats = bookie.gc.run_once(force_major=True)
        assert stats.logs_compacted == 1 and stats.entries_copied == 100
        assert bookie.storage.all_ledgers() == []
        assert bookie.storage.entries_of_ledger(1) == []
        assert bookie.storage.entry_location(0, 1, 0) is None
    finally:
        bookie.stop()
