"""Changes to a stream's metadata: CAS with re-read and retry, sealing a segment, retention, truncation.

Every change to a stream goes through `update_stream`: read, apply a pure function, CAS-write at the
read version, and on a version conflict re-read and apply again (the function decides, from the fresh
metadata, whether the change still makes sense). Ledger deletion after a cut happens only after the CAS
that removed the segments succeeded, so no reader is ever pointed at a deleted ledger by the metadata.
Also here: what a ledger's last entry says about its records (for segments sealed by recovery).
"""

from __future__ import annotations

import logging
import time

from bkfast.errors import BKMetadataVersionException, BKNoSuchLedgerExistsException

from .batch import DecodedBatch, batch_header

__all__ = ["update_stream", "retention_cut", "delete_ledgers", "sealed_from_ledger", "now_ms"]

log = logging.getLogger(__name__)

_MAX_ATTEMPTS = 20


def now_ms() -> int:
    return int(time.time() * 1000)


async def update_stream(driver, name: str, change, attempts: int = _MAX_ATTEMPTS):
    """Apply `change(metadata) -> new metadata | None` with CAS; None means "nothing to do". Fires with
    the VersionedStream written (or read, when nothing changed)."""
    for _ in range(attempts):
        vs = await driver.read_stream(name)
        new = change(vs.metadata)
        if new is None:
            return vs
        try:
            return await driver.write_stream(new, vs.version)
        except BKMetadataVersionException:
            log.info("stream %s changed meanwhile (version %d); retrying the update", name, vs.version)
            continue
    raise BKMetadataVersionException(f"stream {name!r}: {attempts} concurrent changes in a row; giving up")


def retention_cut(md, now: int | None = None) -> tuple:
    """The sealed segments the stream's `retention_ms` / `retention_bytes` remove (oldest first)."""
    if not md.retention_ms and not md.retention_bytes:
        return ()
    now = now_ms() if now is None else now
    total = md.bytes
    cut = []
    for seg in md.segments:
        if seg.is_open:
            break
        too_old = md.retention_ms and seg.last_ts and seg.last_ts < now - md.retention_ms
        too_big = md.retention_bytes and total > md.retention_bytes
        if not (too_old or too_big):
            break
        cut.append(seg)
        total -= seg.bytes
    return tuple(cut)


def without_segments(md, cut):
    """`md` with the `cut` segments removed (their records added to `truncated_records`)."""
    seqs = {s.seq for s in cut}
    return md.replace(segments=tuple(s for s in md.segments if s.seq not in seqs),
                      truncated_records=md.truncated_records + sum(s.records for s in cut))


async def delete_ledgers(bk, segments) -> None:
    for seg in segments:
        try:
            await bk.delete_ledger(seg.ledger, seg.scope)
        except BKNoSuchLedgerExistsException:
            pass
        log.info("stream segment %d: ledger %d deleted", seg.seq, seg.ledger)


async def sealed_from_ledger(bk, seg, password: bytes):
    """`seg` sealed with what its (closed) ledger holds: recovers (fences) the ledger if still open, then
    reads its first and last entries for record counts and timestamps."""
    lh = await bk.open_ledger(seg.ledger, password, recovery=True, scope_id=seg.scope)
    last = lh.last_add_confirmed
    if last < 0:
        return seg.replace(state="sealed", last_entry=-1, records=0, bytes=0)
    tail = await lh.read_entries(max(0, last - 2), last)      # a control entry may end the ledger
    first_ts = batch_header((await lh.read_entries(0, 0))[0].data)[2]
    lb = DecodedBatch(tail[-1].data)
    last_ts = 0
    for e in reversed(tail):
        b = DecodedBatch(e.data)
        if b.count:
            last_ts = b.timestamps()[b.count - 1]
            break
    return seg.replace(state="sealed", last_entry=last, records=lb.base_index + lb.count, bytes=lh.length,
                       first_ts=first_ts, last_ts=last_ts)
