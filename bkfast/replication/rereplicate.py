"""Re-replicating one ledger off failed bookies: the step the manual `recover` and the replication worker share.

Owns `rereplicate_ledger`: read the metadata (gone = nothing to do, apache/bookkeeper#3316), stop here when no
segment lists a failed bookie, fence and recover an OPEN ledger whose last segment holds one (the client's
recovery, so a live writer is stopped correctly) unless told to skip or wait, then for every segment listing
a failed bookie choose replacements (the client's placement policy, `bk.placement`, so the write quorums keep
their racks/zones/regions: never a bookie of that segment, never a failed or read-only one; an operator's
target is used as told, the worker's own bookie only where it places no worse than the policy's pick), copy its
entries (`copier.copy_segment`) and CAS the ensemble
(`copier.swap_bookies`). A closed empty ledger only gets its ensemble fixed (apache/bookkeeper#3220). Entries
no surviving replica holds are reported in the outcome (`lost`) and that segment is left alone. Reactor
thread only.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection
from dataclasses import dataclass, field

from bkfast.client.stats import stats_of, timed
from bkfast.errors import BKError, BKNoSuchLedgerExistsException, BKNotEnoughBookiesException
from bkfast.ids import LedgerId
from bkfast.meta.ledger_metadata import LedgerMetadata

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
    error_type: str | None = None          # the class of the error that failed it (Java's exceptions_<class>)
    replicated_segments: int = 0           # segments copied and swapped into the metadata

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


def _failed(outcome: LedgerOutcome, err: BaseException, text: str) -> LedgerOutcome:
    outcome.status, outcome.error, outcome.error_type = FAILED, text, type(err).__name__
    return outcome


def choose_segment_replacements(bk, ensemble: tuple[str, ...], failed: Collection[str], scope_id: int = 0,
                                target: str | None = None, rng: random.Random | None = None,
                                write_quorum: int | None = None, ack_quorum: int | None = None,
                                target_hint: bool = False) -> dict[int, str]:
    """index -> new bookie for every failed bookie of `ensemble`, by the client's placement policy;
    BKNotEnoughBookiesException (PlacementPolicyError when enforced) if it finds none. `target` takes the first
    failed position when it fits (writable, not in the segment); with `target_hint` (the worker's own bookie)
    only where the result adheres to the policy no worse than the policy's own pick."""
    failed = set(failed)
    positions = [i for i, b in enumerate(ensemble) if b in failed]
    if not positions:
        return {}
    w = write_quorum or len(ensemble)
    a = ack_quorum or w
    placement = bk.placement
    info = bk.writable_bookies.get(target) if target else None
    fits = info is not None and not info.read_only and target not in set(ensemble) | failed
    members = list(ensemble)
    if fits and not target_hint:
        assert target is not None, "fits only when a target was given"
        members[positions[0]] = target
    chosen = list(placement.replace_bookies(bk.writable_bookies, tuple(members), w, a, failed, scope_id))
    if fits and target_hint and target not in chosen:
        best = placement.adherence(tuple(chosen), w, a)
        for i in positions:
            candidate = chosen[:i] + [target] + chosen[i + 1:]
            if placement.adherence(tuple(candidate), w, a) >= best:
                chosen = candidate
                break
    return {i: chosen[i] for i in positions}


async def rereplicate_ledger(bk, ledger: LedgerId, failed: Collection[str], *, target: str | None = None,
                             dry_run: bool = False, skip_open: bool = False, fence_open: bool = True,
                             limiter: ByteRateLimiter | None = None, window: int = 64, on_entry=None,
                             target_hint: bool = False, recorder=None) -> LedgerOutcome:
    """See the module docstring. `fence_open=False` returns OPEN_LAST_SEGMENT instead of fencing;
    `target_hint`: `target` is a preference (choose_segment_replacements), not an order; `recorder`: the
    ReplicatorStats the copies are recorded in."""
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
        md = await _fence_open_ledger(bk, outcome, md, dry_run=dry_run, skip_open=skip_open, fence_open=fence_open)
        if md is None:
            return outcome
    copy = _SegmentCopy(bk, ledger, md, failed, target, target_hint, dry_run, limiter, window, on_entry, recorder)
    last_entry = md.last_entry_id if md.is_closed else -1
    last: int | None
    for index, (first, last, ensemble) in enumerate(segment_ranges(md, last_entry)):
        if not failed & set(ensemble):
            continue
        if not md.is_closed and index == len(md.ensembles) - 1:
            last = None                              # dry run of an open ledger: the end is known after fencing
        stop = await copy.segment(outcome, first, last, ensemble)
        if stop is not None:
            return stop
    if dry_run:
        outcome.status = PLANNED
    return outcome


async def _fence_open_ledger(bk, outcome: LedgerOutcome, md, *, dry_run: bool, skip_open: bool, fence_open: bool):
    """An open ledger whose last segment holds a failed bookie: skipped, planned (dry run), left to the worker's
    grace period, or fenced and recovered by the client. The metadata to go on with, or None when `outcome`
    (updated) is the answer."""
    ledger = outcome.ledger
    if skip_open:
        outcome.status = SKIPPED_OPEN
        return None
    if dry_run:
        outcome.fence_required = True
        return md
    if not fence_open:
        outcome.status = OPEN_LAST_SEGMENT
        return None
    try:
        handle = await bk.open_ledger(ledger.ledger_id, md.password, recovery=True, scope_id=ledger.scope_id)
        await handle.close()
        outcome.fenced = True
        return (await bk.driver.read_ledger_metadata(ledger)).metadata
    except BKNoSuchLedgerExistsException:
        outcome.status, outcome.fenced = DELETED, False     # as a ledger found gone before fencing reports it
    except BKError as err:
        if outcome.fenced:
            raise
        _failed(outcome, err, f"fencing and recovering the open ledger failed: {err}")
    return None


@dataclass
class _SegmentCopy:
    """What every segment of one ledger is re-replicated with: choose replacements, copy, CAS the ensemble."""

    bk: object
    ledger: LedgerId
    md: LedgerMetadata
    failed: set[str]
    target: str | None
    target_hint: bool
    dry_run: bool
    limiter: ByteRateLimiter | None
    window: int
    on_entry: object
    recorder: object

    async def segment(self, outcome: LedgerOutcome, first: int, last, ensemble) -> LedgerOutcome | None:
        """One segment listing a failed bookie; the ledger's final outcome when it must stop here, else None."""
        bk, ledger, md = self.bk, self.ledger, self.md
        try:
            replacements = timed(stats_of(bk).replace_bookie, choose_segment_replacements, bk, ensemble, self.failed,
                                 ledger.scope_id, self.target, write_quorum=md.write_quorum_size,
                                 ack_quorum=md.ack_quorum_size, target_hint=self.target_hint)
        except BKNotEnoughBookiesException as err:
            return _failed(outcome, err, f"segment at entry {first}: {err}")
        new_ensemble = tuple(replacements.get(i, b) for i, b in enumerate(ensemble))
        seg = {"firstEntryId": first, "lastEntryId": last, "oldEnsemble": list(ensemble),
               "newEnsemble": list(new_ensemble)}
        outcome.segments.append(seg)
        if self.dry_run:
            return None
        try:
            stats = await copy_segment(bk, ledger, md, first, last, ensemble, replacements, self.limiter, self.window,
                                       self.on_entry, recorder=self.recorder)
        except BKError as err:
            return _failed(outcome, err, f"copying segment at entry {first} failed: {err}")
        outcome.stats.add(stats)
        if stats.lost:
            seg["lostEntries"] = stats.lost
            outcome.status = LOST
            return None
        try:
            await swap_bookies(bk, ledger, first, {ensemble[i]: new for i, new in replacements.items()})
        except BKNoSuchLedgerExistsException:
            return LedgerOutcome(ledger, DELETED)
        except BKError as err:
            return _failed(outcome, err, f"updating the metadata of segment {first} failed: {err}")
        outcome.replicated_segments += 1
        return None
