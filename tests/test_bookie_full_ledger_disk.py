"""A bookie restarted on a full ledger disk starts read-only and turns writable when space returns
(issue 18 point 2): real bookie process, real ZooKeeper, a 32 MiB tmpfs made by the test.

Before: after filling the ledger disk (DbLedgerStorage, journal on a larger disk) and kill -9, the restart
exited 1 with a RocksDB "No space left on device" traceback, and acknowledged entries could not be read
until an operator freed space.
"""

from __future__ import annotations

import functools
import subprocess
import time

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.cli.main import main
from bkfast.codec import master_key
from bkfast.errors import V2Rc

from .disk_full_support import ENTRY_SIZE, add_entry, payload
from .disk_full_support import read_entry as read
from .server_support import Client
from .tmpfs_support import tmpfs

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
            bookie = LocalBookie(tmp_path / "b", free_port(), zk_metadata_uri=f"zk+hierarchical://{zookeeper_server}{root}",
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
