"""The one metadata interface the client, the sandbox, the bookie's GC and AutoRecovery talk to
(docs/architecture.md).

Three implementations: `bkfast.meta.zk_driver.ZkMetadataDriver` (kazoo; Java BookKeeper's layout),
`bkfast.meta.etcd_driver.EtcdMetadataDriver` (etcd v3; Java's etcd layout, docs/etcd.md) and
`bkfast.meta.embedded.EmbeddedMetadataDriver` (one process, persisted with rocksdict). Every method
that does I/O returns a Deferred that fires in the reactor thread; listeners are called in the reactor
thread too. Errors are `bkfast.errors` client exceptions (BKNoSuchLedgerExistsException,
BKLedgerExistException, BKMetadataVersionException, BKZKException / BKMetaStoreException for a store
that cannot be reached within the operation's time bound). `bkfast.meta.factory` builds the driver for
a URI; this module never imports an implementation (they import it).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from twisted.internet import defer
from twisted.internet.defer import Deferred

from bkfast.errors import BKNoSuchLedgerExistsException
from bkfast.ids import LedgerId

from .ledger_metadata import LedgerMetadata
from .underreplication import AuditorElection, UnderReplicationManager

__all__ = ["BookieInfo", "Versioned", "MetadataDriver", "Cancel"]

Cancel = Callable[[], None]


@dataclass(frozen=True)
class Versioned:
    """Ledger metadata with the store's version of it (the znode version in ZooKeeper), for CAS."""

    metadata: LedgerMetadata
    version: int


@dataclass(frozen=True)
class BookieInfo:
    """A registered bookie: its id, where to reach it, and its advertised properties."""

    bookie_id: str
    host: str
    port: int
    properties: dict[str, str] = field(default_factory=dict)
    read_only: bool = False

    @property
    def supports_scope_ids(self) -> bool:
        return self.properties.get("bkfast.scopeIds") == "1"


