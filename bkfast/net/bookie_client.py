"""Per-bookie client channels: the ledger client's only way to talk to bookies (bkfast's or Java's).

Owns: `BookieClient`, which turns add / read / long-poll read / LAC / force-ledger / bookie-info calls into
v2 binary or v3 protobuf frames (spec bookkeeper-formats.md §1, §2; scope-ids.md "Wire") and sends them on
lazily made connections, `numChannelsPerBookie` per (bookie, protocol), chosen by ledger id. A failed
connection is replaced by a new one on the next request. Framing, response matching and timeouts live in
`bookie_channel`.

Protocol choice: `protocol=None` means v2 unless `useV2WireProtocol` is explicitly false (bkfast's default).
What v2 cannot carry always goes over v3: scope != 0, DEFERRED_SYNC adds, long polls, READ_LAC, WRITE_LAC,
FORCE_LEDGER, GET_BOOKIE_INFO. Those go on a v3 connection of their own, never on a v2 one (a bookie
connection that fell back to v2 would misdecode them; Java's client has that bug, we do not copy it).

Every method returns a Deferred fired in the reactor thread; failures are the BK* exceptions of
`bkfast.errors` and name the bookie, ledger and entry. All methods must be called in the reactor thread.

Must never: import the bookie (client code knows bookies through the wire only), block the reactor, or
send a scope != 0 request over v2.
"""

from __future__ import annotations

import logging
import math
import struct
import time
from collections.abc import Callable

from twisted.internet import defer

from bkfast._clientpath import AckPort, ReadPort
from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    encode_add_request_for_entry,
    encode_read_request,
)
from bkfast.conf import ClientConfiguration
from bkfast.errors import (
    BKBookieHandleNotAvailableException,
    BKClientClosedException,
    BKError,
    BKIncorrectParameterException,
    BKUnauthorizedAccessException,
)
from bkfast.ids import DEFERRED_SYNC, scope_field, split_bookie_id
from bkfast.net.bookie_channel import (
    CLOSED,
    K_ADD,
    K_FORCE,
    K_INFO,
    K_LONG_POLL,
    K_READ,
    K_READ_LAC,
    K_WRITE_LAC,
    BookieChannel,
    LongPollResult,
    PendingRequest,
    ReadLacResult,
)
from bkfast.proto import BookkeeperProtocol_pb2 as pb

log = logging.getLogger(__name__)

__all__ = ["BookieClient", "LongPollResult", "ReadLacResult", "PendingRequest"]

HIGH_PRIORITY = 100          # BKPacketHeader.priority Java sets for FLAG_HIGH_PRIORITY requests
TOTAL_DISK_CAPACITY = 0x01
FREE_DISK_SPACE = 0x02
_INF = math.inf
_monotonic = time.monotonic
_len = struct.Struct(">I").pack


def _unsent(err: Exception, what: str) -> defer.Deferred:
    """A request that failed before it was sent: its own BKError, or a bad argument (the protobuf or
    frame encoder refused it) as BKIncorrectParameterException naming `what`."""
    if isinstance(err, BKError):
        return defer.fail(err)
    return defer.fail(BKIncorrectParameterException(f"bad {what}: {err}"))


def _frame(request) -> bytes:
    data = request.SerializeToString()
    return _len(len(data)) + data


