"""The cluster commands of `bkfast.admin.cluster` on an etcd metadata store (``etcd://host:port/<scope>``): the
same answers, from Java's etcd keys (bkfast.meta.etcd_layout) instead of ZooKeeper's znodes.

Blocking etcd calls on a client the caller opened (`etcd_session_of`); nothing here prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from bkfast.errors import BKMetaStoreException
from bkfast.meta.etcd_cluster import init_new_etcd_cluster, nuke_etcd_cluster, read_etcd_instance_id
from bkfast.meta.etcd_kv import EtcdKV
from bkfast.meta.etcd_layout import EtcdKeys, check_etcd_layout, parse_etcd_uri
from bkfast.meta.registration import bookie_info_from_data

from .common import AdminError, confirm_nuke

__all__ = ["is_etcd_uri", "etcd_session_of", "require_etcd_cluster", "check_etcd_cluster", "init_cluster",
           "format_cluster", "nuke_cluster", "instance_id", "list_bookies", "cluster_info", "replication_of"]


def is_etcd_uri(uri: str) -> bool:
    return uri.split(":", 1)[0].lower() in ("etcd", "etcd+http", "etcd+https")


@contextlib.contextmanager
def etcd_session_of(uri: str, conf=None, timeout_s: float = 10.0) -> Iterator[tuple[EtcdKV, str]]:
    """(client, scope) of an etcd metadata URI, closed on exit; AdminError naming the endpoints when etcd
    does not answer."""
    from bkfast.meta.etcd_driver import etcd_client_from_conf

    try:
        kv = etcd_client_from_conf(uri, conf, timeout_s)
        kv.range(b"\0", None, timeout_s=timeout_s)           # one round trip: is anyone there?
    except BKMetaStoreException as err:
        raise AdminError(f"cannot reach etcd for {uri}: {err}") from None
    try:
        yield kv, parse_etcd_uri(uri).scope
    finally:
        kv.close()


def require_etcd_cluster(kv: EtcdKV, scope: str) -> None:
    """AdminError unless `scope` holds a cluster (its layout key, which every client reads first)."""
    layout = kv.get(EtcdKeys(scope).layout)
    if layout is None:
        raise AdminError(f"etcd {kv.describe()}{scope} is not a BookKeeper cluster: no layout key (check "
                         "--metadata-uri / metadataServiceUri, or create one with `bkfast shell initnewcluster`)")
    try:
        check_etcd_layout(layout.value, EtcdKeys(scope).layout.decode())
    except BKMetaStoreException as err:
        raise AdminError(str(err)) from None


def check_etcd_cluster(uri: str, conf=None, timeout_s: float = 10.0) -> None:
    """AdminError unless etcd answers and the URI's scope holds a cluster (one line, before a client's retries)."""
    with etcd_session_of(uri, conf, timeout_s) as (kv, scope):
        require_etcd_cluster(kv, scope)


def init_cluster(kv: EtcdKV, scope: str) -> dict:
    try:
        iid = init_new_etcd_cluster(kv, scope)
    except BKMetaStoreException as err:
        raise AdminError(str(err)) from None
    return {"root": scope, "instanceId": iid, "layout": "etcd"}


def format_cluster(kv: EtcdKV, scope: str, force: bool) -> dict:
    existed = kv.get(EtcdKeys(scope).root) is not None
    if existed and not force:
        raise AdminError(f"etcd scope {scope} already exists; pass --force to wipe it")
    if existed:
        _nuke(kv, scope)
    out = init_cluster(kv, scope)
    return {**out, "deleted": existed}


def _nuke(kv: EtcdKV, scope: str) -> int:
    try:
        return nuke_etcd_cluster(kv, scope)
    except BKMetaStoreException as err:
        raise AdminError(str(err)) from None


def nuke_cluster(kv: EtcdKV, scope: str, instance_id_given: str | None, force: bool) -> dict:
    """Delete every key of the scope; needs `force` or the cluster's instance id, as on ZooKeeper."""
    if kv.get(EtcdKeys(scope).root) is None:
        raise AdminError(f"nothing to nuke: etcd scope {scope} does not exist")
    confirm_nuke(scope, None if force else read_etcd_instance_id(kv, scope), instance_id_given, force)
    return {"root": scope, "deletedNodes": _nuke(kv, scope)}


def instance_id(kv: EtcdKV, scope: str) -> str:
    iid = read_etcd_instance_id(kv, scope)
    if iid is None:
        raise AdminError(f"no {EtcdKeys(scope).instance_id.decode()}: cluster not initialized "
                         "(run `bkfast shell initnewcluster`)")
    return iid


def _bookies_under(kv: EtcdKV, scope: str, read_only: bool) -> list[dict]:
    start, end = EtcdKeys.children(EtcdKeys(scope).bookies(read_only))
    out = []
    for found in kv.range(start, end)[0]:
        info = bookie_info_from_data(found.key[len(start):].decode(), found.value, read_only)
        if info is not None:
            out.append({"bookieId": info.bookie_id, "host": info.host, "port": info.port,
                        "readOnly": read_only, "properties": dict(info.properties)})
    return sorted(out, key=lambda row: row["bookieId"])


def list_bookies(kv: EtcdKV, scope: str, writable: bool = True, read_only: bool = True) -> list[dict]:
    """listbookies: the rows of `bkfast.admin.cluster.list_bookies`, writable ones first."""
    return (_bookies_under(kv, scope, False) if writable else []) + \
        (_bookies_under(kv, scope, True) if read_only else [])


@contextlib.contextmanager
def replication_of(kv: EtcdKV, scope: str) -> Iterator[tuple]:
    """(under-replication manager, auditor election observer) on a lease of this command's own."""
    from bkfast.meta.etcd_session import EtcdSession
    from bkfast.meta.etcd_underreplication import EtcdAuditorElection, EtcdUnderReplicationManager

    session = EtcdSession(kv, 10, name="etcd-admin-lease")
    urm = EtcdUnderReplicationManager(kv, EtcdKeys(scope), session)
    election = EtcdAuditorElection(kv, EtcdKeys(scope), session)
    try:
        yield urm, election
    finally:
        urm.close()
        election.close()
        session.close()


def cluster_info(kv: EtcdKV, scope: str) -> dict:
    """clusterinfo: the keys of `bkfast.admin.cluster.cluster_info`."""
    writable, read_only = _bookies_under(kv, scope, False), _bookies_under(kv, scope, True)
    with replication_of(kv, scope) as (urm, election):
        auditor = election.current_auditor()
        under = len(urm.list_marked())
        enabled = urm.is_enabled()
    start, end = EtcdKeys.children(EtcdKeys(scope).cookies_dir)
    known = {found.key[len(start):].decode() for found in kv.range(start, end, keys_only=True)[0]}
    registered = {b["bookieId"] for b in writable + read_only}
    return {
        "instanceId": instance_id(kv, scope),
        "layout": "etcd",
        "auditorElected": auditor is not None,
        "auditorId": auditor or "",
        "clusterUnderReplicated": under > 0,
        "underReplicatedLedgers": under,
        "ledgerReplicationEnabled": enabled,
        "totalBookiesCount": len(writable) + len(read_only),
        "writableBookiesCount": len(writable),
        "readonlyBookiesCount": len(read_only),
        "unavailableBookiesCount": len(known - registered),
        "bookies": [b["bookieId"] for b in writable + read_only],
    }