class MetadataDriver(abc.ABC):
    """The interface; see the module docstring. `start()` before use, `close()` after."""

    uri: str

    @abc.abstractmethod
    def start(self) -> Deferred:
        """Connect / open the store. Fires with self."""

    @abc.abstractmethod
    def close(self) -> Deferred:
        """Release the connection / store; fires when done."""

    # --- ledgers ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def generate_ledger_id(self) -> Deferred:
        """A new scope-0 ledger id (int), unique in this cluster."""

    @abc.abstractmethod
    def create_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata) -> Deferred:
        """Store new metadata; fires with Versioned. BKLedgerExistException if the ledger exists
        (a retried create whose cToken is ours counts as success)."""

    @abc.abstractmethod
    def read_ledger_metadata(self, ledger: LedgerId) -> Deferred:
        """Fires with Versioned; BKNoSuchLedgerExistsException if absent."""

    def read_many_ledger_metadata(self, ledgers: Iterable[LedgerId]) -> Deferred:
        """Fires with {LedgerId: Versioned} for those of `ledgers` that exist (the others are left out), in
        one operation: a listing of many ledgers' metadata costs the caller's reactor one hop, not one per
        ledger. Drivers that can pipeline the reads override this."""
        ledgers = list(ledgers)

        def absent_is_none(failure):
            failure.trap(BKNoSuchLedgerExistsException)
            return None

        reads = [self.read_ledger_metadata(ledger).addErrback(absent_is_none) for ledger in ledgers]
        d = defer.gatherResults(reads, consumeErrors=True)
        d.addCallback(lambda values: {ledger: v for ledger, v in zip(ledgers, values, strict=True) if v is not None})
        d.addErrback(lambda failure: failure.value.subFailure if isinstance(failure.value, defer.FirstError)
                     else failure)
        return d

    @abc.abstractmethod
    def write_ledger_metadata(self, ledger: LedgerId, metadata: LedgerMetadata, expected_version: int) -> Deferred:
        """CAS update; fires with the new Versioned. BKMetadataVersionException when the stored
        version differs, BKNoSuchLedgerExistsException when the ledger is gone."""

    @abc.abstractmethod
    def remove_ledger_metadata(self, ledger: LedgerId, expected_version: int = -1) -> Deferred:
        """Delete (version -1 = any). BKNoSuchLedgerExistsException if absent."""

    @abc.abstractmethod
    def list_ledgers(self, scope_id: int = 0) -> Deferred:
        """Sorted list of the ledger ids (ints) of one scope."""

    @abc.abstractmethod
    def list_scopes(self) -> Deferred:
        """Sorted list of the scope ids other than 0 that may hold ledgers."""

    @abc.abstractmethod
    def ledgers_exist(self, ledgers: Iterable[LedgerId]) -> Deferred:
        """The subset (a set of LedgerId) that has metadata. Fails (never guesses) if the store
        cannot answer, so a caller such as GC never deletes a ledger on a failed read."""

    @abc.abstractmethod
    def watch_ledger_metadata(self, ledger: LedgerId, listener: Callable[[Versioned | None], None]) -> Cancel:
        """Call listener with each new Versioned (None once deleted) until the returned cancel is called."""

    # --- bookies ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def get_bookies(self, read_only: bool = False) -> Deferred:
        """dict bookie_id -> BookieInfo of the writable (or read-only) bookies."""

    @abc.abstractmethod
    def watch_bookies(self, listener: Callable[[dict, dict], None]) -> Cancel:
        """listener(writable, read_only) now and on every change, until cancelled."""

    @abc.abstractmethod
    def register_bookie(self, bookie_id: str, service_info: bytes, read_only: bool = False) -> Deferred:
        """Register (ephemeral in ZooKeeper: lives as long as this driver's session)."""

    @abc.abstractmethod
    def unregister_bookie(self, bookie_id: str) -> Deferred:
        """Remove this driver's registration of `bookie_id`."""

    def watch_rack_table(self, listener: Callable[[dict], None]) -> Cancel:
        """listener(table) with Pulsar's bookie rack table (bkfast.meta.rack_table) now and on every change,
        until cancelled. A store without one (embedded) delivers {} once."""
        from twisted.internet import reactor

        # Twisted's zope interfaces declare their methods without self, which mypy (no mypy-zope plugin) misreads.
        call = reactor.callLater(0, listener, {})  # type: ignore[arg-type]  # see above
        return lambda: call.cancel() if call.active() else None  # type: ignore[misc]  # see above

    def bookie_cookie_exists(self, bookie_id: str) -> Deferred:
        """Whether the store holds a cookie of `bookie_id`. A store without cookies (embedded) answers False."""
        return defer.succeed(False)

    def delete_bookie_cookie(self, bookie_id: str) -> Deferred:
        """Delete the cookie of `bookie_id` (a decommissioned bookie); fires with whether there was one."""
        return defer.succeed(False)

    # --- AutoRecovery (bkfast.meta.underreplication; blocking objects, used off the reactor thread) -----
    @abc.abstractmethod
    def under_replication(self, *, store_ctime: bool = True, lock_holder: str | None = None
                          ) -> UnderReplicationManager:
        """The under-replication manager on this driver's session (its locks live as long as the session).
        `store_ctime`: storeSystemTimeAsLedgerUnderreplicatedMarkTime. Call after start()."""

    @abc.abstractmethod
    def auditor_election(self, bookie_id: str | None = None) -> AuditorElection:
        """`bookie_id`'s candidacy in the auditor election on this driver's session (None: an observer that
        only asks for the current auditor). Call after start()."""

    # --- named log streams (bkfast.meta.streams; implemented in bkfast.meta.stream_store) ------------
    @abc.abstractmethod
    def create_stream(self, metadata) -> Deferred:
        """Store a new stream (a `StreamMetadata`); fires with VersionedStream. StreamExistsError if taken."""

    @abc.abstractmethod
    def read_stream(self, name: str) -> Deferred:
        """Fires with VersionedStream; NoSuchStreamError if absent."""

    @abc.abstractmethod
    def write_stream(self, metadata, expected_version: int) -> Deferred:
        """CAS update; fires with the new VersionedStream. BKMetadataVersionException when the stored
        version differs, NoSuchStreamError when the stream is gone."""

    @abc.abstractmethod
    def delete_stream(self, name: str, expected_version: int = -1) -> Deferred:
        """Remove the stream's record (its ledgers are the caller's business)."""

    @abc.abstractmethod
    def list_streams(self) -> Deferred:
        """Sorted list of the stream names."""

