# Included by _clientpath.pyx: the read side. ReadBatchCore reads a range of entries; ReadPort ties a
# (connection, ledger) to the batches reading it.

cdef class LedgerEntry:
    """One entry of a ledger: ids, the ledger length up to and including it, and its payload."""

    cdef readonly object scope_id
    cdef readonly int64_t ledger_id
    cdef readonly int64_t entry_id
    cdef readonly int64_t length
    cdef readonly bytes data

    def __init__(self, scope_id, int64_t ledger_id, int64_t entry_id, int64_t length, data):
        self.scope_id = scope_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.length = length
        self.data = data if type(data) is bytes else bytes(data)

    def __repr__(self):
        return (f"LedgerEntry(ledger={self.ledger_id}, entry={self.entry_id}, length={self.length}, "
                f"{len(self.data)} bytes)")

    def __eq__(self, other):
        if not isinstance(other, LedgerEntry):
            return NotImplemented
        cdef LedgerEntry o = other
        return (self.scope_id == o.scope_id and self.ledger_id == o.ledger_id and self.entry_id == o.entry_id
                and self.length == o.length and self.data == o.data)

    __hash__ = None

    def __reduce__(self):
        return LedgerEntry, (self.scope_id, self.ledger_id, self.entry_id, self.length, self.data)


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
    `digest` = (digest type, MAC key, scope id) checks each entry (bkfast._codec.verify_entry_at);
    `failed(read, error)` when a replica
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
    cdef public object resolve, slow_send, failed, finished, make_frame
    cdef public int digest_type
    cdef public object mac_key, scope_id

    def __init__(self, int64_t ledger_id, int64_t first, int64_t last, int window, list ensembles,
                 int ensemble_size, int write_quorum, bint fast, resolve, slow_send, tuple digest, failed, finished,
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
        self.digest_type, self.mac_key, self.scope_id = digest
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
        self.on_result(bookie, entry_id, frame if rc == 0 else None, rc, RESPONSE_HEADER)
        return True

    cpdef on_result(self, bookie, int64_t entry_id, data, error, Py_ssize_t offset=0):
        """A replica's answer: `data` (the stored entry, from `offset` on) or `error` (an exception or a
        v2 rc)."""
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
            payload, length, lac = verify_entry_at(data, offset, self.digest_type, self.mac_key, self.ledger_id,
                                                   entry_id, self.scope_id)
        except Exception as exc:
            self.failed(r, exc)
            return
        self._entry_in(r, LedgerEntry(self.scope_id, self.ledger_id, entry_id, length, payload), lac)

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
