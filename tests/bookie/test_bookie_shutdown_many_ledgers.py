"""A real bookie holding many one-entry ledgers stops on SIGTERM in bulk, not per ledger (issue 18 point 4).

Stopping a `bkfast bookie` (DbLedgerStorage) with 1,000,000 one-entry ledgers took 81-91 s: its flush made
one entry-logger call and one GIL hand-over per ledger, and each ledger held a parsed protobuf. The times
are measured by bench/shutdown_many_ledgers.py; this test checks, on a real process with 100,000 ledgers,
what was per ledger and is bounded now: the entry-log writes of its flushes (the line the bookie logs when
its storage closes) and the RSS per ledger held after a restart.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import time

from bkfast.codec import DigestType, decode_response, encode_add_request, encode_read_request, master_key
from bkfast.errors import V2Rc
from tests.server_support import BookieProcess

LEDGERS = 100_000
BATCH = 5_000
SIZE = 64
KEY = master_key(b"many")
RESPONSE = 28                   # length prefix + v2 ADD response
CLOSED = re.compile(r"closed: (\d+) entries flushed since start, in (\d+) entry-log writes")


def _payload(lid: int) -> bytes:
    return lid.to_bytes(8, "big") * (SIZE // 8)


def _add_one_entry_ledgers(bookie: BookieProcess, n: int) -> None:
    """Entry 0 of ledgers 1..n over v2, BATCH pipelined requests at a time; every add must be acked."""
    with socket.create_connection((bookie.host, bookie.port), timeout=60) as sock:
        for first in range(1, n + 1, BATCH):
            lids = range(first, min(n, first + BATCH - 1) + 1)
            sock.sendall(b"".join(encode_add_request(KEY, lid, 0, -1, SIZE, _payload(lid), DigestType.CRC32C)
                                  for lid in lids))
            want = len(lids) * RESPONSE
            chunks, got = [], 0
            while got < want:
                chunk = sock.recv(want - got)
                assert chunk, "the bookie closed the connection"
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
            rcs = {struct.unpack_from(">i", data, i + 8)[0] for i in range(0, want, RESPONSE)}
            assert rcs == {0}, rcs


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def _settled_rss(pid: int) -> int:
    time.sleep(1.0)
    return _rss(pid)


def _sigterm(bookie: BookieProcess, timeout_s: float = 120.0) -> int:
    """SIGTERM, then the exit code (the timeout is a safety net, not a measure)."""
    os.kill(bookie.pid, signal.SIGTERM)
    rc = bookie.proc.wait(timeout_s)
    bookie.stop()
    return rc


def test_sigterm_with_many_one_entry_ledgers_flushes_in_bulk_and_memory_per_ledger_is_bounded(tmp_path):
    # No periodic checkpoint and a write cache holding everything: the flush at SIGTERM writes all of it.
    bookie = BookieProcess(tmp_path, "-D", "flushInterval=3600000", "-D", "dbStorage_writeCacheMaxSizeMb=128")
    bookie.start()
    try:
        rss_empty = _settled_rss(bookie.pid)
        _add_one_entry_ledgers(bookie, LEDGERS)
        rc = _sigterm(bookie)
        log = bookie.log(tail=None)
        assert rc == 0, log
        closed = CLOSED.findall(log)
        assert len(closed) == 1, log[-3000:]
        entries, writes = map(int, closed[0])
        assert entries == LEDGERS, log[-3000:]
        # slices of <= 1024 entries (FLUSH_SLICE_ENTRIES), a few per flush more: ~100; one per ledger before
        assert writes <= LEDGERS // 200, f"{writes} entry-log writes for {LEDGERS} one-entry ledgers"

        bookie.log_path.write_text("")
        bookie.start()
        per_ledger = (_settled_rss(bookie.pid) - rss_empty) / LEDGERS
        # ~150 B at 1,000,000 ledgers (bench/shutdown_many_ledgers.py); a parsed LedgerData each was ~670
        assert per_ledger < 400, f"{per_ledger:.0f} bytes of RSS per ledger held after the restart"
        with bookie.connect() as client:
            for lid in (1, LEDGERS // 2, LEDGERS):
                client.send_raw(encode_read_request(lid, 0))
                r = decode_response(client.recv_body())
                assert r.rc == V2Rc.EOK and bytes(r.data)[-SIZE:] == _payload(lid), (lid, r.rc)
        assert _sigterm(bookie) == 0, bookie.log()
    finally:
        bookie.kill()
