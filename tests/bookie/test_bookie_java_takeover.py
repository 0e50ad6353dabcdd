"""A bkfast Bookie takes over the directories of a stopped Java 4.16.7 bookie.

Two archives: `db_clean` (DbLedgerStorage: entry log + RocksDB) and `sorted_clean` (the default
SortedLedgerStorage: entry log + per-ledger `.idx` files), each opened with the matching storage class.
Also as a Java bookie with two journal directories: that layout is built from the archives' Java journal
records and the format facts (no two-journal Java bookie was recorded).
"""

import dataclasses
import hashlib
import json
import shutil
import struct
import tarfile
from pathlib import Path

import pytest

from bkfast.bookie import journal as jm
from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, decode_lac, encode_entry, mac_key
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKUnauthorizedAccessException, ConfigurationError
from bkfast.meta.cookies import Cookie, CookieMismatchError, check_local_cookies, write_cookie_file
from tests import VECTORS_DIR

VECTORS = VECTORS_DIR / "java_bookie_dirs"
STORAGE_CLASSES = {
    "db_clean": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted_clean": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
}
MANIFESTS = {name: json.loads((VECTORS / f"{name}.manifest.json").read_text()) for name in STORAGE_CLASSES}


@pytest.fixture(params=sorted(STORAGE_CLASSES))
def archive(request) -> str:
    return request.param


def unpack(tmp_path, archive: str) -> Path:
    with tarfile.open(VECTORS / f"{archive}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / archive


def conf_for(journal: Path, ledgers: Path, archive: str) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [str(journal)],
        "ledgerDirectories": [str(ledgers)],
        "ledgerStorageClass": STORAGE_CLASSES[archive],
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
    })


def check_every_manifest_entry(bookie: Bookie, archive: str) -> None:
    for ledger in MANIFESTS[archive]["ledgers"]:
        lid = ledger["ledgerId"]
        for e in ledger["entries"]:
            stored = bookie.read_entry(lid, e["entryId"])
            assert len(stored) == e["storedLength"]
            assert hashlib.sha256(stored).hexdigest() == e["storedSha256"], f"ledger {lid} entry {e['entryId']}"
        last = ledger["entries"][-1]
        assert hashlib.sha256(bookie.read_entry(lid, -1)).hexdigest() == last["storedSha256"]
        assert bookie.is_fenced(lid) == ledger["fenced"]
        if ledger["explicitLac"] is not None:
            digest = DigestType.parse(ledger["digestType"])
            _, ledger_id, lac = decode_lac(bookie.get_explicit_lac(lid), digest, mac_key(ledger["password_utf8"]))
            assert (ledger_id, lac) == (lid, ledger["explicitLac"])


def check_keys(bookie: Bookie, archive: str) -> None:
    for ledger in MANIFESTS[archive]["ledgers"]:
        lid, key = ledger["ledgerId"], bytes.fromhex(ledger["masterKey"])
        assert bookie.storage.get_master_key(lid) == key
        wrong = bytes(20)
        new_entry = encode_entry(lid, 10_000, 399, 1, b"x", DigestType.DUMMY)
        with pytest.raises(BKUnauthorizedAccessException):
            bookie.add_entry_sync(new_entry, wrong, recovery=True)


def test_java_bookie_is_served_byte_identically(tmp_path, archive):
    root = unpack(tmp_path, archive)
    bookie = Bookie(conf_for(root / "journal", root / "ledgers", archive))
    bookie.start()
    try:
        # Served from the Java index (.idx files or RocksDB), not rebuilt from the journal.
        for ledger in MANIFESTS[archive]["ledgers"]:
            for e in ledger["entries"]:
                assert bookie.storage.entry_location(0, ledger["ledgerId"], e["entryId"]) is not None
        check_every_manifest_entry(bookie, archive)
        check_keys(bookie, archive)
    finally:
        bookie.stop()
    # Reopened after bkfast wrote its own checkpoint (and the added entries): still all there.
    bookie = Bookie(conf_for(root / "journal", root / "ledgers", archive))
    bookie.start()
    try:
        check_every_manifest_entry(bookie, archive)
    finally:
        bookie.stop()


def test_java_bookie_killed_before_any_flush_is_recovered_from_its_journal(tmp_path, archive):
    """Entries that live only in the Java journal (no entry log, no index, no lastMark) are replayed."""
    root = unpack(tmp_path, archive)
    ledgers = tmp_path / "empty-ledgers"
    (ledgers / "current").mkdir(parents=True)
    shutil.copy(root / "ledgers" / "current" / "VERSION", ledgers / "current" / "VERSION")
    bookie = Bookie(conf_for(root / "journal", ledgers, archive))
    bookie.start()
    try:
        assert bookie.replayed_records >= sum(len(lg["entries"]) for lg in MANIFESTS[archive]["ledgers"])
        check_every_manifest_entry(bookie, archive)
        check_keys(bookie, archive)
    finally:
        bookie.stop()


