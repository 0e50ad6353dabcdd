"""The Prometheus provider's own HTTP port (prometheusStatsHttpAddress:prometheusStatsHttpPort, Java's
default 0.0.0.0:8000): `/metrics` only, as Java's PrometheusServlet, and independent of the admin HTTP
server (`httpServerEnabled=false` still serves it, as a Pulsar bookkeeper.conf expects).

Each scrape renders in a pool thread admitted by a gate of its own (one at a time, a short queue), so a
flood of scrapes neither takes the reactor nor piles up threads.
"""

from __future__ import annotations

import socket

from twisted.web import resource, server

from bkfast.http.limits import AdmissionGate
from bkfast.http.server import MetricsResource
from bkfast.stats import StatsProvider

__all__ = ["listen_stats"]


def listen_stats(reactor, sock: socket.socket, provider: StatsProvider):
    """Serve provider.text() at /metrics on `sock` (bound, not yet listening); returns the listening port."""
    gate = AdmissionGate(reactor, concurrency=1, max_queued=16, busy_share=0.05)
    reactor.addSystemEventTrigger("before", "shutdown", gate.stop)
    root = resource.Resource()
    root.putChild(b"metrics", MetricsResource(provider.text, gate))
    site = server.Site(root)
    site.displayTracebacks = False
    try:
        sock.listen(128)
        return reactor.adoptStreamPort(sock.fileno(), sock.family, site)
    finally:
        sock.close()                # the port holds its own duplicate of the socket
