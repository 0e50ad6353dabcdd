"""v2 (binary) request handling for the bookie server (spec §2.2).

Owns: one run of a v2 connection's frames at a time — consecutive plain ADDs as one Bookie batch,
consecutive plain READs answered from memory in one Cython call (misses go to the read pool), and the
general path for everything else (fencing reads, BATCH_READ, AUTH, legacy version-0 frames, ADDs of a
Bookie without batching). Responses go into the connection's coalesced FrameBuilder.

Must never: read the disk on the reactor thread (every storage read that may miss memory goes through
`conn.read_async`), or answer a fencing read before the fence is durable.
"""

from __future__ import annotations

import logging
import struct
from time import perf_counter

from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    OP_ADD,
    OP_AUTH,
    OP_BATCH_READ,
    OP_READ,
    decode_request,
    decode_v2_adds,
    serve_v2_reads,
)
from bkfast.errors import BKError, FrameError, V2Rc, v2_rc_for
from bkfast.net import v3_handler

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")


def v2_header(version: int, opcode: int) -> int:
    """Java's PacketHeader.toInt for a response: version 0 (legacy) is the bare opcode."""
    return opcode if version == 0 else ((version & 0xFF) << 24) | ((opcode & 0xFF) << 16)


def handle_run(conn, frames: list, i: int) -> int:
    """Handle the run of frames that starts at frames[i]; returns the index of the first frame not
    handled (the caller holds the rest if the connection blocked)."""
    factory = conn.factory
    if factory.batch_adds:
        adds, ids, j = decode_v2_adds(frames, i)
        if adds:
            return i + conn.submit_adds(adds, ids, lambda error, done_ids: answer_adds(conn, error, done_ids))
    lookup = factory.read_cached
    if lookup is not None:
        t0 = perf_counter()
        j, misses = serve_v2_reads(frames, i, conn.out, lookup, conn.reading_ledgers, factory.output_limit,
                                   conn.read_room())
        if j > i:
            conn.bookie.count_reads_from_memory(j - i - len(misses), perf_counter() - t0)
            for ledger_id, entry_id, version in misses:
                read_entry(conn, ledger_id, entry_id, version)
            return j
    handle_frame(conn, frames[i])
    return i + 1


def answer_adds(conn, error, ids) -> None:
    rc = V2Rc.EOK if error is None else v2_rc_for(error)
    add_response = conn.out.add_add_response
    for ledger_id, entry_id, version in ids:
        if version == 0:
            add_response_v0(conn, rc, ledger_id, entry_id)
        else:
            add_response(rc, ledger_id, entry_id, version)


# The FrameBuilder writes (version << 24 | op << 16) for every version; Java answers a legacy
# version-0 request with the bare opcode as header, so that rare case is built here.
def add_response_v0(conn, rc, ledger_id, entry_id) -> None:
    conn.out.add_frame(struct.pack(">Iiqq", OP_ADD, rc, ledger_id, entry_id))


def add_response(conn, rc, ledger_id, entry_id, version) -> None:
    if version == 0:
        add_response_v0(conn, rc, ledger_id, entry_id)
    else:
        conn.out.add_add_response(rc, ledger_id, entry_id, version)


def read_response(conn, rc, ledger_id, entry_id, data, version) -> None:
    if version == 0:
        conn.out.add_frame(struct.pack(">Iiqq", OP_READ, rc, ledger_id, entry_id) + bytes(data))
    else:
        conn.out.add_read_response(rc, ledger_id, entry_id, data, version)


def batch_read_response(conn, rc, ledger_id, start, request_id, entries, version) -> None:
    if version == 0:
        conn.out.add_frame(struct.pack(">Iiqqq", OP_BATCH_READ, rc, ledger_id, start, request_id) +
                           b"".join(struct.pack(">I", len(e)) + bytes(e) for e in entries))
    else:
        conn.out.add_batch_read_response(rc, ledger_id, start, request_id, entries, version)


def read_entry(conn, ledger_id: int, entry_id: int, version: int) -> None:
    """Read one entry on the read pool and answer it."""
    bookie = conn.bookie

    def deliver(result):
        if isinstance(result, BaseException):
            read_response(conn, v2_rc_for(result), ledger_id, entry_id, b"", version)
        else:
            read_response(conn, V2Rc.EOK, ledger_id, entry_id, result, version)

    conn.read_async(ledger_id, lambda: bookie.read_entry(ledger_id, entry_id), deliver)


