"""WriteHandle: appends to a ledger (Java's LedgerHandle write path).

An add is encoded once (header with the piggybacked LAC, digest, payload) and sent to the bookies of
its write set (round robin over the ensemble); it completes when AQ distinct bookies of that write set
acknowledged it, and completions are delivered strictly in entry order. When a bookie fails (error or
timeout), it is replaced: a new segment starting at LAC + 1 is CAS-written into the metadata and the
pending adds are re-sent to the replacement; while that runs, acknowledgements are held back so the
segment boundary stays fixed. A bookie that failed an add is not chosen as a replacement again until
an add completes, so a refusal that follows the entry rather than the bookie ends in
BKNotEnoughBookiesException after at most one change per bookie, not in an endless loop of ensemble
changes; and an entry too long for a bookie's frame is refused before it is sent (`entry_size.py`).
Fencing (a recovering reader) ends the writer: every pending and later add fails with
BKLedgerFencedException. The same machinery re-adds entries during recovery (`recovery=True`:
recovery-add flag, high priority, metadata expected IN_RECOVERY).
"""

from __future__ import annotations

import logging
import time

from twisted.internet import defer, task

from bkfast._clientpath import AddTracker, PendingAdd
from bkfast._stats import now_ns
from bkfast.attributes import forwarded
from bkfast.codec import encode_add_request_for_entry
from bkfast.errors import (
    BKDuplicateEntryIdException,
    BKError,
    BKIncorrectParameterException,
    BKLedgerClosedException,
    BKLedgerFencedException,
    BKMetadataVersionException,
    BKNotEnoughBookiesException,
    BKTimeoutException,
    BKUnauthorizedAccessException,
    error_for_v2_rc,
)
from bkfast.ids import DEFERRED_SYNC, scope_field
from bkfast.meta.ledger_metadata import LedgerState
from bkfast.proto import BookkeeperProtocol_pb2 as pb

from .entry_size import max_entry_size, too_large
from .handle import LedgerHandle
from .stats import timed
from .throttle import AddThrottle, WaitingAdd

__all__ = ["WriteHandle", "WriteHandleAdv"]

log = logging.getLogger(__name__)

_ENDS_WRITER = (BKLedgerFencedException, BKUnauthorizedAccessException)
ALL_POSITIONS = (1 << 64) - 1
_V3_ADD_ONLY = pb.Request()        # only its addRequest is ever set (see _make_v3_add)


def _replacements(bk, md, ensemble, failed, scope_id, excluded):
    """New members for the `failed` bookies of `ensemble`, chosen by the client's placement policy
    (`bk.placement`: the write quorums keep their racks/zones/regions), never one of `excluded`: preferably
    not ones that failed lately either, but, as Java's BookieWatcher does with quarantined bookies, those too
    rather than none at all."""
    w, a = md.write_quorum_size, md.ack_quorum_size
    try:
        return bk.placement.replace_bookies(bk.writable_bookies, ensemble, w, a, failed, scope_id,
                                            excluded | bk.recently_failed)
    except BKNotEnoughBookiesException:
        return bk.placement.replace_bookies(bk.writable_bookies, ensemble, w, a, failed, scope_id, excluded)


