"""MetadataDriver over etcd v3, with Java BookKeeper 4.16's etcd layout (bkfast.meta.etcd_layout, docs/etcd.md):
a Java client or bookie and a bkfast one share a cluster.

Owns: ledger metadata at ``<scope>/ledgers/<UUID(scopeId, ledgerId)>`` in the same binary format as in
ZooKeeper, created by a transaction on the key's absence and updated by one on its version (etcd's per-key put
count: version 0 after the create and +1 per update, as a znode's; Java compares the mod revision of the same
key, so both CAS against the same writes), ledger ids from Java's 128 buckets, listing by key range, watches,
bookie discovery and registration (bkfast.meta.etcd_registration, on this driver's lease), cookies, streams
(``<scope>/streams/<name>``), and AutoRecovery's metadata (bkfast.meta.etcd_underreplication, which Java's
driver lacks). Blocking etcd calls run on this driver's own thread pool, never in the reactor; every result
and every listener is delivered in the reactor thread. Each call is bounded by `operation_timeout_s` and fails
with BKMetaStoreException naming the endpoints.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.internet import reactor as global_reactor

from bkfast.errors import (
    BKLedgerExistException,
    BKMetadataVersionException,
    BKMetaStoreException,
    BKNoSuchLedgerExistsException,
    MetadataError,
)
from bkfast.ids import LedgerId

from .driver import BookieInfo, Cancel, MetadataDriver, Versioned
from .etcd_kv import (
    MAX_TXN_OPS,
    EtcdKV,
    EtcdWatch,
    KeyValue,
    WatchEvent,
    cmp_absent,
    cmp_present,
    cmp_put_count,
    op_delete,
    op_get,
    op_put,
)
from .etcd_layout import (
    MAX_ID_PER_BUCKET,
    NUM_BUCKETS,
    EtcdKeys,
    bucket_ledger_id,
    check_etcd_layout,
    parse_etcd_uri,
    parse_ledger_uuid,
)
from .etcd_registration import EtcdBookieRegistration
from .etcd_session import EtcdSession
from .etcd_streams import EtcdStreamStore
from .ledger_metadata import LedgerMetadata, LedgerMetadataFormatError, parse_metadata
from .pooled_driver import PooledDriver
from .registration import bookie_info_from_data

__all__ = ["EtcdMetadataDriver", "EtcdSettings", "etcd_client_from_conf"]

reactor: Any = global_reactor
log = logging.getLogger(__name__)

# Ledger ids taken per round trip (2 operations each): unused ones are gaps, as a failed create leaves in Java.
ID_BATCH = 16


@dataclass(frozen=True)
class EtcdSettings:
    """What the etcd client takes from the configuration (docs/etcd.md): the call bound (zkTimeout), TLS files
    and etcd's user authentication."""

    timeout_s: float = 10.0
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_conf(cls, conf) -> EtcdSettings:
        if conf is None:
            return cls()
        return cls(conf.zk_timeout_ms / 1000.0, conf.etcd_tls_ca_file, conf.etcd_tls_cert_file,
                   conf.etcd_tls_key_file, conf.etcd_user, conf.etcd_password)

    def client(self, uri: str, timeout_s: float | None = None) -> EtcdKV:
        """The EtcdKV of an etcd metadata service URI (https when the URI or a CA file says so)."""
        parsed = parse_etcd_uri(uri)
        protocol = "https" if self.ca_file or parsed.protocol == "https" else "http"
        return EtcdKV(list(parsed.endpoints), protocol=protocol, ca_cert=self.ca_file, cert_file=self.cert_file,
                      key_file=self.key_file, user=self.user, password=self.password,
                      timeout_s=timeout_s if timeout_s is not None else self.timeout_s)


def etcd_client_from_conf(uri: str, conf=None, timeout_s: float | None = None) -> EtcdKV:
    """The EtcdKV of an etcd metadata service URI; TLS and user/password from the conf (`etcdTlsCaFile`,
    `etcdTlsCertFile`, `etcdTlsKeyFile`, `etcdUser`, `etcdPassword`), the timeout from zkTimeout."""
    return EtcdSettings.from_conf(conf).client(uri, timeout_s)