# --- a Java bookie that ran two journal directories ------------------------------------------------
# No two-journal Java data was recorded, so the layout is built here from the format facts (spec §4.2,
# §4.3, §5.5) out of the recorded Java journal's own records: Java 4.16 sends every record of ledger L to
# journal L mod 2 (BookieImpl.getJournal), each journal dir has its own `<hex id>.txn` files (V6: 512-byte
# header, records, a padding record up to the 512-byte alignment, a zero-filled pre-allocated tail), each
# journal's mark is `lastMark.<index>` in every ledger dir, and the cookie's journalDir lists both dirs.

def _java_journal_file(path: Path, records: list[bytes]) -> int:
    """Write a V6 journal file as Java's JournalChannel lays it out; return the position after the last
    flush (Java's lastLogMark offset once it is synced)."""
    body = bytearray(b"BKLG" + struct.pack(">i", 6)).ljust(512, b"\0")
    for record in records:
        body += struct.pack(">i", len(record)) + record
    gap = 512 - len(body) % 512
    if gap != 512:                      # the padding record before a flush: PADDING_MASK, padLen, zeros
        pad_len = gap - 8 if gap >= 8 else 512 + gap - 8
        body += struct.pack(">ii", -256, pad_len) + bytes(pad_len)
    end = len(body)
    body += bytes(-len(body) % (1 << 20))   # the pre-allocated tail
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return end


def two_journal_java_bookie(tmp_path, archive: str, marks: str) -> tuple[Path, list[Path], list[list[bytes]]]:
    """The archive's bookie as if it had run journalDirectories=<root>/journal0,<root>/journal1.

    marks: "none" (kill -9 before any checkpoint: empty ledger dir, both lastMark.<i> all zeros),
    "clean" (stopped cleanly: each mark at its journal's end), "second-behind" (kill -9 after journal 0's
    records were checkpointed but not journal 1's: lastMark.1 at journal 1's header).
    """
    root = unpack(tmp_path, archive)
    (java_id,) = jm.list_journal_ids(root / "journal")
    shares: list[list[bytes]] = [[], []]
    for _, record in jm.scan_journal(root / "journal", java_id):
        shares[struct.unpack_from(">q", record)[0] % 2].append(record)
    dirs = [root / "journal0", root / "journal1"]
    ends = [_java_journal_file(d / "current" / f"{java_id + i:x}.txn", shares[i]) for i, d in enumerate(dirs)]
    java_cookie = Cookie.parse((root / "journal" / "current" / "VERSION").read_bytes())
    shutil.rmtree(root / "journal")
    ledgers = root / "ledgers"
    if marks == "none":
        shutil.rmtree(ledgers)
        (ledgers / "current").mkdir(parents=True)
    (ledgers / "current" / "lastMark").unlink(missing_ok=True)
    mark_values = {"none": [(0, 0), (0, 0)],
                   "clean": [(java_id, ends[0]), (java_id + 1, ends[1])],
                   "second-behind": [(java_id, ends[0]), (java_id + 1, 512)]}[marks]
    for i, (journal_id, offset) in enumerate(mark_values):
        (ledgers / "current" / f"lastMark.{i}").write_bytes(struct.pack(">qq", journal_id, offset))
    cookie = dataclasses.replace(java_cookie, journal_dirs=tuple(str(d) for d in dirs),
                                 ledger_dirs=(str(ledgers),))
    for d in [*dirs, ledgers]:
        write_cookie_file(str(d), cookie)
    return ledgers, dirs, shares


def two_journal_conf(journals: list[Path], ledgers: Path, archive: str) -> ServerConfiguration:
    conf = conf_for(journals[0], ledgers, archive)
    conf.set("journalDirectories", ",".join(str(j) for j in journals))
    return conf


@pytest.mark.parametrize("marks", ["none", "clean", "second-behind"])
def test_java_bookie_with_two_journal_dirs_is_taken_over(tmp_path, archive, marks):
    ledgers, journals, shares = two_journal_java_bookie(tmp_path, archive, marks)
    assert all(shares)                               # both journals hold ledgers
    conf = two_journal_conf(journals, ledgers, archive)
    check_local_cookies(conf, "127.0.0.1:3283")      # what `bkfast bookie --no-metadata` checks: accepted
    bookie = Bookie(conf)
    bookie.start()
    try:
        replayed = {"none": len(shares[0]) + len(shares[1]), "clean": 0, "second-behind": len(shares[1])}
        assert bookie.replayed_records == replayed[marks]
        check_every_manifest_entry(bookie, archive)
        check_keys(bookie, archive)
    finally:
        bookie.stop()
    # bkfast's own checkpoint kept Java's naming: one mark per journal, in its journal's dir
    for i, journal in enumerate(journals):
        mark = jm.read_last_mark([ledgers], journal_index=i)
        assert mark.journal_id in jm.list_journal_ids(journal)
    with pytest.raises(CookieMismatchError, match=f"missing journal directory {journals[1]}"):
        check_local_cookies(two_journal_conf(journals[:1], ledgers, archive), "127.0.0.1:3283")
    with pytest.raises(ConfigurationError, match=r"lastMark\.1"):
        Bookie(two_journal_conf(journals[:1], ledgers, archive))
