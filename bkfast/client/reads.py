"""Read operations of a ledger handle: entries (with speculative retries), the last add confirmed (plain
and fencing, spec §6.2), recovery reads (spec §6.3 step 4) and long-poll LAC reads for tailing.

Each operation reads the handle's current metadata and talks to bookies only through the handle's
`BookieClient`. Deferreds fire in the reactor thread.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from twisted.internet import defer

from bkfast._clientpath import LedgerEntry, ReadBatchCore
from bkfast.codec import encode_read_request
from bkfast.errors import (
    BKDigestMatchException,
    BKError,
    BKLedgerRecoveryException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKReadException,
    BKTimeoutException,
    BKUnauthorizedAccessException,
    error_for_v2_rc,
)
from bkfast.ids import scope_field

from .distribution import quorum_covered, write_set

if TYPE_CHECKING:
    from twisted.internet import task

__all__ = ["read_entries", "read_last_confirmed", "recovery_read", "read_lac_long_poll", "read_explicit_lac"]

log = logging.getLogger(__name__)

_NO_ENTRY = (BKNoSuchEntryException, BKNoSuchLedgerExistsException)


def _is_no_entry(failure_or_exc) -> bool:
    exc = getattr(failure_or_exc, "value", failure_or_exc)
    return isinstance(exc, _NO_ENTRY)


def _worst_error(errors: list[BaseException], ledger_id: int, entry_id: int) -> BaseException:
    """The error a read reports once every replica failed: 'no such entry' only if every replica said so."""
    real = [e for e in errors if not isinstance(e, _NO_ENTRY)]
    if not real:
        return BKNoSuchEntryException(f"ledger {ledger_id} entry {entry_id}: no replica has it")
    for exc in real:
        if isinstance(exc, BKDigestMatchException):
            return exc
    return real[0]


class _ReadBatch:
    """Reads entries [first, last] with at most `window` in flight; fires with the list, in order.

    The per-entry work (sending, matching answers, digest checks, ordering) is a ReadBatchCore
    (bkfast._clientpath); this class adds what is rare: failures (next replica, or the batch fails once
    every replica failed), speculative reads after `speculativeReadTimeout`, and read timeouts of the
    fast path."""

    def __init__(self, handle, first: int, last: int, window: int = 2000):
        self.handle = handle
        self.deferred: defer.Deferred[list[LedgerEntry]] = defer.Deferred()
        md = handle.metadata
        client = handle.bookie_client
        self.v3 = bool(handle.scope_id) or not client.v2_by_default
        self.core = ReadBatchCore(handle.ledger_id, first, last, window, [tuple(s) for s in md.ensembles],
                                  md.ensemble_size, md.write_quorum_size, True,
                                  self._resolve, self._slow_send,
                                  (int(handle.digest.digest_type), handle.digest.mac_key, handle.scope_id),
                                  self._failed, self._finished, _plain_read_frame, self.v3,
                                  scope_field(handle.scope_id))
        if handle.settings.reorder_read_sequence:
            self.core.write_sets.update(_reordered_write_sets(handle.bk, md))
        self.speculative_s = handle.settings.speculative_read_timeout_s
        self.read_timeout = client.read_timeout
        self.sweeper: task.LoopingCall | None = None

    def start(self) -> defer.Deferred:
        core = self.core
        if core.remaining <= 0:
            self.deferred.callback([])
            return self.deferred
        core.fill()
        periods = [t for t in (self.speculative_s, self.read_timeout) if t]
        if periods and not self.deferred.called:
            from twisted.internet import task

            self.sweeper = task.LoopingCall(self._sweep)
            self.sweeper.clock = self.handle.reactor
            self.sweeper.start(min(min(periods) / 2, 1.0), now=False)
        return self.deferred

    def _resolve(self, bookie: str):
        return self.handle.bookie_client.read_channel(bookie, self.handle.ledger_id, self.core, self.v3)

    def _slow_send(self, read, bookie: str) -> None:
        h = self.handle
        d = h.bookie_client.read_entry(bookie, h.ledger_id, read.entry_id, scope_id=h.scope_id)
        d.addCallbacks(self._slow_ok, self._slow_error, (bookie, read.entry_id), None, (bookie, read.entry_id))

    def _slow_ok(self, data, bookie: str, entry_id: int) -> None:
        self.core.on_result(bookie, entry_id, data, None)

    def _slow_error(self, failure, bookie: str, entry_id: int) -> None:
        self.core.on_result(bookie, entry_id, None, failure.value)

    def _failed(self, read, error) -> None:
        """A replica of `read` failed: ask the next one, or fail the batch once none is left."""
        h = self.handle
        if isinstance(error, int):
            error = error_for_v2_rc(error, f"read on bookie {read.bookies[read.next_index - 1]}, ledger "
                                           f"{h.ledger_id}, entry {read.entry_id}")
        elif isinstance(error, BKDigestMatchException):
            log.warning("ledger %d entry %d: replica failed verification: %s", h.ledger_id, read.entry_id, error)
            h._stats.read_dm.inc()
        read.errors.append(error)
        core = self.core
        if core.closed or core.send_next(read) or read.outstanding:
            return
        core.give_up(read)
        if not self.deferred.called:
            core.close()
            self._stop()
            self.deferred.errback(_worst_error(read.errors, h.ledger_id, read.entry_id))

    def _finished(self) -> None:
        self._stop()
        self.handle._observe_lac(self.core.max_lac)
        self.deferred.callback(self.core.results)

    def _stop(self) -> None:
        if self.sweeper is not None and self.sweeper.running and not self.core.in_flight:
            self.sweeper.stop()

    def _sweep(self) -> None:
        core = self.core
        now = time.monotonic()
        if self.read_timeout:
            for read, bookie in core.expired(now, self.read_timeout):
                core.on_result(bookie, read.entry_id, None, BKTimeoutException(
                    f"no response within the timeout: read on bookie {bookie}, ledger {self.handle.ledger_id}, "
                    f"entry {read.entry_id}"))
        if self.speculative_s is not None and not core.closed:
            for read in list(core.in_flight.values()):
                if not read.done and now - read.sent_at >= self.speculative_s and core.send_next(read):
                    self.handle._stats.speculative_reads.inc()
                    log.info("ledger %d entry %d: speculative read to %s", self.handle.ledger_id, read.entry_id,
                             read.bookies[read.next_index - 1])
        if core.closed and not core.in_flight:
            assert self.sweeper is not None, "_sweep runs only from the sweeper"
            self.sweeper.stop()


def _reordered_write_sets(bk, md) -> dict[int, list[str]]:
    """reorderReadSequenceEnabled: the order the placement policy asks each write set's replicas in (local
    rack/region first; read-only, slow and gone bookies last), keyed as ReadBatchCore keys its write sets
    (segment * E + first position)."""
    placement = getattr(bk, "placement", None)
    if placement is None:
        return {}
    e, w = md.ensemble_size, md.write_quorum_size
    slow = bk.recently_failed
    out = {}
    for segment, (_first, ensemble) in enumerate(md.ensembles):
        for base in range(e):
            order = placement.reorder_read_sequence(ensemble, write_set(base, e, w), bk.writable_bookies,
                                                    bk.read_only_bookies, slow)
            out[segment * e + base] = [ensemble[i] for i in order]
    return out


def _plain_read_frame(ledger_id: int, entry_id: int) -> bytes:
    return encode_read_request(ledger_id, entry_id, 0, None)


def read_entries(handle, first: int, last: int) -> defer.Deferred:
    return _ReadBatch(handle, first, last).start()


def read_last_confirmed(handle, fence: bool) -> defer.Deferred:
    """ReadLastConfirmedOp: READ(entry -1) to every bookie of the last ensemble (fencing when `fence`).
    Fires with (lac, length) of the entry with the largest piggybacked LAC, (-1, 0) if none."""
    md = handle.metadata
    ensemble = md.last_ensemble[1]
    n = len(ensemble)
    result: defer.Deferred[tuple[int, int]] = defer.Deferred()
    state = {"best": (-1, 0), "valid": False, "answered": set(), "ok": set(), "last_error": None}

    def settle():
        if result.called:
            return
        unknown = [i for i in range(n) if i not in state["ok"]]
        if state["valid"] and quorum_covered(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, unknown):
            result.callback(state["best"])
        elif len(state["answered"]) == n:
            err = state["last_error"] or BKLedgerRecoveryException(
                f"ledger {handle.ledger_id}: could not read the last confirmed entry from a quorum of {ensemble}")
            result.errback(err)

    def ok(data, index):
        state["answered"].add(index)
        try:
            entry = handle.digest.decode(data, None)
        except BKError as exc:
            log.warning("ledger %d: LAC read from %s failed verification: %s", handle.ledger_id, ensemble[index], exc)
            state["last_error"] = exc
        else:
            state["valid"] = True
            state["ok"].add(index)
            if entry.last_add_confirmed > state["best"][0]:
                state["best"] = (entry.last_add_confirmed, entry.length)
        settle()

    def error(failure, index):
        state["answered"].add(index)
        exc = failure.value
        if _is_no_entry(exc):
            state["valid"] = True
            state["ok"].add(index)
        elif isinstance(exc, BKUnauthorizedAccessException):
            if not result.called:
                result.errback(exc)
            return
        else:
            state["last_error"] = exc
        settle()

    for index, bookie in enumerate(ensemble):
        d = handle.bookie_client.read_entry(bookie, handle.ledger_id, -1, fence=fence,
                                            master_key=handle.digest.master_key if fence else None,
                                            scope_id=handle.scope_id)
        d.addCallbacks(ok, error, callbackArgs=(index,), errbackArgs=(index,))
    return result


def recovery_read(handle, entry_id: int, ensemble=None) -> defer.Deferred:
    """A fencing, high-priority read of one entry from every bookie of its write set. Fires with the
    LedgerEntry, or fails with BKNoSuchEntryException once WQ - AQ + 1 bookies say they lack it.
    `ensemble` (recovery passes the fenced last ensemble) overrides the handle's current metadata, which a
    recovery's own ensemble change may already point at a new bookie that has none of these entries."""
    md = handle.metadata
    if ensemble is None:
        ensemble = md.ensemble_at(entry_id)
    bookies = [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum_size)]
    needed_missing = md.write_quorum_size - md.ack_quorum_size + 1
    result: defer.Deferred[LedgerEntry] = defer.Deferred()
    state = {"missing": 0, "errors": [], "answered": 0}

    def settle_failure():
        if result.called:
            return
        if state["missing"] >= needed_missing:
            result.errback(BKNoSuchEntryException(
                f"ledger {handle.ledger_id} entry {entry_id}: {state['missing']} of {len(bookies)} bookies lack it"))
        elif state["answered"] == len(bookies):
            result.errback(_worst_error(state["errors"], handle.ledger_id, entry_id))

    def ok(data, bookie):
        state["answered"] += 1
        if result.called:
            return
        try:
            entry = handle.digest.to_ledger_entry(data, entry_id)
        except BKError as exc:
            state["errors"].append(exc)
            settle_failure()
            return
        result.callback(entry)

    def error(failure, bookie):
        state["answered"] += 1
        if _is_no_entry(failure.value):
            state["missing"] += 1
        state["errors"].append(failure.value)
        settle_failure()

    for bookie in bookies:
        d = handle.bookie_client.read_entry(bookie, handle.ledger_id, entry_id, fence=True,
                                            master_key=handle.digest.master_key, high_priority=True,
                                            scope_id=handle.scope_id)
        d.addCallbacks(ok, error, callbackArgs=(bookie,), errbackArgs=(bookie,))
    return result


