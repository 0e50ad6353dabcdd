"""What the two network metadata drivers (ZooKeeper, etcd) share: their blocking store calls run on a pool of
daemon threads of their own, never in the reactor, and every result comes back as a Deferred in the reactor.

Owns: the pool's life (started by `start()`, stopped by `close()` from a thread of its own, since stopping
joins the workers), refusing calls on a driver that is not started or already closed, the ledger metadata
calls' serialization before the hop (a metadata that cannot be written fails at once) and the bookie
registrations a driver made (unregistered on close). A driver supplies the `_*_blocking` methods.
"""

from __future__ import annotations

import abc
import logging
from typing import Any

from twisted.internet import defer, threads
from twisted.internet import reactor as global_reactor
from twisted.python.threadpool import ThreadPool

from bkfast.errors import BKError, BKMetaStoreException
from bkfast.ids import LedgerId
from bkfast.threads import start_thread, thread_factory

from .ledger_metadata import LedgerMetadata, new_ctoken, serialize_metadata

__all__ = ["PooledDriver"]

# The global reactor provides every IReactor* interface; Twisted types it as only one of them.
reactor: Any = global_reactor

log = logging.getLogger(__name__)


def daemon_pool(thread_name: str, pool_name: str, max_threads: int) -> ThreadPool:
    """Daemon threads: a program that forgets to close its client must still be able to exit (kazoo's own
    threads are daemons too)."""
    pool = ThreadPool(minthreads=1, maxthreads=max_threads, name=pool_name)
    pool.threadFactory = thread_factory(thread_name)  # type: ignore[assignment]  # a factory, as Twisted calls it
    return pool


class PooledDriver(abc.ABC):
    """Mixin of ZkMetadataDriver and EtcdMetadataDriver (see the module docstring)."""

    uri: str
    _unreachable: type[BKError] = BKMetaStoreException     # what a call on a closed driver fails with
    _registrations: dict

    def _init_pool(self, thread_name: str, pool_name: str, max_threads: int) -> None:
        self._pool = daemon_pool(thread_name, pool_name, max_threads)
        self._pool_thread_name = thread_name
        self._registrations = {}
        self._started = False
        self._closed = False

    def _in_pool(self, fn, *args) -> defer.Deferred:
        if not self._started or self._closed:
            state = "closed" if self._closed else "not started"
            return defer.fail(self._unreachable(f"metadata driver {self.uri} is {state}"))
        return threads.deferToThreadPool(reactor, self._pool, self._run_in_pool, fn, *args)

    def _run_in_pool(self, fn, *args):
        """One driver operation in a pool thread (a driver may bound its store calls here)."""
        return fn(*args)

    def _check_open(self) -> None:
        if not self._started or self._closed:
            raise self._unreachable(f"metadata driver {self.uri} is not started")

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> defer.Deferred:
        if self._started:
            return defer.succeed(self)
        self._pool.start()
        self._started = True
        d = self._in_pool(self._start_blocking)
        d.addCallback(lambda _: self)
        return d

    @abc.abstractmethod
    def _start_blocking(self) -> None:
        """In a pool thread."""

    def close(self) -> defer.Deferred:
        if self._closed or not self._started:
            self._closed = True
            return defer.succeed(None)
        self._before_close()
        d = threads.deferToThreadPool(reactor, self._pool, self._close_blocking)
        self._closed = True

        def stop_pool(result):
            # ThreadPool.stop() joins the workers: never in the reactor thread.
            start_thread(self._pool.stop, f"{self._pool_thread_name}-stop")
            return result
        d.addBoth(stop_pool)
        return d

    @abc.abstractmethod
    def _before_close(self) -> None:
        """In the reactor thread, as close() begins: end the watches."""

    @abc.abstractmethod
    def _close_blocking(self) -> None:
        """In a pool thread."""

    def _unregister_all(self) -> None:
        for reg in list(self._registrations.values()):
            try:
                reg.unregister()
            except Exception as e:
                log.warning("unregistering bookie %s on close failed: %r", reg.bookie_id, e)
        self._registrations.clear()

    # --- ledger metadata: serialized here, stored by the driver --------------------------------------
    def create_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata) -> defer.Deferred:
        if metadata.metadata_format_version > 2 and not metadata.c_token:
            metadata = metadata.replace(c_token=new_ctoken())
        try:
            data = serialize_metadata(metadata, metadata.metadata_format_version)
        except BKError as e:
            return defer.fail(e)
        return self._in_pool(self._create_blocking, ledger, metadata, data)

    def read_ledger_metadata(self, ledger: LedgerId) -> defer.Deferred:
        return self._in_pool(self._read_blocking, ledger)

    def write_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata,
                              expected_version: int) -> defer.Deferred:
        try:
            data = serialize_metadata(metadata, metadata.metadata_format_version)
        except BKError as e:
            return defer.fail(e)
        return self._in_pool(self._write_blocking, ledger, metadata, data, expected_version)

    def remove_ledger_metadata(self, ledger: LedgerId, expected_version: int = -1) -> defer.Deferred:
        return self._in_pool(self._remove_blocking, ledger, expected_version)

    @abc.abstractmethod
    def _create_blocking(self, ledger: LedgerId, metadata: LedgerMetadata, data: bytes):
        """In a pool thread."""

    @abc.abstractmethod
    def _read_blocking(self, ledger: LedgerId):
        """In a pool thread."""

    @abc.abstractmethod
    def _write_blocking(self, ledger: LedgerId, metadata: LedgerMetadata, data: bytes, expected_version: int):
        """In a pool thread."""

    @abc.abstractmethod
    def _remove_blocking(self, ledger: LedgerId, expected_version: int) -> None:
        """In a pool thread."""

    # --- bookies --------------------------------------------------------------------------------------
    def unregister_bookie(self, bookie_id: str) -> defer.Deferred:
        return self._in_pool(self._unregister_blocking, bookie_id)

    def _unregister_blocking(self, bookie_id: str) -> None:
        reg = self._registrations.pop(bookie_id, None)
        if reg is None:
            log.info("bookie %s: unregister requested but this driver did not register it", bookie_id)
            return
        reg.unregister()
        log.info("bookie %s unregistered", bookie_id)