def handle_frame(conn, frame: bytes) -> None:
    """One v2 frame through the general path."""
    try:
        r = decode_request(frame)
    except (FrameError, BKError, ValueError) as err:
        # Java's decoder throws and the pipeline closes the connection.
        conn.close(f"undecodable v2 frame: {err}")
        return
    try:
        handle(conn, r)
    except Exception as err:
        log.exception("v2 request failed")
        conn.close(f"v2 request failed: {err}")


def handle(conn, r) -> None:
    op = r.opcode
    if r.version > 2 or r.version < 0:
        error(conn, r, V2Rc.EBADVERSION)
        return
    if op == OP_ADD:
        add(conn, r)
    elif op == OP_READ:
        read(conn, r)
    elif op == OP_BATCH_READ:
        batch_read(conn, r)
    elif op == OP_AUTH:
        auth(conn, r)
    else:  # decode_request already refuses other opcodes
        conn.close(f"v2 opcode {op}")


def error(conn, r, rc: int) -> None:
    if r.opcode == OP_ADD:
        add_response(conn, rc, r.ledger_id, r.entry_id, r.version)
    elif r.opcode == OP_READ:
        read_response(conn, rc, r.ledger_id, r.entry_id, b"", r.version)
    elif r.opcode == OP_BATCH_READ:
        batch_read_response(conn, rc, r.ledger_id, r.entry_id, r.request_id, (), r.version)
    else:
        conn.close(f"error {rc} for v2 opcode {r.opcode}")
        return
    conn.respond()


def add(conn, r) -> None:
    ledger_id, entry_id, version = r.ledger_id, r.entry_id, r.version
    if r.entry_format != 1:
        # v2 has no room for a scope (spec scope-ids "Wire"): refuse scoped entries.
        error(conn, r, V2Rc.EBADREQ)
        return
    if conn.too_many_adds():
        error(conn, r, V2Rc.ETOOMANYREQUESTS)
        return
    conn.add_started()

    def done(err):
        conn.add_finished()
        if conn.connected:
            add_response(conn, V2Rc.EOK if err is None else v2_rc_for(err), ledger_id, entry_id, version)
            conn.respond()

    flags = r.flags
    conn.bookie.add_entry(r.entry, r.master_key, done, recovery=bool(flags & FLAG_RECOVERY_ADD),
                          high_priority=bool(flags & (FLAG_HIGH_PRIORITY | FLAG_RECOVERY_ADD)))


def fence_then(conn, r, then) -> None:
    """Fence (DO_FENCING) before a read; EUA without a key (spec §6.1)."""
    if r.master_key is None:
        error(conn, r, V2Rc.EUA)
        return

    def fenced(err):
        if not conn.connected:
            return
        if err is not None:
            error(conn, r, v2_rc_for(err))
        else:
            then()

    conn.bookie.fence(r.ledger_id, r.master_key, fenced)


def read(conn, r) -> None:
    def go():
        read_entry(conn, r.ledger_id, r.entry_id, r.version)
        conn.respond()

    if r.flags & FLAG_DO_FENCING:
        fence_then(conn, r, go)
    else:
        go()


def batch_read(conn, r) -> None:
    bookie = conn.bookie
    ledger_id, start, max_count, max_size = r.ledger_id, r.entry_id, max(r.max_count, 1), r.max_size

    def read_batch():
        entries = []
        frame_size = 24 + 8 + 4
        for i in range(max_count):
            try:
                data = bookie.read_entry(ledger_id, start + i)
            except Exception as err:
                if not entries:
                    return err
                break
            frame_size += len(data) + 4
            if entries and max_size > 0 and frame_size > max_size:
                break
            entries.append(data)
        return entries

    def deliver(result):
        if isinstance(result, BaseException):
            batch_read_response(conn, v2_rc_for(result), ledger_id, start, r.request_id, (), r.version)
        else:
            batch_read_response(conn, V2Rc.EOK, ledger_id, start, r.request_id, result, r.version)

    def go():
        conn.read_async(ledger_id, read_batch, deliver)
        conn.respond()

    if r.flags & FLAG_DO_FENCING:
        fence_then(conn, r, go)
    else:
        go()


def auth(conn, r) -> None:
    body = _HEADER.pack(v2_header(r.version, OP_AUTH)) + v3_handler.auth_disabled_message()
    conn.out.add_frame(body)
    conn.respond()
