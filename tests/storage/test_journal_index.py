"""What a full ledger disk kept out of ledger storage at start is served from the journal (issue 30 point
4): the index of the unreplayed journal records (bkfast.bookie.journal_index) on journals a real Bookie
wrote, and a Bookie started on a full ledger disk whose tail of entries, explicit LAC, fence and a whole
ledger's master key exist only in the journal. Real files, a tmpfs made by the test for the full disk.
"""

from __future__ import annotations

import os
import time

import pytest

from bkfast.bookie import journal_files
from bkfast.bookie.bookie import Bookie
from bkfast.bookie.journal_index import JournalIndex
from bkfast.bookie.logmark import LogMark
from bkfast.codec import DigestType, encode_entry, encode_lac, master_key
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.errors import (
    BKBookieIOException,
    BKError,
    BKLedgerFencedException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKUnauthorizedAccessException,
)
from tests.tmpfs_support import fill, tmpfs

KEY = master_key(b"journal-index")
OTHER_KEY = master_key(b"other")
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
SCOPE = 7


def entry(lid: int, eid: int, size: int = 100, scope_id: int = 0) -> bytes:
    return encode_entry(lid, eid, eid - 1, size * (eid + 1), bytes([(lid + eid) % 251]) * size,
                        DigestType.CRC32C, scope_id=scope_id)


def conf(journal, ledgers, **more) -> ServerConfiguration:
    return ServerConfiguration({"journalDirectories": [str(journal)], "ledgerDirectories": [str(ledgers)],
                                "ledgerStorageClass": DB, "dbStorage_writeCacheMaxSizeMb": 16,
                                "dbStorage_readAheadCacheMaxSizeMb": 16, **more})


def write_journal(journal, ledgers, entries: int, size: int = 100) -> bytes:
    """Through a Bookie: ledger 1 (`entries` entries, an explicit LAC, a fence), then ledger 2 (3 entries,
    never fenced), then scoped ledger 3 of scope SCOPE (2 entries). Returns ledger 1's explicit-LAC buffer."""
    lac = encode_lac(1, entries - 3, DigestType.CRC32C)
    with Bookie(conf(journal, ledgers)) as bookie:
        for eid in range(entries):
            bookie.add_entry_sync(entry(1, eid, size), KEY)
        bookie.set_explicit_lac_sync(1, lac, KEY)
        bookie.fence_sync(1, KEY)
        for eid in range(3):
            bookie.add_entry_sync(entry(2, eid, size), KEY)
        for eid in range(2):
            bookie.add_entry_sync(entry(3, eid, size, SCOPE), KEY)
    return lac


def test_index_of_unreplayed_records_serves_entries_and_ledger_state_from_the_journal_files(tmp_path):
    journal = tmp_path / "journal"
    lac = write_journal(journal, tmp_path / "ledgers", 10)
    index = JournalIndex.build([(journal, LogMark(0, 0))])
    assert (len(index), index.ledgers, index.complete) == (15, 3, True)
    assert index.bytes == sum(len(entry(1, e)) for e in range(10)) + sum(len(entry(2, e)) for e in range(3)) \
        + sum(len(entry(3, e, scope_id=SCOPE)) for e in range(2))
    for eid in range(10):
        assert index.read_entry(0, 1, eid) == entry(1, eid)
    assert index.read_entry(SCOPE, 3, 1) == entry(3, 1, scope_id=SCOPE)
    assert index.read_entry(0, 3, 1) is None and index.read_entry(0, 1, 10) is None
    assert (index.last_entry(0, 1), index.last_entry(0, 2), index.last_entry(0, 9)) == (9, 2, -1)
    assert index.entry_ids(0, 2) == {0, 1, 2}
    assert index.fenced(0, 1) and not index.fenced(0, 2)
    assert index.explicit_lac(0, 1) == lac and index.explicit_lac(0, 2) is None
    assert index.master_key(0, 2) == KEY and index.master_key(SCOPE, 3) == KEY
    assert index.knows(SCOPE, 3) and not index.knows(0, 3)

    # the resumed replay stored entries: they leave the index, and the last entry follows
    index.forget_entry(0, 1, 9)
    index.forget_entry(0, 1, 9)
    assert (len(index), index.last_entry(0, 1), index.read_entry(0, 1, 9)) == (14, 8, None)
    for eid in range(3):
        index.forget_entry(0, 2, eid)
    assert (index.last_entry(0, 2), index.entry_ids(0, 2), index.knows(0, 2)) == (-1, set(), True)
    index.forget_ledger(0, 1)
    assert (len(index), index.knows(0, 1), index.fenced(0, 1)) == (2, False, False)
    assert index.bytes == sum(len(entry(3, e, scope_id=SCOPE)) for e in range(2))


def test_index_is_bounded_and_keeps_every_fence_beyond_the_bound(tmp_path):
    journal = tmp_path / "journal"
    write_journal(journal, tmp_path / "ledgers", 10)
    index = JournalIndex.build([(journal, LogMark(0, 0))], max_entries=4)
    assert (len(index), index.complete) == (4, False)
    assert index.read_entry(0, 1, 3) == entry(1, 3) and index.read_entry(0, 1, 4) is None
    assert index.fenced(0, 1) and index.master_key(0, 2) == KEY


