"""Add-entry load generator for `bkfast bench bookie`: talks v2 or v3 to any bookie (bkfast's or Java's).

Owns: the client side of BenchBookie. A Twisted Protocol per connection cuts the response stream with
the Cython `FrameSplitter`; requests are built in place in one reused send buffer per connection (v2:
`FrameBuilder.add_add_request`; v3: `FrameBuilder.add_v3_add_request`, the same bytes protobuf would
serialize) and everything
produced in one reactor turn goes out with ONE socket send (see `BenchProtocol.flush`). Responses are
matched to requests by (ledgerId, entryId) in v2 and by txnId in v3.

Phases (`Phase`): closed loop (at most `window` adds in flight per connection; window 1 is the
one-at-a-time latency phase) or open loop (`rate` adds/s on a fixed schedule t0 + i/rate; latency is
measured from the *scheduled* time, so client-side queueing behind a slow bookie is not hidden; the
in-flight cap only bounds memory, it cannot make latency look better).

Needs no ZooKeeper: ledger ids are consecutive from a first id the caller chooses; every entry of
ledger L with id e carries lac = e - 1 and length = (e + 1) * size, as a real writer would.

Must never: block the reactor, or count an add as successful unless its response said EOK.
"""

from __future__ import annotations

import math
import time
from array import array
from collections import Counter

from twisted.internet import defer, protocol
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHandshakeListener
from zope.interface import implementer

from bkfast import codec
from bkfast.errors import FrameError

_perf = time.perf_counter
# The open-loop phase sends what is due at most every 0.5 ms. Latency is still measured from each add's
# scheduled time, so this can only add to the reported latency; ticking for every add (20 us apart at
# 50,000/s) cost the load generator 2-4x the CPU and took it from the bookie sharing the cores.
RATE_MIN_TICK_S = 0.0005

V3_EOK = 0
V2_EOK = 0


def percentile(sorted_values, p: float):
    """Nearest-rank percentile (p in 0..100) of an ascending list; None if empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, math.ceil(p * n / 100.0 - 1e-9))   # tolerate 99.9 * 1000 / 100 = 999.0000000001
    return sorted_values[min(rank, n) - 1]


def percentiles_ms(sorted_seconds, points=(50, 95, 99, 99.9), digits: int = 3) -> dict:
    """{"p50_ms": .., "p999_ms": ..}: the nearest-rank percentiles of ascending latencies in seconds, in
    milliseconds rounded to `digits` (None each when there are none). Every bench reports through this."""
    out = {}
    for p in points:
        v = percentile(sorted_seconds, p)
        out[f"p{p:g}".replace(".", "") + "_ms"] = None if v is None else round(v * 1000.0, digits)
    return out


def summarize(latencies_s, ok: int, errors: Counter, duration_s: float, entry_size: int,
              issued: int | None = None) -> dict:
    """The result object of one phase (latencies in seconds in, milliseconds out)."""
    lat = sorted(latencies_s)
    def ms(v):
        return None if v is None else round(v * 1000.0, 4)
    rate = ok / duration_s if duration_s > 0 else 0.0
    return {
        "adds": ok + sum(errors.values()),
        "ok": ok,
        "errors": sum(errors.values()),
        "error_codes": {str(k): v for k, v in sorted(errors.items(), key=lambda kv: str(kv[0]))},
        "duration_s": round(duration_s, 6),
        "adds_per_s": round(rate, 1),
        "mb_per_s": round(rate * entry_size / 1e6, 3),
        "mean_ms": ms(sum(lat) / len(lat)) if lat else None,
        **percentiles_ms(lat, (50, 99, 99.9), 4),
        "max_ms": ms(lat[-1]) if lat else None,
    }


class Writer:
    """Hands out (key, frame) for the next add, round-robin over the ledgers; shared by all connections."""

    def __init__(self, protocol_version: str, first_ledger_id: int, ledgers: int, size: int,
                 digest_type: int, password: bytes = b"", payload: bytes | None = None):
        if protocol_version not in ("v2", "v3"):
            raise ValueError(f"protocol must be v2 or v3, got {protocol_version!r}")
        self.v3 = protocol_version == "v3"
        self.ledger_ids = [first_ledger_id + i for i in range(ledgers)]
        self.next_entry = [0] * ledgers
        self.rr = 0
        self.size = size if payload is None else len(payload)
        self.digest_type = int(digest_type)
        self.master_key = codec.master_key(password)
        self.mac_key = codec.mac_key(password)
        self.payload = payload if payload is not None else bytes(size)
        self.txn = 0

    def append_next(self, out) -> object:
        """Append the next add's frame to `out` (a codec.FrameBuilder); return its match key."""
        i = self.rr
        n = len(self.ledger_ids)
        self.rr = i + 1 if i + 1 < n else 0
        lid = self.ledger_ids[i]
        e = self.next_entry[i]
        self.next_entry[i] = e + 1
        if not self.v3:
            out.add_add_request(self.master_key, lid, e, e - 1, (e + 1) * self.size, self.payload,
                                self.digest_type, self.mac_key)
            return lid, e
        self.txn += 1
        txn = self.txn
        out.add_v3_add_request(self.master_key, lid, e, e - 1, (e + 1) * self.size, self.payload, self.digest_type,
                               self.mac_key, txn)
        return txn


