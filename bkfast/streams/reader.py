"""AsyncStreamReader: reads a log stream in order across its segments and tails the open one.

The reader's `position` is the DLSN of the next record. Sealed segments are read up to their last
entry; the open segment up to its last add confirmed (LAC), then the reader waits with long-poll LAC
reads. When a long poll times out, it re-reads the stream's metadata and the ledger's: a segment that
was sealed meanwhile (roll, writer takeover, recovery after a crash) is read to its final last entry —
which recovery may have extended past the LAC the reader saw — before the reader moves to the next
segment. So each record is returned once, in DLSN order, whatever happens to the writers.

`read_entries` returns whole decoded batches (`StreamEntry`: segment, entry, batch, first slot) — the
cheap way for bulk consumers such as the Spark source; `read` returns `Record`s. All methods run in
the reactor thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from bkfast.errors import BKNoSuchLedgerExistsException, StreamError

from .batch import DecodedBatch
from .position import DLSN, EARLIEST, LATEST

if TYPE_CHECKING:
    from bkfast.client.handle import LedgerHandle
    from bkfast.meta.streams import Segment, StreamMetadata

__all__ = ["AsyncStreamReader", "Record", "StreamEntry", "resolve_start"]

log = logging.getLogger(__name__)


class Record(NamedTuple):
    position: DLSN
    key: bytes | None
    value: bytes
    timestamp: int              # ms since the epoch


@dataclass
class StreamEntry:
    """One entry of a segment: its decoded batch; records before `first_slot` are not part of the read."""

    segment: int
    entry: int
    batch: DecodedBatch
    first_slot: int = 0

    def records(self) -> list[Record]:
        b = self.batch
        s, e, f = self.segment, self.entry, self.first_slot
        ts = b.timestamps()
        return [Record(DLSN(s, e, i), k, v, ts[i])
                for i, k, v in zip(range(f, b.count), b.keys(f), b.values(f), strict=True)]


async def resolve_start(ns, md, start, password: bytes = b"") -> tuple[DLSN, int | None]:
    """(position, timestamp filter) for `start`: EARLIEST, LATEST, a DLSN / "s:e:k", or a timestamp
    (int ms since the epoch, or a datetime): the first record at or after it."""
    if start is None or start == EARLIEST:
        first = md.segments[0].seq if md.segments else md.next_seq
        return DLSN(first, 0, 0), None
    if start == LATEST:
        return await end_position(ns, md, password), None
    if hasattr(start, "timestamp") and callable(start.timestamp):
        start = int(start.timestamp() * 1000)
    if isinstance(start, int) and not isinstance(start, bool):
        for seg in md.segments:
            if seg.is_open or seg.last_ts >= start:
                return DLSN(seg.seq, 0, 0), start
        return DLSN(md.next_seq, 0, 0), start
    return DLSN.parse(start), None


async def end_position(ns, md, password: bytes = b"") -> DLSN:
    """The position just after the last acknowledged record of the stream."""
    if not md.segments:
        return DLSN(md.next_seq, 0, 0)
    last = md.segments[-1]
    if not last.is_open:
        return DLSN(last.seq, last.last_entry + 1, 0)
    lh = await ns.bk.open_ledger(last.ledger, password, recovery=False, scope_id=last.scope)
    return DLSN(last.seq, lh.last_add_confirmed + 1, 0)


class AsyncStreamReader:
    def __init__(self, ns, name: str, position: DLSN, ts_filter: int | None = None, password: bytes = b"",
                 max_entries_per_read: int = 64, poll_ms: int = 1000):
        self.ns = ns
        self.bk = ns.bk
        self.name = name
        self.position = position
        self._ts_filter = ts_filter
        self._password = password
        self._max_entries = max_entries_per_read
        self._poll_ms = poll_ms
        self._md: StreamMetadata | None = None
        self._lh: LedgerHandle | None = None   # handle of the segment at self.position.segment
        self._seg: Segment | None = None
        self._closed = False

    async def _refresh(self) -> StreamMetadata:
        self._md = md = (await self.ns.driver.read_stream(self.name)).metadata
        return md

    def _segment_at_or_after(self, seq: int):
        assert self._md is not None, "read_entries reads the metadata first"
        for seg in self._md.segments:
            if seg.seq >= seq:
                return seg
        return None

    async def read_entries(self, max_entries: int | None = None, timeout_ms: int = 0) -> list[StreamEntry]:
        """The next entries from `position` (at most `max_entries`); waits up to `timeout_ms` for at least
        one (0: return what is there now; [] when nothing arrived). Advances `position`."""
        if self._closed:
            raise StreamError(f"reader of stream {self.name!r} is closed")
        max_entries = max_entries or self._max_entries
        deadline = time.monotonic() + timeout_ms / 1000.0
        if self._md is None:
            await self._refresh()
        while True:
            if self._lh is None:
                seg = self._segment_at_or_after(self.position.segment)
                if seg is None:
                    if not await self._wait(deadline, refresh=True):
                        return []
                    continue
                if seg.seq != self.position.segment:
                    self.position = DLSN(seg.seq, 0, 0)
                self._seg = seg
                try:
                    self._lh = await self.bk.open_ledger(seg.ledger, self._password, recovery=False,
                                                         scope_id=seg.scope)
                except BKNoSuchLedgerExistsException:            # truncated while we looked
                    md = await self._refresh()
                    if md.segment(seg.seq) is None:
                        continue
                    raise
            lh = self._lh
            first = self.position.entry
            if first <= lh.last_add_confirmed:
                last = min(lh.last_add_confirmed, first + max_entries - 1)
                entries = await lh.read_entries(first, last)
                return self._deliver(entries)
            if lh.is_closed:
                self._next_segment()
                continue
            # caught up on an open segment: has it been sealed meanwhile?
            known, current = self._md, self._seg
            assert known is not None and current is not None, "read at start / set with self._lh"
            sealed = known.segment(current.seq)
            if sealed is None or not sealed.is_open or known.segments[-1].seq != current.seq:
                await lh.refresh_metadata()
                if lh.is_closed:
                    continue
            remaining = (deadline - time.monotonic()) * 1000
            if remaining <= 0:
                return []
            await lh.read_lac_long_poll(first - 1, int(min(remaining, self._poll_ms)))
            if lh.last_add_confirmed < first:
                await self._refresh()
                await lh.refresh_metadata()

    def _next_segment(self) -> None:
        self._lh = None
        assert self._seg is not None, "set with self._lh"
        self.position = DLSN(self._seg.seq + 1, 0, 0)

    async def _wait(self, deadline: float, refresh: bool) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        from twisted.internet import task

        await task.deferLater(self.bk.reactor, min(remaining, self._poll_ms / 1000.0, 0.2), lambda: None)
        if refresh:
            await self._refresh()
        return True

    def _deliver(self, entries) -> list[StreamEntry]:
        out = []
        assert self._seg is not None, "entries are read from the segment of self._lh"
        seq = self._seg.seq
        pos = self.position
        for e in entries:
            batch = DecodedBatch(e.data)
            first = pos.slot if e.entry_id == pos.entry else 0
            if self._ts_filter is not None:
                first = max(first, batch.first_index_at_or_after(self._ts_filter))
                if first < batch.count:
                    self._ts_filter = None
            if first < batch.count:
                out.append(StreamEntry(seq, e.entry_id, batch, first))
            pos = DLSN(seq, e.entry_id + 1, 0)
        self.position = pos
        return out

    async def read(self, max_records: int = 1000, timeout_ms: int = 0) -> list[Record]:
        """Up to about `max_records` records (whole entries; at least one entry's worth if any arrives
        within `timeout_ms`)."""
        out: list[Record] = []
        wait = timeout_ms
        while len(out) < max_records:
            entries = await self.read_entries(None, wait)
            if not entries:
                break
            for e in entries:
                out.extend(e.records())
            wait = 0
        return out

    def close(self):
        self._closed = True
        self._lh = None
        from twisted.internet import defer

        return defer.succeed(None)


async def open_reader(ns, name: str, start=EARLIEST, password: bytes = b"", **options) -> AsyncStreamReader:
    md = (await ns.driver.read_stream(name)).metadata
    position, ts_filter = await resolve_start(ns, md, start, password)
    reader = AsyncStreamReader(ns, name, position, ts_filter, password, **options)
    reader._md = md
    return reader
