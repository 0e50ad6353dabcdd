"""v2 (binary) request handling for the bookie server (spec §2.2).

Owns: one run of a v2 connection's frames at a time — consecutive plain ADDs as one Bookie batch,
consecutive plain READs answered from memory in one Cython call (misses go to the read pool), and the
general path for everything else (fencing reads, BATCH_READ, AUTH, legacy version-0 frames, ADDs of a
Bookie without batching). Responses go into the connection's coalesced FrameBuilder.

Stats (bkfast.net.request_stats): a run of ADDs and of memory reads is recorded in one call each; every
other request records its own (READ_ENTRY_REQUEST / ADD_ENTRY_REQUEST from its arrival, the processing
stat of the thread that ran it). As Java's v2 processors, fencing reads count as plain reads.

Must never: read the disk or wait for a disk sync on the reactor thread (every storage read that may miss
memory goes through `conn.read_async`; fences and adds are answered from the journal's completions), or
answer a fencing read before the fence is durable.
"""

from __future__ import annotations

import logging
import struct

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
from bkfast.errors import BKError, BKTooManyRequestsException, FrameError, V2Rc, v2_rc_for
from bkfast.net import v3_handler
from bkfast.net.request_stats import record
from bkfast.stats import now_ns

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
TOO_MANY_ADDS = BKTooManyRequestsException("the bookie is throttling requests: too many pending adds")


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
            return i + conn.submit_adds(adds, ids, lambda error, done_ids: answer_adds(conn, error, done_ids),
                                        queued=True)
    lookup = factory.read_cached
    if lookup is not None:
        t0 = now_ns()
        j, misses = serve_v2_reads(frames, i, conn.out, lookup, conn.reading_ledgers, factory.output_limit,
                                   conn.read_room(), factory.entry_bytes, factory.read_bytes)
        if j > i:
            hits = j - i - len(misses)
            took = factory.stats.reads_from_memory(factory.bookie_stats, hits, conn.arrival_ns, t0)
            conn.bookie.count_reads_from_memory(hits, took / 1e9)
            for ledger_id, entry_id, version in misses:
                read_entry(conn, ledger_id, entry_id, version)
            return j
    handle_frame(conn, frames[i])
    return i + 1


def answer_adds(conn, error, ids) -> None:
    conn.out.add_add_responses(V2Rc.EOK if error is None else v2_rc_for(error), ids)


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


def read_entry(conn, ledger_id: int, entry_id: int, version: int, arrival: int | None = None,
               begin: int | None = None) -> None:
    """Read one entry on the read pool and answer it. Stats: READ_ENTRY of the thread that reads it (from
    `begin`, when its processing began before, with a fence), READ_ENTRY_REQUEST from `arrival`."""
    bookie = conn.bookie
    stats = conn.factory.stats
    if arrival is None:
        arrival = conn.arrival_ns

    def deliver(result):
        ok = not isinstance(result, BaseException)
        record(stats.read_request, ok, arrival)
        if not ok:
            read_response(conn, v2_rc_for(result), ledger_id, entry_id, b"", version)
        else:
            read_response(conn, V2Rc.EOK, ledger_id, entry_id, result, version)

    job = stats.timed(lambda: bookie.read_entry(ledger_id, entry_id),
                      stats.read_entry_of(conn.factory.read_pool, ledger_id), arrival, begin)
    conn.read_async(ledger_id, job, deliver)


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


def error(conn, r, rc: int, arrival: int | None = None) -> None:
    """Answer r with the error rc; its request stat fails, from `arrival` (default: this socket read's)."""
    stats = conn.factory.stats
    since = conn.arrival_ns if arrival is None else arrival
    if r.opcode == OP_ADD:
        record(stats.add_request, False, since)
        add_response(conn, rc, r.ledger_id, r.entry_id, r.version)
    elif r.opcode == OP_READ:
        record(stats.read_request, False, since)
        read_response(conn, rc, r.ledger_id, r.entry_id, b"", r.version)
    elif r.opcode == OP_BATCH_READ:
        record(stats.read_request, False, since)
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
    stats = conn.factory.stats
    arrival = conn.arrival_ns
    if conn.too_many_adds():
        stats.adds_rejected(1, TOO_MANY_ADDS, arrival)
        add_response(conn, V2Rc.ETOOMANYREQUESTS, ledger_id, entry_id, version)
        conn.respond()
        return
    conn.add_started()
    start = now_ns()
    stats.write_queued.ok_ns(start - arrival)
    stats.reactor_tasks += 1

    def done(err):
        conn.add_finished()
        stats.add_processed(err, start)
        record(stats.add_request, err is None, arrival)
        if conn.connected:
            add_response(conn, V2Rc.EOK if err is None else v2_rc_for(err), ledger_id, entry_id, version)
            conn.respond()

    flags = r.flags
    conn.bookie.add_entry(r.entry, r.master_key, done, recovery=bool(flags & FLAG_RECOVERY_ADD),
                          high_priority=bool(flags & (FLAG_HIGH_PRIORITY | FLAG_RECOVERY_ADD)))


def fence_if_asked(conn, r, then) -> None:
    """then() now, or for a fencing read (DO_FENCING) once the fence is durable; EUA without a key
    (spec §6.1). The Bookie answers the fence from its journal thread: nothing here waits."""
    if not r.flags & FLAG_DO_FENCING:
        then()
        return
    if r.master_key is None:
        error(conn, r, V2Rc.EUA)
        return
    arrival = conn.arrival_ns

    def fenced(err):
        if not conn.connected:
            return
        if err is not None:
            error(conn, r, v2_rc_for(err), arrival)
        else:
            then()

    conn.bookie.fence(r.ledger_id, r.master_key, fenced)


def read(conn, r) -> None:
    arrival, begin = conn.arrival_ns, now_ns()

    def go():
        read_entry(conn, r.ledger_id, r.entry_id, r.version, arrival, begin)
        conn.respond()

    fence_if_asked(conn, r, go)


def read_batch(bookie, ledger_id: int, start: int, max_count: int, max_size: int):
    """Entries from `start` on (read pool): at most max_count, and no more than fit max_size bytes of
    answer unless it is the first; the error of the first one when it cannot be read."""
    entries: list[bytes] = []
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


def batch_read(conn, r) -> None:
    """BATCH_READ: recorded as Java records a read (READ_ENTRY, READ_ENTRY_REQUEST)."""
    bookie = conn.bookie
    stats = conn.factory.stats
    arrival, begin = conn.arrival_ns, now_ns()
    ledger_id, start, max_count, max_size = r.ledger_id, r.entry_id, max(r.max_count, 1), r.max_size

    def deliver(result):
        ok = not isinstance(result, BaseException)
        record(stats.read_request, ok, arrival)
        rc, entries = (V2Rc.EOK, result) if ok else (v2_rc_for(result), ())
        batch_read_response(conn, rc, ledger_id, start, r.request_id, entries, r.version)

    def go():
        job = stats.timed(lambda: read_batch(bookie, ledger_id, start, max_count, max_size),
                          stats.read_entry_of(conn.factory.read_pool, ledger_id), arrival, begin)
        conn.read_async(ledger_id, job, deliver)
        conn.respond()

    fence_if_asked(conn, r, go)


def auth(conn, r) -> None:
    body = _HEADER.pack(v2_header(r.version, OP_AUTH)) + v3_handler.auth_disabled_message()
    conn.out.add_frame(body)
    conn.respond()
