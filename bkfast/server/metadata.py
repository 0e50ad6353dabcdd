"""The bookie process's ZooKeeper side: cookies before start, registration after listening, cleanup on stop.

The order is Java's: connect (`metadataServiceUri`), check the cookies of every journal/ledger/index dir
against ZooKeeper's (refuse to start on any difference, write them on a new bookie), and, once the
bookie listens, register `available/<bookieId>` (or `available/readonly/<bookieId>`). Every call here
blocks on ZooKeeper: never call it on the reactor thread (the service uses the reactor's thread pool).
"""

from __future__ import annotations

import logging

from bkfast.conf import ServerConfiguration

log = logging.getLogger(__name__)

__all__ = ["MetadataSession"]


class MetadataSession:
    """One ZooKeeper session of a bookie: its cookies, its registration, and the session's end."""

    def __init__(self, conf: ServerConfiguration):
        from kazoo.client import KazooClient

        from bkfast.meta import metadata_from_conf

        self.conf = conf
        connect, self.root, _ = metadata_from_conf(conf)
        timeout_s = conf.get("zkTimeout") / 1000.0
        self.zk = KazooClient(hosts=connect, timeout=timeout_s)
        self.zk.start(timeout=max(timeout_s, 5.0))
        self.registration = None

    def check_cookies(self) -> str:
        """Check (or, on a new bookie, write) the cookies; returns the bookie id."""
        from bkfast.meta import bookie_id, check_or_create_cookies

        bid = bookie_id(self.conf)
        check_or_create_cookies(self.zk, self.root, self.conf, bid)
        return bid

    def register(self, bid: str, host: str, port: int, read_only: bool, tls: bool = False) -> None:
        from bkfast.meta import BookieRegistration, bookie_service_info

        info = bookie_service_info(host, port, extensions=("tls",) if tls else ())
        self.registration = BookieRegistration(self.zk, self.root, bid, info)
        self.registration.register(read_only=read_only)
        log.info("bookie %s registered under %s/available%s", bid, self.root, "/readonly" if read_only else "")

    def sync_read_only(self, read_only: bool) -> None:
        """Move the registration between available/ and available/readonly/ if it is on the other side."""
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
            self.zk.stop()
            self.zk.close()
