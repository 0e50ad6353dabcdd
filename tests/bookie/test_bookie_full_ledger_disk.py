"""A bookie restarted on a full ledger disk starts read-only and turns writable when space returns
(issue 18 point 2): real bookie process, real ZooKeeper, a 32 MiB tmpfs made by the test.

Before: after filling the ledger disk (DbLedgerStorage, journal on a larger disk) and kill -9, the restart
exited 1 with a RocksDB "No space left on device" traceback, and acknowledged entries could not be read
until an operator freed space.

Issue 30 point 4: the restarted bookie served only what its write cache could hold; the entries the replay
could not store stayed in the journal, unreadable (I/O error) until space returned. Now they are read from
the journal files, with their ledgers' last entry, LAC and fence, until the replay resumes.
"""

from __future__ import annotations

import functools
import re
import subprocess
import time

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.cli.main import main
from bkfast.codec import FLAG_HIGH_PRIORITY, master_key, peek_entry_ids
from bkfast.errors import V2Rc
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.disk_full_support import ENTRY_SIZE, add_at, add_entry, payload, payload_at, read_at
from tests.disk_full_support import read_entry as read
from tests.server_support import Client
from tests.tmpfs_support import tmpfs

pytestmark = pytest.mark.zookeeper

KEY = master_key(b"full-disk")
add = functools.partial(add_entry, KEY)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def fill_until_refused(bookie: LocalBookie) -> list[int]:
    """Add one-entry ledgers until the full disk makes the bookie refuse adds; the acknowledged ones."""
    acked, refused = [], 0
    with Client(bookie.host, bookie.port) as client:
        lid = 0
        while refused < 5:
            lid += 1
            if add(client, lid) == V2Rc.EOK:
                acked.append(lid)
            else:
                refused += 1
    assert len(acked) * ENTRY_SIZE > 24 << 20, len(acked)
    return acked


def test_restart_on_a_full_ledger_disk_is_read_only_serves_reads_and_recovers(zookeeper_server, tmp_path):
    root = f"/ledgers-{time.time_ns()}"
    result = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", zookeeper_server, "--root", root])
    assert result.exit_code == 0, result.output
    watcher = KazooClient(hosts=zookeeper_server, timeout=10.0)
    watcher.start(timeout=15)
    ledgers = tmp_path / "b" / "ledgers"
    try:
        with tmpfs(ledgers, 32):
            bookie = LocalBookie(tmp_path / "b", free_port(), metadata_uri=f"zk+hierarchical://{zookeeper_server}{root}",
                                 extra_conf={"diskCheckInterval": "200", "dbStorage_writeCacheMaxSizeMb": "16",
                                             "dbStorage_readAheadCacheMaxSizeMb": "16"})
            writable = f"{root}/available/{bookie.bookie_id}"
            readonly = f"{root}/available/readonly/{bookie.bookie_id}"
            try:
                bookie.start()
                acked = fill_until_refused(bookie)
                bookie.kill()                           # kill -9 on a full ledger disk

                bookie.start()                          # the restart must not fail
                assert watcher.exists(readonly) is not None and watcher.exists(writable) is None
                with Client(bookie.host, bookie.port) as client:
                    assert add(client, 10**6) == V2Rc.EREADONLY
                    served, unsure = 0, 0
                    for lid in acked:
                        r = read(client, lid)
                        if r.rc == V2Rc.EOK:
                            assert bytes(r.data)[-ENTRY_SIZE:] == payload(lid)
                            served += 1
                        else:                           # never "no such entry" for an acknowledged entry
                            assert r.rc == V2Rc.EIO, (lid, r.rc)
                            unsure += 1
                    assert served >= len(acked) // 4, (served, unsure)   # the cache and the index serve

                subprocess.run(["mount", "-o", "remount,size=96m", str(ledgers)], check=True)   # space returns
                wait_for(lambda: watcher.exists(writable) is not None, 30, "writable registration")
                # the move creates the writable node first, then deletes the read-only one (as Java)
                wait_for(lambda: watcher.exists(readonly) is None, 10, "read-only registration removed")
                with Client(bookie.host, bookie.port) as client:
                    assert add(client, 10**6) == V2Rc.EOK
                    for lid in acked:
                        r = read(client, lid)
                        assert r.rc == V2Rc.EOK, (lid, r.rc)
                        assert bytes(r.data)[-ENTRY_SIZE:] == payload(lid)
                assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]
                assert "Traceback" not in bookie.log_path.read_text()
            finally:
                bookie.kill()
    finally:
        watcher.stop()
        watcher.close()


def test_graceful_stop_on_a_full_ledger_disk_exits_cleanly_and_the_journal_keeps_the_entries(tmp_path):
    ledgers = tmp_path / "b" / "ledgers"
    with tmpfs(ledgers, 32):
        bookie = LocalBookie(tmp_path / "b", 0, extra_conf={"dbStorage_writeCacheMaxSizeMb": "16",
                                                            "dbStorage_readAheadCacheMaxSizeMb": "16"})
        try:
            bookie.start()
            acked = fill_until_refused(bookie)
            assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]     # the final flush cannot write
            assert "Traceback" not in bookie.log_path.read_text()
            subprocess.run(["mount", "-o", "remount,size=96m", str(ledgers)], check=True)
            bookie.start()
            with Client(bookie.host, bookie.port) as client:
                for lid in acked:
                    r = read(client, lid)
                    assert r.rc == V2Rc.EOK and bytes(r.data)[-ENTRY_SIZE:] == payload(lid), (lid, r.rc)
            assert bookie.stop() == 0
        finally:
            bookie.kill()


