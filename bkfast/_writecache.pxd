# The write cache half's C view (bkfast/_writecache.pyx), for Cython code that puts or looks up entries
# without the GIL (the add workers of docs/threads.md). Every call takes the half's own mutex.

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


# put_c's answers
cdef enum:
    PUT_OK = 0
    PUT_NO_ROOM = 1
    PUT_NO_MEMORY = -1

cdef struct LedgerRecord:
    uint64_t scope_id           # the qualified key's high 64 bits (0 for a plain ledger)
    uint64_t ledger_id          # its low 64 bits
    int64_t last                # highest entry id cached, -1 when none (or deleted)
    uint32_t count              # live entries


cdef struct EntrySlot:
    int64_t entry_id
    uint32_t ledger             # index into the ledger records + 1; 0: empty; TOMBSTONE: deleted
    uint32_t segment
    uint32_t offset
    uint32_t length


cdef struct RunItem:            # one entry of a flush's snapshot, sorted by (scope, ledger, entry)
    uint64_t scope_id
    uint64_t ledger_id
    int64_t entry_id
    uint32_t segment
    uint32_t offset
    uint32_t length


cdef class SegmentPool:
    cdef void *_mutex
    cdef uint8_t **_free
    cdef uint32_t _nfree, _max_free

    cdef uint8_t *take(self) noexcept nogil
    cdef void give(self, uint8_t *segment) noexcept nogil


cdef class WriteCacheHalf:
    cdef SegmentPool _pool
    cdef void *_mutex
    cdef LedgerRecord *_ledgers
    cdef uint32_t _nledgers, _ledgers_cap
    cdef uint32_t *_ledger_index
    cdef uint32_t _ledger_index_cap
    cdef EntrySlot *_slots
    cdef uint64_t _slots_cap, _slots_used
    cdef uint8_t **_segments
    cdef uint32_t *_segment_sizes
    cdef uint32_t _nsegments, _segments_cap
    cdef uint32_t _tail_segment, _tail_used
    cdef readonly Py_ssize_t size
    cdef readonly Py_ssize_t count

    cdef void lock_c(self) noexcept nogil
    cdef void unlock_c(self) noexcept nogil
    cdef int put_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, const uint8_t *data,
                   uint32_t length, Py_ssize_t limit) noexcept nogil
    cdef int _put_locked(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, const uint8_t *data,
                         uint32_t length, Py_ssize_t limit) noexcept nogil
    cdef uint32_t _find_ledger(self, uint64_t scope_id, uint64_t ledger_id) noexcept nogil
    cdef int _grow_ledger_index(self) noexcept nogil
    cdef uint32_t _add_ledger(self, uint64_t scope_id, uint64_t ledger_id) noexcept nogil
    cdef EntrySlot *_find_slot(self, uint32_t ledger, int64_t entry_id) noexcept nogil
    cdef EntrySlot *_probe(self, uint32_t ledger, int64_t entry_id, EntrySlot **free_slot) noexcept nogil
    cdef int _rehash(self, uint64_t cap) noexcept nogil
    cdef uint8_t *_reserve(self, uint32_t length, uint32_t *segment, uint32_t *offset) noexcept nogil
    cdef RunItem *_snapshot(self, Py_ssize_t *n) except NULL
    cdef Py_ssize_t copy_entry_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id, uint8_t *out,
                                 Py_ssize_t out_len) noexcept nogil
