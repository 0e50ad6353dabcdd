"""Driver-side planning for the Spark source: positions, the readable end, input partitions, read
limits, and the one-CAS commit of task segments.

The readable end of a stream is the first open segment's LAC + 1 (records after an open segment are not
readable yet: a reader must not pass a segment that may still grow) or the end of the last sealed
segment. A range [start, end) of positions becomes one partition per segment, split every
`maxEntriesPerPartition` entries.
"""

from __future__ import annotations

import logging

from bkfast.meta.streams import Segment
from bkfast.streams.batch import batch_header
from bkfast.streams.position import DLSN

from .tasks import SegmentRange, client, discard_ledgers, namespace

__all__ = ["readable_end", "resolve", "plan_partitions", "limit_end", "commit_segments"]

log = logging.getLogger(__name__)


def _open_extent(opts, seg) -> tuple[int, int]:
    """(LAC, records up to it) of an open segment, from the bookies."""
    lh = client(opts).open_ledger(seg.ledger, opts.password, recovery=False, scope_id=seg.scope)
    lac = lh.last_add_confirmed
    if lac < 0:
        return -1, 0
    n, base, _ts = batch_header(lh.read_entry(lac).data)
    return lac, base + n


def extents(opts, md) -> list[tuple[Segment, int, int]]:
    """(segment, last readable entry, records up to it) for the readable segments, in order."""
    out = []
    for seg in md.segments:
        if seg.is_open:
            lac, records = _open_extent(opts, seg)
            out.append((seg, lac, records))
            break
        out.append((seg, seg.last_entry, seg.records))
    return out


def readable_end(opts, md, ext=None) -> DLSN:
    ext = extents(opts, md) if ext is None else ext
    if not ext:
        return DLSN(md.next_seq, 0, 0)
    seg, last, _records = ext[-1]
    return DLSN(seg.seq, last + 1, 0)


def resolve(opts, md, text: str, ext=None) -> DLSN:
    if text == "earliest":
        return DLSN(md.segments[0].seq, 0, 0) if md.segments else DLSN(md.next_seq, 0, 0)
    if text == "latest":
        return readable_end(opts, md, ext)
    return DLSN.parse(text)


def plan_partitions(opts, md, start: DLSN, end: DLSN, ext=None) -> list[SegmentRange]:
    ext = extents(opts, md) if ext is None else ext
    parts = []
    step = opts.max_entries_per_partition
    for seg, last_readable, _records in ext:
        if seg.seq < start.segment or seg.seq > end.segment:
            continue
        first = start.entry if seg.seq == start.segment else 0
        first_slot = start.slot if seg.seq == start.segment else 0
        last, end_slot = last_readable, -1
        if seg.seq == end.segment:
            if end.slot > 0 and end.entry <= last_readable:
                last, end_slot = end.entry, end.slot
            else:
                last = min(end.entry - 1, last_readable)
        a = first
        while a <= last:
            b = min(last, a + step - 1)
            parts.append(SegmentRange(md.name, seg.seq, seg.ledger, seg.scope, a, b,
                                      first_slot if a == first else 0, end_slot if b == last else -1))
            a = b + 1
    return parts


def limit_end(opts, md, start: DLSN, end: DLSN, max_records: int, ext=None) -> DLSN:
    """An end <= `end` about `max_records` records after `start` (whole entries, at least one), using
    each segment's average records per entry."""
    ext = extents(opts, md) if ext is None else ext
    remaining = max_records
    for seg, last, records in ext:
        if seg.seq < start.segment or seg.seq > end.segment or last < 0:
            continue
        first = start.entry if seg.seq == start.segment else 0
        stop = end.entry - 1 if seg.seq == end.segment else last
        if stop < first:
            continue
        avg = max(1.0, records / (last + 1))
        available = (stop - first + 1) * avg
        if available <= remaining:
            remaining -= available
            continue
        take = max(1, int(remaining // avg))
        return min(end, DLSN(seg.seq, first + take, 0))
    return end


def _update(opts, change):
    from twisted.internet import defer

    from bkfast.client.blocking import call_in_reactor as _wait
    from bkfast.streams.meta_ops import update_stream

    driver = namespace(opts).async_namespace.driver
    return _wait(60, lambda: defer.ensureDeferred(update_stream(driver, opts.stream, change))).metadata


def begin_write(opts, write_id: str) -> int:
    """Note on the stream that `write_id` is writing, with a ledger id watermark (every task ledger it
    creates has a larger id), so its commit or abort — or a re-run after a crashed driver — finds and
    deletes task ledgers that no commit message names (killed tasks, a crashed run's tasks)."""
    from bkfast.client.blocking import call_in_reactor as _wait

    mark = _wait(60, client(opts).async_client.driver.generate_ledger_id)

    def change(md):
        pending = dict(md.properties.get("pending_writes", {}))
        if write_id in pending:
            return None                                   # a re-run: keep the first run's watermark
        pending[write_id] = mark
        return md.replace(properties={**md.properties, "pending_writes": pending})

    return _update(opts, change).properties["pending_writes"][write_id]


def orphans(opts, write_id: str, mark: int, keep: set[int]) -> list[tuple[int, int]]:
    """Ledgers tagged with `write_id` (custom metadata bkfast.write), id >= mark, not in `keep`."""
    bk = client(opts)
    out = []
    for lid in bk.list_ledgers():
        if lid < mark or lid in keep:
            continue
        try:
            md = bk.get_ledger_metadata(lid)
        except Exception:
            continue
        if md.custom_metadata.get("bkfast.write") == write_id.encode() and \
                md.custom_metadata.get("bkfast.stream") == opts.stream.encode():
            out.append((lid, 0))
    return out


def end_write(opts, write_id: str) -> None:
    """The write is over (committed or aborted): delete its unnamed task ledgers, forget the watermark."""
    md = namespace(opts).describe(opts.stream)
    mark = md.properties.get("pending_writes", {}).get(write_id)
    if mark is None:
        return
    keep = {s.ledger for s in md.segments}
    discard_ledgers(client(opts), orphans(opts, write_id, mark, keep))

    def change(md):
        pending = dict(md.properties.get("pending_writes", {}))
        if pending.pop(write_id, None) is None:
            return None
        return md.replace(properties={**md.properties, "pending_writes": pending})

    _update(opts, change)


def commit_segments(opts, messages, commit_key: str, origin: str) -> bool:
    """Append the tasks' ledgers as sealed segments in one CAS (ordered by partition); empty ledgers are
    deleted. If `commit_key` was already committed, the ledgers are duplicates: delete them. Returns
    True when the segments were appended."""
    msgs = sorted((m for m in messages if m is not None), key=lambda m: m.partition)
    bk = client(opts)
    empty = [(m.ledger, m.scope) for m in msgs if m.records == 0]
    full = [m for m in msgs if m.records > 0]
    segments = [Segment(seq=0, ledger=m.ledger, scope=m.scope, state="sealed", last_entry=m.last_entry,
                        records=m.records, bytes=m.bytes, first_ts=m.first_ts, last_ts=m.last_ts,
                        origin=f"{origin}/{m.partition}") for m in full]
    appended, _md = namespace(opts).append_segments(opts.stream, segments, commit_key)
    discard_ledgers(bk, empty)
    if not appended:
        log.warning("bkfast: %s was already committed to stream %s; deleting this run's %d ledgers", commit_key,
                    opts.stream, len(full))
        discard_ledgers(bk, [(m.ledger, m.scope) for m in full])
    return appended


def abort_segments(opts, messages) -> None:
    discard_ledgers(client(opts), [(m.ledger, m.scope) for m in messages if m is not None])