class BookieClient:
    """Connections to bookies and the requests on them (see the module doc)."""

    def __init__(self, reactor, conf: ClientConfiguration | None = None, *,
                 resolve: Callable[[str], tuple[str, int]] | None = None):
        self.reactor = reactor
        self.conf = conf if conf is not None else ClientConfiguration()
        self.resolve = resolve or split_bookie_id
        c = self.conf
        # bkfast's client speaks v2 unless useV2WireProtocol is explicitly false (Java defaults to v3)
        self.default_v3 = c.is_set("useV2WireProtocol") and not c.get("useV2WireProtocol")
        self.add_timeout = float(c.get("addEntryTimeoutSec") or 0)
        self.read_timeout = float(c.get("readEntryTimeoutSec") or 0)
        self.min_timeout = min((t for t in (self.add_timeout, self.read_timeout) if t > 0), default=0.0)
        self.connect_timeout = (c.get("clientConnectTimeoutMillis") or 0) / 1000.0
        self.channels_per_bookie = max(1, int(c.get("numChannelsPerBookie") or 1))
        self.max_frame_size = int(c.get("nettyMaxFrameSizeBytes"))
        # TLS with every bookie when tlsProviderFactoryClass is set (files read once, here; refreshed
        # for new connections after tlsCertFilesRefreshDurationSeconds)
        from bkfast.tls.context import ClientTLS, tls_enabled

        self.tls = ClientTLS(c) if tls_enabled(c) else None
        self.tls_timeout_s = float(c.get("startTLSTimeoutSecs"))
        # bookie id -> numChannelsPerBookie slots (None until used, and again after a failure)
        self._v2_slots: dict[str, list[BookieChannel | None]] = {}
        self._v3_slots: dict[str, list[BookieChannel | None]] = {}
        self.seq = 0
        self.closed = False
        add = pb.Request()
        add.header.version = pb.VERSION_THREE
        add.header.operation = pb.ADD_ENTRY
        self._v3_add = add

    # --- connections ------------------------------------------------------------------------------------
    def _use_v3(self, protocol: str | None) -> bool:
        if protocol is None:
            return self.default_v3
        if protocol == "v3":
            return True
        if protocol == "v2":
            return False
        raise BKIncorrectParameterException(f"protocol must be 'v2', 'v3' or None, got {protocol!r}")

    def _channel(self, bookie_id: str, v3: bool, ledger_id: int) -> BookieChannel:
        slots = (self._v3_slots if v3 else self._v2_slots).get(bookie_id)
        if slots is not None:
            ch = slots[ledger_id % len(slots)]
            if ch is not None and ch.state is not CLOSED:
                return ch
        return self._connect(bookie_id, v3, ledger_id)

    def _connect(self, bookie_id: str, v3: bool, ledger_id: int) -> BookieChannel:
        table = self._v3_slots if v3 else self._v2_slots
        slots = table.get(bookie_id)
        if slots is None:
            slots = table[bookie_id] = [None] * self.channels_per_bookie
        i = ledger_id % len(slots)
        try:
            host, port = self.resolve(bookie_id)
        except Exception as err:
            raise BKBookieHandleNotAvailableException(f"cannot resolve bookie {bookie_id}: {err}") from err
        ch = BookieChannel(self.reactor, bookie_id, v3, self.min_timeout, self.max_frame_size,
                           on_closed=self._channel_closed, tls=self.tls, tls_timeout_s=self.tls_timeout_s)
        ch.slot = (slots, i)
        slots[i] = ch
        ch.connect(host, port, self.connect_timeout)
        return ch

    def _channel_closed(self, ch: BookieChannel) -> None:
        slots, i = ch.slot
        if slots[i] is ch:
            slots[i] = None

    @property
    def channels(self) -> list[BookieChannel]:
        """The live channels (connecting or connected)."""
        return [ch for table in (self._v2_slots, self._v3_slots) for slots in table.values()
                for ch in slots if ch is not None]

    def close_bookie(self, bookie_id: str) -> None:
        """Drop every connection to `bookie_id`; its pending requests fail now."""
        for table in (self._v2_slots, self._v3_slots):
            for ch in table.pop(bookie_id, ()):
                if ch is not None:
                    ch.close(f"connections to bookie {bookie_id} closed by the client")

    def close(self) -> defer.Deferred:
        """Close every connection (pending requests fail); fires once all sockets are gone."""
        self.closed = True
        ds = [ch.close("bookie client closed") for ch in self.channels]
        self._v2_slots.clear()
        self._v3_slots.clear()
        return defer.gatherResults(ds).addCallback(lambda _: None)

    # --- plumbing ---------------------------------------------------------------------------------------
    def _start(self, bookie_id, v3, ledger_id, entry_id, kind, timeout):
        """(channel, request) for a new request, or raises BKError."""
        if self.closed:
            raise BKClientClosedException(
                f"bookie client is closed (bookie {bookie_id}, ledger {ledger_id}, entry {entry_id})")
        ch = self._channel(bookie_id, v3, ledger_id)
        self.seq = seq = self.seq + 1
        now = _monotonic()
        return ch, PendingRequest(kind, ledger_id, entry_id, now,
                                  now + timeout if timeout > 0 else _INF, seq)

    def _v3_request(self, operation: int, seq: int, high_priority: bool = False):
        r = pb.Request()
        h = r.header
        h.version = pb.VERSION_THREE
        h.operation = operation
        h.txnId = seq
        if high_priority:
            h.priority = HIGH_PRIORITY
        return r

    # --- adds and reads ---------------------------------------------------------------------------------
    @property
    def v2_by_default(self) -> bool:
        return not self.default_v3

    def _fast_path_core(self, bookie_id: str, ledger_id: int, v3: bool):
        """The ChannelCore of the connection `ledger_id` uses to `bookie_id`, or None (closed client,
        unresolvable bookie)."""
        if self.closed:
            return None
        try:
            return self._channel(bookie_id, v3, ledger_id).core
        except BKError:
            return None

    def tracked_channel(self, bookie_id: str, ledger_id: int, tracker, position: int, v3: bool = False):
        """The ledger client's fast path of adds: the connection's ChannelCore for `ledger_id` on
        `bookie_id` (v2, or v3 with `v3`), with an AckPort registered so that its ADD answers for the
        ledger go straight to `tracker` (bkfast._clientpath.AddTracker) as ensemble position `position`.
        None when the general path is needed: a closed client, a bookie that cannot be resolved, or
        another tracker already writing that ledger over this connection."""
        core = self._fast_path_core(bookie_id, ledger_id, v3)
        if core is None:
            return None
        port = core.ports.get(ledger_id)
        if port is None:
            core.ports[ledger_id] = AckPort(tracker, position)
        elif port.tracker is not tracker:
            return None
        else:
            port.position = position
        return core

    def read_channel(self, bookie_id: str, ledger_id: int, batch, v3: bool = False):
        """The fast path of plain reads (no fence, normal priority): the v2 connection's ChannelCore for
        `ledger_id` on `bookie_id`, with a ReadPort registered so that READ answers for the ledger that
        `batch` (bkfast._clientpath.ReadBatchCore) is waiting for go straight to it. None when the general
        path is needed (a closed client, an unresolvable bookie). With `v3`, the bookie's v3 connection
        (the batch then sends v3 READ_ENTRY requests)."""
        core = self._fast_path_core(bookie_id, ledger_id, v3)
        if core is None:
            return None
        ports = core.read_ports.get(ledger_id)
        if ports is None:
            core.read_ports[ledger_id] = [ReadPort(batch, bookie_id)]
        elif not any(p.batch is batch for p in ports):
            ports.append(ReadPort(batch, bookie_id))
        return core

    def add_entry(self, bookie_id: str, ledger_id: int, entry_id: int, entry: bytes, master_key: bytes, *,
                  recovery: bool = False, high_priority: bool = False, deferred_sync: bool = False,
                  scope_id: int = 0, protocol: str | None = None) -> defer.Deferred:
        """Store `entry` (already packaged, spec §3; its ids must be `ledger_id`, `entry_id`). Fires None."""
        try:
            v3 = True if scope_id or deferred_sync else self._use_v3(protocol)
            if not v3:
                flags = FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY if recovery else (
                    FLAG_HIGH_PRIORITY if high_priority else 0)
                frame = encode_add_request_for_entry(master_key, entry, flags)
                ch, req = self._start(bookie_id, False, ledger_id, entry_id, K_ADD, self.add_timeout)
                ch.send_v2(frame, req)
                return req
            ch, req = self._start(bookie_id, True, ledger_id, entry_id, K_ADD, self.add_timeout)
            r = self._v3_add
            h = r.header
            h.txnId = req.seq
            if recovery or high_priority:
                h.priority = HIGH_PRIORITY
            else:
                h.ClearField("priority")
            a = r.addRequest
            a.ledgerId = ledger_id
            a.entryId = entry_id
            a.masterKey = master_key
            a.body = entry if type(entry) is bytes else bytes(entry)
            if recovery:
                a.flag = pb.AddRequest.RECOVERY_ADD
            else:
                a.ClearField("flag")
            if deferred_sync:
                a.writeFlags = DEFERRED_SYNC
            else:
                a.ClearField("writeFlags")
            if scope_id:
                a.ledgerScopeId = scope_field(scope_id)
            else:
                a.ClearField("ledgerScopeId")
            ch.send_v3(_frame(r), req)
            return req
        except (BKError, ValueError, TypeError) as err:
            return _unsent(err, f"add of ledger {ledger_id} entry {entry_id} for bookie {bookie_id}")

    def read_entry(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False,
                   master_key: bytes | None = None, high_priority: bool = False, scope_id: int = 0,
                   protocol: str | None = None) -> defer.Deferred:
        """The stored entry (header + digest + payload; entry -1 = the last one). `fence` fences first."""
        try:
            v3 = True if scope_id else self._use_v3(protocol)
            if not v3:
                flags = (FLAG_DO_FENCING if fence else 0) | (FLAG_HIGH_PRIORITY if high_priority else 0)
                if fence and master_key is None:
                    # A v2 fencing READ without its key cannot even be framed (the bookie would drop the
                    # connection); the bookie's answer to a key-less fence is EUA, so give that here.
                    raise BKUnauthorizedAccessException(
                        f"fencing read of ledger {ledger_id} entry {entry_id} on bookie {bookie_id} has no "
                        f"master key (v2 cannot send it)")
                frame = encode_read_request(ledger_id, entry_id, flags, master_key if fence else None)
                ch, req = self._start(bookie_id, False, ledger_id, entry_id, K_READ, self.read_timeout)
                ch.send_v2(frame, req)
                return req
            ch, req = self._start(bookie_id, True, ledger_id, entry_id, K_READ, self.read_timeout)
            r = self._v3_request(pb.READ_ENTRY, req.seq, high_priority)
            rr = r.readRequest
            rr.ledgerId = ledger_id
            rr.entryId = entry_id
            if fence:
                rr.flag = pb.ReadRequest.FENCE_LEDGER
                if master_key is not None:
                    rr.masterKey = master_key
            if scope_id:
                rr.ledgerScopeId = scope_field(scope_id)
            ch.send_v3(_frame(r), req)
            return req
        except (BKError, ValueError, TypeError) as err:
            return _unsent(err, f"read of ledger {ledger_id} entry {entry_id} for bookie {bookie_id}")

    def read_entry_long_poll(self, bookie_id: str, ledger_id: int, entry_id: int, previous_lac: int,
                             timeout_ms: int, *, piggyback_entry: bool = True,
                             scope_id: int = 0) -> defer.Deferred:
        """v3 long poll: waits up to `timeout_ms` for the bookie's LAC to pass `previous_lac`.

        Fires LongPollResult(entry, lac): with ENTRY_PIGGYBACK (ask for entry -1) the entry after
        `previous_lac` when there is one; `lac` is the bookie's maxLAC. A poll that ends without a newer
        entry fires LongPollResult(None, maxLAC) (the bookie's ENOENTRY with maxLAC).
        """
        return self._v3_call(bookie_id, ledger_id, entry_id, K_LONG_POLL, pb.READ_ENTRY,
                             timeout_ms / 1000.0 + self.read_timeout if self.read_timeout > 0 else 0, scope_id,
                             (previous_lac, timeout_ms, piggyback_entry))

    # --- LAC, force, bookie info (v3 only) ---------------------------------------------------------------
    def read_lac(self, bookie_id: str, ledger_id: int, *, scope_id: int = 0) -> defer.Deferred:
        """Fires ReadLacResult(explicit LAC buffer or None, last stored entry or None)."""
        return self._v3_call(bookie_id, ledger_id, -1, K_READ_LAC, pb.READ_LAC, self.read_timeout, scope_id)

    def write_lac(self, bookie_id: str, ledger_id: int, master_key: bytes, lac: int, lac_buffer: bytes, *,
                  scope_id: int = 0) -> defer.Deferred:
        """Store the explicit LAC buffer (spec §3.5) on the bookie. Fires None."""
        return self._v3_call(bookie_id, ledger_id, lac, K_WRITE_LAC, pb.WRITE_LAC, self.add_timeout, scope_id,
                             (master_key, lac, lac_buffer))

    def force_ledger(self, bookie_id: str, ledger_id: int, *, scope_id: int = 0) -> defer.Deferred:
        """Make the ledger's acknowledged (DEFERRED_SYNC) entries durable. Fires None."""
        return self._v3_call(bookie_id, ledger_id, -1, K_FORCE, pb.FORCE_LEDGER, self.add_timeout, scope_id)

    def get_bookie_info(self, bookie_id: str) -> defer.Deferred:
        """Fires (free disk bytes, total disk bytes)."""
        return self._v3_call(bookie_id, 0, -1, K_INFO, pb.GET_BOOKIE_INFO, self.read_timeout, 0)

    def _v3_call(self, bookie_id, ledger_id, entry_id, kind, operation, timeout, scope_id, args=()):
        try:
            scope = scope_field(scope_id) if scope_id else 0
            ch, req = self._start(bookie_id, True, ledger_id, entry_id, kind, timeout)
            r = self._v3_request(operation, req.seq)
            if kind == K_LONG_POLL:
                previous_lac, timeout_ms, piggyback = args
                sub = r.readRequest
                sub.entryId = entry_id
                sub.previousLAC = previous_lac
                sub.timeOut = timeout_ms
                if piggyback:
                    sub.flag = pb.ReadRequest.ENTRY_PIGGYBACK
            elif kind == K_READ_LAC:
                sub = r.readLacRequest
            elif kind == K_WRITE_LAC:
                master_key, lac, lac_buffer = args
                sub = r.writeLacRequest
                sub.lac = lac
                sub.masterKey = master_key
                sub.body = lac_buffer if type(lac_buffer) is bytes else bytes(lac_buffer)
            elif kind == K_FORCE:
                sub = r.forceLedgerRequest
            else:   # K_INFO
                r.getBookieInfoRequest.requested = TOTAL_DISK_CAPACITY | FREE_DISK_SPACE
                sub = None
            if sub is not None:
                sub.ledgerId = ledger_id
                if scope:
                    sub.ledgerScopeId = scope
            ch.send_v3(_frame(r), req)
            return req
        except (BKError, ValueError, TypeError) as err:
            return _unsent(err, f"request for ledger {ledger_id} to bookie {bookie_id}")
