"""`bkfast bookie`: run a bookie server (v2 + v3 protocols on one port).

Owns: building the ServerConfiguration (file < BK_* env < `-D key=value` < --port/--read-only), the
process-wide interpreter settings, the Bookie (journal replay on start), the Twisted listener, and a
clean shutdown on SIGTERM/SIGINT (stop accepting, let in-flight adds finish, flush + checkpoint, exit 0).

Metadata (as a Java bookie does, in this order): connect to ZooKeeper (`metadataServiceUri`), check the
cookies of every journal/ledger/index dir against ZooKeeper's (refuse to start on any difference, write
them on a new bookie), start the Bookie, listen, then register `available/<bookieId>` (or
`available/readonly/<bookieId>`). `--no-metadata` serves without any of this, for benchmarks and tests.
"""

from __future__ import annotations

import logging
import signal
import sys

import click

from bkfast.conf import ServerConfiguration
from bkfast.errors import ConfigurationError

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 10.0


class MetadataSession:
    """The bookie's ZooKeeper side: cookies before start, registration after listening, cleanup on stop."""

    def __init__(self, conf: ServerConfiguration):
        from bkfast.meta import metadata_from_conf
        from bkfast.meta.zk_client import make_zk_client

        self.conf = conf
        connect, self.root, _ = metadata_from_conf(conf)
        timeout_s = conf.get("zkTimeout") / 1000.0
        self.zk = make_zk_client(connect, timeout_s)   # reconnects within a second after an outage
        self.zk.start(timeout=max(timeout_s, 5.0))
        self.registration = None

    def check_cookies(self) -> str:
        from bkfast.meta import bookie_id, check_or_create_cookies

        bid = bookie_id(self.conf)
        check_or_create_cookies(self.zk, self.root, self.conf, bid)
        return bid

    def register(self, bid: str, host: str, port: int, read_only: bool) -> None:
        from bkfast.meta import BookieRegistration, bookie_service_info

        self.registration = BookieRegistration(self.zk, self.root, bid, bookie_service_info(host, port))
        self.registration.register(read_only=read_only)
        log.info("bookie %s registered under %s/available%s", bid, self.root, "/readonly" if read_only else "")

    def close(self) -> None:
        try:
            if self.registration is not None:
                self.registration.unregister()
        finally:
            self.zk.stop()
            self.zk.close()


