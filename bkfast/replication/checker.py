"""Java's LedgerChecker (spec §7.4), for the auditor's periodic checkAllLedgers and for the replication worker
(a marked ledger whose bookies are all registered): which bookies of a ledger fail to serve the entries they
should hold.

Per segment and per bookie index: a bookie that is not registered is bad without a read; otherwise the first
and the last entry striped onto it in the segment's range (plus `percentage` % of the rest, evenly spread)
are read with plain READs, and any answer other than OK makes it bad. The last segment of an OPEN ledger
is not checked (its end is not known without the writer; the worker's grace-then-fence path owns it).
Async, reactor thread.
"""

from __future__ import annotations

from collections.abc import Collection

from twisted.internet import defer

from bkfast.client.distribution import has_entry
from bkfast.errors import BKError
from bkfast.ids import LedgerId
from bkfast.meta.ledger_metadata import LedgerMetadata

from .copier import segment_ranges

__all__ = ["bad_bookies", "striped_sample"]


def striped_sample(first: int, last: int, index: int, e: int, w: int, percentage: int = 0) -> list[int]:
    """The first and last entries of [first, last] stored by ensemble index `index`, plus `percentage` %."""
    mine = [x for x in range(first, min(last, first + e) + 1) if has_entry(x, index, e, w)]
    if not mine:
        return []
    low = mine[0]
    high = next((x for x in range(last, max(first, last - e) - 1, -1) if has_entry(x, index, e, w)), low)
    picks = {low, high}
    if percentage > 0 and high > low:
        count = max(1, (high - low) * percentage // (100 * e))
        step = max(1, (high - low) // count)
        picks.update(x for x in range(low, high + 1, step) if has_entry(x, index, e, w))
    return sorted(picks)


async def bad_bookies(bk, ledger: LedgerId, md: LedgerMetadata, available: Collection[str],
                      percentage: int = 0) -> set[str]:
    """Bookies of `md` that are unavailable or do not answer OK for an entry they should store."""
    bad: set[str] = set()
    last_entry = md.last_entry_id if md.is_closed else -1
    ranges = segment_ranges(md, last_entry)
    if not md.is_closed:
        ranges = ranges[:-1]
    reads = []
    for first, last, ensemble in ranges:
        for index, bookie in enumerate(ensemble):
            if bookie in bad:
                continue
            if bookie not in available:
                bad.add(bookie)
                continue
            for entry_id in striped_sample(first, last, index, md.ensemble_size, md.write_quorum_size, percentage):
                reads.append((bookie, entry_id))
    if not reads:
        return bad
    ds = [bk.bookie_client.read_entry(bookie, ledger.ledger_id, entry_id, scope_id=ledger.scope_id)
          for bookie, entry_id in reads]
    results = await defer.DeferredList(ds, consumeErrors=True)
    for (bookie, _entry_id), (ok, value) in zip(reads, results, strict=True):
        if not ok and isinstance(value.value, BKError):
            bad.add(bookie)
        elif not ok:
            bad.add(bookie)
    return bad
