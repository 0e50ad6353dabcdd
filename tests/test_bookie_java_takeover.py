"""A bkfast Bookie takes over the directories of a stopped Java 4.16.7 bookie.

Two archives: `db_clean` (DbLedgerStorage: entry log + RocksDB) and `sorted_clean` (the default
SortedLedgerStorage: entry log + per-ledger `.idx` files), each opened with the matching storage class.
"""

import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, decode_lac, encode_entry, mac_key
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKUnauthorizedAccessException

VECTORS = Path(__file__).parent / "vectors" / "java_bookie_dirs"
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
