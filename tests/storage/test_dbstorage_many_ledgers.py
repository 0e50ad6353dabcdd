"""DbLedgerStorage with many small ledgers: a flush works in bulk, and memory per ledger held is bounded.

Issue 18 point 4: stopping a bookie holding 1,000,000 one-entry ledgers took 81 s because its flush made
one entry-logger call and one GIL hand-over (~70 us of sleep(0) timer slack) per ledger, and each ledger
held ~630 bytes of parsed LedgerData in memory. bench/shutdown_many_ledgers.py measures the real process;
these tests check what does not depend on the machine: calls per flush and bytes per ledger.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bkfast.codec import DigestType, encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.directory import FLUSH_SLICE_ENTRIES
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from tests.server_support import REPO

LEDGERS = 20_000
KEY = b"k" * 20


class CountingEntryLogger(EntryLogger):
    """The real entry logger, counting the calls that write entries."""

    calls = 0

    def add_entry(self, *args, **kwargs):
        self.calls += 1
        return super().add_entry(*args, **kwargs)

    def add_entries(self, *args, **kwargs):
        self.calls += 1
        return super().add_entries(*args, **kwargs)

    def add_framed(self, framed, ledgers, max_length):
        self.calls += 1
        placed = super().add_framed(framed, ledgers, max_length)
        if placed is None:
            self.calls -= 1             # add_runs takes the slice and counts itself
        return placed

    def add_runs(self, runs):
        self.calls += 1
        # add_runs may fall back to add_entries per ledger: count those instead of this call then
        before = self.calls
        out = super().add_runs(runs)
        if self.calls > before:
            self.calls -= 1
        return out


def _conf(tmp_path) -> ServerConfiguration:
    return ServerConfiguration({"journalDirectories": [str(tmp_path / "j")],
                                "ledgerDirectories": [str(tmp_path / "l")],
                                "dbStorage_writeCacheMaxSizeMb": 256})


def test_flush_of_many_one_entry_ledgers_writes_slices_not_one_call_per_ledger(tmp_path):
    conf = _conf(tmp_path)
    logger = CountingEntryLogger([tmp_path / "l"], EntryLoggerSettings.from_conf(conf))
    storage = DbLedgerStorage.from_conf([tmp_path / "l"], None, conf, entry_logger=logger)
    payload = b"p" * 50
    try:
        for lid in range(1, LEDGERS + 1):
            storage.set_master_key(lid, KEY)
            storage.add_entry(encode_entry(lid, 0, -1, 50, payload, DigestType.CRC32C))
        storage.checkpoint()
        # ~20 slices of FLUSH_SLICE_ENTRIES (one call per ledger before: 20,000)
        assert logger.calls <= 2 * LEDGERS // FLUSH_SLICE_ENTRIES + 2, logger.calls
        assert storage.directories[0].flush_slices == logger.calls
    finally:
        storage.close()
        logger.close()
    # what the bulk flush indexed is what a reopened storage (RocksDB state, entry logs) reads back
    reopened = DbLedgerStorage.from_conf([tmp_path / "l"], None, conf)
    try:
        for lid in (1, 2, LEDGERS // 2, LEDGERS):
            assert reopened.get_entry(lid, 0) == encode_entry(lid, 0, -1, 50, payload, DigestType.CRC32C)
            assert reopened.get_master_key(lid) == KEY
        assert len(reopened.list_ledgers()) == LEDGERS
    finally:
        reopened.close()


def test_flush_mixes_big_and_small_ledgers_in_order(tmp_path):
    conf = _conf(tmp_path)
    storage = DbLedgerStorage.from_conf([tmp_path / "l"], None, conf)
    expected = {}
    try:
        for lid in range(1, 300):
            storage.set_master_key(lid, KEY)
            count = 3000 if lid % 100 == 0 else 1 + lid % 3
            for eid in range(count):
                entry = encode_entry(lid, eid, eid - 1, eid + 1, bytes([lid % 256]) * (1 + eid % 700),
                                     DigestType.CRC32C)
                storage.add_entry(entry)
                expected[(lid, eid)] = entry
        storage.checkpoint()
    finally:
        storage.close()
    reopened = DbLedgerStorage.from_conf([tmp_path / "l"], None, conf)
    try:
        for (lid, eid), entry in expected.items():
            assert reopened.get_entry(lid, eid) == entry
        assert reopened.get_last_entry_id(100) == 2999
    finally:
        reopened.close()


MEASURE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from bkfast.dbstorage.ledger_index import LedgerMetadataIndex
    def rss():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    base = rss()
    index = LedgerMetadataIndex(Path(sys.argv[1]))
    print((rss() - base) / int(sys.argv[2]))
    index.close()
""")


def test_memory_held_per_ledger_is_bounded(tmp_path):
    """RSS of a fresh process per ledger of a loaded ledger metadata index (was ~690 bytes, now ~200)."""
    from bkfast.dbstorage.ledger_index import LedgerMetadataIndex

    n = 200_000
    index = LedgerMetadataIndex(tmp_path)
    try:
        for lid in range(n):
            index.set_master_key(0, lid, lid.to_bytes(20, "big"))
        index.sync()
    finally:
        index.close()
    out = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path), str(n)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120)
    per_ledger = float(out.stdout.strip())
    assert per_ledger < 300, f"{per_ledger:.0f} bytes of RSS per ledger held"
