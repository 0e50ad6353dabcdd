"""`bkfast shell`: BookKeeper's admin commands for cluster metadata (initnewcluster, metaformat,
bookieformat)."""

from __future__ import annotations

import contextlib

import click

from bkfast.conf import ServerConfiguration


def _options(f):
    f = click.option("--root", default=None,
                     help="Ledgers root path in ZooKeeper (default: from the conf, /ledgers)")(f)
    f = click.option("--zk-connect", "zk_connect", default=None, metavar="HOST:PORT[,...]",
                     help="ZooKeeper connect string; overrides metadataServiceUri/zkServers")(f)
    f = click.option("--conf", "conf_path", default=None, type=click.Path(exists=True, dir_okay=False),
                     help="bk_server.conf-style configuration file")(f)
    return f


def _load(conf_path, zk_connect, root):
    """-> (conf, connect string, root, layout)."""
    from bkfast.meta import MetadataError, metadata_from_conf

    try:
        conf = ServerConfiguration.load(conf_path)
        hosts, conf_root, layout = metadata_from_conf(conf)
    except (MetadataError, ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    return conf, (zk_connect or hosts), (root or conf_root), layout


@contextlib.contextmanager
def _zk(hosts: str, conf):
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    timeout = conf.get("zkTimeout") / 1000.0
    zk = KazooClient(hosts=hosts, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        zk.close()
        raise click.ClickException(f"cannot connect to ZooKeeper at {hosts}") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _run(fn):
    from bkfast.meta import MetadataError

    try:
        return fn()
    except MetadataError as e:
        raise click.ClickException(str(e)) from None


@click.group()
def shell() -> None:
    """Admin commands on cluster metadata (like BookKeeper's `bookkeeper shell`)."""


@shell.command()
@_options
@click.option("--layout", default=None, type=click.Choice(["flat", "hierarchical", "longhierarchical"]),
              help="Ledger layout (default: from metadataServiceUri, hierarchical)")
def initnewcluster(conf_path, zk_connect, root, layout):
    """Create the cluster's metadata in ZooKeeper; refuses if it exists."""
    from bkfast.meta import init_new_cluster

    conf, hosts, root, uri_layout = _load(conf_path, zk_connect, root)
    with _zk(hosts, conf) as zk:
        iid = _run(lambda: init_new_cluster(zk, root, layout or uri_layout))
    click.echo(f"initialized cluster at {hosts}{root} (instance id {iid})")


@shell.command()
@_options
@click.option("--force", is_flag=True, help="Wipe existing metadata")
def metaformat(conf_path, zk_connect, root, force):
    """Delete all metadata under the root and init a new cluster."""
    from bkfast.meta import format_metadata

    conf, hosts, root, uri_layout = _load(conf_path, zk_connect, root)
    with _zk(hosts, conf) as zk:
        existed = zk.exists(root) is not None
        iid = _run(lambda: format_metadata(zk, root, force, layout=None if existed else uri_layout))
    if existed:
        click.echo(f"deleted metadata under {hosts}{root}")
    click.echo(f"initialized cluster at {hosts}{root} (instance id {iid})")


@shell.command()
@_options
@click.option("--force", is_flag=True, help="Wipe a bookie that holds data")
def bookieformat(conf_path, zk_connect, root, force):
    """Wipe this bookie's journal/ledger/index directories and delete its cookie in ZooKeeper."""
    from bkfast.meta import bookie_id, format_bookie

    conf, hosts, root, _layout = _load(conf_path, zk_connect, root)
    bid = bookie_id(conf)
    with _zk(hosts, conf) as zk:
        actions = _run(lambda: format_bookie(zk, root, conf, bid, force))
    for a in actions:
        click.echo(a)
    click.echo(f"formatted bookie {bid}")
