"""Apache Pulsar's bookie rack table (`BookieRackAffinityMapping`, `/bookies`), read and written byte for byte.

Owns the table's format, its place in ZooKeeper and the blocking kazoo calls that read, change (CAS on the
znode version) and watch it. The znode holds JSON: group -> bookie address ("host:port") -> {"rack": ...,
"hostname": ...}, written as Pulsar's Jackson writes a `BookiesRackConfiguration` (a TreeMap of TreeMaps of
`BookieInfo`): compact, groups and addresses in Java's String order, "rack" before "hostname", a null
hostname left out, non-ASCII as UTF-8. Pulsar keeps the table at `/bookies` of its metadata store, the
parent of its `/ledgers`; here it is `bookies` beside the ledgers root (`/ledgers` -> `/bookies`,
`/pulsar/ledgers` -> `/pulsar/bookies`). An address is in at most one group (Pulsar's `updateBookie` takes it
out of the others first); a group left empty by a delete goes away. Racks are kept as the operator typed
them; `normalize_rack` is how readers (bkfast.client.topology) turn them into network locations.

Must never: run in the reactor thread (every kazoo call here blocks), or write a table Pulsar cannot read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from bkfast.errors import MetadataError
from bkfast.threads import start_thread

__all__ = ["RACK_TABLE_NODE", "DEFAULT_GROUP", "RackTable", "rack_table_path", "parse_rack_table",
           "serialize_rack_table", "check_rack", "normalize_rack", "with_bookie", "without_bookie", "find_bookie",
           "read_rack_table", "update_rack_table", "watch_rack_table"]

log = logging.getLogger(__name__)

RACK_TABLE_NODE = "bookies"
DEFAULT_GROUP = "default"

RackTable = dict[str, dict[str, dict[str, str]]]
"""group -> bookie address -> {"rack": ..., "hostname": ...} ("hostname" may be absent)."""


def rack_table_path(ledgers_root: str) -> str:
    """`bookies` beside the ledgers root: /ledgers -> /bookies, /a/b/ledgers -> /a/b/bookies."""
    parts = [p for p in ledgers_root.split("/") if p]
    return "/" + "/".join([*parts[:-1], RACK_TABLE_NODE])


def check_rack(rack: str | None) -> str:
    """The rack as given, or MetadataError: Pulsar's BookieInfo refuses a null, empty or "/" rack."""
    if rack is None or not rack.strip() or rack.strip() == "/":
        raise MetadataError(f"invalid rack {rack!r}: give a rack name such as /rack1 (or /region/rack, "
                            "/zone/upgradedomain); it may not be empty or '/'")
    return rack


def normalize_rack(rack: str | None) -> str | None:
    """A network location from a table's rack: "/" added in front (as Pulsar's mapping does), a trailing "/"
    dropped; None for a missing, empty or "/" rack (the policy's default location then applies)."""
    if rack is None:
        return None
    text = rack.strip().rstrip("/")
    if not text:
        return None
    return text if text.startswith("/") else "/" + text


def _java_order(keys) -> list[str]:
    # Java's String.compareTo compares UTF-16 code units; sorting their big-endian bytes is the same order.
    return sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))


