# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""One half of DbLedgerStorage's write cache in C: entry bytes in arena segments, an open-addressing index
of (ledger, entry id) -> where the bytes are, and each ledger's highest cached entry id.

Owns: the memory of the entries a half holds (1 MiB malloc'd segments; an entry above a quarter segment
gets a segment of its own), the index (24-byte slots, at most 3/4 full, tombstones for deleted ledgers),
the per-ledger records (qualified key = scope id, ledger id; last entry id; live count), the half's size
and count, and its own mutex. Every call, from Python or from C (`put_c`, `copy_entry_c`, declared in
_writecache.pxd for code that runs without the GIL), takes that mutex, so the half never relies on the GIL
for its consistency (docs/threads.md: the add workers of issue 27 put entries without it).

Why C: the Python half held each entry as a bytes object in a dict of dicts; a put cost the reactor thread
~13% of its time under load (profiled), every cached entry was a Python object (64 bytes charged each,
~300 per ledger), and dropping a flushed half freed them one by one with the GIL held (done in slices so
the reactor could interleave). Here a put is a memcpy and a probe, no Python object survives the call, and
dropping a half frees a few segments.

Sizes: `size` counts each put's bytes plus ENTRY_OVERHEAD (and LEDGER_OVERHEAD per ledger new to the
half). The arena is append-only: an entry written again, or a deleted ledger, leaves its old bytes in
the arena until the half is dropped, so `size` (what the half's limit is checked against) does not shrink
on those (as Java's WriteCache, whose deleted ledgers are skipped at flush); `count` is the live entries.

Flush: `_snapshot` is the half's live entries sorted by (scope, ledger, entry); the flush copies them out
in slices (bkfast.dbstorage._flushslices), so nothing of the half outlives its flush.

Reads (_writecache_reads.pxi): the read-ahead cache is a ring of halves too (`ReadCacheRing`), and
`MemoryEntries` is the entry source (bkfast._entrysource) the reactor's read loops look in: per ledger
directory the write cache's halves and the read-ahead ring's, an entry copied straight from a half's arena
into the answer being built (no bytes object, no Python call per read).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort, realloc
from libc.string cimport memcpy

from bkfast._entryheader cimport peek_ids

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)

__all__ = ["WriteCacheHalf", "SegmentPool", "put_entries", "PUT_ENTRIES_DONE", "PUT_ENTRIES_NO_ROOM",
           "PUT_ENTRIES_MALFORMED", "ENTRY_OVERHEAD", "LEDGER_OVERHEAD", "SEGMENT_BYTES",
           "ReadCacheRing", "MemoryEntries"]

ENTRY_OVERHEAD = 64
"""Bytes charged per cached entry besides its data: its index slot (24 bytes) at the index's lowest fill
(3/8 after a growth) is 64."""
LEDGER_OVERHEAD = 96
"""Bytes charged per ledger in a half: its record (32 bytes) and its index slot, at the lowest fill."""
SEGMENT_BYTES = 1 << 20

cdef Py_ssize_t C_ENTRY_OVERHEAD = ENTRY_OVERHEAD
cdef Py_ssize_t C_LEDGER_OVERHEAD = LEDGER_OVERHEAD
cdef uint32_t C_SEGMENT_BYTES = SEGMENT_BYTES
cdef uint32_t TOMBSTONE = 0xFFFFFFFFu
cdef uint32_t NO_SEGMENT = 0xFFFFFFFFu
cdef uint32_t NOT_FOUND = 0xFFFFFFFFu
cdef object MAX_U64 = (1 << 64) - 1

cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    # splitmix64's finalizer: ledger and entry ids are sequential, the index wants them spread
    x ^= x >> 30
    x *= 0xbf58476d1ce4e5b9ULL
    x ^= x >> 27
    x *= 0x94d049bb133111ebULL
    x ^= x >> 31
    return x


cdef inline uint64_t _entry_hash(uint32_t ledger, int64_t entry_id) noexcept nogil:
    # Eight consecutive entries of a ledger go to one aligned block of eight slots (three cache lines),
    # blocks spread by the mix: a ledger's entries arrive in order, and a probe per entry into a random
    # cache line of a table of megabytes cost ~5% of the reactor's time under adds (profiled).
    return (_mix(<uint64_t>(entry_id >> 3) * 0x9e3779b97f4a7c15ULL + ledger) & ~(<uint64_t>7)) | \
        (<uint64_t>entry_id & 7)


cdef inline uint64_t _ledger_hash(uint64_t scope_id, uint64_t ledger_id) noexcept nogil:
    return _mix(ledger_id ^ _mix(scope_id + 0x632be59bd9b4e019ULL))


cdef int _run_order(const void *a, const void *b) noexcept nogil:
    cdef const RunItem *x = <const RunItem *>a
    cdef const RunItem *y = <const RunItem *>b
    if x.scope_id != y.scope_id:
        return -1 if x.scope_id < y.scope_id else 1
    if x.ledger_id != y.ledger_id:
        return -1 if x.ledger_id < y.ledger_id else 1
    if x.entry_id != y.entry_id:
        return -1 if x.entry_id < y.entry_id else 1
    return 0


cdef inline int _split_key(object key, uint64_t *scope_id, uint64_t *ledger_id) except -1:
    """A qualified key (scope_id << 64 | ledger_id, bkfast.dbstorage.index.qualified_key) as its halves."""
    if key <= MAX_U64:
        scope_id[0] = 0
        ledger_id[0] = key
    else:
        scope_id[0] = key >> 64
        ledger_id[0] = key & MAX_U64
    return 0


cdef class SegmentPool:
    """Arena segments (SEGMENT_BYTES each) kept for the next half when a half is dropped, up to
    `max_segments`: a fresh 1 MiB block from malloc is fresh pages, and faulting them in on the add path
    cost more than the copy itself (measured: the reactor's CPU per add rose ~0.4 us without the pool).
    Shared by the two halves of a write cache; its own mutex."""

    def __cinit__(self, uint32_t max_segments=0):
        self._mutex = malloc(sizeof(pthread_mutex_t))
        self._max_free = max_segments
        self._free = <uint8_t **>malloc((max_segments + 1) * sizeof(uint8_t *))
        if self._mutex == NULL or self._free == NULL:
            raise MemoryError("segment pool: out of memory")
        pthread_mutex_init(<pthread_mutex_t *>self._mutex, NULL)

    def __dealloc__(self):
        cdef uint32_t i
        if self._free != NULL:
            for i in range(self._nfree):
                free(self._free[i])
            free(self._free)
        if self._mutex != NULL:
            pthread_mutex_destroy(<pthread_mutex_t *>self._mutex)
            free(self._mutex)

    cdef uint8_t *take(self) noexcept nogil:
        """A segment of SEGMENT_BYTES (a kept one if any); NULL when out of memory."""
        cdef uint8_t *segment = NULL
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        if self._nfree:
            self._nfree -= 1
            segment = self._free[self._nfree]
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        return segment if segment != NULL else <uint8_t *>malloc(C_SEGMENT_BYTES)

    cdef void give(self, uint8_t *segment) noexcept nogil:
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        if self._nfree < self._max_free:
            self._free[self._nfree] = segment
            self._nfree += 1
            segment = NULL
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        free(segment)

    @property
    def kept(self) -> int:
        return self._nfree


cdef class WriteCacheHalf:
    """See the module docstring. Keys are bkfast.dbstorage.index.qualified_key ints; entry ids ints.
    `pool`: where its SEGMENT_BYTES segments come from and go back to (none: malloc and free)."""

    def __cinit__(self, SegmentPool pool=None):
        self._pool = pool
        self._mutex = malloc(sizeof(pthread_mutex_t))
        self._ledgers_cap = 16
        self._ledgers = <LedgerRecord *>malloc(self._ledgers_cap * sizeof(LedgerRecord))
        self._ledger_index_cap = 32
        self._ledger_index = <uint32_t *>calloc(self._ledger_index_cap, sizeof(uint32_t))
        self._slots_cap = 1024
        self._slots = <EntrySlot *>calloc(self._slots_cap, sizeof(EntrySlot))
        self._segments_cap = 16
        self._segments = <uint8_t **>malloc(self._segments_cap * sizeof(uint8_t *))
        self._segment_sizes = <uint32_t *>malloc(self._segments_cap * sizeof(uint32_t))
        self._tail_segment = NO_SEGMENT
        if (self._mutex == NULL or self._ledgers == NULL or self._ledger_index == NULL or self._slots == NULL
                or self._segments == NULL or self._segment_sizes == NULL):
            raise MemoryError("write cache half: out of memory")
        pthread_mutex_init(<pthread_mutex_t *>self._mutex, NULL)

    def __dealloc__(self):
        cdef uint32_t i
        if self._segments != NULL:
            for i in range(self._nsegments):
                if self._pool is not None and self._segment_sizes[i] == C_SEGMENT_BYTES:
                    self._pool.give(self._segments[i])
                else:
                    free(self._segments[i])
        free(self._segments)
        free(self._segment_sizes)
        free(self._slots)
        free(self._ledger_index)
        free(self._ledgers)
        if self._mutex != NULL:
            pthread_mutex_destroy(<pthread_mutex_t *>self._mutex)
            free(self._mutex)

    # --- C internals: called with the mutex held ---------------------------------------------------
    cdef uint32_t _find_ledger(self, uint64_t scope_id, uint64_t ledger_id) noexcept nogil:
        """The ledger's record index, NOT_FOUND when the half never saw it."""
        cdef uint32_t mask = self._ledger_index_cap - 1
        cdef uint32_t at = <uint32_t>(_ledger_hash(scope_id, ledger_id) & mask)
        cdef uint32_t found
        cdef LedgerRecord *rec
        while True:
            found = self._ledger_index[at]
            if found == 0:
                return NOT_FOUND
            rec = &self._ledgers[found - 1]
            if rec.ledger_id == ledger_id and rec.scope_id == scope_id:
                return found - 1
            at = (at + 1) & mask

    cdef int _grow_ledger_index(self) noexcept nogil:
        cdef uint32_t cap = self._ledger_index_cap * 2
        cdef uint32_t *index = <uint32_t *>calloc(cap, sizeof(uint32_t))
        cdef uint32_t i, at
        if index == NULL:
            return -1
        for i in range(self._nledgers):
            at = <uint32_t>(_ledger_hash(self._ledgers[i].scope_id, self._ledgers[i].ledger_id) & (cap - 1))
            while index[at] != 0:
                at = (at + 1) & (cap - 1)
            index[at] = i + 1
        free(self._ledger_index)
        self._ledger_index, self._ledger_index_cap = index, cap
        return 0

    cdef uint32_t _add_ledger(self, uint64_t scope_id, uint64_t ledger_id) noexcept nogil:
        """A new record for the ledger (absent); NOT_FOUND when out of memory."""
        cdef LedgerRecord *grown
        cdef uint32_t at
        if self._nledgers == self._ledgers_cap:
            grown = <LedgerRecord *>realloc(self._ledgers, 2 * self._ledgers_cap * sizeof(LedgerRecord))
            if grown == NULL:
                return NOT_FOUND
            self._ledgers, self._ledgers_cap = grown, 2 * self._ledgers_cap
        if (self._nledgers + 1) * 4 > self._ledger_index_cap * 3 and self._grow_ledger_index() < 0:
            return NOT_FOUND
        self._ledgers[self._nledgers] = LedgerRecord(scope_id, ledger_id, -1, 0)
        at = <uint32_t>(_ledger_hash(scope_id, ledger_id) & (self._ledger_index_cap - 1))
        while self._ledger_index[at] != 0:
            at = (at + 1) & (self._ledger_index_cap - 1)
        self._nledgers += 1
        self._ledger_index[at] = self._nledgers
        return self._nledgers - 1

    cdef EntrySlot *_find_slot(self, uint32_t ledger, int64_t entry_id) noexcept nogil:
        """The slot holding (ledger record index, entry id), NULL when absent."""
        cdef EntrySlot *free_slot
        return self._probe(ledger, entry_id, &free_slot)

    cdef EntrySlot *_probe(self, uint32_t ledger, int64_t entry_id, EntrySlot **free_slot) noexcept nogil:
        """As _find_slot; when absent, `free_slot` is where it would go (the first tombstone on its
        probe path, else the empty slot that ended it)."""
        cdef uint64_t mask = self._slots_cap - 1
        cdef uint64_t at = _entry_hash(ledger, entry_id) & mask
        cdef EntrySlot *slot
        free_slot[0] = NULL
        while True:
            slot = &self._slots[at]
            if slot.ledger == 0:
                if free_slot[0] == NULL:
                    free_slot[0] = slot
                return NULL
            if slot.ledger == ledger + 1 and slot.entry_id == entry_id:
                return slot
            if slot.ledger == TOMBSTONE and free_slot[0] == NULL:
                free_slot[0] = slot
            at = (at + 1) & mask

    cdef int _rehash(self, uint64_t cap) noexcept nogil:
        """Rebuild the index at `cap` slots, live entries only (tombstones dropped)."""
        cdef EntrySlot *slots = <EntrySlot *>calloc(cap, sizeof(EntrySlot))
        cdef uint64_t i, at, live = 0
        cdef EntrySlot *old
        if slots == NULL:
            return -1
        for i in range(self._slots_cap):
            old = &self._slots[i]
            if old.ledger == 0 or old.ledger == TOMBSTONE:
                continue
            at = _entry_hash(old.ledger - 1, old.entry_id) & (cap - 1)
            while slots[at].ledger != 0:
                at = (at + 1) & (cap - 1)
            slots[at] = old[0]
            live += 1
        free(self._slots)
        self._slots, self._slots_cap, self._slots_used = slots, cap, live
        return 0

    cdef uint8_t *_reserve(self, uint32_t length, uint32_t *segment, uint32_t *offset) noexcept nogil:
        """Room for `length` bytes in the arena; NULL when out of memory."""
        cdef uint32_t size
        cdef uint8_t *block
        cdef uint8_t **segments
        cdef uint32_t *sizes
        if length <= C_SEGMENT_BYTES // 4 and self._tail_segment != NO_SEGMENT \
                and self._tail_used + length <= self._segment_sizes[self._tail_segment]:
            segment[0], offset[0] = self._tail_segment, self._tail_used
            self._tail_used += length
            return self._segments[self._tail_segment] + offset[0]
        if self._nsegments == self._segments_cap:
            segments = <uint8_t **>realloc(self._segments, 2 * self._segments_cap * sizeof(uint8_t *))
            if segments == NULL:
                return NULL
            self._segments = segments
            sizes = <uint32_t *>realloc(self._segment_sizes, 2 * self._segments_cap * sizeof(uint32_t))
            if sizes == NULL:
                return NULL
            self._segment_sizes = sizes
            self._segments_cap *= 2
        size = length if length > C_SEGMENT_BYTES // 4 else C_SEGMENT_BYTES
        if size == C_SEGMENT_BYTES and self._pool is not None:
            block = self._pool.take()
        else:
            block = <uint8_t *>malloc(size if size > 0 else 1)
        if block == NULL:
            return NULL
        self._segments[self._nsegments] = block
        self._segment_sizes[self._nsegments] = size
        segment[0], offset[0] = self._nsegments, 0
        if size == C_SEGMENT_BYTES:
            self._tail_segment, self._tail_used = self._nsegments, length
        self._nsegments += 1
        return block

    # --- the C API (_writecache.pxd): each call takes the mutex, but _put_locked --------------------
    cdef void lock_c(self) noexcept nogil:
        """Hold the mutex for several _put_locked calls (a run of puts: one lock, not one per entry)."""
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)

    cdef void unlock_c(self) noexcept nogil:
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)

    cdef int put_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, const uint8_t *data,
                   uint32_t length, Py_ssize_t limit) noexcept nogil:
        """Store a copy of the entry: PUT_OK; PUT_NO_ROOM when `limit` >= 0 and the half would hold more
        than `limit` bytes with it (nothing stored); PUT_NO_MEMORY."""
        cdef int answer
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        answer = self._put_locked(scope_id, ledger_id, entry_id, data, length, limit)
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        return answer

    cdef int _put_locked(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, const uint8_t *data,
                         uint32_t length, Py_ssize_t limit) noexcept nogil:
        cdef uint32_t ledger, segment, offset
        cdef Py_ssize_t need = length
        cdef EntrySlot *slot = NULL
        cdef EntrySlot *free_slot = NULL
        cdef uint8_t *room
        ledger = self._find_ledger(scope_id, ledger_id)
        if ledger != NOT_FOUND:
            slot = self._probe(ledger, entry_id, &free_slot)
        if slot == NULL:
            need += C_ENTRY_OVERHEAD + (C_LEDGER_OVERHEAD if ledger == NOT_FOUND else 0)
        if limit >= 0 and self.size + need > limit:
            return PUT_NO_ROOM
        if ledger == NOT_FOUND:
            ledger = self._add_ledger(scope_id, ledger_id)
            if ledger == NOT_FOUND:
                return PUT_NO_MEMORY
        room = self._reserve(length, &segment, &offset)
        if room == NULL:
            return PUT_NO_MEMORY
        if slot == NULL:
            if (self._slots_used + 1) * 4 > self._slots_cap * 3:
                if self._rehash(self._slots_cap * 2 if self.count * 2 >= <Py_ssize_t>self._slots_cap
                                else self._slots_cap) < 0:
                    return PUT_NO_MEMORY
                free_slot = NULL
            if free_slot == NULL:
                self._probe(ledger, entry_id, &free_slot)
            slot = free_slot
            if slot.ledger == 0:
                self._slots_used += 1
            slot.ledger = ledger + 1
            slot.entry_id = entry_id
            self._ledgers[ledger].count += 1
            self.count += 1
        memcpy(room, data, length)
        slot.segment, slot.offset, slot.length = segment, offset, length
        if entry_id > self._ledgers[ledger].last:
            self._ledgers[ledger].last = entry_id
        self.size += need
        return PUT_OK

    cdef Py_ssize_t copy_entry_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, uint8_t *out,
                                 Py_ssize_t out_len) noexcept nogil:
        """The entry's length, its bytes copied to `out` when it fits `out_len`; -1 when not cached."""
        cdef Py_ssize_t length = -1
        cdef uint32_t ledger
        cdef EntrySlot *slot
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        ledger = self._find_ledger(scope_id, ledger_id)
        slot = NULL if ledger == NOT_FOUND else self._find_slot(ledger, entry_id)
        if slot != NULL:
            length = slot.length
            if length <= out_len:
                memcpy(out, self._segments[slot.segment] + slot.offset, length)
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        return length

    # --- Python API ----------------------------------------------------------------------------------
    def put(self, key, int64_t entry_id, data) -> None:
        """Store a copy of `data` (any buffer) as entry `entry_id` of ledger `key`, whatever the size."""
        if not self.try_put(key, entry_id, data, -1):
            raise AssertionError("unreachable: a put without a limit always has room")

    def try_put(self, key, int64_t entry_id, data, Py_ssize_t limit) -> bool:
        """put unless the half would then hold more than `limit` bytes (False: nothing stored)."""
        cdef uint64_t scope_id, ledger_id
        cdef Py_buffer view
        cdef int answer
        _split_key(key, &scope_id, &ledger_id)
        if type(data) is bytes:
            if len(<bytes>data) > 0xFFFFFFFF:
                raise ValueError("a write cache entry is at most 4 GiB")
            answer = self.put_c(scope_id, ledger_id, entry_id, <const uint8_t *>PyBytes_AS_STRING(data),
                                <uint32_t>len(<bytes>data), limit)
        else:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            try:
                if view.len > 0xFFFFFFFF:
                    raise ValueError("a write cache entry is at most 4 GiB")
                answer = self.put_c(scope_id, ledger_id, entry_id, <const uint8_t *>view.buf,
                                    <uint32_t>view.len, limit)
            finally:
                PyBuffer_Release(&view)
        if answer == PUT_NO_MEMORY:
            raise MemoryError("write cache half: out of memory")
        return answer == PUT_OK

    def get(self, key, int64_t entry_id):
        """A copy of the entry's bytes, None when the half does not hold it."""
        cdef uint64_t scope_id, ledger_id
        cdef uint32_t ledger
        cdef EntrySlot *slot
        _split_key(key, &scope_id, &ledger_id)
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        try:
            ledger = self._find_ledger(scope_id, ledger_id)
            slot = NULL if ledger == NOT_FOUND else self._find_slot(ledger, entry_id)
            if slot == NULL:
                return None
            return PyBytes_FromStringAndSize(<char *>self._segments[slot.segment] + slot.offset, slot.length)
        finally:
            pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)

    def last_entry(self, key) -> int:
        """The highest entry id the half holds of the ledger, -1 when none."""
        cdef uint64_t scope_id, ledger_id
        cdef uint32_t ledger
        cdef int64_t last = -1
        _split_key(key, &scope_id, &ledger_id)
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        ledger = self._find_ledger(scope_id, ledger_id)
        if ledger != NOT_FOUND:
            last = self._ledgers[ledger].last
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        return last

    def entry_ids(self, key) -> list:
        """The ids of the ledger's entries the half holds (any order). Scans the whole index: for the rare
        GET_LIST_OF_ENTRIES, not for the add or read path."""
        cdef uint64_t scope_id, ledger_id, i
        cdef uint32_t ledger
        cdef list out = []
        _split_key(key, &scope_id, &ledger_id)
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        try:
            ledger = self._find_ledger(scope_id, ledger_id)
            if ledger != NOT_FOUND and self._ledgers[ledger].count:
                for i in range(self._slots_cap):
                    if self._slots[i].ledger == ledger + 1:
                        out.append(self._slots[i].entry_id)
        finally:
            pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
        return out

    def delete_ledger(self, key) -> None:
        """Forget the ledger's entries (their bytes stay in the arena until the half is dropped)."""
        cdef uint64_t scope_id, ledger_id, i
        cdef uint32_t ledger
        _split_key(key, &scope_id, &ledger_id)
        pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
        ledger = self._find_ledger(scope_id, ledger_id)
        if ledger != NOT_FOUND and self._ledgers[ledger].count:
            for i in range(self._slots_cap):
                if self._slots[i].ledger == ledger + 1:
                    self._slots[i].ledger = TOMBSTONE
            self.count -= self._ledgers[ledger].count
            self._ledgers[ledger].count = 0
            self._ledgers[ledger].last = -1
        pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)


    cdef RunItem *_snapshot(self, Py_ssize_t *n) except NULL:
        cdef RunItem *items = <RunItem *>malloc((self.count + 1) * sizeof(RunItem))
        cdef Py_ssize_t k = 0
        cdef uint64_t i
        cdef EntrySlot *slot
        cdef LedgerRecord *rec
        if items == NULL:
            raise MemoryError("write cache half: out of memory")
        with nogil:
            pthread_mutex_lock(<pthread_mutex_t *>self._mutex)
            for i in range(self._slots_cap):
                slot = &self._slots[i]
                if slot.ledger == 0 or slot.ledger == TOMBSTONE:
                    continue
                rec = &self._ledgers[slot.ledger - 1]
                items[k] = RunItem(rec.scope_id, rec.ledger_id, slot.entry_id, slot.segment, slot.offset,
                                   slot.length)
                k += 1
            pthread_mutex_unlock(<pthread_mutex_t *>self._mutex)
            qsort(items, k, sizeof(RunItem), _run_order)
        n[0] = k
        return items

    def __repr__(self) -> str:
        return f"<WriteCacheHalf {self.count} entries, {self.size} bytes, {self._nsegments} segments>"


