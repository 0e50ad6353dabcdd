"""Re-replicating one ledger off failed bookies: the step the manual `recover` and the replication worker share.

Owns `rereplicate_ledger`: read the metadata (gone = nothing to do, apache/bookkeeper#3316), stop here when no
segment lists a failed bookie, fence and recover an OPEN ledger whose last segment holds one (the client's
recovery, so a live writer is stopped correctly) unless told to skip or wait, then for every segment listing
a failed bookie choose replacements (the target if it fits, else the placement policy: never a bookie of that
segment, never a failed or read-only one), copy its entries (`copier.copy_segment`) and CAS the ensemble
(`copier.swap_bookies`). A closed empty ledger only gets its ensemble fixed (apache/bookkeeper#3220). Entries
no surviving replica holds are reported in the outcome (`lost`) and that segment is left alone. Reactor
thread only.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection
from dataclasses import dataclass, field

from bkfast.client.placement import choose_ensemble
from bkfast.errors import BKError, BKNoSuchLedgerExistsException, BKNotEnoughBookiesException
from bkfast.ids import LedgerId

from .copier import ByteRateLimiter, CopyStats, copy_segment, segment_ranges, swap_bookies

__all__ = ["LedgerOutcome", "rereplicate_ledger", "choose_segment_replacements",
           "OK", "UNAFFECTED", "DELETED", "SKIPPED_OPEN", "OPEN_LAST_SEGMENT", "LOST", "FAILED", "PLANNED"]

log = logging.getLogger(__name__)

OK = "replicated"
UNAFFECTED = "unaffected"
DELETED = "deleted"
SKIPPED_OPEN = "skipped-open"
OPEN_LAST_SEGMENT = "open-last-segment"        # the worker waits for the writer, then fences
LOST = "entries-lost"
FAILED = "failed"
PLANNED = "planned"                            # dry run


@dataclass
class LedgerOutcome:
    """What happened to one ledger (`segments`: the old and new ensemble of each segment handled)."""

    ledger: LedgerId
    status: str
    fenced: bool = False
    fence_required: bool = False
    segments: list[dict] = field(default_factory=list)
    stats: CopyStats = field(default_factory=CopyStats)
    error: str | None = None

    def to_dict(self) -> dict:
        out = {"ledgerId": self.ledger.ledger_id, "status": self.status, "fenced": self.fenced,
               "fenceRequired": self.fence_required, "segments": self.segments, "entriesCopied": self.stats.entries,
               "bytesCopied": self.stats.bytes}
        if self.ledger.scope_id:
            out["scopeId"] = self.ledger.scope_id
        if self.stats.lost:
            out["lostEntries"] = self.stats.lost
        if self.error:
            out["error"] = self.error
        return out


def choose_segment_replacements(bk, ensemble: tuple[str, ...], failed: Collection[str], scope_id: int = 0,
                                target: str | None = None, rng: random.Random | None = None) -> dict[int, str]:
    """index -> new bookie for every failed bookie of `ensemble`; BKNotEnoughBookiesException if short."""
    excluded = set(ensemble) | set(failed)
    out = {}
    for index, bookie in enumerate(ensemble):
        if bookie not in failed:
            continue
        info = bk.writable_bookies.get(target) if target else None
        if target and target not in excluded and info is not None and not info.read_only:
            new = target
        else:
            new = choose_ensemble(bk.writable_bookies, 1, scope_id, excluded=excluded, rng=rng)[0]
        out[index] = new
        excluded.add(new)
    return out


async def rereplicate_ledger(bk, ledger: LedgerId, failed: Collection[str], *, target: str | None = None,
                             dry_run: bool = False, skip_open: bool = False, fence_open: bool = True,
                             limiter: ByteRateLimiter | None = None, window: int = 64, on_entry=None) -> LedgerOutcome:
    """See the module docstring. `fence_open=False` returns OPEN_LAST_SEGMENT instead of fencing."""
    failed = set(failed)
    try:
        versioned = await bk.driver.read_ledger_metadata(ledger)
    except BKNoSuchLedgerExistsException:
        return LedgerOutcome(ledger, DELETED)
    md = versioned.metadata
    if not failed & md.all_bookies:
        return LedgerOutcome(ledger, UNAFFECTED)
    outcome = LedgerOutcome(ledger, OK)
    if not md.is_closed and failed & set(md.last_ensemble[1]):
        if skip_open:
            outcome.status = SKIPPED_OPEN
            return outcome
        if dry_run:
            outcome.fence_required = True
        elif not fence_open:
            outcome.status = OPEN_LAST_SEGMENT
            return outcome
        else:
            try:
                handle = await bk.open_ledger(ledger.ledger_id, md.password, recovery=True, scope_id=ledger.scope_id)
                await handle.close()
            except BKNoSuchLedgerExistsException:
                return LedgerOutcome(ledger, DELETED)
            except BKError as err:
                outcome.status, outcome.error = FAILED, f"fencing and recovering the open ledger failed: {err}"
                return outcome
            outcome.fenced = True
            try:
                md = (await bk.driver.read_ledger_metadata(ledger)).metadata
            except BKNoSuchLedgerExistsException:
                return LedgerOutcome(ledger, DELETED)
    last_entry = md.last_entry_id if md.is_closed else -1
    for index, (first, last, ensemble) in enumerate(segment_ranges(md, last_entry)):
        if not failed & set(ensemble):
            continue
        if not md.is_closed and index == len(md.ensembles) - 1:
            last = None                              # dry run of an open ledger: the end is known after fencing
        try:
            replacements = choose_segment_replacements(bk, ensemble, failed, ledger.scope_id, target)
        except BKNotEnoughBookiesException as err:
            outcome.status, outcome.error = FAILED, f"segment at entry {first}: {err}"
            return outcome
        new_ensemble = tuple(replacements.get(i, b) for i, b in enumerate(ensemble))
        seg = {"firstEntryId": first, "lastEntryId": last, "oldEnsemble": list(ensemble),
               "newEnsemble": list(new_ensemble)}
        outcome.segments.append(seg)
        if dry_run:
            continue
        try:
            stats = await copy_segment(bk, ledger, md, first, last, ensemble, replacements, limiter, window, on_entry)
        except BKError as err:
            outcome.status, outcome.error = FAILED, f"copying segment at entry {first} failed: {err}"
            return outcome
        outcome.stats.add(stats)
        if stats.lost:
            seg["lostEntries"] = stats.lost
            outcome.status = LOST
            continue
        try:
            await swap_bookies(bk, ledger, first, {ensemble[i]: new for i, new in replacements.items()})
        except BKNoSuchLedgerExistsException:
            return LedgerOutcome(ledger, DELETED)
        except BKError as err:
            outcome.status, outcome.error = FAILED, f"updating the metadata of segment {first} failed: {err}"
            return outcome
    if dry_run:
        outcome.status = PLANNED
    return outcome
