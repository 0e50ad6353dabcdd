"""WriteHandle: appends to a ledger (Java's LedgerHandle write path).

An add is encoded once (header with the piggybacked LAC, digest, payload) and sent to the bookies of
its write set (round robin over the ensemble); it completes when AQ distinct bookies of that write set
acknowledged it, and completions are delivered strictly in entry order. When a bookie fails (error or
timeout), it is replaced: a new segment starting at LAC + 1 is CAS-written into the metadata and the
pending adds are re-sent to the replacement; while that runs, acknowledgements are held back so the
segment boundary stays fixed. Fencing (a recovering reader) ends the writer: every pending and later
add fails with BKLedgerFencedException. The same machinery re-adds entries during recovery
(`recovery=True`: recovery-add flag, high priority, metadata expected IN_RECOVERY).
"""

from __future__ import annotations

import logging
from collections import deque

from twisted.internet import defer, task

from bkfast.codec import FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD, encode_add_request_for_entry
from bkfast.errors import (
    BKDuplicateEntryIdException,
    BKError,
    BKIncorrectParameterException,
    BKLedgerClosedException,
    BKLedgerFencedException,
    BKMetadataVersionException,
    BKNotEnoughBookiesException,
    BKUnauthorizedAccessException,
)
from bkfast.meta.ledger_metadata import LedgerState
from bkfast.net.bookie_client import PendingRequest

from .distribution import write_set
from .handle import LedgerHandle
from .placement import choose_replacements

__all__ = ["WriteHandle", "WriteHandleAdv"]

log = logging.getLogger(__name__)

_ENDS_WRITER = (BKLedgerFencedException, BKUnauthorizedAccessException)
_RECOVERY_FLAGS = FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY


class _PendingAdd:
    __slots__ = ("entry_id", "entry", "length", "acked", "bookies", "deferred", "done", "frame")

    def __init__(self, entry_id: int, entry: bytes, length: int):
        self.entry_id = entry_id
        self.entry = entry
        self.length = length
        self.acked: set[str] = set()
        self.bookies: list[str] | None = None      # None until sent
        self.deferred = defer.Deferred()
        self.done = False
        self.frame = None                            # the v2 ADD request, built on first send


