"""AutoRecovery as a whole (Java's AutoRecoveryMain / AutoRecoveryService): an auditor elector plus a
replication worker, inside `bkfast bookie` (`autoRecoveryDaemonEnabled=true`) or as `bkfast autorecovery`.

Owns: its own metadata driver (`metadataServiceUri`, bkfast.meta.factory; in ZooKeeper one session that holds
the votes and locks and serves its ledger client, as Java's AutoRecovery has), its ledger client
(AsyncBookKeeper on the reactor), the election thread (stands in the election, starts the `Auditor` when it
wins and stops it when it loses), the `ReplicationWorker`, and the `ReplicationStats`. The configuration is
read once, into AutoRecoverySettings (settings.py). Java's stats go to the StatsLogger it is given (`stats`:
`replication` in a bookie, the root in `bkfast autorecovery`): `auditor_*`, `replication_worker_*`, and the
client's and its metadata session's under `bookkeeper_client_*` (bkfast.client.stats,
bkfast.meta.zk_client). `start()` must be called while the reactor runs (the bookie calls it from
`callWhenRunning`; the standalone command runs the reactor in a thread first); `stop()` from any thread but
the reactor's.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from bkfast.reactor import call
from bkfast.stats import StatsLogger, StatsRegistry
from bkfast.threads import NamedThread

from .auditor import Auditor
from .settings import AutoRecoverySettings
from .stats import ReplicationStats
from .worker import ReplicationWorker

if TYPE_CHECKING:
    from bkfast.client.bookkeeper import AsyncBookKeeper
    from bkfast.meta.driver import MetadataDriver
    from bkfast.meta.underreplication import AuditorElection, UnderReplicationManager

__all__ = ["AutoRecoveryDaemon"]

log = logging.getLogger(__name__)


class AutoRecoveryDaemon:
    """See the module docstring. `bookie_id` names this process in the election (the bookie's id)."""

    def __init__(self, conf, bookie_id: str, local_bookie: str | None = None, stats: StatsLogger | None = None):
        self.conf = conf
        self.settings = AutoRecoverySettings.from_conf(conf)
        self.bookie_id = bookie_id
        self.local_bookie = local_bookie
        self.stats_logger = stats if stats is not None else StatsRegistry(enabled=False).logger()
        self.stats = ReplicationStats.for_logger(self.stats_logger)
        self.driver: MetadataDriver | None = None
        self.bk: AsyncBookKeeper | None = None
        self.urm: UnderReplicationManager | None = None
        self.elector: AuditorElection | None = None
        self.auditor: Auditor | None = None
        self.worker: ReplicationWorker | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start in a background thread (connecting blocks; never on the reactor thread)."""
        self._thread = NamedThread(self._main, "autorecovery")
        self._thread.start()

    def _connect(self) -> None:
        from bkfast.client.bookkeeper import AsyncBookKeeper
        from bkfast.conf import client_settings_of
        from bkfast.meta.factory import open_metadata_driver

        settings = self.settings
        uri = settings.metadata_service_uri
        client_stats = self.stats_logger.scope("bookkeeper_client")
        self.driver = driver = open_metadata_driver(uri, zk_timeout_s=settings.zk_timeout_s,
                                                    operation_timeout_s=max(settings.zk_timeout_s, 10.0),
                                                    stats=client_stats)
        call(driver.start, timeout=max(settings.zk_timeout_s, 10.0) + 5.0)
        self.urm = urm = driver.under_replication(store_ctime=settings.store_ctime)
        urm.ensure_layout()
        self.bk = call(AsyncBookKeeper.connect, uri, None, timeout=60, driver=driver, stats=client_stats,
                       **client_settings_of(self.conf))

    def _main(self) -> None:
        try:
            self._connect()
        except Exception:
            log.exception("autorecovery did not start")
            return
        driver, urm = self.driver, self.urm
        assert driver is not None and urm is not None, "_connect returned: both are set"
        self.worker = ReplicationWorker(urm, self.settings.worker, self.bk, self.stats, call, self.local_bookie)
        self.worker.start()
        self.elector = elector = driver.auditor_election(self.bookie_id)
        log.info("autorecovery started for %s (%s)", self.bookie_id, self.settings.metadata_service_uri)
        while not self._stop.is_set():
            try:
                won = elector.run_once()
            except Exception as err:
                if self._stop.is_set():
                    break
                log.warning("auditor election round failed: %s; retrying", err)
                won = False
                elector.interrupt()
                self._stop.wait(1.0)
            if won and (self.auditor is None or not self.auditor.running):
                self.stats.incr("auditor_elections")
                self.stats.is_auditor = True
                self.auditor = Auditor(urm, self.settings.auditor, self.bk, self.stats, call)
                self.auditor.start()
            elif not won and self.auditor is not None:
                self.auditor.stop()
                self.auditor = None
                self.stats.is_auditor = False
            elector.wait_for_change(5.0)

    def stop(self) -> None:
        """Stop the auditor, the worker and the election; close the client and the metadata driver."""
        self._stop.set()
        if self.elector is not None:
            self.elector.interrupt()
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
        if self.driver is not None:
            try:
                call(self.driver.close, timeout=30)
            except Exception as err:
                log.info("autorecovery metadata driver close: %s", err)
        log.info("autorecovery stopped")
