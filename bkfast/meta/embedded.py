"""MetadataDriver for one process: ``embedded:///abs/path/dir``, persisted with rocksdict (RocksDB).

Same semantics as the ZooKeeper driver (versions for CAS, cToken rule, listing per scope, watches,
bookie registry) for the sandbox and tests of single parts. Ledger metadata is stored as format-3 bytes
with its version; the ledger id counter is persisted; both survive a reopen. All drivers opened on the
same directory in one process share one store (module-level registry, reference counted), so a second
client sees the first's ledgers and watch notifications. Bookie registrations are NOT persisted: like
ZooKeeper ephemerals they vanish when the driver that made them closes. Every operation runs in the
reactor thread (RocksDB calls here take microseconds); listeners are called via ``reactor.callLater(0)``,
never re-entrantly, in the order the changes happened.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterable
from typing import cast
from urllib.parse import unquote, urlsplit

from rocksdict import Options, Rdict, ReadOptions, WriteOptions
from twisted.internet import defer, reactor

from bkfast.errors import (
    BKError,
    BKLedgerExistException,
    BKMetadataVersionException,
    BKMetaStoreException,
    BKNoSuchLedgerExistsException,
    MetadataError,
)
from bkfast.ids import LedgerId

from .driver import BookieInfo, Cancel, MetadataDriver, Versioned
from .embedded_replication import EmbeddedAuditorElection, EmbeddedUnderReplicationManager, ReplicationState
from .ledger_metadata import (
    LedgerMetadata,
    LedgerMetadataFormatError,
    new_ctoken,
    parse_metadata,
    serialize_metadata,
)
from .registration import bookie_info_from_data
from .stream_store import EmbeddedStreamStore

__all__ = ["EmbeddedMetadataDriver", "open_stores"]

log = logging.getLogger(__name__)

_LEDGER = b"L"                 # b"L" + scope (8 BE) + ledger id (8 BE) -> version (8 BE) + v3 metadata bytes
_COUNTER = b"C:next-ledger-id"  # -> first scope-0 ledger id not yet reserved (8 BE)
_ID_BLOCK = 1000
_KEY = struct.Struct(">QQ")
_VERSION = struct.Struct(">q")


def _key(ledger: LedgerId) -> bytes:
    return _LEDGER + _KEY.pack(ledger.scope_id, ledger.ledger_id)


class _Store:
    """One open RocksDB plus the in-memory state every driver on that directory shares."""

    def __init__(self, path: str):
        self.path = path
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = Rdict(path, opts)
        self.sync = WriteOptions()
        self.sync.sync = True
        self.refs = 0
        self.next_id: int | None = None     # id counter state (loaded on first use)
        self.reserved_until = 0
        self.watchers: dict[LedgerId, list[dict]] = {}
        self.bookie_watchers: list[dict] = []
        self.bookies: dict[str, tuple[bytes, bool, object]] = {}   # id -> (service info, read-only, owner)
        self.replication = ReplicationState(self.db, self.sync)
        self._queue: list[tuple[Callable, tuple]] = []
        self._scheduled = False

    # Notifications: one FIFO drained by a single callLater(0), so listeners see changes in order.
    def notify(self, fn: Callable, *args) -> None:
        self._queue.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            # Twisted's zope interfaces declare their methods without self, which mypy (no mypy-zope plugin) misreads.
            reactor.callLater(0, self._drain)  # type: ignore[arg-type]

    def _drain(self) -> None:
        self._scheduled = False
        queue, self._queue = self._queue, []
        for fn, args in queue:
            try:
                fn(*args)
            except Exception:
                log.exception("metadata listener %r failed", fn)

    def ledger_changed(self, ledger: LedgerId, value: Versioned | None) -> None:
        for w in list(self.watchers.get(ledger, ())):
            self.notify(_deliver_ledger, w, value)
        if value is None:
            self.watchers.pop(ledger, None)

    def bookies_snapshot(self) -> tuple[dict, dict]:
        writable: dict[str, BookieInfo] = {}
        read_only: dict[str, BookieInfo] = {}
        for bid, (data, ro, _owner) in sorted(self.bookies.items()):
            info = bookie_info_from_data(bid, data, ro)
            if info is not None:
                (read_only if ro else writable)[bid] = info
        return writable, read_only

    def bookies_changed(self) -> None:
        snapshot = self.bookies_snapshot()
        for w in list(self.bookie_watchers):
            self.notify(_deliver_bookies, w, snapshot)

    def close(self) -> None:
        self.db.close()


_STORES: dict[str, _Store] = {}


def open_stores() -> dict[str, int]:
    """Directories with an open store and their reference counts (for tests and diagnostics)."""
    return {path: store.refs for path, store in _STORES.items()}


def _deliver_ledger(w: dict, value: Versioned | None) -> None:
    if w["cancelled"]:
        return
    if value is None:
        w["cancelled"] = True
    elif value.version == w["version"]:
        return
    else:
        w["version"] = value.version
    w["listener"](value)


def _deliver_bookies(w: dict, snapshot: tuple[dict, dict]) -> None:
    if w["cancelled"] or snapshot == w["last"]:
        return
    w["last"] = snapshot
    w["listener"](*snapshot)


def _path_from_uri(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.scheme.lower() != "embedded":
        raise MetadataError(f"not an embedded metadata URI: {uri!r} (expected embedded:///abs/path/dir)")
    path = unquote(parts.path)
    if parts.netloc or not os.path.isabs(path):
        raise MetadataError(f"embedded metadata URI {uri!r} must name an absolute directory: embedded:///abs/path")
    return os.path.realpath(path)


class EmbeddedMetadataDriver(EmbeddedStreamStore, MetadataDriver):
    """``embedded:///abs/path/dir``; see the module docstring."""

    def __init__(self, uri: str, conf=None, **_options):
        self.uri = uri
        self.path = _path_from_uri(uri)
        self._store: _Store | None = None
        self._watches: list[dict] = []
        self._closed = False

    @staticmethod
    def _run_store(fn, *args) -> defer.Deferred:
        """A store operation run now, as a fired Deferred (for the mixins, e.g. EmbeddedStreamStore)."""
        return _run(fn, *args)

    # --- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> defer.Deferred:
        if self._store is not None:
            return defer.succeed(self)
        if self._closed:
            return defer.fail(BKMetaStoreException(f"metadata driver {self.uri} is closed"))
        store = _STORES.get(self.path)
        if store is None:
            try:
                os.makedirs(self.path, exist_ok=True)
                store = _Store(self.path)
            except Exception as e:
                if "lock" in str(e).lower():
                    # RocksDB's LOCK: another process (a running sandbox) has this store open.
                    return defer.fail(BKMetaStoreException(
                        f"the embedded metadata store at {self.path} is in use by another process: embedded "
                        "metadata serves one process; start the sandbox with --zk and use its zk+hierarchical:// "
                        "URI to connect from other processes"))
                return defer.fail(BKMetaStoreException(f"cannot open the embedded metadata store at {self.path}: {e}"))
            _STORES[self.path] = store
            log.info("embedded metadata store opened at %s", self.path)
        store.refs += 1
        self._store = store
        return defer.succeed(self)

    def close(self) -> defer.Deferred:
        store, self._store = self._store, None
        self._closed = True
        if store is None:
            return defer.succeed(None)
        for w in self._watches:
            w["cancelled"] = True
        for watchers in store.watchers.values():
            watchers[:] = [w for w in watchers if not w["cancelled"]]
        store.bookie_watchers[:] = [w for w in store.bookie_watchers if not w["cancelled"]]
        mine = [bid for bid, (_d, _ro, owner) in store.bookies.items() if owner is self]
        for bid in mine:
            del store.bookies[bid]
            log.info("bookie %s unregistered (its driver closed)", bid)
        if mine:
            store.bookies_changed()
        store.replication.release_owner(self)
        store.refs -= 1
        if store.refs == 0:
            _STORES.pop(store.path, None)
            store.close()
            log.info("embedded metadata store closed at %s", store.path)
        return defer.succeed(None)

    def _db(self) -> _Store:
        if self._store is None:
            raise BKMetaStoreException(f"metadata driver {self.uri} is {'closed' if self._closed else 'not started'}")
        return self._store

    # --- ledgers ------------------------------------------------------------------------------------
    def generate_ledger_id(self) -> defer.Deferred:
        return _run(self._generate)

    def _generate(self) -> int:
        """Ids come from a block reserved durably ahead (one fsync per _ID_BLOCK ids); a reopen continues
        after the reserved block, so ids stay unique and increasing, with gaps (as in ZooKeeper)."""
        store = self._db()
        if store.next_id is None:
            raw = store.db.get(_COUNTER)
            store.next_id = store.reserved_until = _KEY.unpack(raw)[1] if raw else 0
        if store.next_id >= store.reserved_until:
            store.reserved_until = store.next_id + _ID_BLOCK
            store.db.put(_COUNTER, _KEY.pack(0, store.reserved_until), write_opt=store.sync)
        lid = store.next_id
        store.next_id += 1
        return lid

    def _get(self, store: _Store, ledger: LedgerId) -> Versioned | None:
        raw = store.db.get(_key(ledger))
        if raw is None:
            return None
        version = _VERSION.unpack_from(raw)[0]
        try:
            return Versioned(parse_metadata(raw[_VERSION.size:]), version)
        except LedgerMetadataFormatError as e:
            raise LedgerMetadataFormatError(
                f"ledger {ledger}: stored metadata in {self.path} is corrupt: {e}") from None

    def _put(self, store: _Store, ledger: LedgerId, metadata: LedgerMetadata, version: int) -> Versioned:
        data = serialize_metadata(metadata, metadata.metadata_format_version)
        store.db.put(_key(ledger), _VERSION.pack(version) + data, write_opt=store.sync)
        value = Versioned(metadata, version)
        store.ledger_changed(ledger, value)
        return value

    def create_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata) -> defer.Deferred:
        return _run(self._create, ledger, metadata)

    def _create(self, ledger: LedgerId, metadata: LedgerMetadata) -> Versioned:
        store = self._db()
        if metadata.metadata_format_version > 2 and not metadata.c_token:
            metadata = metadata.replace(c_token=new_ctoken())
        existing = self._get(store, ledger)
        if existing is not None:
            if metadata.metadata_format_version > 2 and existing.metadata.c_token == metadata.c_token:
                log.info("ledger %s: create found our own metadata (cToken match): created", ledger)
                return existing
            raise BKLedgerExistException(f"ledger {ledger}: metadata already exists in {self.path}")
        value = self._put(store, ledger, metadata, 0)
        log.info("ledger %s: created metadata in %s", ledger, self.path)
        return value

    def read_ledger_metadata(self, ledger: LedgerId) -> defer.Deferred:
        return _run(self._read, ledger)

    def _read(self, ledger: LedgerId) -> Versioned:
        value = self._get(self._db(), ledger)
        if value is None:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata in {self.path}")
        return value

    def write_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata,
                              expected_version: int) -> defer.Deferred:
        return _run(self._write, ledger, metadata, expected_version)

    def _write(self, ledger: LedgerId, metadata: LedgerMetadata, expected_version: int) -> Versioned:
        store = self._db()
        current = self._read(ledger)
        if expected_version != -1 and current.version != expected_version:
            raise BKMetadataVersionException(
                f"ledger {ledger}: metadata is at version {current.version}, not {expected_version}")
        value = self._put(store, ledger, metadata, current.version + 1)
        log.info("ledger %s: metadata version %d -> %d (%s)", ledger, current.version, value.version,
                 metadata.state.name)
        return value

    def remove_ledger_metadata(self, ledger: LedgerId, expected_version: int = -1) -> defer.Deferred:
        return _run(self._remove, ledger, expected_version)

    def _remove(self, ledger: LedgerId, expected_version: int) -> None:
        store = self._db()
        raw = store.db.get(_key(ledger))
        if raw is None:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata in {self.path}")
        version = _VERSION.unpack_from(raw)[0]
        if expected_version != -1 and version != expected_version:
            raise BKMetadataVersionException(
                f"ledger {ledger}: metadata is at version {version}, not {expected_version}")
        store.db.delete(_key(ledger), write_opt=store.sync)
        store.ledger_changed(ledger, None)
        log.info("ledger %s: removed metadata from %s", ledger, self.path)

    def list_ledgers(self, scope_id: int = 0) -> defer.Deferred:
        return _run(self._list, scope_id)

    def _list(self, scope_id: int) -> list[int]:
        store = self._db()
        prefix = _LEDGER + struct.pack(">Q", scope_id)
        ro = ReadOptions()
        if scope_id < 2**64 - 1:
            ro.set_iterate_upper_bound(_LEDGER + struct.pack(">Q", scope_id + 1))
        else:
            ro.set_iterate_upper_bound(b"M")
        ids = []
        for key in cast("Iterable[bytes]", store.db.keys(from_key=prefix, read_opt=ro)):   # raw_mode: bytes
            if not key.startswith(prefix):
                break
            ids.append(_KEY.unpack(key[1:])[1])
        return ids

    def list_scopes(self) -> defer.Deferred:
        return _run(self._list_scopes)

    def _list_scopes(self) -> list[int]:
        """Each scope's first key, then a seek past that scope: one step per scope, not per ledger."""
        db = self._db().db
        scopes = []
        scope = 1
        while scope < 2**64:
            ro = ReadOptions()
            ro.set_iterate_upper_bound(b"M")
            keys = cast("Iterable[bytes]", db.keys(from_key=_LEDGER + struct.pack(">Q", scope), read_opt=ro))
            key = next(iter(keys), None)                                 # raw_mode: keys are bytes
            if key is None or not key.startswith(_LEDGER):
                break
            scope = _KEY.unpack(key[1:])[0]
            scopes.append(scope)
            scope += 1
        return scopes

    def ledgers_exist(self, ledgers: Iterable[LedgerId]) -> defer.Deferred:
        return _run(self._exist, list(ledgers))

    def _exist(self, ledgers: list[LedgerId]) -> set[LedgerId]:
        store = self._db()
        if not ledgers:
            return set()
        found = cast("list[bytes | None]", store.db.get([_key(ledger) for ledger in ledgers]))  # a list in, a list out
        return {ledger for ledger, raw in zip(ledgers, found, strict=True) if raw is not None}

    def watch_ledger_metadata(self, ledger: LedgerId, listener: Callable[[Versioned | None], None]) -> Cancel:
        store = self._db()
        w = {"cancelled": False, "version": None, "listener": listener}
        self._watches.append(w)
        try:
            current = self._get(store, ledger)
        except LedgerMetadataFormatError as e:
            log.warning("%s", e)
            current = None
        if current is not None:
            store.watchers.setdefault(ledger, []).append(w)
        store.notify(_deliver_ledger, w, current)

        def cancel():
            w["cancelled"] = True
            watchers = store.watchers.get(ledger)
            if watchers and w in watchers:
                watchers.remove(w)
        return cancel

    # --- AutoRecovery (bkfast.meta.embedded_replication) ---------------------------------------------
    def under_replication(self, *, store_ctime: bool = True, lock_holder: str | None = None):
        return EmbeddedUnderReplicationManager(self._db().replication, self, store_ctime=store_ctime,
                                               lock_holder=lock_holder)

    def auditor_election(self, bookie_id: str | None = None):
        return EmbeddedAuditorElection(self._db().replication, self, bookie_id)

    # --- bookies ------------------------------------------------------------------------------------
    def get_bookies(self, read_only: bool = False) -> defer.Deferred:
        return _run(lambda: self._db().bookies_snapshot()[1 if read_only else 0])

    def watch_bookies(self, listener: Callable[[dict, dict], None]) -> Cancel:
        store = self._db()
        w = {"cancelled": False, "last": None, "listener": listener}
        self._watches.append(w)
        store.bookie_watchers.append(w)
        store.notify(_deliver_bookies, w, store.bookies_snapshot())

        def cancel():
            w["cancelled"] = True
            if w in store.bookie_watchers:
                store.bookie_watchers.remove(w)
        return cancel

    def register_bookie(self, bookie_id: str, service_info: bytes, read_only: bool = False) -> defer.Deferred:
        return _run(self._register, bookie_id, bytes(service_info), read_only)

    def _register(self, bookie_id: str, service_info: bytes, read_only: bool) -> None:
        store = self._db()
        existing = store.bookies.get(bookie_id)
        if existing is not None and existing[2] is not self:
            raise MetadataError(f"bookie id {bookie_id} is already registered by another driver on {self.path}; "
                                "is another bookie running with the same id?")
        store.bookies[bookie_id] = (service_info, read_only, self)
        log.info("bookie %s registered (%s) in %s", bookie_id, "read-only" if read_only else "writable", self.path)
        store.bookies_changed()

    def unregister_bookie(self, bookie_id: str) -> defer.Deferred:
        return _run(self._unregister, bookie_id)

    def _unregister(self, bookie_id: str) -> None:
        store = self._db()
        existing = store.bookies.get(bookie_id)
        if existing is None or existing[2] is not self:
            log.info("bookie %s: unregister requested but this driver did not register it", bookie_id)
            return
        del store.bookies[bookie_id]
        log.info("bookie %s unregistered from %s", bookie_id, self.path)
        store.bookies_changed()


def _run(fn, *args) -> defer.Deferred:
    """Run a store operation now (reactor thread); its result or error as an already-fired Deferred."""
    try:
        return defer.succeed(fn(*args))
    except (BKError, MetadataError) as e:
        return defer.fail(e)
    except Exception as e:                        # RocksDB trouble: say which store
        return defer.fail(BKMetaStoreException(f"embedded metadata store {fn.__name__} failed: {e!r}"))