class Phase:
    """One measured run of `total` adds over the given connections."""

    def __init__(self, name: str, writer: Writer, conns, total: int, window: int,
                 rate: float | None = None, timeout_s: float | None = None, clock=None):
        self.name = name
        self.writer = writer
        self.conns = list(conns)
        self.total = total
        self.window = max(1, window)
        self.rate = rate
        self.timeout_s = timeout_s
        self.clock = clock
        self.issued = 0
        self.completed = 0
        self.ok = 0
        self.latencies: list[float] = []
        self.start_times: list[float] = []   # perf_counter start (scheduled) time of each latency sample
        self.errors: Counter = Counter()
        self.t0 = None
        self.t_end = None
        self.done = defer.Deferred()
        self.finished = False
        self.failure_reason = None
        self._tick_call = None
        self._timeout_call = None

    # -- driving ---------------------------------------------------------------------------------
    def start(self):
        self.t0 = _perf()
        for c in self.conns:
            c.phase = self
        if self.total == 0:
            self._finish(self.t0)
            return self.done
        if self.clock is not None and self.timeout_s:
            self._timeout_call = self.clock.callLater(self.timeout_s, self.abort,
                                                      f"timed out after {self.timeout_s:g} s")
        if self.rate:
            self._tick()
        else:
            now = _perf()
            for c in self.conns:
                self.pump(c, now)
        return self.done

    def _tick(self):
        self._tick_call = None
        if self.finished:
            return
        now = _perf()
        n = len(self.conns)
        for k, c in enumerate(self.conns):            # spread what is due evenly over the connections
            self.pump(c, now, share=-(-(self._due(now) - self.issued) // (n - k)))
        if self.issued < self.total and self.clock is not None:
            due_next = self.t0 + self.issued / self.rate
            delay = due_next - _perf()
            if self._due(now) > self.issued:   # window-bound: responses drive pumping, poll slowly
                delay = max(delay, 0.001)
            self._tick_call = self.clock.callLater(max(RATE_MIN_TICK_S, delay), self._tick)

    def _due(self, now: float) -> int:
        due = int((now - self.t0) * self.rate) + 1
        return due if due < self.total else self.total

    def pump(self, conn, now: float, share: int | None = None):
        """Issue as many adds as the window (and the schedule) allow on `conn`, in one write."""
        if self.finished or conn.phase is not self:
            return
        limit = self.total if not self.rate else self._due(now)
        room = self.window - len(conn.pending)
        if room <= 0 or self.issued >= limit:
            return
        count = min(room, limit - self.issued)
        if share is not None:
            count = min(count, share)
            if count <= 0:
                return
        pending = conn.pending
        append = self.writer.append_next
        out = conn.out
        if not self.rate:
            for _ in range(count):
                pending[append(out)] = now
        else:
            t0, rate, i = self.t0, self.rate, self.issued
            for j in range(count):
                pending[append(out)] = t0 + (i + j) / rate
        self.issued += count
        conn.flush()

    # -- completions -----------------------------------------------------------------------------
    def complete(self, started: float, now: float, rc: int):
        self.completed += 1
        if rc == 0:
            self.ok += 1
            self.latencies.append(now - started)
            self.start_times.append(started)
        else:
            self.errors[rc] += 1
        if self.completed >= self.total:
            self._finish(now)

    def abort(self, reason: str):
        """Count every add not yet answered as failed (`reason`) and finish."""
        if self.finished:
            return
        self.failure_reason = reason
        missing = self.total - self.completed
        if missing:
            self.errors[reason] += missing
            self.completed = self.total
        for c in self.conns:
            c.pending.clear()
        self._finish(_perf())

    def _finish(self, now: float):
        if self.finished:
            return
        self.finished = True
        self.t_end = now
        for call in (self._tick_call, self._timeout_call):
            if call is not None and call.active():
                call.cancel()
        for c in self.conns:
            if c.phase is self:
                c.phase = None
        self.done.callback(self.result())

    def result(self) -> dict:
        end = self.t_end if self.t_end is not None else _perf()
        res = summarize(self.latencies, self.ok, self.errors, end - (self.t0 or end), self.writer.size)
        if self.rate:
            res["target_adds_per_s"] = self.rate
        if self.failure_reason:
            res["failure"] = self.failure_reason
        return res

    def samples(self) -> array:
        """(start time, latency) of every successful add, seconds, interleaved in one float64 array. The
        start is time.perf_counter (CLOCK_MONOTONIC on Linux, the same clock in every process), so tails
        can be lined up with events of the bookie."""
        out = array("d", bytes(16 * len(self.latencies)))
        out[0::2] = array("d", self.start_times)
        out[1::2] = array("d", self.latencies)
        return out


_START_TLS = bytes.fromhex("0000000b0a06080310091801d20600")
_START_TLS_EOK = bytes.fromhex("0000000d0a060803100918011000d20600")


@implementer(IHandshakeListener)
class BenchProtocol(protocol.Protocol):
    """One bookie connection: frames the response stream and hands completions to the current phase.
    With `tls` (a bkfast.tls.context.ClientTLS) it sends START_TLS first and is connected once the TLS
    handshake is done; frames then go through the TLS transport."""

    def __init__(self, v3: bool, max_frame_size: int = codec.DEFAULT_MAX_FRAME_SIZE, tls=None):
        self.v3 = v3
        self.tls = tls
        self.tls_reply = None
        self.splitter = codec.FrameSplitter(max_frame_size)
        self.pending: dict = {}
        self.phase: Phase | None = None
        self.connected_d = defer.Deferred()
        self.lost_reason = None
        self.bytes_sent = 0
        self.writes = 0
        self.out = codec.FrameBuilder(1 << 20)

    def connectionMade(self):
        try:
            self.transport.setTcpNoDelay(True)
        except Exception:
            pass
        if self.tls is not None:
            self.tls_reply = b""
            self.transport.write(_START_TLS)
            return
        self.transport.registerProducer(self, False)
        self._connected()

    def handshakeCompleted(self):
        self._connected()

    def _connected(self):
        d, self.connected_d = self.connected_d, None
        if d is not None:
            d.callback(self)

    # The send path: frames are built in place in `out` (one reused buffer) and sent from it with one
    # socket send per batch; what the socket does not take stays there until Twisted reports the socket
    # writable (we are its pull producer: an empty-buffer doWrite calls resumeProducing). Twisted's own
    # buffer is never used, so ordering holds, and no byte is copied in user space after it is built.
    # Measured with 16 KiB adds: transport.writeSequence cost a join copy plus page faults on a fresh
    # multi-MB buffer per batch (clear_page + faults were ~9% of the machine's CPU).
    def resumeProducing(self):
        self.flush()

    def stopProducing(self):
        pass

    def flush(self):
        out = self.out
        transport = self.transport
        if not len(out) or transport is None or self.lost_reason is not None:
            return
        view = out.pending()
        if self.tls is not None:           # the TLS layer encrypts and buffers
            n = len(view)
            transport.write(bytes(view))
            view.release()
            out.consume(n)
            self.writes += 1
            self.bytes_sent += n
            return
        try:
            sent = transport.getHandle().send(view)
        except BlockingIOError:
            sent = 0
        except OSError as err:
            view.release()
            self._fail(f"send to bookie failed: {err}")
            self.close()
            return
        view.release()
        self.writes += 1
        self.bytes_sent += sent
        out.consume(sent)
        if len(out):
            transport.startWriting()

    def close(self):
        """Close the connection (the producer goes first: with a pull producer Twisted never closes)."""
        transport = self.transport
        if transport is not None and self.lost_reason is None:
            if transport.producer is self:
                transport.unregisterProducer()
            transport.loseConnection()

    def dataReceived(self, data):
        if self.tls_reply is not None:
            self.tls_reply += data
            if len(self.tls_reply) >= len(_START_TLS_EOK):
                if self.tls_reply != _START_TLS_EOK:
                    d, self.connected_d = self.connected_d, None
                    if d is not None:
                        d.errback(ConnectionError(f"the bookie refused START_TLS: {self.tls_reply.hex()}"))
                    self.transport.loseConnection()
                    return
                self.tls_reply = None
                self.transport.startTLS(self.tls)
            return
        try:
            frames = self.splitter.feed(data)
        except FrameError as err:
            frames = getattr(err, "frames", [])
            self._handle(frames)
            self._fail(f"bad frame from bookie: {err}")
            self.close()
            return
        self._handle(frames)

    def _handle(self, frames):
        if not frames:
            return
        now = _perf()
        phase = first = self.phase
        pending = self.pending
        try:
            if self.v3:
                answer = codec.decode_v3_answer
                for f in frames:
                    txn, _, status = answer(f)
                    started = pending.pop(txn, None)
                    if started is not None and phase is not None:
                        phase.complete(started, now, status)
                        phase = self.phase
            else:
                decode = codec.decode_response
                for f in frames:
                    r = decode(f)
                    started = pending.pop((r.ledger_id, r.entry_id), None)
                    if started is not None and phase is not None:
                        phase.complete(started, now, r.rc)
                        phase = self.phase
        except Exception as err:      # an undecodable response: the stream is unusable
            self._fail(f"undecodable response from bookie: {err!r}")
            self.close()
            return
        if first is not None and self.phase is first:   # a phase started meanwhile has pumped already
            first.pump(self, now)

    def _fail(self, reason: str):
        if self.phase is not None:
            self.phase.abort(reason)

    def connectionLost(self, reason=None):
        self.lost_reason = reason
        d, self.connected_d = self.connected_d, None
        if d is not None:                  # lost before START_TLS and the handshake were done
            d.errback(ConnectionError("connection lost before it was ready: "
                                      + (reason.getErrorMessage() if reason is not None else "closed")))
        if self.phase is not None:
            why = "connection lost" if reason is None or reason.check(ConnectionDone) else \
                f"connection lost: {reason.getErrorMessage()}"
            self.phase.abort(why)


@defer.inlineCallbacks
def connect(reactor, host: str, port: int, connections: int, v3: bool, timeout_s: float = 10.0, tls=None):
    """Open `connections` connections to the bookie (TLS ones with `tls`); fires with the BenchProtocols
    once each is connected (and, with TLS, its handshake done)."""
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    ds = []
    protocols = []
    for _ in range(connections):
        ep = TCP4ClientEndpoint(reactor, host, port, timeout=timeout_s)
        p = BenchProtocol(v3, tls=tls)
        protocols.append(p)
        ready = p.connected_d
        ds.append(connectProtocol(ep, p).addCallback(lambda _, r=ready: r))
    yield defer.gatherResults(ds, consumeErrors=True)
    return protocols


@defer.inlineCallbacks
def run_bench(reactor, host: str, port: int, *, protocol_version: str = "v2", size: int = 1024,
              ledgers: int = 1, first_ledger_id: int = 1, digest_type: int = 3, password: bytes = b"",
              connections: int = 1, outstanding: int = 1000, warmup_count: int = 0,
              latency_count: int = 0, throughput_count: int = 0, rate: float | None = None,
              rate_count: int = 0, timeout_s: float = 300.0, on_phase=None, on_samples=None, tls=None):
    """Run the phases in order (warmup, latency, throughput, rate); fires with {phase: result}.
    `on_samples(name, Phase.samples())` is called after each measured phase when given."""
    v3 = protocol_version == "v3"
    writer = Writer(protocol_version, first_ledger_id, ledgers, size, digest_type, password)
    conns = yield connect(reactor, host, port, connections, v3, tls=tls)
    results = {}
    per_conn = max(1, math.ceil(outstanding / len(conns)))
    plan = [
        ("warmup", conns, warmup_count, per_conn, None),
        ("latency", conns[:1], latency_count, 1, None),
        ("throughput", conns, throughput_count, per_conn, None),
        ("rate", conns, rate_count if rate else 0, per_conn, rate),
    ]
    try:
        for name, cs, count, window, r in plan:
            if count <= 0:
                continue
            live = [c for c in cs if c.lost_reason is None]
            if not live:
                results[name] = summarize([], 0, Counter({"connection lost": count}), 0.0, size)
                if on_phase is not None and name != "warmup":
                    on_phase(name, results[name])
                continue
            phase = Phase(name, writer, live, count, window, rate=r, timeout_s=timeout_s, clock=reactor)
            res = yield phase.start()
            results[name] = res
            if on_phase is not None and name != "warmup":
                on_phase(name, res)
            if on_samples is not None and name != "warmup":
                on_samples(name, phase.samples())
    finally:
        for c in conns:
            c.close()
    return results
