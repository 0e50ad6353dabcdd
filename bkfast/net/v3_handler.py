"""v3 (protobuf) request handling for the bookie server (spec §2).

Runs of v3 ADD_ENTRY requests (without DEFERRED_SYNC) and of plain READ_ENTRY requests take the Cython
fast path (bkfast._codec: decode_v3_adds, serve_v3_reads and FrameBuilder's v3 responses, byte-identical
to protobuf's serialization); every other request is parsed with protobuf and handled here. Reads that
may touch the disk go through the connection's read pool (`conn.read_async`); long-poll waits are reactor
timers woken by the Bookie's LAC tracker when an entry reaches ledger storage.

Responses: header VERSION_THREE with the request's operation and txnId (never its priority), outer
status equal to the inner response's status, EBADREQ for unknown operations. `ledgerScopeId` (1000)
is read from requests and echoed in responses only when it is not 0, so scope 0 is byte-identical
to Java.

Stats (bkfast.net.request_stats): fast-path runs record per batch; every other request's reply records
its X_REQUEST stat (from the arrival of the socket read that brought it; failed unless EOK) and its
handler the processing stat, as Java's *ProcessorV3 classes do (fencing reads READ_ENTRY_FENCE_*, long
polls READ_ENTRY_LONG_POLL_*).
"""

from __future__ import annotations

import functools
import logging
import struct

from bkfast.codec import decode_v3_adds, serve_v3_reads
from bkfast.errors import BKError, BKNoSuchEntryException, BKTooManyRequestsException, V3Status, v3_status_for
from bkfast.ids import DEFERRED_SYNC, scope_field, scope_from_field
from bkfast.net.request_stats import record
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.stats import now_ns

log = logging.getLogger(__name__)

TOTAL_DISK_CAPACITY = 0x01
FREE_DISK_SPACE = 0x02
TOO_MANY_ADDS = BKTooManyRequestsException("the bookie is throttling requests: too many pending adds")

# The X_REQUEST stat (a RequestStats attribute) of each operation; READ_ENTRY's depends on the request.
_REQUEST_STATS = {
    pb.ADD_ENTRY: "add_request",
    pb.READ_ENTRY: "read_request",
    pb.WRITE_LAC: "write_lac_request",
    pb.READ_LAC: "read_lac_request",
    pb.FORCE_LEDGER: "force_ledger_request",
    pb.GET_BOOKIE_INFO: "bookie_info_request",
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: "entries_of_ledger_request",
}


def parse_request(frame: bytes):
    """The frame as a complete v3 Request, or None (then the connection falls back to v2 for good).

    Java's parseFrom also refuses messages missing required fields, hence IsInitialized.
    """
    request = pb.Request()
    try:
        request.ParseFromString(frame)
    except Exception:
        return None
    if not request.HasField("header") or not request.IsInitialized():
        return None
    return request


def handle_run(conn, frames: list, i: int) -> int:
    """Handle the run of frames that starts at frames[i] on a connection still in v3 mode; returns the
    index of the first frame not handled. A frame that is not a v3 Request turns the connection to v2
    for good and is left for the v2 handler (the returned index is i)."""
    factory = conn.factory
    if factory.batch_adds:
        adds, ids, j = decode_v3_adds(frames, i)
        if adds:
            return i + conn.submit_adds(adds, ids, lambda error, done_ids: answer_adds(conn, error, done_ids))
    lookup = factory.read_cached
    if lookup is not None:
        t0 = now_ns()
        j, misses = serve_v3_reads(frames, i, conn.out, lookup, _lac_of(conn.bookie), conn.reading_ledgers,
                                   factory.output_limit, conn.read_room(), factory.entry_bytes, factory.read_bytes)
        if j > i:
            hits = j - i - len(misses)
            arrival = conn.arrival_ns
            took = factory.stats.reads_from_memory(factory.bookie_stats, hits, arrival, t0)
            conn.bookie.count_reads_from_memory(hits, took / 1e9)
            for ledger_id, entry_id, txn, scope in misses:
                _plain_read(conn, ledger_id, entry_id, scope, _Reply.of_fast_read(conn, txn, arrival),
                            arrival=arrival)
            return j
    request = parse_request(frames[i])
    if request is None:
        conn.v2 = True
        return i
    try:
        handle(conn, request)
    except Exception as err:  # never let one request kill the connection's reactor loop
        log.exception("v3 request failed")
        conn.close(f"v3 request failed: {err}")
    return i + 1


