# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The ledger client's v2 add path, in Cython: quorum tracking of pending adds and response dispatch.

Owns three objects the Python layers wire together:
- `ChannelCore`, one per v2 `BookieChannel`: its output buffer (frames queued, written once per reactor
  turn) and the dispatch of response frames. An ADD response for a ledger that registered an `AckPort`
  on the channel goes straight to that port, with no per-request object; every other frame goes to the
  channel's Python handler.
- `AckPort`: "ledger L on this channel is position P of AddTracker T's ensemble".
- `AddTracker`, one per writable ledger handle: the pending adds in entry order (`PendingAdd`, with
  bitmasks of the ensemble positions each was sent to and acknowledged by), the ack quorum, the LAC, and
  in-order completion (`drain`). The handle keeps the control logic (ensemble change, errors, close) in
  Python and calls in here.

Must never: complete an add before AQ distinct positions of its write set acknowledged it, complete adds
out of entry order, or count an answer from a bookie that no longer holds the position it answered for.
"""

from libc.string cimport memcpy
from libc.stdint cimport int32_t, int64_t, uint64_t, uint32_t, uint8_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

import logging
import time

log = logging.getLogger("bkfast.client.write_handle")
_monotonic = time.monotonic

DEF V2_ADD = 1
DEF V2_READ = 2
DEF V3_READ_ENTRY = 1
DEF V3_EBADREQ = 404
DEF V3_ADD_ENTRY = 2
DEF V3_FIRST_TRACKED_TXN = 1 << 62     # the client's own request numbers never get here
DEF RESPONSE_HEADER = 24


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int64_t _i64(const uint8_t *p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | <uint64_t>_u32(p + 4))


cdef inline int _popcount(uint64_t v) noexcept nogil:
    cdef int n = 0
    while v:
        v &= v - 1
        n += 1
    return n


cdef inline int _varint(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out) noexcept nogil:
    """Protobuf base-128 varint at p[pos]; -1 if truncated or longer than 10 bytes."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while pos[0] < n and shift < 70:
        b = p[pos[0]]
        pos[0] += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = v
            return 0
        shift += 7
    return -1


cdef inline int _skip_field(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, int wire_type) noexcept nogil:
    cdef uint64_t length
    if wire_type == 0:
        return _varint(p, n, pos, &length)
    if wire_type == 1:
        pos[0] += 8
    elif wire_type == 5:
        pos[0] += 4
    elif wire_type == 2:
        if _varint(p, n, pos, &length) < 0 or length > <uint64_t>(n - pos[0]):
            return -1
        pos[0] += <Py_ssize_t>length
    else:
        return -1
    return 0 if pos[0] <= n else -1