def read_lac_long_poll(handle, previous_lac: int, timeout_ms: int) -> defer.Deferred:
    """Long-poll every bookie of the ensemble covering `previous_lac + 1` (v3 ENTRY_PIGGYBACK read).
    Fires with the new LAC as soon as one bookie reports LAC > previous_lac (the piggybacked entry, when
    verified, is cached on the handle), or with the best LAC seen once all bookies answered or timed out."""
    md = handle.metadata
    ensemble = md.ensemble_at(previous_lac + 1)
    result: defer.Deferred[int] = defer.Deferred()
    state = {"answered": 0, "best": previous_lac, "errors": []}

    def ok(poll, bookie):
        state["answered"] += 1
        if result.called:
            return
        lac = poll.lac if poll.lac is not None else -1
        if poll.entry is not None and lac > previous_lac:
            try:
                handle._cache_tail_entry(handle.digest.to_ledger_entry(poll.entry, previous_lac + 1))
            except BKError as exc:
                log.warning("ledger %d: long-poll entry from %s failed verification: %s", handle.ledger_id, bookie, exc)
        if lac > state["best"]:
            state["best"] = lac
        if state["best"] > previous_lac:
            handle._observe_lac(state["best"])
            result.callback(state["best"])
        elif state["answered"] == len(ensemble):
            result.callback(state["best"])

    def error(failure, bookie):
        state["answered"] += 1
        state["errors"].append(failure.value)
        if result.called:
            return
        if state["answered"] == len(ensemble):
            if len(state["errors"]) == len(ensemble) and not all(_is_no_entry(e) for e in state["errors"]):
                result.errback(state["errors"][0])
            else:
                result.callback(state["best"])

    for bookie in ensemble:
        # With ENTRY_PIGGYBACK a bookie expects entry -1 and answers with the entry after previous_lac
        # (a Java bookie answers EBADREQ to any other entry id; see the captured v3 session vectors).
        d = handle.bookie_client.read_entry_long_poll(bookie, handle.ledger_id, -1, previous_lac,
                                                      timeout_ms, scope_id=handle.scope_id)
        handle._stats.time("read_lac_and_entry_response", d)
        d.addCallbacks(ok, error, callbackArgs=(bookie,), errbackArgs=(bookie,))
    return result


def read_explicit_lac(handle) -> defer.Deferred:
    """READ_LAC (v3) from every bookie of the last ensemble; fires with the largest LAC found in either
    the explicit LAC buffer or the last entry's piggybacked LAC (-1 if none)."""
    ensemble = handle.metadata.last_ensemble[1]
    calls = [handle.bookie_client.read_lac(b, handle.ledger_id, scope_id=handle.scope_id) for b in ensemble]

    def combine(results):
        best = -1
        errors = []
        for success, value in results:
            if not success:
                errors.append(value.value)
                continue
            if value.lac_buffer:
                try:
                    best = max(best, handle.digest.decode_lac(value.lac_buffer))
                except BKError as exc:
                    errors.append(exc)
            if value.last_entry:
                try:
                    best = max(best, handle.digest.decode(value.last_entry, None).last_add_confirmed)
                except BKError as exc:
                    errors.append(exc)
        if best < 0 and errors and len(errors) == len(ensemble) and not all(_is_no_entry(e) for e in errors):
            raise BKReadException(f"ledger {handle.ledger_id}: explicit LAC read failed on every bookie: {errors[0]}")
        return best

    return defer.DeferredList(calls, consumeErrors=True).addCallback(combine)

