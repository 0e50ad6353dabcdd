"""The bookie process's ZooKeeper side: cookies before start, registration after listening, cleanup on stop.

The order: connect (`metadataServiceUri`) once the bookie port is bound (a port in use leaves nothing in
ZooKeeper), check the cookies of every journal/ledger/index dir against ZooKeeper's (refuse to start on
any difference, write them on a new bookie), and, once the bookie listens, register
`available/<bookieId>` (or `available/readonly/<bookieId>`) with the advertised host. Every call here
blocks on ZooKeeper: never call it on the reactor thread (the service uses the reactor's thread pool).
"""

from __future__ import annotations

import abc
import logging
from typing import TYPE_CHECKING, Any

from bkfast.conf import ServerConfiguration
from bkfast.errors import BKMetaStoreException, MetadataError

if TYPE_CHECKING:
    from bkfast.meta.cookies import CookieStore
    from bkfast.meta.etcd_session import EtcdSession
    from bkfast.meta.underreplication import AuditorElection, UnderReplicationManager

log = logging.getLogger(__name__)

__all__ = ["MetadataSession", "EtcdMetadataSession", "open_metadata_session"]


def open_metadata_session(conf: ServerConfiguration, stats=None):
    """The bookie's session with the store `metadataServiceUri` names: etcd (`etcd://`, `etcd+http(s)://`)
    or ZooKeeper (everything else, as before)."""
    if conf.metadata_service_uri.split(":", 1)[0].lower().startswith("etcd"):
        return EtcdMetadataSession(conf)
    return MetadataSession(conf, stats=stats)


class _Registered(abc.ABC):
    """What every store's session does the same way: check the cookies, register once listening, follow
    read-only changes, unregister and end the session on close. `registration` is the store's
    (`prepare_registration`); the cookie store, the under-replication manager and the auditor election are
    the store's objects on this session (the HTTP admin API serves them)."""

    registration: Any = None
    conf: ServerConfiguration

    def check_cookies(self, bid: str) -> None:
        """Check (or, on a new bookie, write) the cookies of bookie `bid` (`bkfast.ids.bookie_address`'s id:
        bookieId, or the advertised host and bookiePort). Call it once the bookie port is bound."""
        from bkfast.meta.cookies import check_cookies

        check_cookies(self.cookie_store(), self.conf, bid)

    @abc.abstractmethod
    def cookie_store(self) -> CookieStore:
        """The cluster's cookies and instance id on this store."""

    @abc.abstractmethod
    def under_replication(self) -> UnderReplicationManager:
        """AutoRecovery's marks, switch and recovery delay on this store."""

    @abc.abstractmethod
    def auditor_election(self) -> AuditorElection:
        """An observer of the auditor election on this store."""

    def register(self, read_only: bool) -> None:
        """Register (prepare_registration first), once the bookie listens."""
        registration = self.registration
        registration.register(read_only=read_only)
        log.info("bookie %s registered at %s", registration.bookie_id, registration.path)

    def sync_read_only(self, read_only: bool) -> None:
        """Move the registration between the writable and the read-only list if it is on the other side."""
        registration = self.registration
        if registration is not None and registration.read_only != read_only:
            registration.set_read_only(read_only)
            log.info("bookie %s re-registered as %s", registration.bookie_id,
                     "read-only" if read_only else "writable")

    def close(self) -> None:
        try:
            if self.registration is not None:
                self.registration.unregister()
        finally:
            self._end_session()

    @abc.abstractmethod
    def _end_session(self) -> None:
        """Close the store's client (the registration is gone by now)."""


