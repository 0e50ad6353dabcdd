"""MetadataDriver over ZooKeeper (kazoo), byte-compatible with Java BookKeeper's tree (spec §5.1-§5.4).

Owns: ledger metadata CRUD with znode versions (CAS), ledger id generation (idgen / idgen-long HOB
scheme, §5.2), ledger listing, metadata watches, bookie discovery and registration. Blocking kazoo calls
run on this driver's own thread pool, never in the reactor; every result and every listener is delivered
in the reactor thread. Each ZooKeeper operation is retried with backoff (KazooRetry) across connection
loss and session expiry and fails with BKZKException once `operation_timeout_s` has passed. Watches
(kazoo DataWatch / ChildrenWatch) re-arm themselves after a session expiry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError
from twisted.internet import defer, threads
from twisted.internet import reactor as global_reactor

from bkfast.errors import (
    BKLedgerExistException,
    BKMetadataVersionException,
    BKNoSuchLedgerExistsException,
    BKZKException,
    MetadataError,
)
from bkfast.ids import LedgerId
from bkfast.threads import ZK, start_thread

from . import ledger_paths as lp
from .driver import BookieInfo, Cancel, MetadataDriver, Versioned
from .ledger_metadata import (
    LedgerMetadata,
    LedgerMetadataFormatError,
    parse_metadata,
)
from .pooled_driver import PooledDriver
from .registration import BookieRegistration, bookie_info_from_data
from .stream_store import ZkStreamStore
from .zk_idgen import IDGEN_LONG, ZkIdGeneration
from .zk_layout import (
    AVAILABLE,
    COOKIES,
    LAYOUT,
    READONLY,
    parse_layout,
    parse_metadata_service_uri,
    zk_path,
)

__all__ = ["ZkMetadataDriver", "IDGEN_LONG"]

# The global reactor provides every IReactor* interface; Twisted types it as only one of them.
reactor: Any = global_reactor

log = logging.getLogger(__name__)

_RETRYABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError, RetryFailedError,
              ConnectionClosedError)


def zk_timeout_from_conf(conf) -> float:
    """zkTimeout in seconds (10 without a configuration)."""
    zk_ms = conf.get("zkTimeout") if conf is not None else None
    return zk_ms / 1000.0 if zk_ms else 10.0


class ZkMetadataDriver(ZkIdGeneration, ZkStreamStore, PooledDriver, MetadataDriver):
    """``zk+<layout>://host:port[,host:port]/ledgers`` (``;`` also separates hosts). The cluster's LAYOUT
    znode decides the layout; the URI's layout is only a hint. Pass `client` to share a started
    KazooClient (it is then not stopped by close())."""

    def __init__(self, uri: str, zk_timeout_s: float | None = None, operation_timeout_s: float | None = None,
                 client: KazooClient | None = None, conf=None, max_threads: int = 8, stats=None):
        self.uri = uri
        self._stats = stats          # a StatsLogger: its own session records Java's ZooKeeper client stats
        self.hosts, self.root, self.uri_layout = parse_metadata_service_uri(uri)
        if zk_timeout_s is None:
            zk_timeout_s = zk_timeout_from_conf(conf)
        self.zk_timeout_s = float(zk_timeout_s)
        self.operation_timeout_s = float(operation_timeout_s if operation_timeout_s is not None else zk_timeout_s)
        self.layout = self.uri_layout
        self.short_id_limit = lp.SHORT_ID_LIMIT      # Java's Integer.MAX_VALUE; lowered only by tests
        self.zk = client
        self._own_client = client is None
        self._init_pool(f"{ZK}-meta", f"bk-zk-meta-{self.root}", max_threads)
        self._idgen_lock = threading.Lock()
        self._local = threading.local()
        self._long_ids: bool | None = None           # idgen-long present? (None = not checked yet)
        self._hobs: list[str] | None = None          # cached children of idgen-long
        self._watch_flags: list[dict] = []

    # --- plumbing ---------------------------------------------------------------------------------
    _unreachable = BKZKException

    def _zk(self) -> KazooClient:
        """The session of an operation: operations run only once start() has set it."""
        assert self.zk is not None, "operations run only after start() set the session"
        return self.zk

    def _run_in_pool(self, fn, *args):
        """Run one driver operation in a pool thread; all its ZooKeeper calls share one deadline."""
        self._local.deadline = time.monotonic() + self.operation_timeout_s
        try:
            return fn(*args)
        finally:
            self._local.deadline = None

    def _deadline(self) -> float:
        return getattr(self._local, "deadline", None) or time.monotonic() + self.operation_timeout_s

    def _call(self, what: str, method: Callable, *args, **kwargs):
        """Run one kazoo *_async call with retry across connection loss / expiry, bounded in time."""
        deadline = self._deadline()

        def attempt():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KazooTimeoutError(f"no time left for {what}")
            return method(*args, **kwargs).get(timeout=remaining)

        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.05, max_delay=1.0,
                           deadline=max(deadline - time.monotonic(), 0.001), ignore_expire=True)
        try:
            return retry(attempt)
        except _RETRYABLE as e:
            raise BKZKException(f"{what}: ZooKeeper {self.hosts} did not complete it within "
                                f"{self.operation_timeout_s:g} s ({type(e).__name__}: {e})") from None

    def _call_many(self, what: str, method: Callable, paths: list[str], missing=None) -> dict:
        """Pipelined `method(path)` for every path; NoNode -> `missing`. Retries one by one on trouble."""
        deadline = self._deadline()
        pending = [(p, method(p)) for p in paths]
        out = {}
        for path, ar in pending:
            try:
                out[path] = ar.get(timeout=max(deadline - time.monotonic(), 0.001))
            except NoNodeError:
                out[path] = missing
            except _RETRYABLE:
                try:
                    out[path] = self._call(f"{what} {path}", method, path)
                except NoNodeError:
                    out[path] = missing
        return out

    def _path(self, ledger: LedgerId) -> str:
        return lp.ledger_path(self.root, ledger, self.layout)

    # --- lifecycle ----------------------------------------------------------------------------------
    def _start_blocking(self) -> None:
        if self.zk is None:
            from .zk_client import make_zk_client

            self.zk = make_zk_client(self.hosts, self.zk_timeout_s, log_states=False, stats=self._stats,
                                     connection_retry=KazooRetry(max_tries=-1, max_delay=1.0))
            try:
                self.zk.start(timeout=self.operation_timeout_s)
            except KazooTimeoutError:
                self.zk.close()
                raise BKZKException(f"could not connect to ZooKeeper {self.hosts} within "
                                    f"{self.operation_timeout_s:g} s") from None
        layout_path = zk_path(self.root, LAYOUT)
        try:
            data, _ = self._call(f"read {layout_path}", self.zk.get_async, layout_path)
        except NoNodeError:
            raise MetadataError(f"no LAYOUT at {layout_path}: cluster not initialized (run `bkfast shell "
                                f"initnewcluster`) [metadata service {self.uri}]") from None
        layout = parse_layout(data)
        if layout.name not in lp.LAYOUTS:
            raise MetadataError(f"cluster {self.root} uses ledger layout {layout.name!r}, "
                                "which bkfast does not support")
        if layout.name != self.uri_layout:
            log.warning("metadata service %s names layout %s but the cluster's LAYOUT says %s; using %s",
                        self.uri, self.uri_layout, layout.name, layout.name)
        self.layout = layout.name
        log.info("metadata driver connected to %s (root %s, layout %s)", self.hosts, self.root, self.layout)

    def _before_close(self) -> None:
        for flags in self._watch_flags:
            flags["cancelled"] = True

    def _close_blocking(self) -> None:
        self._unregister_all()
        if self._own_client and self.zk is not None:
            self.zk.stop()
            self.zk.close()

    # --- ledger ids ---------------------------------------------------------------------------------
    def generate_ledger_id(self) -> defer.Deferred:
        return self._in_pool(self._generate_blocking)

    # --- ledger metadata ----------------------------------------------------------------------------
    def _create_blocking(self, ledger: LedgerId, metadata: LedgerMetadata, data: bytes) -> Versioned:
        path = self._path(ledger)
        try:
            self._call(f"create ledger {ledger}", self._zk().create_async, path, data, makepath=True)
        except NodeExistsError:
            try:
                existing = self._read_blocking(ledger)
            except BKNoSuchLedgerExistsException:
                existing = None
            if (existing is not None and metadata.metadata_format_version > 2
                    and existing.metadata.c_token == metadata.c_token):
                log.info("ledger %s: create found our own metadata at %s (cToken match): created", ledger, path)
                return existing
            raise BKLedgerExistException(f"ledger {ledger}: metadata already exists at {path}") from None
        log.info("ledger %s: created metadata at %s", ledger, path)
        return Versioned(metadata, 0)

    def _read_blocking(self, ledger: LedgerId) -> Versioned:
        path = self._path(ledger)
        try:
            data, stat = self._call(f"read ledger {ledger}", self._zk().get_async, path)
        except NoNodeError:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata at {path}") from None
        return Versioned(_parse(ledger, path, data), stat.version)

    def read_many_ledger_metadata(self, ledgers: Iterable[LedgerId]) -> defer.Deferred:
        return self._in_pool(self._read_many_blocking, list(ledgers))

    def _read_many_blocking(self, ledgers: list[LedgerId]) -> dict[LedgerId, Versioned]:
        paths = {self._path(ledger): ledger for ledger in ledgers}
        found = self._call_many("read", self._zk().get_async, list(paths), missing=None)
        return {paths[path]: Versioned(_parse(paths[path], path, got[0]), got[1].version)
                for path, got in found.items() if got is not None}

    def _write_blocking(self, ledger, metadata, data, expected_version) -> Versioned:
        path = self._path(ledger)
        try:
            stat = self._call(f"write ledger {ledger}", self._zk().set_async, path, data, version=expected_version)
        except NoNodeError:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata at {path}") from None
        except BadVersionError:
            raise BKMetadataVersionException(
                f"ledger {ledger}: metadata at {path} is no longer at version {expected_version}") from None
        log.info("ledger %s: metadata version %d -> %d (%s)", ledger, expected_version, stat.version,
                 metadata.state.name)
        return Versioned(metadata, stat.version)

    def _remove_blocking(self, ledger: LedgerId, expected_version: int) -> None:
        path = self._path(ledger)
        try:
            self._call(f"remove ledger {ledger}", self._zk().delete_async, path, version=expected_version)
        except NoNodeError:
            raise BKNoSuchLedgerExistsException(f"ledger {ledger}: no metadata at {path}") from None
        except BadVersionError:
            raise BKMetadataVersionException(
                f"ledger {ledger}: metadata at {path} is no longer at version {expected_version}") from None
        log.info("ledger %s: removed metadata at %s", ledger, path)

    # --- listing ------------------------------------------------------------------------------------
    def list_ledgers(self, scope_id: int = 0) -> defer.Deferred:
        return self._in_pool(self._list_blocking, scope_id)

    def _children(self, paths: list[str]) -> dict[str, list[str]]:
        return self._call_many("list", self._zk().get_children_async, paths, missing=[])

    def _list_blocking(self, scope_id: int) -> list[int]:
        if scope_id:
            base = lp.scope_root(self.root, scope_id)
            tops = [c for c in self._children([base])[base] if lp.is_long_top(c)]
            return sorted(self._walk_long(base, tops))
        top_names = [c for c in self._children([self.root])[self.root] if not lp.is_reserved(c)]
        if self.layout == "flat":
            return sorted(i for i in map(lp.id_from_flat, top_names) if i is not None)
        ids = self._walk_short(self.root, [c for c in top_names if lp.is_short_top(c)])
        ids += self._walk_long(self.root, [c for c in top_names if lp.is_long_top(c)])
        return sorted(ids)

    def _walk(self, base: str, tops: list[str], depth: int) -> list[list[str]]:
        """Component lists of every leaf `depth` directory levels below the `tops`."""
        level = [[t] for t in tops]
        for _ in range(depth - 1):
            paths = {"/".join([base, *comps]): comps for comps in level}
            kids = self._children(list(paths))
            level = [[*comps, c] for p, comps in paths.items() for c in kids[p] if lp.is_middle(c)]
        paths = {"/".join([base, *comps]): comps for comps in level}
        kids = self._children(list(paths))
        return [[*comps, c] for p, comps in paths.items() for c in kids[p]]

    def _walk_short(self, base: str, tops: list[str]) -> list[int]:
        ids = (lp.id_from_short(*comps) for comps in self._walk(base, tops, 2))
        return [i for i in ids if i is not None]

    def _walk_long(self, base: str, tops: list[str]) -> list[int]:
        ids = (lp.id_from_long(*comps) for comps in self._walk(base, tops, 4))
        return [i for i in ids if i is not None]

    def list_scopes(self) -> defer.Deferred:
        return self._in_pool(self._list_scopes_blocking)

    def _list_scopes_blocking(self) -> list[int]:
        base = zk_path(self.root, lp.SCOPED)
        scopes = []
        for name in self._children([base])[base]:
            try:
                scopes.append(int(name, 16))
            except ValueError:
                continue
        return sorted(scopes)

    def ledgers_exist(self, ledgers: Iterable[LedgerId]) -> defer.Deferred:
        return self._in_pool(self._exist_blocking, list(ledgers))

    def _exist_blocking(self, ledgers: list[LedgerId]) -> set[LedgerId]:
        by_path = {self._path(ledger): ledger for ledger in ledgers}
        stats = self._call_many("exists", self._zk().exists_async, list(by_path))
        return {by_path[p] for p, stat in stats.items() if stat is not None}

    # --- watches ------------------------------------------------------------------------------------
    def watch_ledger_metadata(self, ledger: LedgerId, listener: Callable[[Versioned | None], None]) -> Cancel:
        path = self._path(ledger)
        flags = {"cancelled": False, "version": None}
        self._watch_flags.append(flags)

        def deliver(value):
            if flags["cancelled"]:
                return
            if value is None:
                flags["cancelled"] = True
            listener(value)

        def on_data(data, stat, event):            # kazoo's thread
            if flags["cancelled"]:
                return False
            if stat is None:
                log.info("ledger %s: metadata at %s deleted (watch ends)", ledger, path)
                reactor.callFromThread(deliver, None)
                return False
            if stat.version == flags["version"]:
                return None
            try:
                value = Versioned(_parse(ledger, path, data), stat.version)
            except LedgerMetadataFormatError as e:
                log.warning("ledger %s: watched metadata does not parse: %s", ledger, e)
                return None
            flags["version"] = stat.version
            reactor.callFromThread(deliver, value)
            return None

        def cancel():
            flags["cancelled"] = True
            if flags in self._watch_flags:
                self._watch_flags.remove(flags)

        self._check_open()
        _start_watch(DataWatch, self.zk, path, on_data)
        return cancel

    # --- bookies ------------------------------------------------------------------------------------
    def _bookies_path(self, read_only: bool) -> str:
        return zk_path(self.root, AVAILABLE, READONLY) if read_only else zk_path(self.root, AVAILABLE)

    def get_bookies(self, read_only: bool = False) -> defer.Deferred:
        return self._in_pool(self._bookies_blocking, read_only)

    def _bookies_blocking(self, read_only: bool) -> dict[str, BookieInfo]:
        base = self._bookies_path(read_only)
        try:
            names = self._call(f"list bookies {base}", self._zk().get_children_async, base)
        except NoNodeError:
            raise MetadataError(f"{base} does not exist: cluster not initialized "
                                "(run `bkfast shell initnewcluster`)") from None
        names = [n for n in names if read_only or n != READONLY]
        datas = self._call_many("read bookie", self._zk().get_async, [f"{base}/{n}" for n in names])
        out = {}
        for name in names:
            got = datas[f"{base}/{name}"]
            if got is None:
                continue                                   # unregistered meanwhile
            info = bookie_info_from_data(name, got[0], read_only)
            if info is not None:
                out[name] = info
        return out

    def watch_bookies(self, listener: Callable[[dict, dict], None]) -> Cancel:
        self._check_open()
        flags = {"cancelled": False, "running": False, "dirty": False, "last": None}
        self._watch_flags.append(flags)

        def refresh():                                     # reactor thread
            if flags["cancelled"] or self._closed:
                return
            if flags["running"]:
                flags["dirty"] = True
                return
            flags["running"], flags["dirty"] = True, False
            d = threads.deferToThreadPool(reactor, self._pool,
                                          lambda: (self._bookies_blocking(False), self._bookies_blocking(True)))

            def done(result):
                flags["running"] = False
                if not flags["cancelled"] and result != flags["last"]:
                    flags["last"] = result
                    log.info("bookies changed: writable %s, read-only %s", sorted(result[0]), sorted(result[1]))
                    listener(*result)
                if flags["dirty"]:
                    refresh()

            def failed(f):
                flags["running"] = False
                if flags["cancelled"] or self._closed:
                    return              # the read was cut short by close(): nothing to report or retry
                log.warning("reading the registered bookies failed: %s; retrying", f.getErrorMessage())
                reactor.callLater(0.5, refresh)
            d.addCallbacks(done, failed)

        def on_children(children):                         # kazoo's thread
            if flags["cancelled"]:
                return False
            reactor.callFromThread(refresh)
            return None

        def cancel():
            flags["cancelled"] = True
            if flags in self._watch_flags:
                self._watch_flags.remove(flags)

        for read_only in (False, True):
            _start_watch(ChildrenWatch, self.zk, self._bookies_path(read_only), on_children)
        return cancel

    def watch_rack_table(self, listener: Callable[[dict], None]) -> Cancel:
        """Pulsar's rack table beside the ledgers root (bkfast.meta.rack_table), delivered in the reactor."""
        from .rack_table import rack_table_path, watch_rack_table

        self._check_open()
        flags = {"cancelled": False}
        self._watch_flags.append(flags)

        def deliver(table):
            if not flags["cancelled"] and not self._closed:
                listener(table)

        stop = watch_rack_table(self.zk, rack_table_path(self.root),
                                lambda table: reactor.callFromThread(deliver, table))

        def cancel():
            flags["cancelled"] = True
            stop()
            if flags in self._watch_flags:
                self._watch_flags.remove(flags)

        return cancel

    def bookie_cookie_exists(self, bookie_id: str) -> defer.Deferred:
        path = zk_path(self.root, COOKIES, bookie_id)
        return self._in_pool(lambda: self._call(f"read {path}", self._zk().exists_async, path) is not None)

    def delete_bookie_cookie(self, bookie_id: str) -> defer.Deferred:
        return self._in_pool(self._delete_cookie_blocking, bookie_id)

    def _delete_cookie_blocking(self, bookie_id: str) -> bool:
        path = zk_path(self.root, COOKIES, bookie_id)
        try:
            self._call(f"delete {path}", self._zk().delete_async, path)
        except NoNodeError:
            return False
        log.info("cookie of bookie %s deleted (%s)", bookie_id, path)
        return True

    # --- AutoRecovery -------------------------------------------------------------------------------
    def under_replication(self, *, store_ctime: bool = True, lock_holder: str | None = None):
        from .zk_underreplication import ZkUnderReplicationManager

        self._check_started()
        return ZkUnderReplicationManager(self.zk, self.root, store_ctime=store_ctime, lock_holder=lock_holder)

    def auditor_election(self, bookie_id: str | None = None):
        from .zk_election import ZkAuditorElection

        self._check_started()
        return ZkAuditorElection(self.zk, self.root, bookie_id)

    def _check_started(self) -> None:
        self._check_open()
        if self.zk is None:
            raise BKZKException(f"metadata driver {self.uri} is not started")

    def register_bookie(self, bookie_id: str, service_info: bytes, read_only: bool = False) -> defer.Deferred:
        return self._in_pool(self._register_blocking, bookie_id, bytes(service_info), read_only)

    def _register_blocking(self, bookie_id: str, service_info: bytes, read_only: bool) -> None:
        # BookieRegistration makes blocking kazoo calls: first make sure ZooKeeper answers (bounded).
        self._call(f"register bookie {bookie_id}", self._zk().exists_async, zk_path(self.root, AVAILABLE))
        reg = self._registrations.get(bookie_id)
        if reg is not None and reg.service_info == service_info:
            reg.set_read_only(read_only)
        else:
            if reg is not None:
                reg.unregister()
            reg = BookieRegistration(self.zk, self.root, bookie_id, service_info)
            reg.register(read_only)
            self._registrations[bookie_id] = reg
        log.info("bookie %s registered at %s", bookie_id, reg.path)



# --- helpers -----------------------------------------------------------------------------------------

def _parse(ledger: LedgerId, path: str, data: bytes) -> LedgerMetadata:
    try:
        return parse_metadata(data)
    except LedgerMetadataFormatError as e:
        raise LedgerMetadataFormatError(f"ledger {ledger}: metadata at {path} is corrupt: {e}") from None


def _start_watch(kind, zk, path, func) -> None:
    """Create a kazoo DataWatch/ChildrenWatch on a daemon thread: its first read blocks (and retries
    without bound while ZooKeeper is away), so neither the reactor nor the driver's pool may run it."""
    def run():
        try:
            kind(zk, path, func)
        except KazooException as e:
            log.warning("could not set a watch on %s: %r", path, e)
    start_thread(run, "zk-watch")
