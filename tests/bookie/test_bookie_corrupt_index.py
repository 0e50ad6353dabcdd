"""A bookie whose RocksDB index files are corrupt refuses to start with one line (issue 18 point 7).

A truncated MANIFEST or .sst of DbLedgerStorage's `locations` store made `bkfast bookie` exit with a raw
RocksDB traceback; it must print one line naming the store and what to do, and exit 1.

A MANIFEST cut in its last record is worse: RocksDB opens the store EMPTY without an error (and a
read-write open deletes its .sst files as obsolete), so the bookie would answer "no such entry" for
acknowledged entries. The sequence number recorded at the last checkpoint (BKFAST-CHECKPOINT) makes the
bookie refuse such a store, before anything was deleted.
"""

from __future__ import annotations

import os
import shutil

import pytest
from rocksdict import AccessType, Options, Rdict

from bkfast.codec import DigestType, encode_add_request, master_key
from bkfast.dbstorage.index import CHECKPOINT_FILE, RocksStore
from tests.server_support import BookieProcess

KEY = master_key(b"corrupt")


def _run_bookie_with_ledgers(data_dir) -> BookieProcess:
    """A bookie that acknowledged one entry in each of 199 ledgers, then stopped (SIGTERM)."""
    bookie = BookieProcess(data_dir).start()
    try:
        with bookie.connect() as client:
            for lid in range(1, 200):
                client.send_raw(encode_add_request(KEY, lid, 0, -1, 10, b"x" * 10, DigestType.CRC32C))
                client.recv_frame()
    finally:
        assert bookie.stop() == 0, bookie.log()
    return bookie


def _bookie_with_index(tmp_path) -> tuple[BookieProcess, object]:
    bookie = _run_bookie_with_ledgers(tmp_path)
    store_dir = tmp_path / "ledgers" / "current" / "locations"
    store = RocksStore(store_dir)
    store.db.flush()                 # the index into an .sst (a stopped bookie leaves it in the WAL)
    store.close()
    return bookie, store_dir


def _start_fails(bookie: BookieProcess) -> str:
    bookie.log_path.write_text("")
    bookie.launch()
    try:
        bookie.wait_started(60)
    except RuntimeError:        # it exited (or hung past the timeout: killed, and the exit code says so)
        assert bookie.proc.returncode == 1, bookie.log()
        return bookie.log_path.read_text()
    bookie.kill()
    raise AssertionError(f"the bookie started on the damaged store: {bookie.log()}")


@pytest.mark.parametrize("victim", ["sst", "MANIFEST"])
def test_truncated_rocksdb_file_gives_one_line_naming_the_store_and_what_to_do(tmp_path, victim):
    bookie, store_dir = _bookie_with_index(tmp_path)
    names = [n for n in os.listdir(store_dir) if (n.endswith(".sst") if victim == "sst" else n.startswith("MANIFEST"))]
    assert names, os.listdir(store_dir)
    path = store_dir / sorted(names)[-1]
    os.truncate(path, 20)
    log = _start_fails(bookie)
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, log
    assert str(store_dir) in lines[0] and "corrupt" in lines[0] and "restore" in lines[0], lines[0]


@pytest.fixture(scope="module")
def stopped_bookie(tmp_path_factory) -> tuple[BookieProcess, object]:
    """One stopped bookie (its stores closed by the bookie itself: the memtable flush at close is the last
    record of each MANIFEST) and a copy of its directories as they were at the stop."""
    bookie = _run_bookie_with_ledgers(tmp_path_factory.mktemp("bookie"))
    saved = tmp_path_factory.mktemp("saved")
    for name in ("journal", "ledgers"):
        shutil.copytree(bookie.data_dir / name, saved / name)
    return bookie, saved


@pytest.fixture
def restored_bookie(stopped_bookie) -> BookieProcess:
    """The stopped bookie with its directories put back in place (its cookie names their paths)."""
    bookie, saved = stopped_bookie
    for name in ("journal", "ledgers"):
        shutil.rmtree(bookie.data_dir / name)
        shutil.copytree(saved / name, bookie.data_dir / name)
    return bookie


def _opens_empty(store_dir) -> bool:
    """What RocksDB itself makes of the store: opens (read-only, nothing deleted) with no key at all."""
    try:
        db = Rdict(str(store_dir), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception:  # noqa: BLE001 - RocksDB reports the cut: not the silent case
        return False
    try:
        return db.latest_sequence_number() == 0 and next(iter(db.keys()), None) is None
    finally:
        db.close()
        del db


@pytest.mark.parametrize(("store", "fraction"), [("locations", 0.5), ("locations", 0.7), ("locations", 0.85),
                                                 ("ledgers", 0.6)])
def test_manifest_cut_to_an_empty_store_is_refused_not_served_empty(restored_bookie, store, fraction):
    bookie = restored_bookie
    store_dir = bookie.data_dir / "ledgers" / "current" / store
    assert (store_dir / CHECKPOINT_FILE).read_text().strip() == "199"     # one write per ledger
    manifest = store_dir / max(n for n in os.listdir(store_dir) if n.startswith("MANIFEST"))
    os.truncate(manifest, int(manifest.stat().st_size * fraction))
    assert _opens_empty(store_dir), "this cut is not one RocksDB opens silently as an empty store"
    files = {n: (store_dir / n).stat().st_size for n in os.listdir(store_dir) if n.endswith(".sst")}
    assert files
    log = _start_fails(bookie)
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, log
    assert str(store_dir) in lines[0] and "behind" in lines[0] and "restore" in lines[0], lines[0]
    assert {n: (store_dir / n).stat().st_size for n in files if (store_dir / n).exists()} == files  # none purged
