"""The auditor (Java's Auditor, spec §7.3): notices lost bookies and marks their ledgers under-replicated.

Owns one thread (loop.ThreadLoop) that runs while this process is the elected auditor; it reaches the metadata
only through the metadata driver (`bk.driver`: bookies, ledgers) and the UnderReplicationManager it is given:
- creates `lostBookieRecoveryDelay` from the conf if absent, and audits once at start;
- watches the registered bookies (read-only counts as available). Newly missing bookies are
  audited at once when the delay is 0 or more than one bookie is pending, else one audit is scheduled after
  the delay and cancelled if every pending bookie comes back;
- a change of the delay cancels a pending audit; a new value of 0 or the same value (`triggeraudit`)
  audits now, another value reschedules;
- the audit waits while replication is disabled, indexes bookie -> ledgers from all metadata (`scan`, reads
  pipelined), and marks every ledger of every lost bookie with that bookie (no bookie is contacted);
- periodic tasks: the bookie audit every `auditorPeriodicBookieCheckInterval` s and checkAllLedgers every
  `auditorPeriodicCheckInterval` s (`checker.bad_bookies` on every ledger; records its CHECK_ALL_LEDGERS_CTIME),
  skipped while disabled or while a delayed audit is pending (apache/bookkeeper#3817); their first run waits
  max(0, interval - age of their last recorded run);
- the placement policy check every `auditorPeriodicPlacementPolicyCheckInterval` s (records its
  PLACEMENT_POLICY_CHECK_CTIME; same skipping and first run): the closed ledgers that break the client's
  placement policy, and those that meet it only softly, counted on the stats
  (`num_ledgers_not_adhering_to_placement_policy`, `num_ledgers_softly_adhering_to_placement_policy`) and in
  `last_placement_check`; with `repairedPlacementPolicyNotAdheringBookieEnable` each ledger that breaks it is
  marked (no missing replica named) so that a worker moves its replicas (placement_check).
Scoped ledgers (scope != 0) cannot be named by Java's marks and are not marked. The keys it follows come as
an AuditorSettings (settings.py).
"""

from __future__ import annotations

import logging
import time

from twisted.internet import defer

from bkfast._stats import now_ns
from bkfast.ids import LedgerId
from bkfast.meta.underreplication import CHECK_ALL_LEDGERS_CTIME, PLACEMENT_POLICY_CHECK_CTIME, UnderReplicationManager

from . import scan
from .checker import bad_bookies
from .loop import ThreadLoop, available_bookies
from .placement_check import placement_check
from .settings import AuditorSettings

__all__ = ["Auditor"]

log = logging.getLogger(__name__)


