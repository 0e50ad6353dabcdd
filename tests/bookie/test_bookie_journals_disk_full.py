"""Several journal directories together with the full-disk handling and the non-waiting adds (issue 19
merged with issue 18 and issue 12): a ledger disk full at start stops the replay and every journal
resumes from its own position once there is room; a full journal disk stops that journal and it
recovers in a new file; a journal queue that is full makes the reactor hold the adds, never wait, for
either journal. Real files, a tmpfs made by the test, a real `bkfast bookie` process where a kill -9 or
the reactor is part of the story."""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import time

import pytest

from bkfast.bookie import journal as jm
from bkfast.bookie.bookie import Bookie
from bkfast.cli.local_cluster import LocalBookie
from bkfast.codec import DigestType, decode_response, encode_add_request, encode_entry, encode_read_request, master_key
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKBookieIOException, BKError, V2Rc
from tests.disk_full_support import ENTRY_SIZE, add_entry, assert_readable, payload
from tests.disk_full_support import journal_entry_counts as entry_counts
from tests.server_support import BookieProcess, Client
from tests.tmpfs_support import fill, tmpfs

KEY = master_key(b"journals-full")
add = functools.partial(add_entry, KEY)
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"


def stored_entry(lid: int) -> bytes:
    return encode_entry(lid, 0, -1, ENTRY_SIZE, payload(lid), DigestType.CRC32C)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def records_after_marks(journal_dirs, ledger_dir) -> list[int]:
    """How many records each journal holds after its own lastMark (what a start must replay)."""
    counts = []
    for i, d in enumerate(journal_dirs):
        mark = jm.read_last_mark([ledger_dir], journal_index=i)
        counts.append(0)
        for journal_id in jm.list_journal_ids(d):
            if journal_id >= mark.journal_id:
                start = mark.offset if journal_id == mark.journal_id else 0
                counts[-1] += sum(1 for _ in jm.scan_journal(d, journal_id, start))
    return counts


