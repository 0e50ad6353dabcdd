"""A bookie whose journal disk filled turns writable again, without a restart, once there is room
(issue 18 point 3): real bookie process, a 16 MiB tmpfs for the journal made by the test.

Before: the journal is fail-stop, so the bookie stayed read-only ("journal-enospc") until restarted, even
after space returned. Now it cuts the failed journal file at its last durable position, continues in a new
file (journaling the failed batch's records there once), and serves adds again; a replay after kill -9
finds every acknowledged entry and no record twice.
"""

from __future__ import annotations

import collections
import functools
import os
import time

from bkfast.cli.local_cluster import LocalBookie
from bkfast.codec import master_key
from bkfast.errors import V2Rc
from tests.disk_full_support import add_entry, assert_readable, journal_entry_counts
from tests.server_support import Client
from tests.tmpfs_support import fill, tmpfs

KEY = master_key(b"journal-full")
add = functools.partial(add_entry, KEY)


def test_journal_disk_full_then_room_again_turns_writable_without_restart(tmp_path):
    journal = tmp_path / "b" / "journal"
    # The ledger dir on a roomy tmpfs of its own: turning writable needs every disk below the low-water
    # mark, and the host's disk can be more than 90% full.
    with tmpfs(journal, 16), tmpfs(tmp_path / "b" / "ledgers", 256):
        ballast = fill(journal, leave_bytes=3 << 20)
        bookie = LocalBookie(tmp_path / "b", 0, extra_conf={
            "journalPreAllocSizeMB": "1", "diskCheckInterval": "200", "diskUsageThreshold": "0.99",
            "diskUsageWarnThreshold": "0.98", "diskUsageLwmThreshold": "0.9",
            "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16"})
        try:
            bookie.start()
            acked, rcs = [], collections.Counter()
            with Client(bookie.host, bookie.port) as client:
                lid = 0
                while sum(rcs.values()) < 5:            # until the journal disk is full
                    lid += 1
                    rc = add(client, lid)
                    if rc == V2Rc.EOK:
                        acked.append(lid)
                    else:
                        rcs[rc] += 1
                assert rcs[V2Rc.EIO] >= 1, rcs          # the journal write failed (ENOSPC)
                assert add(client, 10**6) == V2Rc.EREADONLY
            assert "journal-enospc" in bookie.log_path.read_text()

            os.unlink(ballast)                          # room again: no restart
            deadline = time.monotonic() + 30
            with Client(bookie.host, bookie.port) as client:
                while add(client, 10**6) != V2Rc.EOK:
                    assert time.monotonic() < deadline, bookie.log_path.read_text()[-3000:]
                    time.sleep(0.2)
                later = list(range(lid + 1, lid + 21))
                for new in later:
                    assert add(client, new) == V2Rc.EOK
            assert_readable(bookie, acked + later)

            bookie.kill()                               # replay what the journal files hold
            bookie.start()
            assert_readable(bookie, acked + later + [10**6])
            twice = {key: n for key, n in journal_entry_counts(journal).items() if n > 1}
            assert not twice, f"journaled more than once: {sorted(twice)[:10]}"
            assert bookie.stop() == 0
            assert "Traceback" not in bookie.log_path.read_text()
        finally:
            bookie.kill()
