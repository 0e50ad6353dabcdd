"""The replication worker (Java's ReplicationWorker, spec §7.5): takes marked ledgers and re-replicates them.

Owns one thread (loop.ThreadLoop); the metadata it reaches through the metadata driver (`bk.driver`) and the
UnderReplicationManager it is given. Loop: wait while replication is disabled; list the marks in random order;
skip locked ones; take one by taking its lock (held by this process's metadata session); then:
- metadata gone -> the mark is dropped (apache/bookkeeper#3316);
- the failed bookies are those of the ledger's segments that are not registered (writable or read-only); when
  every bookie is registered, those that do not answer for entries they should hold (read as checkAllLedgers
  reads them: a bookie back empty under its id); none -> the mark is dropped without copying (the missing
  bookies are back and serving: apache/bookkeeper#2766);
- none failed, but `repairedPlacementPolicyNotAdheringBookieEnable` is on and the closed ledger breaks the
  placement policy (the auditor's placement check marked it) -> its replicas are moved until it adheres
  (placement_check.repair_placement);
- otherwise `rereplicate_ledger` to the local bookie (inside a bookie) or by placement; an OPEN ledger whose
  last segment holds a failed bookie keeps its lock for `openLedgerRereplicationGracePeriod` ms (the writer
  may change its ensemble itself), then is fenced and recovered;
- done -> the mark is deleted at the version read (a newer mark stays); entries no replica holds -> logged
  once naming the ledger and entries, counted as unrecoverable and the mark dropped, never retried in a loop
  (apache/bookkeeper#4872); other failures (e.g. no bookie to replace with, apache/bookkeeper#3905) -> the lock
  is released after `lockReleaseOfFailedLedgerGracePeriod`/32 * 2^n (n-th failure; the full period from the
  5th) and the worker backs off `rwRereplicateBackoffMs`; an unexpected error (the metadata store gone mid-way)
  releases the lock at once.
Copies are throttled by `replicationRateByBytes`. The keys come as a WorkerSettings (settings.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from twisted.internet import defer

from bkfast._stats import now_ns
from bkfast.client.placement import Adherence
from bkfast.errors import BKNoSuchLedgerExistsException
from bkfast.ids import LedgerId
from bkfast.meta.ledger_metadata import LedgerMetadata
from bkfast.meta.underreplication import MarkInfo, UnderReplicationManager

from .checker import bad_bookies
from .copier import ByteRateLimiter
from .loop import ThreadLoop, available_bookies
from .placement_check import ledger_adherence, locate_bookies, repair_placement
from .rereplicate import DELETED, FAILED, LOST, OK, OPEN_LAST_SEGMENT, UNAFFECTED, rereplicate_ledger
from .settings import WorkerSettings

__all__ = ["ReplicationWorker"]

log = logging.getLogger(__name__)

POLL_S = 1.0


@dataclass
class _Pass:
    """One locked ledger being handled: its mark, id, metadata and the bookies judged failed."""

    info: MarkInfo
    ledger: LedgerId
    md: LedgerMetadata
    failed: set[str]

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id


class ReplicationWorker(ThreadLoop):
    """See the module docstring. `bk` is an AsyncBookKeeper; `call` runs async work on its reactor and waits."""

    thread_name = "repl-worker"
    join_s = 60.0

    def __init__(self, urm: UnderReplicationManager, settings: WorkerSettings, bk, stats, call,
                 local_bookie: str | None = None):
        super().__init__()
        self.urm = urm
        self.settings = settings
        self.bk = bk
        self.stats = stats
        self.call = call
        self.local_bookie = local_bookie
        rate = settings.rate_bytes
        self.limiter = ByteRateLimiter(rate, bk.reactor) if rate and rate > 0 else None
        self.grace_s = settings.open_ledger_grace_s
        self.backoff_s = settings.backoff_s
        self.lock_grace_s = settings.lock_grace_s
        self.repair_not_adhering = settings.repair_placement
        self._failures: dict[int, int] = {}
        self._reported_lost: set[tuple[int, tuple]] = set()

    def _available(self) -> set[str]:
        return available_bookies(self.bk.driver, self.call)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.urm.is_enabled(watch=self._wake.set):
                    self._sleep(5.0)
                    continue
                if not self._take_one():
                    self._sleep(POLL_S)
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("replication worker: unexpected error; backing off")
                self._sleep(self.backoff_s)

    def _take_one(self) -> bool:
        marks = self.urm.list_marked()
        if not marks:
            return False
        random.shuffle(marks)
        locked = self.urm.locked()
        for ledger_id in marks:
            if ledger_id in locked or self._stop.is_set():
                continue
            if not self.urm.is_enabled():
                return False
            if self.urm.try_lock(ledger_id):
                try:
                    self.process(ledger_id)
                except BaseException:
                    self._release_after_error(ledger_id)
                    raise
                return True
        return False

    def _breaks_placement(self, md) -> bool:
        """repairedPlacementPolicyNotAdheringBookieEnable: whether a closed ledger breaks the placement policy."""
        if not self.repair_not_adhering or not md.is_closed:
            return False
        locate_bookies(self.bk, md.all_bookies, self.call)
        return ledger_adherence(self.bk.placement, md) == Adherence.FAIL

    def _rereplicate(self, ledger: LedgerId, failed: set[str], fence_open: bool):
        if not failed:                      # only the placement is wrong: move replicas of live bookies
            return self.call(lambda: defer.ensureDeferred(repair_placement(self.bk, ledger, self.limiter)),
                             timeout=3600)
        target = self.local_bookie if self.local_bookie not in failed else None
        return self.call(lambda: defer.ensureDeferred(rereplicate_ledger(
            self.bk, ledger, failed, target=target, fence_open=fence_open, limiter=self.limiter, target_hint=True,
            recorder=self.stats.worker.replicator)), timeout=3600)

    def process(self, ledger_id: int) -> str:
        """Handle one locked ledger; returns the outcome's status (the lock is released in every case).
        Recorded as Java's `rereplicate` (success: the mark was resolved as replicated)."""
        start, status = now_ns(), FAILED
        try:
            status = self._process(ledger_id)
        finally:
            rereplicate = self.stats.worker.rereplicate
            (rereplicate.ok_since if status in (OK, UNAFFECTED) else rereplicate.fail_since)(start)
        return status

    def _record_outcome(self, outcome, placement_only: bool) -> None:
        """Java's worker counters of one outcome: ledgers with a segment moved (for the placement too), and
        the error class of a failed or vanished ledger."""
        java = self.stats.worker
        if outcome.replicated_segments or (outcome.status == OK and outcome.segments):
            java.ledgers_replicated.inc()
            if placement_only:
                java.not_adhering_placement_ledgers_replicated.inc()
        if outcome.status == FAILED:
            java.exception(outcome.error_type or "BKException")
        elif outcome.status == DELETED:
            java.exception("BKNoSuchLedgerExistsOnMetadataServerException")

    def _process(self, ledger_id: int) -> str:
        job = self._judge(ledger_id)
        if isinstance(job, str):
            return job
        started = time.monotonic()
        outcome = self._rereplicate_waiting_for_writer(job)
        if outcome is None:
            return FAILED
        self._record_outcome(outcome, not job.failed)
        return self._settle(job, outcome, max(time.monotonic() - started, 1e-6))

    def _judge(self, ledger_id: int) -> _Pass | str:
        """The locked ledger's mark, metadata and failed bookies; or the status when nothing is to be copied
        (mark gone, ledger deleted, every bookie back and serving: the mark is dropped)."""
        urm = self.urm
        info = urm.get_mark(ledger_id)
        if info is None:
            urm.release_lock(ledger_id)
            return DELETED
        ledger = LedgerId(0, ledger_id)
        try:
            md = self.call(self.bk.driver.read_ledger_metadata, ledger, timeout=60).metadata
        except BKNoSuchLedgerExistsException:
            log.info("ledger %d was deleted while marked; unmarking it", ledger_id)
            urm.mark_replicated(ledger_id, info.version)
            self.stats.worker.exception("BKNoSuchLedgerExistsOnMetadataServerException")
            return DELETED
        available = self._available()
        failed = md.all_bookies - available
        if not failed:
            # Every bookie is registered. A mark of checkAllLedgers names a registered bookie that does not
            # serve entries it should hold (e.g. back empty after a disk replacement): read, as Java's worker
            # does through its LedgerChecker, which bookies fail their fragments, and move those fragments.
            failed = self._not_serving(ledger, md, available)
        if not failed and not self._breaks_placement(md):
            log.info("ledger %d: every bookie of its ensembles is available and serving (marked missing: %s); "
                     "mark dropped", ledger_id, ",".join(info.replicas) or "-")
            urm.mark_replicated(ledger_id, info.version)
            self.stats.incr("replicated_ledgers")
            return UNAFFECTED
        return _Pass(info, ledger, md, failed)

    def _rereplicate_waiting_for_writer(self, job: _Pass):
        """The copy; an open ledger with a failed bookie in its last segment first gets the grace period for its
        writer, then is fenced. None (lock released) when stopped meanwhile."""
        outcome = self._rereplicate(job.ledger, job.failed, fence_open=False)
        if outcome.status != OPEN_LAST_SEGMENT:
            return outcome
        log.info("ledger %d is open with failed bookies %s in its last segment: waiting %.1f s for the writer",
                 job.ledger_id, sorted(job.failed), self.grace_s)
        self._stop.wait(self.grace_s)
        if self._stop.is_set():
            self.urm.release_lock(job.ledger_id)
            return None
        job.failed = self._current_failed(job.ledger) or job.failed
        return self._rereplicate(job.ledger, job.failed, fence_open=True)

    def _settle(self, job: _Pass, outcome, elapsed: float) -> str:
        """Counts, then the mark: resolved (copied, or entries lost: reported once, never retried) or kept with
        its lock released later (a failure)."""
        ledger_id, urm = job.ledger_id, self.urm
        self.stats.incr("entries_copied", outcome.stats.entries)
        self.stats.incr("bytes_copied", outcome.stats.bytes)
        if outcome.stats.bytes:
            self.stats.rate_bytes_per_second = outcome.stats.bytes / elapsed
        if outcome.status in (OK, UNAFFECTED, DELETED):
            urm.mark_replicated(ledger_id, job.info.version)
            self.stats.incr("replicated_ledgers")
            log.info("ledger %d re-replicated off %s: %d entries, %d bytes in %.2f s", ledger_id, sorted(job.failed),
                     outcome.stats.entries, outcome.stats.bytes, elapsed)
        elif outcome.status == LOST:
            key = (ledger_id, tuple(job.md.ensembles))
            if key not in self._reported_lost:
                self._reported_lost.add(key)
                self.stats.incr("unrecoverable_ledgers")
                log.error("ledger %d is unrecoverable: no surviving replica holds entries %s (failed bookies %s); "
                          "it will not be retried", ledger_id, _ranges(outcome.stats.lost), sorted(job.failed))
            urm.mark_replicated(ledger_id, job.info.version)
        else:
            self.stats.incr("failed_ledgers")
            self._release_later(ledger_id, outcome.error)
            self._sleep(self.backoff_s)
        if outcome.status != FAILED:
            self._failures.pop(ledger_id, None)
        return outcome.status

    def _release_after_error(self, ledger_id: int) -> None:
        """process() failed half-way (e.g. ZooKeeper went away): release the lock, or it stays held by this
        live session and no worker ever takes the mark again."""
        try:
            self.urm.release_lock(ledger_id)
        except Exception as err:
            log.warning("ledger %d: could not release its lock after an error (%s)", ledger_id, err)

    def _release_later(self, ledger_id: int, error) -> None:
        """Java's lock release of a failed ledger: after g/32 * 2^n for the n-th failure (n < 5), then g, so
        other workers do not retry a ledger that cannot be replicated now in a tight loop."""
        n = self._failures.get(ledger_id, 0)
        self._failures[ledger_id] = n + 1
        self.stats.worker.defer_lock_release_of_failed_ledger.inc()
        delay = self.lock_grace_s / 32 * 2 ** n if n < 5 else self.lock_grace_s
        log.warning("ledger %d: re-replication failed (%s); its lock is released in %.1f s", ledger_id, error, delay)
        if delay <= 0:
            self.urm.release_lock(ledger_id)
            return
        timer = threading.Timer(delay, self.urm.release_lock, (ledger_id,))
        timer.daemon = True
        timer.start()

    def _not_serving(self, ledger: LedgerId, md, available: set[str]) -> set[str]:
        percentage = self.settings.verification_percentage
        return self.call(lambda: defer.ensureDeferred(bad_bookies(self.bk, ledger, md, available, percentage)),
                         timeout=600)

    def _current_failed(self, ledger: LedgerId) -> set[str]:
        try:
            md = self.call(self.bk.driver.read_ledger_metadata, ledger, timeout=60).metadata
        except BKNoSuchLedgerExistsException:
            return set()
        return md.all_bookies - self._available()


def _ranges(ids: list[int]) -> str:
    """[1,2,3,7] -> '1-3,7'."""
    out: list[list[int]] = []
    for x in sorted(ids):
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in out)

