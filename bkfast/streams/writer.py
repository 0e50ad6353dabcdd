"""AsyncStreamWriter: the one writer of a log stream (Twisted; every method in the reactor thread).

Records are buffered and packed into one ledger entry per batch (`batch.py`); a batch is sent when it
reaches `max_batch_bytes` or `max_batch_records`, when `linger_ms` has passed since its first record,
or on `flush()`. Batches are pipelined on the segment's ledger; each record's Deferred fires with its
DLSN once its entry is acknowledged (entries complete in order, so positions do too).

Ownership: opening a writer first bumps the stream's `writer_epoch` (CAS), then recovers (fences) the
previous writer's open segment — its further adds fail, everything it had acknowledged stays in the
segment — and seals it and adds a new open segment on a new ledger in one more CAS, conditional on the
epoch. A writer whose ledger fails or is fenced checks the epoch: changed, it stops with
StreamFencedError; unchanged (e.g. a reader recovered the ledger), it rolls to a new segment.

Rolling (segment size / record count / age): stop sending, wait for the in-flight entries, close the
ledger, CAS (seal it, append a new open segment, drop what retention removes), then send what queued
up. A failed ledger (any add error but fencing) rolls the same way, except that the ledger is first
recovered: in-flight batches the recovery kept are acknowledged at their old position, the rest are
re-sent to the new segment, so no acknowledged record is lost and none is written twice. Rolls after
failed segments back off, are bounded, and stop the writer when no write gets through
(`roll_guard.py`).

Size: a batch is also sealed before it would outgrow the largest entry a bookie accepts (the client's
nettyMaxFrameSizeBytes less all framing, `limits.py`), and a record that cannot fit even alone fails
at once, before anything is sent; the writer goes on with the other records.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from twisted.internet import defer, task

from bkfast.errors import StreamError, StreamFencedError, StreamWriterStoppedError

from .batch import BATCH_OVERHEAD, encode_batch, encode_control, encoded_size
from .limits import check_records, max_batch_payload, record_error
from .meta_ops import delete_ledgers, now_ms, retention_cut, sealed_from_ledger, update_stream, without_segments
from .position import DLSN
from .roll_guard import RollGuard

if TYPE_CHECKING:
    from bkfast.client.write_handle import WriteHandle
    from bkfast.meta.streams import Segment

__all__ = ["AsyncStreamWriter", "WriterOptions"]

log = logging.getLogger(__name__)


class WriterOptions:
    """Writer settings (keyword arguments of `open_writer`).

    After a failed segment (see roll_guard.py): `max_failed_rolls` rolls with no write acknowledged
    before the writer stops, the first `roll_backoff_ms` after the failure and doubling, and at most
    `max_failed_segments_per_minute` segments created within a minute while no write succeeds."""

    def __init__(self, max_batch_bytes: int = 256 * 1024, max_batch_records: int = 10000, linger_ms: float = 2.0,
                 max_segment_bytes: int = 256 * 1024 * 1024, max_segment_records: int = 0, max_segment_age_ms: int = 0,
                 ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, digest_type=None,
                 password: bytes = b"", max_inflight_batches: int = 64, max_failed_rolls: int = 5,
                 roll_backoff_ms: float = 100.0, max_failed_segments_per_minute: int = 10):
        if max_batch_bytes <= 0 or max_batch_records <= 0:
            raise StreamError("max_batch_bytes and max_batch_records must be positive")
        if max_failed_rolls < 0 or roll_backoff_ms < 0 or max_failed_segments_per_minute < 1:
            raise StreamError("max_failed_rolls and roll_backoff_ms must be >= 0, max_failed_segments_per_minute "
                              ">= 1")
        self.max_batch_bytes = int(max_batch_bytes)
        self.max_batch_records = int(max_batch_records)
        self.linger_ms = float(linger_ms)
        self.max_segment_bytes = int(max_segment_bytes)
        self.max_segment_records = int(max_segment_records)
        self.max_segment_age_ms = int(max_segment_age_ms)
        self.ensemble_size, self.write_quorum, self.ack_quorum = int(ensemble_size), int(write_quorum), int(ack_quorum)
        self.digest_type = digest_type
        self.password = password.encode() if isinstance(password, str) else bytes(password)
        self.max_inflight_batches = int(max_inflight_batches)
        self.max_failed_rolls = int(max_failed_rolls)
        self.roll_backoff_ms = float(roll_backoff_ms)
        self.max_failed_segments_per_minute = int(max_failed_segments_per_minute)


class _Batch:
    __slots__ = ("values", "keys", "ts", "waiters", "nbytes", "vbytes", "kbytes", "entry_id", "seq", "payload")

    def __init__(self):
        self.values: list = []
        self.keys: list | None = None
        self.ts: list[int] = []
        self.waiters: list = []            # (slot, Deferred)
        self.nbytes = 0
        self.vbytes = self.kbytes = 0      # value and key bytes: with the count, the exact encoded size
        self.entry_id = -1
        self.seq = 0
        self.payload = b""


class AsyncStreamWriter:
    def __init__(self, ns, name: str, options: WriterOptions):
        self.ns = ns
        self.bk = ns.bk
        self.reactor = ns.bk.reactor
        self.name = name
        self.opts = options
        self.epoch = 0
        self._lh: WriteHandle | None = None
        self._seg: Segment | None = None   # the open Segment this writer appends to
        self._seg_records = 0
        self._seg_bytes = 0
        self._seg_first_ts = 0
        self._seg_last_ts = 0
        self._seg_started = 0.0
        self._cur = _Batch()
        self._queued: deque[_Batch] = deque()      # sealed batches waiting for the ledger (roll, window)
        self._inflight: deque[_Batch] = deque()
        self._rolling = False
        self._error: BaseException | None = None
        self._linger = None
        self._closed = False
        self._flush_waiters: list[defer.Deferred] = []
        self.last_position: DLSN | None = None
        self._control_sent_at = -2
        self._closing = False
        self._max_frame = self.bk.bookie_client.max_frame_size
        self._max_payload = max_batch_payload(self._max_frame)
        self._guard = RollGuard(self.reactor, name, options.max_failed_rolls, options.roll_backoff_ms,
                                options.max_failed_segments_per_minute)

    # --- opening: fence the previous writer, take the stream over ------------------------------------
    async def _open(self) -> AsyncStreamWriter:
        # 1. claim the stream: bump the epoch first, so the previous writer, once fenced, sees it changed
        claimed = await update_stream(self.ns.driver, self.name,
                                      lambda md: md.replace(writer_epoch=md.writer_epoch + 1))
        epoch = claimed.metadata.writer_epoch
        # 2. recover (fence) the previous open segment, 3. seal it and open ours in one CAS
        md = claimed.metadata
        old = md.open_segment
        sealed = await sealed_from_ledger(self.bk, old, self.opts.password) if old is not None else None
        lh = await self._new_ledger()
        holder = {}

        def change(md):
            if md.writer_epoch != epoch:
                raise StreamFencedError(f"stream {self.name!r}: a newer writer (epoch {md.writer_epoch}) took over")
            segments = [sealed if sealed is not None and s.seq == sealed.seq else s for s in md.segments]
            holder["seg"] = seg = _open_segment(md.next_seq, lh, epoch)
            return md.replace(segments=(*segments, seg), next_seq=md.next_seq + 1)

        try:
            await update_stream(self.ns.driver, self.name, change)
        except Exception:
            await _discard(self.bk, lh)
            raise
        self.epoch = epoch
        seg = holder["seg"]
        self._guard.created()
        self._start_segment(seg, lh)
        log.info("stream %s: writer epoch %d on segment %d (ledger %d)%s", self.name, epoch, seg.seq, lh.ledger_id,
                 f", sealed segment {sealed.seq} at entry {sealed.last_entry}" if sealed else "")
        return self

    def _new_ledger(self):
        o = self.opts
        return self.bk.create_ledger(o.ensemble_size, o.write_quorum, o.ack_quorum, o.digest_type, o.password,
                                     {"bkfast.stream": self.name})

    def _start_segment(self, seg, lh) -> None:
        self._seg, self._lh = seg, lh
        self._seg_records = self._seg_bytes = 0
        self._seg_first_ts = self._seg_last_ts = 0
        self._seg_started = time.monotonic()

    # --- writing ------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StreamError(f"writer of stream {self.name!r} is closed")

    def write(self, value, key=None, timestamp: int | None = None) -> defer.Deferred:
        """Append one record; fires with its DLSN once it is durable on the ack quorum. A record no entry
        can hold fails at once with EntryTooLargeError (nothing sent; the writer goes on)."""
        try:
            self._check()
        except Exception as e:
            return defer.fail(e)
        vlen = len(value)
        klen = len(key) if key is not None else None
        refused = record_error(vlen, klen, self._max_frame)
        if refused is not None:
            return defer.fail(refused)
        b = self._cur
        if b.values and self._outgrows(b, 1, vlen, klen or 0, key is not None):
            self._seal_current()
            b = self._cur
        d: defer.Deferred[DLSN] = defer.Deferred()
        b.waiters.append((len(b.values), d))
        self._add(b, value, key, timestamp)
        return d

    def _outgrows(self, b: _Batch, n: int, vbytes: int, kbytes: int, keyed: bool) -> bool:
        """Would `b` with `n` more records of `vbytes` / `kbytes` be larger than an entry can be?"""
        return encoded_size(len(b.values) + n, b.vbytes + vbytes, b.kbytes + kbytes,
                            keyed or b.keys is not None) > self._max_payload

    def write_many(self, values, keys=None, timestamps=None) -> defer.Deferred:
        """Append many records; fires with the DLSN of the last one once all are durable (the others
        follow it: consecutive slots of consecutive entries). If any record is too large for an entry,
        none is written: EntryTooLargeError at once."""
        try:
            self._check()
            values = list(values)
            check_records(self._max_frame, values, keys)
        except Exception as e:
            return defer.fail(e)
        if not values:
            return defer.succeed(self.last_position)
        n = len(values)
        ts = now_ms()
        i = 0
        d: defer.Deferred[DLSN] | None = None
        while i < n:
            b = self._cur
            room_n = self.opts.max_batch_records - len(b.values)
            room_b = self.opts.max_batch_bytes - b.nbytes
            j = i
            size = vsize = ksize = 0
            while j < n and j - i < room_n and (size < room_b or j == i and not b.values):
                vlen = len(values[j])
                klen = len(keys[j]) if keys is not None and keys[j] is not None else 0
                if self._outgrows(b, j - i + 1, vsize + vlen, ksize + klen, keys is not None):
                    break
                size += vlen + klen + BATCH_OVERHEAD
                vsize += vlen
                ksize += klen
                j += 1
            if j == i:
                self._seal_current()
                continue
            chunk = values[i:j]
            if keys is not None:
                if b.keys is None:
                    b.keys = [None] * len(b.values)
                b.keys.extend(keys[i:j])
            elif b.keys is not None:
                b.keys.extend([None] * (j - i))
            b.values.extend(chunk)
            b.ts.extend(timestamps[i:j] if timestamps is not None else [ts] * (j - i))
            b.nbytes += size
            b.vbytes += vsize
            b.kbytes += ksize
            i = j
            if j == n:
                d = defer.Deferred()
                b.waiters.append((len(b.values) - 1, d))
            self._after_add(b)
        assert d is not None, "the loop ends with j == n: values is not empty"
        return d

    def _add(self, b: _Batch, value, key, timestamp) -> None:
        if key is not None and b.keys is None:
            b.keys = [None] * len(b.values)
        if b.keys is not None:
            b.keys.append(key)
        b.values.append(value)
        b.ts.append(now_ms() if timestamp is None else int(timestamp))
        klen = len(key) if key is not None else 0
        b.nbytes += len(value) + BATCH_OVERHEAD + klen
        b.vbytes += len(value)
        b.kbytes += klen
        self._after_add(b)

    def _after_add(self, b: _Batch) -> None:
        if b.nbytes >= self.opts.max_batch_bytes or len(b.values) >= self.opts.max_batch_records:
            self._seal_current()
        elif self._linger is None:
            self._linger = self.reactor.callLater(self.opts.linger_ms / 1000.0, self._linger_fired)

    def _linger_fired(self) -> None:
        self._linger = None
        if self._cur.values:
            self._seal_current()

    def _seal_current(self) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None
        b = self._cur
        if not b.values:
            return
        self._cur = _Batch()
        self._queued.append(b)
        self._pump()

    def _pump(self) -> None:
        """Send queued batches while the segment takes them (not rolling, window not full)."""
        while self._queued and not self._rolling and self._error is None \
                and len(self._inflight) < self.opts.max_inflight_batches:
            if self._roll_due():
                self._start_roll(None)
                return
            b = self._queued.popleft()
            self._send(b)

    def _send(self, b: _Batch) -> None:
        assert self._seg is not None and self._lh is not None, "batches are sent only into an open segment"
        b.seq = self._seg.seq
        b.payload = encode_batch(b.values, b.keys, b.ts, self._seg_records)
        self._seg_records += len(b.values)
        self._seg_bytes += len(b.payload)
        if not self._seg_first_ts:
            self._seg_first_ts = b.ts[0]
        self._seg_last_ts = b.ts[-1]
        self._inflight.append(b)
        lh = self._lh
        before = lh.last_add_pushed
        lh.async_add_entry(b.payload, self._acked, (b, lh))
        b.entry_id = lh.last_add_pushed if lh.last_add_pushed != before else -1

    def _acked(self, error, entry_id: int, ctx) -> None:
        b, lh = ctx
        if lh is not self._lh:
            return                                        # a failed segment's late callbacks
        if error is not None:
            if self._error is None and not self._rolling:
                self._start_roll(error)
            return
        b.entry_id = entry_id
        if self._inflight and self._inflight[0] is b:
            self._inflight.popleft()
        self._guard.succeeded()
        self._complete(b)
        if self._rolling:
            return
        self._pump()
        if not self._inflight and not self._queued:
            self._send_control()
        self._check_flushed()

    def _send_control(self) -> None:
        """Pipeline empty: one control entry, so the LAC it carries makes the last batch visible."""
        lh = self._lh
        if lh is None or self._closing or self._control_sent_at == lh.last_add_pushed:
            return
        lh.async_add_entry(encode_control(self._seg_records), self._control_acked, lh)
        self._control_sent_at = lh.last_add_pushed

    def _control_acked(self, error, _entry_id: int, lh) -> None:
        if error is not None and lh is self._lh and self._error is None and not self._rolling and not self._closing:
            self._start_roll(error)

    def _complete(self, b: _Batch) -> None:
        seq, entry = b.seq, b.entry_id
        self.last_position = DLSN(seq, entry, len(b.values) - 1)
        for slot, d in b.waiters:
            d.callback(DLSN(seq, entry, slot))
        b.waiters = b.values = b.payload = None  # type: ignore[assignment]  # done: let go of the records

    def _roll_due(self) -> bool:
        o = self.opts
        return bool((o.max_segment_bytes and self._seg_bytes >= o.max_segment_bytes)
                    or (o.max_segment_records and self._seg_records >= o.max_segment_records)
                    or (o.max_segment_age_ms and self._seg_records
                        and (time.monotonic() - self._seg_started) * 1000 >= o.max_segment_age_ms))

    # --- rolling ------------------------------------------------------------------------------------
    def _start_roll(self, error) -> None:
        self._rolling = True
        d = defer.ensureDeferred(self._roll(error))
        d.addErrback(self._fail)

    async def _roll(self, error) -> None:
        """Seal the current segment (closed, or recovered after `error`) and go on in a new one."""
        old_seg, old_lh = self._seg, self._lh
        sealed = None
        if error is None:
            while self._inflight:                         # completions pop them; wait for the tail
                await task.deferLater(self.reactor, 0.001, lambda: None)
                if self._error is not None:
                    return
            try:
                assert old_lh is not None, "a writer rolls only from an open segment"
                await old_lh.close()
                sealed = self._sealed(old_seg, old_lh)
            except Exception as e:                        # e.g. fenced by a new writer while closing
                error = e
        if error is not None:
            sealed = await self._recover_failed_segment(old_seg, old_lh, error)
        await self._guard.wait_before_new_segment(failed=error is not None)
        await self._open_next_segment(old_seg, sealed)
        self._rolling = False
        self._pump()
        self._check_flushed()

    def _sealed(self, seg, lh):
        """`seg` as sealed once its ledger `lh` is closed by this writer."""
        return seg.replace(state="sealed", last_entry=lh.last_add_confirmed, records=self._seg_records,
                           bytes=lh.length, first_ts=self._seg_first_ts, last_ts=self._seg_last_ts)

    async def _recover_failed_segment(self, old_seg, old_lh, error):
        """The segment's ledger failed: recover it (the sealed segment is what recovery kept). In-flight
        batches it kept are acknowledged in place, the others queue again for the next segment. Raises
        StreamFencedError if another writer took over, StreamWriterStoppedError when the roll guard says
        no more segments."""
        if await self._epoch_changed():
            raise StreamFencedError(f"stream {self.name!r}: another writer took over (epoch > {self.epoch})")
        log.warning("stream %s: segment %d (ledger %d) failed: %s; recovering it and rolling", self.name,
                    old_seg.seq, old_lh.ledger_id, error)
        sealed = await sealed_from_ledger(self.bk, old_seg, self.opts.password)
        self._lh = None                                   # ignore the failed handle's callbacks from now on
        kept = [b for b in self._inflight if 0 <= b.entry_id <= sealed.last_entry]
        lost = [b for b in self._inflight if b not in kept]
        if kept:
            self._guard.succeeded()
        for b in kept:
            self._complete(b)
        self._inflight.clear()
        self._queued.extendleft(reversed(lost))
        if not self._guard.may_roll():
            try:                                          # the stream is left with no open segment
                await self._seal_in_metadata(old_seg.seq, sealed)
            except Exception as e:
                log.warning("stream %s: could not seal failed segment %d: %s", self.name, old_seg.seq, e)
            raise StreamWriterStoppedError(
                f"stream {self.name!r}: writer stopped: {self._guard.failed_rolls} segments failed in a row "
                f"with no write acknowledged (max_failed_rolls={self.opts.max_failed_rolls}); the last, on "
                f"ledger {old_lh.ledger_id}, failed with: {error}")
        return sealed

    async def _open_next_segment(self, old_seg, sealed) -> None:
        """One CAS, conditional on this writer's epoch: `old_seg` replaced by `sealed`, a new open segment
        on a new ledger appended, and what retention removes dropped (its ledgers deleted after the CAS)."""
        lh = await self._new_ledger()
        epoch = self.epoch
        seg_holder = {}

        def change(md):
            if md.writer_epoch != epoch:
                raise StreamFencedError(f"stream {self.name!r}: another writer took over (epoch {md.writer_epoch})")
            segments = [sealed if s.seq == old_seg.seq else s for s in md.segments]
            seg = _open_segment(md.next_seq, lh, epoch)
            seg_holder["seg"] = seg
            new = md.replace(segments=(*segments, seg), next_seq=md.next_seq + 1)
            cut = retention_cut(new)
            seg_holder["cut"] = cut
            return without_segments(new, cut) if cut else new

        try:
            await update_stream(self.ns.driver, self.name, change)
        except Exception:
            await _discard(self.bk, lh)
            raise
        self._guard.created()
        self._start_segment(seg_holder["seg"], lh)
        if seg_holder["cut"]:
            await delete_ledgers(self.bk, seg_holder["cut"])
        log.info("stream %s: rolled to segment %d (ledger %d)", self.name, seg_holder["seg"].seq, lh.ledger_id)

    async def _epoch_changed(self) -> bool:
        try:
            vs = await self.ns.driver.read_stream(self.name)
        except Exception:
            return False
        return vs.metadata.writer_epoch != self.epoch

    def _fail(self, failure) -> None:
        err = failure.value
        if not isinstance(err, Exception):
            return failure
        self._error = err
        log.warning("stream %s: writer stopped: %s", self.name, err)
        for b in [*self._inflight, *self._queued, self._cur]:
            for _slot, d in b.waiters or ():
                d.errback(err)
            b.waiters = []
        self._inflight.clear()
        self._queued.clear()
        self._check_flushed()

    # --- flush / close ------------------------------------------------------------------------------
    def flush(self) -> defer.Deferred:
        """Send the current batch and wait until every record written so far is acknowledged."""
        self._seal_current()
        d: defer.Deferred[None] = defer.Deferred()
        self._flush_waiters.append(d)
        self._check_flushed()
        return d

    def _check_flushed(self) -> None:
        if not self._flush_waiters:
            return
        if self._error is not None:
            waiters, self._flush_waiters = self._flush_waiters, []
            for d in waiters:
                d.errback(self._error)
        elif not self._inflight and not self._queued and not self._rolling and not self._cur.values:
            waiters, self._flush_waiters = self._flush_waiters, []
            for d in waiters:
                d.callback(self.last_position)

    async def _seal_in_metadata(self, seq: int, sealed) -> None:
        """Replace segment `seq` by `sealed`, unless another writer took the stream over."""
        epoch = self.epoch

        def change(md):
            if md.writer_epoch != epoch:
                return None
            return md.replace(segments=tuple(sealed if s.seq == seq else s for s in md.segments))

        await update_stream(self.ns.driver, self.name, change)

    async def _close(self) -> None:
        if self._closed:
            return
        self._guard.interrupt()
        if self._error is None:
            await self.flush()
        self._closed = True
        if self._error is not None or self._lh is None:
            return
        lh, seg = self._lh, self._seg
        assert seg is not None, "set with self._lh"
        self._closing = True
        await lh.close()
        sealed = self._sealed(seg, lh)
        await self._seal_in_metadata(seg.seq, sealed)
        log.info("stream %s: writer closed; segment %d sealed at entry %d", self.name, seg.seq, sealed.last_entry)

    def close(self) -> defer.Deferred:
        """Flush, then seal the open segment (its ledger closed); the stream stays open for a next writer."""
        return defer.ensureDeferred(self._close())


def _open_segment(seq: int, lh, epoch: int):
    from bkfast.meta.streams import Segment

    return Segment(seq=seq, ledger=lh.ledger_id, scope=lh.scope_id, state="open", origin=f"writer:{epoch}")


async def _discard(bk, lh) -> None:
    try:
        await lh.close()
    except Exception:
        pass
    try:
        await bk.delete_ledger(lh.ledger_id, lh.scope_id)
    except Exception as e:
        log.warning("could not delete unused ledger %d: %s", lh.ledger_id, e)
