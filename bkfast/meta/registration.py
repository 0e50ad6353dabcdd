"""Bookie id and bookie registration in ZooKeeper (spec §5.1; Java `ZKRegistrationManager`).

A bookie registers an EPHEMERAL ``<root>/available/<bookieId>`` (or ``available/readonly/<bookieId>``)
holding a binary `BookieServiceInfoFormat`. After a ZooKeeper session expiry the node is re-created on
the new session from a background thread (kazoo listeners must never block). Blocking kazoo calls:
use from a thread, not the reactor.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from bkfast.errors import BookieIdInUseError, MetadataError
from bkfast.ids import split_bookie_id
from bkfast.proto import BookieServiceInfoFormat
from bkfast.threads import NamedThread

from .driver import BookieInfo
from .zk_layout import AVAILABLE, READONLY, zk_path

__all__ = ["bookie_id", "bookie_service_info", "bookie_info_from_data", "BookieRegistration", "BookieIdInUseError",
           "SCOPE_IDS_PROPERTY", "split_bookie_id"]

log = logging.getLogger(__name__)

SCOPE_IDS_PROPERTY = "bkfast.scopeIds"
UNREGISTER_TIMEOUT_S = 5.0  # each ZooKeeper call of unregister() at shutdown


def bookie_id(conf) -> str:
    """``bookieId`` if set, else ``<advertisedAddress, or listeningInterface's address, or the host's
    (its host name with useHostNameAsBookieID)>:<bookiePort>`` (bkfast.ids.bookie_address)."""
    from bkfast.ids import bookie_address

    return bookie_address(conf).bookie_id


def bookie_service_info(host: str, port: int, properties: dict[str, str] | None = None,
                        scope_ids: bool = True, extensions: tuple[str, ...] = ()) -> bytes:
    """Serialized `BookieServiceInfoFormat`: one endpoint ("bookie", "bookie-rpc", host, port, with
    `extensions`: ("tls",) on a TLS bookie, spec §8.4) and `properties` (plus ``bkfast.scopeIds=1``
    unless `scope_ids` is False)."""
    info = BookieServiceInfoFormat()
    ep = info.endpoints.add()
    ep.id = "bookie"
    ep.port = port
    ep.host = host
    ep.protocol = "bookie-rpc"
    ep.extensions.extend(extensions)
    props = dict(properties or {})
    if scope_ids:
        props.setdefault(SCOPE_IDS_PROPERTY, "1")
    for k in sorted(props):
        info.properties[k] = props[k]
    return info.SerializeToString(deterministic=True)


class BookieRegistration:
    """The ephemeral registration of one bookie. Thread-safe; `register()` before use."""

    def __init__(self, zk, root: str, bookie_id: str, service_info: bytes, *,
                 wait_expired_timeout: float | None = None, retry_interval: float = 0.2):
        self.zk = zk
        self.root = zk_path(root)
        self.bookie_id = bookie_id
        self.service_info = service_info
        self.wait_expired_timeout = wait_expired_timeout
        self.retry_interval = retry_interval
        self.read_only = False
        self.registered = False
        self._lock = threading.RLock()
        self._closed = False
        self._session_lost = False
        self._reregister_thread: threading.Thread | None = None
        self.reregistrations = 0           # how many times the node was re-created after a session loss
        self.reregistered = threading.Event()

    # -- paths --
    @property
    def writable_path(self) -> str:
        return zk_path(self.root, AVAILABLE, self.bookie_id)

    @property
    def readonly_path(self) -> str:
        return zk_path(self.root, AVAILABLE, READONLY, self.bookie_id)

    @property
    def path(self) -> str:
        return self.readonly_path if self.read_only else self.writable_path

    # -- lifecycle --
    def register(self, read_only: bool = False) -> None:
        with self._lock:
            if self._closed:
                raise MetadataError("registration is closed")
            self.read_only = read_only
            self._create(self.path)
            if not self.registered:
                self.zk.add_listener(self._on_state)
            self.registered = True

    def set_read_only(self, read_only: bool) -> None:
        """Move the registration: create the new node first, then delete the old one (as Java)."""
        with self._lock:
            if read_only == self.read_only:
                return
            old = self.path
            self.read_only = read_only
            if not self.registered or self._session_lost:
                return                     # register() / the re-registration after expiry uses the new state
            try:
                self._create(self.path)
            except Exception:
                self.read_only = not read_only
                raise
            self._delete_own(old)

    def unregister(self) -> None:
        with self._lock:
            self._closed = True
            if self.registered:
                self.zk.remove_listener(self._on_state)
                self.registered = False
                for p in (self.writable_path, self.readonly_path):
                    self._delete_own(p)

    close = unregister

    # -- internals --
    def _session_id(self):
        cid = self.zk.client_id
        return cid[0] if cid else None

    def _expiry_deadline(self) -> float:
        # ZooKeeper expires a dead session only at a tick boundary after its timeout, so a bookie that
        # restarts right after a crash may wait a little longer than one session timeout.
        return time.monotonic() + (self.wait_expired_timeout if self.wait_expired_timeout is not None
                                   else 2 * getattr(self.zk, "_session_timeout", 10000) / 1000.0 + 1.0)

    def wait_previous_session(self) -> float:
        """Wait (up to the session timeout, as register() would) until no node of this bookie id is held by
        another ZooKeeper session: after a kill -9, the old process's session holds them until it expires.
        Returns the seconds waited; BookieIdInUseError when they outlive the wait. A bookie calls this
        before it listens, so that nothing connects to it while it cannot yet register."""
        started = time.monotonic()
        deadline = self._expiry_deadline()
        logged = False
        for path in (self.writable_path, self.readonly_path):
            while True:
                stat = self.zk.exists(path)
                if stat is None or stat.ephemeralOwner in (0, self._session_id()):
                    break                       # absent, ours, or not ephemeral (register() says so)
                if time.monotonic() >= deadline:
                    raise BookieIdInUseError(
                        f"bookie id {self.bookie_id} is already registered at {path} by another live ZooKeeper "
                        f"session (0x{stat.ephemeralOwner:x}); is another bookie running with the same id?")
                if not logged:
                    log.info("bookie %s: %s is held by an earlier ZooKeeper session (0x%x), as after a crash; "
                             "waiting up to %.1f s for it to expire before listening", self.bookie_id, path,
                             stat.ephemeralOwner, deadline - time.monotonic())
                    logged = True
                time.sleep(min(self.retry_interval, max(0.0, deadline - time.monotonic())))
        return time.monotonic() - started

    def _create(self, path: str) -> None:
        """Create the ephemeral node, waiting (up to the session timeout) for a previous session's node
        to expire; re-use a node our own session already owns."""
        deadline = self._expiry_deadline()
        while True:
            try:
                self.zk.create(path, self.service_info, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue                            # vanished meanwhile: try again
            if stat.ephemeralOwner == self._session_id():
                if data != self.service_info:
                    self.zk.set(path, self.service_info)
                return
            if stat.ephemeralOwner == 0:
                raise BookieIdInUseError(f"bookie id {self.bookie_id}: {path} exists and is not ephemeral; "
                                         "remove it by hand")
            if time.monotonic() >= deadline:
                raise BookieIdInUseError(
                    f"bookie id {self.bookie_id} is already registered at {path} by another live ZooKeeper "
                    f"session (0x{stat.ephemeralOwner:x}); is another bookie running with the same id?")
            time.sleep(min(self.retry_interval, max(0.0, deadline - time.monotonic())))

    def _delete_own(self, path: str) -> None:
        # Bounded waits: with ZooKeeper unreachable, kazoo's blocking get() waits for a reconnection
        # forever, and a bookie stopped then never exited. The node is ephemeral: when the session
        # ends (closed, or expired on the server) ZooKeeper removes it anyway.
        if not self.zk.connected:
            log.warning("not connected to ZooKeeper: leaving %s to the end of this session", path)
            return
        try:
            _, stat = self.zk.get_async(path).get(timeout=UNREGISTER_TIMEOUT_S)
            if stat.ephemeralOwner == self._session_id():
                self.zk.delete_async(path, version=stat.version).get(timeout=UNREGISTER_TIMEOUT_S)
        except NoNodeError:
            pass
        except Exception as e:                     # connection trouble: the session's end removes it anyway
            log.warning("could not delete %s: %r", path, e)

    def _on_state(self, state) -> None:
        # Runs on kazoo's event thread: never block here.
        if state == KazooState.LOST:
            self._session_lost = True
            self.reregistered.clear()
        elif state == KazooState.CONNECTED and self._session_lost and not self._closed:
            self._session_lost = False
            t = self._reregister_thread
            if t is None or not t.is_alive():
                self._reregister_thread = NamedThread(self._reregister, "zk-reregister")
                self._reregister_thread.start()

    def _reregister(self) -> None:
        delay = self.retry_interval
        while not self._closed:
            try:
                with self._lock:
                    if self._closed or not self.registered:
                        return
                    self._create(self.path)
                    self.reregistrations += 1
                log.info("re-registered bookie %s at %s after ZooKeeper session expiry", self.bookie_id, self.path)
                self.reregistered.set()
                return
            except Exception as e:
                log.warning("re-registering bookie %s failed (%r); retrying", self.bookie_id, e)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


def bookie_info_from_data(bookie_id: str, data: bytes, read_only: bool) -> BookieInfo | None:
    """BookieInfo from a registration znode's data (BookieServiceInfoFormat; empty = legacy: host:port from
    the id). None (and a warning) when neither the data nor the id says where the bookie is."""
    props: dict[str, str] = {}
    host = port = None
    if data:
        try:
            info = BookieServiceInfoFormat.FromString(bytes(data))
        except Exception as e:                        # protobuf DecodeError; treat as legacy
            log.warning("bookie %s: registration data does not parse (%r); using the bookie id", bookie_id, e)
        else:
            props = dict(info.properties)
            endpoints = list(info.endpoints)
            ep = next((e for e in endpoints if e.protocol == "bookie-rpc"), endpoints[0] if endpoints else None)
            if ep is not None and ep.host:
                host, port = ep.host, ep.port
    if host is None:
        try:
            host, port = split_bookie_id(bookie_id)
        except MetadataError:
            log.warning("bookie %s: no endpoint in its registration and the id is not host:port; ignored",
                        bookie_id)
            return None
    assert port is not None, "set together with host"
    return BookieInfo(bookie_id, host, int(port), props, read_only)