class EtcdMetadataDriver(EtcdStreamStore, PooledDriver, MetadataDriver):
    """``etcd://host:port[,host:port]/<scope>``. `lease_ttl_s` is the lifetime of this driver's registrations,
    locks and votes once it stops renewing them (default: zkTimeout in seconds, as Java's etcd driver)."""

    def __init__(self, uri: str, conf=None, operation_timeout_s: float | None = None,
                 lease_ttl_s: int | None = None, max_threads: int = 16, zk_timeout_s: float | None = None):
        self.uri = uri
        self.scope = parse_etcd_uri(uri).scope
        self.keys = EtcdKeys(self.scope)
        self._settings = settings = EtcdSettings.from_conf(conf)
        if zk_timeout_s is None and conf is not None:
            zk_timeout_s = settings.timeout_s
        self.operation_timeout_s = operation_timeout_s or zk_timeout_s
        self.lease_ttl_s = int(lease_ttl_s or zk_timeout_s or 10)
        self.kv: EtcdKV | None = None
        self._session: EtcdSession | None = None
        self._init_pool("etcd-meta", f"etcd-meta-{self.scope}", max_threads)
        self._watches: list[EtcdWatch] = []
        self._closables: list[Any] = []
        self._next_bucket = random.randrange(NUM_BUCKETS)
        self._prefetched_ids: collections.deque[int] = collections.deque()
        self._bucket_lock = threading.Lock()

    # --- plumbing ---------------------------------------------------------------------------------------
    def _kv(self) -> EtcdKV:
        assert self.kv is not None, "operations run only after start()"
        return self.kv

    def session(self) -> EtcdSession:
        """This driver's lease (granted on first use: a client that never registers holds none)."""
        if self._session is None:
            self._session = EtcdSession(self._kv(), self.lease_ttl_s)
        return self._session

    # --- lifecycle --------------------------------------------------------------------------------------
    def _start_blocking(self) -> None:
        self.kv = self._settings.client(self.uri, self.operation_timeout_s)
        layout = self.kv.get(self.keys.layout)
        if layout is None:
            raise MetadataError(f"no layout at {self.keys.layout.decode()}: cluster not initialized (run `bkfast "
                                f"shell initnewcluster`) [metadata service {self.uri}]")
        check_etcd_layout(layout.value, self.keys.layout.decode())
        log.info("metadata driver connected to etcd %s (scope %s)", self.kv.describe(), self.scope)

    def _before_close(self) -> None:
        for watch in self._watches:
            watch.cancel()

    def _close_blocking(self) -> None:
        for closable in self._closables:
            closable.close()
        self._unregister_all()
        if self._session is not None:
            self._session.close()
        if self.kv is not None:
            self.kv.close()

    # --- ledger ids ---------------------------------------------------------------------------------------
    def generate_ledger_id(self) -> defer.Deferred:
        return self._in_pool(self._generate_blocking)

    def _generate_blocking(self) -> int:
        with self._bucket_lock:
            if not self._prefetched_ids:
                self._prefetched_ids.extend(self._allocate_ids(ID_BATCH))
            return self._prefetched_ids.popleft()

    def _allocate_ids(self, count: int) -> list[int]:
        """Java's Etcd64bitIdGenerator, `count` buckets at once: the next buckets in turn, each put once in one
        transaction; an id is its bucket's version after the put. One round trip for `count` ids, which are
        exactly the ids `count` calls of Java's generator would have taken."""
        for _ in range(NUM_BUCKETS):
            buckets = [(self._next_bucket + 1 + n) % NUM_BUCKETS for n in range(count)]
            self._next_bucket = buckets[-1]
            ops = [op for b in buckets for op in (op_put(self.keys.bucket(b), b""), op_get(self.keys.bucket(b)))]
            result = self._kv().txn([], ops, what="generate ledger ids")
            ids = [bucket_ledger_id(b, got[0].version) for b, got in zip(buckets, result.ranges(), strict=True)
                   if got and got[0].version <= MAX_ID_PER_BUCKET]
            if ids:
                return ids
            log.warning("etcd buckets %s..%s are full; trying the next", buckets[0], buckets[-1])
        raise BKMetaStoreException(f"every ledger id bucket under {self.keys.buckets_dir.decode()} is full")

    # --- ledger metadata ------------------------------------------------------------------------------
    def _create_blocking(self, ledger: LedgerId, metadata: LedgerMetadata, data: bytes) -> Versioned:
        key = self.keys.ledger(ledger)
        result = self._kv().txn([cmp_absent(key)], [op_put(key, data)], [op_get(key)], what=f"create ledger {ledger}")
        if result.succeeded:
            log.info("ledger %s: created metadata at %s", ledger, key.decode())
            return Versioned(metadata, 0)
        found = result.ranges()[0]
        if found:
            existing = _versioned(ledger, found[0])
            if metadata.metadata_format_version > 2 and existing.metadata.c_token == metadata.c_token:
                log.info("ledger %s: create found our own metadata at %s (cToken match): created", ledger, key.decode())
                return existing
        raise BKLedgerExistException(f"ledger {ledger}: metadata already exists at {key.decode()}")

    def _read_blocking(self, ledger: LedgerId) -> Versioned:
        key = self.keys.ledger(ledger)
        kv = self._kv().get(key)
        if kv is None:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata at {key.decode()}")
        return _versioned(ledger, kv)

    def read_many_ledger_metadata(self, ledgers: Iterable[LedgerId]) -> defer.Deferred:
        return self._in_pool(self._read_many_blocking, list(ledgers))

    def _read_many_blocking(self, ledgers: list[LedgerId]) -> dict[LedgerId, Versioned]:
        return {ledger: _versioned(ledger, kv) for ledger, kv in self._get_many(ledgers).items()}

    def _get_many(self, ledgers: list[LedgerId], keys_only: bool = False) -> dict[LedgerId, KeyValue]:
        """One transaction of reads per MAX_TXN_OPS ledgers: a snapshot per batch, one round trip each."""
        found: dict[LedgerId, KeyValue] = {}
        for start in range(0, len(ledgers), MAX_TXN_OPS):
            batch = ledgers[start:start + MAX_TXN_OPS]
            reads = [op_get(self.keys.ledger(ledger), keys_only=keys_only) for ledger in batch]
            result = self._kv().txn([], reads, what=f"read {len(batch)} ledgers")
            for ledger, kvs in zip(batch, result.ranges(), strict=True):
                if kvs:
                    found[ledger] = kvs[0]
        return found

    def _write_blocking(self, ledger, metadata, data, expected_version) -> Versioned:
        key = self.keys.ledger(ledger)
        result = self._kv().txn([_cmp_version(key, expected_version)], [op_put(key, data)], [op_get(key)],
                                what=f"write ledger {ledger}")
        if not result.succeeded:
            self._refuse_version(ledger, key, result.ranges()[0], expected_version)
        new_version = expected_version + 1                   # the compare held: exactly one put since
        log.info("ledger %s: metadata version %d -> %d (%s)", ledger, expected_version, new_version,
                 metadata.state.name)
        return Versioned(metadata, new_version)

    @staticmethod
    def _refuse_version(ledger: LedgerId, key: bytes, found: list[KeyValue], expected_version: int):
        if not found:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata at {key.decode()}")
        raise BKMetadataVersionException(f"ledger {ledger}: metadata at {key.decode()} is no longer at version "
                                         f"{expected_version} (it is at {found[0].version - 1})")

    def _remove_blocking(self, ledger: LedgerId, expected_version: int) -> None:
        key = self.keys.ledger(ledger)
        compare = _cmp_version(key, expected_version) if expected_version >= 0 else cmp_present(key)
        result = self._kv().txn([compare], [op_delete(key)], [op_get(key)], what=f"remove ledger {ledger}")
        if not result.succeeded:
            self._refuse_version(ledger, key, result.ranges()[0], expected_version)
        log.info("ledger %s: removed metadata at %s", ledger, key.decode())

    # --- listing --------------------------------------------------------------------------------------
    def _all_ledger_keys(self) -> list[LedgerId]:
        start, end = EtcdKeys.children(self.keys.ledgers_dir)
        kvs, _ = self._kv().range(start, end, keys_only=True)
        out = []
        for kv in kvs:
            try:
                out.append(parse_ledger_uuid(kv.key[len(start):].decode()))
            except ValueError:
                log.warning("ignoring %r under %s: not a ledger key", kv.key, self.keys.ledgers_dir.decode())
        return out

    def list_ledgers(self, scope_id: int = 0) -> defer.Deferred:
        return self._in_pool(lambda: sorted(lid.ledger_id for lid in self._all_ledger_keys()
                                            if lid.scope_id == scope_id))

    def list_scopes(self) -> defer.Deferred:
        return self._in_pool(lambda: sorted({lid.scope_id for lid in self._all_ledger_keys()} - {0}))

    def ledgers_exist(self, ledgers: Iterable[LedgerId]) -> defer.Deferred:
        return self._in_pool(lambda: set(self._get_many(list(ledgers), keys_only=True)))

    # --- watches ----------------------------------------------------------------------------------------
    def _watch(self, key: bytes, end: bytes | None, on_events, on_reset) -> Cancel:
        self._check_open()
        watch = self._kv().watch(key, end, on_events, on_reset)
        self._watches.append(watch)

        def cancel():
            watch.cancel()
            if watch in self._watches:
                self._watches.remove(watch)
        return cancel

    def watch_ledger_metadata(self, ledger: LedgerId, listener: Callable[[Versioned | None], None]) -> Cancel:
        key = self.keys.ledger(ledger)
        state: dict[str, Any] = {"delivered": (), "done": False}

        def deliver(value):                                  # reactor thread
            if state["done"]:
                return
            if value is None:
                cancel()
            listener(value)

        def offer(kv: KeyValue | None):                      # the watch's thread
            version = None if kv is None else kv.version
            if version == state["delivered"] or state["done"]:
                return
            state["delivered"] = version
            try:
                value = None if kv is None else _versioned(ledger, kv)
            except LedgerMetadataFormatError as e:
                log.warning("ledger %s: watched metadata does not parse: %s", ledger, e)
                return
            reactor.callFromThread(deliver, value)

        def on_reset() -> int:
            kvs, revision = self._kv().range(key, None)
            offer(kvs[0] if kvs else None)
            return revision

        def on_events(events: list[WatchEvent]):
            for event in events:
                offer(None if event.deleted else event.kv)

        cancel_watch = self._watch(key, None, on_events, on_reset)

        def cancel():
            state["done"] = True
            cancel_watch()
        return cancel

    # --- bookies ----------------------------------------------------------------------------------------
    def get_bookies(self, read_only: bool = False) -> defer.Deferred:
        return self._in_pool(self._bookies_blocking, read_only)

    def _bookies_blocking(self, read_only: bool) -> dict[str, BookieInfo]:
        start, end = EtcdKeys.children(self.keys.bookies(read_only))
        kvs, _ = self._kv().range(start, end)
        return self._bookie_infos(kvs, start, read_only)

    @staticmethod
    def _bookie_infos(kvs: list[KeyValue], prefix: bytes, read_only: bool) -> dict[str, BookieInfo]:
        out = {}
        for kv in kvs:
            name = kv.key[len(prefix):].decode()
            info = bookie_info_from_data(name, kv.value, read_only)
            if info is not None:
                out[name] = info
        return out

    def watch_bookies(self, listener: Callable[[dict, dict], None]) -> Cancel:
        bookies = self.keys.bookies_dir
        writable_prefix = EtcdKeys.children(self.keys.bookies(False))[0]
        read_only_prefix = EtcdKeys.children(self.keys.bookies(True))[0]
        state: dict[str, Any] = {"last": None, "cancelled": False}

        def deliver(result):                                 # reactor thread
            if not state["cancelled"] and not self._closed:
                listener(*result)

        def on_reset() -> int:                               # the watch's thread: read both lists, one snapshot
            kvs, revision = self._kv().range(*EtcdKeys.children(bookies))
            writable = self._bookie_infos([kv for kv in kvs if kv.key.startswith(writable_prefix)],
                                          writable_prefix, False)
            read_only = self._bookie_infos([kv for kv in kvs if kv.key.startswith(read_only_prefix)],
                                           read_only_prefix, True)
            if (writable, read_only) != state["last"]:
                state["last"] = (writable, read_only)
                log.info("bookies changed: writable %s, read-only %s", sorted(writable), sorted(read_only))
                reactor.callFromThread(deliver, (writable, read_only))
            return revision

        cancel_watch = self._watch(*EtcdKeys.children(bookies), lambda events: on_reset(), on_reset)

        def cancel():
            state["cancelled"] = True
            cancel_watch()
        return cancel

    def register_bookie(self, bookie_id: str, service_info: bytes, read_only: bool = False) -> defer.Deferred:
        return self._in_pool(self._register_blocking, bookie_id, bytes(service_info), read_only)

    def _register_blocking(self, bookie_id: str, service_info: bytes, read_only: bool) -> None:
        reg = self._registrations.get(bookie_id)
        if reg is None or reg.service_info != service_info:
            if reg is not None:
                reg.unregister()
            reg = EtcdBookieRegistration(self._kv(), self.keys, self.session(), bookie_id, service_info)
            self._registrations[bookie_id] = reg
        reg.register(read_only)

    def bookie_cookie_exists(self, bookie_id: str) -> defer.Deferred:
        return self._in_pool(lambda: self._kv().get(self.keys.cookie(bookie_id)) is not None)

    def delete_bookie_cookie(self, bookie_id: str) -> defer.Deferred:
        def delete() -> bool:
            gone = self._kv().delete(self.keys.cookie(bookie_id)) > 0
            if gone:
                log.info("cookie of bookie %s deleted (%s)", bookie_id, self.keys.cookie(bookie_id).decode())
            return gone
        return self._in_pool(delete)

    # --- AutoRecovery (bkfast's addition: Java's etcd driver has none) ------------------------------------
    def under_replication(self, *, store_ctime: bool = True, lock_holder: str | None = None):
        from .etcd_underreplication import EtcdUnderReplicationManager

        self._check_started()
        manager = EtcdUnderReplicationManager(self._kv(), self.keys, self.session(), store_ctime=store_ctime,
                                              lock_holder=lock_holder)
        self._closables.append(manager)
        return manager

    def auditor_election(self, bookie_id: str | None = None):
        from .etcd_underreplication import EtcdAuditorElection

        self._check_started()
        election = EtcdAuditorElection(self._kv(), self.keys, self.session(), bookie_id)
        self._closables.append(election)
        return election

    def _check_started(self) -> None:
        self._check_open()
        if self.kv is None:
            raise BKMetaStoreException(f"metadata driver {self.uri} is not started")


# --- helpers ---------------------------------------------------------------------------------------------

def _cmp_version(key: bytes, version: int) -> dict:
    """Holds when the key is at our `version` (etcd's put count minus one, the znode-like version)."""
    return cmp_put_count(key, version + 1)


def _versioned(ledger: LedgerId, kv: KeyValue) -> Versioned:
    try:
        return Versioned(parse_metadata(kv.value), kv.version - 1)
    except LedgerMetadataFormatError as e:
        raise LedgerMetadataFormatError(f"ledger {ledger}: metadata at {kv.key.decode()} is corrupt: {e}") from None
