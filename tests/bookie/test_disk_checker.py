"""Full disks make the bookie read-only, on a real small filesystem (an 8 MiB tmpfs mounted for the test).

The disk checker turns the bookie read-only above diskUsageThreshold and writable again below
diskUsageLwmThreshold; an ENOSPC while writing an entry log or the journal turns it read-only at once,
fails only what could not be stored, and loses no acknowledged entry.
"""

import errno
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bkfast.bookie.bookie import Bookie
from bkfast.bookie.disk_checker import DiskChecker, disk_usage, is_no_space
from bkfast.bookie.settings import DiskCheckerSettings
from bkfast.codec import peek_entry_ids
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKBookieIOException, BKWriteOnReadOnlyBookieException
from tests.bookie.test_gc import KEY, make_entry

MiB = 1 << 20


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs at tmp_path/fs, unmounted afterwards (skipped where mounting is not permitted)."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); the disk-full tests need one")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)
        if os.path.ismount(mount_point):
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path, nbytes: int) -> None:
    with open(path, "wb") as f:
        f.write(b"\0" * nbytes)
        f.flush()
        os.fsync(f.fileno())


def disk_conf(tmp_path, ledger_root, journal_root=None, index_root=None, **overrides):
    return ServerConfiguration({
        "journalDirectories": [str((journal_root or tmp_path) / "journal")],
        "ledgerDirectories": [str(ledger_root / "ledgers")],
        "indexDirectories": [str((index_root or tmp_path) / "index")],
        "journalPreAllocSizeMB": 1,
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 1,
        "dbStorage_readAheadCacheMaxSizeMb": 1,
        "dbStorage_maxThrottleTimeMs": 2000,
        "logSizeLimit": 1 * MiB,
        **overrides,
    })


