"""One client connection to one bookie (v2 binary or v3 protobuf): framing, matching, timeouts.

Owns: a `BookieChannel` (a Twisted Protocol) and the bookkeeping of its in-flight requests (`PendingRequest`).
Requests are complete frames built by `bookie_client`; they are buffered (in the channel's Cython
`ChannelCore`) and written with ONE `sendmsg` of the frames themselves per reactor turn (or at once past
`FLUSH_BYTES`); requests issued while connecting are buffered the same way and flushed in one write when the
connection is made. Frames the socket does not take wait in the channel until Twisted reports the socket
writable (the channel is the transport's pull producer); Twisted's own write buffer is never used, which
saves its join copy of every frame (page faults on a fresh buffer each time, for large entries) and a
reactor iteration per flush. Responses are cut by the Cython `FrameSplitter` and matched: v2 ADD answers for a
ledger whose write handle registered an AckPort go straight to its AddTracker (bkfast._clientpath: no
per-request object at all); v3 by txnId; other v2 answers by FIFO queues keyed by (ledger id, entry id),
one table for adds and one for reads, as Java's v2 client does. A READ of entry -1 is keyed (ledger, -1); a
v2 bookie echoes -1 in its answer, but a response carrying a real entry id for a ledger with -1 reads
pending goes to the earliest issued of the matching explicit read and the first -1 read.

Timeouts: one `LoopingCall` sweeper per connection walks the pending tables, which are dicts and so in issue
order, from the oldest request and stops at the first one younger than the shortest timeout (no per-request
timer, and nothing is kept once answered). A timed-out v3 request is forgotten (its late answer finds no
txnId); a timed-out v2 request stays queued as a tombstone, so its late answer is consumed and ignored
instead of being matched to a newer request for the same entry.

TLS (`tls`, a bkfast.tls.context.ClientTLS): START_TLS and the handshake run first (bkfast.net.client_tls);
requests wait in the core until they are done, then go through Twisted's TLS transport with one
writeSequence per flush instead of sendmsg.

Closing: `close()` ends the connection as Java's client does (Netty's channel close): TLS close_notify once
the handshake is done, then FIN (a half-close: answers still arriving are read and dropped, so the kernel
never resets the bookie for unread data); the socket goes when the bookie has closed its side, or is reset
after `close_wait_s` when it does not (a dead or stuck peer cannot hold up a client's shutdown). A reset
(`abort=True`) is kept for errors: a broken stream, a failed START_TLS or handshake.

Must never: block the reactor, fire a request's Deferred twice, or leave a request pending after its
connection is gone (every pending request of a lost connection fails at once).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from typing import NamedTuple

from twisted.internet import error as terror
from twisted.internet import protocol, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHandshakeListener
from zope.interface import implementer

from bkfast._clientpath import ChannelCore
from bkfast.codec import FrameSplitter
from bkfast.errors import (
    BKBookieHandleNotAvailableException,
    BKError,
    BKTimeoutException,
    FrameError,
    error_for_v2_rc,
    error_for_v3_status,
)
from bkfast.net import client_tls
from bkfast.proto import BookkeeperProtocol_pb2 as pb

log = logging.getLogger(__name__)

FLUSH_BYTES = 64 * 1024
# Netty's SslHandler gives a closing channel's close_notify 3 s (closeNotifyFlushTimeoutMillis); the same
# bound covers the bookie's FIN, which a Java or bkfast bookie sends as soon as it reads ours.
CLOSE_WAIT_S = 3.0
_IOV_MAX = os.sysconf("SC_IOV_MAX")   # buffers per sendmsg
_monotonic = time.monotonic
_V2_RESPONSE = struct.Struct(">Iiqq")
_V2_ADD, _V2_READ = 1, 2

# Request kinds: how a response becomes a result.
K_ADD, K_READ, K_LONG_POLL, K_READ_LAC, K_WRITE_LAC, K_FORCE, K_INFO = range(7)
KIND_NAMES = ("add", "read", "long-poll read", "read LAC", "write LAC", "force ledger", "get bookie info")
_V3_FIELD = ("addResponse", "readResponse", "readResponse", "readLacResponse", "writeLacResponse",
             "forceLedgerResponse", "getBookieInfoResponse")

CONNECTING, CONNECTED, CLOSED = "connecting", "connected", "closed"


class LongPollResult(NamedTuple):
    """A long-poll read's answer: the entry after previousLAC (or None) and the bookie's maxLAC (or None)."""

    entry: object
    lac: int | None

    def __repr__(self):
        size = None if self.entry is None else len(self.entry)
        return f"LongPollResult(entry={size and f'<{size} bytes>'}, lac={self.lac})"


class ReadLacResult(NamedTuple):
    """A READ_LAC answer: the explicit-LAC buffer (spec §3.5) and the last stored entry, each or None."""

    lac_buffer: object
    last_entry: object


class PendingRequest(Deferred):
    """One request in flight: the Deferred its caller gets, plus what matching, timeouts and errors need.

    `seq` is unique per client and increasing; for v3 it is the request's txnId. (A Deferred subclass
    rather than a holder of one: one object less per request on the hot path.)
    """

    def __init__(self, kind, ledger_id, entry_id, started, deadline, seq):
        Deferred.__init__(self)
        self.kind = kind
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.started = started        # time.monotonic() when issued
        self.deadline = deadline      # time.monotonic() after which it times out (inf: never)
        self.done = False
        self.seq = seq

    def context(self, bookie_id: str) -> str:
        return f"{KIND_NAMES[self.kind]} on bookie {bookie_id}, ledger {self.ledger_id}, entry {self.entry_id}"

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.errback(error)


def _queue_put(table: dict, key, req) -> None:
    cur = table.get(key)
    if cur is None:
        table[key] = req
    elif type(cur) is list:
        cur.append(req)
    else:
        table[key] = [cur, req]


def _queue_head(table: dict, key):
    cur = table.get(key)
    return cur[0] if type(cur) is list else cur


def _queue_pop(table: dict, key):
    cur = table.pop(key, None)
    if type(cur) is not list:
        return cur
    req = cur.pop(0)
    if len(cur) == 1:
        table[key] = cur[0]
    elif cur:
        table[key] = cur
    return req


class _Connector(protocol.ClientFactory):
    """Connects one BookieChannel; reports a failed connect back to it."""

    noisy = False       # the channel logs its own connect/loss lines, with the bookie id

    def __init__(self, channel):
        self.channel = channel

    def buildProtocol(self, addr):
        return self.channel

    def clientConnectionFailed(self, connector, reason):
        self.channel.connect_failed(reason)


@implementer(IHandshakeListener)
class BookieChannel(protocol.Protocol):
    """One TCP connection to one bookie speaking v2 or v3; used once, replaced after it fails."""

    def __init__(self, reactor, bookie_id: str, v3: bool, min_timeout: float, max_frame_size: int,
                 on_closed=None, tls=None, tls_timeout_s: float = 10.0):
        self.reactor = reactor
        self.bookie_id = bookie_id
        self.v3 = v3
        self.min_timeout = min_timeout           # shortest request timeout, s (0: requests never time out)
        self.splitter = FrameSplitter(max_frame_size)
        self.state = CONNECTING
        self.on_closed = on_closed
        self.slot = None                         # the owner's bookkeeping (BookieClient: its slot list, index)
        self.connector = None
        self.flush_call = None
        self.unsent: list = []                   # frames (or the rest of one) the socket has not taken yet
        # output buffer and (v2) response dispatch; tracked adds of ledger handles bypass the tables below
        self.core = ChannelCore(self._schedule_flush, self.flush,
                                self._handle_v3_frame if v3 else self._handle_v2_frame, FLUSH_BYTES,
                                self._v3_add_error)
        self.adds: dict = {}                     # v2: (ledger, entry) -> request or [requests]
        self.reads: dict = {}
        self.txns: dict = {}                     # v3: txnId -> request
        self.inflight = 0
        self.closed_waiters: list = []
        self._response = pb.Response()
        self.sweeper = None
        self.sweep_interval = min(1.0, max(0.05, min_timeout / 10.0))
        # TLS (bkfast.net.client_tls): a ClientTLS, and the START_TLS phase (None: plaintext or TLS done)
        self.tls = tls
        self.tls_timeout_s = tls_timeout_s
        self.tls_phase = None
        self.tls_timer = None
        self.host = None
        self.close_wait_s = CLOSE_WAIT_S
        self.close_timer = None

    # --- connection life ----------------------------------------------------------------------------
    def connect(self, host: str, port: int, connect_timeout_s: float) -> None:
        if self.min_timeout > 0:
            self.sweeper = task.LoopingCall(self.sweep)
            self.sweeper.clock = self.reactor
            self.sweeper.start(self.sweep_interval, now=False)
        log.debug("connecting to bookie %s (%s:%d, %s)", self.bookie_id, host, port, "v3" if self.v3 else "v2")
        self.host = host
        self.connector = self.reactor.connectTCP(host, port, _Connector(self),
                                                 timeout=connect_timeout_s if connect_timeout_s > 0 else 30)

    def connectionMade(self):
        if self.state is CLOSED:             # closed while connecting
            self._close_gracefully()
            return
        if self.tls is not None and self.tls_phase is None:
            client_tls.begin(self)           # requests wait until TLS is up, then tls_ready()
            return
        self.state = CONNECTED
        self.core.connected = True
        try:
            self.transport.setTcpNoDelay(True)
        except Exception:                    # not a TCP transport (never on the real reactor)
            pass
        self.transport.registerProducer(self, False)
        log.info("connected to bookie %s (%s), %d requests queued", self.bookie_id, "v3" if self.v3 else "v2",
                 self.pending_count)
        if self.core.out:
            self.flush()

    def tls_ready(self) -> None:
        """The TLS handshake is done: the channel is connected (writes go through the TLS transport)."""
        self.state = CONNECTED
        self.core.connected = True
        log.info("connected to bookie %s (%s, TLS), %d requests queued", self.bookie_id,
                 "v3" if self.v3 else "v2", self.pending_count)
        if self.core.out:
            self.flush()

    def handshakeCompleted(self) -> None:
        if self.state is not CLOSED:         # else closed during the handshake: the close goes on
            client_tls.handshake_completed(self)

    def connect_failed(self, reason) -> None:
        if self.state is CLOSED:
            self._closed_now()
            return
        if reason.check(terror.TimeoutError):
            why = f"connect to bookie {self.bookie_id} timed out"
            make = BKTimeoutException
        else:
            refused = " (refused)" if reason.check(terror.ConnectionRefusedError) else ""
            why = f"cannot connect to bookie {self.bookie_id}{refused}: {reason.getErrorMessage()}"
            make = BKBookieHandleNotAvailableException
        log.warning("%s; failing %d requests", why, self.pending_count)
        self._shut(make, why)
        self._closed_now()

    def connectionLost(self, reason=None):
        if self.tls_timer is not None:
            client_tls.connection_lost(self)
        if self.close_timer is not None:
            if self.close_timer.active():
                self.close_timer.cancel()
            self.close_timer = None
        if self.state is not CLOSED:
            clean = reason is None or reason.check(terror.ConnectionDone)
            why = f"connection to bookie {self.bookie_id} lost" + (
                "" if clean else f": {reason.getErrorMessage()}")
            log.log(logging.WARNING if self.pending_count else logging.INFO, "%s; failing %d pending requests", why,
                    self.pending_count)
            self._shut(BKBookieHandleNotAvailableException, why)
        self._closed_now()

    def close(self, why: str | None = None, *, abort: bool = False):
        """Fail every pending request now and close the connection (see the module doc: close_notify, FIN,
        a reset only after `close_wait_s`, or at once with `abort`); fires when the socket is gone."""
        d = Deferred()
        if self.state is CLOSED and self.connector is None:
            d.callback(None)
            return d
        self.closed_waiters.append(d)
        if self.state is not CLOSED:
            why = why or f"connection to bookie {self.bookie_id} closed by the client"
            if self.pending_count:
                log.info("%s; failing %d pending requests", why, self.pending_count)
            was_connected = self.state is CONNECTED
            self._shut(BKBookieHandleNotAvailableException, why)
            if (was_connected or self.tls_phase is not None) and self.transport is not None:
                if abort:
                    self.transport.abortConnection()
                else:
                    self._close_gracefully()
            elif self.connector is not None:
                try:
                    self.connector.stopConnecting()
                except terror.NotConnectingError:    # connected meanwhile: connectionMade closes it
                    pass
        return d

    def abort(self, why: str):
        """close() for errors: the connection is reset at once."""
        return self.close(why, abort=True)

    def _close_gracefully(self) -> None:
        t = self.transport
        self.unsent = []                     # their requests have failed: not worth sending
        if t.producer is self:               # a registered pull producer would keep the transport open
            t.unregisterProducer()
        if getattr(t, "TLS", False):
            # A bookie's close_notify that comes after our FIN makes Twisted's TLS layer close the socket
            # from inside its own handling of it, then use the TLS state that close freed (AttributeError
            # on bio_read; Twisted does not support half-close under TLS, twisted#5341): that close waits
            # for the next reactor turn instead.
            below = t.protocol.transport
            lose = below.loseConnection
            below.loseConnection = lambda *a: self.reactor.callLater(0, lose, *a)
            if self.tls_phase is not client_tls.HANDSHAKE:
                t.loseConnection()           # close_notify (Twisted's TLS layer; it waits for the bookie's)
        t.loseWriteConnection()              # FIN after everything queued, close_notify included
        self.close_timer = self.reactor.callLater(self.close_wait_s, self._close_timed_out)

    def _close_timed_out(self) -> None:
        self.close_timer = None
        log.info("bookie %s did not close its side of the connection within %.1f s of ours: resetting it",
                 self.bookie_id, self.close_wait_s)
        self.transport.abortConnection()

    def _shut(self, make, why: str) -> None:
        self.state = CLOSED
        if self.sweeper is not None and self.sweeper.running:
            self.sweeper.stop()
        if self.flush_call is not None and self.flush_call.active():
            self.flush_call.cancel()
        self.flush_call = None
        self.core.lose(make(f"{why} (adds of ledgers written through bookie {self.bookie_id})"))
        pending = []
        for table in (self.adds, self.reads):
            for v in table.values():
                pending.extend(v if type(v) is list else (v,))
        pending.extend(self.txns.values())
        self.adds, self.reads, self.txns = {}, {}, {}
        self.inflight = 0
        if self.on_closed is not None:
            self.on_closed(self)
        pending.sort(key=lambda r: r.seq)
        for req in pending:
            if not req.done:
                req.fail(make(f"{why} ({req.context(self.bookie_id)})"))

    def _closed_now(self) -> None:
        self.connector = None
        waiters, self.closed_waiters = self.closed_waiters, []
        for d in waiters:
            d.callback(None)

    # --- sending ------------------------------------------------------------------------------------
    def send_v2(self, frame: bytes, req: PendingRequest) -> None:
        """Queue a v2 ADD or READ frame; `req.kind` says which table matches its answer."""
        if req.kind == K_ADD:
            _queue_put(self.adds, (req.ledger_id, req.entry_id), req)
        else:
            _queue_put(self.reads, (req.ledger_id, req.entry_id), req)
        self.inflight += 1
        self._write(frame)

    def send_v3(self, frame: bytes, req: PendingRequest) -> None:
        """Queue a v3 frame whose txnId is `req.seq`."""
        self.txns[req.seq] = req
        self.inflight += 1
        self._write(frame)

    def _write(self, frame: bytes) -> None:
        self.core.write(frame)

    def _schedule_flush(self) -> None:
        self.flush_call = self.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        if self.flush_call is not None:
            if self.flush_call.active():
                self.flush_call.cancel()
            self.flush_call = None
        frames = self.core.take()
        if frames and self.state is CONNECTED:
            if self.tls is not None:         # through the TLS layer (it encrypts and buffers)
                self.transport.writeSequence(frames)
            elif self.unsent:                # still waiting for the socket: keep the order
                self.unsent.extend(frames)
            else:
                self.unsent = frames
                self._send_unsent()

    def _send_unsent(self) -> None:
        unsent = self.unsent
        sock = self.transport.getHandle()
        while unsent:
            chunk = unsent[:_IOV_MAX] if len(unsent) > _IOV_MAX else unsent
            try:
                sent = sock.sendmsg(chunk)
            except BlockingIOError:
                sent = 0
            except OSError as err:
                self.abort(f"send to bookie {self.bookie_id} failed: {err}")
                return
            done = 0
            for piece in chunk:
                size = len(piece)
                if sent < size:
                    break
                sent -= size
                done += 1
            partial = done < len(chunk)
            del unsent[:done]
            if partial:
                if sent:
                    unsent[0] = memoryview(unsent[0])[sent:]
                self.transport.startWriting()    # resumeProducing once the socket is writable
                return

    # IPullProducer: Twisted calls resumeProducing when the (empty) transport finds the socket writable.
    def resumeProducing(self) -> None:
        if self.state is CONNECTED and self.unsent:
            self._send_unsent()

    def stopProducing(self) -> None:
        self.unsent = []

    @property
    def pending_count(self) -> int:
        """Requests sent and not answered (tables and tracked adds)."""
        return self.inflight + self.core.inflight

    # --- receiving ----------------------------------------------------------------------------------
    def dataReceived(self, data):
        if self.state is CLOSED:             # answers to requests close() has failed already
            return
        if self.tls_phase is not None:
            if self.tls_phase is client_tls.REPLY:
                client_tls.received(self, data)
                return
        try:
            frames = self.splitter.feed(data)
        except FrameError as err:
            self.handle_frames(err.frames)
            self.abort(f"bad frame from bookie {self.bookie_id}: {err}")
            return
        if frames and self.tls_phase is client_tls.VERDICT:
            frames = client_tls.filter_verdict(self, frames)
        if frames:
            self.handle_frames(frames)

    def handle_frames(self, frames) -> None:
        try:
            if self.v3:
                self._handle_v3(frames)
            else:
                self._handle_v2(frames)
        except Exception as err:       # an undecodable answer: the stream cannot be trusted any more
            log.exception("undecodable response from bookie %s", self.bookie_id)
            self.abort(f"undecodable response from bookie {self.bookie_id}: {err!r}")

    def _handle_v2(self, frames) -> None:
        self.core.dispatch_v2(frames, self.adds, self.reads)

    def _handle_v2_frame(self, f) -> None:
        """One v2 answer that is not a tracked add (see bkfast._clientpath)."""
        header, rc, ledger_id, entry_id = _V2_RESPONSE.unpack_from(f)
        op = (header >> 16) & 0xFF if header >> 24 else header & 0xFF
        if op == _V2_ADD or op == _V2_READ:
            is_add = op == _V2_ADD
            req = _queue_pop(self.adds, (ledger_id, entry_id)) if is_add else self._pop_read(ledger_id, entry_id)
            if req is None or req.done:
                self._stray(req, "ADD" if is_add else "READ", ledger_id, entry_id)
                return
            self.inflight -= 1
            req.done = True
            if rc == 0:
                req.callback(None if is_add else f[24:])
            else:
                req.errback(error_for_v2_rc(rc, req.context(self.bookie_id)))
        else:
            log.warning("bookie %s sent an unexpected v2 response (opcode %d, ledger %d, entry %d)",
                      self.bookie_id, op, ledger_id, entry_id)

    def _pop_read(self, ledger_id: int, entry_id: int):
        reads = self.reads
        if entry_id != -1:
            lac_read = _queue_head(reads, (ledger_id, -1))
            if lac_read is not None:
                # An answer naming the real entry id: it may be for a read of -1 (see the module doc).
                explicit = _queue_head(reads, (ledger_id, entry_id))
                if explicit is None or lac_read.seq < explicit.seq:
                    return _queue_pop(reads, (ledger_id, -1))
        return _queue_pop(reads, (ledger_id, entry_id))

    def _stray(self, req, op: str, ledger_id: int, entry_id: int) -> None:
        if req is None:
            # Answers to adds a failed handle already gave up on arrive here: normal, hence debug.
            log.debug("bookie %s sent an answer to %s of ledger %d entry %d, which is not pending; ignored",
                      self.bookie_id, op, ledger_id, entry_id)
        else:
            log.debug("late %s answer from bookie %s for ledger %d entry %d (timed out); ignored",
                      op, self.bookie_id, ledger_id, entry_id)

    def _handle_v3(self, frames) -> None:
        self.core.dispatch_v3(frames)

    def _handle_v3_frame(self, f) -> None:
        """One v3 answer that is not a tracked add (see bkfast._clientpath), matched by txnId."""
        resp = self._response
        resp.ParseFromString(f)
        txn = resp.header.txnId
        req = self.txns.pop(txn, None)
        if req is None or req.done:
            log.debug("v3 answer from bookie %s for txn %d that is not pending (timed out?); ignored",
                      self.bookie_id, txn)
            return
        self.inflight -= 1
        req.done = True
        try:
            result = self._v3_result(req, resp)
        except BKError as err:
            req.errback(err)
        else:
            req.callback(result)

    def _v3_add_error(self, status: int) -> BKError:
        return error_for_v3_status(status, f"request on bookie {self.bookie_id}")

    def _v3_result(self, req: PendingRequest, resp):
        kind = req.kind
        field = _V3_FIELD[kind]
        has_sub = resp.HasField(field)
        sub = getattr(resp, field)
        status = sub.status if has_sub else resp.status
        if kind == K_LONG_POLL and status in (pb.EOK, pb.ENOENTRY) and has_sub:
            # ENOENTRY with maxLAC: no entry past previousLAC yet (Java counts it as a LAC-only answer).
            entry = sub.body if status == pb.EOK and sub.HasField("body") else None
            return LongPollResult(entry, sub.maxLAC if sub.HasField("maxLAC") else None)
        if status != pb.EOK:
            raise error_for_v3_status(status, req.context(self.bookie_id))
        if kind == K_ADD or kind == K_WRITE_LAC or kind == K_FORCE:
            return None
        if kind == K_READ:
            return sub.body
        if kind == K_READ_LAC:
            return ReadLacResult(sub.lacBody if sub.HasField("lacBody") else None,
                                 sub.lastEntryBody if sub.HasField("lastEntryBody") else None)
        return (sub.freeDiskSpace, sub.totalDiskCapacity)   # K_INFO

    # --- timeouts -----------------------------------------------------------------------------------
    def sweep(self) -> None:
        now = _monotonic()
        horizon = now - self.min_timeout       # requests issued after this cannot have timed out yet
        expired = []
        for table in (self.adds, self.reads, self.txns):
            for v in table.values():            # oldest first: dicts keep insertion order
                if type(v) is list:
                    expired.extend(r for r in v if not r.done and r.deadline <= now)
                    if v[0].started > horizon:
                        break
                    continue
                if v.started > horizon:
                    break
                if not v.done and v.deadline <= now:
                    expired.append(v)
        if not expired:
            return
        expired.sort(key=lambda r: r.seq)
        log.warning("bookie %s: %d requests timed out (first: %s)", self.bookie_id, len(expired),
                    expired[0].context(self.bookie_id))
        txns = self.txns if self.v3 else None
        for req in expired:                  # v2 requests stay queued as tombstones (module doc)
            if not req.done:
                if txns is not None:
                    txns.pop(req.seq, None)
                self.inflight -= 1
                log.debug("timed out: %s", req.context(self.bookie_id))
                req.fail(BKTimeoutException(f"no response within the timeout: {req.context(self.bookie_id)}"))
            if self.state is CLOSED:
                return
