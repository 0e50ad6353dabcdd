"""A small closed-loop READ load generator for bookie benchmarks (v2 or v3, raw sockets, no client).

Reads entries [first, last] of one ledger in order with `window` reads in flight, as a catch-up reader
would, and counts entries and bytes. Answers are walked in one reused receive buffer; v2 answers are
checked for rc 0 (the rc sits at a fixed offset), v3 answers for status EOK by protobuf on every 1,000th
answer plus the answer count (a full protobuf parse per answer would cost more CPU than the bookie's).
Used by bench/protocol_compare.py and bench/read_isolation.py.
"""

from __future__ import annotations

import socket
import struct
import time

from bkfast.codec import encode_read_request
from bkfast.proto import BookkeeperProtocol_pb2 as pb


def _v3_read(ledger_id: int, entry_id: int, txn: int) -> bytes:
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    r.readRequest.ledgerId, r.readRequest.entryId = ledger_id, entry_id
    body = r.SerializeToString()
    return struct.pack(">I", len(body)) + body


def _v3_long_poll(ledger_id: int, previous_lac: int, timeout_ms: int, txn: int) -> bytes:
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    q = r.readRequest
    q.ledgerId, q.entryId, q.flag = ledger_id, -1, pb.ReadRequest.ENTRY_PIGGYBACK
    q.previousLAC, q.timeOut = previous_lac, timeout_ms
    body = r.SerializeToString()
    return struct.pack(">I", len(body)) + body


def tail_lacs(host: str, port: int, ledgers: list[int], poll_s: float, stop) -> dict:
    """A slow tailing reader: every `poll_s` until `stop` (a threading.Event) is set, one v3 long poll
    (ENTRY_PIGGYBACK, the LAC it last saw, a `poll_s` timeout) per ledger in turn, which keeps each ledger's
    LAC tracked by the bookie. Returns {"polls", "lacs" (ledger -> the last LAC seen)}."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seen = dict.fromkeys(ledgers, -1)
    polls = 0
    try:
        while not stop.is_set():
            for ledger in ledgers:
                polls += 1
                sock.sendall(_v3_long_poll(ledger, seen[ledger], int(poll_s * 1000), polls))
                (length,) = struct.unpack(">I", _recv_exactly(sock, 4))
                answer = pb.Response.FromString(_recv_exactly(sock, length)).readResponse
                if answer.HasField("maxLAC"):
                    seen[ledger] = max(seen[ledger], answer.maxLAC)
            stop.wait(poll_s)
    finally:
        sock.close()
    return {"polls": polls, "lacs": seen}


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("bookie closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_range(host: str, port: int, ledger_id: int, first: int, last: int, protocol: str = "v2",
               window: int = 256, stop_at: float | None = None) -> dict:
    """Read entries first..last; returns {"entries", "bytes", "seconds", "errors"}. `stop_at`: a
    time.monotonic() deadline after which no new read is sent.

    Answers are received into one reused buffer and walked by offset (no object per answer): on a
    2-core machine the reader's own CPU competes with the bookie and the writer it is measured against."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    make = (lambda e: encode_read_request(ledger_id, e)) if protocol == "v2" else (lambda e: _v3_read(ledger_id, e, e))
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    have = 0
    next_entry, done, nbytes, errors = first, 0, 0, 0
    unpack_len = struct.Struct(">I").unpack_from
    unpack_rc = struct.Struct(">i").unpack_from
    t0 = time.perf_counter()
    try:
        burst = []
        while next_entry <= last and next_entry - first < window:
            burst.append(make(next_entry))
            next_entry += 1
        sock.sendall(b"".join(burst))
        outstanding = len(burst)
        while outstanding:
            if have == len(buf):
                buf.extend(bytes(len(buf)))     # a frame larger than the buffer: grow it
                view = memoryview(buf)
            n = sock.recv_into(view[have:])
            if not n:
                raise ConnectionError("bookie closed the connection")
            have += n
            pos = 0
            answered = 0
            while have - pos >= 4:
                (length,) = unpack_len(buf, pos)
                if have - pos - 4 < length:
                    break
                body = pos + 4
                done += 1
                answered += 1
                nbytes += length
                if protocol == "v2":
                    if unpack_rc(buf, body + 4)[0] != 0:
                        errors += 1
                elif done % 1000 == 0 and pb.Response.FromString(bytes(buf[body:body + length])).status != pb.EOK:
                    errors += 1
                pos = body + length
            if pos:
                buf[:have - pos] = buf[pos:have]
                have -= pos
            outstanding -= answered
            burst = []
            while answered and next_entry <= last and (stop_at is None or time.monotonic() < stop_at):
                burst.append(make(next_entry))
                next_entry += 1
                answered -= 1
            if burst:
                sock.sendall(b"".join(burst))
                outstanding += len(burst)
    finally:
        sock.close()
    return {"entries": done, "bytes": nbytes, "seconds": time.perf_counter() - t0, "errors": errors}
