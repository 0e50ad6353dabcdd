# Included by _clientpath.pyx: the write side. AddTracker holds a write handle's pending adds; AckPort
# ties a (connection, ledger) to a tracker's ensemble position.

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
    # enforceMinNumFaultDomainsForWrite: `domains[position]` is the fault domain (rack, zone) number of each
    # position (< 64), and an add completes once its acks come from `min_domains` domains, or from its whole
    # write set (no more acks can come). None / 0: AQ acks complete an add.
    cdef public object domains
    cdef public int min_domains

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
        self.domains = None
        self.min_domains = 0

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

    cdef bint _acked_enough(self, PendingAdd p):
        cdef int e = self.ensemble_size
        cdef int base, w, position
        cdef uint64_t write_set = 0, seen = 0
        if _popcount(p.acked) < self.ack_quorum:
            return False
        if self.min_domains <= 1 or self.domains is None:
            return True
        base = <int>(p.entry_id % e)
        for w in range(self.write_quorum):
            write_set |= (<uint64_t>1) << ((base + w) % e)
        if (p.acked & write_set) == write_set:
            return True
        for position in range(e):
            if p.acked & ((<uint64_t>1) << position):
                seen |= (<uint64_t>1) << (<int>self.domains[position] & 63)
        return _popcount(seen) >= self.min_domains

    cpdef on_ack(self, int position, int64_t entry_id, int rc):
        cdef PendingAdd p = self.by_entry.get(entry_id)
        cdef uint64_t bit = (<uint64_t>1) << position
        if p is None or not (p.sent & bit):
            return                          # completed already, or sent before a replacement
        if rc != 0:
            self.on_error(position, entry_id, rc)
            return
        p.acked |= bit
        if not p.done and self._acked_enough(p):
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
            if p.done and not self._acked_enough(p):
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

    def fail_all(self, error):
        """The handle failed: forget every pending add (channels and acks too, so late answers count for
        nothing) and complete each with `error`, in entry order; returns them."""
        cdef PendingAdd p
        cdef list failed = list(self.pending)
        self.pending.clear()
        self.by_entry.clear()
        self.release_positions(~(<uint64_t>0))
        for p in failed:
            p.complete(error)
        return failed
