"""`bkfast autorecovery`: AutoRecovery (auditor election + replication worker) as its own process, like Java's
`bookkeeper autorecovery`. Owns the command line and the process's stats: a StatsProvider from the conf
(statsProviderClass, as a bookie's) whose Java series (`auditor_*`, `replication_worker_*`,
`bookkeeper_client_*`: no `replication_` scope, as Java's stand-alone AutoRecovery) and bkfast's
`bkfast_replication_*` are served at /metrics on prometheusStatsHttpAddress:prometheusStatsHttpPort, with the
latency windows rolled over every prometheusStatsLatencyRolloverSeconds. The work is
bkfast.replication.daemon. SIGTERM/SIGINT stop it cleanly."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click

from bkfast.cli.bookie import overrides_of
from bkfast.conf import ServerConfiguration
from bkfast.errors import ConfigurationError


@click.command("autorecovery")
@click.option("--conf", "conf_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="bk_server.conf-style properties file (BookKeeper key names).")
@click.option("-D", "overrides", multiple=True, metavar="KEY=VALUE", help="Override one configuration key.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True)
def autorecovery(conf_path, overrides, log_level) -> None:
    """Run the auditor election and a replication worker until SIGTERM."""
    values = overrides_of(overrides)
    try:
        conf = ServerConfiguration.load(conf_path, values)
        conf.validate()
    except ConfigurationError as err:
        raise click.ClickException(str(err)) from err
    logging.basicConfig(level=getattr(logging, log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from bkfast.meta.registration import bookie_id
    from bkfast.reactor import start_reactor_thread
    from bkfast.replication.daemon import AutoRecoveryDaemon
    from bkfast.stats import StatsProvider

    provider = StatsProvider.from_conf(conf)
    sock = _bind_stats(conf, provider)
    start_reactor_thread()
    daemon = AutoRecoveryDaemon(conf, bookie_id(conf), stats=provider.logger())
    _serve_stats(provider, sock, daemon)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    daemon.start()
    print(f"autorecovery running as {daemon.bookie_id}", flush=True)
    while not stop.wait(0.5):
        pass
    daemon.stop()


def _bind_stats(conf, provider):
    """The Prometheus port, bound before anything starts (a port in use fails the command at once)."""
    if not (provider.serves_http and conf.get("prometheusStatsHttpEnable")):
        return None
    from bkfast.server.service import bind_socket

    try:
        return bind_socket(conf.get("prometheusStatsHttpAddress"), conf.get("prometheusStatsHttpPort"),
                           "prometheusStatsHttpPort")
    except ConfigurationError as err:
        raise click.ClickException(str(err)) from err


def _serve_stats(provider, sock, daemon) -> None:
    """In the reactor: bkfast's replication counters beside Java's, the latency rollover, and /metrics on
    `sock` (as a bookie's BookieService._start_metrics)."""
    if not provider.enabled:
        return
    from prometheus_client import CollectorRegistry

    from bkfast.reactor import call
    from bkfast.replication.stats import ReplicationCollector

    extra = CollectorRegistry(auto_describe=False)
    extra.register(ReplicationCollector(daemon.stats))
    provider.add_extra(extra)

    def start() -> None:
        from twisted.internet import reactor, task

        rollover = task.LoopingCall(provider.rollover)
        rollover.start(provider.rollover_seconds, now=False)
        if sock is not None:
            from bkfast.http.stats_endpoint import listen_stats

            bound = listen_stats(reactor, sock, provider).getHost()
            logging.getLogger(__name__).info("Prometheus metrics on http://%s:%d/metrics", bound.host, bound.port)

    call(start, timeout=30)
