"""Read operations of a ledger handle: entries (with speculative retries), the last add confirmed (plain
and fencing, spec §6.2), recovery reads (spec §6.3 step 4) and long-poll LAC reads for tailing.

Each operation reads the handle's current metadata and talks to bookies only through the handle's
`BookieClient`. Deferreds fire in the reactor thread.
"""

from __future__ import annotations

import logging
import time

from twisted.internet import defer

from bkfast.errors import (
    BKDigestMatchException,
    BKError,
    BKLedgerRecoveryException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKReadException,
    BKUnauthorizedAccessException,
)

from .distribution import quorum_covered, write_set

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


class _EntryRead:
    """One entry read: replicas tried in write-set order; the next one is asked early when the current
    one has not answered within `speculativeReadTimeout` (checked by the batch's sweeper)."""

    __slots__ = ("batch", "entry_id", "bookies", "next_index", "pending", "errors", "done", "sent_at")

    def __init__(self, batch: _ReadBatch, entry_id: int, bookies: list[str]):
        self.batch = batch
        self.entry_id = entry_id
        self.bookies = bookies
        self.next_index = 0
        self.pending = 0
        self.errors: list[BaseException] = []
        self.done = False
        self.sent_at = 0.0

    def send_next(self) -> bool:
        if self.next_index >= len(self.bookies):
            return False
        bookie = self.bookies[self.next_index]
        self.next_index += 1
        self.pending += 1
        self.sent_at = time.monotonic()
        h = self.batch.handle
        client = h.bookie_client
        if not h.scope_id and client.read_entry_to(_entry_read_done, self, bookie, h.ledger_id, self.entry_id):
            return True
        d = client.read_entry(bookie, h.ledger_id, self.entry_id, scope_id=h.scope_id)
        d.addCallbacks(self._ok, self._error, errbackArgs=(bookie,))
        return True

    def _ok(self, data):
        self.pending -= 1
        if self.done:
            return
        try:
            entry, piggybacked_lac = self.batch.handle.digest.verify(data, self.entry_id)
        except BKError as exc:
            log.warning("ledger %d entry %d: replica failed verification: %s", self.batch.handle.ledger_id,
                        self.entry_id, exc)
            self._failed(exc)
            return
        self.done = True
        self.batch.entry_done(self, entry, piggybacked_lac)

    def _error(self, failure, bookie):
        self.pending -= 1
        if not self.done:
            self._failed(failure.value)

    def _failed(self, exc: BaseException):
        self.errors.append(exc)
        if not self.send_next() and self.pending == 0:
            self.done = True
            self.batch.entry_failed(self, _worst_error(self.errors, self.batch.handle.ledger_id, self.entry_id))


def _entry_read_done(request, data, error) -> None:
    """Completion of a fast-path bookie read (BookieClient.read_entry_to)."""
    read = request.add
    if error is None:
        read._ok(data)
    else:
        read.pending -= 1
        if not read.done:
            read._failed(error)


class _ReadBatch:
    """Reads entries [first, last] with at most `window` in flight; fires with the list, in order."""

    def __init__(self, handle, first: int, last: int, window: int = 2000):
        self.handle = handle
        self.first = first
        self.last = last
        self.window = window
        self.results: list = [None] * (last - first + 1)
        self.remaining = last - first + 1
        self.next_entry = first
        self.in_flight: dict[int, _EntryRead] = {}
        self.deferred = defer.Deferred()
        self.failed = False
        spec_ms = handle.conf.get("speculativeReadTimeout")
        self.speculative_s = spec_ms / 1000.0 if spec_ms > 0 else None
        self.sweeper = None
        self._sets_of = None
        self._sets: dict = {}
        self._firsts: list[int] = []

    def start(self) -> defer.Deferred:
        if self.remaining <= 0:
            self.deferred.callback([])
            return self.deferred
        self._fill()
        if self.speculative_s is not None and not self.deferred.called:
            from twisted.internet import task

            self.sweeper = task.LoopingCall(self._speculate)
            self.sweeper.clock = self.handle.reactor
            self.sweeper.start(self.speculative_s / 2, now=False)
        return self.deferred

    def _fill(self):
        md = self.handle.metadata
        if self._sets_of is not md:
            self._sets_of = md
            self._sets = {}     # (segment index, e % E) -> bookies: one write set per segment and offset
            self._firsts = [first for first, _ in md.ensembles]
        sets = self._sets
        firsts = self._firsts
        segment = 0
        E, WQ = md.ensemble_size, md.write_quorum_size
        while self.next_entry <= self.last and len(self.in_flight) < self.window and not self.failed:
            e = self.next_entry
            self.next_entry += 1
            while segment + 1 < len(firsts) and firsts[segment + 1] <= e:
                segment += 1
            key = (segment, e % E)
            bookies = sets.get(key)
            if bookies is None:
                ensemble = md.ensembles[segment][1]
                bookies = sets[key] = [ensemble[i] for i in write_set(e, E, WQ)]
            read = _EntryRead(self, e, bookies)
            self.in_flight[e] = read
            read.send_next()

    def _speculate(self):
        now = time.monotonic()
        for read in list(self.in_flight.values()):
            if not read.done and now - read.sent_at >= self.speculative_s:
                if read.send_next():
                    log.info("ledger %d entry %d: speculative read to %s", self.handle.ledger_id, read.entry_id,
                             read.bookies[read.next_index - 1])

    def entry_done(self, read: _EntryRead, entry, piggybacked_lac: int):
        self.in_flight.pop(read.entry_id, None)
        if self.failed:
            return
        self.handle._observe_lac(piggybacked_lac)
        self.results[read.entry_id - self.first] = entry
        self.remaining -= 1
        if self.remaining == 0:
            self._finish()
            self.deferred.callback(self.results)
        elif self.next_entry <= self.last and len(self.in_flight) <= self.window >> 1:
            self._fill()            # refill in bulk, not one read per completion

    def entry_failed(self, read: _EntryRead, exc: BaseException):
        self.in_flight.pop(read.entry_id, None)
        if self.failed:
            return
        self.failed = True
        self._finish()
        self.deferred.errback(exc)

    def _finish(self):
        if self.sweeper is not None and self.sweeper.running:
            self.sweeper.stop()


def read_entries(handle, first: int, last: int) -> defer.Deferred:
    return _ReadBatch(handle, first, last).start()


def read_last_confirmed(handle, fence: bool) -> defer.Deferred:
    """ReadLastConfirmedOp: READ(entry -1) to every bookie of the last ensemble (fencing when `fence`).
    Fires with (lac, length) of the entry with the largest piggybacked LAC, (-1, 0) if none."""
    md = handle.metadata
    ensemble = md.last_ensemble[1]
    n = len(ensemble)
    result = defer.Deferred()
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


def recovery_read(handle, entry_id: int) -> defer.Deferred:
    """A fencing, high-priority read of one entry from every bookie of its write set. Fires with the
    LedgerEntry, or fails with BKNoSuchEntryException once WQ - AQ + 1 bookies say they lack it."""
    md = handle.metadata
    ensemble = md.ensemble_at(entry_id)
    bookies = [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum_size)]
    needed_missing = md.write_quorum_size - md.ack_quorum_size + 1
    result = defer.Deferred()
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
    result = defer.Deferred()
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

