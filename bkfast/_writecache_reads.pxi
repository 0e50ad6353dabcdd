# Included by _writecache.pyx: the read-ahead cache made of write-cache halves, and the entry source the
# reactor's read loops look entries up in (both described in the module docstring).

import threading

from bkfast._entrysource cimport EntrySource
from bkfast._stats cimport Counter


cdef class ReadCacheRing:
    """DbLedgerStorage's read-ahead cache (Java's ReadCache): a ring of `segments` halves of
    max_size / segments bytes each; entries go to the newest, and when it is full the oldest is dropped
    whole (FIFO in coarse steps, no per-read bookkeeping). An entry already held is not stored again, and
    one larger than a segment is not stored. `on_change(halves)` is told the ring (newest first) whenever
    it changes, so a MemoryEntries can look in it. Puts come from the read pool's threads: one lock."""

    cdef SegmentPool _pool
    cdef readonly Py_ssize_t max_size
    cdef Py_ssize_t _segment_size
    cdef Py_ssize_t _segments_max
    cdef object _lock
    cdef tuple _halves
    cdef public object on_change

    def __cinit__(self, Py_ssize_t max_size_bytes, Py_ssize_t segments=4):
        self.max_size = max(0, max_size_bytes)
        self._segments_max = max(1, segments)
        self._segment_size = self.max_size // self._segments_max
        self._pool = SegmentPool(<uint32_t>min(self.max_size // SEGMENT_BYTES + self._segments_max, 1 << 20))
        self._lock = threading.Lock()
        self._halves = (WriteCacheHalf(self._pool),)
        self.on_change = None

    @property
    def enabled(self) -> bool:
        return self._segment_size > 0

    @property
    def halves(self) -> tuple:
        return self._halves

    @property
    def size(self) -> int:
        return sum((<WriteCacheHalf>h).size for h in self._halves)

    @property
    def count(self) -> int:
        return sum((<WriteCacheHalf>h).count for h in self._halves)

    def get(self, key, int64_t entry_id):
        for half in self._halves:
            data = (<WriteCacheHalf>half).get(key, entry_id)
            if data is not None:
                return data
        return None

    def put(self, key, int64_t entry_id, data) -> None:
        self.put_run(key, [(entry_id, 0, data)])

    def put_run(self, key, list run) -> None:
        """put() for each (entry_id, location, data) of a read-ahead run, under one lock."""
        cdef uint64_t scope_id, ledger_id
        cdef WriteCacheHalf newest
        cdef Py_ssize_t limit = self._segment_size
        cdef bint rotated = False
        cdef int64_t entry_id
        if limit <= 0:
            return
        _split_key(key, &scope_id, &ledger_id)
        with self._lock:
            newest = self._halves[0]
            for item in run:
                entry_id = item[0]
                data = item[2]
                if len(data) + C_ENTRY_OVERHEAD + C_LEDGER_OVERHEAD > limit or self._holds(scope_id, ledger_id,
                                                                                          entry_id):
                    continue
                if not newest.try_put(key, entry_id, data, limit):
                    newest = WriteCacheHalf(self._pool)
                    self._halves = (newest,) + self._halves[: self._segments_max - 1]
                    rotated = True
                    newest.put(key, entry_id, data)
            if rotated and self.on_change is not None:
                self.on_change(self._halves)

    cdef bint _holds(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id):
        for half in self._halves:
            # copy_entry_c with no room to copy into: only whether (and how long) the half holds it
            if (<WriteCacheHalf>half).copy_entry_c(scope_id, ledger_id, entry_id, NULL, -1) >= 0:
                return True
        return False

    def delete_ledger(self, key) -> None:
        with self._lock:
            for half in self._halves:
                (<WriteCacheHalf>half).delete_ledger(key)


cdef class MemoryEntries(EntrySource):
    """The halves, per ledger directory, that hold entries in memory: the write cache's (active, then
    flushing) and the read-ahead cache's (newest first), each set by its owner when it changes. find_c
    picks the directory as DbLedgerStorage does (ledger id, or scope id ^ ledger id, modulo the number of
    directories), copies the entry out under the half's mutex into a scratch buffer, and counts the hit
    in that directory's write- or read-cache hit counter."""

    cdef list _write
    cdef list _read
    cdef list _write_hits
    cdef list _read_hits
    cdef uint8_t *_scratch
    cdef Py_ssize_t _scratch_cap
    cdef Py_ssize_t _directories

    def __cinit__(self, Py_ssize_t directories):
        if directories < 1:
            raise ValueError("at least one directory")
        self._directories = directories
        self._write = [()] * directories
        self._read = [()] * directories
        self._write_hits = [None] * directories
        self._read_hits = [None] * directories
        self._scratch_cap = 64 * 1024
        self._scratch = <uint8_t *>malloc(self._scratch_cap)
        if self._scratch == NULL:
            raise MemoryError("memory entries: out of memory")

    def __dealloc__(self):
        free(self._scratch)

    def set_write_halves(self, Py_ssize_t directory, tuple halves) -> None:
        self._write[directory] = tuple(<WriteCacheHalf?>h for h in halves)

    def set_read_halves(self, Py_ssize_t directory, tuple halves) -> None:
        self._read[directory] = tuple(<WriteCacheHalf?>h for h in halves)

    def set_hit_counters(self, Py_ssize_t directory, Counter write_hits, Counter read_hits) -> None:
        self._write_hits[directory] = write_hits
        self._read_hits[directory] = read_hits

    cdef Py_ssize_t find_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id,
                           const uint8_t **data) except -2:
        cdef Py_ssize_t d, length
        if entry_id < 0:
            return -1
        d = <Py_ssize_t>((ledger_id if scope_id == 0 else scope_id ^ ledger_id) % <uint64_t>self._directories)
        length = self._find_in(<tuple>self._write[d], scope_id, ledger_id, entry_id)
        if length >= 0:
            counter = self._write_hits[d]
        else:
            length = self._find_in(<tuple>self._read[d], scope_id, ledger_id, entry_id)
            if length < 0:
                return -1
            counter = self._read_hits[d]
        if counter is not None:
            (<Counter>counter).inc()
        data[0] = self._scratch
        return length

    cdef Py_ssize_t _find_in(self, tuple halves, uint64_t scope_id, uint64_t ledger_id,
                             int64_t entry_id) except -2:
        cdef Py_ssize_t length
        cdef uint8_t *grown
        for half in halves:
            while True:
                length = (<WriteCacheHalf>half).copy_entry_c(scope_id, ledger_id, entry_id, self._scratch,
                                                           self._scratch_cap)
                if length <= self._scratch_cap:
                    break
                grown = <uint8_t *>realloc(self._scratch, length)
                if grown == NULL:
                    raise MemoryError("memory entries: out of memory")
                self._scratch, self._scratch_cap = grown, length
            if length >= 0:
                return length
        return -1
