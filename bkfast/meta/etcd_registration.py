"""A bookie's registration in etcd (Java's EtcdRegistrationManager): ``<scope>/bookies/writable/<bookieId>`` or
``<scope>/bookies/readonly/<bookieId>`` on the session's lease, so a bookie that stops renewing disappears.

Owns: creating the key only where nobody else holds it (a key on another lease is an earlier process of this
bookie, waited out as Java does, or another bookie with the same id, refused), moving between writable and
read-only (the read-only key first, then the writable one deleted, in Java's order), re-creating the key on a
new lease after the old one expired, and deleting it on unregister. The value is the binary
BookieServiceInfoFormat bkfast also writes in ZooKeeper (Java's etcd driver writes an empty value; readers
accept both). Blocking calls: never in the reactor thread.
"""

from __future__ import annotations

import logging
import threading
import time

from bkfast.errors import MetadataError

from .etcd_kv import EtcdKV, cmp_absent, cmp_lease, op_delete, op_get, op_put
from .etcd_layout import EtcdKeys
from .etcd_session import EtcdSession

__all__ = ["EtcdBookieRegistration"]

log = logging.getLogger(__name__)


class EtcdBookieRegistration:
    """One bookie id's registration on one `EtcdSession`."""

    def __init__(self, kv: EtcdKV, keys: EtcdKeys, session: EtcdSession, bookie_id: str, service_info: bytes):
        self.kv, self.keys, self.session = kv, keys, session
        self.bookie_id = bookie_id
        self.service_info = bytes(service_info)
        self.read_only = False
        self.registered = False
        self._lock = threading.Lock()
        self._stop_listening = session.on_new_lease(self._on_new_lease)

    @property
    def path(self) -> str:
        return self.keys.bookie(self.bookie_id, self.read_only).decode()

    def wait_previous_session(self) -> float:
        """Wait until a registration of this id on another lease (an earlier process killed without
        unregistering) has expired: at most twice the TTL, then MetadataError. Returns the seconds waited."""
        started = time.monotonic()
        deadline = started + 2 * self.session.ttl_s
        while True:
            held = [kv for ro in (False, True)
                    if (kv := self.kv.get(self.keys.bookie(self.bookie_id, ro))) is not None
                    and kv.lease != self.session.lease]
            if not held:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise MetadataError(f"bookie {self.bookie_id}: a registration at {held[0].key.decode()} (lease "
                                    f"{held[0].lease:x}) is still there after {2 * self.session.ttl_s} s: another "
                                    "bookie with this id is running")
            time.sleep(0.2)

    def register(self, read_only: bool = False) -> None:
        with self._lock:
            self._create(read_only, self.session.lease)
            if read_only:
                self._delete_own(False)
            else:
                self._delete_own(True)
            self.read_only, self.registered = read_only, True
        log.info("bookie %s registered at %s (lease %x)", self.bookie_id, self.path, self.session.lease)

    def set_read_only(self, read_only: bool) -> None:
        self.register(read_only)

    def unregister(self) -> None:
        with self._lock:
            self.registered = False
            self._stop_listening()
            for ro in (False, True):
                self._delete_own(ro)

    def _create(self, read_only: bool, lease: int) -> None:
        key = self.keys.bookie(self.bookie_id, read_only)
        result = self.kv.txn([cmp_absent(key)], [op_put(key, self.service_info, lease)], [op_get(key)],
                             what=f"register bookie {self.bookie_id}")
        if result.succeeded:
            return
        existing = result.ranges()[0]
        if existing and existing[0].lease == lease:
            self.kv.put(key, self.service_info, lease)         # ours: refresh the service info
            return
        holder = existing[0].lease if existing else 0
        raise MetadataError(f"bookie {self.bookie_id}: another bookie is registered at {key.decode()} "
                            f"(lease {holder:x}); is a second bookie running with this id?")

    def _delete_own(self, read_only: bool) -> None:
        key = self.keys.bookie(self.bookie_id, read_only)
        self.kv.txn([cmp_lease(key, self.session.lease)], [op_delete(key)], what=f"unregister {key.decode()}")

    def _on_new_lease(self, lease: int) -> None:
        with self._lock:
            if not self.registered:
                return
            self._create(self.read_only, lease)
        log.info("bookie %s registered again at %s on the new lease %x", self.bookie_id, self.path, lease)
