"""AsyncBookKeeper: the Twisted-native ledger client (Deferreds; awaitable from coroutines).

    bk = yield AsyncBookKeeper.connect("zk+hierarchical://127.0.0.1:2181/ledgers")
    lh = yield bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=b"secret")
    entry_id = yield lh.add_entry(b"hello")
    yield lh.close()

Ledger metadata goes through a `MetadataDriver` (ZooKeeper or embedded); bookies are reached only over
the wire through one shared `BookieClient`. Must be used from the reactor thread; see
`bkfast.client.blocking.BookKeeper` for a blocking facade usable from any thread.
"""

from __future__ import annotations

import logging
import random
import time

from twisted.internet import defer, threads

from bkfast.conf import ClientConfiguration
from bkfast.digests import DigestType
from bkfast.errors import (
    BKIncorrectParameterException,
    BKLedgerExistException,
    BKNotEnoughBookiesException,
    BKUnauthorizedAccessException,
)
from bkfast.ids import MAX_LEDGER_ID, LedgerId
from bkfast.meta.driver import BookieInfo, MetadataDriver
from bkfast.meta.factory import open_metadata_driver
from bkfast.meta.ledger_metadata import LedgerMetadata
from bkfast.net.bookie_client import BookieClient

from .disk_weights import DiskWeights
from .distribution import check_quorums
from .handle import LedgerHandle
from .placement_factory import policy_from_conf
from .recovery import recover_ledger
from .settings import ClientSettings
from .stats import ClientStats, timed
from .write_handle import WriteHandle, WriteHandleAdv

__all__ = ["AsyncBookKeeper", "client_configuration"]

log = logging.getLogger(__name__)

_FAILED_BOOKIE_MEMORY_S = 60.0


def client_configuration(conf: ClientConfiguration | None = None, **overrides) -> ClientConfiguration:
    """A ClientConfiguration from BookKeeper key names (``useV2WireProtocol=False``) and the shorthand
    ``protocol="v2"|"v3"``."""
    conf = conf or ClientConfiguration()
    protocol = overrides.pop("protocol", None)
    if protocol is not None:
        if protocol not in ("v2", "v3"):
            raise BKIncorrectParameterException(f"protocol: expected 'v2' or 'v3', got {protocol!r}")
        overrides["useV2WireProtocol"] = protocol == "v2"
    for key, value in overrides.items():
        conf.set(key, value)
    if not conf.is_set("useV2WireProtocol"):
        # Java's default is v3; bkfast's client defaults to v2, the cheaper protocol per request
        # (an explicit useV2WireProtocol=false or protocol="v3" still selects v3).
        conf.set("useV2WireProtocol", True)
    return conf


def _password(password) -> bytes:
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


