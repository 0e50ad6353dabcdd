"""A bookie whose RocksDB index files are corrupt refuses to start with one line (issue 18 point 7).

A truncated MANIFEST or .sst of DbLedgerStorage's `locations` store made `bkfast bookie` exit with a raw
RocksDB traceback; it must print one line naming the store and what to do, and exit 1.
"""

from __future__ import annotations

import os

import pytest

from bkfast.codec import DigestType, encode_add_request, master_key
from bkfast.dbstorage.index import RocksStore

from .server_support import BookieProcess

KEY = master_key(b"corrupt")


def _bookie_with_index(tmp_path) -> tuple[BookieProcess, object]:
    bookie = BookieProcess(tmp_path).start()
    try:
        with bookie.connect() as client:
            for lid in range(1, 200):
                client.send_raw(encode_add_request(KEY, lid, 0, -1, 10, b"x" * 10, DigestType.CRC32C))
                client.recv_frame()
    finally:
        assert bookie.stop() == 0, bookie.log()
    store_dir = tmp_path / "ledgers" / "current" / "locations"
    store = RocksStore(store_dir)
    store.db.flush()                 # the index into an .sst (a stopped bookie leaves it in the WAL)
    store.close()
    return bookie, store_dir


def _start_fails(bookie: BookieProcess) -> str:
    bookie.log_path.write_text("")
    bookie.launch()
    try:
        assert bookie.proc.wait(60) == 1
    finally:
        bookie.kill()
    return bookie.log_path.read_text()


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
