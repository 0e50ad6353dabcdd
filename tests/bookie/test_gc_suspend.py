"""Suspending compaction (the admin API's gc/suspend_compaction, Java's suspendMajorGC/suspendMinorGC): a
suspended kind does not run even when forced, deleted ledgers are still collected, and resume brings it back."""

from bkfast.bookie.bookie import Bookie
from tests.bookie.test_gc import LedgerSet, add_all, entry_logs, gc_conf, ledgers_in_log, make_entry


def test_suspended_compaction_does_not_run_even_when_forced_until_resumed(tmp_path):
    source = LedgerSet((0, lid) for lid in range(10))
    bookie = Bookie(gc_conf(tmp_path), ledger_exists_source=source)
    bookie.start()
    try:
        add_all(bookie, [make_entry(lid, e, 4000) for e in range(60) for lid in range(10)])
        bookie.checkpoint()
        bookie.storage.entry_loggers()[0].roll()
        mixed = {log for log in entry_logs(tmp_path / "ledgers") if 0 in ledgers_in_log(bookie, log)}
        assert mixed
        source.ledgers -= {(0, lid) for lid in range(1, 10)}           # a tenth of each log stays live

        bookie.gc.suspend(major=True, minor=True)
        assert bookie.gc.run_once(force_major=True, force_minor=True) is None
        assert bookie.storage.list_ledgers() == [0]                     # ledger GC goes on
        assert mixed <= set(entry_logs(tmp_path / "ledgers"))           # nothing compacted

        bookie.gc.resume(major=True)
        assert bookie.gc.suspended == {"major": False, "minor": True}
        stats = bookie.gc.run_once(force_major=True)
        assert stats is not None and stats.logs_compacted == len(mixed)
        assert not mixed & set(entry_logs(tmp_path / "ledgers"))
        for e in range(60):
            assert bookie.read_entry(0, e) == make_entry(0, e, 4000)
    finally:
        bookie.stop()
