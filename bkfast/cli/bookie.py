"""`bkfast bookie`: run a bookie server (v2 + v3 protocols on one port).

Owns only the command line: the flags, and the ServerConfiguration they build (file < BK_* env <
`-D key=value` < --port/--read-only), logging, and turning a user's mistake (bad configuration, cookie
mismatch, bookie id in use, a port in use, unusable dirs, no ZooKeeper, a cluster not initialized) into
one line on stderr and exit code 1 (2 for usage); `--verbose` adds the traceback. Everything the process
does is `bkfast.server.BookieService`: metadata (cookies, registration), the Bookie, the listener, the
admin HTTP server, signals and shutdown.
`--no-metadata` serves without ZooKeeper, for benchmarks and tests (it checks, and on a new bookie writes,
only the cookie files in its directories).
"""

from __future__ import annotations

import logging
import sys
import traceback

import click

from bkfast.conf import ServerConfiguration
from bkfast.errors import ConfigurationError, MetadataError, StorageCorruptionError


def overrides_of(items) -> dict[str, str]:
    """The -D KEY=VALUE options of a server command as configuration overrides."""
    values = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="-D")
        key, value = item.split("=", 1)
        values[key.strip()] = value
    return values


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
              help="Serve without ZooKeeper: cookie files in the directories only, no registration "
                   "(benchmarks, tests). "
                   "Clients must be given this bookie's address directly.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True, help="Log level (DEBUG adds per-flush timings, slow journal batches, slow GC runs).")
@click.option("-v", "--verbose", is_flag=True, default=False,
              help="Show the traceback of an error that stops the start.")
def bookie(conf_path, overrides, port, read_only, no_metadata, log_level, verbose) -> None:
    """Run a bookie: journal replay, then serve v2 and v3 on listeningInterface:bookiePort."""
    values = overrides_of(overrides)
    if port is not None:
        values["bookiePort"] = port
        if port == 0:
            values.setdefault("allowEphemeralPorts", "true")
    try:
        conf = ServerConfiguration.load(conf_path, values)
        conf.validate()
    except ConfigurationError as err:
        raise _one_line(err, verbose) from None
    if read_only:
        conf.set("forceReadOnlyBookie", "true")
    logging.basicConfig(level=getattr(logging, log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from bkfast.server import BookieService, log_slow_gc

    if log_level == "DEBUG":
        log_slow_gc()
    try:
        code = BookieService(conf, use_metadata=not no_metadata).run()
    # bad storage class, unusable dirs, cookie mismatch, id in use, port taken, no ZooKeeper, no cluster; a
    # corrupt RocksDB store (the message names it); an OSError names its file
    except (ConfigurationError, MetadataError, StorageCorruptionError, OSError) as err:
        raise _one_line(err, verbose) from None
    sys.exit(code)


def _one_line(err: BaseException, verbose: bool) -> click.ClickException:
    """The error as one line for stderr (exit 1); under --verbose its traceback is printed first."""
    if verbose:
        traceback.print_exception(err, file=sys.stderr)
    text = " ".join(str(err).split()) or type(err).__name__
    return click.ClickException(text)