def _lac_of(bookie):
    known = bookie.known_lac

    def lac_of(scope_id, ledger_id):
        try:
            return known(scope_id, ledger_id)
        except BKError:
            return -1

    return lac_of


def answer_adds(conn, error, ids) -> None:
    conn.out.add_v3_add_responses(V3Status.EOK if error is None else int(v3_status_for(error)), ids)


def auth_disabled_message() -> bytes:
    return pb.AuthMessage(authPluginName="AuthDisabledPlugin", payload=b"").SerializeToString()


def encode_availability(entries) -> bytes:
    """AvailabilityOfEntriesOfLedger as BookKeeper 4.16.7 writes it: a 64-byte header (version 0,
    group count), then one (start, start, size, period 0) group per run of consecutive entry ids."""
    runs: list[list[int]] = []
    for entry in sorted(set(entries)):
        if runs and entry == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([entry, 1])
    header = struct.pack(">ii", 0, len(runs)).ljust(64, b"\0")
    return header + b"".join(struct.pack(">qqii", start, start, size, 0) for start, size in runs)


def _status(error) -> int:
    return V3Status.EOK if error is None else int(v3_status_for(error))


def _scope(msg) -> int:
    return scope_from_field(msg.ledgerScopeId) if msg.HasField("ledgerScopeId") else 0


def _set_scope(msg, scope_id: int) -> None:
    if scope_id:
        msg.ledgerScopeId = scope_field(scope_id)


def _carrying(name: str):
    """A handler of requests that must carry the `name` message: called with it as `sub`; a request without
    it is answered EBADREQ and never reaches the handler."""

    def wrap(fn):
        @functools.wraps(fn)
        def handler(conn, request, reply) -> None:
            if not request.HasField(name):
                reply.send(V3Status.EBADREQ)
                return
            fn(conn, request, getattr(request, name), reply)

        return handler

    return wrap


def _response_to(header, status: int) -> pb.Response:
    """A v3 Response to the request with this header: VERSION_THREE, its operation and txnId."""
    response = pb.Response(status=status)
    response.header.version = pb.VERSION_THREE
    response.header.operation = header.operation
    response.header.txnId = header.txnId
    return response


class _Reply:
    """One v3 response, sent when the request's answer is known; records the request's X_REQUEST `stat`
    (None: none) from `arrival` when it does.

    Built with protobuf from `request`, or (request None) the answer of a fast-path READ_ENTRY known by
    its `txn` only, built by the connection's FrameBuilder (byte-identical, see bkfast._codec)."""

    __slots__ = ("conn", "request", "stat", "arrival", "txn")

    def __init__(self, conn, request, stat=None, arrival: int = 0, txn: int = 0):
        self.conn = conn
        self.request = request
        self.stat = stat
        self.arrival = arrival
        self.txn = txn

    @classmethod
    def of_fast_read(cls, conn, txn: int, arrival: int) -> _Reply:
        return cls(conn, None, conn.factory.stats.read_request, arrival, txn)

    def send(self, status: int, field: str | None = None, **inner) -> None:
        conn = self.conn
        if self.stat is not None:
            record(self.stat, status == V3Status.EOK, self.arrival)
        if not conn.connected:
            return
        if self.request is None:
            self._add_fast_read(status, inner)
        else:
            conn.out.add_frame(self._response(status, field, inner).SerializeToString())
        conn.respond()

    def _response(self, status: int, field: str | None, inner: dict) -> pb.Response:
        response = _response_to(self.request.header, status)
        if field is not None:
            sub = getattr(response, field)
            scope = inner.pop("scope", 0)
            sub.status = status
            for k, v in inner.items():
                if v is not None:
                    setattr(sub, k, bytes(v) if isinstance(v, (memoryview, bytearray)) else v)
            _set_scope(sub, scope)
        return response

    def _add_fast_read(self, status: int, inner: dict) -> None:
        max_lac = inner.get("maxLAC")
        ts = inner.get("lacUpdateTimestamp")
        self.conn.out.add_v3_read_response(status, inner.get("ledgerId", 0), inner.get("entryId", 0), self.txn,
                                           inner.get("body"), max_lac is not None, max_lac or 0, ts is not None,
                                           ts or 0, inner.get("scope", 0))


