"""The ZooKeeper tree of a BookKeeper cluster: init (`initnewcluster`), format (`metaformat`), LAYOUT.

Byte-compatible with Java 4.16 (`ZKRegistrationManager.initNewCluster`, `LedgerLayout`, spec §5.1):
one multi creates the root, ``available``, ``available/readonly`` and ``INSTANCEID``; LAYOUT is
written afterwards. ``cookies`` and ``idgen`` are created later, by the first cookie write and the
first ledger id, exactly as Java does. Blocking kazoo calls: use from a thread, not the reactor.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from kazoo.exceptions import NodeExistsError, NoNodeError

from bkfast.errors import ClusterExistsError, MetadataError

__all__ = [
    "MetadataError", "ClusterExistsError", "LedgerLayout", "LAYOUT_FORMAT_VERSION", "MANAGER_FACTORIES",
    "AVAILABLE", "READONLY", "COOKIES", "INSTANCEID", "LAYOUT", "IDGEN",
    "init_new_cluster", "ensure_cluster", "format_metadata", "read_layout", "read_instance_id", "parse_layout",
    "format_layout", "parse_metadata_service_uri", "metadata_from_conf", "zk_path",
]


AVAILABLE = "available"
READONLY = "readonly"
COOKIES = "cookies"
INSTANCEID = "INSTANCEID"
LAYOUT = "LAYOUT"
IDGEN = "idgen"

LAYOUT_FORMAT_VERSION = 2
LAYOUT_MIN_COMPAT_VERSION = 1

# metadataServiceUri layout name -> (Java factory class, manager version)
MANAGER_FACTORIES: dict[str, tuple[str, int]] = {
    "flat": ("org.apache.bookkeeper.meta.FlatLedgerManagerFactory", 1),
    "hierarchical": ("org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1),
    "longhierarchical": ("org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory", 1),
    "ms": ("org.apache.bookkeeper.meta.MSLedgerManagerFactory", 1),
}
_BY_CLASS = {cls: name for name, (cls, _v) in MANAGER_FACTORIES.items()}


def zk_path(root: str, *parts: str) -> str:
    root = "/" + root.strip("/") if root.strip("/") else ""
    return "/".join([root, *parts]) if parts else (root or "/")


@dataclass(frozen=True)
class LedgerLayout:
    manager_factory_class: str
    manager_version: int
    layout_format_version: int = LAYOUT_FORMAT_VERSION

    @property
    def name(self) -> str:
        """Short layout name (``hierarchical`` ...)."""
        return _BY_CLASS[self.manager_factory_class]


def format_layout(layout: str = "hierarchical") -> bytes:
    """LAYOUT node data: ``2\\n<factory class>:<manager version>`` (no trailing newline)."""
    try:
        cls, version = MANAGER_FACTORIES[layout]
    except KeyError:
        raise MetadataError(
            f"unknown ledger layout {layout!r}; expected one of {', '.join(MANAGER_FACTORIES)}") from None
    return f"{LAYOUT_FORMAT_VERSION}\n{cls}:{version}".encode("utf-8")


def parse_layout(data: bytes) -> LedgerLayout:
    """Parse LAYOUT node data (Java `LedgerLayout.parseLayout`)."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    try:
        fmt = int(lines[0].strip())
    except ValueError:
        raise MetadataError(f"invalid LAYOUT: first line {lines[0]!r} is not a layout format version") from None
    if fmt < LAYOUT_MIN_COMPAT_VERSION or fmt > LAYOUT_FORMAT_VERSION:
        raise MetadataError(f"unsupported LAYOUT format version {fmt} (supported "
                            f"{LAYOUT_MIN_COMPAT_VERSION}..{LAYOUT_FORMAT_VERSION})")
    if len(lines) < 2 or ":" not in lines[1]:
        raise MetadataError(f"invalid LAYOUT {text!r}: expected '<version>\\n<factory class>:<manager version>'")
    cls, _, ver = lines[1].strip().rpartition(":")
    try:
        mver = int(ver)
    except ValueError:
        raise MetadataError(f"invalid LAYOUT {text!r}: manager version {ver!r} is not a number") from None
    if cls not in _BY_CLASS:
        raise MetadataError(f"unknown ledger manager factory {cls!r} in LAYOUT; bkfast supports "
                            + ", ".join(c for c, _ in MANAGER_FACTORIES.values()))
    return LedgerLayout(cls, mver, fmt)


