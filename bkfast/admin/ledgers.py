"""Ledger operations through the ledger client (BookKeeper's ledger commands): list, metadata, read,
delete, and simpletest (write, read back and time a ledger). `bk` is a blocking `bkfast.BookKeeper`.
"""

from __future__ import annotations

import base64
import os
import time

from bkfast.errors import BKNoSuchLedgerExistsException

from .common import AdminError, LedgerRef, Progress

__all__ = ["metadata_to_dict", "list_ledgers", "ledger_metadata", "read_ledger", "delete_ledger",
           "simple_test", "READ_BATCH"]

READ_BATCH = 1000


def metadata_to_dict(ledger: LedgerRef, md) -> dict:
    """A ledger's metadata as JSON-ready data: Java's LedgerMetadataImpl JSON (spec §9.3: its fields in its
    order, password and custom values in base64, ensembles keyed by first entry id), plus `scopeId` and
    `qualifiedName` for a scoped ledger."""
    out = {
        "ledgerId": ledger.ledger_id,
        "metadataFormatVersion": md.metadata_format_version,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum_size,
        "ackQuorumSize": md.ack_quorum_size,
        "state": md.state.name,
        "length": md.length,
        "lastEntryId": md.last_entry_id,
        "ctime": md.ctime if md.ctime is not None else -1,
        "digestType": md.digest_type.name,
        "password": base64.b64encode(md.password).decode(),
        "customMetadata": {k: base64.b64encode(v).decode() for k, v in sorted(md.custom_metadata.items())},
        "closed": md.is_closed,
        "allEnsembles": {str(first): [{"id": b} for b in bookies] for first, bookies in md.ensembles},
        "ctoken": md.c_token,
    }
    if ledger.scope_id:
        out["scopeId"] = ledger.scope_id
        out["qualifiedName"] = ledger.ledger.qualified_name
    return out


def _metadata(bk, ledger: LedgerRef):
    try:
        return bk.get_ledger_metadata(ledger.ledger_id, scope_id=ledger.scope_id)
    except BKNoSuchLedgerExistsException:
        raise AdminError(f"ledger {ledger} does not exist") from None


def list_ledgers(bk, scope_id: int = 0, with_metadata: bool = False, progress: Progress | None = None) -> list[dict]:
    """listledgers: [{"ledgerId"[, "metadata"]}] in id order (ledgers deleted meanwhile are skipped)."""
    ids = bk.list_ledgers(scope_id)
    out = []
    for n, lid in enumerate(ids, 1):
        row: dict = {"ledgerId": lid}
        if with_metadata:
            ref = LedgerRef(_ledger_id(scope_id, lid))
            try:
                row["metadata"] = metadata_to_dict(ref, bk.get_ledger_metadata(lid, scope_id=scope_id))
            except BKNoSuchLedgerExistsException:
                continue
        out.append(row)
        if progress is not None:
            progress(n, len(ids))
    return out


def _ledger_id(scope_id: int, ledger_id: int):
    from bkfast.ids import LedgerId

    return LedgerId(scope_id, ledger_id)


def ledger_metadata(bk, ledger: LedgerRef) -> dict:
    """ledgermetadata."""
    return metadata_to_dict(ledger, _metadata(bk, ledger))


def read_ledger(bk, ledger: LedgerRef, first: int = 0, last: int = -1, progress: Progress | None = None) -> list[dict]:
    """readledger: entries `first`..`last` (-1 = up to the last confirmed entry) without recovering the
    ledger (an open ledger stays open). [{"entryId", "length", "data": bytes}]."""
    md = _metadata(bk, ledger)
    if first < 0:
        raise AdminError(f"--first must be >= 0, got {first}")
    handle = bk.open_ledger(ledger.ledger_id, md.password, recovery=False, scope_id=ledger.scope_id)
    lac = handle.last_add_confirmed
    end = lac if last < 0 else min(last, lac)
    if last >= 0 and last < first:
        raise AdminError(f"--last {last} is before --first {first}")
    out: list[dict] = []
    total = max(0, end - first + 1)
    at = first
    while at <= end:
        upto = min(end, at + READ_BATCH - 1)
        for entry in handle.read_entries(at, upto):
            data = bytes(entry.data)
            out.append({"entryId": entry.entry_id, "length": len(data), "data": data})
        at = upto + 1
        if progress is not None:
            progress(at - first, total)
    return out


def delete_ledger(bk, ledger: LedgerRef) -> dict:
    """deleteledger: remove the metadata (bookies garbage-collect the entries)."""
    try:
        bk.delete_ledger(ledger.ledger_id, scope_id=ledger.scope_id)
    except BKNoSuchLedgerExistsException:
        raise AdminError(f"ledger {ledger} does not exist") from None
    return {"ledgerId": ledger.ledger_id, "scopeId": ledger.scope_id, "deleted": True}


def simple_test(bk, ensemble: int = 3, write_quorum: int = 2, ack_quorum: int = 2, entries: int = 100,
                entry_size: int = 100, delete: bool = True, progress: Progress | None = None) -> dict:
    """simpletest: create a ledger, write `entries` random entries, read them back, compare, delete it.
    Returns the ledger id and the add/read rates."""
    if entries < 1:
        raise AdminError(f"--entries must be at least 1, got {entries}")
    payloads = [os.urandom(entry_size) for _ in range(entries)]
    handle = bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"simpletest")
    lid = handle.ledger_id
    started = time.perf_counter()
    done = 0
    for at in range(0, entries, READ_BATCH):
        done += len(handle.add_entries(payloads[at:at + READ_BATCH]))
        if progress is not None:
            progress(done, 2 * entries)
    write_s = time.perf_counter() - started
    handle.close()
    reader = bk.open_ledger(lid, b"simpletest", recovery=False)
    started = time.perf_counter()
    read: list[bytes] = []
    for at in range(0, entries, READ_BATCH):
        read += [bytes(e.data) for e in reader.read_entries(at, min(entries, at + READ_BATCH) - 1)]
        if progress is not None:
            progress(entries + len(read), 2 * entries)
    read_s = time.perf_counter() - started
    if read != payloads:
        bad = next((i for i, (a, b) in enumerate(zip(read, payloads, strict=False)) if a != b), len(read))
        raise AdminError(f"simpletest: ledger {lid} entry {bad} read back differs from what was written")
    if delete:
        bk.delete_ledger(lid)
    return {"ledgerId": lid, "entries": entries, "entrySize": entry_size, "ensembleSize": ensemble,
            "writeQuorumSize": write_quorum, "ackQuorumSize": ack_quorum,
            "writeSeconds": write_s, "addsPerSecond": entries / write_s if write_s else None,
            "readSeconds": read_s, "readsPerSecond": entries / read_s if read_s else None,
            "deleted": delete}