def handle(conn, request) -> None:
    op = request.header.operation
    stat = _REQUEST_STATS.get(op)
    reply = _Reply(conn, request, getattr(conn.factory.stats, stat) if stat else None, conn.arrival_ns)
    if request.header.version != pb.VERSION_THREE:
        handler = _ERROR_FIELDS.get(op)
        if handler is not None:
            field, sub_name = handler
            if request.HasField(sub_name):
                sub = getattr(request, sub_name)
                out_fields = pb.Response.DESCRIPTOR.fields_by_name[field].message_type.fields_by_name
                ids = {k: getattr(sub, k) for k in ("ledgerId", "entryId")
                       if k in sub.DESCRIPTOR.fields_by_name and k in out_fields}
                reply.send(V3Status.EBADVERSION, field, scope=_scope(sub), **ids)
                return
        reply.send(V3Status.EBADVERSION)
        return
    fn = _HANDLERS.get(op)
    if fn is None:
        reply.send(V3Status.EBADREQ)
        return
    fn(conn, request, reply)


@_carrying("addRequest")
def _add(conn, request, a, reply) -> None:
    ledger_id, entry_id, scope = a.ledgerId, a.entryId, _scope(a)
    stats = conn.factory.stats
    if conn.too_many_adds():
        stats.adds_rejected(1, TOO_MANY_ADDS, reply.arrival, request_stat=False)
        reply.send(V3Status.ETOOMANYREQUESTS, "addResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
        return
    conn.add_started()
    start = now_ns()
    stats.reactor_tasks += 1

    def done(error):
        conn.add_finished()
        stats.add_processed(error, start)
        reply.send(_status(error), "addResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)

    recovery = a.HasField("flag") and a.flag == pb.AddRequest.RECOVERY_ADD
    conn.bookie.add_entry(a.body, a.masterKey, done, recovery=recovery,
                          ack_before_sync=bool(a.writeFlags & DEFERRED_SYNC),
                          high_priority=recovery or request.header.priority > 0)


def _count_cached(factory, data, start: int) -> None:
    """A read answered here from memory (read_entry_cached, no Bookie.read_entry): the Bookie's read
    stats, as Bookie.read_entry records them."""
    bookie_stats = factory.bookie_stats
    if bookie_stats is not None:
        bookie_stats.read_entry.ok_since(start)
    size = len(data)
    if factory.entry_bytes is not None:
        factory.entry_bytes.ok_value(size)
    if factory.read_bytes is not None:
        factory.read_bytes.add(size)


def _plain_read(conn, ledger_id: int, entry_id: int, scope: int, reply, with_lac: bool = True,
                processing=None, begin: int | None = None, arrival: int | None = None) -> None:
    """Read one entry (the read pool when memory does not have it) and answer it; Java sets maxLAC (the
    bookie's known LAC) on successful reads, except fencing reads. Stats: `processing` (default: the
    READ_ENTRY of the thread that reads it) from `begin` (default: the read's start), and
    READ_ENTRY_SCHEDULING_DELAY from `arrival` when given."""
    bookie = conn.bookie
    factory = conn.factory
    stats = factory.stats

    def send(result):
        if isinstance(result, BaseException):
            reply.send(_status(result), "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
            return
        max_lac = None
        if with_lac:
            try:
                max_lac = bookie.known_lac(scope, ledger_id)
            except BKError as error:
                reply.send(_status(error), "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
                return
        reply.send(V3Status.EOK, "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope, body=result,
                   maxLAC=max_lac)

    start = now_ns()
    cached = bookie.read_entry_cached(ledger_id, entry_id, scope)
    if cached is not None:
        if arrival is not None:
            stats.read_scheduling_delay.ok_ns(start - arrival)
        (processing or stats.read_entry_reactor).ok_since(start if begin is None else begin)
        _count_cached(factory, cached, start)
        send(cached)
        return
    if processing is None:
        processing = stats.read_entry_of(factory.read_pool, ledger_id)
    conn.read_async(ledger_id, stats.timed(lambda: bookie.read_entry(ledger_id, entry_id, scope), processing,
                                           arrival, begin), send)


@_carrying("readRequest")
def _read(conn, request, r, reply) -> None:
    ledger_id, entry_id, scope = r.ledgerId, r.entryId, _scope(r)
    stats = conn.factory.stats
    if r.HasField("flag") and r.flag == pb.ReadRequest.FENCE_LEDGER:
        reply.stat = stats.fence_request
        _fence_read(conn, r, ledger_id, entry_id, scope, reply)
    elif r.HasField("previousLAC"):
        reply.stat = stats.long_poll_request
        _long_poll(conn, r, ledger_id, entry_id, scope, reply)
    else:
        _plain_read(conn, ledger_id, entry_id, scope, reply, arrival=reply.arrival)


def _fence_read(conn, r, ledger_id: int, entry_id: int, scope: int, reply) -> None:
    """A fencing read: fence (durable), then read. READ_ENTRY_FENCE_WAIT: until the fence is durable;
    READ_ENTRY_FENCE_READ: the whole processing."""
    stats = conn.factory.stats
    begin = now_ns()
    stats.read_scheduling_delay.ok_ns(begin - reply.arrival)
    if not r.HasField("masterKey"):
        stats.fence_read.fail_since(begin)
        reply.send(V3Status.EUA, "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
        return

    def fenced(error):
        record(stats.fence_wait, error is None, begin)
        if error is not None:
            stats.fence_read.fail_since(begin)
            reply.send(_status(error), "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
        else:
            _plain_read(conn, ledger_id, entry_id, scope, reply, with_lac=False, processing=stats.fence_read,
                        begin=begin)

    conn.bookie.fence(ledger_id, r.masterKey, fenced, scope)


def _long_poll(conn, r, ledger_id: int, entry_id: int, scope: int, reply) -> None:
    """Long poll (LongPollReadEntryProcessorV3). With ENTRY_PIGGYBACK the client asks for entry -1 and
    gets maxLAC + the entry after previousLAC; anything else is a client bug: EBADREQ."""
    bookie, stats = conn.bookie, conn.factory.stats
    begin = now_ns()
    stats.read_scheduling_delay.ok_ns(begin - reply.arrival)
    piggyback = r.HasField("flag") and r.flag == pb.ReadRequest.ENTRY_PIGGYBACK
    previous_lac = r.previousLAC
    if piggyback and entry_id != -1:
        stats.long_poll_read.fail_since(begin)
        reply.send(V3Status.EBADREQ, "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
        return
    try:
        lac = bookie.known_lac(scope, ledger_id)
    except BKError as error:
        stats.long_poll_read.fail_since(begin)
        reply.send(_status(error), "readResponse", ledgerId=ledger_id, entryId=entry_id, scope=scope)
        return

    def answer():
        _long_poll_answer(conn, ledger_id, entry_id, scope, reply, piggyback, previous_lac)

    if lac > previous_lac or not r.HasField("timeOut"):
        answer()
    else:
        _long_poll_wait(conn, ledger_id, scope, previous_lac, max(r.timeOut, 0) / 1000.0, answer, begin)


def _long_poll_wait(conn, ledger_id: int, scope: int, previous_lac: int, timeout_s: float, answer,
                    begin: int) -> None:
    """Wait (a reactor timer) for the LAC to pass previous_lac, then answer(). READ_ENTRY_LONG_POLL_PRE_WAIT:
    until the wait is set up; READ_ENTRY_LONG_POLL_WAIT: the wait (failed: it timed out)."""
    bookie, stats = conn.bookie, conn.factory.stats
    conn.reads_started(1)
    expired: list = []
    waiting_since = now_ns()

    def answer_woken():
        conn.reads_finished(1)
        answer()
        conn.respond()

    def woken():
        record(stats.long_poll_wait, not expired, waiting_since)
        conn.when_output_room(answer_woken)

    waiter = bookie.watch_lac(scope, ledger_id, previous_lac, woken)
    stats.long_poll_pre_wait.ok_since(begin)

    def timed_out():
        expired.append(True)
        bookie.unwatch_lac(scope, ledger_id, waiter)
        waiter.fire()

    waiter.timer = conn.factory.reactor.callLater(timeout_s, timed_out)


def _long_poll_answer(conn, ledger_id: int, entry_id: int, scope: int, reply, piggyback: bool,
                      previous_lac: int) -> None:
    """A long poll's answer, once the LAC passed previousLAC or the wait ended (READ_ENTRY_LONG_POLL_READ)."""
    if not conn.connected:
        return
    bookie, stats = conn.bookie, conn.factory.stats
    begin = now_ns()
    if not piggyback:
        _plain_read(conn, ledger_id, entry_id, scope, reply, processing=stats.long_poll_read, begin=begin)
        return

    def send_read(status, **kw):
        reply.send(status, "readResponse", ledgerId=ledger_id, scope=scope, **kw)

    try:
        lac = bookie.known_lac(scope, ledger_id)
    except BKError as error:
        stats.long_poll_read.fail_since(begin)
        send_read(_status(error), entryId=entry_id)
        return
    if lac <= previous_lac:                     # nothing newer: the LAC alone
        stats.long_poll_read.ok_since(begin)
        send_read(V3Status.ENOENTRY, entryId=entry_id, maxLAC=lac)
        return
    wanted = previous_lac + 1
    updated = bookie.lac_update_time(scope, ledger_id)

    def send(result):
        if isinstance(result, BaseException):
            if isinstance(result, BKNoSuchEntryException):
                stats.read_last_entry_noentry.inc()     # the entry after the LAC is not here (striping)
            send_read(_status(result), entryId=wanted, maxLAC=lac)
        else:
            send_read(V3Status.EOK, entryId=wanted, body=result, maxLAC=lac, lacUpdateTimestamp=updated)

    cached = bookie.read_entry_cached(ledger_id, wanted, scope)
    if cached is not None:
        stats.long_poll_read.ok_since(begin)
        _count_cached(conn.factory, cached, begin)
        send(cached)
    else:
        conn.read_async(ledger_id, stats.timed(lambda: bookie.read_entry(ledger_id, wanted, scope),
                                               stats.long_poll_read, None, begin), send)


def _answer_when_durable(reply, stat, field: str, ledger_id: int, scope: int):
    """The Bookie callback of a request answered once what it asked for is durable (a journal sync, on the
    journal thread: the reactor never waits for it); `stat` records the time from now to then."""
    start = now_ns()

    def done(error):
        record(stat, error is None, start)
        reply.send(_status(error), field, ledgerId=ledger_id, scope=scope)

    return done


@_carrying("writeLacRequest")
def _write_lac(conn, request, w, reply) -> None:
    ledger_id, scope = w.ledgerId, _scope(w)
    done = _answer_when_durable(reply, conn.factory.stats.write_lac, "writeLacResponse", ledger_id, scope)
    conn.bookie.set_explicit_lac(ledger_id, w.body, w.masterKey, done, scope)


@_carrying("readLacRequest")
def _read_lac(conn, request, r, reply) -> None:
    ledger_id, scope = r.ledgerId, _scope(r)
    bookie = conn.bookie
    stats = conn.factory.stats
    took = [0]                      # READ_LAC: the reads' time on the pool, recorded with their outcome

    def read_both():
        start = now_ns()
        lac_body = last_entry = None
        try:
            lac_body = bookie.get_explicit_lac(ledger_id, scope)
        except Exception:
            pass
        try:
            last_entry = bookie.read_entry(ledger_id, -1, scope)
        except Exception:
            pass
        took[0] = now_ns() - start
        return lac_body, last_entry

    def send(result):
        lac_body, last_entry = result if not isinstance(result, BaseException) else (None, None)
        status = V3Status.ENOENTRY if lac_body is None and last_entry is None else V3Status.EOK
        (stats.read_lac.ok_ns if status == V3Status.EOK else stats.read_lac.fail_ns)(took[0])
        reply.send(status, "readLacResponse", ledgerId=ledger_id, scope=scope,
                   lacBody=bytes(lac_body) if lac_body is not None else None,
                   lastEntryBody=bytes(last_entry) if last_entry is not None else None)

    conn.read_async(ledger_id, read_both, send)


@_carrying("forceLedgerRequest")
def _force_ledger(conn, request, f, reply) -> None:
    ledger_id, scope = f.ledgerId, _scope(f)
    done = _answer_when_durable(reply, conn.factory.stats.force_ledger, "forceLedgerResponse", ledger_id, scope)
    conn.bookie.force_ledger(ledger_id, done, scope)


def _bookie_info(conn, request, reply) -> None:
    requested = request.getBookieInfoRequest.requested if request.HasField("getBookieInfoRequest") else 0
    start = now_ns()
    total, free = conn.factory.disk_space()
    conn.factory.stats.bookie_info.ok_since(start)
    reply.send(V3Status.EOK, "getBookieInfoResponse",
               totalDiskCapacity=total if requested & TOTAL_DISK_CAPACITY else 0,
               freeDiskSpace=free if requested & FREE_DISK_SPACE else 0)


@_carrying("getListOfEntriesOfLedgerRequest")
def _entries_of_ledger(conn, request, g, reply) -> None:
    """GET_LIST_OF_ENTRIES_OF_LEDGER: the index scan runs on the read pool (it reads the disk)."""
    ledger_id, scope = g.ledgerId, _scope(g)
    bookie = conn.bookie
    stat, start = conn.factory.stats.entries_of_ledger, now_ns()

    def send(result):
        if isinstance(result, BaseException):
            stat.fail_since(start)
            reply.send(_status(result), "getListOfEntriesOfLedgerResponse", ledgerId=ledger_id, scope=scope)
            return
        stat.ok_since(start)
        reply.send(V3Status.EOK, "getListOfEntriesOfLedgerResponse", ledgerId=ledger_id, scope=scope,
                   availabilityOfEntriesOfLedger=result)

    conn.read_async(ledger_id, lambda: encode_availability(bookie.entries_of_ledger(ledger_id, scope)), send)


def _auth(conn, request, reply) -> None:
    if not conn.connected:
        return
    response = _response_to(request.header, V3Status.EOK)
    response.authResponse.authPluginName = "AuthDisabledPlugin"
    response.authResponse.payload = b""
    conn.out.add_frame(response.SerializeToString())
    conn.respond()


def _start_tls(conn, request, reply) -> None:
    start = getattr(conn, "start_tls", None)
    if start is None:
        reply.send(V3Status.EBADREQ)
    else:
        start(request, reply)


_HANDLERS = {
    pb.ADD_ENTRY: _add,
    pb.READ_ENTRY: _read,
    pb.WRITE_LAC: _write_lac,
    pb.READ_LAC: _read_lac,
    pb.FORCE_LEDGER: _force_ledger,
    pb.GET_BOOKIE_INFO: _bookie_info,
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: _entries_of_ledger,
    pb.AUTH: _auth,
    pb.START_TLS: _start_tls,
}

# For EBADVERSION answers: the response field and request field of each operation.
_ERROR_FIELDS = {
    pb.ADD_ENTRY: ("addResponse", "addRequest"),
    pb.READ_ENTRY: ("readResponse", "readRequest"),
    pb.WRITE_LAC: ("writeLacResponse", "writeLacRequest"),
    pb.READ_LAC: ("readLacResponse", "readLacRequest"),
    pb.FORCE_LEDGER: ("forceLedgerResponse", "forceLedgerRequest"),
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: ("getListOfEntriesOfLedgerResponse", "getListOfEntriesOfLedgerRequest"),
}