def _free_port(host: str) -> int:
    # The bookie id (and so the cookie) names the port, and cookies are checked before listening.
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@click.command("bookie")
@click.option("--conf", "conf_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="bk_server.conf-style properties file (BookKeeper key names).")
@click.option("-D", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override one configuration key, e.g. -D journalDirectory=/data/j (repeatable). "
                   "Precedence: defaults < --conf file < BK_<key> env < -D < --port/--read-only.")
@click.option("--port", type=int, default=None, help="Listening port (overrides bookiePort).")
@click.option("--read-only", "read_only", is_flag=True, default=False,
              help="Start read-only (same as -D forceReadOnlyBookie=true): adds get EREADONLY unless "
                   "they are recovery / high-priority adds.")
@click.option("--no-metadata", "no_metadata", is_flag=True, default=False,
              help="Serve without ZooKeeper: no cookie check, no registration (benchmarks, tests). "
                   "Clients must be given this bookie's address directly.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True, help="Log level (DEBUG adds per-flush timings, slow journal batches, slow GC runs).")
def bookie(conf_path, overrides, port, read_only, no_metadata, log_level) -> None:
    """Run a bookie: journal replay, then serve v2 and v3 on listeningInterface:bookiePort."""
    values = {}
    for item in overrides:
        if "=" not in item:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="-D")
        key, value = item.split("=", 1)
        values[key.strip()] = value
    if port is not None:
        values["bookiePort"] = port
        if port == 0:
            values.setdefault("allowEphemeralPorts", "true")
    try:
        conf = ServerConfiguration.load(conf_path, values)
        conf.validate()
    except ConfigurationError as err:
        raise click.ClickException(str(err)) from err
    if read_only:
        conf.set("forceReadOnlyBookie", "true")
    logging.basicConfig(level=getattr(logging, log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level == "DEBUG":
        _log_slow_gc()
    from bkfast.errors import StorageCorruptionError
    from bkfast.meta import MetadataError

    try:
        code = run(conf, use_metadata=not no_metadata)
    except (ConfigurationError, MetadataError) as err:  # bad storage class, cookie mismatch, id in use
        raise click.ClickException(str(err)) from err
    except StorageCorruptionError as err:  # a corrupt RocksDB store: the message names it and what to do
        raise click.ClickException(str(err)) from err
    sys.exit(code)


def run(conf: ServerConfiguration, use_metadata: bool = True) -> int:
    # A busy second thread (journal, flush) holds the GIL for the default 5 ms switch interval;
    # measured: one-at-a-time add p50 went from 16 ms to 3.6 ms with a 0.5 ms interval.
    sys.setswitchinterval(0.0005)

    from twisted.internet import reactor, threads

    from bkfast.bookie.bookie import Bookie
    from bkfast.net.server import BookieServerFactory, make_dispatcher

    host = conf.get("listeningInterface") or "0.0.0.0"
    if conf.get("bookiePort") == 0:
        conf.set("bookiePort", _free_port(host))
    meta = None
    if use_metadata:
        meta = MetadataSession(conf)
        try:
            bid = meta.check_cookies()
        except BaseException:
            meta.close()
            raise
    else:
        log.warning("running without a metadata service (--no-metadata): no cookie check, not registered")
    # A SIGTERM during journal replay must not kill the process half-way: note it, finish starting,
    # then stop cleanly (the handlers below take over once the server is up).
    early_signals: list[int] = []

    def during_start(signum, frame):
        early_signals.append(signum)
        log.info("signal %d during start-up: the bookie stops as soon as it has started", signum)

    signal.signal(signal.SIGTERM, during_start)
    signal.signal(signal.SIGINT, during_start)
    driver = None
    if meta is not None:
        # The garbage collector asks the metadata store which ledgers still exist (none are deleted
        # while it cannot answer). It shares the bookie's ZooKeeper session.
        from bkfast.meta.zk_driver import ZkMetadataDriver

        driver = ZkMetadataDriver(conf.get("metadataServiceUri"), client=meta.zk, conf=conf)
        reactor.callWhenRunning(lambda: driver.start().addErrback(
            lambda f: log.error("metadata driver for garbage collection did not start: %s", f.value)))
        reactor.addSystemEventTrigger("before", "shutdown", driver.close)
    node = Bookie(conf, dispatcher=make_dispatcher(reactor), ledger_exists_source=driver)
    node.start()
    node.read_only = conf.get("forceReadOnlyBookie")
    factory = BookieServerFactory(node, conf, reactor)
    port = reactor.listenTCP(conf.get("bookiePort"), factory, backlog=conf.listen_backlog, interface=host)
    bound = port.getHost()
    http_port = admin = None
    if conf.get("httpServerEnabled"):
        from bkfast.http.server import start_http_server

        http_port, admin = start_http_server(reactor, conf, node, factory, meta)
    if meta is not None:
        advertised = conf.get("advertisedAddress") or bid.rsplit(":", 1)[0]
        meta.register(bid, advertised, bound.port, node.read_only)

        def sync_registration(_read_only=None):
            # Called from disk-checker, journal, flush or reactor threads; the ZooKeeper move blocks.
            registration = meta.registration
            if registration is not None and registration.read_only != node.read_only:
                registration.set_read_only(node.read_only)
                log.info("bookie %s re-registered as %s", bid, "read-only" if node.read_only else "writable")

        node.add_state_listener(lambda read_only: reactor.callFromThread(threads.deferToThread, sync_registration))
        sync_registration()
    exit_code = []

    def fatal_stop(reason):
        log.error("bookie shutting down: %s", reason)
        exit_code.append(1)
        shutdown(signal.SIGTERM, None)

    node.add_shutdown_listener(lambda reason: reactor.callFromThread(fatal_stop, reason))

    stopping = []

    def shutdown(signum, frame):
        if stopping:
            return
        stopping.append(signum)
        reactor.callFromThread(begin_stop)

    def begin_stop():
        log.info("stopping: no new connections, draining in-flight adds")
        if admin is not None:
            admin.shutting_down = True
        if http_port is not None:
            http_port.stopListening()
        d = port.stopListening()
        deadline = reactor.seconds() + DRAIN_TIMEOUT_S

        def wait_drained():
            if factory.pending_adds > 0 and reactor.seconds() < deadline:
                reactor.callLater(0.01, wait_drained)
                return
            factory.flush()
            for conn in list(factory.connections):
                conn.transport.loseConnection()
            reactor.callLater(0.05, reactor.stop)

        if d is not None:
            d.addBoth(lambda _: wait_drained())
        else:
            wait_drained()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if early_signals:
        shutdown(early_signals[0], None)
    # Only now say we are up: a supervisor may send SIGTERM the moment it reads this line.
    print(f"bookie listening on {bound.host}:{bound.port}", flush=True)
    reactor.run(installSignalHandlers=False)
    if meta is not None:
        meta.close()
    node.stop()
    if exit_code:
        log.error("bookie exited after a fatal error")
        return exit_code[0]
    log.info("bookie exited cleanly")
    return 0


SLOW_GC_LOG_S = 0.005


def _log_slow_gc() -> None:
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