def wait_for(predicate, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def add(bookie, data, recovery=False):
    bookie.add_entry_sync(data, KEY, recovery=recovery)


def test_is_no_space_follows_the_cause_chain():
    inner = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise inner
        except OSError as e:
            raise BKBookieIOException("journal write failed") from e
    except BKBookieIOException as outer:
        assert is_no_space(outer)
    assert not is_no_space(OSError(errno.EIO, "I/O error"))
    assert not is_no_space(None)


def test_checker_full_above_threshold_and_writable_only_below_the_low_water_mark(small_fs):
    conf = ServerConfiguration({"diskUsageThreshold": 0.5, "diskUsageWarnThreshold": 0.4,
                                "diskUsageLwmThreshold": 0.3})
    changes = []
    checker = DiskChecker([small_fs], DiskCheckerSettings.from_conf(conf),
                          lambda full, detail: changes.append((full, detail)))
    assert not checker.check() and changes == []
    fill(small_fs / "a", 3 * MiB)
    fill(small_fs / "b", 2 * MiB)
    assert disk_usage(small_fs) > 0.5
    assert checker.check()
    assert changes[-1][0] is True and str(small_fs) in changes[-1][1]
    (small_fs / "b").unlink()  # 3 of 8 MiB: below the threshold, above the low-water mark
    assert checker.check() and len(changes) == 1
    (small_fs / "a").unlink()
    assert not checker.check()
    assert [c[0] for c in changes] == [True, False]


def test_full_disk_makes_the_bookie_read_only_then_writable_again(tmp_path, small_fs):
    conf = disk_conf(tmp_path, small_fs, small_fs, small_fs, diskUsageThreshold=0.5, diskUsageWarnThreshold=0.4,
                     diskUsageLwmThreshold=0.3, diskCheckInterval=50)
    bookie = Bookie(conf)
    transitions = []
    bookie.add_state_listener(transitions.append)
    bookie.start()
    try:
        add(bookie, make_entry(1, 0, 100))
        fill(small_fs / "ballast", 5 * MiB)
        wait_for(lambda: bookie.read_only, "read-only after the disk filled")
        assert "disk-full" in bookie.read_only_reasons
        with pytest.raises(BKWriteOnReadOnlyBookieException):
            add(bookie, make_entry(1, 1, 100))
        add(bookie, make_entry(1, 1, 100), recovery=True)  # recovery adds are still accepted
        assert bookie.read_entry(1, 0) == make_entry(1, 0, 100)  # reads go on
        assert bookie.gc_state()["disk_usage"][str(small_fs / "ledgers")] > 0.5
        (small_fs / "ballast").unlink()
        wait_for(lambda: not bookie.read_only, "writable after the disk emptied")
        add(bookie, make_entry(1, 2, 100))
        assert transitions == [True, False]
    finally:
        bookie.stop()


def test_full_disk_without_read_only_mode_shuts_the_bookie_down(tmp_path, small_fs):
    conf = disk_conf(tmp_path, small_fs, small_fs, small_fs, diskUsageThreshold=0.5, diskUsageWarnThreshold=0.4,
                     diskCheckInterval=50, readOnlyModeEnabled=False)
    bookie = Bookie(conf)
    stopped = threading.Event()
    bookie.add_shutdown_listener(lambda reason: stopped.set())
    bookie.start()
    try:
        add(bookie, make_entry(1, 0, 100))
        fill(small_fs / "ballast", 5 * MiB)
        assert stopped.wait(10), "bookie did not shut down"
        assert not bookie.started and "readOnlyModeEnabled=false" in bookie.shutdown_reason
    finally:
        bookie.stop()
    bookie = Bookie(conf)  # the acknowledged entry survived the shutdown
    (small_fs / "ballast").unlink()
    bookie.start()
    try:
        assert bookie.read_entry(1, 0) == make_entry(1, 0, 100)
    finally:
        bookie.stop()


def test_enospc_writing_entry_logs_turns_read_only_and_loses_no_acknowledged_entry(tmp_path, small_fs):
    # The checker would only see the disk after a minute: the write path must notice ENOSPC by itself.
    conf = disk_conf(tmp_path, small_fs, diskUsageThreshold=0.99, diskUsageWarnThreshold=0.9,
                     diskUsageLwmThreshold=0.9, diskCheckInterval=60_000, flushInterval=100)
    fill(small_fs / "ballast", 3 * MiB)
    bookie = Bookie(conf)
    bookie.start()
    acked = []
    refused = None
    try:
        for i in range(400):  # 400 x 32 KiB = 12.5 MiB: more than the 5 MiB left
            data = make_entry(7, i, 32 * 1024)
            try:
                add(bookie, data)
            except (BKWriteOnReadOnlyBookieException, BKBookieIOException) as e:
                refused = e
                break
            acked.append(data)
        assert refused is not None, "the filesystem never filled"
        assert bookie.read_only and "enospc" in bookie.read_only_reasons
        assert acked, "nothing was stored before the disk filled"
        with pytest.raises(BKWriteOnReadOnlyBookieException):
            add(bookie, make_entry(7, len(acked), 32 * 1024))
        for data in acked:  # every acknowledged entry is still served (write cache or entry logs)
            _, _, lid, eid = peek_entry_ids(data)
            assert bookie.read_entry(lid, eid) == data
        (small_fs / "ballast").unlink()  # the operator frees space; the checker notices it
        bookie.disk_checker.check()
        assert not bookie.read_only
        wait_for(lambda: bookie.storage.directories[0].last_flush_error is None or _checkpoint_ok(bookie),
                 "a flush after space was freed")
        bookie.checkpoint()
    finally:
        bookie.stop()
    bookie = Bookie(conf)
    bookie.start()
    try:
        for data in acked:
            _, _, lid, eid = peek_entry_ids(data)
            assert bookie.read_entry(lid, eid) == data, f"entry {lid}:{eid} lost after ENOSPC"
        logger = bookie.storage.entry_loggers()[0]
        for log_id in logger.log_ids():  # every record of every log parses: no torn entry in the middle
            list(logger.scan_records(log_id, with_data=False))
    finally:
        bookie.stop()


def _checkpoint_ok(bookie) -> bool:
    try:
        bookie.checkpoint()
        return True
    except OSError:
        return False


def test_enospc_in_the_journal_fails_the_add_and_turns_read_only(tmp_path, small_fs):
    conf = disk_conf(tmp_path, tmp_path, journal_root=small_fs, diskUsageThreshold=0.99,
                     diskUsageWarnThreshold=0.9, diskCheckInterval=60_000, dbStorage_writeCacheMaxSizeMb=32)
    bookie = Bookie(conf)
    bookie.start()
    acked = []
    failure = None
    try:
        for i in range(400):  # 400 x 32 KiB: more than the 8 MiB journal filesystem
            data = make_entry(9, i, 32 * 1024)
            try:
                add(bookie, data)
            except (BKBookieIOException, BKWriteOnReadOnlyBookieException) as e:
                failure = e
                break
            acked.append(data)
        assert isinstance(failure, BKBookieIOException), failure
        assert acked
        assert bookie.read_only and "journal-enospc" in bookie.read_only_reasons
        with pytest.raises(BKWriteOnReadOnlyBookieException):
            add(bookie, make_entry(9, len(acked), 10))
        for data in acked:
            _, _, lid, eid = peek_entry_ids(data)
            assert bookie.read_entry(lid, eid) == data
    finally:
        bookie.stop()
    # The journal files, moved to a disk with room, replay every acknowledged entry.
    shutil.copytree(small_fs / "journal", tmp_path / "journal-copy")
    conf.set("journalDirectories", str(tmp_path / "journal-copy"))
    bookie = Bookie(conf)
    bookie.start()
    try:
        for data in acked:
            _, _, lid, eid = peek_entry_ids(data)
            assert bookie.read_entry(lid, eid) == data, f"entry {lid}:{eid} lost after a journal ENOSPC"
    finally:
        bookie.stop()
