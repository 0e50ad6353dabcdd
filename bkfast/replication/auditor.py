"""The auditor (Java's Auditor, spec §7.3): notices lost bookies and marks their ledgers under-replicated.

Owns one thread that runs while this process is the elected auditor:
- creates `lostBookieRecoveryDelay` from the conf if absent, and audits once at start;
- watches `available/` and `available/readonly/` (read-only counts as available). Newly missing bookies are
  audited at once when the delay is 0 or more than one bookie is pending, else one audit is scheduled after
  the delay and cancelled if every pending bookie comes back;
- a change of the delay node cancels a pending audit; a new value of 0 or the same value (`triggeraudit`)
  audits now, another value reschedules;
- the audit waits while replication is disabled, indexes bookie -> ledgers from all metadata (`scan`, reads
  pipelined), and marks every ledger of every lost bookie with that bookie (no bookie is contacted);
- periodic tasks: the bookie audit every `auditorPeriodicBookieCheckInterval` s and checkAllLedgers every
  `auditorPeriodicCheckInterval` s (`checker.bad_bookies` on every ledger; writes `checkallledgersctime`),
  skipped while disabled or while a delayed audit is pending (apache/bookkeeper#3817); their first run waits
  max(0, interval - age of their ctime node);
- the placement policy check every `auditorPeriodicPlacementPolicyCheckInterval` s (writes
  `placementpolicycheckctime`; same skipping and first run): the closed ledgers that break the client's
  placement policy, and those that meet it only softly, counted on the stats
  (`num_ledgers_not_adhering_to_placement_policy`, `num_ledgers_softly_adhering_to_placement_policy`) and in
  `last_placement_check`; with `repairedPlacementPolicyNotAdheringBookieEnable` each ledger that breaks it is
  marked (no missing replica named) so that a worker moves its replicas (placement_check).
Scoped ledgers (scope != 0) cannot be named by Java's marks and are not marked.
"""

from __future__ import annotations

import logging
import threading
import time

from twisted.internet import defer

from bkfast._stats import now_ns
from bkfast.ids import LedgerId

from . import scan
from .checker import bad_bookies
from .placement_check import placement_check
from .zk_urm import CHECK_ALL_LEDGERS_CTIME, PLACEMENT_POLICY_CHECK_CTIME, UnderReplicationManager

__all__ = ["Auditor"]

log = logging.getLogger(__name__)


class Auditor:
    """See the module docstring. `call(fn, ...)` runs async work on the reactor and waits (bkfast.reactor.call)."""

    def __init__(self, zk, root: str, layout: str, urm: UnderReplicationManager, conf, bk, stats, call):
        self.zk = zk
        self.root = root.rstrip("/")
        self.layout = layout
        self.urm = urm
        self.conf = conf
        self.bk = bk
        self.stats = stats
        self.call = call
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._bookies_changed = True
        self._delay_changed = False
        self._delay: int | None = None
        self._pending_lost: set[str] = set()
        self._audit_at: float | None = None
        self._known: set[str] = set()
        self.last_audit: dict = {}
        self.last_placement_check: dict = {}

    # --- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bk-auditor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- watches ------------------------------------------------------------------------------------------
    def _available(self) -> set[str]:
        base = f"{self.root}/available"
        writable = {c for c in self.zk.get_children(base, watch=self._on_bookies) if c != "readonly"}
        try:
            read_only = set(self.zk.get_children(f"{base}/readonly", watch=self._on_bookies))
        except Exception:
            read_only = set()
        return writable | read_only

    def _on_bookies(self, _event) -> None:
        self._bookies_changed = True
        self._wake.set()

    def _on_delay(self, _event) -> None:
        self._delay_changed = True
        self._wake.set()

    # --- the loop -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.urm.ensure_layout()
            self.urm.init_lost_bookie_recovery_delay(self.conf.get("lostBookieRecoveryDelay"))
            self._delay = self.urm.get_lost_bookie_recovery_delay(watch=self._on_delay)
            self._known = self._available()
            self._bookies_changed = False
            self.audit()
            bookie_every = self.conf.get("auditorPeriodicBookieCheckInterval")
            check_every = self.conf.get("auditorPeriodicCheckInterval")
            placement_every = self.conf.get("auditorPeriodicPlacementPolicyCheckInterval")
            next_bookie_check = time.monotonic() + bookie_every if bookie_every > 0 else None
            next_check_all = self._first_run(check_every, CHECK_ALL_LEDGERS_CTIME)
            next_placement = self._first_run(placement_every, PLACEMENT_POLICY_CHECK_CTIME)
            while not self._stop.is_set():
                deadlines = [t for t in (self._audit_at, next_bookie_check, next_check_all, next_placement)
                             if t is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 5.0
                self._wake.wait(min(timeout, 5.0))
                self._wake.clear()
                if self._stop.is_set():
                    break
                if self._bookies_changed:
                    self._bookies_changed = False
                    self._handle_bookie_change()
                if self._delay_changed:
                    self._delay_changed = False
                    self._handle_delay_change()
                now = time.monotonic()
                if self._audit_at is not None and now >= self._audit_at:
                    self._audit_at = None
                    self._pending_lost.clear()
                    self.audit()
                if next_bookie_check is not None and now >= next_bookie_check:
                    next_bookie_check = now + bookie_every
                    if self._audit_at is None and self.urm.is_enabled():
                        self.audit()
                if next_check_all is not None and now >= next_check_all:
                    next_check_all = now + check_every
                    if self._audit_at is None and self.urm.is_enabled():
                        self.check_all_ledgers()
                if next_placement is not None and time.monotonic() >= next_placement:
                    next_placement = time.monotonic() + placement_every
                    if self._audit_at is None and self.urm.is_enabled():
                        self.placement_policy_check()
        except Exception:
            if not self._stop.is_set():
                log.exception("auditor stopped on an error")

    def _first_run(self, interval: int, ctime_node: str) -> float | None:
        """When a periodic check first runs: max(0, interval - age of its ctime node); None when off."""
        if interval <= 0:
            return None
        last = self.urm.get_ctime(ctime_node)
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
            if self.urm.is_enabled(watch=lambda _e: self._wake.set()):
                return True
            self._wake.wait(5.0)
            self._wake.clear()
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
        index, count = scan.bookie_ledger_index(self.zk, self.root, self.layout, sizes=sizes)
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
        ledgers = scan.list_ledger_ids(self.zk, self.root, self.layout)
        marked = 0
        pct = self.conf.get("auditorLedgerVerificationPercentage")
        for lid, md in scan.iter_metadata(self.zk, self.root, ledgers, self.layout):
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
        repair = self.conf.get("repairedPlacementPolicyNotAdheringBookieEnable")
        marked = []

        def mark(lid: LedgerId) -> None:
            if repair and lid.scope_id == 0 and self.urm.mark(lid.ledger_id, []):
                marked.append(lid.ledger_id)

        report = placement_check(self.zk, self.root, self.layout, self.bk, self.call, stop=self._stop.is_set,
                                 on_failing=mark)
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
