"""GET /api/v1/bookie/last_log_mark of a real `bkfast bookie --no-metadata` process with two journal
directories: one key per journal (Java's shape), each with that journal's own mark as its
`lastMark.<i>` files hold it after a checkpoint that covers records in both journals."""

from __future__ import annotations

import json
import time
import urllib.request

from bkfast.bookie import journal as jm
from bkfast.bookie.bookie import Bookie
from bkfast.cli.local_cluster import free_port
from bkfast.codec import DigestType, decode_response, encode_add_request, master_key
from bkfast.conf import ServerConfiguration
from tests.server_support import BookieProcess

KEY = master_key(b"two-journals")
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"


def last_log_mark(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/bookie/last_log_mark", timeout=10) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def as_answer(marks) -> dict:
    return {f"LastLogMark: Journal Id - {m.journal_id}({m.journal_id:x}.txn)": f"Pos - {m.offset}" for m in marks}


def test_last_log_mark_over_http_shows_every_journal_mark(tmp_path):
    j0, j1, ledgers = tmp_path / "j0", tmp_path / "j1", tmp_path / "ledgers"
    # The answer has one key per journal *file id* (as Java's); a new journal file takes the dir's newest id
    # + 1, or the clock in an empty dir, so two journals started in the same millisecond share an id. An
    # empty journal file left in j1 by an earlier bookie (other ledger dirs) keeps the two ids apart.
    with Bookie(ServerConfiguration({"journalDirectories": [str(j1)], "ledgerDirectories": [str(tmp_path / "old")],
                                     "ledgerStorageClass": DB, "dbStorage_writeCacheMaxSizeMb": 4,
                                     "dbStorage_readAheadCacheMaxSizeMb": 4})):
        pass
    http_port = free_port()
    bookie = BookieProcess(tmp_path, "-D", f"journalDirectories={j0},{j1}", "-D", "flushInterval=100",
                           "-D", "httpServerEnabled=true", "-D", f"httpServerPort={http_port}")
    try:
        bookie.start()
        with bookie.connect() as client:
            # ledger 2 -> journal 0 (one small entry), ledgers 1 and 3 -> journal 1 (many larger ones)
            for ledger, entries, size in ((2, 1, 10), (1, 20, 4000), (3, 20, 4000)):
                for e in range(entries):
                    client.send_raw(encode_add_request(KEY, ledger, e, e - 1, (e + 1) * size, b"x" * size,
                                                       DigestType.CRC32C))
                    assert decode_response(client.recv_body()).rc == 0
        # Every add is durable; the next checkpoint (flushInterval 100 ms) persists both journals' marks past
        # them, and later checkpoints write the same marks again (the answer is checked once they stay).
        deadline, previous = time.monotonic() + 30, None
        while True:
            marks = [jm.read_last_mark([ledgers], journal_index=i) for i in range(2)]
            answer = last_log_mark(http_port)
            assert len(answer) == 2, answer      # both journals, from the start-up checkpoint on
            if all(m.offset > jm.HEADER_SIZE for m in marks) and marks == previous and answer == as_answer(marks):
                break
            previous = marks
            assert time.monotonic() < deadline, (answer, marks)
            time.sleep(0.1)
        for journal_dir, mark in zip((j0, j1), marks, strict=True):
            assert mark.journal_id == jm.list_journal_ids(journal_dir)[-1]     # its own journal's current file
        assert marks[0].journal_id != marks[1].journal_id
        assert marks[1].offset > marks[0].offset          # journal 1 holds 40 entries of 4000 bytes, journal 0 one
        assert bookie.alive()
    finally:
        assert bookie.stop() == 0, bookie.log()
