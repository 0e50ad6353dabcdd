"""`bkfast autorecovery`: AutoRecovery (auditor election + replication worker) as its own process, like Java's
`bookkeeper autorecovery`. Owns only the command line; the work is bkfast.replication.daemon. SIGTERM/SIGINT
stop it cleanly."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click

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
    values = {}
    for item in overrides:
        if "=" not in item:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="-D")
        key, value = item.split("=", 1)
        values[key.strip()] = value
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

    start_reactor_thread()
    daemon = AutoRecoveryDaemon(conf, bookie_id(conf))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    daemon.start()
    print(f"autorecovery running as {daemon.bookie_id}", flush=True)
    while not stop.wait(0.5):
        pass
    daemon.stop()