def test_full_ledger_disk_at_start_stops_the_replay_and_each_journal_resumes_where_it_stopped(tmp_path):
    ledgers = tmp_path / "ledgers"
    journals = [tmp_path / "j0", tmp_path / "j1"]
    conf = ServerConfiguration({
        "journalDirectories": [str(d) for d in journals], "ledgerDirectories": [str(ledgers)],
        "ledgerStorageClass": DB, "diskCheckInterval": 200, "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16})
    with tmpfs(ledgers, 32):
        acked, refused = [], 0
        with Bookie(conf) as bookie:
            lid = 0
            while refused < 5:                       # one-entry ledgers over both journals until refused
                lid += 1
                try:
                    bookie.add_entry_sync(stored_entry(lid), KEY)
                    acked.append(lid)
                except BKError:
                    refused += 1
            assert len(acked) * ENTRY_SIZE > 24 << 20, len(acked)
        # the stop could not flush: every journal's lastMark stayed where the ledger disk last took all
        to_replay = records_after_marks(journals, ledgers)
        assert all(to_replay), to_replay
        bookie = Bookie(conf)
        bookie.start()                               # on the still full disk: must not fail
        try:
            assert "storage-full" in bookie.read_only_reasons
            pending = bookie.storage_full.replay_pending
            assert pending is not None and 1 in pending, pending    # the second journal waits its turn
            with pytest.raises(BKError):
                bookie.add_entry_sync(stored_entry(10**6), KEY)
            served = 0
            for lid in acked:
                try:
                    assert bookie.read_entry(lid, 0) == stored_entry(lid)
                    served += 1
                except BKBookieIOException:          # never "no such entry" while records are missing
                    pass
            assert served >= len(acked) // 4, (served, len(acked))     # the index and the cache serve
            subprocess.run(["mount", "-o", "remount,size=96m", str(ledgers)], check=True)   # room again
            wait_for(lambda: not bookie.read_only, 30, "writable after the disk has room")
            assert bookie.storage_full.replay_pending is None
            # every record after the marks was replayed once, each journal from where it stopped
            assert bookie.replayed_records == sum(to_replay)
            for lid in acked:
                assert bookie.read_entry(lid, 0) == stored_entry(lid)
            bookie.add_entry_sync(stored_entry(10**6), KEY)
            bookie.add_entry_sync(stored_entry(10**6 + 1), KEY)
        finally:
            bookie.stop()
        with Bookie(conf) as bookie:                 # the recovery's checkpoint moved both marks
            assert bookie.replayed_records == 0
            assert bookie.read_entry(10**6 + 1, 0) == stored_entry(10**6 + 1)


def test_second_journal_disk_full_then_room_again_recovers_that_journal_without_restart(tmp_path):
    j0, j1 = tmp_path / "b" / "journal", tmp_path / "b" / "journal1"
    # The first journal and the ledger dir on roomy tmpfs of their own: turning writable needs every disk
    # below the low-water mark, and the host's disk can be more than 90% full.
    with tmpfs(j1, 16), tmpfs(j0, 256), tmpfs(tmp_path / "b" / "ledgers", 256):
        ballast = fill(j1, leave_bytes=3 << 20)
        bookie = LocalBookie(tmp_path / "b", 0, extra_conf={
            "journalDirectories": f"{j0},{j1}", "journalPreAllocSizeMB": "1", "diskCheckInterval": "200",
            # above 99.99% only: the journal write must meet ENOSPC before the disk checker sees the disk full
            "diskUsageThreshold": "0.9999", "diskUsageWarnThreshold": "0.9998", "diskUsageLwmThreshold": "0.9",
            "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16"})
        try:
            bookie.start()
            acked, rcs = [], collections.Counter()
            with Client(bookie.host, bookie.port) as client:
                lid = 0
                while sum(rcs.values()) < 5:             # ledgers of both journals until j1 is full
                    lid += 1
                    rc = add(client, lid)
                    if rc == V2Rc.EOK:
                        acked.append(lid)
                    else:
                        rcs[rc] += 1
                assert rcs[V2Rc.EIO] >= 1, rcs          # the second journal's write failed (ENOSPC)
                assert add(client, 10**6) == V2Rc.EREADONLY     # even ledger: the bookie is read-only
            assert "journal-enospc" in bookie.log_path.read_text()

            os.unlink(ballast)                          # room again: no restart
            deadline = time.monotonic() + 30
            with Client(bookie.host, bookie.port) as client:
                while add(client, 10**6 + 1) != V2Rc.EOK:      # odd ledger: the recovered journal
                    assert time.monotonic() < deadline, bookie.log_path.read_text()[-3000:]
                    time.sleep(0.2)
                later = list(range(lid + 1, lid + 21))
                for new in later:
                    assert add(client, new) == V2Rc.EOK
            assert_readable(bookie, acked + later)
            assert f"journal {j1} recovered" in bookie.log_path.read_text()

            bookie.kill()                               # replay what the journal files hold
            bookie.start()
            assert_readable(bookie, acked + later + [10**6 + 1])
            for d, parity in ((j0, 0), (j1, 1)):
                counts = entry_counts(d)
                assert all(ledger % 2 == parity for ledger, _ in counts), d
                twice = {key: n for key, n in counts.items() if n > 1}
                assert not twice, f"journaled more than once in {d}: {sorted(twice)[:10]}"
            assert bookie.stop() == 0
            assert "Traceback" not in bookie.log_path.read_text()
        finally:
            bookie.kill()


def test_a_full_journal_queue_of_either_journal_holds_the_adds_and_loses_none(tmp_path):
    # A queue of 4 records per journal: a socket read's adds mostly find their journal's queue busy, so
    # the reactor holds them and each journal's room listener must bring them back.
    b = BookieProcess(tmp_path, "-D", f"journalDirectories={tmp_path / 'j0'},{tmp_path / 'j1'}",
                      "-D", "journalQueueSize=4").start()
    try:
        n, ledgers = 600, (2, 3, 4, 5)
        with b.connect() as writer:
            writer.send_raw(b"".join(encode_add_request(KEY, lid, e, e - 1, e + 1, b"q" * 512, DigestType.CRC32C)
                                     for e in range(n) for lid in ledgers))
            acked = [decode_response(writer.recv_body()) for _ in range(n * len(ledgers))]
            assert all(r.rc == V2Rc.EOK for r in acked), collections.Counter(r.rc for r in acked)
            for lid in ledgers:          # each ledger's answers in entry order
                assert [r.entry_id for r in acked if r.ledger_id == lid] == list(range(n))
            for lid in ledgers:
                for e in (0, n - 1):
                    writer.send_raw(encode_read_request(lid, e))
                    assert decode_response(writer.recv_body()).rc == V2Rc.EOK
        assert b.stop() == 0
    finally:
        b.kill()
    for d, parity in ((tmp_path / "j0", 0), (tmp_path / "j1", 1)):
        counts = entry_counts(d)
        assert sorted({lid for lid, _ in counts}) == [lid for lid in ledgers if lid % 2 == parity]
        assert len(counts) == n * 2 and set(counts.values()) == {1}