def serialize_rack_table(table: RackTable) -> bytes:
    """The znode bytes Pulsar writes for `table`."""
    out = {}
    for group in _java_order(table):
        bookies = table[group]
        row = {}
        for address in _java_order(bookies):
            info = bookies[address]
            entry = {"rack": info.get("rack")}
            if entry["rack"] is None:
                del entry["rack"]
            if info.get("hostname") is not None:
                entry["hostname"] = info["hostname"]
            row[address] = entry
        out[group] = row
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def parse_rack_table(data: bytes | None) -> RackTable:
    """The table in a znode's bytes ({} for none or empty). Fields Pulsar does not know are dropped, as its
    reader (FAIL_ON_UNKNOWN_PROPERTIES off) drops them; a table that is not group -> address -> object is a
    MetadataError naming what is wrong."""
    if not data:
        return {}
    try:
        raw = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise MetadataError(f"the bookie rack table is not JSON: {err}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise MetadataError("the bookie rack table is not a JSON object of groups")
    table: RackTable = {}
    for group, bookies in raw.items():
        if bookies is None:
            continue
        if not isinstance(bookies, dict):
            raise MetadataError(f"bookie rack table group {group!r} is not an object of bookie addresses")
        rows = {}
        for address, info in bookies.items():
            if info is None:
                continue
            if not isinstance(info, dict):
                raise MetadataError(f"bookie rack table entry {group}/{address} is not an object")
            rows[address] = {k: str(info[k]) for k in ("rack", "hostname") if info.get(k) is not None}
        table[group] = rows
    return table


def find_bookie(table: RackTable, address: str) -> tuple[str, dict[str, str]] | None:
    """(group, info) of `address`, or None (Pulsar's getBookie: the first group holding it)."""
    for group, bookies in table.items():
        if address in bookies:
            return group, dict(bookies[address])
    return None


def without_bookie(table: RackTable, address: str) -> tuple[RackTable, bool]:
    """A copy of `table` without `address` (a group left empty goes too), and whether it was there."""
    out = {group: dict(bookies) for group, bookies in table.items()}
    for group, bookies in out.items():
        if bookies.pop(address, None) is not None:
            if not bookies:
                del out[group]
            return out, True
    return out, False


def with_bookie(table: RackTable, group: str, address: str, rack: str, hostname: str | None = None) -> RackTable:
    """A copy of `table` with `address` in `group` at `rack` (taken out of any other group first)."""
    if not group:
        raise MetadataError("a bookie's rack needs a group (Pulsar's default group is 'default')")
    out, _ = without_bookie(table, address)
    info = {"rack": check_rack(rack)}
    if hostname:
        info["hostname"] = hostname
    out.setdefault(group, {})[address] = info
    return out


# --- ZooKeeper (blocking) -------------------------------------------------------------------------------

def read_rack_table(zk, path: str) -> tuple[RackTable, int]:
    """(table, znode version); ({}, -1) when the znode does not exist."""
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return {}, -1
    return parse_rack_table(data), stat.version


def update_rack_table(zk, path: str, change: Callable[[RackTable], RackTable]) -> RackTable:
    """Apply `change` to the stored table and write the result, re-reading on a concurrent change (CAS on
    the znode version; the znode and its parents are created when missing). Returns the table written."""
    for _attempt in range(100):
        table, version = read_rack_table(zk, path)
        new = change(table)
        data = serialize_rack_table(new)
        try:
            if version < 0:
                zk.create(path, data, makepath=True)
            else:
                zk.set(path, data, version=version)
            return new
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue                       # someone else changed it meanwhile: read it again
    raise MetadataError(f"the bookie rack table at {path} kept changing under 100 updates; try again")


def watch_rack_table(zk, path: str, listener: Callable[[RackTable], None]) -> Callable[[], None]:
    """Call `listener(table)` (in kazoo's thread) with the table now and after every change, {} while the
    znode does not exist; a table that does not parse is logged and skipped (the last good one stays).
    Returns the cancel function. The watch is set from a daemon thread: its first read blocks."""
    from kazoo.recipe.watchers import DataWatch

    state = {"cancelled": False}

    def on_data(data, stat, event):
        if state["cancelled"]:
            return False
        try:
            table = parse_rack_table(data) if stat is not None else {}
        except MetadataError as err:
            log.warning("bookie rack table at %s: %s (the previous table stays in use)", path, err)
            return None
        listener(table)
        return None

    def run():
        try:
            DataWatch(zk, path, on_data)
        except Exception as err:         # kazoo errors: the watch is lost, say so once
            log.warning("could not watch the bookie rack table at %s: %r", path, err)

    start_thread(run, "zk-rack-watch")

    def cancel():
        state["cancelled"] = True

    return cancel
