"""The bookie's admin HTTP server (BookKeeper's HTTP admin endpoint names), served on the bookie's reactor.

  GET /heartbeat                        200 "OK\\n"
  GET /metrics                          Prometheus text exposition (made in a pool thread, its own gate)
  GET /api/v1/bookie/info               {"freeSpace": n, "totalSpace": n}  (ledger dirs, as BookieInfoService)
  GET /api/v1/bookie/state              {"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}
  PUT /api/v1/bookie/state/readonly     body {"readOnly": true|false}: switch read-only at run time
  GET|PUT /api/v1/bookie/gc             whether a forced GC is pending | start GC + compaction now
  GET /api/v1/bookie/gc_details         per entry log live ratio, last GC/compaction times, bytes reclaimed
                                        (BookieStateReadOnlyService); GET returns {"readOnly": bool}
  /api/v1/config/..., /api/v1/ledger/..., /api/v1/bookie/list_bookies, ...: the operator endpoints of
                                        bkfast.http.admin_api (spec §9.2), installed on the same site

It listens on httpServerPort of the bookie's bind address (listeningInterface's, bkfast.ids.bookie_address).

The endpoints above render on the reactor thread (admin_api's run in its thread pool); their only blocking
call (moving the ZooKeeper registration between available/ and available/readonly/) runs in the pool too.
Must never: create the metrics or install them on the bookie (bkfast.server.BookieService does, and hands
them over here).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from twisted.internet import defer, threads
from twisted.internet.interfaces import IProtocolFactory
from twisted.web import resource, server

from bkfast.errors import AdminBusyError
from bkfast.http.limits import AdminSite, AdmissionGate, load_json
from bkfast.http.metrics import BookieMetrics
from bkfast.ids import bookie_address

if TYPE_CHECKING:
    from bkfast.replication.daemon import AutoRecoveryDaemon

log = logging.getLogger(__name__)

__all__ = ["AdminContext", "build_site", "start_http_server"]


class AdminContext:
    """What the endpoints look at: the Bookie, the server factory, the metadata session (or None)."""

    def __init__(self, bookie, factory=None, meta=None, metrics: BookieMetrics | None = None):
        self.bookie = bookie
        self.factory = factory
        self.meta = meta
        self.metrics = metrics
        # The whole scrape (bkfast.stats.StatsProvider.text: Java's stats, bkfast's, the process's)
        self.render_metrics: Callable[[], str] | None = None
        self.autorecovery: AutoRecoveryDaemon | None = None     # when autoRecoveryDaemonEnabled
        self.shutting_down = False

    def disk_space(self) -> tuple[int, int]:
        """(total, free) bytes of the ledger directories' file systems, each file system counted once."""
        if self.factory is not None and hasattr(self.factory, "disk_space"):
            return self.factory.disk_space()
        seen, total, free = set(), 0, 0
        for d in self.bookie.ledger_dirs:
            try:
                st, dev = os.statvfs(d), os.stat(d).st_dev
            except OSError:
                continue
            if dev not in seen:
                seen.add(dev)
                total += st.f_blocks * st.f_frsize
                free += st.f_bavail * st.f_frsize
        return total, free


def _json(request, status: int, body) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"Content-Type", b"application/json")
    return (json.dumps(body) + "\n").encode()


def _error(request, status: int, message: str) -> bytes:
    return _json(request, status, {"error": message})


class _Leaf(resource.Resource):
    isLeaf = True

    def __init__(self, ctx: AdminContext):
        super().__init__()
        self.ctx = ctx


class MetricsResource(resource.Resource):
    """Prometheus' text exposition (`render()`: the text), made in a pool thread admitted by `gate`."""

    isLeaf = True

    def __init__(self, render: Callable[[], str], gate: AdmissionGate):
        super().__init__()
        self.render_text = render
        self.gate = gate

    def render_GET(self, request):
        try:
            d = self.gate.run(lambda: self.render_text().encode())
        except AdminBusyError as err:
            request.setHeader(b"Retry-After", b"1")
            return _error(request, 503, f"metrics busy, retry later: {err}")
        gone = []
        request.notifyFinish().addErrback(lambda failure: (gone.append(failure), d.cancel()))

        def write(text: bytes):
            if not gone:
                request.setHeader(b"Content-Type", CONTENT_TYPE_LATEST.encode())
                request.write(text)
                request.finish()

        def failed(failure):
            if failure.check(defer.CancelledError) or gone:
                return
            log.error("metrics exposition failed: %s", failure.getErrorMessage())
            request.write(_error(request, 500, "metrics exposition failed"))
            request.finish()

        d.addCallbacks(write, failed)
        return server.NOT_DONE_YET


