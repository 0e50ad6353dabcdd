"""BookieService: one bookie process built from a ServerConfiguration, started and stopped as a whole.

Owns the order of things. start(): log the configuration's unknown keys; bind the bookie port (and the
admin HTTP port) on the address `bkfast.ids.bookie_address` gives (listeningInterface's address; bookiePort=0
takes the port the kernel picks: the bookie id and so the cookie name it), so that a port in use stops the
bookie before anything is written anywhere; check that every journal, ledger and index dir can be created
and written (`check_dirs`: one error naming the key; a dir found full, read-only or forbidden later in
the start, writing a cookie or the new journal file, is one too: `dir_error`); connect to the metadata
service and check (or write) the cookies (with --no-metadata: check, or on a new bookie write, the cookie
files of the directories alone);
start the Bookie (journal replay) and the metadata driver the garbage collector asks (it shares the
bookie's ZooKeeper session); wait for an earlier session's registration of this bookie id to expire (a
restart after kill -9: up to twice zkTimeout); only then listen on the bound sockets (connections are
refused, at once, until the bookie serves: never accepted and left unanswered), create the metrics and hand
them to the Bookie, its Journal and the admin HTTP server, and register the advertised host in ZooKeeper.
stop() (reactor thread; a Deferred): stop accepting, let in-flight adds finish (up to DRAIN_TIMEOUT_S),
flush, close connections. close(), after stop() (or once the reactor
has stopped): unregister, end the ZooKeeper session, stop the Bookie (flush + checkpoint).
run() is the process's main: signal handlers (SIGTERM/SIGINT stop cleanly, also during start-up), start,
the "bookie listening on" line, the reactor, close, the exit code (1 after a fatal error);
request_stop() (any thread, signal handlers, a fatal error of the Bookie) is stop() then the reactor's.

Must never: parse flags, block the reactor thread on ZooKeeper (registration moves run in the reactor's
thread pool), or announce itself listening before it is registered.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkfast.conf import ServerConfiguration, log_unknown_keys
from bkfast.errors import ConfigurationError
from bkfast.ids import BookieAddress, bookie_address
from bkfast.stats import StatsProvider
from bkfast.threads import BOOKIE_IO, name_this_thread, thread_factory

from .metadata import EtcdMetadataSession, MetadataSession, open_metadata_session

if TYPE_CHECKING:
    from bkfast.bookie.bookie import Bookie
    from bkfast.http.metrics import BookieMetrics
    from bkfast.http.server import AdminContext
    from bkfast.meta.driver import MetadataDriver
    from bkfast.net.server import BookieServerFactory
    from bkfast.net.tls import ServerSecurity
    from bkfast.replication.daemon import AutoRecoveryDaemon

log = logging.getLogger(__name__)

__all__ = ["BookieService", "DRAIN_TIMEOUT_S", "check_dirs", "dir_error", "log_slow_gc", "tune_gc_for_serving"]

DRAIN_TIMEOUT_S = 10.0
SLOW_GC_LOG_S = 0.005


def bind_socket(host: str, port: int, key: str) -> socket.socket:
    """A TCP socket bound to host:port (port 0: the kernel picks one), not yet listening: it holds the port
    (a program listening there already makes this fail) while connections are still refused.

    ConfigurationError naming `key` (or listeningInterface) and what to do when the bind fails."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As Twisted's listeners: a restarted bookie binds past its old connections in TIME_WAIT. On Linux
        # the bind still fails when a socket listens on the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ConfigurationError(_bind_error(host, port, key, err)) from None
    sock.setblocking(False)
    return sock


