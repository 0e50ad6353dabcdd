"""Cluster-wide operations on ZooKeeper metadata and the registered bookies (BookKeeper's cluster commands).

Blocking kazoo calls on a client the caller started (`common.zk_session`); `bookie_info` asks each bookie
through the ledger client. Nothing here prints.
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from bkfast.meta import (
    format_metadata,
    init_new_cluster,
    read_instance_id,
    read_layout,
    zk_path,
)
from bkfast.meta.registration import bookie_info_from_data
from bkfast.meta.zk_election import ZkAuditorElection
from bkfast.meta.zk_layout import AVAILABLE, COOKIES, LAYOUT, READONLY

from .common import AdminError, Progress, confirm_nuke, in_reactor

__all__ = ["init_cluster", "format_cluster", "nuke_cluster", "instance_id", "list_bookies", "bookie_info",
           "cluster_info", "require_cluster", "UNDERREPLICATION", "AUDITOR_ELECTION"]

UNDERREPLICATION = "underreplication"
AUDITOR_ELECTION = "auditorelection"
_UR_LEDGERS = "ledgers"
_UR_DISABLE = "disable"


def require_cluster(zk, root: str, hosts: str) -> None:
    """AdminError naming hosts + root unless `root` holds a BookKeeper cluster: its LAYOUT znode, written
    last by initnewcluster and read first by every client. Without this check a mistyped root reads as a
    healthy cluster: no disable znode (autorecovery "enabled"), no under-replicated ledgers, no auditor."""
    root = zk_path(root)
    if zk.exists(zk_path(root, LAYOUT)) is not None:
        return
    why = "it does not exist" if zk.exists(root) is None else f"it has no {LAYOUT} znode"
    raise AdminError(f"{hosts}{root} is not a BookKeeper cluster: {why} (check --metadata-uri / "
                     "metadataServiceUri, or create one there with `bkfast shell initnewcluster`)")


def init_cluster(zk, root: str, layout: str) -> dict:
    """initnewcluster: {"root", "instanceId", "layout"}; refuses when the root exists."""
    iid = init_new_cluster(zk, root, layout)
    return {"root": zk_path(root), "instanceId": iid, "layout": layout}


def format_cluster(zk, root: str, force: bool, layout: str) -> dict:
    """metaformat: wipe (only with `force`) and re-create; {"root", "deleted", "instanceId", "layout"}."""
    existed = zk.exists(zk_path(root)) is not None
    if existed:
        try:
            layout = read_layout(zk, root).name
        except Exception:       # a broken LAYOUT is exactly what metaformat is for
            pass
    iid = format_metadata(zk, root, force, layout=layout)
    return {"root": zk_path(root), "deleted": existed, "instanceId": iid, "layout": layout}


def _count_nodes(zk, path: str) -> int:
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return 0
    return 1 + sum(_count_nodes(zk, f"{path}/{c}") for c in children)


def _delete_tree(zk, path: str, done: list[int], total: int, progress: Progress | None) -> None:
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return
    for child in children:
        _delete_tree(zk, f"{path}/{child}", done, total, progress)
    try:
        zk.delete(path)
    except NoNodeError:
        pass
    done[0] += 1
    if progress is not None:
        progress(done[0], total)


def nuke_cluster(zk, root: str, instance_id_given: str | None, force: bool,
                 progress: Progress | None = None) -> dict:
    """nukeexistingcluster: delete everything under the ledgers root. Needs `force` or the cluster's
    instance id (so a typo in the root path cannot wipe another cluster). {"root", "deletedNodes"}."""
    root = zk_path(root)
    if zk.exists(root) is None:
        raise AdminError(f"nothing to nuke: {root} does not exist")
    confirm_nuke(root, None if force else read_instance_id(zk, root), instance_id_given, force)
    total = _count_nodes(zk, root)
    done = [0]
    _delete_tree(zk, root, done, total, progress)
    return {"root": root, "deletedNodes": done[0]}


def instance_id(zk, root: str) -> str:
    """whatisinstanceid."""
    iid = read_instance_id(zk, root)
    if iid is None:
        raise AdminError(f"no {zk_path(root, 'INSTANCEID')}: cluster not initialized "
                         "(run `bkfast shell initnewcluster`)")
    return iid


def _bookies_under(zk, root: str, read_only: bool) -> list[dict]:
    base = zk_path(root, AVAILABLE, READONLY) if read_only else zk_path(root, AVAILABLE)
    try:
        names = zk.get_children(base)
    except NoNodeError:
        raise AdminError(f"{base} does not exist: cluster not initialized "
                         "(run `bkfast shell initnewcluster`)") from None
    out = []
    for name in sorted(n for n in names if read_only or n != READONLY):
        try:
            data, _ = zk.get(f"{base}/{name}")
        except NoNodeError:
            continue
        info = bookie_info_from_data(name, data, read_only)
        if info is not None:
            out.append({"bookieId": info.bookie_id, "host": info.host, "port": info.port,
                        "readOnly": read_only, "properties": dict(info.properties)})
    return out


def list_bookies(zk, root: str, writable: bool = True, read_only: bool = True) -> list[dict]:
    """listbookies: [{"bookieId", "host", "port", "readOnly", "properties"}], writable ones first."""
    out = []
    if writable:
        out += _bookies_under(zk, root, False)
    if read_only:
        out += _bookies_under(zk, root, True)
    return out


def bookie_info(bk, bookies: list[dict], timeout_s: float = 10.0) -> list[dict]:
    """bookieinfo: per registered bookie (`list_bookies`' rows), its state and its disk space as the bookie
    reports it (GET_BOOKIE_INFO). A bookie that does not answer gets "error" instead of the sizes."""
    out = []
    client = bk.async_client.bookie_client
    for entry in bookies:
        row = {"bookieId": entry["bookieId"], "state": "read-only" if entry["readOnly"] else "writable"}
        try:
            free, total = in_reactor(timeout_s, client.get_bookie_info, entry["bookieId"])
            row.update({"freeDiskSpace": int(free), "totalDiskSpace": int(total),
                        "usedDiskSpace": int(total) - int(free)})
        except Exception as err:         # one bookie down must not hide the others
            row["error"] = f"{type(err).__name__}: {err}"
        out.append(row)
    return out


def _under_replicated_count(zk, root: str) -> int:
    base = zk_path(root, UNDERREPLICATION, _UR_LEDGERS)
    count, stack = 0, [base]
    while stack:
        path = stack.pop()
        try:
            children = zk.get_children(path)
        except NoNodeError:
            continue
        for child in children:
            if child.startswith("urL"):
                count += 1
            else:
                stack.append(f"{path}/{child}")
    return count


def cluster_info(zk, root: str) -> dict:
    """clusterinfo: bookie counts, the auditor, under-replication, instance id and layout."""
    writable = _bookies_under(zk, root, False)
    read_only = _bookies_under(zk, root, True)
    auditor = ZkAuditorElection(zk, root).current_auditor()
    under = _under_replicated_count(zk, root)
    try:
        known = set(zk.get_children(zk_path(root, COOKIES)))     # every bookie that ever joined
    except NoNodeError:
        known = set()
    registered = {b["bookieId"] for b in writable + read_only}
    return {
        "instanceId": instance_id(zk, root),
        "layout": read_layout(zk, root).name,
        "auditorElected": auditor is not None,
        "auditorId": auditor or "",
        "clusterUnderReplicated": under > 0,
        "underReplicatedLedgers": under,
        "ledgerReplicationEnabled": zk.exists(zk_path(root, UNDERREPLICATION, _UR_DISABLE)) is None,
        "totalBookiesCount": len(writable) + len(read_only),
        "writableBookiesCount": len(writable),
        "readonlyBookiesCount": len(read_only),
        "unavailableBookiesCount": len(known - registered),
        "bookies": [b["bookieId"] for b in writable + read_only],
    }
