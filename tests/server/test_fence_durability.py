"""A fence answered by a `bkfast bookie` process survives SIGKILL after the journal stopped covering it.

The Bookie writes the fenced flag to ledger storage without a sync (the reactor never waits on a disk
sync, issue 26) and answers once the fence's journal record is durable. Until a checkpoint the journal
record covers a crash (replay re-applies it); the checkpoint must make the flag durable in ledger storage
before lastMark passes the record. Here lastMark is past the fence record when the bookie is killed, so
replay never sees the record: the flag ledger storage made durable is all that can refuse the next add.
"""

from __future__ import annotations

import time

import pytest

from bkfast.bookie.journal import RecordKind, parse_record
from bkfast.bookie.journal_files import records_after
from bkfast.bookie.logmark import LogMark, read_last_mark
from bkfast.codec import DigestType, decode_response, encode_add_request, master_key
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.server_support import BookieProcess

KEY = master_key("secret")
CRC = DigestType.CRC32C
EFENCED = 104
LEDGER = 7
STORAGES = ["DbLedgerStorage", "SortedLedgerStorage", "InterleavedLedgerStorage"]


def _fence_records(journal_dir, after) -> list[LogMark]:
    """The journal position just past each fence record of LEDGER after `after` (what replay reads)."""
    found = []
    for journal_id, offset, record in records_after(journal_dir, after):
        r = parse_record(record)
        if r.kind == RecordKind.FENCE and r.ledger_id == LEDGER:
            found.append(LogMark(journal_id, offset))
    return found


@pytest.mark.parametrize("storage", STORAGES)
def test_fence_checkpointed_past_its_journal_record_survives_sigkill(tmp_path, storage):
    journal_dir, ledger_dirs = tmp_path / "journal", [tmp_path / "ledgers"]
    b = BookieProcess(tmp_path, "-D", f"ledgerStorageClass={storage}", "-D", "flushInterval=100")
    b.start()
    try:
        with b.connect() as c:
            c.send_raw(b"".join(encode_add_request(KEY, LEDGER, e, e - 1, e + 1, b"f", CRC) for e in range(3)))
            assert all(decode_response(c.recv_body()).rc == 0 for _ in range(3))
        with b.connect() as c:                                  # a v2 connection stays v2: a new one
            r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=LEDGER, entryId=-1, masterKey=KEY,
                                                     flag=pb.ReadRequest.FENCE_LEDGER))
            assert r.status == pb.EOK
        (fenced_at,) = _fence_records(journal_dir, LogMark(0, 0))
        deadline = time.monotonic() + 30
        while read_last_mark(ledger_dirs) < fenced_at:
            assert time.monotonic() < deadline, f"no checkpoint passed the fence record at {fenced_at}"
            time.sleep(0.05)
        assert _fence_records(journal_dir, read_last_mark(ledger_dirs)) == []   # replay will not fence
        b.kill()
        b.start()
        with b.connect() as c:
            c.send_raw(encode_add_request(KEY, LEDGER, 3, 2, 4, b"late", CRC))
            assert decode_response(c.recv_body()).rc == EFENCED
    finally:
        b.stop()