class HeartbeatResource(_Leaf):
    def render_GET(self, request):
        request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
        return b"OK\n"


class BookieInfoResource(_Leaf):
    def render_GET(self, request):
        total, free = self.ctx.disk_space()
        return _json(request, 200, {"freeSpace": free, "totalSpace": total})


class BookieStateResource(resource.Resource):
    def __init__(self, ctx: AdminContext):
        super().__init__()
        self.ctx = ctx
        self.putChild(b"readonly", ReadOnlyResource(ctx))

    def getChild(self, path, request):
        if path == b"":
            return self
        return resource.NoResource()

    def render_GET(self, request):
        bookie = self.ctx.bookie
        return _json(request, 200, {
            "running": bool(bookie.started) and not self.ctx.shutting_down,
            "readOnly": bool(bookie.read_only),
            "shuttingDown": self.ctx.shutting_down,
            "availableForHighPriorityWrites": bool(bookie.started) and not self.ctx.shutting_down,
        })


class ReadOnlyResource(_Leaf):
    def render_GET(self, request):
        return _json(request, 200, {"readOnly": bool(self.ctx.bookie.read_only)})

    def render_PUT(self, request):
        try:
            body = load_json(request.content.read() or b"{}")
            value = body["readOnly"]
            if not isinstance(value, bool):
                raise ValueError("readOnly must be true or false")
        except (ValueError, KeyError, TypeError) as err:
            return _error(request, 400, f"expected JSON {{\"readOnly\": true|false}}: {err}")
        ctx = self.ctx
        ctx.bookie.read_only = value
        log.info("bookie switched to %s via the admin API", "read-only" if value else "read-write")
        registration = getattr(ctx.meta, "registration", None) if ctx.meta is not None else None
        if registration is None:
            return _json(request, 200, {"readOnly": value})

        # BookieRegistration.set_read_only does blocking ZooKeeper calls: keep them off the reactor.
        d = threads.deferToThread(registration.set_read_only, value)

        def ok(_):
            request.write(_json(request, 200, {"readOnly": value}))
            request.finish()

        def failed(failure):
            log.error("could not move the registration to %s: %s",
                      "read-only" if value else "read-write", failure.getErrorMessage())
            request.write(_error(request, 500, f"registration update failed: {failure.getErrorMessage()}"))
            request.finish()

        d.addCallbacks(ok, failed)
        return server.NOT_DONE_YET


class GcResource(_Leaf):
    """Java's /api/v1/bookie/gc: PUT starts a garbage collection with major and minor compaction now
    (body optional: {"forceMajor": bool, "forceMinor": bool}); GET says whether one is pending."""

    def render_GET(self, request):
        forced = getattr(self.ctx.bookie.gc, "_forced", {})
        return _json(request, 200, {"is_in_force_gc": str(bool(any(forced.values()))).lower()})

    def render_PUT(self, request):
        try:
            body = load_json(request.content.read() or b"{}")
            major = body.get("forceMajor", True)
            minor = body.get("forceMinor", True)
            if not isinstance(major, bool) or not isinstance(minor, bool):
                raise ValueError("forceMajor and forceMinor must be true or false")
        except (ValueError, AttributeError) as err:
            return _error(request, 400, f"expected JSON {{\"forceMajor\": bool, \"forceMinor\": bool}}: {err}")
        self.ctx.bookie.gc.trigger(force_major=major, force_minor=minor)
        log.info("garbage collection triggered via the admin API (major %s, minor %s)", major, minor)
        return _json(request, 200, {"triggered": True, "forceMajor": major, "forceMinor": minor})


class GcDetailsResource(_Leaf):
    """/api/v1/bookie/gc_details: per-entry-log live ratio, last GC / compaction times, bytes reclaimed."""

    def render_GET(self, request):
        return _json(request, 200, self.ctx.bookie.gc_state())