class MetadataSession(_Registered):
    """One ZooKeeper session of a bookie: its cookies, its registration, and the session's end. `kv` is None:
    there is no etcd client."""

    kv = None

    def __init__(self, conf: ServerConfiguration, stats=None):
        """Connect to the metadata service; MetadataError (one line naming metadataServiceUri) when ZooKeeper
        does not answer within zkTimeout (at least 5 s). With a StatsLogger `stats` (the bookie passes
        `bookie_bookie`), the session records Java's ZooKeeper client stats under it (zk_*, watcher_state_*)."""
        from kazoo.handlers.threading import KazooTimeoutError

        from bkfast.meta import metadata_from_conf
        from bkfast.meta.zk_client import make_zk_client, quiet_connect_attempts

        self.conf = conf
        connect, self.root, _ = metadata_from_conf(conf)
        timeout_s = conf.get("zkTimeout") / 1000.0
        self.zk = make_zk_client(connect, timeout_s, stats=stats)   # reconnects within a second after an outage
        wait_s = max(timeout_s, 5.0)
        try:
            with quiet_connect_attempts(self.zk):
                self.zk.start(timeout=wait_s)
        except KazooTimeoutError:
            self.zk.close()
            raise MetadataError(
                f"cannot reach ZooKeeper at {connect} (metadataServiceUri {conf.get('metadataServiceUri')}) within "
                f"{wait_s:g} s: start it, or give the bookie its configuration (--conf bk_server.conf, or "
                "-D metadataServiceUri=...); --no-metadata serves without one") from None
        self.registration = None

    def cookie_store(self) -> CookieStore:
        from bkfast.meta.cookies import ZkCookieStore

        return ZkCookieStore(self.zk, self.root)

    def under_replication(self) -> UnderReplicationManager:
        from bkfast.meta.zk_underreplication import ZkUnderReplicationManager

        return ZkUnderReplicationManager(self.zk, self.root)

    def auditor_election(self) -> AuditorElection:
        from bkfast.meta.zk_election import ZkAuditorElection

        return ZkAuditorElection(self.zk, self.root)

    def prepare_registration(self, bid: str, host: str, port: int, tls: bool = False) -> None:
        """Before the bookie listens: wait until an earlier session's registration of `bid` has expired (a
        restart after kill -9), so that a client that connects meanwhile is refused at once rather than
        left unanswered by a bookie that has bound its port but is not serving yet."""
        from bkfast.meta import BookieRegistration, bookie_service_info

        info = bookie_service_info(host, port, extensions=("tls",) if tls else ())
        self.registration = BookieRegistration(self.zk, self.root, bid, info)
        waited = self.registration.wait_previous_session()
        if waited > 0.5:
            log.info("bookie %s: the earlier session's registration expired after %.1f s", bid, waited)

    def _end_session(self) -> None:
        self.zk.stop()
        self.zk.close()


class EtcdMetadataSession(_Registered):
    """A bookie's metadata on etcd (bkfast.meta.etcd_driver, Java's etcd layout): the same steps as
    `MetadataSession`; the registration lives on a lease of zkTimeout seconds (Java's etcd bookie driver)
    instead of a ZooKeeper session. `zk` is None: there is no ZooKeeper session to share."""

    zk = None

    def __init__(self, conf: ServerConfiguration):
        from bkfast.meta.etcd_cluster import read_etcd_instance_id
        from bkfast.meta.etcd_driver import etcd_client_from_conf
        from bkfast.meta.etcd_layout import parse_etcd_uri

        self.conf = conf
        uri = conf.metadata_service_uri
        self.root = parse_etcd_uri(uri).scope
        self.ttl_s = max(conf.zk_timeout_ms // 1000, 2)
        self.kv = etcd_client_from_conf(uri, conf, timeout_s=max(conf.zk_timeout_ms / 1000.0, 5.0))
        try:
            read_etcd_instance_id(self.kv, self.root)
        except BKMetaStoreException as e:
            self.kv.close()
            raise MetadataError(f"cannot reach etcd at {self.kv.describe()} (metadataServiceUri {uri}): {e}; start "
                                "it, or give the bookie its configuration (--conf bk_server.conf, or -D "
                                "metadataServiceUri=...); --no-metadata serves without one") from None
        self.session: EtcdSession | None = None
        self.registration = None

    def cookie_store(self) -> CookieStore:
        from bkfast.meta.etcd_cluster import EtcdCookieStore

        return EtcdCookieStore(self.kv, self.root)

    def under_replication(self) -> UnderReplicationManager:
        from bkfast.meta.etcd_layout import EtcdKeys
        from bkfast.meta.etcd_underreplication import EtcdUnderReplicationManager

        return EtcdUnderReplicationManager(self.kv, EtcdKeys(self.root), self.session)

    def auditor_election(self) -> AuditorElection:
        from bkfast.meta.etcd_layout import EtcdKeys
        from bkfast.meta.etcd_underreplication import EtcdAuditorElection

        return EtcdAuditorElection(self.kv, EtcdKeys(self.root), self.session)

    def prepare_registration(self, bid: str, host: str, port: int, tls: bool = False) -> None:
        from bkfast.meta import bookie_service_info
        from bkfast.meta.etcd_layout import EtcdKeys
        from bkfast.meta.etcd_registration import EtcdBookieRegistration
        from bkfast.meta.etcd_session import EtcdSession

        info = bookie_service_info(host, port, extensions=("tls",) if tls else ())
        self.session = session = EtcdSession(self.kv, self.ttl_s, name="bookie-lease")
        self.registration = EtcdBookieRegistration(self.kv, EtcdKeys(self.root), session, bid, info)
        waited = self.registration.wait_previous_session()
        if waited > 0.5:
            log.info("bookie %s: the earlier lease's registration expired after %.1f s", bid, waited)

    def _end_session(self) -> None:
        if self.session is not None:
            self.session.close()
        self.kv.close()
