# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The ledger client's hot path, in Cython: adds and plain reads without a per-request object.

- `ChannelCore`, one per `BookieChannel` (v2 or v3): its output buffer (frames queued, written once per
  reactor turn) and the dispatch of response frames. Answers to tracked adds and batch reads go straight
  to their tracker or batch; every other frame goes to the channel's Python handler.
- Writes (`_clientpath_adds.pxi`): `AddTracker`, one per writable ledger handle, holds the pending adds
  in entry order (`PendingAdd`, with bitmasks of the ensemble positions each was sent to and acknowledged
  by), the ack quorum, the LAC and in-order completion; `AckPort` says "ledger L on this connection is
  position P of tracker T". The handle keeps the control logic (ensemble change, errors, close) in Python.
- Reads (`_clientpath_reads.pxi`): `ReadBatchCore` reads a range of entries (replicas in write-set
  order, digest check, results in order); `ReadPort` ties a connection and ledger to the batches reading it.
- v3 (`_clientpath_v3wire.pxi`): ADD_ENTRY and READ_ENTRY requests built by hand (txnIds from 2^62 up,
  apart from the client's own request numbers) and a reader of just the Response fields needed to match
  them.

Must never: complete an add before AQ distinct positions of its write set acknowledged it, complete adds
out of entry order, count an answer from a bookie that no longer holds the position it answered for, or
take a result from a replica that was not asked, or import the `bkfast.codec` facade (it takes from
`bkfast._codec` only, so BKFAST_PURE_CODEC=1 never changes it).
"""

from libc.string cimport memcpy
from libc.stdint cimport int32_t, int64_t, uint64_t, uint32_t, uint8_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

from bkfast._bigendian cimport get_i32, get_i64, get_u32, put_u32

import logging
import time

# The Cython codec itself, never the `bkfast.codec` facade: BKFAST_PURE_CODEC=1 swaps the facade for the
# pure twin, and must not change how the client verifies entries. (`verify_entry_at` is a plain `def` in
# _codec.pyx, so there is nothing to cimport yet.)
from bkfast._codec import verify_entry_at

log = logging.getLogger("bkfast.client.write_handle")
_monotonic = time.monotonic

DEF V2_ADD = 1
DEF V2_READ = 2
DEF V3_READ_ENTRY = 1
DEF V3_EBADREQ = 404
DEF V3_ADD_ENTRY = 2
DEF V3_FIRST_TRACKED_TXN = 1 << 62     # the client's own request numbers never get here
DEF RESPONSE_HEADER = 24


cdef inline int _popcount(uint64_t v) noexcept nogil:
    cdef int n = 0
    while v:
        v &= v - 1
        n += 1
    return n


include "_clientpath_v3wire.pxi"
include "_clientpath_adds.pxi"
include "_clientpath_reads.pxi"


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
        put_u32(prefix, <uint32_t>(h - 4 + PyBytes_GET_SIZE(add_field)))
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
        put_u32(frame, <uint32_t>(h - 4))
        self.write(PyBytes_FromStringAndSize(<char *>frame, h))

    def dispatch_v3(self, list frames):
        """Route v3 response frames: ADD_ENTRY answers of tracked adds to their tracker, READ_ENTRY
        answers of read batches to their batch, the rest to `slow_frame` (the channel's protobuf path,
        matched by txnId)."""
        cdef bytes f
        cdef V3Answer answer
        cdef object routed
        for f in frames:
            routed = None
            if ((self.v3_adds or self.v3_reads)
                    and pw_v3_answer(<const uint8_t *>PyBytes_AS_STRING(f), PyBytes_GET_SIZE(f), &answer) == 0):
                if answer.operation == V3_ADD_ENTRY:
                    routed = self._v3_add_answered(&answer)
                elif answer.operation == V3_READ_ENTRY:
                    routed = self._v3_read_answered(f, &answer)
            if routed is None:
                self.slow_frame(f)
            if self.closed:
                return

    cdef object _answered(self, dict pending, uint64_t txn):
        """The (port, entry id) of the tracked request `txn` answers, no longer in flight; None if there
        is none."""
        routed = pending.pop(txn, None)
        if routed is not None:
            self.inflight -= 1
        return routed

    cdef object _v3_add_answered(self, V3Answer *answer):
        """Hands a tracked add its answer; None when no tracked add has the answer's txnId."""
        cdef AckPort port
        cdef int64_t entry_id
        routed = self._answered(self.v3_adds, answer.txn)
        if routed is not None:
            port, entry_id = routed
            if port.position >= 0:
                if answer.status == 0:
                    port.tracker.on_ack(port.position, entry_id, 0)
                else:
                    port.tracker.on_failed(port.position, entry_id, self.v3_error(answer.status))
        return routed

    cdef object _v3_read_answered(self, bytes f, V3Answer *answer):
        """Hands a batch read its answer (the entry, or the error of its status); None when no batch read
        has the answer's txnId."""
        cdef ReadPort read_port
        cdef int64_t entry_id
        routed = self._answered(self.v3_reads, answer.txn)
        if routed is not None:
            read_port, entry_id = routed
            if answer.status == 0 and answer.body_at >= 0:
                read_port.batch.on_result(read_port.bookie, entry_id, PyBytes_FromStringAndSize(
                    PyBytes_AS_STRING(f) + answer.body_at, answer.body_len), None)
            else:
                read_port.batch.on_result(read_port.bookie, entry_id, None,
                                          self.v3_error(answer.status if answer.status else V3_EBADREQ))
        return routed

    def take(self):
        """The queued frames (a list, possibly empty), emptying the buffer. (The channel hands the list to
        one sendmsg as it is: joining the frames here would only copy them.)"""
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
                header = get_u32(p)
                op = (header >> 16) & 0xFF if header >> 24 else header & 0xFF
                ledger_id = get_i64(p + 8)
                entry_id = get_i64(p + 16)
                rc = get_i32(p + 4)
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
