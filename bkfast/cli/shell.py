"""`bkfast shell`: BookKeeper's admin commands with its names — the cluster commands here, the ledger
commands in shell_ledgers, a bookie's own files and cookies in shell_bookie, the bookie rack table and the
placement check in shell_racks. Every command takes --conf / --metadata-uri, prints one line on an
operator's mistake (exit 1; 2 for usage) and `--json` where it prints data. Every command but
initnewcluster, metaformat and nukeexistingcluster refuses a root that is not a BookKeeper cluster. The work
is done by bkfast.admin; this module only parses options and prints."""

from __future__ import annotations

import click

from bkfast.admin import cluster as admin_cluster
from bkfast.admin import etcd_admin

from .shell_common import common_options, emit, etcd_of, is_etcd, json_option, on_zk, progress, zk_of


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def shell() -> None:
    """Admin commands (like BookKeeper's `bookkeeper shell`); `bkfast shell COMMAND --help` for each."""


_LAYOUTS = click.Choice(["flat", "hierarchical", "longhierarchical"])


@shell.command()
@common_options
@click.option("--layout", default=None, type=_LAYOUTS,
              help="Ledger layout (default: from the metadata URI, hierarchical)")
@json_option
def initnewcluster(target, layout, as_json):
    """Create the cluster's metadata in ZooKeeper or etcd; refuses if it exists."""
    if is_etcd(target):
        with etcd_of(target, cluster=False) as (kv, scope):
            out = etcd_admin.init_cluster(kv, scope)
    else:
        with zk_of(target, cluster=False) as (zk, root, uri_layout):
            out = admin_cluster.init_cluster(zk, root, layout or uri_layout)
    hosts = _hosts(target)
    emit(out, as_json, lambda o: f"initialized cluster at {hosts}{o['root']} (instance id {o['instanceId']})")


def _hosts(target) -> str:
    from bkfast.admin.common import zk_target

    if is_etcd(target):
        from bkfast.meta.etcd_layout import parse_etcd_uri

        return ",".join(f"{h}:{p}" for h, p in parse_etcd_uri(target.metadata_uri).endpoints)

    return zk_target(target.metadata_uri)[0]


@shell.command()
@common_options
@click.option("--force", is_flag=True, help="Wipe existing metadata")
@json_option
def metaformat(target, force, as_json):
    """Delete all metadata under the ledgers root and initialize a new cluster."""
    if is_etcd(target):
        with etcd_of(target, cluster=False) as (kv, scope):
            out = etcd_admin.format_cluster(kv, scope, force)
    else:
        with zk_of(target, cluster=False) as (zk, root, uri_layout):
            out = admin_cluster.format_cluster(zk, root, force, uri_layout)
    hosts = _hosts(target)

    def text(o):
        if o["deleted"]:
            yield f"deleted metadata under {hosts}{o['root']}"
        yield f"initialized cluster at {hosts}{o['root']} (instance id {o['instanceId']})"

    emit(out, as_json, text)


@shell.command()
@common_options
@click.option("--instance-id", "instance_id", default=None, help="The cluster's instance id (see whatisinstanceid)")
@click.option("--force", is_flag=True, help="Delete without checking the instance id")
@json_option
def nukeexistingcluster(target, instance_id, force, as_json):
    """Delete the whole cluster's metadata (every ledger, cookie and registration) under the root."""
    # A half-made cluster (INSTANCEID, no LAYOUT yet) is one nuke must still be able to delete.
    if is_etcd(target):
        with etcd_of(target, cluster=False) as (kv, scope):
            out = etcd_admin.nuke_cluster(kv, scope, instance_id, force)
    else:
        with zk_of(target, cluster=False) as (zk, root, _layout), progress("deleting znodes", not as_json) as bar:
            out = admin_cluster.nuke_cluster(zk, root, instance_id, force, bar)
    emit(out, as_json, lambda o: f"deleted {o['root']} ({o['deletedNodes']} znodes)")


@shell.command()
@common_options
@json_option
def whatisinstanceid(target, as_json):
    """Print the cluster's instance id."""
    emit({"instanceId": _on_store(target, admin_cluster.instance_id, etcd_admin.instance_id)}, as_json,
         lambda o: o["instanceId"])


@shell.command()
@common_options
@click.option("--readwrite", "-rw", "readwrite", is_flag=True, help="Only writable bookies")
@click.option("--readonly", "-ro", "readonly", is_flag=True, help="Only read-only bookies")
@json_option
def listbookies(target, readwrite, readonly, as_json):
    """List the registered bookies (writable and read-only unless one is asked for)."""
    if readwrite and readonly:
        raise click.UsageError("give --readwrite or --readonly, not both")
    out = _on_store(target, admin_cluster.list_bookies, etcd_admin.list_bookies, writable=not readonly,
                    read_only=not readwrite)
    emit(out, as_json, lambda rows: [f"{r['bookieId']}\t{r['host']}:{r['port']}\t"
                                     f"{'read-only' if r['readOnly'] else 'writable'}" for r in rows])


def _size(n: int) -> str:
    scaled = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if scaled < 1024 or unit == "TiB":
            return f"{scaled:.1f} {unit}" if unit != "B" else f"{n} B"
        scaled /= 1024
    return str(n)


@shell.command()
@common_options
@json_option
def bookieinfo(target, as_json):
    """Per registered bookie: state and disk usage (as the bookie reports it)."""
    from .shell_common import client_of

    with client_of(target) as bk:
        out = admin_cluster.bookie_info(bk, _on_store(target, admin_cluster.list_bookies, etcd_admin.list_bookies))

    def text(rows):
        for r in rows:
            if "error" in r:
                yield f"{r['bookieId']}\t{r['state']}\tno answer: {r['error']}"
            else:
                yield (f"{r['bookieId']}\t{r['state']}\tfree {_size(r['freeDiskSpace'])}\t"
                       f"total {_size(r['totalDiskSpace'])}")

    emit(out, as_json, text)


@shell.command()
@common_options
@json_option
def clusterinfo(target, as_json):
    """Bookie counts, the auditor, under-replicated ledgers and the instance id."""
    emit(_on_store(target, admin_cluster.cluster_info, etcd_admin.cluster_info), as_json,
         lambda o: [f"{k}: {v}" for k, v in o.items()])


def _on_store(target, on_zookeeper, on_etcd, *args, **kwargs):
    """`on_etcd(kv, scope, ...)` on an etcd store, else `on_zookeeper(zk, root, ...)`."""
    if is_etcd(target):
        with etcd_of(target) as (kv, scope):
            return on_etcd(kv, scope, *args, **kwargs)
    return on_zk(target, on_zookeeper, *args, **kwargs)


def _register() -> None:
    from . import shell_bookie, shell_ledgers, shell_racks, shell_recovery

    for module in (shell_ledgers, shell_bookie, shell_recovery, shell_racks):
        for command in module.COMMANDS:
            shell.add_command(command)


_register()
