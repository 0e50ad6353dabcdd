"""Java BookKeeper 4.16's etcd key layout (`EtcdUtils`, `EtcdConstants`, `Etcd64bitIdGenerator`), plus the keys
bkfast adds for what Java's etcd driver lacks (AutoRecovery's under-replication and auditor election, streams).
docs/etcd.md lists every key.

Owns: parsing ``etcd://host:port[,host:port]/<scope>`` (and ``etcd+http``/``etcd+https``), each key's name,
the UUID form of a (scopeId, ledgerId) pair, the 128-bucket ledger id scheme and the layout's bytes. Pure
functions: no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from bkfast.errors import MetadataError
from bkfast.ids import LedgerId

from .zk_layout import LAYOUT_FORMAT_VERSION

__all__ = ["EtcdUri", "parse_etcd_uri", "EtcdKeys", "ETCD_FACTORY_CLASS", "ETCD_FACTORY_VERSION", "NUM_BUCKETS",
           "BUCKET_ID_SHIFT", "MAX_ID_PER_BUCKET", "bucket_ledger_id", "format_etcd_layout", "check_etcd_layout",
           "ledger_key_uuid", "parse_ledger_uuid"]

ETCD_FACTORY_CLASS = "org.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory"
ETCD_FACTORY_VERSION = 0

# Etcd64bitIdGenerator: the top 8 bits name one of 128 buckets, the low 56 bits are the bucket key's version.
NUM_BUCKETS = 0x80
BUCKET_ID_SHIFT = 56
MAX_ID_PER_BUCKET = (1 << BUCKET_ID_SHIFT) - 1

END_SEP = b"0"          # Java's range end for "<path>/": "<path>0" ('0' follows '/')


@dataclass(frozen=True)
class EtcdUri:
    endpoints: tuple[tuple[str, int], ...]
    scope: str
    protocol: str


def _parse_host(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise MetadataError(f"etcd endpoint {text!r}: expected host:port")
    return host.strip("[]"), int(port)


def parse_etcd_uri(uri: str) -> EtcdUri:
    """``etcd[+http|+https]://h1:p1[,h2:p2;h3:p3]/scope`` -> endpoints, scope (with its leading '/'), protocol."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("etcd", "etcd+http", "etcd+https"):
        raise MetadataError(f"not an etcd metadata service URI: {uri!r} (expected etcd://host:port/scope)")
    hosts, slash, path = rest.partition("/")
    scope = "/" + path.strip("/") if slash and path.strip("/") else ""
    if not scope:
        raise MetadataError(f"etcd metadata service URI {uri!r} names no scope (e.g. etcd://host:2379/ledgers)")
    endpoints = tuple(_parse_host(h) for h in hosts.replace(";", ",").split(",") if h)
    if not endpoints:
        raise MetadataError(f"etcd metadata service URI {uri!r} names no endpoint")
    return EtcdUri(endpoints, scope, "https" if scheme == "etcd+https" else "http")


def format_etcd_layout() -> bytes:
    """The layout value Java's EtcdLayoutManager stores: ``2\\n<EtcdLedgerManagerFactory>:0``."""
    return f"{LAYOUT_FORMAT_VERSION}\n{ETCD_FACTORY_CLASS}:{ETCD_FACTORY_VERSION}".encode()


def check_etcd_layout(data: bytes, where: str) -> None:
    """MetadataError unless `data` is a layout of Java's etcd ledger manager at a version bkfast reads."""
    text = data.decode("utf-8", errors="replace")
    fmt, _, manager = text.partition("\n")
    cls, _, version = manager.strip().rpartition(":")
    if not fmt.strip().isdigit() or not 1 <= int(fmt) <= LAYOUT_FORMAT_VERSION:
        raise MetadataError(f"{where}: unsupported layout {text!r}")
    if cls != ETCD_FACTORY_CLASS or version != str(ETCD_FACTORY_VERSION):
        raise MetadataError(f"{where} names ledger manager {manager.strip()!r}, not Java's etcd one "
                            f"({ETCD_FACTORY_CLASS}:{ETCD_FACTORY_VERSION})")


def ledger_key_uuid(ledger: LedgerId) -> str:
    """Java's ``new UUID(scopeId, ledgerId).toString()``: the two 64-bit halves as one 128-bit UUID."""
    return str(uuid.UUID(int=(ledger.scope_id << 64) | ledger.ledger_id))


def parse_ledger_uuid(text: str) -> LedgerId:
    value = uuid.UUID(text).int
    return LedgerId(value >> 64, value & ((1 << 64) - 1))


def bucket_ledger_id(bucket: int, version: int) -> int:
    """Etcd64bitIdGenerator's id: the bucket in the top 8 bits, the bucket key's version below."""
    return ((bucket << BUCKET_ID_SHIFT) & (0xFF << BUCKET_ID_SHIFT)) | (version & MAX_ID_PER_BUCKET)


class EtcdKeys:
    """Every key of one scope, as bytes. Java's keys first, then bkfast's under ``underreplication/`` and
    ``streams/``."""

    def __init__(self, scope: str):
        self.scope = scope
        self.root = scope.encode()
        self.root_end = self.root + END_SEP
        # the fixed keys: Java's, then bkfast's
        self.layout = self._k("layout")
        self.instance_id = self._k("instanceid")
        self.cookies_dir = self._k("cookies")
        self.bookies_dir = self._k("bookies")
        self.ledgers_dir = self._k("ledgers")
        self.buckets_dir = self._k("buckets")
        self.underreplication_dir = self._k("underreplication")
        self.streams_dir = self._k("streams")

    def _k(self, *parts: str) -> bytes:
        return "/".join((self.scope, *parts)).encode()

    # --- Java's layout ------------------------------------------------------------------------------------
    def cookie(self, bookie_id: str) -> bytes:
        return self._k("cookies", bookie_id)

    def bookies(self, read_only: bool) -> bytes:
        return self._k("bookies", "readonly" if read_only else "writable")

    def bookie(self, bookie_id: str, read_only: bool) -> bytes:
        return self._k("bookies", "readonly" if read_only else "writable", bookie_id)

    def ledger(self, ledger: LedgerId) -> bytes:
        return self._k("ledgers", ledger_key_uuid(ledger))

    def bucket(self, bucket: int) -> bytes:
        return self._k("buckets", f"{bucket:03d}")

    @staticmethod
    def children(parent: bytes) -> tuple[bytes, bytes]:
        """The range of ``<parent>/<anything>``: ``<parent>/`` to ``<parent>0``."""
        return parent + b"/", parent + END_SEP

    # --- bkfast's additions -------------------------------------------------------------------------------
    def ur(self, *parts: str) -> bytes:
        """``<scope>/underreplication/<parts>``: AutoRecovery's marks, locks, switch, delay, ctimes, election."""
        return self._k("underreplication", *parts)

    def stream(self, name: str) -> bytes:
        return self._k("streams", name)
