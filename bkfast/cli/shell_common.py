"""What every `bkfast shell` command shares: the option set (--conf, --metadata-uri, --zk-connect, --root,
--verbose), the configuration and metadata URI they resolve to, the types of the ids an operator types
(a malformed one is a one-line error, exit 1), one-line errors (exit 1; 2 for usage) with the traceback only
under --verbose, JSON output, progress bars on a terminal only, and the ZooKeeper session / client of a
command, which refuse a root that is not a BookKeeper cluster. Commands stay thin: they call bkfast.admin
and print."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import TypeVar

import click

from bkfast.admin.cluster import require_cluster
from bkfast.admin.common import (
    OPERATOR_ERRORS,
    AdminError,
    check_bookie_id,
    ledger_ref,
    parse_id,
    zk_session,
    zk_target,
)
from bkfast.conf import ServerConfiguration, log_unknown_keys
from bkfast.ids import MAX_ENTRY_ID, MAX_LEDGER_ID, MAX_SCOPE_ID

__all__ = ["common_options", "ledger_options", "json_option", "Target", "emit", "progress", "zk_of", "on_zk",
           "is_etcd", "etcd_of", "replication_of", "cookie_store_of",
           "client_of", "ref_of", "BOOKIE_ID", "BOOKIE_IDS", "LEDGER_ID", "SCOPE_ID", "ENTRY_ID", "LAST_ENTRY_ID"]

T = TypeVar("T")


class Target:
    """The configuration and metadata URI a command works on."""

    def __init__(self, conf: ServerConfiguration, metadata_uri: str, verbose: bool):
        self.conf = conf
        self.metadata_uri = metadata_uri
        self.verbose = verbose

    @property
    def zk_timeout_s(self) -> float:
        return self.conf.get("zkTimeout") / 1000.0


def _target(conf_path, metadata_uri, zk_connect, root, verbose) -> Target:
    if metadata_uri and (zk_connect or root):
        raise click.UsageError("give --metadata-uri or --zk-connect/--root, not both")
    conf = ServerConfiguration.load(conf_path)
    log_unknown_keys(conf)
    if metadata_uri:
        uri = metadata_uri
    elif zk_connect or root:
        from bkfast.meta import metadata_from_conf

        hosts, conf_root, layout = metadata_from_conf(conf)
        uri = f"zk+{layout}://{(zk_connect or hosts).replace(',', ';')}{root or conf_root}"
    else:
        uri = conf.get("metadataServiceUri")
    return Target(conf, uri, verbose)


def _one_line(err: BaseException) -> str:
    text = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    return text or type(err).__name__


def common_options(f):
    """--conf, --metadata-uri, --zk-connect, --root and --verbose; the command gets `target: Target` and its
    operator errors become one line (exit 1)."""

    @functools.wraps(f)
    def wrapper(conf_path, metadata_uri, zk_connect, root, verbose, **kwargs):
        logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
        try:
            target = _target(conf_path, metadata_uri, zk_connect, root, verbose)
            return f(target=target, **kwargs)
        except click.ClickException:
            raise
        except OPERATOR_ERRORS as err:
            if verbose:
                traceback.print_exc(file=sys.stderr)
            raise click.ClickException(_one_line(err)) from None

    wrapper = click.option("-v", "--verbose", is_flag=True, help="Log progress and show the traceback of an "
                           "error")(wrapper)
    wrapper = click.option("--root", default=None, help="Ledgers root path in ZooKeeper (with --zk-connect; "
                           "default: from the conf, /ledgers)")(wrapper)
    wrapper = click.option("--zk-connect", "zk_connect", default=None, metavar="HOST:PORT[,...]",
                           help="ZooKeeper connect string (instead of --metadata-uri)")(wrapper)
    wrapper = click.option("--metadata-uri", "metadata_uri", default=None, metavar="URI",
                           help="Metadata service URI, e.g. zk+hierarchical://127.0.0.1:2181/ledgers "
                           "(default: metadataServiceUri of --conf)")(wrapper)
    wrapper = click.option("--conf", "conf_path", default=None, type=click.Path(exists=True, dir_okay=False),
                           help="bk_server.conf-style configuration file")(wrapper)
    return wrapper


class _Checked(click.ParamType):
    """A value checked by a bkfast.admin.common check; a malformed one is the check's one line (exit 1), not
    click's usage text, and never reaches ZooKeeper as a path part."""

    def __init__(self, name: str, check):
        self.name = name
        self._check = check

    def convert(self, value, param, ctx):
        if not isinstance(value, str):          # a default, already a value
            return value
        try:
            return self._check(value)
        except AdminError as err:
            raise click.ClickException(str(err)) from None


def _bookie_ids(text: str) -> list[str]:
    ids = [check_bookie_id(part.strip()) for part in text.split(",") if part.strip()]
    if not ids:
        raise AdminError(f"no bookie id in {text!r}: give BOOKIE_ID[,BOOKIE_ID...]")
    return ids


BOOKIE_ID = _Checked("bookie_id", check_bookie_id)
BOOKIE_IDS = _Checked("bookie_ids", _bookie_ids)
LEDGER_ID = _Checked("ledger_id", lambda t: parse_id(t, "ledger id", MAX_LEDGER_ID))
SCOPE_ID = _Checked("scope_id", lambda t: parse_id(t, "ledger scope id", MAX_SCOPE_ID))
ENTRY_ID = _Checked("entry_id", lambda t: parse_id(t, "entry id", MAX_ENTRY_ID))
LAST_ENTRY_ID = _Checked("entry_id", lambda t: parse_id(t, "entry id", MAX_ENTRY_ID, low=-1))


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text")(f)