class AsyncBookKeeper:
    """A connection to one BookKeeper cluster (metadata store + bookies)."""

    def __init__(self, metadata_uri: str, reactor=None, conf: ClientConfiguration | None = None,
                 driver: MetadataDriver | None = None, stats=None, **overrides):
        """`stats`: a StatsLogger to record Java's client stats into (bkfast.client.stats; its ZooKeeper
        session's too when this client opens its own driver); none: nothing is recorded."""
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.metadata_uri = metadata_uri
        self.conf = client_configuration(conf, **overrides)
        self.client_stats = ClientStats(stats)
        # The configuration carries the store's own keys (zkTimeout; etcd's TLS and user).
        self.driver = driver or open_metadata_driver(metadata_uri, conf=self.conf,
                                                     **({"stats": stats} if stats is not None else {}))
        self.writable_bookies: dict[str, BookieInfo] = {}
        self.read_only_bookies: dict[str, BookieInfo] = {}
        self._failed: dict[str, float] = {}
        self.bookie_client = BookieClient(reactor, self.conf, resolve=self._resolve)
        self._cancel_watch = None
        self._closed = False
        self._rng = random.Random()
        # ensemblePlacementPolicy over the topology of reppDnsResolverClass (docs/placement.md)
        self.placement = policy_from_conf(self.conf, rng=self._rng)
        self.settings = ClientSettings.from_conf(self.conf)
        self.client_stats.watch_client(self)
        self._cancel_rack_watch = None
        self._disk_weights: DiskWeights | None = None
        self._locating: defer.Deferred | None = None
        self._locate_again = False

    @classmethod
    def connect(cls, metadata_uri: str, reactor=None, **conf) -> defer.Deferred:
        """Fires with a started client."""
        return cls(metadata_uri, reactor, **conf).start()

    @defer.inlineCallbacks
    def start(self):
        yield self.driver.start()
        self.writable_bookies = yield self.driver.get_bookies(read_only=False)
        self.read_only_bookies = yield self.driver.get_bookies(read_only=True)
        self.client_stats.bookies_changed({}, self.writable_bookies)
        yield self._start_placement()
        self._cancel_watch = self.driver.watch_bookies(self._on_bookies)
        log.info("client connected to %s: %d writable, %d read-only bookies", self.metadata_uri,
                 len(self.writable_bookies), len(self.read_only_bookies))
        return self

    def pin_to_bookie(self, bookie_id: str) -> None:
        """Reactor thread. Stop following the bookie registry and write to `bookie_id` alone (none if it
        is not a registered writable bookie), as Java's bookiesanity does with its
        LocalBookieEnsemblePlacementPolicy. For a client private to one such check: the pin lasts
        until it is closed."""
        if self._cancel_watch is not None:
            self._cancel_watch()
            self._cancel_watch = None
        info = self.writable_bookies.get(bookie_id)
        self.writable_bookies = {bookie_id: info} if info is not None else {}

    def _on_bookies(self, writable: dict, read_only: dict) -> None:
        self.client_stats.bookies_changed(self.writable_bookies, writable)
        self.writable_bookies = dict(writable)
        self.read_only_bookies = dict(read_only)
        self._locate_bookies()
        if self._disk_weights is not None:
            self._disk_weights.on_bookies(self.writable_bookies)

    # --- placement: where the bookies are (docs/placement.md) -------------------------------------------
    @defer.inlineCallbacks
    def _start_placement(self):
        """Locate the bookies before the first ledger is placed: the first reading of the rack table, or
        the topology script's answers (in a thread), and the client's own location; then, with
        diskWeightBasedPlacementEnabled, the bookies' free disk space."""
        topology = self.placement.topology
        mapping = topology.mapping
        if mapping.uses_rack_table:
            first = defer.Deferred()

            def on_table(table):
                mapping.set_table(table)
                topology.relocate_all()
                self._locate_bookies()
                if not first.called:
                    first.callback(None)

            def late():
                if not first.called:
                    log.warning("the bookie rack table was not read in time; bookies stay in the default location "
                                "until it is")
                    first.callback(None)

            self._cancel_rack_watch = self.driver.watch_rack_table(on_table)
            timeout = self.reactor.callLater(self.settings.zk_timeout_s, late)
            yield first
            if timeout.active():
                timeout.cancel()
        if mapping.blocking:
            yield threads.deferToThread(topology.resolve_local)
        else:
            topology.resolve_local()
        yield self._locate_bookies()
        if self.settings.disk_weight_placement:
            self._disk_weights = DiskWeights(self)
            self._disk_weights.start()

    def _locate_bookies(self) -> defer.Deferred:
        """Resolve the bookies not located yet: at once for the rack table, in a thread (one run at a time)
        for a topology script. Fires when their locations are recorded."""
        topology = self.placement.topology
        bookies = {**self.read_only_bookies, **self.writable_bookies}
        if not topology.mapping.blocking:
            topology.locate(bookies)
            return defer.succeed(None)
        if self._locating is not None:
            self._locate_again = True
            return self._locating
        pairs = topology.unresolved(bookies)
        if not pairs:
            return defer.succeed(None)
        done: defer.Deferred[None] = defer.Deferred()
        self._locating = done

        def resolved(found):
            topology.apply(found)

        def failed(failure):
            log.warning("locating bookies %s failed: %s", [b for b, _h in pairs], failure.getErrorMessage())

        def finished(_):
            self._locating = None
            again, self._locate_again = self._locate_again, False
            done.callback(None)
            if again and not self._closed:
                self._locate_bookies()

        d = threads.deferToThread(topology.resolve_blocking, pairs)
        d.addCallbacks(resolved, failed)
        d.addBoth(finished)
        return done

    def _resolve(self, bookie_id: str) -> tuple[str, int]:
        info = self.writable_bookies.get(bookie_id) or self.read_only_bookies.get(bookie_id)
        if info is not None and info.host:
            return info.host, info.port
        host, _, port = bookie_id.rpartition(":")
        return host.strip("[]"), int(port)

    # --- bookie failure memory (keeps a just-failed bookie out of replacements for a while) -----------
    def note_failed_bookies(self, bookies) -> None:
        now = time.monotonic()
        for bookie in bookies:
            self._failed[bookie] = now

    @property
    def recently_failed(self) -> set[str]:
        now = time.monotonic()
        for bookie, when in list(self._failed.items()):
            if now - when > _FAILED_BOOKIE_MEMORY_S:
                del self._failed[bookie]
        return set(self._failed)

    # --- ledgers ------------------------------------------------------------------------------------
    def _new_metadata(self, ensemble_size, write_quorum, ack_quorum, digest_type, password, custom_metadata,
                      scope_id) -> LedgerMetadata:
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        digest = DigestType.parse(digest_type if digest_type is not None else self.settings.digest_type)
        placement = self.placement
        try:    # prefer bookies that have not failed lately, but do not refuse because of them
            ensemble = placement.new_ensemble(self.writable_bookies, ensemble_size, write_quorum, ack_quorum, scope_id,
                                              excluded=self.recently_failed)
        except BKNotEnoughBookiesException:
            ensemble = placement.new_ensemble(self.writable_bookies, ensemble_size, write_quorum, ack_quorum, scope_id)
        custom = {key: (value.encode("utf-8") if isinstance(value, str) else bytes(value))
                  for key, value in (custom_metadata or {}).items()}
        ctime = int(time.time() * 1000) if self.settings.store_ctime else None
        return LedgerMetadata(ensemble_size=ensemble_size, write_quorum_size=write_quorum, ack_quorum_size=ack_quorum,
                              ensembles=((0, ensemble),), digest_type=digest, password=_password(password),
                              ctime=ctime, custom_metadata=custom)

    async def _create(self, cls, ensemble_size, write_quorum, ack_quorum, digest_type, password, custom_metadata,
                      scope_id, ledger_id, deferred_sync=False):
        md = timed(self.client_stats.new_ensemble, self._new_metadata, ensemble_size, write_quorum, ack_quorum,
                   digest_type, password, custom_metadata, scope_id)
        for _attempt in range(10):
            if ledger_id is not None:
                lid = ledger_id
            elif scope_id:
                lid = self._rng.randrange(0, MAX_LEDGER_ID + 1)
            else:
                lid = await self.driver.generate_ledger_id()
            ledger = LedgerId(scope_id, lid)
            try:
                versioned = await self.driver.create_ledger_metadata(ledger, md)
            except BKLedgerExistException:
                if ledger_id is not None:
                    raise
                continue
            log.info("created ledger %s on %s (E=%d WQ=%d AQ=%d)", ledger.qualified_name if scope_id else lid,
                     ",".join(md.ensembles[0][1]), ensemble_size, write_quorum, ack_quorum)
            return cls(self, ledger, versioned, _password(password), deferred_sync=deferred_sync)
        raise BKLedgerExistException("could not find a free ledger id in 10 attempts")

    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                      digest_type=None, password: bytes | str = b"", custom_metadata: dict | None = None,
                      scope_id: int = 0, deferred_sync: bool = False) -> defer.Deferred:
        """A new ledger and its WriteHandle (ids assigned by the client: 0, 1, 2, ...). With
        `deferred_sync` (BookKeeper's WriteFlag.DEFERRED_SYNC, v3) bookies acknowledge adds before their
        journal sync; `force()` then makes everything added so far durable."""
        return self.client_stats.time("create", defer.ensureDeferred(self._create(
            WriteHandle, ensemble_size, write_quorum, ack_quorum, digest_type, password, custom_metadata, scope_id,
            None, deferred_sync)))

    def create_ledger_adv(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                          digest_type=None, password: bytes | str = b"", custom_metadata: dict | None = None,
                          scope_id: int = 0, ledger_id: int | None = None) -> defer.Deferred:
        """A new ledger whose entry ids (and optionally ledger id) the caller chooses."""
        return self.client_stats.time("create", defer.ensureDeferred(self._create(
            WriteHandleAdv, ensemble_size, write_quorum, ack_quorum, digest_type, password, custom_metadata,
            scope_id, ledger_id)))

    async def _open(self, ledger_id: int, password, recovery: bool, scope_id: int) -> LedgerHandle:
        ledger = LedgerId(scope_id, ledger_id)
        versioned = await self.driver.read_ledger_metadata(ledger)
        password = _password(password)
        stored = versioned.metadata.password
        if stored and stored != password:
            raise BKUnauthorizedAccessException(f"ledger {ledger_id}: wrong password")
        if recovery and not versioned.metadata.is_closed:
            versioned = await recover_ledger(self, ledger, versioned, password)
        handle = LedgerHandle(self, ledger, versioned, password)
        if not recovery and not versioned.metadata.is_closed:
            try:
                await handle.read_last_add_confirmed()
            except Exception as exc:  # the handle is still usable: LAC stays -1 until asked again
                log.info("ledger %d: LAC read at open failed: %s", ledger_id, exc)
        return handle

    def open_ledger(self, ledger_id: int, password: bytes | str = b"", recovery: bool = True,
                    scope_id: int = 0) -> defer.Deferred:
        """A read handle. With `recovery` (the default) an open ledger is fenced, recovered and closed
        first, so its content is final; without, the ledger is left alone and may still grow."""
        return self.client_stats.time("open", defer.ensureDeferred(self._open(ledger_id, password, recovery,
                                                                               scope_id)))

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> defer.Deferred:
        """Remove the ledger's metadata; the bookies' garbage collection reclaims its entries."""
        ledger = LedgerId(scope_id, ledger_id)
        d = self.client_stats.time("delete", self.driver.remove_ledger_metadata(ledger, -1))
        d.addCallback(lambda _: log.info("deleted ledger %s", ledger))
        return d

    def list_ledgers(self, scope_id: int = 0) -> defer.Deferred:
        return self.driver.list_ledgers(scope_id)

    def get_ledger_metadata(self, ledger_id: int, scope_id: int = 0) -> defer.Deferred:
        return self.driver.read_ledger_metadata(LedgerId(scope_id, ledger_id)).addCallback(lambda v: v.metadata)

    @defer.inlineCallbacks
    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._cancel_watch is not None:
            self._cancel_watch()
        if self._cancel_rack_watch is not None:
            self._cancel_rack_watch()
        if self._disk_weights is not None:
            self._disk_weights.stop()
        yield self.bookie_client.close()
        yield self.driver.close()