class Auditor(ThreadLoop):
    """See the module docstring. `bk` is an AsyncBookKeeper (its driver is the metadata store); `call(fn, ...)`
    runs async work on the reactor and waits (bkfast.reactor.call)."""

    thread_name = "auditor"

    def __init__(self, urm: UnderReplicationManager, settings: AuditorSettings, bk, stats, call):
        super().__init__()
        self.urm = urm
        self.settings = settings
        self.bk = bk
        self.driver = bk.driver
        self.stats = stats
        self.call = call
        self._cancel_bookie_watch = None
        self._bookies_changed = True
        self._delay_changed = False
        self._delay: int | None = None
        self._pending_lost: set[str] = set()
        self._audit_at: float | None = None
        self._known: set[str] = set()
        self.last_audit: dict = {}
        self.last_placement_check: dict = {}

    # --- watches ------------------------------------------------------------------------------------------
    def _available(self) -> set[str]:
        return available_bookies(self.driver, self.call)

    def _watch_bookies(self) -> None:
        self._cancel_bookie_watch = self.call(self.driver.watch_bookies, self._on_bookies, timeout=60)

    def _unwatch_bookies(self) -> None:
        cancel, self._cancel_bookie_watch = self._cancel_bookie_watch, None
        if cancel is not None:
            try:
                self.call(cancel, timeout=10)
            except Exception as err:
                log.info("auditor: cancelling the bookie watch: %s", err)

    def _on_bookies(self, _writable: dict, _read_only: dict) -> None:
        self._bookies_changed = True
        self._wake.set()

    def _on_delay(self) -> None:
        self._delay_changed = True
        self._wake.set()

    # --- the loop -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.urm.ensure_layout()
            self.urm.init_lost_bookie_recovery_delay(self.settings.lost_bookie_recovery_delay_s)
            self._delay = self.urm.get_lost_bookie_recovery_delay(watch=self._on_delay)
            self._watch_bookies()
            self._known = self._available()
            self._bookies_changed = False
            self.audit()
            periodic = self._periodic_tasks()
            while not self._stop.is_set():
                deadlines = [t for t in (self._audit_at, *(task[0] for task in periodic)) if t is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 5.0
                self._sleep(min(timeout, 5.0))
                if self._stop.is_set():
                    break
                self._handle_events()
                self._run_due(periodic)
        except Exception:
            if not self._stop.is_set():
                log.exception("auditor stopped on an error")
        finally:
            self._unwatch_bookies()

    def _periodic_tasks(self) -> list[list]:
        """[next run (monotonic s, None = off), interval s, task] of the bookie audit, checkAllLedgers and the
        placement check; the bookie audit first runs one interval from now, the others as `_first_run` says."""
        settings = self.settings
        bookie_every = settings.bookie_check_interval_s
        return [
            [time.monotonic() + bookie_every if bookie_every > 0 else None, bookie_every, self.audit],
            [self._first_run(settings.check_all_ledgers_interval_s, CHECK_ALL_LEDGERS_CTIME),
             settings.check_all_ledgers_interval_s, self.check_all_ledgers],
            [self._first_run(settings.placement_check_interval_s, PLACEMENT_POLICY_CHECK_CTIME),
             settings.placement_check_interval_s, self.placement_policy_check],
        ]

    def _handle_events(self) -> None:
        """What the watches announced: bookies gone or back, a new delay; then a delayed audit that is due."""
        if self._bookies_changed:
            self._bookies_changed = False
            self._handle_bookie_change()
        if self._delay_changed:
            self._delay_changed = False
            self._handle_delay_change()
        if self._audit_at is not None and time.monotonic() >= self._audit_at:
            self._audit_at = None
            self._pending_lost.clear()
            self.audit()

    def _run_due(self, periodic: list[list]) -> None:
        """Each periodic task that is due, unless replication is disabled or a delayed audit is pending
        (apache/bookkeeper#3817)."""
        for task in periodic:
            next_at, every, run = task
            now = time.monotonic()
            if next_at is None or now < next_at:
                continue
            task[0] = now + every
            if self._audit_at is None and self.urm.is_enabled():
                run()

    def _first_run(self, interval: int, check: str) -> float | None:
        """When a periodic check first runs: max(0, interval - age of its last recorded run); None when off."""
        if interval <= 0:
            return None
        last = self.urm.get_ctime(check)
        age = time.time() - last / 1000.0 if last > 0 else None
        return time.monotonic() + (max(0.0, interval - age) if age is not None else 0.0)

    def _handle_bookie_change(self) -> None:
        available = self._available()
        missing = self._known - available
        self._known |= available
        returned = self._pending_lost - missing
        self._pending_lost -= returned
        if returned:
            log.info("auditor: bookies %s are back", sorted(returned))
        new = missing - self._pending_lost
        if self._audit_at is not None and not self._pending_lost:
            log.info("auditor: every lost bookie came back; the delayed audit is cancelled")
            self._cancel_delayed_audit()
        if not new:
            return
        self._pending_lost |= new
        delay = self._delay or 0
        log.info("auditor: bookies %s are gone (lostBookieRecoveryDelay %d s)", sorted(new), delay)
        if delay == 0 or len(self._pending_lost) > 1:
            self._cancel_delayed_audit()
            self._pending_lost.clear()
            self.audit()
        elif self._audit_at is None:
            self._audit_at = time.monotonic() + delay
            self.stats.auditor.num_bookie_audits_delayed.inc()

    def _cancel_delayed_audit(self) -> None:
        """Drop the audit put off by lostBookieRecoveryDelay, if one is (Java's NUM_DELAYED_BOOKIE_AUDITS_CANCELLED)."""
        if self._audit_at is not None:
            self._audit_at = None
            self.stats.auditor.num_delayed_bookie_audits_cancelled.inc()

    def _handle_delay_change(self) -> None:
        old = self._delay
        try:
            self._delay = self.urm.get_lost_bookie_recovery_delay(watch=self._on_delay)
        except Exception as err:
            log.warning("auditor: cannot read lostBookieRecoveryDelay: %s", err)
            return
        new = self._delay or 0
        log.info("auditor: lostBookieRecoveryDelay %s -> %s", old, new)
        if new == 0 or new == old:
            self._cancel_delayed_audit()
            self._pending_lost.clear()
            self.audit()
        elif self._audit_at is not None:
            self._audit_at = time.monotonic() + new          # Java: the pending audit cancelled, a new one put off
            self.stats.auditor.num_delayed_bookie_audits_cancelled.inc()
            self.stats.auditor.num_bookie_audits_delayed.inc()

    # --- audits -------------------------------------------------------------------------------------------
    def _wait_enabled(self) -> bool:
        while not self._stop.is_set():
            if self.urm.is_enabled(watch=self._wake.set):
                return True
            self._sleep(5.0)
        return False

    def audit(self) -> dict:
        """Index every ledger's bookies, mark each ledger of each lost bookie. Returns what it did."""
        if not self._wait_enabled():
            return {}
        start = now_ns()
        try:
            result = self._audit(start)
        except BaseException:
            self.stats.auditor.audit_bookies_time.fail_since(start)
            raise
        self.stats.auditor.audit_bookies_time.ok_since(start)
        return result

    def _audit(self, start: int) -> dict:
        java = self.stats.auditor
        started = time.monotonic()
        sizes: dict[LedgerId, int] = {}
        index, count = scan.bookie_ledger_index(self.driver, self.call, sizes=sizes)
        scanned = time.monotonic() - started
        available = self._available()
        java.bookie_to_ledgers_map_creation_time.ok_since(start)
        self._known = set(available)          # bookies lost until now are handled by this audit
        lost = sorted(set(index) - available)
        marked = 0
        for bookie in lost:
            ledgers = sorted(lid.ledger_id for lid in index[bookie] if lid.scope_id == 0)
            log.info("auditor: bookie %s is lost; marking its %d ledgers", bookie, len(ledgers))
            marked += self.urm.mark_many(ledgers, [bookie])
            if ledgers:
                java.num_under_replicated_ledgers.ok_value(len(ledgers))
                java.under_replicated_ledgers_total_size.ok_value(
                    sum(sizes.get(LedgerId(0, lid), 0) for lid in ledgers))
        if lost:
            java.url_publish_time_for_lost_bookie.ok_since(start)
        self.stats.incr("marked_ledgers", marked)
        self.last_audit = {"ledgers": count, "lostBookies": lost, "marksWritten": marked,
                           "scanSeconds": round(scanned, 3), "totalSeconds": round(time.monotonic() - started, 3)}
        log.info("auditor: audit of %d ledgers: lost %s, %d marks written in %.2f s (scan %.2f s)", count, lost,
                 marked, time.monotonic() - started, scanned)
        return self.last_audit

    def check_all_ledgers(self) -> int:
        """checkAllLedgers: read the striped ends of every segment on its bookies; mark bad ones."""
        start = now_ns()
        try:
            marked = self._check_all_ledgers()
        except BaseException:
            self.stats.auditor.check_all_ledgers_time.fail_since(start)
            raise
        self.stats.auditor.check_all_ledgers_time.ok_since(start)
        return marked

    def _check_all_ledgers(self) -> int:
        java = self.stats.auditor
        available = self._available()
        ledgers = scan.list_ledger_ids(self.driver, self.call)
        marked = 0
        pct = self.settings.verification_percentage
        for lid, md in scan.iter_metadata(self.driver, self.call, ledgers):
            if self._stop.is_set() or not self.urm.is_enabled():
                return marked
            if lid.scope_id != 0:
                continue
            java.num_fragments_per_ledger.ok_value(len(md.ensembles))
            java.num_bookies_per_ledger.ok_value(len(md.all_bookies))
            java.num_ledgers_checked.inc()
            try:
                bad = self.call(lambda lid=lid, md=md: defer.ensureDeferred(
                    bad_bookies(self.bk, LedgerId(0, lid.ledger_id), md, available, pct)), timeout=120)
            except Exception as err:
                log.warning("auditor: checking ledger %s failed: %s", lid, err)
                continue
            if bad:
                marked += bool(self.urm.mark(lid.ledger_id, sorted(bad)))
                java.num_under_replicated_ledgers.ok_value(1)
                java.under_replicated_ledgers_total_size.ok_value(md.length)
        self.urm.set_ctime(CHECK_ALL_LEDGERS_CTIME, int(time.time() * 1000))
        self.stats.incr("marked_ledgers", marked)
        log.info("auditor: checkAllLedgers marked %d ledgers", marked)
        return marked

    def placement_policy_check(self) -> dict:
        """The placement policy check (see the module docstring); returns what it found."""
        start = now_ns()
        repair = self.settings.repair_placement
        marked = []

        def mark(lid: LedgerId) -> None:
            if repair and lid.scope_id == 0 and self.urm.mark(lid.ledger_id, []):
                marked.append(lid.ledger_id)

        report = placement_check(self.bk, self.call, stop=self._stop.is_set, on_failing=mark)
        self.urm.set_ctime(PLACEMENT_POLICY_CHECK_CTIME, int(time.time() * 1000))
        self.stats.num_ledgers_not_adhering_to_placement_policy = len(report.not_adhering)
        self.stats.num_ledgers_softly_adhering_to_placement_policy = len(report.softly_adhering)
        self.stats.incr("marked_ledgers", len(marked))
        self.last_placement_check = {**report.to_dict(), "marked": marked}
        self.stats.auditor.placement_policy_check_time.ok_since(start)
        log.info("auditor: placement check of %d closed ledgers: %d do not adhere to %s, %d adhere softly, %d "
                 "marked for repair (%.2f s)", report.ledgers_checked, len(report.not_adhering),
                 self.bk.placement.name, len(report.softly_adhering), len(marked), report.seconds)
        return self.last_placement_check