def ledger_options(f):
    """LEDGER_ID argument (optional) plus --ledger-scope-id / --ledger-qualified-name (BP-34)."""
    f = click.option("--ledger-qualified-name", "qualified_name", default=None, metavar="HEX32",
                     help="Ledger as 32 hex digits (scope then id), instead of LEDGER_ID")(f)
    f = click.option("--ledger-scope-id", "scope_id", type=SCOPE_ID, default=None,
                     help="Scope of LEDGER_ID (default 0, BookKeeper's ids)")(f)
    return click.argument("ledger_id", type=LEDGER_ID, required=False)(f)


def ref_of(ledger_id, scope_id, qualified_name):
    try:
        return ledger_ref(ledger_id, scope_id, qualified_name)
    except AdminError as err:
        raise click.UsageError(str(err)) from None


def emit(data, as_json: bool, text=None) -> None:
    """Print `data` as JSON, or as `text(data)` lines (str or iterable of str)."""
    if as_json or text is None:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=_json_default))
        return
    out = text(data)
    if isinstance(out, str):
        click.echo(out)
    else:
        for line in out:
            click.echo(line)


def _json_default(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@contextlib.contextmanager
def progress(label: str, enabled: bool = True) -> Iterator:
    """A progress(done, total) callback drawing a rich bar on stderr when both stdout and stderr are a
    terminal; otherwise (piped, --json, tests) a callback that does nothing."""
    if not (enabled and sys.stdout.isatty() and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextlib.contextmanager
def zk_of(target: Target, cluster: bool = True) -> Iterator[tuple]:
    """(kazoo client, ledgers root, layout) for ZooKeeper-side commands; with `cluster`, only once the root
    is a BookKeeper cluster (the commands that create or wipe one pass False)."""
    hosts, root, layout = zk_target(target.metadata_uri)
    with zk_session(hosts, target.zk_timeout_s) as zk:
        if cluster:
            require_cluster(zk, root, hosts)
        yield zk, root, layout


def is_etcd(target: Target) -> bool:
    from bkfast.admin.etcd_admin import is_etcd_uri

    return is_etcd_uri(target.metadata_uri)


@contextlib.contextmanager
def etcd_of(target: Target, cluster: bool = True) -> Iterator[tuple]:
    """(etcd client, scope) for the cluster commands on an etcd store; with `cluster`, only once the scope
    holds a BookKeeper cluster."""
    from bkfast.admin.etcd_admin import etcd_session_of, require_etcd_cluster

    with etcd_session_of(target.metadata_uri, target.conf, target.zk_timeout_s) as (kv, scope):
        if cluster:
            require_etcd_cluster(kv, scope)
        yield kv, scope


@contextlib.contextmanager
def replication_of(target: Target) -> Iterator[tuple]:
    """(under-replication manager, auditor election observer) on the target's store, ZooKeeper or etcd."""
    if is_etcd(target):
        from bkfast.admin.etcd_admin import replication_of as etcd_replication_of

        with etcd_of(target) as (kv, scope), etcd_replication_of(kv, scope) as both:
            yield both
        return
    from bkfast.meta.zk_election import ZkAuditorElection
    from bkfast.meta.zk_underreplication import ZkUnderReplicationManager

    with zk_of(target) as (zk, root, _layout):
        yield ZkUnderReplicationManager(zk, root), ZkAuditorElection(zk, root)


@contextlib.contextmanager
def cookie_store_of(target: Target) -> Iterator:
    """The cookies of the target's cluster (bkfast.meta.cookies.CookieStore), ZooKeeper or etcd."""
    if is_etcd(target):
        from bkfast.meta.etcd_cluster import EtcdCookieStore

        with etcd_of(target) as (kv, scope):
            yield EtcdCookieStore(kv, scope)
        return
    from bkfast.meta.cookies import ZkCookieStore

    with zk_of(target) as (zk, root, _layout):
        yield ZkCookieStore(zk, root)


def on_zk(target: Target, operation: Callable[..., T], *args, **kwargs) -> T:
    """`operation(zk, root, *args, **kwargs)`, one admin operation on the target's cluster, on a session of
    its own (the commands that are nothing more)."""
    with zk_of(target) as (zk, root, _layout):
        return operation(zk, root, *args, **kwargs)


@contextlib.contextmanager
def client_of(target: Target, timeout_s: float = 60.0, **settings) -> Iterator:
    """A blocking ledger client on the target's metadata URI (client keys in `settings`), closed on exit."""
    from bkfast import BookKeeper

    if target.metadata_uri.lower().startswith("embedded:"):
        zk_target(target.metadata_uri)           # the one-line refusal: embedded metadata serves one process
    if is_etcd(target):
        from bkfast.admin.etcd_admin import check_etcd_cluster

        check_etcd_cluster(target.metadata_uri, target.conf, target.zk_timeout_s)
    if target.metadata_uri.lower().startswith(("zk:", "zk+")):
        # Fail in one line before the client's retries: the store must be reachable and hold a cluster.
        hosts, root, _layout = zk_target(target.metadata_uri)
        with zk_session(hosts, target.zk_timeout_s) as zk:
            require_cluster(zk, root, hosts)
    bk = BookKeeper(target.metadata_uri, timeout=timeout_s, **settings)
    try:
        yield bk
    finally:
        bk.close()