# put_entries' answers: why it stopped
PUT_ENTRIES_DONE = 0
PUT_ENTRIES_NO_ROOM = 1
PUT_ENTRIES_MALFORMED = 2


cdef struct PendingPut:
    uint64_t scope_id
    int64_t ledger_id
    int64_t entry_id
    const uint8_t *data
    uint32_t length


def put_entries(WriteCacheHalf half, list entries, Py_ssize_t start, Py_ssize_t limit):
    """Put entries[start:] (stored entries as received, bytes: their ids come from their headers) into
    `half` in order while the half stays within `limit` bytes: (index of the first entry not stored,
    PUT_ENTRIES_DONE / PUT_ENTRIES_NO_ROOM / PUT_ENTRIES_MALFORMED: too short for its ids, negative ids,
    not bytes or over 4 GiB; the caller's single-entry path says exactly why). One C loop for a whole batch
    of adds, the copies made with the GIL released (the list keeps the bytes alive meanwhile)."""
    cdef Py_ssize_t n = len(entries), end = start, i, length
    cdef object entry
    cdef PendingPut *puts
    cdef PendingPut *put
    cdef int answer = PUT_OK
    cdef int why = PUT_ENTRIES_DONE
    if start >= n:
        return n, why
    puts = <PendingPut *>malloc((n - start) * sizeof(PendingPut))
    if puts == NULL:
        raise MemoryError("write cache: out of memory")
    try:
        while end < n:
            entry = entries[end]
            if type(entry) is not bytes:
                why = PUT_ENTRIES_MALFORMED
                break
            length = len(<bytes>entry)
            put = &puts[end - start]
            if (length > 0xFFFFFFFF or peek_ids(<const uint8_t *>PyBytes_AS_STRING(entry), length, &put.scope_id,
                                                 &put.ledger_id, &put.entry_id) < 0
                    or put.ledger_id < 0 or put.entry_id < 0):
                why = PUT_ENTRIES_MALFORMED
                break
            put.data, put.length = <const uint8_t *>PyBytes_AS_STRING(entry), <uint32_t>length
            end += 1
        i = start
        with nogil:
            # One lock for the whole run (a lock and unlock per entry measured ~5% of the reactor's time).
            pthread_mutex_lock(<pthread_mutex_t *>half._mutex)
            while i < end:
                put = &puts[i - start]
                answer = half._put_locked(put.scope_id, <uint64_t>put.ledger_id, put.entry_id, put.data,
                                          put.length, limit)
                if answer != PUT_OK:
                    break
                i += 1
            pthread_mutex_unlock(<pthread_mutex_t *>half._mutex)
    finally:
        free(puts)
    if answer == PUT_NO_MEMORY:
        raise MemoryError("write cache half: out of memory")
    if answer == PUT_NO_ROOM:
        return i, PUT_ENTRIES_NO_ROOM
    return i, why


include "_writecache_reads.pxi"
