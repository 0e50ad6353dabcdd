"""A bkfast Bookie takes over the directories of a stopped Java 4.16.7 bookie (DbLedgerStorage)."""

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
MANIFEST = json.loads((VECTORS / "db_clean.manifest.json").read_text())


def unpack(tmp_path) -> Path:
    with tarfile.open(VECTORS / "db_clean.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "db_clean"


def conf_for(journal: Path, ledgers: Path) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [str(journal)],
        "ledgerDirectories": [str(ledgers)],
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
    })


def check_every_manifest_entry(bookie: Bookie) -> None:
    for ledger in MANIFEST["ledgers"]:
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


def check_keys(bookie: Bookie) -> None:
    for ledger in MANIFEST["ledgers"]:
        lid, key = ledger["ledgerId"], bytes.fromhex(ledger["masterKey"])
        assert bookie.storage.get_master_key(lid) == key
        wrong = bytes(20)
        new_entry = encode_entry(lid, 10_000, 399, 1, b"x", DigestType.DUMMY)
        with pytest.raises(BKUnauthorizedAccessException):
            bookie.add_entry_sync(new_entry, wrong, recovery=True)


def test_java_dbledgerstorage_bookie_is_served_byte_identically(tmp_path):
    root = unpack(tmp_path)
    bookie = Bookie(conf_for(root / "journal", root / "ledgers"))
    bookie.start()
    try:
        check_every_manifest_entry(bookie)
        check_keys(bookie)
    finally:
        bookie.stop()


def test_java_bookie_killed_before_any_flush_is_recovered_from_its_journal(tmp_path):
    """Entries that live only in the Java journal (no entry log, no index, no lastMark) are replayed."""
    root = unpack(tmp_path)
    ledgers = tmp_path / "empty-ledgers"
    (ledgers / "current").mkdir(parents=True)
    shutil.copy(root / "ledgers" / "current" / "VERSION", ledgers / "current" / "VERSION")
    bookie = Bookie(conf_for(root / "journal", ledgers))
    bookie.start()
    try:
        assert bookie.replayed_records >= sum(len(lg["entries"]) for lg in MANIFEST["ledgers"])
        check_every_manifest_entry(bookie)
        check_keys(bookie)
    finally:
        bookie.stop()
