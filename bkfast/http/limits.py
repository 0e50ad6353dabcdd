"""What one admin HTTP client may cost the bookie: request bodies and handler CPU.

Owns:
- `AdminRequest`, the site's request class. It decides on the headers alone, before any body byte is
  read: a body that needs credentials it does not carry is refused (401), a declared body over
  `httpServerMaxRequestBodyBytes` is refused (413), and a chunked body is cut off (413) as soon as it
  passes the limit. Bodies are held in memory (never spooled to a temporary file: Twisted spools any body
  over 100 kB, and an unauthenticated peer could fill the disk that way).
- `AdmissionGate`: at most `httpServerMaxConcurrentRequests` admin handlers run at once, at most
  `httpServerMaxQueuedRequests` wait (beyond them: 503 with Retry-After; requests with credentials go
  ahead of those without), and the handlers are busy at most `httpServerMaxBusyShare` of the time on
  average: a request that ran longer than the share accrued delays the start of the next one. A
  handler's wall time is what is charged, because its work spreads over threads it does not own (the
  kazoo connection thread parsing ZooKeeper's answers, the metadata driver's pool, the reactor) that share
  the GIL with the data path: measured on a listing of 200 ledgers' metadata, the handler's own thread
  did 7 ms of CPU while kazoo's did 65 ms.

An early refusal writes its answer and closes the connection: the body that follows is never read.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections import deque

from twisted.internet import defer, threads
from twisted.web import server

from bkfast.errors import AdminBusyError

log = logging.getLogger(__name__)

__all__ = ["AdminRequest", "AdminSite", "AdmissionGate", "load_json"]

_REASONS = {401: b"Unauthorized", 413: b"Payload Too Large"}


class AdminRequest(server.Request):
    """A twisted.web request whose body is checked (credentials, size) before it is read."""

    refused = False
    _body_bytes = 0

    def _limits(self):
        site = self.channel.site
        return getattr(site, "security", None), getattr(site, "max_body_bytes", None)

    def gotLength(self, length):
        security, max_body = self._limits()
        self.content = io.BytesIO()
        if length == 0:
            return              # nothing to read: the resource decides (a normal 401 keeps the connection)
        if security is not None and security.required and \
                not security.has_credentials(self.requestHeaders, self.channel.transport):
            self._refuse_early(401, "authentication required before a request body is sent: Authorization: "
                                    "Bearer <token> or a trusted client certificate")
        elif max_body is not None and length is not None and length > max_body:
            self._refuse_early(413, f"request body of {length} bytes is over httpServerMaxRequestBodyBytes="
                                    f"{max_body}")

    def handleContentChunk(self, data):
        if self.refused:
            return
        _, max_body = self._limits()
        self._body_bytes += len(data)
        if max_body is not None and self._body_bytes > max_body:
            self._refuse_early(413, f"request body over httpServerMaxRequestBodyBytes={max_body}")
            return
        self.content.write(data)

    def process(self):
        if not self.refused:
            super().process()

    def _refuse_early(self, status: int, message: str) -> None:
        self.refused = True
        # Twisted declares Request.content as None at class level and sets a file per request.
        self.content = io.BytesIO()  # type: ignore[assignment]
        body = (json.dumps({"error": message}) + "\n").encode()
        transport = self.channel.transport
        assert transport is not None, "a request being received has its connection"
        peer = transport.getPeer()
        log.warning("admin API: refused a request body from %s:%s before reading it (%d): %s",
                    getattr(peer, "host", "?"), getattr(peer, "port", "?"), status, message)
        head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n" \
               % (status, _REASONS[status], len(body))
        if status == 401:
            head += b'WWW-Authenticate: Bearer realm="bkfast admin"\r\n'
        transport.write(head + b"\r\n" + body)
        self.channel.loseConnection()


class AdminSite(server.Site):
    """The admin site: AdminRequest for every request; `security` (bkfast.http.security.HttpSecurity or
    None) and the body limit are what AdminRequest checks."""

    requestFactory = AdminRequest

    def __init__(self, root, security=None, max_body_bytes: int | None = None, **kwargs):
        super().__init__(root, **kwargs)
        self.security = security
        self.max_body_bytes = max_body_bytes
        self.displayTracebacks = False

    def getResourceFor(self, request):
        if self.security is not None and not self.security.allows(request):
            from bkfast.http.security import unauthorized_resource

            log.warning("admin API: refused unauthenticated %s %s from %s", request.method.decode("ascii", "replace"),
                        request.uri.decode("ascii", "replace"), request.getClientAddress())
            return unauthorized_resource()
        return super().getResourceFor(request)


class AdmissionGate:
    """Runs admin handlers in the reactor's thread pool, a bounded number at once, within a busy share.

    Reactor thread only (`run`); the handlers themselves run in pool threads. Credit accrues at
    `busy_share` seconds per second up to `burst_s`; a handler's wall time is charged when it ends;
    while the credit is negative, the next handler waits until it is back to zero."""

    def __init__(self, reactor, concurrency: int, max_queued: int, busy_share: float, burst_s: float = 0.5,
                 per_request_s: float = 0.001, clock=time.monotonic):
        self.reactor = reactor
        self.concurrency = concurrency
        self.max_queued = max_queued
        self.busy_share = busy_share
        self.burst_s = burst_s
        self.per_request_s = per_request_s      # the reactor's share of a request (HTTP parsing, writing)
        self.clock = clock
        self.running = 0
        self.waiting: deque = deque()
        self.credit_s = burst_s
        self._credit_at = clock()
        self._wake = None
        self.busy_s = 0.0
        self.refused = 0

    def run(self, fn, *args, ahead: bool = False) -> defer.Deferred:
        """A Deferred of fn(*args) run in a pool thread once admitted; raises AdminBusyError when the queue is
        full. `ahead`: queue before every request not `ahead` (an operator's, with credentials, is not kept
        waiting behind an anonymous flood)."""
        if len(self.waiting) >= self.max_queued and self.running >= self.concurrency:
            self.refused += 1
            raise AdminBusyError(f"{self.running} admin requests running and {len(self.waiting)} waiting")
        d: defer.Deferred[None] = defer.Deferred()
        if ahead:
            position = next((i for i, item in enumerate(self.waiting) if not item[3]), len(self.waiting))
            self.waiting.insert(position, (d, fn, args, True))
        else:
            self.waiting.append((d, fn, args, False))
        self._admit()
        return d

    def _refill(self) -> None:
        now = self.clock()
        self.credit_s = min(self.burst_s, self.credit_s + (now - self._credit_at) * self.busy_share)
        self._credit_at = now

    def _admit(self) -> None:
        self._refill()
        while self.waiting and self.running < self.concurrency and self.credit_s >= 0:
            d, fn, args, _ahead = self.waiting.popleft()
            if d.called:            # cancelled: the client went away while it waited
                continue
            self.running += 1
            threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), _timed, fn, args) \
                .addBoth(self._finished, d)
        if self.waiting and self.credit_s < 0 and self._wake is None:
            self._wake = self.reactor.callLater(-self.credit_s / self.busy_share + 0.001, self._woken)

    def _woken(self) -> None:
        self._wake = None
        self._admit()

    def _finished(self, outcome, d: defer.Deferred) -> None:
        self.running -= 1
        if isinstance(outcome, tuple):
            busy_s, ok, value = outcome
        else:                               # _timed itself failed (it never raises): pass it on
            busy_s, ok, value = 0.0, False, outcome
        self._refill()
        self.credit_s -= busy_s + self.per_request_s
        self.busy_s += busy_s
        if not d.called:
            if ok:
                d.callback(value)
            else:
                d.errback(value)
        self._admit()

    def stop(self) -> None:
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        self._wake = None


def _timed(fn, args) -> tuple:
    started = time.monotonic()
    try:
        value, ok = fn(*args), True
    except BaseException as err:            # handed back to the reactor thread as the request's failure
        value, ok = err, False
    return time.monotonic() - started, ok, value


def load_json(data: bytes):
    """json.loads for a request body, with every way it can fail a ValueError: a body nested deeper than
    the parser recurses (`[[[[...`) is a client's mistake, not a server error."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError as err:
        raise ValueError(str(err)) from None
