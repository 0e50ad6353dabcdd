"""Operations on one bookie that touch its cookies or its running server: bookieformat, updatecookie
(BookKeeper's -bookieId / -expandstorage / -list / -delete) and bookiesanity (a ledger written to and read
from this bookie alone). The bookie is named by its configuration (`ids.bookie_address`)."""

from __future__ import annotations

import os
import time

from bkfast.ids import bookie_address
from bkfast.meta import Cookie, cookie_for_conf, read_cookie_file, write_cookie_file
from bkfast.meta.cookies import CookieStore, bookie_dirs, format_bookie_in

from .common import AdminError, in_reactor

__all__ = ["this_bookie_id", "bookie_format", "list_cookies", "update_cookie_bookie_id", "expand_storage",
           "delete_cookie", "bookie_sanity"]


def this_bookie_id(conf) -> str:
    return bookie_address(conf).bookie_id


def _refuse_if_running(store: CookieStore, bid: str, what: str) -> None:
    if store.registered(bid):
        raise AdminError(f"bookie {bid} is registered (running): stop it before {what}")


def bookie_format(store: CookieStore | None, conf, force: bool) -> dict:
    """bookieformat: wipe the bookie's directories and delete its cookie in the metadata store (only with
    `force` when either holds anything). Refused while a bookie with this id is registered."""
    bid = this_bookie_id(conf)
    if store is not None:
        _refuse_if_running(store, bid, "formatting it")
    actions = format_bookie_in(store, conf, bid, force)
    return {"bookieId": bid, "actions": actions}


def list_cookies(store: CookieStore, conf) -> dict:
    """updatecookie --list: the cookie in the metadata store (under the store's name: "zookeeper", "etcd")
    and in each directory, as text."""
    bid = this_bookie_id(conf)
    stored = store.read(bid)
    local = {d: read_cookie_file(d) for d in bookie_dirs(conf)}
    return {"bookieId": bid, store.store_name.lower(): stored[0].to_text() if stored else None,
            "where": store.where(bid), "directories": {d: (c.to_text() if c else None) for d, c in local.items()}}


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


def update_cookie_bookie_id(store: CookieStore, conf, kind: str) -> dict:
    """updatecookie --bookie-id hostname|ip: move the cookies from the id the configuration gives now to the
    id it gives with useHostNameAsBookieID set that way (then change the conf to match)."""
    old, new = _other_id(conf, kind)
    if old == new:
        raise AdminError(f"the bookie id is {old} either way: nothing to update")
    _refuse_if_running(store, old, "changing its cookie")
    _refuse_if_running(store, new, "changing its cookie")
    stored = store.read(old)
    if stored is None:
        raise AdminError(f"no cookie for {old} in {store.store_name} at {store.where(old)}")
    if store.read(new) is not None:
        raise AdminError(f"a cookie for {new} already exists in {store.store_name}; delete it first if it is stale")
    cookie, _version = stored
    moved = Cookie(new, cookie.journal_dirs, cookie.ledger_dirs, cookie.instance_id, cookie.index_dirs,
                   cookie.layout_version)
    for d in bookie_dirs(conf):
        write_cookie_file(d, moved)
    store.write(new, moved)
    store.delete(old)
    return {"oldBookieId": old, "newBookieId": new}


def expand_storage(store: CookieStore, conf) -> dict:
    """updatecookie --expandstorage: directories added to the configuration (they must be empty) join the
    cookie, in the metadata store and in every directory."""
    bid = this_bookie_id(conf)
    _refuse_if_running(store, bid, "expanding its storage")
    stored = store.read(bid)
    if stored is None:
        raise AdminError(f"no cookie for {bid} in {store.store_name}: a new bookie needs no expansion, just start it")
    cookie, version = stored
    old_dirs = set(cookie.journal_dirs) | set(cookie.ledger_dirs) | set(cookie.index_dirs or ())
    added = [d for d in bookie_dirs(conf) if d not in old_dirs]
    if not added:
        raise AdminError("the configuration names no directory the cookie does not already have")
    busy = [d for d in added if os.path.isdir(d) and os.listdir(d)]
    if busy:
        raise AdminError(f"new directories must be empty: {', '.join(busy)}")
    expanded = cookie_for_conf(conf, bid, cookie.instance_id or store.instance_id())
    for d in bookie_dirs(conf):
        write_cookie_file(d, expanded)
    store.write(bid, expanded, version=version)
    return {"bookieId": bid, "addedDirectories": added}


def delete_cookie(store: CookieStore, conf, force: bool) -> dict:
    """updatecookie --delete: remove this bookie's cookie from the metadata store (its directories keep
    theirs). Needs `force`; refused while the bookie is registered."""
    bid = this_bookie_id(conf)
    if not force:
        raise AdminError(f"deleting the cookie of {bid} makes its data unusable to the cluster; pass --force")
    _refuse_if_running(store, bid, "deleting its cookie")
    if not store.delete(bid):
        raise AdminError(f"no cookie for {bid} in {store.store_name}")
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
