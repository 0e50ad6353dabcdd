"""The bookie's admin HTTP server (BookKeeper's HTTP admin endpoint names), served on the bookie's reactor.

  GET /heartbeat                        200 "OK\\n"
  GET /metrics                          Prometheus text exposition (prometheus_client MetricsResource)
  GET /api/v1/bookie/info               {"freeSpace": n, "totalSpace": n}  (ledger dirs, as BookieInfoService)
  GET /api/v1/bookie/state              {"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}
  PUT /api/v1/bookie/state/readonly     body {"readOnly": true|false}: switch read-only at run time
  GET|PUT /api/v1/bookie/gc             whether a forced GC is pending | start GC + compaction now
  GET /api/v1/bookie/gc_details         per entry log live ratio, last GC/compaction times, bytes reclaimed
                                        (BookieStateReadOnlyService); GET returns {"readOnly": bool}

Everything renders on the reactor thread; the only blocking call (moving the ZooKeeper registration
between available/ and available/readonly/) runs in the reactor's thread pool. Must never: create the
metrics or install them on the bookie (bkfast.server.BookieService does, and hands them over here).
"""

from __future__ import annotations

import json
import logging
import os

from prometheus_client.twisted import MetricsResource
from twisted.internet import threads
from twisted.web import resource, server

from bkfast.http.metrics import BookieMetrics

log = logging.getLogger(__name__)

__all__ = ["AdminContext", "build_site", "start_http_server"]


class AdminContext:
    """What the endpoints look at: the Bookie, the server factory, the metadata session (or None)."""

    def __init__(self, bookie, factory=None, meta=None, metrics: BookieMetrics | None = None):
        self.bookie = bookie
        self.factory = factory
        self.meta = meta
        self.metrics = metrics
        self.autorecovery = None            # the AutoRecoveryDaemon when autoRecoveryDaemonEnabled
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
            body = json.loads(request.content.read() or b"{}")
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
            body = json.loads(request.content.read() or b"{}")
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


def build_site(ctx: AdminContext) -> server.Site:
    root = resource.Resource()
    root.putChild(b"heartbeat", HeartbeatResource(ctx))
    if ctx.metrics is not None:
        root.putChild(b"metrics", MetricsResource(registry=ctx.metrics.registry))
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
    site = server.Site(root)
    site.displayTracebacks = False
    return site


def start_http_server(reactor, conf, ctx: AdminContext):
    """Serve `ctx`'s endpoints on listeningInterface:httpServerPort; returns the listening port.

    The metrics in `ctx` are made and handed to the Bookie by their owner (bkfast.server); this module
    only exposes them."""
    interface = conf.get("listeningInterface") or "0.0.0.0"
    port = reactor.listenTCP(conf.get("httpServerPort"), build_site(ctx), interface=interface)
    bound = port.getHost()
    log.info("admin HTTP server listening on %s:%d", bound.host, bound.port)
    return port