cdef int _v3_answer(const uint8_t *p, Py_ssize_t n, uint64_t *txn, int *operation, int *status,
                    Py_ssize_t *body_at, Py_ssize_t *body_len) noexcept nogil:
    """Reads a v3 Response far enough to match an ADD_ENTRY or READ_ENTRY answer: header.txnId and
    operation, the inner response's status (else the top-level one) and a read's body (offset and
    length; -1 when absent). 0 on success, -1 if it is not a well-formed Response (the caller's
    protobuf parser then decides)."""
    cdef Py_ssize_t pos = 0, end
    cdef uint64_t key, value, length
    cdef int field, wire, top_status = -1, inner_status = -1
    cdef bint have_txn = False
    operation[0] = -1
    body_at[0] = -1
    body_len[0] = 0
    while pos < n:
        if _varint(p, n, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if (field == 1 or field == 100 or field == 101) and wire == 2:
            if _varint(p, n, &pos, &length) < 0 or length > <uint64_t>(n - pos):
                return -1
            end = pos + <Py_ssize_t>length
            while pos < end:
                if _varint(p, end, &pos, &key) < 0:
                    return -1
                if (key & 7) == 0:
                    if _varint(p, end, &pos, &value) < 0:
                        return -1
                    if field == 1 and (key >> 3) == 2:
                        operation[0] = <int>value
                    elif field == 1 and (key >> 3) == 3:
                        txn[0] = value
                        have_txn = True
                    elif field != 1 and (key >> 3) == 1:
                        inner_status = <int>value
                elif field == 100 and key == ((4 << 3) | 2):
                    if _varint(p, end, &pos, &length) < 0 or length > <uint64_t>(end - pos):
                        return -1
                    body_at[0] = pos
                    body_len[0] = <Py_ssize_t>length
                    pos += <Py_ssize_t>length
                elif _skip_field(p, end, &pos, <int>(key & 7)) < 0:
                    return -1
            pos = end
        elif field == 2 and wire == 0:
            if _varint(p, n, &pos, &value) < 0:
                return -1
            top_status = <int>value
        elif _skip_field(p, n, &pos, wire) < 0:
            return -1
    if not have_txn or operation[0] < 0 or top_status < 0:
        return -1
    status[0] = inner_status if inner_status >= 0 else top_status
    return 0


cdef inline Py_ssize_t _put_varint(uint8_t *p, uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        p[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    p[n] = <uint8_t>v
    return n + 1


cdef Py_ssize_t _v3_header(uint8_t *p, int operation, uint64_t txn) noexcept nogil:
    """Request.header (field 1) with version 3, `operation` and `txn`; returns its size."""
    cdef Py_ssize_t h = 2
    p[0] = 0x0A
    p[2] = 0x08; p[3] = 3
    p[4] = 0x10; p[5] = <uint8_t>operation
    p[6] = 0x18
    h = 7 + _put_varint(p + 7, txn)
    p[1] = <uint8_t>(h - 2)
    return h


cdef inline void _put_u32be(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24); p[1] = <uint8_t>(v >> 16); p[2] = <uint8_t>(v >> 8); p[3] = <uint8_t>v


cdef class ChannelCore:
    """Output buffer and v2 response dispatch of one connection (see the module doc)."""

    cdef public list out
    cdef public Py_ssize_t out_bytes
    cdef public Py_ssize_t flush_bytes
    cdef public bint connected
    cdef public bint closed
    cdef public bint flush_scheduled
    cdef public Py_ssize_t inflight       # tracked adds sent and not answered
    cdef public dict ports                # ledger id -> AckPort
    cdef public dict read_ports           # ledger id -> [ReadPort] (reads in flight of that ledger)
    cdef public dict v3_adds              # v3: txnId -> (AckPort, entry id) of tracked adds
    cdef public dict v3_reads             # v3: txnId -> (ReadPort, entry id) of batch reads
    cdef public uint64_t next_txn
    cdef public object v3_error           # status -> the exception a v3 error status stands for
    cdef public object schedule_flush     # called once per reactor turn with output waiting
    cdef public object flush_now          # called when the buffer passes flush_bytes
    cdef public object slow_frame         # the channel's Python handler for every other frame

    def __init__(self, schedule_flush, flush_now, slow_frame, Py_ssize_t flush_bytes, v3_error=None):
        self.v3_adds = {}
        self.v3_reads = {}
        self.next_txn = V3_FIRST_TRACKED_TXN
        self.v3_error = v3_error
        self.out = []
        self.out_bytes = 0
        self.flush_bytes = flush_bytes
        self.connected = False
        self.closed = False
        self.flush_scheduled = False
        self.inflight = 0
        self.ports = {}
        self.read_ports = {}
        self.schedule_flush = schedule_flush
        self.flush_now = flush_now
        self.slow_frame = slow_frame

    cpdef write(self, bytes frame):
        self.out.append(frame)
        self.out_bytes += PyBytes_GET_SIZE(frame)
        if not self.connected:
            return
        if self.out_bytes >= self.flush_bytes:
            self.flush_now()
        elif not self.flush_scheduled:
            self.flush_scheduled = True
            self.schedule_flush()

    cpdef write_v3_add(self, AckPort port, int64_t entry_id, bytes add_field):
        """A v3 ADD_ENTRY request: a fresh txnId in a hand-built header, then `add_field` (the Request's
        serialized addRequest field, shared by every bookie of the write set; not copied here)."""
        cdef uint8_t prefix[32]
        cdef uint64_t txn = self.next_txn
        self.next_txn += 1
        self.v3_adds[txn] = (port, entry_id)
        cdef Py_ssize_t h = 4 + _v3_header(prefix + 4, V3_ADD_ENTRY, txn)
        _put_u32be(prefix, <uint32_t>(h - 4 + PyBytes_GET_SIZE(add_field)))
        self.out.append(PyBytes_FromStringAndSize(<char *>prefix, h))
        self.out_bytes += h
        self.write(add_field)

    cpdef write_v3_read(self, ReadPort port, int64_t ledger_id, int64_t entry_id, int64_t scope_field):
        """A plain v3 READ_ENTRY request (no fence, no long poll), built by hand."""
        cdef uint8_t frame[80]
        cdef uint8_t inner[40]
        cdef Py_ssize_t n, h
        cdef uint64_t txn = self.next_txn
        self.next_txn += 1
        self.v3_reads[txn] = (port, entry_id)
        inner[0] = 0x08
        n = 1 + _put_varint(inner + 1, <uint64_t>ledger_id)
        inner[n] = 0x10
        n += 1 + _put_varint(inner + n + 1, <uint64_t>entry_id)
        if scope_field != 0:
            inner[n] = 0xC0; inner[n + 1] = 0x3E          # field 1000, varint
            n += 2 + _put_varint(inner + n + 2, <uint64_t>scope_field)
        h = 4 + _v3_header(frame + 4, V3_READ_ENTRY, txn)
        frame[h] = 0xA2; frame[h + 1] = 0x06               # Request.readRequest (field 100), length-delimited
        h += 2 + _put_varint(frame + h + 2, <uint64_t>n)
        memcpy(frame + h, inner, n)
        h += n
        _put_u32be(frame, <uint32_t>(h - 4))
        self.write(PyBytes_FromStringAndSize(<char *>frame, h))

    def dispatch_v3(self, list frames):
        """Route v3 response frames: ADD_ENTRY answers of tracked adds to their tracker, READ_ENTRY
        answers of read batches to their batch, the rest to `slow_frame` (the channel's protobuf path,
        matched by txnId)."""
        cdef bytes f
        cdef const uint8_t *p
        cdef uint64_t txn = 0
        cdef int status = 0, operation = -1
        cdef Py_ssize_t body_at, body_len
        cdef AckPort port
        cdef ReadPort read_port
        cdef int64_t entry_id
        cdef dict adds = self.v3_adds
        cdef dict reads = self.v3_reads
        cdef object routed
        for f in frames:
            routed = None
            p = <const uint8_t *>PyBytes_AS_STRING(f)
            if (adds or reads) and _v3_answer(p, PyBytes_GET_SIZE(f), &txn, &operation, &status, &body_at,
                                              &body_len) == 0:
                if operation == V3_ADD_ENTRY:
                    routed = adds.pop(txn, None)
                    if routed is not None:
                        port, entry_id = routed
                        self.inflight -= 1
                        if port.position >= 0:
                            if status == 0:
                                port.tracker.on_ack(port.position, entry_id, 0)
                            else:
                                port.tracker.on_failed(port.position, entry_id, self.v3_error(status))
                elif operation == V3_READ_ENTRY:
                    routed = reads.pop(txn, None)
                    if routed is not None:
                        read_port, entry_id = routed
                        self.inflight -= 1
                        if status == 0 and body_at >= 0:
                            read_port.batch.on_result(read_port.bookie, entry_id,
                                                      PyBytes_FromStringAndSize(<char *>p + body_at, body_len), None)
                        else:
                            read_port.batch.on_result(read_port.bookie, entry_id, None,
                                                      self.v3_error(status if status else V3_EBADREQ))
            if routed is None:
                self.slow_frame(f)
            if self.closed:
                return

    def take(self):
        """The queued frames (a list, possibly empty), emptying the buffer. (Twisted copies what it is
        given into its own send buffer, so joining them here would copy every frame twice.)"""
        cdef list out = self.out
        self.flush_scheduled = False
        if out:
            self.out = []
            self.out_bytes = 0
        return out

    def dispatch_v2(self, list frames, dict slow_adds, dict slow_reads):
        """Route v2 response frames: tracked ADD answers to their AckPort, READ answers of batches to
        their ReadPort, the rest to `slow_frame`. `slow_adds` / `slow_reads` are the channel's tables of
        untracked requests; an answer they are waiting for goes there (a READ of entry -1 pending for the
        ledger takes precedence, see bookie_channel)."""
        cdef bytes f
        cdef const uint8_t *p
        cdef uint32_t header
        cdef int op
        cdef int32_t rc
        cdef int64_t ledger_id, entry_id
        cdef AckPort port
        cdef ReadPort read_port
        cdef dict ports = self.ports
        cdef dict read_ports = self.read_ports
        cdef bint handled
        for f in frames:
            handled = False
            if PyBytes_GET_SIZE(f) >= RESPONSE_HEADER and (ports or read_ports):
                p = <const uint8_t *>PyBytes_AS_STRING(f)
                header = _u32(p)
                op = (header >> 16) & 0xFF if header >> 24 else header & 0xFF
                ledger_id = _i64(p + 8)
                entry_id = _i64(p + 16)
                rc = <int32_t>_u32(p + 4)
                if op == V2_ADD:
                    port = ports.get(ledger_id)
                    if port is not None and not (slow_adds and (ledger_id, entry_id) in slow_adds):
                        self.inflight -= 1
                        port.tracker.on_ack(port.position, entry_id, rc)
                        handled = True
                elif op == V2_READ:
                    batches = read_ports.get(ledger_id)
                    if batches is not None and not (slow_reads and ((ledger_id, entry_id) in slow_reads
                                                                    or (ledger_id, -1) in slow_reads)):
                        for read_port in batches:
                            if read_port.batch.on_frame(read_port.bookie, entry_id, rc, f):
                                self.inflight -= 1
                                handled = True
                                break
            if not handled:
                self.slow_frame(f)
            if self.closed:
                return

    def lose(self, error):
        """The connection is gone: every port's tracker learns it (its adds there need another bookie)."""
        cdef AckPort port
        self.closed = True
        self.connected = False
        self.out = []
        self.out_bytes = 0
        self.inflight = 0
        self.v3_adds = {}
        self.v3_reads = {}
        ports, self.ports = self.ports, {}
        read_ports, self.read_ports = self.read_ports, {}
        for port in list(ports.values()):
            if port.position >= 0:
                port.tracker.on_channel_lost(port.position, error)
        for batches in list(read_ports.values()):
            for read_port in batches:
                (<ReadPort>read_port).batch.on_channel_lost((<ReadPort>read_port).bookie, error)



cdef class AckPort:
    cdef public AddTracker tracker
    cdef public int position          # -1 once the bookie no longer holds it (answers are ignored)

    def __init__(self, AddTracker tracker, int position):
        self.tracker = tracker
        self.position = position


cdef class PendingAdd:
    """One add in flight: its packaged entry, the v2 frame (built once, shared by the write set), the
    positions it was sent to / acknowledged by, and the Deferred its caller holds."""

    cdef public int64_t entry_id
    cdef public object entry
    cdef public object frame
    cdef public int64_t length
    cdef public object deferred
    cdef public uint64_t sent
    cdef public uint64_t acked
    cdef public uint64_t reported     # positions whose timeout was already reported
    cdef public double sent_at
    cdef public bint done
    cdef public bint queued           # sent at least once (False: queued during an ensemble change)
    cdef public object callback       # callback(error, entry_id, ctx) instead of the Deferred, or None
    cdef public object ctx

    def __init__(self, int64_t entry_id, entry, int64_t length, deferred, callback=None, ctx=None):
        self.entry_id = entry_id
        self.entry = entry
        self.frame = None
        self.length = length
        self.deferred = deferred
        self.callback = callback
        self.ctx = ctx
        self.sent = 0
        self.acked = 0
        self.reported = 0
        self.sent_at = 0.0
        self.done = False
        self.queued = False

    @property
    def acked_count(self):
        return _popcount(self.acked)

    def complete(self, error):
        """Tell the caller: its callback (an exception it raises is logged, never lets it reach the
        connection that delivered the ack) or its Deferred."""
        cb = self.callback
        if cb is not None:
            self.callback = None
            try:
                cb(error, self.entry_id, self.ctx)
            except Exception:
                log.exception("the add callback of entry %d raised", self.entry_id)
        elif error is None:
            self.deferred.callback(self.entry_id)
        elif not self.deferred.called:
            self.deferred.errback(error)


cdef class AddTracker:
    """Pending adds of one writable ledger handle (see the module doc).

    Callbacks into the handle (Python): `resolve(position)` -> a connected-or-connecting ChannelCore
    with this tracker's port registered, or None to use `slow_send`; `slow_send(pending, position)`
    sends one add on the general (Deferred) path, whose outcome comes back as on_ack/on_error calls;
    `make_frame(pending)` -> the v2 ADD frame (v3: the serialized addRequest field); `on_error(position, entry_id, rc_or_exception)`;
    `on_drained()` when the queue empties after completions.
    """

    cdef public int ensemble_size, write_quorum, ack_quorum
    cdef public int64_t lac
    cdef public int64_t confirmed_length
    cdef public bint holding           # an ensemble change runs: nothing completes
    cdef public bint fast              # frames through ChannelCores (else slow_send)
    cdef public bint v3                # ... v3 ADD_ENTRY requests (make_frame gives the addRequest field)
    cdef public int64_t ledger_id
    cdef public bint sorted_insert     # adv ledgers: entry ids arrive in any order
    cdef public object pending         # collections.deque of PendingAdd, entry order
    cdef public dict by_entry
    cdef public list channels          # position -> ChannelCore or None
    cdef public double timeout         # s; 0 = never
    cdef public object resolve, slow_send, make_frame, on_error, on_drained

    def __init__(self, int ensemble_size, int write_quorum, int ack_quorum, int64_t lac, int64_t confirmed_length,
                 bint fast, bint sorted_insert, double timeout, resolve, slow_send, make_frame, on_error,
                 on_drained, bint v3=False, int64_t ledger_id=0):
        from collections import deque
        if ensemble_size > 64:
            raise ValueError(f"ensemble size {ensemble_size} is over 64")
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.lac = lac
        self.confirmed_length = confirmed_length
        self.holding = False
        self.fast = fast
        self.v3 = v3
        self.ledger_id = ledger_id
        self.sorted_insert = sorted_insert
        self.pending = deque()
        self.by_entry = {}
        self.channels = [None] * ensemble_size
        self.timeout = timeout
        self.resolve = resolve
        self.slow_send = slow_send
        self.make_frame = make_frame
        self.on_error = on_error
        self.on_drained = on_drained

    def push(self, PendingAdd pending):
        """Queue `pending` (in entry order) and send it unless an ensemble change holds sends back."""
        cdef Py_ssize_t index
        cdef object queue = self.pending
        if self.sorted_insert and queue and (<PendingAdd>queue[len(queue) - 1]).entry_id > pending.entry_id:
            index = len(queue)
            while index > 0 and (<PendingAdd>queue[index - 1]).entry_id > pending.entry_id:
                index -= 1
            queue.insert(index, pending)
        else:
            queue.append(pending)
        self.by_entry[pending.entry_id] = pending
        if not self.holding:
            self.send(pending, ~(<uint64_t>0))

    cpdef send(self, PendingAdd pending, uint64_t only):
        """Send `pending` to the positions of its write set that are in `only` and have not acked it."""
        cdef int e = self.ensemble_size
        cdef int base = <int>(pending.entry_id % e)
        cdef int w, position
        cdef uint64_t bit
        cdef ChannelCore ch
        pending.queued = True
        pending.sent_at = _monotonic()
        for w in range(self.write_quorum):
            position = (base + w) % e
            bit = (<uint64_t>1) << position
            if not (only & bit) or (pending.acked & bit):
                continue
            pending.sent |= bit
            pending.reported &= ~bit
            if self.fast:
                ch = self.channels[position]
                if ch is None or ch.closed:
                    ch = self.resolve(position)
                if ch is not None:
                    if pending.frame is None:
                        pending.frame = self.make_frame(pending)
                    ch.inflight += 1
                    if self.v3:
                        ch.write_v3_add(ch.ports[self.ledger_id], pending.entry_id, pending.frame)
                    else:
                        ch.write(pending.frame)
                    continue
            self.slow_send(pending, position)

    cpdef on_ack(self, int position, int64_t entry_id, int rc):
        cdef PendingAdd p = self.by_entry.get(entry_id)
        cdef uint64_t bit = (<uint64_t>1) << position
        if p is None or not (p.sent & bit):
            return                          # completed already, or sent before a replacement
        if rc != 0:
            self.on_error(position, entry_id, rc)
            return
        p.acked |= bit
        if not p.done and _popcount(p.acked) >= self.ack_quorum:
            p.done = True
            if not self.holding and p is self.pending[0]:
                self.drain()

    def on_failed(self, int position, int64_t entry_id, error):
        """A send to `position` failed (error or timeout) on any path."""
        cdef PendingAdd p = self.by_entry.get(entry_id)
        if p is not None and p.sent & ((<uint64_t>1) << position):
            self.on_error(position, entry_id, error)

    def on_channel_lost(self, int position, error):
        cdef PendingAdd p
        cdef uint64_t bit = (<uint64_t>1) << position
        self.channels[position] = None
        for p in list(self.pending):
            if (p.sent & bit) and not (p.acked & bit):
                self.on_error(position, p.entry_id, error)
                return

    cpdef drain(self):
        """Complete the done adds at the head of the queue, in entry order (user callbacks run here)."""
        cdef PendingAdd head
        while not self.holding:
            queue = self.pending
            if not queue:
                break
            head = queue[0]
            if not head.done or head.entry_id != self.lac + 1:
                break
            queue.popleft()
            del self.by_entry[head.entry_id]
            self.lac = head.entry_id
            self.confirmed_length = head.length
            head.entry = None
            head.frame = None
            head.complete(None)
        if not self.pending and self.on_drained is not None:
            self.on_drained()

    def release_positions(self, uint64_t positions):
        """An ensemble change replaced these positions: forget their channels (ports stop counting) and
        their acks; adds that drop below the ack quorum are not done any more. Returns nothing."""
        cdef PendingAdd p
        cdef int position
        cdef ChannelCore ch
        cdef AckPort port
        for position in range(self.ensemble_size):
            if positions & ((<uint64_t>1) << position):
                ch = self.channels[position]
                self.channels[position] = None
                if ch is not None:
                    for key, port in list(ch.ports.items()):
                        if port.tracker is self and port.position == position:
                            port.position = -1
                            del ch.ports[key]
        for p in self.pending:
            p.acked &= ~positions
            p.sent &= ~positions
            p.reported &= ~positions
            if p.done and _popcount(p.acked) < self.ack_quorum:
                p.done = False

    def expired(self, double now):
        """(position, entry id) of sends older than the timeout still unanswered, each reported once."""
        cdef PendingAdd p
        cdef uint64_t late
        cdef int position
        cdef list out = []
        if self.timeout <= 0:
            return out
        cdef double horizon = now - self.timeout
        for p in self.pending:
            if p.sent_at > horizon:
                break
            late = p.sent & ~p.acked & ~p.reported
            if p.done or not late:
                continue
            p.reported |= late
            for position in range(self.ensemble_size):
                if late & ((<uint64_t>1) << position):
                    out.append((position, p.entry_id))
        return out


# --- reads --------------------------------------------------------------------------------------------

cdef class ReadPort:
    """"Reads of a ledger on this channel, by bookie `bookie`, belong to ReadBatchCore `batch`"."""
    cdef public ReadBatchCore batch
    cdef public object bookie

    def __init__(self, ReadBatchCore batch, bookie):
        self.batch = batch
        self.bookie = bookie


cdef class EntryRead:
    """One entry being read: its replicas in write-set order, which were asked and not answered yet."""

    cdef public int64_t entry_id
    cdef public list bookies
    cdef public int next_index
    cdef public list outstanding
    cdef public list errors
    cdef public bint done
    cdef public double sent_at

    def __init__(self, int64_t entry_id, list bookies):
        self.entry_id = entry_id
        self.bookies = bookies
        self.next_index = 0
        self.outstanding = []
        self.errors = []
        self.done = False
        self.sent_at = 0.0


cdef class ReadBatchCore:
    """Entries [first, last] of one ledger read with at most `window` in flight (Java's
    PendingReadOp for a range): replicas asked in write-set order, each answer digest-verified, results
    kept in entry order. Fast path: v2 READ frames on ChannelCores where a ReadPort routes the answers
    here. Python callbacks: `resolve(bookie)` -> ChannelCore with this batch's port, or None for the
    general path `slow_send(read, bookie)` (whose outcome comes back through on_result);
    `verify(data, entry_id)` -> (entry, piggybacked LAC) or raises; `failed(read, error)` when a replica
    failed (error: exception or v2 rc); `finished()` once every entry is in (or the batch failed)."""

    cdef public int64_t ledger_id, first, last, next_entry, remaining, max_lac
    cdef public int window, active, ensemble_size, write_quorum
    cdef public list results
    cdef public dict in_flight           # entry id -> EntryRead (also done ones with replicas still asked)
    cdef public dict channels            # bookie -> ChannelCore
    cdef public list segment_firsts
    cdef public list segment_bookies
    cdef public dict write_sets          # segment * E + e % E -> bookies
    cdef public bint fast, closed, v3
    cdef public int64_t scope_field      # v3 ledgerScopeId (two's complement of the scope), 0 if none
    cdef public object resolve, slow_send, verify, failed, finished, make_frame

    def __init__(self, int64_t ledger_id, int64_t first, int64_t last, int window, list ensembles,
                 int ensemble_size, int write_quorum, bint fast, resolve, slow_send, verify, failed, finished,
                 make_frame, bint v3=False, int64_t scope_field=0):
        self.v3 = v3
        self.scope_field = scope_field
        self.ledger_id = ledger_id
        self.first = first
        self.last = last
        self.next_entry = first
        self.remaining = last - first + 1
        self.max_lac = -1
        self.window = window
        self.active = 0
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.results = [None] * (last - first + 1)
        self.in_flight = {}
        self.channels = {}
        self.segment_firsts = [s[0] for s in ensembles]
        self.segment_bookies = [s[1] for s in ensembles]
        self.write_sets = {}
        self.fast = fast
        self.closed = False
        self.resolve = resolve
        self.slow_send = slow_send
        self.verify = verify
        self.failed = failed
        self.finished = finished
        self.make_frame = make_frame

    cdef list _write_set(self, int64_t e, Py_ssize_t *segment):
        cdef Py_ssize_t n = len(self.segment_firsts)
        cdef int base, w, E = self.ensemble_size
        while segment[0] + 1 < n and <int64_t>self.segment_firsts[segment[0] + 1] <= e:
            segment[0] += 1
        key = segment[0] * E + e % E
        bookies = self.write_sets.get(key)
        if bookies is None:
            ensemble = self.segment_bookies[segment[0]]
            base = <int>(e % E)
            bookies = [ensemble[(base + w) % E] for w in range(self.write_quorum)]
            self.write_sets[key] = bookies
        return bookies

    cpdef fill(self):
        cdef Py_ssize_t segment = 0
        cdef EntryRead r
        while self.next_entry <= self.last and self.active < self.window and not self.closed:
            r = EntryRead(self.next_entry, self._write_set(self.next_entry, &segment))
            self.next_entry += 1
            self.in_flight[r.entry_id] = r
            self.active += 1
            self.send_next(r)

    cpdef bint send_next(self, EntryRead r):
        """Ask the next replica of `r`; False when every replica was asked."""
        cdef ChannelCore ch
        if r.next_index >= len(r.bookies):
            return False
        bookie = r.bookies[r.next_index]
        r.next_index += 1
        r.outstanding.append(bookie)
        r.sent_at = _monotonic()
        if self.fast:
            ch = self.channels.get(bookie)
            if ch is None or ch.closed:
                ch = self.resolve(bookie)
                self.channels[bookie] = ch
            if ch is not None:
                ch.inflight += 1
                if self.v3:
                    ch.write_v3_read(self._port_on(ch), self.ledger_id, r.entry_id, self.scope_field)
                else:
                    ch.write(self.make_frame(self.ledger_id, r.entry_id))
                return True
        self.slow_send(r, bookie)
        return True

    cdef ReadPort _port_on(self, ChannelCore ch):
        for port in ch.read_ports[self.ledger_id]:
            if (<ReadPort>port).batch is self:
                return port
        raise KeyError(f"ledger {self.ledger_id}: read batch has no port on its channel")

    cdef bint on_frame(self, bookie, int64_t entry_id, int rc, bytes frame) except -1:
        cdef EntryRead r = self.in_flight.get(entry_id)
        if r is None or bookie not in r.outstanding:
            return False
        self.on_result(bookie, entry_id, frame[RESPONSE_HEADER:] if rc == 0 else None, rc)
        return True

    cpdef on_result(self, bookie, int64_t entry_id, data, error):
        """A replica's answer: `data` (the stored entry) or `error` (an exception or a v2 rc)."""
        cdef EntryRead r = self.in_flight.get(entry_id)
        if r is None or bookie not in r.outstanding:
            return
        r.outstanding.remove(bookie)
        if r.done:
            if not r.outstanding:
                del self.in_flight[entry_id]
                if self.closed and not self.in_flight:
                    self._release_ports()
            return
        if data is None:
            self.failed(r, error)
            return
        try:
            entry, lac = self.verify(data, entry_id)
        except Exception as exc:
            self.failed(r, exc)
            return
        self._entry_in(r, entry, lac)

    cdef _entry_in(self, EntryRead r, entry, int64_t lac):
        r.done = True
        self.active -= 1
        if not r.outstanding:
            del self.in_flight[r.entry_id]
        if self.closed:
            return
        self.results[r.entry_id - self.first] = entry
        if lac > self.max_lac:
            self.max_lac = lac
        self.remaining -= 1
        if self.remaining == 0:
            self.close()
            self.finished()
        elif self.next_entry <= self.last and self.active <= self.window >> 1:
            self.fill()                 # refill in bulk, not one read per completion

    def give_up(self, EntryRead r):
        """Every replica of `r` failed (the caller fails the batch)."""
        r.done = True
        self.active -= 1
        if not r.outstanding:
            self.in_flight.pop(r.entry_id, None)

    def close(self):
        """No more results are taken; ports go once no replica is still being asked."""
        self.closed = True
        if not self.in_flight:
            self._release_ports()

    cdef _release_ports(self):
        cdef ChannelCore ch
        channels, self.channels = self.channels, {}
        for ch in channels.values():
            if ch is None:
                continue
            ports = ch.read_ports.get(self.ledger_id)
            if ports is None:
                continue
            kept = [p for p in ports if (<ReadPort>p).batch is not self]
            if kept:
                ch.read_ports[self.ledger_id] = kept
            else:
                del ch.read_ports[self.ledger_id]

    def on_channel_lost(self, bookie, error):
        self.channels.pop(bookie, None)
        for r in list(self.in_flight.values()):
            if bookie in (<EntryRead>r).outstanding:
                self.on_result(bookie, (<EntryRead>r).entry_id, None, error)

    def expired(self, double now, double timeout):
        """(read, bookie) pairs asked longer than `timeout` ago and unanswered; they stop being waited for
        (the caller treats them as failed). Fast-path reads only: the general path times out in its channel."""
        cdef EntryRead r
        cdef ChannelCore ch
        out = []
        for r in list(self.in_flight.values()):
            if r.outstanding and now - r.sent_at >= timeout:
                for bookie in list(r.outstanding):
                    ch = self.channels.get(bookie)
                    if ch is not None:
                        ch.inflight -= 1
                        out.append((r, bookie))
        return out
