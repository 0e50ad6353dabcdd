"""BookieService: one bookie process built from a ServerConfiguration, started and stopped as a whole.

Owns the order of things. start(): choose the port (bookiePort=0 picks a free one: the bookie id and so
the cookie name the port), connect to the metadata service and check the cookies, start the Bookie
(journal replay), start the metadata driver the garbage collector asks (it shares the bookie's ZooKeeper
session), listen, create the metrics and hand them to the Bookie, its Journal and the admin HTTP server,
then register in ZooKeeper. stop() (reactor thread; a Deferred): stop accepting, let in-flight adds
finish (up to DRAIN_TIMEOUT_S), flush, close connections. close(), after stop() (or once the reactor
has stopped): unregister, end the ZooKeeper session, stop the Bookie (flush + checkpoint).
run() is the process's main: signal handlers (SIGTERM/SIGINT stop cleanly, also during start-up), start,
the "bookie listening on" line, the reactor, close, the exit code (1 after a fatal error);
request_stop() (any thread, signal handlers, a fatal error of the Bookie) is stop() then the reactor's.

Must never: parse flags, block the reactor thread on ZooKeeper (registration moves run in the reactor's
thread pool), or announce itself listening before it is registered.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys

from bkfast.conf import ServerConfiguration

from .metadata import MetadataSession

log = logging.getLogger(__name__)

__all__ = ["BookieService", "DRAIN_TIMEOUT_S", "log_slow_gc"]

DRAIN_TIMEOUT_S = 10.0
SLOW_GC_LOG_S = 0.005


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BookieService:
    """A bookie process: metadata session, Bookie, listener, admin HTTP + metrics; see the module docstring."""

    def __init__(self, conf: ServerConfiguration, use_metadata: bool = True, reactor=None):
        if reactor is None:
            from twisted.internet import reactor
        self.conf = conf
        self.use_metadata = use_metadata
        self.reactor = reactor
        self.meta: MetadataSession | None = None
        self.bookie_id: str | None = None
        self.driver = None
        self.bookie = None
        self.factory = None
        self.port = None
        self.address = None                 # the listening address (.host, .port) once started
        self.metrics = None
        self.http_port = None
        self.admin = None
        self.autorecovery = None
        self.exit_code = 0
        self._stop_requested = False
        self._stopped = None

    # --- start ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start every part; the bookie serves (and is registered) when this returns.

        Call it before the reactor runs (run() does) or in the reactor thread; it blocks on ZooKeeper and
        on the journal replay."""
        conf, reactor = self.conf, self.reactor
        host = conf.get("listeningInterface") or "0.0.0.0"
        if conf.get("bookiePort") == 0:
            conf.set("bookiePort", _free_port(host))
        if self.use_metadata:
            self.meta = MetadataSession(conf)
            try:
                self.bookie_id = self.meta.check_cookies()
            except BaseException:
                self.meta.close()
                self.meta = None
                raise
        else:
            log.warning("running without a metadata service (--no-metadata): no cookie check, not registered")
        self._start_bookie()
        self._listen(host)
        if conf.get("httpServerEnabled"):
            self._start_http()
        if self.meta is not None:
            self._register()
            if conf.get("autoRecoveryDaemonEnabled"):
                self._start_autorecovery()
        self.bookie.add_shutdown_listener(lambda reason: reactor.callFromThread(self._fatal, reason))

    def _start_bookie(self) -> None:
        from bkfast.bookie.bookie import Bookie
        from bkfast.net.server import make_dispatcher

        reactor = self.reactor
        if self.meta is not None:
            # The garbage collector asks the metadata store which ledgers still exist (none are deleted
            # while it cannot answer). It shares the bookie's ZooKeeper session.
            from bkfast.meta.zk_driver import ZkMetadataDriver

            driver = ZkMetadataDriver(self.conf.get("metadataServiceUri"), client=self.meta.zk, conf=self.conf)
            reactor.callWhenRunning(lambda: driver.start().addErrback(
                lambda f: log.error("metadata driver for garbage collection did not start: %s", f.value)))
            reactor.addSystemEventTrigger("before", "shutdown", driver.close)
            self.driver = driver
        self.bookie = Bookie(self.conf, dispatcher=make_dispatcher(reactor), ledger_exists_source=self.driver)
        self.bookie.start()
        self.bookie.read_only = self.conf.get("forceReadOnlyBookie")

    def _listen(self, host: str) -> None:
        from bkfast.net.server import BookieServerFactory

        self.factory = BookieServerFactory(self.bookie, self.conf, self.reactor)
        self.port = self.reactor.listenTCP(self.conf.get("bookiePort"), self.factory, interface=host)
        self.address = self.port.getHost()

    def _start_http(self) -> None:
        from bkfast.http.metrics import BookieMetrics
        from bkfast.http.server import AdminContext, start_http_server

        self.metrics = BookieMetrics(self.bookie, self.factory)
        # The Bookie and its Journal report to the metrics through these hooks (None: one check per op).
        self.bookie.metrics = self.metrics
        if self.bookie.journal is not None:
            self.bookie.journal.sync_latency_observer = self.metrics.journal_sync_observe
        self.admin = AdminContext(self.bookie, self.factory, self.meta, self.metrics)
        self.http_port = start_http_server(self.reactor, self.conf, self.admin)

    def _register(self) -> None:
        from twisted.internet import threads

        meta, node, bid = self.meta, self.bookie, self.bookie_id
        advertised = self.conf.get("advertisedAddress") or bid.rsplit(":", 1)[0]
        meta.register(bid, advertised, self.address.port, node.read_only)

        def sync_registration(_read_only=None):
            # Called from disk-checker, journal, flush or reactor threads; the ZooKeeper move blocks.
            meta.sync_read_only(node.read_only)

        node.add_state_listener(
            lambda read_only: self.reactor.callFromThread(threads.deferToThread, sync_registration))
        sync_registration()

    def _start_autorecovery(self) -> None:
        """AutoRecovery (auditor election + replication worker) in this process, copying to this bookie; it
        starts once the reactor runs and stops before the reactor does."""
        from twisted.internet import threads

        from bkfast.replication.daemon import AutoRecoveryDaemon

        daemon = AutoRecoveryDaemon(self.conf, self.bookie_id, local_bookie=self.bookie_id)
        if self.metrics is not None:
            from bkfast.replication.stats import ReplicationCollector

            self.metrics.registry.register(ReplicationCollector(daemon.stats))
        if self.admin is not None:
            self.admin.autorecovery = daemon
        self.reactor.callWhenRunning(daemon.start)
        self.reactor.addSystemEventTrigger("before", "shutdown", lambda: threads.deferToThread(daemon.stop))
        self.autorecovery = daemon

    # --- stop -----------------------------------------------------------------------------------------
    def _fatal(self, reason) -> None:
        log.error("bookie shutting down: %s", reason)
        self.exit_code = 1
        self.request_stop()

    def request_stop(self) -> None:
        """Stop, then stop the reactor (once; from any thread or a signal handler): the process's end."""
        if self._stop_requested:
            return
        self._stop_requested = True
        self.reactor.callFromThread(lambda: self.stop().addBoth(lambda _: self.reactor.stop()))

    def stop(self):
        """In the reactor thread: stop accepting, drain in-flight adds (up to DRAIN_TIMEOUT_S), flush and
        close every connection. Returns a Deferred that fires when that is done (the same one every call)."""
        from twisted.internet import defer, task

        if self._stopped is not None:
            return self._stopped
        reactor, factory = self.reactor, self.factory
        self._stopped = stopped = defer.Deferred()
        log.info("stopping: no new connections, draining in-flight adds")
        if self.admin is not None:
            self.admin.shutting_down = True
        if self.http_port is not None:
            self.http_port.stopListening()
        d = self.port.stopListening()
        deadline = reactor.seconds() + DRAIN_TIMEOUT_S

        def wait_drained():
            if factory.pending_adds > 0 and reactor.seconds() < deadline:
                reactor.callLater(0.01, wait_drained)
                return
            factory.flush()
            for conn in list(factory.connections):
                conn.transport.loseConnection()
            # A moment for the closes to reach the sockets before the caller stops the reactor.
            task.deferLater(reactor, 0.05, lambda: None).chainDeferred(stopped)

        if d is not None:
            d.addBoth(lambda _: wait_drained())
        else:
            wait_drained()
        return stopped

    def close(self) -> None:
        """After the reactor stopped: unregister and end the metadata session, then stop the Bookie."""
        if self.meta is not None:
            self.meta.close()
        if self.bookie is not None:
            self.bookie.stop()

    # --- the process ------------------------------------------------------------------------------------
    def run(self) -> int:
        """The bookie process's main: start, serve until SIGTERM/SIGINT or a fatal error, close; exit code."""
        # A busy second thread (journal, flush) holds the GIL for the default 5 ms switch interval;
        # measured: one-at-a-time add p50 went from 16 ms to 3.6 ms with a 0.5 ms interval.
        sys.setswitchinterval(0.0005)
        # A SIGTERM during journal replay must not kill the process half-way: note it, finish starting,
        # then stop cleanly.
        early_signals: list[int] = []

        def during_start(signum, frame):
            early_signals.append(signum)
            log.info("signal %d during start-up: the bookie stops as soon as it has started", signum)

        signal.signal(signal.SIGTERM, during_start)
        signal.signal(signal.SIGINT, during_start)
        self.start()
        signal.signal(signal.SIGTERM, lambda signum, frame: self.request_stop())
        signal.signal(signal.SIGINT, lambda signum, frame: self.request_stop())
        if early_signals:
            self.request_stop()
        bound = self.address
        # Only now say we are up: a supervisor may send SIGTERM the moment it reads this line.
        print(f"bookie listening on {bound.host}:{bound.port}", flush=True)
        self.reactor.run(installSignalHandlers=False)
        self.close()
        if self.exit_code:
            log.error("bookie exited after a fatal error")
            return self.exit_code
        log.info("bookie exited cleanly")
        return 0


def log_slow_gc() -> None:
    """Log cyclic-GC collections slower than SLOW_GC_LOG_S (they hold the GIL: tail-latency diagnosis)."""
    import gc
    import time

    started = [0.0]
    gc_log = logging.getLogger("bkfast.gc")

    def callback(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
            return
        elapsed = time.perf_counter() - started[0]
        if elapsed >= SLOW_GC_LOG_S:
            gc_log.debug("slow gc: generation %d, %.1f ms, collected %d; done at monotonic %.4f",
                         info["generation"], elapsed * 1e3, info["collected"], time.perf_counter())

    gc.callbacks.append(callback)
