"""The bookie rack table (Pulsar's `/bookies`, bkfast.meta.rack_table) and the placement policy check, as operator
operations: `bkfast shell setbookierack/getbookierack/deletebookierack/listbookieracks/placementpolicycheck`
and the HTTP admin API's `bookie/rack_info`, `bookie/racks_info`.

Blocking kazoo calls on a client the caller started (`common.zk_session`, or the bookie's session); the table
beside the ledgers root (`/ledgers` -> `/bookies`). A bookie is named by its id ("host:port", checked as
BookKeeper checks ids); a rack as Pulsar takes it (not empty, not "/"). Nothing here prints.
"""

from __future__ import annotations

from bkfast.errors import MetadataError
from bkfast.meta.rack_table import (
    DEFAULT_GROUP,
    find_bookie,
    rack_table_path,
    read_rack_table,
    update_rack_table,
    with_bookie,
    without_bookie,
)

from .common import AdminError, check_bookie_id

__all__ = ["list_bookie_racks", "get_bookie_rack", "set_bookie_rack", "delete_bookie_rack", "placement_policy_check"]


def _row(bookie: str, group: str, info: dict) -> dict:
    return {"bookie": bookie, "group": group, "rack": info.get("rack"), "hostname": info.get("hostname")}


def list_bookie_racks(zk, root: str) -> dict:
    """listbookieracks: the whole table, group -> bookie -> {"rack", "hostname"} (Pulsar's racks-info)."""
    table, _version = read_rack_table(zk, rack_table_path(root))
    return table


def get_bookie_rack(zk, root: str, bookie: str) -> dict:
    """getbookierack: {"bookie", "group", "rack", "hostname"}; AdminError when the table does not list it."""
    check_bookie_id(bookie)
    table, _version = read_rack_table(zk, rack_table_path(root))
    found = find_bookie(table, bookie)
    if found is None:
        raise AdminError(f"bookie {bookie} does not exist in the rack table ({rack_table_path(root)})")
    return _row(bookie, *found)


def set_bookie_rack(zk, root: str, bookie: str, rack: str, group: str | None = None,
                    hostname: str | None = None) -> dict:
    """setbookierack: put `bookie` at `rack` in `group` (default "default"), out of any other group."""
    check_bookie_id(bookie)
    group = group or DEFAULT_GROUP
    try:
        with_bookie({}, group, bookie, rack, hostname)          # check the arguments before touching ZooKeeper
    except MetadataError as err:
        raise AdminError(str(err)) from None
    update_rack_table(zk, rack_table_path(root), lambda table: with_bookie(table, group, bookie, rack, hostname))
    return _row(bookie, group, {"rack": rack, "hostname": hostname})


def delete_bookie_rack(zk, root: str, bookie: str) -> dict:
    """deletebookierack: take `bookie` out of the table; AdminError when it is not there."""
    check_bookie_id(bookie)
    removed = []

    def change(table):
        new, was_there = without_bookie(table, bookie)
        removed.append(was_there)
        return new if was_there else table

    update_rack_table(zk, rack_table_path(root), change)
    if not removed[-1]:
        raise AdminError(f"bookie {bookie} does not exist in the rack table ({rack_table_path(root)})")
    return {"bookie": bookie, "deleted": True}


def placement_policy_check(bk, zk, root: str, layout: str) -> dict:
    """placementpolicycheck: judge every closed ledger by `bk`'s placement policy (a blocking BookKeeper built
    with the configuration's placement keys), as the auditor's periodic check does; nothing is marked."""
    from bkfast.reactor import call
    from bkfast.replication.placement_check import placement_check

    report = placement_check(bk.async_client, call)
    out = report.to_dict()
    out["placementPolicy"] = bk.async_client.placement.name
    return out
