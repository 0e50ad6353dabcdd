# cython: language_level=3
"""The reactor's add fast path: the frame splitter hands each plain ADD of a socket read (v2 or v3) straight to
`AddRun.take_c`, which admits it against a C table, copies it into the write cache and frames it for the
journal, with no Python object per add.

Why: per add, the general path made a frame, an entry, a tuple of its flags, a tuple of its ids and two
ints, then admitted it through Python lists (~0.6 us of the reactor's ~1.2 us per add). The table holds
what that admission proved for a ledger (its master key was checked and is journaled, and the ledger was
not fenced), so an add to such a ledger with the same key needs no other check.

Owns: the table of admitted ledgers (`TABLE_SLOTS` slots, direct-mapped by ledger id: a collision only
sends the ledger's next add through the general path, which admits it again), and one run at a time: what
it took, per journal (ids for the answers, and its records framed as a journal batch holds them, `int len |
entry`, in 256 KiB segments of that journal: each run's records become one FramedRecords of
bkfast._journal per segment they fill, which the journal writes as they are) and per ledger directory
(counts).

A ledger whose LAC a reader tracks (bkfast.bookie.lac) is `watched` in its slot: its taken adds report the
highest LAC piggy-backed on them, which the Bookie advances (and so wakes the ledger's long-poll readers)
when the run closes, as the general path does after its store.

Must never: take an add the general path would refuse. So the table is filled only by the general path's
admission (FastAdds.note_admitted), and emptied of a ledger before anything can change its verdict: a fence
(under the Bookie's ledger lock, which a run holds throughout), a delete, the bookie turning read-only (that
stops the fast path: the Bookie opens no run). Nor take an add it cannot journal: a run takes at most the
room each journal's queue has left and the adds the server still accepts. The table changes only under
the Bookie's ledger lock (the general path's admission, a fence, a delete, the GC's forget, a LAC watch),
so never while a run, which holds that lock on the reactor or the add worker (bkfast.net.add_workers),
reads it.

The GIL: once a run is open, the splitter offers the adds of a socket read to `take_nogil` with the GIL
released (a stretch of whole frames: the table check, the copies into the write cache and the journal
segment, the ids), so the journal and flush threads' Python runs meanwhile; an add that would need an
allocation (a longer array, a new segment) is left to `take_c`, with the GIL. A half's mutex taken in a
stretch is released before the GIL is taken back.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from bkfast._addsink cimport AddSink, TakenAdd
from bkfast._bigendian cimport get_u32, put_u32
from bkfast._entryheader cimport peek_lac
from bkfast._stats cimport OpStats
from bkfast._writecache cimport PUT_OK, WriteCacheHalf

from bkfast._journal import FramedRecords

__all__ = ["AddRun", "TABLE_SLOTS"]

cdef enum:
    KEY_BYTES = 20
    C_SEGMENT_BYTES = 256 * 1024     # a journal's records are framed into segments of this size
    SLOT_BITS = 12
    C_TABLE_SLOTS = 1 << SLOT_BITS
    NO_LEDGER = -1

TABLE_SLOTS = C_TABLE_SLOTS
cdef int64_t NO_LAC = -0x8000000000000000
cdef Py_ssize_t MAX_ENTRY_BYTES = 0xFFFFFFFF    # a write-cache half stores lengths in 32 bits


cdef struct Admitted:
    int64_t ledger_id               # NO_LEDGER: an empty slot
    int64_t run_lac                 # watched: the highest LAC the run in progress took (NO_LAC: none yet)
    int32_t journal
    int32_t directory
    bint watched                    # a reader tracks the ledger's LAC
    uint8_t key[KEY_BYTES]


cdef struct Share:                  # one journal's part of a run: the answers' ids, where its records are
    TakenAdd *taken
    Py_ssize_t count
    Py_ssize_t capacity
    Py_ssize_t room                 # how many more adds its queue takes in this run
    Py_ssize_t nbytes               # the entries' bytes
    uint8_t *segment_data           # the journal's current segment (its bytes object is in AddRun._segments)
    Py_ssize_t segment_size
    Py_ssize_t segment_used         # bytes of it in use
    Py_ssize_t piece_start          # where the run's records in it begin


cdef inline Py_ssize_t slot_of(int64_t ledger_id) noexcept nogil:
    # Fibonacci hashing: ledger ids are sequential, the table wants them spread
    return <Py_ssize_t>((<uint64_t>ledger_id * 0x9E3779B97F4A7C15ULL) >> (64 - SLOT_BITS))


cdef class AddRun(AddSink):
    """The admitted-ledger table and the run in progress (see the module docstring)."""

    cdef Admitted *_table
    cdef readonly int journals
    cdef readonly int directories
    cdef bint _open
    cdef list _halves                # per directory: the active write-cache half held for the run
    cdef void **_half_ptrs           # the same halves, borrowed from _halves, for the GIL-free side
    cdef Py_ssize_t *_half_limits
    cdef Py_ssize_t *_dir_counts
    cdef bint *_locked              # per directory: its half's mutex is held (within one feed)
    cdef Share *_shares
    cdef Py_ssize_t *_lac_moved      # the watched slots the run in progress took adds of
    cdef Py_ssize_t _lac_moved_count
    cdef Py_ssize_t _lac_moved_capacity
    cdef list _segments              # per journal: the bytes its records are framed into (or None)
    cdef list _pieces                # per journal: its run's records in full segments (FramedRecords)
    cdef Py_ssize_t _limit
    cdef object _opener              # opener(limit) -> bool: opens the armed run at its first add
    cdef Py_ssize_t _armed_limit     # > 0: armed (the limit to open with)
    cdef readonly Py_ssize_t count          # adds taken by the run in progress (or the last one)
    cdef readonly Py_ssize_t taken_bytes    # their entries' bytes
    cdef readonly Py_ssize_t taken_without_gil  # of them, those taken by take_nogil

    def __cinit__(self, int journals, int directories):
        cdef Py_ssize_t i
        if journals < 1 or directories < 1:
            raise ValueError(f"an add run needs journals and directories, not {journals} and {directories}")
        self.journals, self.directories = journals, directories
        self._table = <Admitted *>PyMem_Calloc(C_TABLE_SLOTS, sizeof(Admitted))
        self._half_limits = <Py_ssize_t *>PyMem_Calloc(directories, sizeof(Py_ssize_t))
        self._dir_counts = <Py_ssize_t *>PyMem_Calloc(directories, sizeof(Py_ssize_t))
        self._locked = <bint *>PyMem_Calloc(directories, sizeof(bint))
        self._half_ptrs = <void **>PyMem_Calloc(directories, sizeof(void *))
        self._shares = <Share *>PyMem_Calloc(journals, sizeof(Share))
        if (self._table == NULL or self._half_limits == NULL or self._dir_counts == NULL or self._shares == NULL
                or self._locked == NULL or self._half_ptrs == NULL):
            raise MemoryError()
        for i in range(C_TABLE_SLOTS):
            self._table[i].ledger_id = NO_LEDGER
            self._table[i].run_lac = NO_LAC

    def __dealloc__(self):
        cdef int j
        if self._shares != NULL:
            for j in range(self.journals):
                PyMem_Free(self._shares[j].taken)
        PyMem_Free(self._shares)
        PyMem_Free(self._table)
        PyMem_Free(self._half_limits)
        PyMem_Free(self._dir_counts)
        PyMem_Free(self._locked)
        PyMem_Free(self._half_ptrs)
        PyMem_Free(self._lac_moved)

    # --- the table ------------------------------------------------------------------------------------
    def admit(self, int64_t ledger_id, bytes master_key, int journal, int directory, bint watched=False):
        """The general path admitted an add of this (unscoped) ledger with this key, the ledger not fenced:
        later adds with the same key may take the fast path, to `journal` and ledger `directory`; `watched`:
        a reader tracks its LAC."""
        cdef Admitted *slot
        if ledger_id < 0:
            raise ValueError(f"ledger id {ledger_id} is negative")
        if len(master_key) != KEY_BYTES:
            raise ValueError(f"a master key has {KEY_BYTES} bytes, not {len(master_key)}")
        if not (0 <= journal < self.journals and 0 <= directory < self.directories):
            raise ValueError(f"journal {journal} / directory {directory} out of range")
        slot = &self._table[slot_of(ledger_id)]
        slot.ledger_id = ledger_id
        slot.journal = journal
        slot.directory = directory
        slot.watched = watched
        slot.run_lac = NO_LAC
        memcpy(slot.key, <const char *>master_key, KEY_BYTES)

    def forget(self, int64_t ledger_id):
        """Adds of this ledger go through the general path again (it was fenced or deleted)."""
        cdef Admitted *slot = &self._table[slot_of(ledger_id)]
        if slot.ledger_id == ledger_id:
            slot.ledger_id = NO_LEDGER

    def watch(self, int64_t ledger_id, bint watched):
        """A reader started (True) or stopped tracking the ledger's LAC; not while a run is open."""
        cdef Admitted *slot = &self._table[slot_of(ledger_id)]
        if self._open:
            raise RuntimeError("the LAC watch of a ledger changes between runs, not within one")
        if slot.ledger_id == ledger_id:
            slot.watched = watched

    def watches(self, int64_t ledger_id):
        """Whether the ledger is admitted and its taken adds report their LAC."""
        cdef Admitted *slot = &self._table[slot_of(ledger_id)]
        return slot.ledger_id == ledger_id and slot.watched

    def knows(self, int64_t ledger_id):
        """Whether adds of this ledger (with its key) may take the fast path now."""
        return self._table[slot_of(ledger_id)].ledger_id == ledger_id

    # --- a run ----------------------------------------------------------------------------------------
    def arm(self, opener, Py_ssize_t limit):
        """Let the next feed's first plain add open a run of at most `limit` adds: take_c calls
        `opener(limit)`, which opens it (open) and answers True, or answers False (no run now). A socket
        read with no add to take so costs no lock and no Python call but this one and close."""
        if self._open:
            # One run at a time, on one thread (the reactor, or the add worker when there is one).
            raise RuntimeError("an add run is open: it is armed again only after its close")
        self.count = self.taken_bytes = self.taken_without_gil = 0
        self._opener, self._armed_limit = opener, limit

    @property
    def is_open(self):
        return self._open

    def open(self, list halves, list half_limits, list journal_rooms, Py_ssize_t limit):
        """Start a run: `halves[d]` is directory d's active write-cache half, held (its cache's lock) until
        close, and no fuller than `half_limits[d]` bytes after a put; `journal_rooms[j]` adds fit journal
        j's queue; `limit` adds in all."""
        cdef Py_ssize_t i
        if self._open:
            raise RuntimeError("an add run is already open")
        if len(halves) != self.directories or len(half_limits) != self.directories:
            raise ValueError(f"{self.directories} directories, got {len(halves)} halves")
        if len(journal_rooms) != self.journals:
            raise ValueError(f"{self.journals} journals, got {len(journal_rooms)} rooms")
        for half in halves:
            if not isinstance(half, WriteCacheHalf):
                raise TypeError(f"a write-cache half, not {type(half).__name__}")
        for i in range(self.directories):
            self._half_limits[i] = half_limits[i]
            self._dir_counts[i] = 0
        for i in range(self.journals):
            self._shares[i].count = self._shares[i].nbytes = 0
            self._shares[i].room = journal_rooms[i]
        self._halves = halves
        for i in range(self.directories):
            self._half_ptrs[i] = <void *>halves[i]
        if self._segments is None:
            self._segments = [None] * self.journals
        self._pieces = [[] for _ in range(self.journals)]
        self._lac_moved_count = 0
        self._limit = limit
        self.count = self.taken_bytes = self.taken_without_gil = 0
        self._open = True

    def close(self):
        """End the run (or disarm it): ([(journal, its records as FramedRecords, its answers' ids as packed
        TakenAdd, its entries' bytes)] for each journal that took adds, [adds stored per directory],
        [(ledger, the highest LAC its taken adds carried)] for watched ledgers); None when it never opened.
        The caller releases the halves after this."""
        cdef int j
        cdef Py_ssize_t i
        cdef Admitted *slot
        cdef list shares = []
        cdef list lacs = []
        self._opener, self._armed_limit = None, 0
        if not self._open:
            return None             # armed, but no add came to open it
        self._open = False
        self.feed_done_c()
        self._halves = None
        for j in range(self.directories):
            self._half_ptrs[j] = NULL
        for j in range(self.journals):
            if self._shares[j].count:
                self._close_piece(j)
                shares.append((j, self._pieces[j],
                               PyBytes_FromStringAndSize(<const char *>self._shares[j].taken,
                                                         self._shares[j].count * sizeof(TakenAdd)),
                               self._shares[j].nbytes))
        self._pieces = None
        for i in range(self._lac_moved_count):
            slot = &self._table[self._lac_moved[i]]
            lacs.append((slot.ledger_id, slot.run_lac))
            slot.run_lac = NO_LAC
        self._lac_moved_count = 0
        return shares, [self._dir_counts[j] for j in range(self.directories)], lacs

    cdef int take_c(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                    const uint8_t *entry, Py_ssize_t length) except -1:
        cdef Admitted *slot
        cdef Share *share
        cdef int64_t lac = NO_LAC
        if not self._open and not self._open_armed():
            return 0
        slot = self._admitted(ledger_id, entry_id, master_key, entry, length, &lac)
        if slot == NULL:
            return 0
        share = &self._shares[slot.journal]
        if slot.watched and slot.run_lac == NO_LAC and self._lac_moved_count == self._lac_moved_capacity:
            self._grow_lac_moved()
        if share.count == share.capacity:
            self._grow(share)
        # The record's room first: if it cannot be made, nothing was stored.
        self._record_room(slot.journal, share, 4 + length)
        return self._store(slot, share, ledger_id, entry_id, tag, entry, length, lac)

    cdef bint ready_nogil(self) noexcept nogil:
        return self._open

    cdef int take_nogil(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                        const uint8_t *entry, Py_ssize_t length) noexcept nogil:
        # take_c with the GIL released: what would need an allocation (a longer array, a new segment)
        # answers 0, and the splitter gives that add to take_c. The table is safe to read here: it changes
        # only under the Bookie's ledger lock, which the run holds.
        cdef Admitted *slot
        cdef Share *share
        cdef int64_t lac = NO_LAC
        if not self._open:
            return 0
        slot = self._admitted(ledger_id, entry_id, master_key, entry, length, &lac)
        if slot == NULL:
            return 0
        share = &self._shares[slot.journal]
        if ((slot.watched and slot.run_lac == NO_LAC and self._lac_moved_count == self._lac_moved_capacity)
                or share.count == share.capacity or share.segment_data == NULL
                or share.segment_used + 4 + length > share.segment_size):
            return 0
        if self._store(slot, share, ledger_id, entry_id, tag, entry, length, lac) == 0:
            return 0
        self.taken_without_gil += 1
        return 1

    cdef void stretch_done_nogil(self) noexcept nogil:
        self._unlock_halves()

    cdef Admitted *_admitted(self, int64_t ledger_id, int64_t entry_id, const uint8_t *master_key,
                             const uint8_t *entry, Py_ssize_t length, int64_t *lac) noexcept nogil:
        # The ledger's slot when the run may take this add (admitted, the same key, within the run's and
        # its journal's limits, its LAC readable when watched: `lac`); NULL otherwise.
        cdef Admitted *slot
        if self.count >= self._limit or ledger_id < 0 or entry_id < 0 or length > MAX_ENTRY_BYTES:
            return NULL
        slot = &self._table[slot_of(ledger_id)]
        if slot.ledger_id != ledger_id or memcmp(slot.key, master_key, KEY_BYTES) != 0:
            return NULL
        if self._shares[slot.journal].count >= self._shares[slot.journal].room:
            return NULL
        if slot.watched and peek_lac(entry, length, lac) < 0:
            return NULL             # no LAC to read: the general path's verdict
        return slot

    cdef int _store(self, Admitted *slot, Share *share, int64_t ledger_id, int64_t entry_id, uint64_t tag,
                    const uint8_t *entry, Py_ssize_t length, int64_t lac) noexcept nogil:
        # Store an add the run takes (its share has room for its id and its segment for its record): into
        # the write-cache half (its mutex taken once per stretch of the feed), its record framed after its
        # journal's last one. 0 when the half refuses it (full): nothing of it was stored.
        cdef uint8_t *record = share.segment_data + share.segment_used
        cdef TakenAdd *taken
        if not self._locked[slot.directory]:
            (<WriteCacheHalf>self._half_ptrs[slot.directory]).lock_c()
            self._locked[slot.directory] = True
        if (<WriteCacheHalf>self._half_ptrs[slot.directory])._put_locked(
                0, <uint64_t>ledger_id, entry_id, entry, <uint32_t>length, self._half_limits[slot.directory]) != PUT_OK:
            return 0
        put_u32(record, <uint32_t>length)
        memcpy(record + 4, entry, length)
        share.segment_used += 4 + length
        taken = &share.taken[share.count]
        taken.ledger_id, taken.entry_id, taken.tag = ledger_id, entry_id, tag
        share.count += 1
        share.nbytes += length
        self._dir_counts[slot.directory] += 1
        if slot.watched:
            if slot.run_lac == NO_LAC:
                self._lac_moved[self._lac_moved_count] = slot - self._table
                self._lac_moved_count += 1
            if lac > slot.run_lac:
                slot.run_lac = lac
        self.count += 1
        self.taken_bytes += length
        return 1

    cdef int _record_room(self, int journal, Share *share, Py_ssize_t framed) except -1:
        # Where journal `journal`'s next framed record goes: its current segment, or a new one (the run's
        # records in the full one become a FramedRecords piece). No Python code but allocations runs
        # here, so it is safe with a half's mutex held: FramedRecords is not tracked by the cycle
        # collector, so making one never starts a collection.
        if share.segment_data == NULL or share.segment_used + framed > share.segment_size:
            self._close_piece(journal)
            segment = PyBytes_FromStringAndSize(NULL, framed if framed > C_SEGMENT_BYTES else C_SEGMENT_BYTES)
            self._segments[journal] = segment
            share.segment_data = <uint8_t *>PyBytes_AS_STRING(segment)
            share.segment_size = PyBytes_GET_SIZE(segment)
            share.segment_used = share.piece_start = 0
        return 0

    cdef int _close_piece(self, int journal) except -1:
        # The run's records in journal `journal`'s current segment become one FramedRecords.
        cdef Share *share = &self._shares[journal]
        segment = <object>PyList_GET_ITEM(self._segments, journal)
        if segment is not None and share.segment_used > share.piece_start:
            (<list>PyList_GET_ITEM(self._pieces, journal)).append(
                FramedRecords(segment, share.piece_start, share.segment_used - share.piece_start))
            share.piece_start = share.segment_used
        return 0

    def record_lengths(self, list pieces, OpStats stats, bint ok):
        """Record each entry's length of these FramedRecords pieces in `stats` (ok or failed)."""
        cdef Py_buffer view
        cdef const uint8_t *p
        cdef Py_ssize_t at
        cdef uint32_t length
        if not stats.enabled:
            return
        for piece in pieces:
            PyObject_GetBuffer(piece, &view, PyBUF_SIMPLE)
            try:
                p, at = <const uint8_t *>view.buf, 0
                while at + 4 <= view.len:
                    length = get_u32(p + at)
                    if ok:
                        stats.record_ok(<double>length)
                    else:
                        stats.record_fail(<double>length)
                    at += 4 + length
            finally:
                PyBuffer_Release(&view)

    cdef bint _open_armed(self) except -1:
        # The first add of an armed feed: the opener takes the locks and opens the run (no half's mutex is
        # held yet, so it may let the GIL go). Asked once per arming.
        cdef Py_ssize_t limit = self._armed_limit
        opener = self._opener
        self._opener, self._armed_limit = None, 0
        if limit <= 0 or opener is None:
            return False
        return bool(opener(limit)) and self._open

    cdef void feed_done_c(self) noexcept:
        self._unlock_halves()

    cdef void _unlock_halves(self) noexcept nogil:
        # A half's mutex is held from the first put into it to the end of the feed or of the GIL-free
        # stretch, not taken per put (~20% of the reactor's time per add). Never longer: other threads
        # take it with the GIL held, so it must be free before the reactor takes the GIL back, and between
        # feeds the reactor runs Python code, which may hand the GIL to one of them.
        cdef int d
        for d in range(self.directories):
            if self._locked[d]:
                self._locked[d] = False
                (<WriteCacheHalf>self._half_ptrs[d]).unlock_c()

    cdef int _grow_lac_moved(self) except -1:
        return grow_array(<void **>&self._lac_moved, &self._lac_moved_capacity, sizeof(Py_ssize_t), 16)

    cdef int _grow(self, Share *share) except -1:
        return grow_array(<void **>&share.taken, &share.capacity, sizeof(TakenAdd), 256)


cdef int grow_array(void **items, Py_ssize_t *capacity, size_t item_size, Py_ssize_t first) except -1:
    """Double a PyMem array of `capacity` items (`first` items when it has none yet)."""
    cdef Py_ssize_t wanted = 2 * capacity[0] if capacity[0] else first
    cdef void *grown = PyMem_Realloc(items[0], wanted * item_size)
    if grown == NULL:
        raise MemoryError()
    items[0], capacity[0] = grown, wanted
    return 0