class WriteHandle(LedgerHandle):
    """A ledger opened for appending (created by this client, or being recovered)."""

    def __init__(self, bk, ledger, versioned, password: bytes, recovery: bool = False, deferred_sync: bool = False):
        super().__init__(bk, ledger, versioned, password)
        self._recovery = recovery
        self.deferred_sync = deferred_sync          # WriteFlag.DEFERRED_SYNC: acks before journal sync (v3)
        self._expected_state = LedgerState.IN_RECOVERY if recovery else LedgerState.OPEN
        self.last_add_pushed = self.last_add_confirmed
        self.confirmed_length = self.length
        self._pending: deque[_PendingAdd] = deque()
        self._changing_ensemble = False
        self._failed_bookies: set[str] = set()
        self._error: BaseException | None = None
        self._closing = False
        self._closed = False
        self._drained_waiters: list[defer.Deferred] = []
        self._ack_quorum = self.metadata.ack_quorum_size
        self._write_sets_of = None
        self._write_sets_first = 0
        self._write_sets: list[list[str]] = []
        self._explicit_lac_written = -1
        self._explicit_lac_loop: task.LoopingCall | None = None
        interval_ms = self.conf.get("explicitLacInterval")
        if interval_ms > 0 and not recovery:
            self._explicit_lac_loop = task.LoopingCall(self._write_explicit_lac)
            self._explicit_lac_loop.clock = self.reactor
            self._explicit_lac_loop.start(interval_ms / 1000.0, now=False)

    @property
    def is_closed(self) -> bool:
        return self._closed or self.metadata.is_closed

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    # --- adds ---------------------------------------------------------------------------------------
    def _refuse(self) -> BaseException | None:
        if self._error is not None:
            return self._error
        if self._closing or self._closed:
            return BKLedgerClosedException(f"ledger {self.ledger_id} is closed (or closing) for writing")
        return None

    def add_entry(self, data) -> defer.Deferred:
        """Append `data`; fires with its entry id once AQ bookies acknowledged it (in entry order)."""
        refused = self._refuse()
        if refused is not None:
            return defer.fail(refused)
        entry_id = self.last_add_pushed + 1
        self.last_add_pushed = entry_id
        return self._push(entry_id, data)

    append = add_entry

    def _push(self, entry_id: int, data) -> defer.Deferred:
        self.length += len(data)
        pending = _PendingAdd(entry_id, self.digest.encode(entry_id, self.last_add_confirmed, self.length, data),
                              self.length)
        self._enqueue(pending)
        if not self._changing_ensemble:
            self._send(pending)
        return pending.deferred

    def _enqueue(self, pending: _PendingAdd) -> None:
        self._pending.append(pending)

    def _write_bookies(self, entry_id: int) -> list[str]:
        md = self.metadata
        if md is not self._write_sets_of:
            # the write sets of the last segment, by entry_id % E (rebuilt when the metadata changes)
            first, ensemble = md.last_ensemble
            self._write_sets_of, self._write_sets_first = md, first
            self._write_sets = [[ensemble[i] for i in write_set(k, md.ensemble_size, md.write_quorum_size)]
                                for k in range(md.ensemble_size)]
        if entry_id >= self._write_sets_first:
            return self._write_sets[entry_id % md.ensemble_size]
        ensemble = md.ensemble_at(entry_id)
        return [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum_size)]

    def _send(self, pending: _PendingAdd, only: set[str] | None = None) -> None:
        pending.bookies = self._write_bookies(pending.entry_id)
        client = self.bookie_client
        add = client.add_entry
        fast = client.add_frame_to if not (self.scope_id or self.deferred_sync) and client.v2_by_default else None
        for bookie in pending.bookies:
            if bookie in pending.acked or (only is not None and bookie not in only):
                continue
            if fast is not None:
                frame = pending.frame
                if frame is None:       # one v2 frame serves every bookie of the write set
                    frame = pending.frame = encode_add_request_for_entry(
                        self.digest.master_key, pending.entry, _RECOVERY_FLAGS if self._recovery else 0)
                if fast(self._add_done, pending, bookie, self.ledger_id, pending.entry_id, frame):
                    continue
            d = add(bookie, self.ledger_id, pending.entry_id, pending.entry, self.digest.master_key,
                    recovery=self._recovery, high_priority=self._recovery, scope_id=self.scope_id,
                    deferred_sync=self.deferred_sync)
            if type(d) is PendingRequest and not d.called:
                # completion calls _add_done directly: no Deferred callback chain per bookie request
                d.add = pending
                d.bookie = bookie
                d.sink = self._add_done
            else:
                d.addCallbacks(self._add_ok, self._add_failed, (pending, bookie), None, (pending, bookie))

    def _add_done(self, request, _result, error) -> None:
        """Completion of a fast-path bookie write (BookieClient.add_frame_to)."""
        if error is None:
            self._acked(request.add, request.bookie)
        else:
            self._add_error(error, request.add, request.bookie)

    def _add_ok(self, _result, pending: _PendingAdd, bookie: str) -> None:
        self._acked(pending, bookie)

    def _acked(self, pending: _PendingAdd, bookie: str) -> None:
        if pending.done or pending.bookies is None or bookie not in pending.bookies:
            return
        acked = pending.acked
        acked.add(bookie)
        if len(acked) >= self._ack_quorum:
            pending.done = True
            # Acks are delivered in entry order: only the head can start a drain (for adv ledgers too,
            # whose queue is kept sorted by entry id).
            if pending is self._pending[0] and not self._changing_ensemble:
                self._drain()

    def _add_failed(self, failure, pending: _PendingAdd, bookie: str) -> None:
        self._add_error(failure.value, pending, bookie)

    def _add_error(self, exc: BaseException, pending: _PendingAdd, bookie: str) -> None:
        if self._error is not None:
            return
        if isinstance(exc, _ENDS_WRITER):
            log.warning("ledger %d entry %d: bookie %s refused the add (%s); the writer stops",
                        self.ledger_id, pending.entry_id, bookie, exc)
            self._fail_handle(exc if isinstance(exc, BKLedgerFencedException) else exc)
            return
        if bookie not in self.metadata.last_ensemble[1]:
            return                                  # already replaced
        log.warning("ledger %d entry %d: write to bookie %s failed (%s); replacing it",
                    self.ledger_id, pending.entry_id, bookie, exc)
        self._failed_bookies.add(bookie)
        if not self._changing_ensemble:
            defer.ensureDeferred(self._change_ensemble())

    def _drain(self) -> None:
        pending_adds = self._pending
        while pending_adds and not self._changing_ensemble:
            head = pending_adds[0]
            if not head.done or head.entry_id != self.last_add_confirmed + 1:
                break
            pending_adds.popleft()
            self.last_add_confirmed = head.entry_id
            self.confirmed_length = head.length
            head.entry = head.frame = None
            head.deferred.callback(head.entry_id)
        if not pending_adds and self._drained_waiters:
            waiters, self._drained_waiters = self._drained_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _fail_handle(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._stop_explicit_lac()
        pending_adds, self._pending = self._pending, deque()
        for pending in pending_adds:
            if not pending.deferred.called:
                pending.deferred.errback(self._error)
        waiters, self._drained_waiters = self._drained_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # --- ensemble change ----------------------------------------------------------------------------
    async def _change_ensemble(self) -> None:
        self._changing_ensemble = True
        try:
            while self._failed_bookies and self._error is None:
                md = self.metadata
                first, ensemble = md.last_ensemble
                failed = self._failed_bookies & set(ensemble)
                self._failed_bookies -= set(self._failed_bookies) - failed
                if not failed:
                    break
                new_first = self.last_add_confirmed + 1
                try:
                    new_ensemble = choose_replacements(self.bk.writable_bookies, ensemble,
                                                       failed | self.bk.recently_failed, self.scope_id)
                except BKNotEnoughBookiesException as exc:
                    log.error("ledger %d: cannot replace failed bookies %s: %s", self.ledger_id, sorted(failed), exc)
                    self._fail_handle(exc)
                    return
                new_md = md.with_ensemble(new_first, new_ensemble)
                try:
                    versioned = await self.bk.driver.write_ledger_metadata(self.ledger, new_md, self.metadata_version)
                except BKMetadataVersionException:
                    current = await self.bk.driver.read_ledger_metadata(self.ledger)
                    if current.metadata.state != self._expected_state:
                        log.warning("ledger %d: metadata changed to %s during an ensemble change; the writer stops",
                                    self.ledger_id, current.metadata.state.name)
                        self._fail_handle(BKLedgerFencedException(
                            f"ledger {self.ledger_id} is {current.metadata.state.name} (fenced by a recovering "
                            "client)"))
                        return
                    self.metadata, self.metadata_version = current.metadata, current.version
                    continue
                self.metadata, self.metadata_version = versioned.metadata, versioned.version
                self._failed_bookies -= failed
                self.bk.note_failed_bookies(failed)
                replaced = {new for old, new in zip(ensemble, new_ensemble, strict=True) if old != new}
                log.info("ledger %d: ensemble change at entry %d: %s -> %s", self.ledger_id, new_first,
                         ",".join(ensemble), ",".join(new_ensemble))
                for pending in list(self._pending):
                    if pending.bookies is None:
                        continue                    # queued during the change; sent below
                    gone = [b for b in pending.acked if b not in new_ensemble]
                    for bookie in gone:
                        pending.acked.discard(bookie)
                    if len(pending.acked) < self._ack_quorum:
                        pending.done = False
                    self._send(pending, only=replaced)
        except BKError as exc:
            log.error("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
            self._fail_handle(exc)
        except Exception as exc:                    # a bug must not leave adds hanging forever
            log.exception("ledger %d: ensemble change crashed", self.ledger_id)
            self._fail_handle(BKError(f"ledger {self.ledger_id}: ensemble change failed: {exc!r}"))
        finally:
            self._changing_ensemble = False
        if self._error is None:
            for pending in list(self._pending):
                if pending.bookies is None:
                    self._send(pending)
            self._drain()

    # --- LAC, force, close --------------------------------------------------------------------------
    def _write_explicit_lac(self) -> None:
        lac = self.last_add_confirmed
        if lac <= self._explicit_lac_written or self._error is not None:
            return
        self._explicit_lac_written = lac
        buffer = self.digest.encode_lac(lac)
        for bookie in self.metadata.last_ensemble[1]:
            d = self.bookie_client.write_lac(bookie, self.ledger_id, self.digest.master_key, lac, buffer,
                                             scope_id=self.scope_id)
            d.addErrback(lambda f, b=bookie: log.info("ledger %d: explicit LAC %d to %s failed: %s",
                                                      self.ledger_id, lac, b, f.value))

    def _stop_explicit_lac(self) -> None:
        if self._explicit_lac_loop is not None and self._explicit_lac_loop.running:
            self._explicit_lac_loop.stop()

    def _wait_drained(self) -> defer.Deferred:
        if not self._pending or self._error is not None:
            return defer.succeed(None)
        waiter = defer.Deferred()
        self._drained_waiters.append(waiter)
        return waiter

    async def _force(self) -> int:
        target = self.last_add_pushed
        await self._wait_drained()
        if self._error is not None:
            raise self._error
        await defer.gatherResults(
            [self.bookie_client.force_ledger(b, self.ledger_id, scope_id=self.scope_id)
             for b in self.metadata.last_ensemble[1]], consumeErrors=True).addErrback(lambda f: f.value.subFailure)
        return target

    def force(self) -> defer.Deferred:
        """Wait for every add pushed so far, then make the bookies of the ensemble sync the ledger's
        journal (FORCE_LEDGER); fires with the last entry id covered."""
        return defer.ensureDeferred(self._force())

    async def _close(self) -> None:
        if self._closed:
            return
        self._closing = True
        await self._wait_drained()
        self._stop_explicit_lac()
        if self._error is not None:
            self._closed = True
            return
        while True:
            md = self.metadata.closed(self.last_add_confirmed, self.confirmed_length)
            try:
                versioned = await self.bk.driver.write_ledger_metadata(self.ledger, md, self.metadata_version)
            except BKMetadataVersionException:
                current = await self.bk.driver.read_ledger_metadata(self.ledger)
                cur = current.metadata
                if cur.is_closed and cur.last_entry_id == self.last_add_confirmed:
                    versioned = current
                elif cur.state == self._expected_state:
                    self.metadata, self.metadata_version = current.metadata, current.version
                    continue
                else:
                    self._closed = True
                    raise BKLedgerFencedException(
                        f"ledger {self.ledger_id} could not be closed at entry {self.last_add_confirmed}: it is "
                        f"{cur.state.name} (last entry {cur.last_entry_id}) after recovery by another client") \
                        from None
            break
        self.metadata, self.metadata_version = versioned.metadata, versioned.version
        self.length = self.confirmed_length
        self._closed = True
        log.info("ledger %d closed at entry %d (%d bytes)", self.ledger_id, self.last_add_confirmed, self.length)

    def close(self) -> defer.Deferred:
        """Wait for pending adds, then CAS the metadata to CLOSED (lastEntryId = LAC, length)."""
        return defer.ensureDeferred(self._close())


class WriteHandleAdv(WriteHandle):
    """create_ledger_adv: the caller chooses entry ids (unique, any order); LAC still advances only
    through a gap-free prefix and acknowledgements are delivered in entry order."""

    def add_entry(self, entry_id: int, data) -> defer.Deferred:  # type: ignore[override]
        refused = self._refuse()
        if refused is not None:
            return defer.fail(refused)
        if not isinstance(entry_id, int) or entry_id < 0:
            return defer.fail(BKIncorrectParameterException(f"ledger {self.ledger_id}: bad entry id {entry_id!r}"))
        if entry_id <= self.last_add_confirmed or any(p.entry_id == entry_id for p in self._pending):
            return defer.fail(BKDuplicateEntryIdException(
                f"ledger {self.ledger_id}: entry {entry_id} was already added"))
        self.last_add_pushed = max(self.last_add_pushed, entry_id)
        return self._push(entry_id, data)

    append = add_entry

    def _enqueue(self, pending: _PendingAdd) -> None:
        queue = self._pending
        index = len(queue)
        while index > 0 and queue[index - 1].entry_id > pending.entry_id:
            index -= 1
        queue.insert(index, pending)

