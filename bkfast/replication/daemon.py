"""AutoRecovery as a whole (Java's AutoRecoveryMain / AutoRecoveryService): an auditor elector plus a
replication worker, inside `bkfast bookie` (`autoRecoveryDaemonEnabled=true`) or as `bkfast autorecovery`.

Owns: its own ZooKeeper session (votes and locks are ephemeral on it; its ledger client's metadata driver
shares it, one session as Java's AutoRecovery has), its ledger client (AsyncBookKeeper on the reactor), the
election thread (stands in the election, starts the `Auditor` when it wins and stops it when it loses), the
`ReplicationWorker`, and the `ReplicationStats`. Java's stats go to the StatsLogger it is given (`stats`:
`replication` in a bookie, the root in `bkfast autorecovery`): `auditor_*`, `replication_worker_*`, and the
client's and its ZooKeeper session's under `bookkeeper_client_*` (bkfast.client.stats,
bkfast.meta.zk_client). `start()` must be
called while the reactor runs (the bookie calls it from `callWhenRunning`; the standalone command runs the
reactor in a thread first); `stop()` from any thread but the reactor's.
"""

from __future__ import annotations

import logging
import threading

from bkfast.reactor import call
from bkfast.stats import StatsLogger, StatsRegistry

from .auditor import Auditor
from .election import AuditorElector
from .stats import ReplicationStats
from .worker import ReplicationWorker
from .zk_urm import UnderReplicationManager

__all__ = ["AutoRecoveryDaemon"]

log = logging.getLogger(__name__)


class AutoRecoveryDaemon:
    """See the module docstring. `bookie_id` names this process in the election (the bookie's id)."""

    def __init__(self, conf, bookie_id: str, local_bookie: str | None = None, stats: StatsLogger | None = None):
        self.conf = conf
        self.bookie_id = bookie_id
        self.local_bookie = local_bookie
        self.stats_logger = stats if stats is not None else StatsRegistry(enabled=False).logger()
        self.stats = ReplicationStats.for_logger(self.stats_logger)
        self.zk = None
        self.bk = None
        self.urm = None
        self.elector = None
        self.auditor: Auditor | None = None
        self.worker: ReplicationWorker | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start in a background thread (connecting blocks; never on the reactor thread)."""
        self._thread = threading.Thread(target=self._main, name="bk-autorecovery", daemon=True)
        self._thread.start()

    def _connect(self) -> None:
        from kazoo.retry import KazooRetry

        from bkfast.client.bookkeeper import AsyncBookKeeper
        from bkfast.conf import client_settings_of
        from bkfast.meta import metadata_from_conf
        from bkfast.meta.zk_client import make_zk_client
        from bkfast.meta.zk_driver import ZkMetadataDriver
        from bkfast.meta.zk_layout import read_layout

        hosts, self.root, _layout = metadata_from_conf(self.conf)
        timeout_s = self.conf.get("zkTimeout") / 1000.0
        client_stats = self.stats_logger.scope("bookkeeper_client")
        self.zk = make_zk_client(hosts, timeout_s, log_states=False, stats=client_stats,
                                 connection_retry=KazooRetry(max_tries=-1, max_delay=1.0))
        self.zk.start(timeout=max(timeout_s, 10.0))
        self.layout = read_layout(self.zk, self.root).name
        self.urm = UnderReplicationManager(
            self.zk, self.root, store_ctime=self.conf.get("storeSystemTimeAsLedgerUnderreplicatedMarkTime"))
        self.urm.ensure_layout()
        uri = self.conf.get("metadataServiceUri")
        driver = ZkMetadataDriver(uri, client=self.zk)
        self.bk = call(AsyncBookKeeper.connect, uri, None, timeout=60, driver=driver, stats=client_stats,
                       **client_settings_of(self.conf))

    def _main(self) -> None:
        try:
            self._connect()
        except Exception:
            log.exception("autorecovery did not start")
            return
        self.worker = ReplicationWorker(self.zk, self.root, self.urm, self.conf, self.bk, self.stats, call,
                                        self.local_bookie)
        self.worker.start()
        self.elector = AuditorElector(self.zk, self.root, self.bookie_id)
        log.info("autorecovery started for %s (root %s)", self.bookie_id, self.root)
        while not self._stop.is_set():
            try:
                won = self.elector.run_once()
            except Exception as err:
                if self._stop.is_set():
                    break
                log.warning("auditor election round failed: %s; retrying", err)
                won = False
                self.elector.wake.set()
                self._stop.wait(1.0)
            if won and (self.auditor is None or not self.auditor.running):
                self.stats.incr("auditor_elections")
                self.stats.is_auditor = True
                self.auditor = Auditor(self.zk, self.root, self.layout, self.urm, self.conf, self.bk, self.stats, call)
                self.auditor.start()
            elif not won and self.auditor is not None:
                self.auditor.stop()
                self.auditor = None
                self.stats.is_auditor = False
            self.elector.wake.wait(5.0)

    def stop(self) -> None:
        """Stop the auditor, the worker and the election; close the client and the session."""
        self._stop.set()
        if self.elector is not None:
            self.elector.wake.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.auditor is not None:
            self.auditor.stop()
        if self.worker is not None:
            self.worker.stop()
        if self.elector is not None:
            try:
                self.elector.withdraw()
            except Exception:
                pass
        if self.bk is not None:
            try:
                call(self.bk.close, timeout=30)
            except Exception as err:
                log.info("autorecovery client close: %s", err)
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()
        log.info("autorecovery stopped")
