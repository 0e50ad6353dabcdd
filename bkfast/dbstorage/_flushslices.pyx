# cython: language_level=3
"""A write-cache half cut into flush slices, each already framed as the entry log stores it.

Owns: the order a half is flushed in (its entries by scope, ledger and entry id: the half's snapshot),
where slices end (at most `max_entries` entries and `max_bytes` bytes of entries, one entry at least, and
never across the boundary between scope 0 and scoped ledgers), the bytes of a slice (`int size | entry`
for each entry, back to back: what an entry log holds, so the log takes a slice with one copy), and the
location index's keys and values of a written slice.

Why: the flush thread held the GIL ~0.7 us per 1 KiB add (py-spy, bench/thread_cpu_scaling.py --gil),
more than the reactor: a memoryview, an int and list slots per entry from the half, a buffer view and a
location int per entry in the channel, two struct packs per entry for the index. Here an entry costs no
Python object until its index key and value, the copy out of the half runs with the GIL released, and
the log gets one buffer per slice.

Must never: change what lands on disk (the entry log bytes and the index records are those of
EntryLogger.add_entries and LocationBatch.add), or hold the half's mutex with the GIL (the copy takes it
with the GIL released, as other threads take it with the GIL held).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from bkfast._bigendian cimport put_u32, put_u64
from bkfast._writecache cimport RunItem, WriteCacheHalf

__all__ = ["FlushSlices", "FlushSlice"]


cdef struct Placed:                 # an entry of a slice: its ids and where its size field is in `framed`
    uint64_t scope_id
    uint64_t ledger_id
    int64_t entry_id
    uint32_t length
    Py_ssize_t at


@cython.final
cdef class FlushSlice:
    """One slice: `framed` (the log's bytes for its entries), `count` entries of `nbytes` bytes (without
    their size fields), `scoped` (all of a scope other than 0), `min_length` / `max_length` (its shortest
    and longest entry), and
    `ledgers`: [(scope_id, ledger_id, entries, their bytes in `framed`)] in order."""

    cdef readonly bytes framed
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t nbytes
    cdef readonly Py_ssize_t min_length
    cdef readonly Py_ssize_t max_length
    cdef readonly bint scoped
    cdef readonly list ledgers
    cdef Placed *placed

    def __dealloc__(self):
        free(self.placed)

    def runs(self):
        """[(scope_id, ledger_id, entry ids, memoryviews of its entries in `framed`)] per ledger, in order:
        the slice as the entry logger's per-ledger path takes it."""
        cdef list out = []
        cdef Py_ssize_t k = 0, end
        cdef Placed *p
        view = memoryview(self.framed)
        for scope_id, ledger_id, entries, _ in self.ledgers:
            ids, datas = [], []
            end = k + entries
            while k < end:
                p = &self.placed[k]
                ids.append(p.entry_id)
                datas.append(view[p.at + 4:p.at + 4 + p.length])
                k += 1
            out.append((scope_id, ledger_id, ids, datas))
        return out

    def put_locations(self, put, int64_t log_id, int64_t offset):
        """put(key, value) for each entry of this scope-0 slice, written at `offset` of entry log `log_id`:
        the location index's big-endian (ledger id, entry id) key and (log_id << 32 | the entry's offset)
        value (bkfast.dbstorage.index)."""
        cdef Py_ssize_t k
        cdef Placed *p
        cdef uint8_t key[16]
        cdef uint8_t value[8]
        if self.scoped:
            raise ValueError("a scoped slice's locations have 24-byte keys: put them from runs()")
        if log_id < 0 or offset < 0:
            raise ValueError(f"no location at log {log_id}, offset {offset}")
        for k in range(self.count):
            p = &self.placed[k]
            put_u64(key, p.ledger_id)
            put_u64(key + 8, <uint64_t>p.entry_id)
            put_u64(value, (<uint64_t>log_id << 32) | <uint64_t>(offset + p.at + 4))
            put(PyBytes_FromStringAndSize(<const char *>key, 16), PyBytes_FromStringAndSize(<const char *>value, 8))


@cython.final
cdef class FlushSlices:
    """Iterates a half's entries as FlushSlice objects (see the module docstring). The half must not
    change while it is flushed (it is the write cache's flushing half)."""

    cdef WriteCacheHalf half
    cdef RunItem *items
    cdef Py_ssize_t n
    cdef Py_ssize_t next
    cdef readonly Py_ssize_t max_entries
    cdef readonly Py_ssize_t max_bytes

    def __cinit__(self, WriteCacheHalf half, Py_ssize_t max_entries, Py_ssize_t max_bytes):
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"a flush slice needs room: {max_entries} entries, {max_bytes} bytes")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.items = half._snapshot(&self.n)
        self.half = half

    def __dealloc__(self):
        free(self.items)

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t start = self.next, end, nbytes = 0
        cdef RunItem *item
        cdef bint scoped
        if start >= self.n:
            self.half = None            # hold the half no longer than the flush needs it
            free(self.items)
            self.items = NULL
            self.n = self.next = 0
            raise StopIteration
        scoped = self.items[start].scope_id != 0
        end = start
        while end < self.n and end - start < self.max_entries:
            item = &self.items[end]
            if (item.scope_id != 0) != scoped or (end > start and nbytes + item.length > self.max_bytes):
                break
            nbytes += item.length
            end += 1
        self.next = end
        return self._frame(start, end, nbytes, scoped)

    cdef FlushSlice _frame(self, Py_ssize_t start, Py_ssize_t end, Py_ssize_t nbytes, bint scoped):
        cdef FlushSlice piece = FlushSlice.__new__(FlushSlice)
        cdef Py_ssize_t count = end - start, k, at = 0, run_start
        cdef Py_ssize_t min_length = -1, max_length = 0
        cdef RunItem *item
        cdef uint8_t *dst
        cdef WriteCacheHalf half = self.half
        piece.framed = PyBytes_FromStringAndSize(NULL, nbytes + 4 * count)
        piece.placed = <Placed *>malloc(count * sizeof(Placed))
        if piece.placed == NULL:
            raise MemoryError("flush slice: out of memory")
        dst = <uint8_t *>PyBytes_AS_STRING(piece.framed)
        with nogil:
            half.lock_c()
            for k in range(count):
                item = &self.items[start + k]
                put_u32(dst + at, item.length)
                memcpy(dst + at + 4, half._segments[item.segment] + item.offset, item.length)
                piece.placed[k] = Placed(item.scope_id, item.ledger_id, item.entry_id, item.length, at)
                at += 4 + item.length
                if min_length < 0 or item.length < min_length:
                    min_length = item.length
                if item.length > max_length:
                    max_length = item.length
            half.unlock_c()
        piece.count, piece.nbytes, piece.scoped = count, nbytes, scoped
        piece.min_length, piece.max_length = min_length, max_length
        piece.ledgers = []
        run_start = 0
        for k in range(1, count + 1):
            if (k == count or piece.placed[k].ledger_id != piece.placed[run_start].ledger_id
                    or piece.placed[k].scope_id != piece.placed[run_start].scope_id):
                at = (piece.placed[k].at if k < count else nbytes + 4 * count) - piece.placed[run_start].at
                piece.ledgers.append((piece.placed[run_start].scope_id, piece.placed[run_start].ledger_id,
                                      k - run_start, at))
                run_start = k
        return piece
