"""Ledger recovery (Java's ReadOnlyLedgerHandle.recover + LedgerRecoveryOp, spec §6.2-6.3).

1. CAS the metadata OPEN -> IN_RECOVERY (a CLOSED ledger needs nothing).
2. Fence the last ensemble and learn its LAC (ReadLastConfirmedOp with DO_FENCING).
3. Read forward from LAC + 1 with fencing recovery reads and re-add every entry found (recovery adds,
   AQ acks), until a read ends in "no such entry" (WQ - AQ + 1 bookies lack it).
4. CAS IN_RECOVERY -> CLOSED with lastEntryId and length, folding in any ensemble change made while
   re-adding.
"""

from __future__ import annotations

import logging

from bkfast._stats import now_ns
from bkfast.errors import BKLedgerRecoveryException, BKMetadataVersionException, BKNoSuchEntryException
from bkfast.meta.driver import Versioned
from bkfast.meta.ledger_metadata import LedgerState

from . import reads
from .stats import stats_of
from .write_handle import WriteHandle

__all__ = ["recover_ledger"]

log = logging.getLogger(__name__)


async def _mark_in_recovery(bk, ledger, versioned: Versioned) -> Versioned | None:
    """IN_RECOVERY metadata, or None if the ledger is (now) closed."""
    while True:
        md = versioned.metadata
        if md.is_closed:
            return None
        if md.state == LedgerState.IN_RECOVERY:
            return versioned
        try:
            return await bk.driver.write_ledger_metadata(ledger, md.replace(state=LedgerState.IN_RECOVERY),
                                                         versioned.version)
        except BKMetadataVersionException:
            versioned = await bk.driver.read_ledger_metadata(ledger)


def _ignore_outcome(error, entry_id, ctx) -> None:
    """Completion of one recovery re-add: nothing to do (a failure fails the handle, checked below)."""


async def recover_ledger(bk, ledger, versioned: Versioned, password: bytes) -> Versioned:
    """Recover and close `ledger`; returns the CLOSED metadata. Recorded as the client's LEDGER_RECOVER (and
    LEDGER_RECOVER_READ_ENTRIES / _ADD_ENTRIES: the entries read past the LAC and re-added)."""
    stats = stats_of(bk)
    start = now_ns()
    try:
        closed = await _recover(bk, ledger, versioned, password, stats)
    except BaseException:
        stats.recover.fail_since(start)
        raise
    stats.recover.ok_since(start)
    return closed


async def _recover(bk, ledger, versioned: Versioned, password: bytes, stats) -> Versioned:
    in_recovery = await _mark_in_recovery(bk, ledger, versioned)
    if in_recovery is None:
        return await bk.driver.read_ledger_metadata(ledger) if not versioned.metadata.is_closed else versioned
    handle = WriteHandle(bk, ledger, in_recovery, password, recovery=True)
    md = handle.metadata
    # Entries past the LAC are read from the fenced last ensemble, never from a bookie that this recovery's
    # own ensemble change (a re-add failing on a dead bookie) put in its place: that one has none of them,
    # and its "no such entry" would end the recovery early and drop acknowledged entries.
    read_ensemble = md.last_ensemble[1]
    lac, length = await reads.read_last_confirmed(handle, fence=True)
    lac = max(lac, md.last_ensemble[0] - 1)
    if lac < 0:
        length = 0
    log.info("ledger %d: recovery fenced %s, LAC %d, length %d", ledger.ledger_id, ",".join(md.last_ensemble[1]),
             lac, length)
    handle.last_add_confirmed = handle.last_add_pushed = lac
    handle.length = handle.confirmed_length = length
    batch = bk.settings.recovery_read_batch_size
    recovered = 0
    next_entry = lac + 1
    while True:
        found_end = False
        entries = []
        for entry_id in range(next_entry, next_entry + batch):
            try:
                entries.append(await reads.recovery_read(handle, entry_id, read_ensemble))
            except BKNoSuchEntryException:
                found_end = True
                break
        for entry in entries:
            if entry.entry_id != handle.last_add_pushed + 1:
                raise BKLedgerRecoveryException(
                    f"ledger {ledger.ledger_id}: recovery read returned entry {entry.entry_id}, expected "
                    f"{handle.last_add_pushed + 1}")
            handle.length = entry.length - len(entry.data)
            handle.last_add_pushed = entry.entry_id
            handle._push(entry.entry_id, entry.data, _ignore_outcome)   # a failure shows in handle._error
            recovered += 1
        next_entry += len(entries)
        if found_end:
            break
    await handle._wait_drained()
    if handle._error is not None:
        raise BKLedgerRecoveryException(f"ledger {ledger.ledger_id}: recovery adds failed: {handle._error}")
    await handle._close()
    stats.recover_reads.ok_value(recovered)
    stats.recover_adds.ok_value(recovered)
    log.info("ledger %d recovered: %d entries re-added, closed at entry %d (%d bytes)", ledger.ledger_id, recovered,
             handle.last_add_confirmed, handle.length)
    return Versioned(handle.metadata, handle.metadata_version)