SMALL_ENTRY = 16 * 1024
LEDGER_ENTRIES = 64
LAC_AT = 16          # offset of the piggy-backed LAC in a v2 entry


def fill_ledgers_until_refused(bookie: LocalBookie) -> dict[int, int]:
    """Ledgers of up to LEDGER_ENTRIES 16 KiB entries until the full disk makes the bookie refuse adds (the
    next add goes to a new ledger, so no ledger has a gap); ledger -> its last acknowledged entry."""
    last: dict[int, int] = {}
    with Client(bookie.host, bookie.port) as client:
        lid, eid, refused = 1, 0, 0
        while refused < 5:
            if add_at(KEY, client, lid, eid, SMALL_ENTRY) == V2Rc.EOK:
                last[lid] = eid
                eid += 1
                if eid < LEDGER_ENTRIES:
                    continue
            else:
                refused += 1
            lid, eid = lid + 1, 0
    assert sum(last.values()) * SMALL_ENTRY > 24 << 20, last
    return last


def assert_every_entry_served(bookie: LocalBookie, last: dict[int, int]) -> None:
    """Each acknowledged entry's bytes, each ledger's last entry (entry -1) and LAC, over v2 and v3."""
    with Client(bookie.host, bookie.port) as client, Client(bookie.host, bookie.port) as v3:
        for lid, last_eid in last.items():
            for eid in range(last_eid + 1):
                r = read_at(client, lid, eid)
                assert r.rc == V2Rc.EOK, (lid, eid, r.rc)
                assert bytes(r.data)[-SMALL_ENTRY:] == payload_at(lid, eid, SMALL_ENTRY), (lid, eid)
            r = read_at(client, lid, -1)
            assert r.rc == V2Rc.EOK and peek_entry_ids(bytes(r.data))[3] == last_eid, (lid, r.rc)
            # nothing was added after the last acknowledged entry: a known "no such entry", not EIO
            assert read_at(client, lid, last_eid + 1).rc == V2Rc.ENOENTRY, lid
            lac = v3.v3(pb.READ_LAC, readLacRequest=dict(ledgerId=lid))
            assert lac.status == pb.EOK, (lid, lac.status)
            body = lac.readLacResponse.lastEntryBody
            assert peek_entry_ids(body)[3] == last_eid, lid
            assert int.from_bytes(body[LAC_AT:LAC_AT + 8], "big", signed=True) == last_eid - 1, lid


def journal_served(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"journal-served entries: (\d+)", log)]


def test_restart_on_a_full_ledger_disk_serves_every_acknowledged_entry_from_the_journal(tmp_path):
    ledgers = tmp_path / "b" / "ledgers"
    with tmpfs(ledgers, 32):
        bookie = LocalBookie(tmp_path / "b", 0, extra_conf={"diskCheckInterval": "200",
                                                            "dbStorage_writeCacheMaxSizeMb": "16",
                                                            "dbStorage_readAheadCacheMaxSizeMb": "16"})
        try:
            bookie.start()
            last = fill_ledgers_until_refused(bookie)
            bookie.kill()                               # kill -9 on a full ledger disk

            bookie.start()
            log = bookie.log_path.read_text()
            assert "bookie starts read-only" in log
            served = journal_served(log)
            assert served and served[-1] > 0, served    # the replay stopped: some entries are only journaled
            with Client(bookie.host, bookie.port) as client:
                assert add_at(KEY, client, 10**6, 0, SMALL_ENTRY) == V2Rc.EREADONLY
            assert_every_entry_served(bookie, last)

            # Ledger recovery of the newest ledger (all of it only in the journal): the fencing read answers
            # its last entry, and the fence holds against a high-priority add, which a read-only bookie takes.
            newest = max(last)
            with Client(bookie.host, bookie.port) as client:
                r = read_at(client, newest, -1, fence_key=KEY)
                assert r.rc == V2Rc.EOK and peek_entry_ids(bytes(r.data))[3] == last[newest], r.rc
                rc = add_at(KEY, client, newest, last[newest] + 1, SMALL_ENTRY, flags=FLAG_HIGH_PRIORITY)
                assert rc == V2Rc.EFENCED, rc

            subprocess.run(["mount", "-o", "remount,size=96m", str(ledgers)], check=True)   # space returns
            wait_for(lambda: "journal replay finished" in bookie.log_path.read_text(), 30, "the replay to resume")
            assert journal_served(bookie.log_path.read_text())[-1] == 0     # the journal-served index emptied
            with Client(bookie.host, bookie.port) as client:
                wait_for(lambda: add_at(KEY, client, 10**6, 0, SMALL_ENTRY) == V2Rc.EOK, 30, "a writable bookie")
            assert_every_entry_served(bookie, last)
            assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]
            assert "Traceback" not in bookie.log_path.read_text()

            bookie.start()                              # the resumed replay was checkpointed: nothing is lost
            assert journal_served(bookie.log_path.read_text())[-1] == 0
            assert_every_entry_served(bookie, last)
            assert bookie.stop() == 0
        finally:
            bookie.kill()
