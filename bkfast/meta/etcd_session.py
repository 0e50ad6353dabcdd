"""The etcd counterpart of a ZooKeeper session: one lease that a driver keeps alive, to which every key that must
vanish with its owner is attached (bookie registrations, AutoRecovery's ledger locks, auditor candidacies).

Owns: granting the lease (TTL in seconds, Java's etcd driver uses the bookie's zkTimeout), renewing it from its
own thread every third of the TTL, and noticing that it expired (a process stopped past the TTL, or etcd lost
it): then a new lease is granted and every `on_new_lease` listener runs with it, so registrations come back the
way ZooKeeper ephemerals come back on a new session. `close()` revokes the lease: its keys go at once.

Must never: run in the reactor thread (it blocks on etcd).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from bkfast.errors import BKMetaStoreException
from bkfast.threads import start_thread

from .etcd_kv import EtcdKV, EtcdRefused

__all__ = ["EtcdSession", "MIN_TTL_S"]

log = logging.getLogger(__name__)

MIN_TTL_S = 2          # etcd refuses shorter leases in practice (its minimum is about 1.5 x the election timeout)


class EtcdSession:
    """See the module docstring."""

    def __init__(self, kv: EtcdKV, ttl_s: int, name: str = "etcd-lease"):
        self.kv = kv
        self.ttl_s = max(int(ttl_s), MIN_TTL_S)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[int], None]] = []
        self._closed = threading.Event()
        self._lease = kv.lease_grant(self.ttl_s)
        self.generation = 0                  # how many times the lease was replaced
        self._thread = start_thread(self._keep_alive, name)

    @property
    def lease(self) -> int:
        with self._lock:
            return self._lease

    def on_new_lease(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call `listener(new_lease)` (in the session's thread) whenever the lease had to be replaced."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._remove(listener)

    def _remove(self, listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _keep_alive(self) -> None:
        interval = max(self.ttl_s / 3.0, 0.5)
        while not self._closed.wait(interval):
            lease = self.lease
            try:
                ttl = self.kv.lease_keepalive(lease, timeout_s=interval)
            except EtcdRefused as e:                 # etcd answered: this lease is no more
                log.warning("etcd lease %x: renewal refused (%s)", lease, e)
                ttl = 0
            except BKMetaStoreException as e:        # no answer: the lease may well live on
                log.warning("etcd lease %x: renewal failed (%s); trying again", lease, e)
                continue
            if ttl <= 0 and not self._closed.is_set():
                self._replace(lease)

    def _replace(self, expired: int) -> None:
        try:
            fresh = self.kv.lease_grant(self.ttl_s)
        except Exception as e:
            log.warning("etcd lease %x expired and no new lease could be granted yet (%s)", expired, e)
            return
        with self._lock:
            self._lease = fresh
            self.generation += 1
            listeners = list(self._listeners)
        log.warning("etcd lease %x expired (its keys are gone); new lease %x: re-creating them", expired, fresh)
        for listener in listeners:
            try:
                listener(fresh)
            except Exception:
                log.exception("re-creating keys on the new etcd lease %x failed", fresh)

    def close(self, timeout_s: float = 5.0) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self.kv.lease_revoke(self.lease, timeout_s=timeout_s)
        except Exception as e:             # the lease still expires by itself within its TTL
            log.info("revoking etcd lease %x failed (%s); it expires within %d s", self.lease, e, self.ttl_s)
