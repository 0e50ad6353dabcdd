"""A small closed-loop READ load generator for bookie benchmarks (v2 or v3, raw sockets, no client).

Reads entries [first, last] of one ledger in order with `window` reads in flight, as a catch-up reader
would, and counts entries and bytes. Answers are cut with the Cython FrameSplitter; v2 answers are
checked for rc 0 (the rc sits at a fixed offset), v3 answers for status EOK by protobuf on every 1,000th
answer plus the answer count (a full protobuf parse per answer would cost more CPU than the bookie's).
Used by bench/protocol_compare.py and bench/read_isolation.py.
"""

from __future__ import annotations

import socket
import struct
import time

from bkfast.codec import FrameSplitter, encode_read_request
from bkfast.proto import BookkeeperProtocol_pb2 as pb


def _v3_read(ledger_id: int, entry_id: int, txn: int) -> bytes:
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    r.readRequest.ledgerId, r.readRequest.entryId = ledger_id, entry_id
    body = r.SerializeToString()
    return struct.pack(">I", len(body)) + body


def read_range(host: str, port: int, ledger_id: int, first: int, last: int, protocol: str = "v2",
               window: int = 256, stop_at: float | None = None) -> dict:
    """Read entries first..last; returns {"entries", "bytes", "seconds", "errors"}. `stop_at`: a
    time.monotonic() deadline after which no new read is sent."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    splitter = FrameSplitter(64 << 20)
    make = (lambda e: encode_read_request(ledger_id, e)) if protocol == "v2" else (lambda e: _v3_read(ledger_id, e, e))
    next_entry, done, nbytes, errors = first, 0, 0, 0
    t0 = time.perf_counter()
    try:
        burst = []
        while next_entry <= last and next_entry - first < window:
            burst.append(make(next_entry))
            next_entry += 1
        sock.sendall(b"".join(burst))
        outstanding = len(burst)
        while outstanding:
            data = sock.recv(1 << 20)
            if not data:
                raise ConnectionError("bookie closed the connection")
            frames = splitter.feed(data)
            burst = []
            for frame in frames:
                outstanding -= 1
                done += 1
                nbytes += len(frame)
                if protocol == "v2":
                    if struct.unpack_from(">i", frame, 4)[0] != 0:
                        errors += 1
                elif done % 1000 == 0 and pb.Response.FromString(frame).status != pb.EOK:
                    errors += 1
                if next_entry <= last and (stop_at is None or time.monotonic() < stop_at):
                    burst.append(make(next_entry))
                    next_entry += 1
            if burst:
                sock.sendall(b"".join(burst))
                outstanding += len(burst)
    finally:
        sock.close()
    return {"entries": done, "bytes": nbytes, "seconds": time.perf_counter() - t0, "errors": errors}
