"""Operations on one bookie that touch its cookies or its running server: bookieformat, updatecookie
(BookKeeper's -bookieId / -expandstorage / -list / -delete) and bookiesanity (a ledger written to and read
from this bookie alone). The bookie is named by its configuration (`ids.bookie_address`)."""

from __future__ import annotations

import os
import time

from bkfast.ids import bookie_address
from bkfast.meta import (
    Cookie,
    cookie_for_conf,
    delete_zk_cookie,
    format_bookie,
    read_cookie_file,
    read_instance_id,
    read_zk_cookie,
    write_cookie_file,
    write_zk_cookie,
    zk_path,
)
from bkfast.meta.cookies import bookie_dirs
from bkfast.meta.zk_layout import AVAILABLE, READONLY

from .common import AdminError, in_reactor

__all__ = ["this_bookie_id", "bookie_format", "list_cookies", "update_cookie_bookie_id", "expand_storage",
           "delete_cookie", "bookie_sanity", "is_registered"]


def this_bookie_id(conf) -> str:
    return bookie_address(conf).bookie_id


def is_registered(zk, root: str, bid: str) -> bool:
    paths = (zk_path(root, AVAILABLE, bid), zk_path(root, AVAILABLE, READONLY, bid))
    return any(zk.exists(p) is not None for p in paths)


def _refuse_if_running(zk, root: str, bid: str, what: str) -> None:
    if is_registered(zk, root, bid):
        raise AdminError(f"bookie {bid} is registered (running): stop it before {what}")


def bookie_format(zk, root: str, conf, force: bool) -> dict:
    """bookieformat: wipe the bookie's directories and delete its ZooKeeper cookie (only with `force` when
    either holds anything). Refused while a bookie with this id is registered."""
    bid = this_bookie_id(conf)
    if zk is not None:
        _refuse_if_running(zk, root, bid, "formatting it")
    actions = format_bookie(zk, root, conf, bid, force)
    return {"bookieId": bid, "actions": actions}


def list_cookies(zk, root: str, conf) -> dict:
    """updatecookie --list: the cookie in ZooKeeper and in each directory, as text."""
    bid = this_bookie_id(conf)
    stored = read_zk_cookie(zk, root, bid)
    local = {d: read_cookie_file(d) for d in bookie_dirs(conf)}
    return {"bookieId": bid, "zookeeper": stored[0].to_text() if stored else None,
            "directories": {d: (c.to_text() if c else None) for d, c in local.items()}}


def _other_id(conf, kind: str) -> tuple[str, str]:
    """(current id, id with `kind` = "hostname" | "ip")."""
    if conf.get("bookieId"):
        raise AdminError("bookieId is set explicitly in the configuration: there is no host name / IP id to "
                         "switch; change bookieId instead")
    if conf.get("advertisedAddress"):
        raise AdminError("advertisedAddress is set: the bookie id is that address whatever --bookie-id says")
    current = this_bookie_id(conf)
    values = conf.to_dict()
    values["useHostNameAsBookieID"] = kind == "hostname"
    other = type(conf)(values)
    return current, this_bookie_id(other)


def update_cookie_bookie_id(zk, root: str, conf, kind: str) -> dict:
    """updatecookie --bookie-id hostname|ip: move the cookies from the id the configuration gives now to the
    id it gives with useHostNameAsBookieID set that way (then change the conf to match)."""
    old, new = _other_id(conf, kind)
    if old == new:
        raise AdminError(f"the bookie id is {old} either way: nothing to update")
    _refuse_if_running(zk, root, old, "changing its cookie")
    _refuse_if_running(zk, root, new, "changing its cookie")
    stored = read_zk_cookie(zk, root, old)
    if stored is None:
        raise AdminError(f"no cookie for {old} in ZooKeeper at {zk_path(root, 'cookies', old)}")
    if read_zk_cookie(zk, root, new) is not None:
        raise AdminError(f"a cookie for {new} already exists in ZooKeeper; delete it first if it is stale")
    cookie, _version = stored
    moved = Cookie(new, cookie.journal_dirs, cookie.ledger_dirs, cookie.instance_id, cookie.index_dirs,
                   cookie.layout_version)
    for d in bookie_dirs(conf):
        write_cookie_file(d, moved)
    write_zk_cookie(zk, root, new, moved)
    delete_zk_cookie(zk, root, old)
    return {"oldBookieId": old, "newBookieId": new}


def expand_storage(zk, root: str, conf) -> dict:
    """updatecookie --expandstorage: directories added to the configuration (they must be empty) join the
    cookie, in ZooKeeper and in every directory."""
    bid = this_bookie_id(conf)
    _refuse_if_running(zk, root, bid, "expanding its storage")
    stored = read_zk_cookie(zk, root, bid)
    if stored is None:
        raise AdminError(f"no cookie for {bid} in ZooKeeper: a new bookie needs no expansion, just start it")
    cookie, version = stored
    old_dirs = set(cookie.journal_dirs) | set(cookie.ledger_dirs) | set(cookie.index_dirs or ())
    added = [d for d in bookie_dirs(conf) if d not in old_dirs]
    if not added:
        raise AdminError("the configuration names no directory the cookie does not already have")
    busy = [d for d in added if os.path.isdir(d) and os.listdir(d)]
    if busy:
        raise AdminError(f"new directories must be empty: {', '.join(busy)}")
    expanded = cookie_for_conf(conf, bid, cookie.instance_id or read_instance_id(zk, root))
    for d in bookie_dirs(conf):
        write_cookie_file(d, expanded)
    write_zk_cookie(zk, root, bid, expanded, version=version)
    return {"bookieId": bid, "addedDirectories": added}


def delete_cookie(zk, root: str, conf, force: bool) -> dict:
    """updatecookie --delete: remove this bookie's cookie from ZooKeeper (its directories keep theirs).
    Needs `force`; refused while the bookie is registered."""
    bid = this_bookie_id(conf)
    if not force:
        raise AdminError(f"deleting the cookie of {bid} makes its data unusable to the cluster; pass --force")
    _refuse_if_running(zk, root, bid, "deleting its cookie")
    if not delete_zk_cookie(zk, root, bid):
        raise AdminError(f"no cookie for {bid} in ZooKeeper")
    return {"bookieId": bid, "deleted": True}


def bookie_sanity(bk, conf, entries: int = 10, timeout_s: float = 30.0) -> dict:
    """bookiesanity: create a ledger on this bookie alone (E=W=A=1), write `entries` entries, read them
    back, delete it. `bk` is a blocking client used for nothing else."""
    bid = this_bookie_id(conf)
    client = bk.async_client
    in_reactor(timeout_s, client.pin_to_bookie, bid)
    if not client.writable_bookies:
        state = "registered read-only" if bid in client.read_only_bookies else "not registered"
        raise AdminError(f"bookie {bid} is {state}: bookiesanity needs it running and writable")
    started = time.perf_counter()
    payloads = [f"bookiesanity {bid} entry {i}".encode() for i in range(entries)]
    handle = bk.create_ledger(1, 1, 1, password=b"bookiesanity")
    lid = handle.ledger_id
    try:
        handle.add_entries(payloads)
        handle.close()
        reader = bk.open_ledger(lid, b"bookiesanity", recovery=False)
        read = [bytes(e.data) for e in reader.read_entries(0, entries - 1)]
    finally:
        bk.delete_ledger(lid)
    if read != payloads:
        raise AdminError(f"bookie {bid}: entries read back from ledger {lid} differ from those written")
    return {"bookieId": bid, "ledgerId": lid, "entries": entries, "ok": True,
            "seconds": time.perf_counter() - started}