@dataclass(frozen=True)
class HttpServerSettings:
    """The admin HTTP server's own keys, read once at its start."""

    host: str | None                # httpServerHost (None: the bookie's bind address)
    port: int                       # httpServerPort
    tls: bool                       # httpServerTlsEnable
    max_request_body_bytes: int     # httpServerMaxRequestBodyBytes

    @classmethod
    def from_conf(cls, conf) -> HttpServerSettings:
        return cls(conf.get("httpServerHost") or None, conf.get("httpServerPort"),
                   bool(conf.get("httpServerTlsEnable")), conf.http_server_max_request_body_bytes)


def build_site(ctx: AdminContext, security, max_request_body_bytes: int) -> server.Site:
    """The admin site: the endpoints above, and those of bkfast.http.admin_api and autorecovery_api (spec §9.2)
    under /api/v1/;
    with `security` (bkfast.http.security), mutating requests need its token or client certificate; request
    bodies (at most `max_request_body_bytes`: httpServerMaxRequestBodyBytes) and handler CPU are bounded
    by bkfast.http.limits."""
    from twisted.internet import reactor

    from bkfast.http.autorecovery_api import install_all_admin_apis

    root = resource.Resource()
    root.putChild(b"heartbeat", HeartbeatResource(ctx))
    metrics = ctx.metrics
    if metrics is not None:
        # A gate of its own: a flood of heavy admin GETs must not starve Prometheus' scrapes, and a flood
        # of scrapes must not take the reactor (an exposition costs ~1-2 ms of Python).
        gate = AdmissionGate(reactor, concurrency=1, max_queued=16, busy_share=0.05)
        reactor.addSystemEventTrigger("before", "shutdown", gate.stop)
        render = ctx.render_metrics or (lambda: generate_latest(metrics.registry).decode())
        root.putChild(b"metrics", MetricsResource(render, gate))
    api = resource.Resource()
    v1 = resource.Resource()
    bookie = resource.Resource()
    root.putChild(b"api", api)
    api.putChild(b"v1", v1)
    v1.putChild(b"bookie", bookie)
    bookie.putChild(b"info", BookieInfoResource(ctx))
    bookie.putChild(b"state", BookieStateResource(ctx))
    bookie.putChild(b"gc", GcResource(ctx))
    bookie.putChild(b"gc_details", GcDetailsResource(ctx))
    install_all_admin_apis(root, ctx)
    return AdminSite(root, security, max_request_body_bytes)


def start_http_server(reactor, conf, ctx: AdminContext, sock=None):
    """Serve `ctx`'s endpoints on httpServerHost (unset: the bookie's bind address, bkfast.ids.bookie_address)
    and httpServerPort -- or on `sock`, a bound socket not yet listening -- over HTTPS with
    httpServerTlsEnable, behind the authentication check of bkfast.http.security; returns the listening port.

    The metrics in `ctx` are made and handed to the Bookie by their owner (bkfast.server); this module
    only exposes them."""
    from bkfast.http.security import HttpSecurity, https_context_from_conf

    settings = HttpServerSettings.from_conf(conf)
    interface = settings.host or bookie_address(conf).bind_host
    security = HttpSecurity.from_conf(conf)
    if not security.required and interface not in ("127.0.0.1", "localhost", "::1"):
        log.warning("admin HTTP API on %s: its mutating endpoints are open to anyone who can reach it; set "
                    "httpServerAuthTokenFile (and/or httpServerTlsEnable with httpServerTrustStorePath)", interface)
    site = build_site(ctx, security, settings.max_request_body_bytes)
    factory: IProtocolFactory = site
    tls = settings.tls
    if sock is not None:
        if tls:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            factory = TLSMemoryBIOFactory(https_context_from_conf(conf), False, site)
        try:
            sock.listen(50)
            port = reactor.adoptStreamPort(sock.fileno(), sock.family, factory)
        finally:
            sock.close()                # the port holds its own duplicate of the socket
    elif tls:
        port = reactor.listenSSL(settings.port, site, https_context_from_conf(conf), interface=interface)
    else:
        port = reactor.listenTCP(settings.port, site, interface=interface)
    bound = port.getHost()
    log.info("admin HTTP%s server listening on %s:%d", "S" if tls else "",
             bound.host, bound.port)
    return port