class WriteHandle(LedgerHandle):
    """A ledger opened for appending (created by this client, or being recovered).

    The pending adds, their acknowledgements and in-order completion live in an AddTracker
    (bkfast._clientpath, Cython); this class keeps the control logic: errors, ensemble changes, close.
    """

    _sorted_entry_ids = False

    def __init__(self, bk, ledger, versioned, password: bytes, recovery: bool = False, deferred_sync: bool = False):
        # (set before the base's __init__, which calls _start_at, where the add tracker is built from them)
        self._recovery = recovery
        self.deferred_sync = deferred_sync          # WriteFlag.DEFERRED_SYNC: acks before journal sync (v3)
        super().__init__(bk, ledger, versioned, password)
        self._expected_state = LedgerState.IN_RECOVERY if recovery else LedgerState.OPEN
        client = self.bookie_client
        self._set_fault_domains(self.metadata.last_ensemble[1])
        self._max_entry = max_entry_size(client.max_frame_size)
        throttle = self.settings.throttle
        self._throttle = AddThrottle(throttle, self.reactor, self._send_waiting) \
            if throttle > 0 and not recovery else None
        self._changing_ensemble = False
        self._failed_bookies: set[str] = set()
        # Bookies that failed an add since the LAC was `_stuck_lac`. A refusal that follows the entry
        # rather than the bookie (a frame the bookies' nettyMaxFrameSizeBytes rejects, say) fails on
        # every replacement: never handing the entry back to a bookie that already failed it bounds
        # the ensemble changes (and ledger metadata writes) by the number of bookies.
        self._stuck_lac = -2
        self._failed_while_stuck: set[str] = set()
        self._error: BaseException | None = None
        self._closing = False
        self._closed = False
        self._drained_waiters: list[defer.Deferred] = []
        self._explicit_lac_written = -1
        self._explicit_lac_loop: task.LoopingCall | None = None
        interval_s = self.settings.explicit_lac_interval_s
        if interval_s is not None and not recovery:
            self._explicit_lac_loop = task.LoopingCall(self._write_explicit_lac)
            self._explicit_lac_loop.clock = self.reactor
            self._explicit_lac_loop.start(interval_s, now=False)
        # Timeouts of tracked adds (the general path's requests time out in their channels): a sweeper
        # that runs while adds are pending, so an idle or forgotten handle schedules nothing.
        self._timeout_loop: task.LoopingCall | None = None
        self._timeout_interval = min(1.0, max(0.05, client.add_timeout / 10.0))
        if self._core.fast and client.add_timeout > 0:
            self._timeout_loop = task.LoopingCall(self._sweep_timeouts)
            self._timeout_loop.clock = self.reactor

    def _start_at(self, lac: int, length: int) -> None:
        """The ledger's position when opened becomes the add tracker's. Adds go through tracked channels
        (v2, or v3 when the ledger needs it: scope ids, DEFERRED_SYNC, or a v3 client), except recovery
        adds (a recovering client may share a connection with the ledger's own writer), which take the
        general path."""
        md, client = self.metadata, self.bookie_client
        self.length = length
        self._v3 = bool(self.scope_id or self.deferred_sync or not client.v2_by_default)
        self._core = AddTracker(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, lac, length,
                                not self._recovery, self._sorted_entry_ids, client.add_timeout,
                                self._resolve_position, self._slow_send,
                                self._make_v3_add if self._v3 else self._make_frame,
                                self._position_failed, self._drained, self._v3, self.ledger_id)
        self.last_add_pushed = lac

    def _set_fault_domains(self, ensemble) -> None:
        """enforceMinNumFaultDomainsForWrite: the tracker completes an add only once its acknowledgements
        come from enough racks/zones of the placement policy (Java's areAckedBookiesAdheringToPlacementPolicy)."""
        rule = self.bk.placement.fault_domains(tuple(ensemble), self.metadata.write_quorum_size)
        self._core.domains, self._core.min_domains = (rule[0], rule[1]) if rule else (None, 0)

    # LAC and confirmed length live in the tracker
    last_add_confirmed = forwarded("_core.lac", writable=True)
    confirmed_length = forwarded("_core.confirmed_length", writable=True)

    @property
    def is_closed(self) -> bool:
        return self._closed or self.metadata.is_closed

    @property
    def pending_adds(self) -> int:
        """Adds not completed yet (sent, or waiting for a `throttle` permit)."""
        return len(self._core.pending) + (len(self._throttle) if self._throttle is not None else 0)

    # --- adds ---------------------------------------------------------------------------------------
    def _refuse(self, data) -> BaseException | None:
        if self._error is not None:
            return self._error
        if self._closing or self._closed:
            return BKLedgerClosedException(f"ledger {self.ledger_id} is closed (or closing) for writing")
        if len(data) > self._max_entry:
            return too_large(f"ledger {self.ledger_id}: entry", len(data), self.bookie_client.max_frame_size)
        return None

    def add_entry(self, data) -> defer.Deferred:
        """Append `data`; fires with its entry id once AQ bookies acknowledged it (in entry order).
        An entry longer than `entry_size.max_entry_size(nettyMaxFrameSizeBytes)` fails at once with
        EntryTooLargeError (no entry id taken, nothing sent, the handle stays writable)."""
        refused = self._refuse(data)
        if refused is not None:
            return defer.fail(refused)
        entry_id = self.last_add_pushed + 1
        self.last_add_pushed = entry_id
        d = self._throttled_push(entry_id, data, None, None)
        assert d is not None, "an add without a callback has a Deferred"
        return d

    append = add_entry

    def async_add_entry(self, data, callback, ctx=None) -> None:
        """Java's asyncAddEntry(data, cb, ctx): append `data` and call callback(error, entry_id, ctx) once
        AQ bookies acknowledged it (error None), in entry order, or with the error (entry_id -1 if the
        add was refused at once). No Deferred is made: the cheapest way to pipeline many adds."""
        refused = self._refuse(data)
        if refused is not None:
            self.reactor.callLater(0, callback, refused, -1, ctx)
            return
        entry_id = self.last_add_pushed + 1
        self.last_add_pushed = entry_id
        self._throttled_push(entry_id, data, callback, ctx)

    def _throttled_push(self, entry_id: int, data, callback, ctx) -> defer.Deferred | None:
        if self._throttle is None:
            return self._push(entry_id, data, callback, ctx)
        d: defer.Deferred[int] | None = defer.Deferred() if callback is None else None
        self._throttle.submit(WaitingAdd(entry_id, data, callback, ctx, d))
        return d

    def _send_waiting(self, add: WaitingAdd) -> None:
        """The throttle gave `add` its permit."""
        self._push(add.entry_id, add.data, add.callback, add.ctx, add.deferred)

    def _push(self, entry_id: int, data, callback=None, ctx=None, d=None) -> defer.Deferred | None:
        self.length += len(data)
        if d is None and callback is None:
            d = defer.Deferred()
        if self._stats.enabled:
            callback, d = self._timed_add(callback, d)
        loop = self._timeout_loop
        if loop is not None and not loop.running and self._error is None:
            loop.start(self._timeout_interval, now=False)
        self._core.push(PendingAdd(entry_id, self.digest.encode(entry_id, self._core.lac, self.length, data),
                                   self.length, d, callback, ctx))
        return d

    def _timed_add(self, callback, d):
        """ADD_ENTRY of one add (a client with stats only): its latency when it completes or fails."""
        stat, start = self._stats.add, now_ns()
        if callback is None:
            return None, self._stats.time("add", d, start)

        def completed(error, entry_id, ctx):
            (stat.ok_since if error is None else stat.fail_since)(start)
            callback(error, entry_id, ctx)

        return completed, d

    def _make_frame(self, pending) -> bytes:
        # (recovery adds, which carry flags, take the general path: see __init__)
        return encode_add_request_for_entry(self.digest.master_key, pending.entry, 0)

    def _make_v3_add(self, pending) -> bytes:
        """The Request's addRequest field, serialized once for the whole write set (each bookie's
        header, with its own txnId, is put in front of it by ChannelCore.write_v3_add)."""
        request = _V3_ADD_ONLY
        add = request.addRequest
        add.ledgerId = self.ledger_id
        add.entryId = pending.entry_id
        add.masterKey = self.digest.master_key
        add.body = pending.entry
        if self.deferred_sync:
            add.writeFlags = DEFERRED_SYNC
        else:
            add.ClearField("writeFlags")
        if self.scope_id:
            add.ledgerScopeId = scope_field(self.scope_id)
        else:
            add.ClearField("ledgerScopeId")
        return request.SerializePartialToString()

    def _resolve_position(self, position: int):
        """The tracked channel of an ensemble position (AddTracker.resolve)."""
        core = self.bookie_client.tracked_channel(self.metadata.last_ensemble[1][position], self.ledger_id,
                                                  self._core, position, self._v3)
        self._core.channels[position] = core
        return core

    def _slow_send(self, pending, position: int) -> None:
        """One add to one bookie on the general path (v3, scoped, recovery; AddTracker.slow_send)."""
        bookie = self.metadata.last_ensemble[1][position]
        d = self.bookie_client.add_entry(bookie, self.ledger_id, pending.entry_id, pending.entry,
                                         self.digest.master_key, recovery=self._recovery,
                                         high_priority=self._recovery, scope_id=self.scope_id,
                                         deferred_sync=self.deferred_sync)
        d.addCallbacks(self._slow_ok, self._slow_failed, (pending.entry_id, position, bookie), None,
                       (pending.entry_id, position, bookie))

    def _slow_ok(self, _result, entry_id: int, position: int, bookie: str) -> None:
        if self._still_at(position, bookie):
            self._core.on_ack(position, entry_id, 0)

    def _slow_failed(self, failure, entry_id: int, position: int, bookie: str) -> None:
        if self._still_at(position, bookie):
            self._core.on_failed(position, entry_id, failure.value)

    def _still_at(self, position: int, bookie: str) -> bool:
        ensemble = self.metadata.last_ensemble[1]
        return position < len(ensemble) and ensemble[position] == bookie

    def _position_failed(self, position: int, entry_id: int, error) -> None:
        """AddTracker.on_error: a bookie of the ensemble answered an add with an error, timed out, or
        lost its connection."""
        bookie = self.metadata.last_ensemble[1][position]
        if isinstance(error, int):
            error = error_for_v2_rc(error, f"add on bookie {bookie}, ledger {self.ledger_id}, entry {entry_id}")
        self._add_error(error, entry_id, bookie)

    def _sweep_timeouts(self) -> None:
        if not self._core.pending:
            assert self._timeout_loop is not None, "_sweep_timeouts runs only from the timeout loop"
            self._timeout_loop.stop()
            return
        for position, entry_id in self._core.expired(time.monotonic()):
            if self._error is not None:
                return
            bookie = self.metadata.last_ensemble[1][position]
            self._add_error(BKTimeoutException(
                f"no response within the timeout: add on bookie {bookie}, ledger {self.ledger_id}, "
                f"entry {entry_id}"), entry_id, bookie)

    def _drained(self) -> None:
        if self._drained_waiters and not (self._throttle is not None and len(self._throttle)):
            waiters, self._drained_waiters = self._drained_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _add_error(self, exc: BaseException, entry_id: int, bookie: str) -> None:
        if self._error is not None:
            return
        if isinstance(exc, BKLedgerFencedException):
            # Another client opened the ledger with recovery: the expected end of this writer, not a fault.
            log.info("ledger %d entry %d: bookie %s says the ledger is fenced (another client recovered it); "
                     "the writer stops", self.ledger_id, entry_id, bookie)
            self._fail_handle(exc)
            return
        if isinstance(exc, _ENDS_WRITER):
            log.warning("ledger %d entry %d: bookie %s refused the add (%s); the writer stops",
                        self.ledger_id, entry_id, bookie, exc)
            self._fail_handle(exc)
            return
        if bookie not in self.metadata.last_ensemble[1]:
            return                                  # already replaced
        log.warning("ledger %d entry %d: write to bookie %s failed (%s); replacing it",
                    self.ledger_id, entry_id, bookie, exc)
        self._failed_bookies.add(bookie)
        if not self._changing_ensemble:
            defer.ensureDeferred(self._change_ensemble())

    def _fail_handle(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._stop_loops()
        self._core.fail_all(self._error)
        if self._throttle is not None:
            for add in self._throttle.drop():
                if add.callback is not None:
                    add.callback(self._error, add.entry_id, add.ctx)
                else:
                    add.deferred.errback(self._error)
        self._drained()

    # --- ensemble change ----------------------------------------------------------------------------
    async def _change_ensemble(self) -> None:
        """Replace the failed bookies of the last ensemble, one metadata CAS at a time, with completions
        held back (the segment boundary stays fixed); then send the adds queued meanwhile."""
        self._changing_ensemble = True
        core = self._core
        core.holding = True
        try:
            while self._failed_bookies and self._error is None:
                if not await self._replace_failed_bookies():
                    break
        except BKError as exc:
            log.error("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
            self._fail_handle(exc)
        except Exception as exc:                    # a bug must not leave adds hanging forever
            log.exception("ledger %d: ensemble change crashed", self.ledger_id)
            self._fail_handle(BKError(f"ledger {self.ledger_id}: ensemble change failed: {exc!r}"))
        finally:
            self._changing_ensemble = False
            core.holding = False
        if self._error is None:
            for pending in list(core.pending):
                if not pending.queued:
                    core.send(pending, ALL_POSITIONS)
            core.drain()

    async def _replace_failed_bookies(self) -> bool:
        """One round: replacements for the failed members of the last ensemble, CAS-written as a new
        segment at LAC + 1. False when there is nothing more to do (none of them is in the ensemble any
        more, or the writer stopped)."""
        md = self.metadata
        ensemble = md.last_ensemble[1]
        failed = self._failed_bookies & set(ensemble)
        self._failed_bookies -= set(self._failed_bookies) - failed
        if not failed:
            return False
        new_first = self._core.lac + 1
        new_ensemble = self._choose_replacements(md, ensemble, failed, new_first)
        if new_ensemble is None:
            return False
        versioned = await self._cas_ensemble(md.with_ensemble(new_first, new_ensemble))
        if versioned is None:                       # a stale version: again with the current metadata
            return self._error is None
        self.metadata, self.metadata_version = versioned.metadata, versioned.version
        self._use_ensemble(ensemble, new_ensemble, new_first, failed)
        return True

    def _choose_replacements(self, md, ensemble, failed: set[str], new_first: int):
        """New members for `failed`, never one that already failed an add since the LAC last moved (see
        `_stuck_lac`); None when there are none left (the writer then stops with
        BKNotEnoughBookiesException)."""
        if new_first - 1 != self._stuck_lac:
            self._stuck_lac = new_first - 1
            self._failed_while_stuck = set()
        excluded = self._failed_while_stuck - failed
        self._failed_while_stuck |= failed
        try:
            return timed(self._stats.replace_bookie, _replacements, self.bk, md, ensemble, failed,
                         self.scope_id, excluded)
        except BKNotEnoughBookiesException as exc:
            if excluded:
                exc = BKNotEnoughBookiesException(
                    f"{exc}; bookies {', '.join(sorted(self._failed_while_stuck))} all failed adds "
                    f"since entry {new_first} was sent, and none is tried twice")
            log.error("ledger %d: cannot replace failed bookies %s: %s", self.ledger_id, sorted(failed), exc)
            self._fail_handle(exc)
            return None

    async def _cas_ensemble(self, new_md):
        """Write `new_md` over the version this handle holds. None when that version was stale: the
        handle then holds the current metadata, or has failed if a recovering client changed its state."""
        try:
            return await self.bk.driver.write_ledger_metadata(self.ledger, new_md, self.metadata_version)
        except BKMetadataVersionException:
            current = await self.bk.driver.read_ledger_metadata(self.ledger)
        if current.metadata.state != self._expected_state:
            log.warning("ledger %d: metadata changed to %s during an ensemble change; the writer stops",
                        self.ledger_id, current.metadata.state.name)
            self._fail_handle(BKLedgerFencedException(
                f"ledger {self.ledger_id} is {current.metadata.state.name} (fenced by a recovering client)"))
            return None
        self.metadata, self.metadata_version = current.metadata, current.version
        return None

    def _use_ensemble(self, ensemble, new_ensemble, new_first: int, failed: set[str]) -> None:
        """The new segment is in the metadata: acks of replaced bookies no longer count, and the adds
        sent to them go to their replacements (adds queued during the change are sent after it)."""
        self._failed_bookies -= failed
        self.bk.note_failed_bookies(failed)
        self._stats.ensemble_changes.inc()
        replaced = 0
        for position, (old, new) in enumerate(zip(ensemble, new_ensemble, strict=True)):
            if old != new:
                replaced |= 1 << position
        log.info("ledger %d: ensemble change at entry %d: %s -> %s", self.ledger_id, new_first,
                 ",".join(ensemble), ",".join(new_ensemble))
        self._set_fault_domains(new_ensemble)
        core = self._core
        core.release_positions(replaced)
        for pending in list(core.pending):
            if pending.queued:
                core.send(pending, replaced)

    # --- LAC, force, close --------------------------------------------------------------------------
    def _write_explicit_lac(self) -> None:
        lac = self.last_add_confirmed
        if lac <= self._explicit_lac_written or self._error is not None:
            return
        self._explicit_lac_written = lac
        buffer = self.digest.encode_lac(lac)
        for bookie in self.metadata.last_ensemble[1]:
            d = self._stats.time("write_lac", self.bookie_client.write_lac(
                bookie, self.ledger_id, self.digest.master_key, lac, buffer, scope_id=self.scope_id))
            d.addErrback(lambda f, b=bookie: log.info("ledger %d: explicit LAC %d to %s failed: %s",
                                                      self.ledger_id, lac, b, f.value))

    def _stop_loops(self) -> None:
        for loop in (self._explicit_lac_loop, self._timeout_loop):
            if loop is not None and loop.running:
                loop.stop()

    def _wait_drained(self) -> defer.Deferred:
        if not self.pending_adds or self._error is not None:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
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
        return self._stats.time("force", defer.ensureDeferred(self._force()))

    async def _close(self) -> None:
        if self._closed:
            return
        self._closing = True
        await self._wait_drained()
        self._stop_loops()
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

    _sorted_entry_ids = True

    def _refuse_entry(self, entry_id, data) -> BaseException | None:
        refused = self._refuse(data)
        if refused is not None:
            return refused
        if not isinstance(entry_id, int) or entry_id < 0:
            return BKIncorrectParameterException(f"ledger {self.ledger_id}: bad entry id {entry_id!r}")
        if entry_id <= self.last_add_confirmed or entry_id in self._core.by_entry or (
                self._throttle is not None and entry_id in self._throttle):
            return BKDuplicateEntryIdException(f"ledger {self.ledger_id}: entry {entry_id} was already added")
        return None

    def add_entry(self, entry_id: int, data) -> defer.Deferred:  # type: ignore[override]
        refused = self._refuse_entry(entry_id, data)
        if refused is not None:
            return defer.fail(refused)
        self.last_add_pushed = max(self.last_add_pushed, entry_id)
        d = self._throttled_push(entry_id, data, None, None)
        assert d is not None, "an add without a callback has a Deferred"
        return d

    append = add_entry  # type: ignore[assignment]  # as add_entry: the caller gives the entry id

    def async_add_entry(self, entry_id: int, data, callback, ctx=None) -> None:  # type: ignore[override]
        """Java's LedgerHandleAdv.asyncAddEntry(entryId, data, cb, ctx): callback(error, entry_id, ctx)."""
        refused = self._refuse_entry(entry_id, data)
        if refused is not None:
            self.reactor.callLater(0, callback, refused, -1, ctx)
            return
        self.last_add_pushed = max(self.last_add_pushed, entry_id)
        self._throttled_push(entry_id, data, callback, ctx)