def test_index_read_of_a_record_that_changed_on_disk_is_an_io_error_not_other_bytes(tmp_path):
    journal = tmp_path / "journal"
    write_journal(journal, tmp_path / "ledgers", 3)
    (journal_id,) = journal_files.list_journal_ids(journal)
    index = JournalIndex.build([(journal, LogMark(0, 0))])
    path = journal_files.journal_path(journal, journal_id)
    data = open(path, "rb").read()
    at = data.index(entry(1, 1))
    with open(path, "r+b") as f:                 # entry 1's bytes now carry entry 7's id
        f.seek(at)
        f.write(entry(1, 7))
    assert index.read_entry(0, 1, 0) == entry(1, 0)
    with pytest.raises(BKBookieIOException):
        index.read_entry(0, 1, 1)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_bookie_on_a_full_ledger_disk_serves_the_journal_tail_with_its_fence_lac_and_keys(tmp_path):
    """Ledger 1's later entries, its explicit LAC and fence, and ledgers 2 and 3 altogether are only in the
    journal: the replay into a 1 MiB write cache on a full disk stops inside ledger 1."""
    journal, full = tmp_path / "journal", tmp_path / "full"
    size, entries = 16 * 1024, 200
    lac = write_journal(journal, tmp_path / "ledgers", entries, size)
    everything = [(0, 1, e, entry(1, e, size)) for e in range(entries)] + \
        [(0, 2, e, entry(2, e, size)) for e in range(3)] + [(SCOPE, 3, e, entry(3, e, size, SCOPE)) for e in range(2)]
    with tmpfs(full, 16):
        c = conf(journal, full, dbStorage_writeCacheMaxSizeMb=1, diskCheckInterval=200)
        DbLedgerStorage.from_conf([full], None, c).close()    # the index stores exist; then the disk fills
        ballast = fill(full)
        bookie = Bookie(c)
        bookie.start()
        try:
            assert "storage-full" in bookie.read_only_reasons
            served = bookie.gc_state()["journal_served_entries"]
            assert 0 < served < entries + 5, served
            # what ledger storage has not: the premise of what follows
            assert not bookie.storage.is_fenced(1) and bookie.storage.get_explicit_lac(1) is None
            assert not bookie.storage.ledger_exists(2) and not bookie.storage.ledger_exists(3, SCOPE)
            for scope_id, lid, eid, data in everything:
                assert bookie.read_entry(lid, eid, scope_id) == data, (scope_id, lid, eid)
            assert bookie.read_entry(1, -1) == entry(1, entries - 1, size)
            assert bookie.read_entry(3, -1, SCOPE) == entry(3, 1, size, SCOPE)
            assert bookie.read_last_add_confirmed(1) == entries - 2
            assert bookie.get_explicit_lac(1) == lac
            assert bookie.known_lac(0, 1) == entries - 2
            assert bookie.entries_of_ledger(1) == list(range(entries))
            assert bookie.ledger_exists(2) and bookie.ledger_exists(3, SCOPE) and not bookie.ledger_exists(4)
            with pytest.raises(BKNoSuchEntryException):     # every unreplayed record is indexed: a real miss
                bookie.read_entry(1, entries)
            with pytest.raises(BKNoSuchEntryException):     # a ledger only the journal knows
                bookie.read_entry(2, 3)
            with pytest.raises(BKNoSuchLedgerExistsException):
                bookie.read_entry(4, 0)
            # the fence of ledger 1 is only a journal record: a high-priority add still meets it
            assert bookie.is_fenced(1) and not bookie.is_fenced(2)
            with pytest.raises(BKLedgerFencedException):
                bookie._wait(lambda cb: bookie.add_entry(entry(1, entries, size), KEY, cb, high_priority=True))
            # ledger 2's key is only a journal record: a fence with another key is refused, with its key done
            with pytest.raises(BKUnauthorizedAccessException):
                bookie.fence_sync(2, OTHER_KEY)
            bookie.fence_sync(2, KEY)
            assert bookie.is_fenced(2)
            assert bookie.checkpoint() == (0, 0)     # the journal files stay while they are served from
            assert len(journal_files.list_journal_ids(journal)) == 2

            os.unlink(ballast)                      # room again: the replay resumes and the index empties
            wait_for(lambda: not bookie.read_only, 30, "writable after the disk has room")
            assert bookie.storage_full.index is None and bookie.gc_state()["journal_served_entries"] == 0
            for scope_id, lid, eid, data in everything:
                assert bookie.read_entry(lid, eid, scope_id) == data, (scope_id, lid, eid)
            assert bookie.is_fenced(1) and bookie.is_fenced(2) and bookie.storage.is_fenced(1)
            assert bookie.storage.get_explicit_lac(1) == lac
            with pytest.raises(BKError):
                bookie._wait(lambda cb: bookie.add_entry(entry(1, entries, size), KEY, cb, high_priority=True))
            bookie.add_entry_sync(entry(4, 0, size), KEY)
        finally:
            bookie.stop()