def _bind_error(host: str, port: int, key: str, err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return (f"{key}: {host}:{port} is already in use (another bookie or program listens there); "
                f"stop it or set another {key}")
    if err.errno == errno.EADDRNOTAVAIL:
        return f"listeningInterface: {host} is not an address of this host; name a local interface or address"
    if err.errno == errno.EACCES:
        return f"{key}: no permission to bind {host}:{port} (ports below 1024 need privileges); set another {key}"
    return f"{key}: cannot bind {host}:{port}: {err.strerror or err}"


def check_dirs(conf: ServerConfiguration) -> None:
    """Create `current/` in every journal, ledger and index dir and check that this user may read and write
    it: ConfigurationError naming the key, the dir and the reason (a path under a regular file, no
    permission, a read-only file system) before anything is written to ZooKeeper or any dir."""
    for key, dirs in _dir_keys(conf):
        for d in dirs:
            current = Path(d) / "current"
            try:
                current.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                where = "" if err.filename in (None, str(current)) else f": {err.filename}"
                remedy = (f"remount it read-write or give {key} another directory" if err.errno == errno.EROFS
                          else f"give {key} a directory this user can create, read and write")
                raise ConfigurationError(f"{key}: cannot create {current} ({err.strerror}{where}); {remedy}") from None
            if not os.access(current, os.R_OK | os.W_OK | os.X_OK):
                if _read_only_fs(current):
                    raise ConfigurationError(f"{key}: {current} is on a read-only file system; remount it "
                                             f"read-write or give {key} another directory")
                raise ConfigurationError(
                    f"{key}: {current} is not readable and writable by this user (uid {os.getuid()}: no "
                    f"permission); fix its permissions or give {key} another directory")


def _dir_keys(conf: ServerConfiguration) -> list[tuple[str, list[str]]]:
    """(the key as the user set it, its dirs) for the journal, ledger and (when set) index dirs."""
    journal_key = "journalDirectories" if conf.is_set("journalDirectories") else "journalDirectory"
    groups = [(journal_key, conf.get("journalDirectories") or [conf.get("journalDirectory")]),
              ("ledgerDirectories", conf.get("ledgerDirectories"))]
    if conf.is_set("indexDirectories"):
        groups.append(("indexDirectories", conf.get("indexDirectories")))
    return groups


def dir_error(conf: ServerConfiguration, err: OSError) -> ConfigurationError | None:
    """An OSError on a file in a journal, ledger or index dir during the start (a cookie, a new journal) as
    one line naming the key, the dir and what to do; None when its file is in none of them.

    Only failures that stop the start come here: a ledger disk found full at restart starts the bookie
    read-only instead (bkfast.bookie), it raises nothing."""
    if not err.filename:
        return None
    path = os.path.abspath(os.fsdecode(err.filename))
    found = None
    for key, dirs in _dir_keys(conf):
        for d in dirs:
            top = os.path.abspath(d)
            if (path == top or path.startswith(top.rstrip(os.sep) + os.sep)) and (
                    found is None or len(top) > len(found[1])):
                found = (key, top)
    if found is None:
        return None
    key, top = found
    current = os.path.join(top, "current")
    reason = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return ConfigurationError(f"{key}: {current} is full ({reason}); free space or point {key} at another disk")
    if err.errno == errno.EROFS:
        return ConfigurationError(f"{key}: {current} is on a read-only file system; remount it read-write "
                                  f"or give {key} another directory")
    if err.errno in (errno.EACCES, errno.EPERM):
        return ConfigurationError(f"{key}: no permission to write {path} (uid {os.getuid()}); fix the "
                                  f"permissions of {current} or give {key} another directory")
    return ConfigurationError(f"{key}: cannot write {path} ({reason}); check {current} or give {key} "
                              "another directory")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def listen_on(reactor, sock: socket.socket, factory, key: str, backlog: int = 50):
    """Start listening on a socket of `bind_socket` and serve it with `factory`; the Twisted port. The
    socket object is closed here (the port owns a duplicate of it). `backlog`: the accept queue (the
    bookie port uses serverTcpBacklog, by default the system's maximum, as Java's netty server)."""
    host, port = sock.getsockname()[:2]
    try:
        sock.listen(backlog)
        return reactor.adoptStreamPort(sock.fileno(), sock.family, factory)
    except OSError as err:         # another socket bound the port with SO_REUSEADDR and listened first
        raise ConfigurationError(_bind_error(host, port, key, err)) from None
    finally:
        sock.close()


class BookieService:
    """A bookie process: metadata session, Bookie, listener, admin HTTP + metrics; see the module docstring."""

    def __init__(self, conf: ServerConfiguration, use_metadata: bool = True, reactor=None):
        if reactor is None:
            from twisted.internet import reactor
        self.conf = conf
        self.use_metadata = use_metadata
        self.reactor = reactor
        self.meta: MetadataSession | EtcdMetadataSession | None = None
        self.bookie_id: str | None = None
        self.bookie_address: BookieAddress | None = None    # bind host, advertised host, id (bkfast.ids)
        self._sockets: dict[str, socket.socket] = {}        # bound, not yet listening (see bind_socket)
        # Each part is None until start() built it (the Twisted ports are IListeningPort).
        self.driver: MetadataDriver | None = None
        self.bookie: Bookie | None = None
        self.factory: BookieServerFactory | None = None
        self.port: Any = None               # Twisted's IListeningPort (zope interfaces: not typed)
        self.address: Any = None            # the listening address (.host, .port) once started
        self.metrics: BookieMetrics | None = None
        self.http_port: Any = None
        self.stats = StatsProvider.from_conf(conf)
        self.stats_port: Any = None         # the Prometheus /metrics listener (prometheusStatsHttpPort)
        self.registered = False             # bookie_SERVER_STATUS: -1 until the registration is written
        self.admin: AdminContext | None = None
        self.security: ServerSecurity | None = None
        self.autorecovery: AutoRecoveryDaemon | None = None
        self.exit_code = 0
        self._stop_requested = False
        self._stopped = None

    # --- start ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start every part; the bookie serves (and is registered) when this returns.

        Call it before the reactor runs (run() does) or in the reactor thread; it blocks on ZooKeeper and
        on the journal replay."""
        conf, reactor = self.conf, self.reactor
        from bkfast.net.tls import ServerSecurity

        # TLS keys and the authorizer are read (and checked) before anything starts
        self.security = ServerSecurity.from_conf(conf)
        log_unknown_keys(conf)
        address = self._bind()
        try:
            check_dirs(conf)          # an unusable dir stops the start before ZooKeeper is touched
            bookie = self._check_cookies_and_start_bookie(address.bookie_id)
            if self.meta is not None:
                # The port is bound and not listening: a client is refused at once while this waits.
                self.meta.prepare_registration(address.bookie_id, address.host, conf.get("bookiePort"),
                                               tls=self.security is not None and self.security.tls is not None)
            factory = self._listen(bookie)
            self._start_metrics(bookie, factory)
            if conf.get("httpServerEnabled"):
                self._start_http(bookie, factory)
        finally:
            for sock in self._sockets.values():      # closed unless listening: a failed start frees its ports
                sock.close()
            self._sockets.clear()
        if self.meta is not None:
            self._register(self.meta, bookie, address.bookie_id)
            if conf.get("autoRecoveryDaemonEnabled"):
                self._start_autorecovery(address.bookie_id)
        bookie.add_shutdown_listener(lambda reason: reactor.callFromThread(self._fatal, reason))

    def _check_cookies_and_start_bookie(self, bookie_id: str) -> Bookie:
        """The cookies (written on a new bookie), then the Bookie (journal replay, a new journal file). A
        full, read-only or forbidden dir met on the way (a cookie or the new journal cannot be written) is a
        ConfigurationError naming its key (`dir_error`)."""
        conf = self.conf
        try:
            if self.use_metadata:
                self.meta = open_metadata_session(conf, stats=self.stats.logger("bookie").scope("bookie"))
                try:
                    self.meta.check_cookies(bookie_id)
                except BaseException:
                    self.meta.close()
                    self.meta = None
                    raise
            else:
                # Without ZooKeeper the cookie files alone guard the directories: a journal (or ledger)
                # dir removed or added since the last start is refused, naming it.
                from bkfast.meta import check_local_cookies

                check_local_cookies(conf, bookie_id)
                log.warning("running without a metadata service (--no-metadata): local cookie check only, "
                            "not registered")
            return self._start_bookie()
        except OSError as err:
            translated = dir_error(conf, err)
            if translated is None:
                raise
            raise translated from err

    def _bind(self) -> BookieAddress:
        """Bind the bookie port (and the HTTP port): the first thing that can fail because of another process,
        so it fails before a cookie or a registration is written. Sets the bookie's address and id."""
        conf = self.conf
        bind_host = bookie_address(conf).bind_host          # ConfigurationError: no such interface
        self._sockets["bookie"] = sock = bind_socket(bind_host, conf.get("bookiePort"), "bookiePort")
        if conf.get("bookiePort") == 0:
            conf.set("bookiePort", sock.getsockname()[1])   # the id, and so the cookie, name the real port
        try:
            if conf.get("httpServerEnabled"):
                http_host = conf.get("httpServerHost") or bind_host
                self._sockets["http"] = bind_socket(http_host, conf.get("httpServerPort"), "httpServerPort")
            if self.stats.serves_http and conf.get("prometheusStatsHttpEnable"):
                self._sockets["stats"] = bind_socket(conf.get("prometheusStatsHttpAddress"),
                                                     conf.get("prometheusStatsHttpPort"), "prometheusStatsHttpPort")
        except BaseException:
            for bound in self._sockets.values():
                bound.close()
            self._sockets.clear()
            raise
        self.bookie_address = address = bookie_address(conf)
        self.bookie_id = address.bookie_id
        return address

    def _start_bookie(self) -> Bookie:
        from bkfast.bookie.bookie import Bookie
        from bkfast.net.server import make_dispatcher

        reactor = self.reactor
        if self.meta is not None:
            # The garbage collector asks the metadata store which ledgers still exist (none are deleted
            # while it cannot answer). It shares the bookie's ZooKeeper session.
            from bkfast.meta.factory import open_metadata_driver

            driver = open_metadata_driver(self.conf.get("metadataServiceUri"), client=self.meta.zk, conf=self.conf)
            reactor.callWhenRunning(lambda: driver.start().addErrback(
                lambda f: log.error("metadata driver for garbage collection did not start: %s", f.value)))
            reactor.addSystemEventTrigger("before", "shutdown", driver.close)
            self.driver = driver
        self.bookie = bookie = Bookie(self.conf, dispatcher=make_dispatcher(reactor),
                                      ledger_exists_source=self.driver, stats=self.stats.logger())
        bookie.start()
        bookie.read_only = self.conf.get("forceReadOnlyBookie")
        return bookie

    def _listen(self, bookie: Bookie) -> BookieServerFactory:
        from bkfast.net.server import BookieServerFactory, ServerSettings

        self.factory = factory = BookieServerFactory(bookie, ServerSettings.from_conf(self.conf), self.reactor,
                                                     security=self.security)
        self.port = listen_on(self.reactor, self._sockets.pop("bookie"), factory, "bookiePort",
                              self.conf.listen_backlog)
        self.address = self.port.getHost()
        return factory

    def server_status(self) -> int:
        """bookie_SERVER_STATUS as Java's: 1 registered and writable, 0 read-only, -1 not registered."""
        if self.bookie is None or (self.meta is not None and not self.registered):
            return -1
        return 0 if self.bookie.read_only else 1

    def _start_metrics(self, bookie: Bookie, factory: BookieServerFactory) -> None:
        """bkfast's own metrics (BookieMetrics, `bkfast_*`) when anything serves metrics, the rollover of the
        latency windows, and the Prometheus /metrics port."""
        if not (self.stats.enabled or self.conf.get("httpServerEnabled")):
            return
        from twisted.internet import task

        from bkfast.http.metrics import BookieMetrics

        self.metrics = metrics = BookieMetrics(bookie, factory)
        self.stats.add_extra(metrics.registry)
        # The Bookie and its Journal report to bkfast's metrics through these hooks (None: one check per op).
        bookie.metrics = metrics
        if bookie.journal is not None:
            bookie.journal.sync_latency_observer = metrics.journal_sync_observe
        self.stats.logger("bookie").gauge("SERVER_STATUS", self.server_status)
        if self.stats.enabled:
            rollover = task.LoopingCall(self.stats.rollover)
            rollover.clock = self.reactor
            rollover.start(self.stats.rollover_seconds, now=False)
            self.reactor.addSystemEventTrigger("before", "shutdown",
                                               lambda: rollover.stop() if rollover.running else None)
        sock = self._sockets.pop("stats", None)
        if sock is not None:
            from bkfast.http.stats_endpoint import listen_stats

            self.stats_port = listen_stats(self.reactor, sock, self.stats)
            bound = self.stats_port.getHost()
            log.info("Prometheus metrics on http://%s:%d/metrics", bound.host, bound.port)

    def _start_http(self, bookie: Bookie, factory: BookieServerFactory) -> None:
        from bkfast.http.server import AdminContext, start_http_server

        self.admin = admin = AdminContext(bookie, factory, self.meta, self.metrics)
        admin.render_metrics = self.stats.text
        self.http_port = start_http_server(self.reactor, self.conf, admin, sock=self._sockets.pop("http"))

    def _register(self, meta: MetadataSession | EtcdMetadataSession, node: Bookie, bid: str) -> None:
        from twisted.internet import threads

        meta.register(node.read_only)
        self.registered = True

        def sync_registration(_read_only=None):
            # Run in a pool thread (the ZooKeeper move blocks). A move that fails while ZooKeeper is
            # unreachable (ConnectionLoss, an expired session) is tried again every second until the
            # registration matches the bookie's state, which may have changed again meanwhile.
            if self._stop_requested or self._stopped is not None:
                return
            wanted = node.read_only
            try:
                meta.sync_read_only(wanted)
            except Exception as exc:
                log.warning("bookie %s: could not re-register as %s (%r); retrying in 1 s", bid,
                            "read-only" if wanted else "writable", exc)
                self.reactor.callFromThread(self.reactor.callLater, 1.0, threads.deferToThread, sync_registration)

        node.add_state_listener(
            lambda read_only: self.reactor.callFromThread(threads.deferToThread, sync_registration))
        sync_registration()

    def _start_autorecovery(self, bookie_id: str) -> None:
        """AutoRecovery (auditor election + replication worker) in this process, copying to this bookie; it
        starts once the reactor runs and stops before the reactor does."""
        from twisted.internet import threads

        from bkfast.replication.daemon import AutoRecoveryDaemon

        daemon = AutoRecoveryDaemon(self.conf, bookie_id, local_bookie=bookie_id,
                                    stats=self.stats.logger("replication"))
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
        if self.stats_port is not None:
            self.stats_port.stopListening()
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

    def _wake_reactor_on_signals(self) -> None:
        """Make a signal wake the reactor wherever the kernel delivers it.

        Python runs handlers in the main thread, which sits in the reactor's epoll_wait; a signal taken
        by another thread (journal, flush, read pool: the kernel may pick any) only sets a flag, and an
        idle reactor never looked at it (a bookie ignored SIGTERM for 30 s). With a wakeup fd, the C
        handler also writes a byte to the reactor's waker, which wakes epoll_wait, and the handler runs.
        This is what Twisted does itself when it installs its signal handlers, which the bookie does not
        let it do (it handles SIGTERM itself)."""
        waker_fd = getattr(getattr(self.reactor, "waker", None), "o", None)
        if isinstance(waker_fd, int):
            signal.set_wakeup_fd(waker_fd, warn_on_full_buffer=False)
        else:
            log.warning("this reactor has no Unix waker: a signal may wait for the reactor's next event")

    def close(self) -> None:
        """After the reactor stopped: unregister and end the metadata session, then stop the Bookie."""
        if self.meta is not None:
            self.registered = False
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
        tune_gc_for_serving()
        signal.signal(signal.SIGTERM, lambda signum, frame: self.request_stop())
        signal.signal(signal.SIGINT, lambda signum, frame: self.request_stop())
        self._wake_reactor_on_signals()
        if early_signals:
            self.request_stop()
        bound = self.address
        # Only now say we are up: a supervisor may send SIGTERM the moment it reads this line.
        print(f"bookie listening on {bound.host}:{bound.port}", flush=True)
        # Threads the reactor starts later would otherwise inherit its OS name (bkfast.threads).
        self.reactor.getThreadPool().threadFactory = thread_factory("twisted-pool")
        name_this_thread(BOOKIE_IO)
        self.reactor.run(installSignalHandlers=False)
        signal.set_wakeup_fd(-1)
        self.close()
        if self.exit_code:
            log.error("bookie exited after a fatal error")
            return self.exit_code
        log.info("bookie exited cleanly")
        return 0


GC_THRESHOLDS = (50000, 50, 100)


def tune_gc_for_serving() -> None:
    """Once started: freeze what start-up made and collect less often (see the comment inside)."""
    # Cyclic-GC collections hold the GIL, so they stop the reactor and the journal thread. Under a
    # catch-up reader (bench/read_isolation.py: 2 GB cold ledger, writer at 20k adds/s, 2 cores) full
    # collections came every ~0.6 s and took 20-50 ms, walking the ~56,000 objects start-up made
    # (modules, classes, the bookie's long-lived objects): writer p99 23 ms against 3.5 ms alone. Frozen
    # (never walked again) and with a gen-0 threshold of 50,000 (as `bkfast bench ledger --gc-tuning`):
    # p99 6.3-7.0 ms. Every cache entry is bytes in dicts of ints, which the collector does not track,
    # so a larger gen-0 costs little.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


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
