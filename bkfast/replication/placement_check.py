"""The placement policy check (Java's auditorPeriodicPlacementPolicyCheckInterval task) and the placement repair
of one ledger (repairedPlacementPolicyNotAdheringBookieEnable), both judged by the client's placement policy.

`placement_check` reads every ledger's metadata (scan.iter_metadata, pipelined) and judges each segment of each
CLOSED ledger with `bk.placement.adherence` (an open ledger's writer may still change its ensemble; Java checks
closed ledgers only): a ledger with a segment that FAILs does not adhere; one whose worst segment MEETS_SOFT
(zone-aware: fewer zones than desired) adheres softly. The bookies of the ledgers are located first, unknown
ones too (a gone bookie is judged by where it was): a topology script runs in the calling thread, the
locations are recorded in the reactor thread (`call`). Blocking: auditor thread or shell, never the reactor.

`repair_placement` (async, reactor thread) moves the replicas of a closed ledger's failing segments so they
adhere: `replace_to_adhere` keeps as many positions as it can, the moved entries are copied from every replica
(the moved bookies included, as they are alive) and the segment is CAS-updated (copier). A segment with no
adhering placement among the writable bookies fails the repair (the worker retries later).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bkfast.client.placement import Adherence
from bkfast.errors import BKError, BKNoSuchLedgerExistsException
from bkfast.ids import LedgerId

from . import scan
from .copier import ByteRateLimiter, copy_segment, segment_ranges, swap_bookies
from .rereplicate import DELETED, FAILED, LOST, OK, UNAFFECTED, LedgerOutcome

__all__ = ["PlacementReport", "ledger_adherence", "locate_bookies", "placement_check", "repair_placement"]

log = logging.getLogger(__name__)


@dataclass
class PlacementReport:
    """One check: closed ledgers judged, and the ids of those that do not / only softly adhere."""

    ledgers_checked: int = 0
    not_adhering: list[LedgerId] = field(default_factory=list)
    softly_adhering: list[LedgerId] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"ledgersChecked": self.ledgers_checked,
                "numLedgersNotAdheringToPlacementPolicy": len(self.not_adhering),
                "numLedgersSoftlyAdheringToPlacementPolicy": len(self.softly_adhering),
                "notAdhering": [_name(x) for x in self.not_adhering],
                "softlyAdhering": [_name(x) for x in self.softly_adhering],
                "seconds": round(self.seconds, 3)}


def _name(ledger: LedgerId) -> int | str:
    return ledger.ledger_id if not ledger.scope_id else ledger.qualified_name


def ledger_adherence(policy, md) -> Adherence:
    """The worst adherence of the ledger's segments (every segment, closed or not)."""
    worst = Adherence.MEETS_STRICT
    for _first, ensemble in md.ensembles:
        worst = min(worst, policy.adherence(tuple(ensemble), md.write_quorum_size, md.ack_quorum_size))
        if worst == Adherence.FAIL:
            break
    return worst


def locate_bookies(bk, bookies, call: Callable) -> None:
    """Resolve the locations of `bookies` not located yet (in this thread) and record them (reactor)."""
    topology = bk.placement.topology
    found = topology.resolve_blocking(topology.unresolved(sorted(bookies)))
    if found:
        call(topology.apply, found, timeout=60)


def placement_check(bk, call: Callable, stop: Callable[[], bool] = lambda: False,
                    on_failing: Callable[[LedgerId], None] | None = None) -> PlacementReport:
    """See the module docstring. `on_failing(ledger)` is called for each ledger that does not adhere (the
    auditor marks it); `stop()` ends the scan early."""
    started = time.monotonic()
    report = PlacementReport()
    closed = []
    driver = bk.driver
    for lid, md in scan.iter_metadata(driver, call, scan.list_ledger_ids(driver, call)):
        if stop():
            break
        if md.is_closed:
            closed.append((lid, md))
    locate_bookies(bk, {b for _lid, md in closed for b in md.all_bookies}, call)
    policy = bk.placement
    for lid, md in closed:
        report.ledgers_checked += 1
        verdict = ledger_adherence(policy, md)
        if verdict == Adherence.FAIL:
            report.not_adhering.append(lid)
            if on_failing is not None:
                on_failing(lid)
        elif verdict == Adherence.MEETS_SOFT:
            report.softly_adhering.append(lid)
    report.seconds = time.monotonic() - started
    return report


async def repair_placement(bk, ledger: LedgerId, limiter: ByteRateLimiter | None = None,
                           window: int = 64) -> LedgerOutcome:
    """See the module docstring. UNAFFECTED when the ledger adheres already (or is open)."""
    try:
        md = (await bk.driver.read_ledger_metadata(ledger)).metadata
    except BKNoSuchLedgerExistsException:
        return LedgerOutcome(ledger, DELETED)
    policy = bk.placement
    if not md.is_closed or ledger_adherence(policy, md) != Adherence.FAIL:
        return LedgerOutcome(ledger, UNAFFECTED)
    outcome = LedgerOutcome(ledger, OK)
    w, a = md.write_quorum_size, md.ack_quorum_size
    for first, last, ensemble in segment_ranges(md, md.last_entry_id):
        if policy.adherence(tuple(ensemble), w, a) != Adherence.FAIL:
            continue
        new = policy.replace_to_adhere(bk.writable_bookies, tuple(ensemble), w, a, ledger.scope_id)
        if new is None:
            outcome.status, outcome.error = FAILED, f"segment at entry {first}: no placement of the writable " \
                                                    f"bookies adheres to {policy.name}"
            return outcome
        moves = {i: b for i, b in enumerate(new) if b != ensemble[i]}
        outcome.segments.append({"firstEntryId": first, "lastEntryId": last, "oldEnsemble": list(ensemble),
                                 "newEnsemble": list(new)})
        try:
            stats = await copy_segment(bk, ledger, md, first, last, ensemble, moves, limiter, window,
                                       read_replaced=True)
            outcome.stats.add(stats)
            if stats.lost:
                outcome.status = LOST
                continue
            await swap_bookies(bk, ledger, first, {ensemble[i]: b for i, b in moves.items()})
        except BKNoSuchLedgerExistsException:
            return LedgerOutcome(ledger, DELETED)
        except BKError as err:
            outcome.status, outcome.error = FAILED, f"moving segment at entry {first} failed: {err}"
            return outcome
        log.info("ledger %s: segment at entry %d moved to adhere to %s: %s -> %s", ledger, first, policy.name,
                 ",".join(ensemble), ",".join(new))
    return outcome