def read_layout(zk, root: str = "/ledgers") -> LedgerLayout:
    try:
        data, _ = zk.get(zk_path(root, LAYOUT))
    except NoNodeError:
        raise MetadataError(f"no LAYOUT at {zk_path(root, LAYOUT)}: cluster not initialized "
                            "(run `bkfast shell initnewcluster`)") from None
    return parse_layout(data)


def read_instance_id(zk, root: str = "/ledgers") -> str | None:
    try:
        data, _ = zk.get(zk_path(root, INSTANCEID))
    except NoNodeError:
        return None
    return data.decode("utf-8")


def init_new_cluster(zk, root: str = "/ledgers", layout: str = "hierarchical",
                     instance_id: str | None = None) -> str:
    """Create a new cluster's metadata under `root`; returns the instance id. Refuses if `root` exists."""
    root = zk_path(root)
    layout_data = format_layout(layout)            # validate before touching ZooKeeper
    if instance_id is None:
        instance_id = str(uuid.uuid4())
    if zk.exists(root) is not None:
        raise ClusterExistsError(f"ledger root path {root} already exists: cluster already initialized "
                                 "(use `metaformat --force` to wipe it)")
    parent = root.rsplit("/", 1)[0]
    if parent:
        zk.ensure_path(parent)
    tx = zk.transaction()
    tx.create(root, b"")
    tx.create(zk_path(root, AVAILABLE), b"")
    tx.create(zk_path(root, AVAILABLE, READONLY), b"")
    tx.create(zk_path(root, INSTANCEID), instance_id.encode("utf-8"))
    results = tx.commit()
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        if any(isinstance(r, NodeExistsError) for r in failed):
            raise ClusterExistsError(f"ledger root path {root} already exists: cluster already initialized")
        raise MetadataError(f"creating the cluster under {root} failed: {failed[0]!r}")
    zk.create(zk_path(root, LAYOUT), layout_data)
    return instance_id


def ensure_cluster(zk, root: str = "/ledgers", layout: str = "hierarchical") -> None:
    """Init a new cluster under `root` unless its LAYOUT (written last by `init_new_cluster`) is there:
    idempotent, for a sandbox or a test harness that may find the cluster of an earlier run."""
    if zk.exists(zk_path(root, LAYOUT)) is None:
        init_new_cluster(zk, root, layout)


def format_metadata(zk, root: str = "/ledgers", force: bool = False, layout: str | None = None) -> str:
    """BookKeeper's `metaformat`: delete everything under `root` and init a new cluster.
    Without `force`, refuses if `root` exists. The layout defaults to the existing one (or hierarchical)."""
    root = zk_path(root)
    if zk.exists(root) is not None:
        if not force:
            raise ClusterExistsError(f"ledger root path {root} already exists; pass --force to wipe it")
        if layout is None:
            try:
                layout = read_layout(zk, root).name
            except MetadataError:
                layout = None
        zk.delete(root, recursive=True)
    return init_new_cluster(zk, root, layout or "hierarchical")


def parse_metadata_service_uri(uri: str) -> tuple[str, str, str]:
    """``zk+hierarchical://h1:2181;h2:2181/ledgers`` -> (connect string ``h1:2181,h2:2181``, root, layout)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not (scheme == "zk" or scheme.startswith("zk+")):
        raise MetadataError(f"unsupported metadataServiceUri {uri!r}: only zk:// and zk+<layout>:// are supported")
    layout = scheme.partition("+")[2] or "hierarchical"
    if layout == "null":
        layout = "hierarchical"
    if not parts.netloc:
        raise MetadataError(f"metadataServiceUri {uri!r} has no ZooKeeper servers")
    hosts = parts.netloc.replace(";", ",")
    root = parts.path or "/ledgers"
    return hosts, zk_path(root), layout


def metadata_from_conf(conf) -> tuple[str, str, str]:
    """(ZooKeeper connect string, ledgers root, layout name) of a ServerConfiguration
    (``metadataServiceUri``, which falls back to ``zkServers`` + ``zkLedgersRootPath``)."""
    return parse_metadata_service_uri(conf.get("metadataServiceUri"))
