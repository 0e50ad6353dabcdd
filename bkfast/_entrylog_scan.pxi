# Included by bkfast/_entrylog.pyx (one module): the record scanner of a log region and the parser of
# a run of one ledger's records read in one go. The write side (BufferedChannel) is in the .pyx.


cdef class LogScanner:
    """Walks `int size | entry` records of a log region in chunks of `chunk_size` bytes.

    next_batch() returns a list of (offset, size, scope_id, ledger_id, entry_id, data) tuples, where
    offset is the file offset of the entry bytes (location = (log_id << 32) | offset) and data is the
    entry (or None when with_data is False). As Java's scanner does: a size <= 0 is padding (skip one
    byte); a record whose ledger id is -1 is a ledgers-map batch (skipped). Records too short for their
    ids are skipped. A record that runs past `end` is a torn tail: scanning stops and `truncated` is set.
    The zeros a direct-mode log can end with (up to a block past its last record, after a crash) are
    padding like any other: the scan ends cleanly at the last record.
    """

    cdef BufferedChannel channel
    cdef int64_t pos
    cdef readonly int64_t end
    cdef Py_ssize_t chunk_size
    cdef readonly bint truncated

    def __cinit__(self, BufferedChannel channel, int64_t start, int64_t end, Py_ssize_t chunk_size=1 << 20):
        self.channel = channel
        self.pos = start
        self.end = end
        self.chunk_size = chunk_size if chunk_size >= 4096 else 4096
        self.truncated = False

    @property
    def position(self):
        return self.pos

    @property
    def done(self):
        return self.truncated or self.pos + SIZE_LEN > self.end

    cdef bytes read_chunk(self, Py_ssize_t *got):
        """The next chunk of the log from pos (chunk_size bytes, not past end); `got` says how much the
        file held."""
        cdef Py_ssize_t want = self.chunk_size
        cdef bytes chunk
        if self.end - self.pos < want:
            want = self.end - self.pos
        chunk = PyBytes_FromStringAndSize(NULL, want)
        got[0] = self.channel.read_into(<uint8_t*>PyBytes_AS_STRING(chunk), self.pos, want)
        if got[0] < want:
            # The file is shorter than `end` said: treat the missing part as a torn tail.
            self.end = self.pos + got[0]
        return chunk

    cdef list torn_at(self, Py_ssize_t i, list out):
        """The log ends in a torn record at pos + i: the scan stops there, with the entries before it."""
        self.truncated = True
        self.pos += i
        return out

    def next_batch(self, bint with_data=True):
        cdef Py_ssize_t got, i = 0, need
        cdef int32_t size
        cdef uint64_t scope = 0
        cdef int64_t ledger = 0, entry = 0
        cdef const uint8_t *p
        cdef bytes chunk, data
        cdef list out = []
        if self.truncated or self.pos + SIZE_LEN > self.end:
            return out
        chunk = self.read_chunk(&got)
        p = <const uint8_t*>PyBytes_AS_STRING(chunk)
        while True:
            if self.pos + i + SIZE_LEN > self.end:
                self.pos += i
                return out
            if i + SIZE_LEN > got:
                break
            size = <int32_t>get_u32(p + i)
            if size <= 0:
                i += 1                                   # padding
                continue
            need = SIZE_LEN + (size if size < SCOPED_IDS_LEN else SCOPED_IDS_LEN)
            if i + need > got:
                if self.pos + i + need > self.end:
                    return self.torn_at(i, out)
                break                                    # refill from this record
            if self.pos + i + SIZE_LEN + size > self.end:
                return self.torn_at(i, out)
            if size >= 8 and is_map_record(p + i + SIZE_LEN):
                i += SIZE_LEN + size
                continue
            if entry_ids(p + i + SIZE_LEN, size, &scope, &ledger, &entry) != 0:
                i += SIZE_LEN + size                     # too short to be an entry
                continue
            if i + SIZE_LEN + size <= got:
                data = PyBytes_FromStringAndSize(<const char*>(p + i + SIZE_LEN), size) if with_data else None
                out.append((self.pos + i + SIZE_LEN, size, scope, ledger, entry, data))
                i += SIZE_LEN + size
                continue
            # The record runs past this chunk: read it on its own, then refill after it.
            if with_data:
                data = PyBytes_FromStringAndSize(NULL, size)
                if self.channel.read_into(<uint8_t*>PyBytes_AS_STRING(data), self.pos + i + SIZE_LEN,
                                          size) < size:
                    return self.torn_at(i, out)
            else:
                data = None
            out.append((self.pos + i + SIZE_LEN, size, scope, ledger, entry, data))
            i += SIZE_LEN + size
            break
        self.pos += i
        return out


cdef enum:
    RUN_COPY_MAX = 128  # entries copied per GIL release in parse_run


cdef inline void _copy_run(const uint8_t *p, Py_ssize_t *src_offsets, Py_ssize_t *sizes, char **dsts,
                           Py_ssize_t count) noexcept:
    cdef Py_ssize_t j
    with nogil:
        for j in range(count):
            memcpy(dsts[j], p + src_offsets[j], sizes[j])


def parse_run(data, int64_t base, int64_t location_base, uint64_t want_scope, int64_t want_ledger,
              Py_ssize_t max_count):
    """Consecutive entries of one ledger at the start of `data` (file bytes from offset `base`, which
    holds an int size). Stops at the first record of another ledger, a map record, padding, an
    incomplete record, or after max_count entries.

    Returns ([(entry_id, location_base | offset, entry bytes)], file offset after the last entry taken).
    Used by read-ahead: a flush writes each ledger's entries contiguously and in entry order.
    """
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, i = 0, taken = 0, k
    cdef int32_t size
    cdef uint64_t scope = 0
    cdef int64_t ledger = 0, entry = 0
    cdef list out = []
    cdef bytes copy
    # The copies are made with the GIL released: a run is up to a few MiB copied into fresh memory
    # (page faults included), and holding the GIL for it stalled the reactor and the journal thread
    # behind every read-ahead of a catch-up reader (profiled with py-spy --gil).
    cdef Py_ssize_t[RUN_COPY_MAX] src_offsets
    cdef Py_ssize_t[RUN_COPY_MAX] sizes
    cdef char *dsts[RUN_COPY_MAX]
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        while taken < max_count and i + SIZE_LEN <= n:
            size = <int32_t>get_u32(p + i)
            if size < MIN_SANE_ENTRY_SIZE or i + SIZE_LEN + size > n:
                break
            if is_map_record(p + i + SIZE_LEN):
                break
            if entry_ids(p + i + SIZE_LEN, size, &scope, &ledger, &entry) != 0:
                break
            if scope != want_scope or ledger != want_ledger:
                break
            copy = PyBytes_FromStringAndSize(NULL, size)
            k = taken % RUN_COPY_MAX
            src_offsets[k] = i + SIZE_LEN
            sizes[k] = size
            dsts[k] = PyBytes_AS_STRING(copy)
            out.append((entry, location_base | (base + i + SIZE_LEN), copy))
            taken += 1
            i += SIZE_LEN + size
            if k == RUN_COPY_MAX - 1:
                _copy_run(p, src_offsets, sizes, dsts, RUN_COPY_MAX)
        if taken % RUN_COPY_MAX:
            _copy_run(p, src_offsets, sizes, dsts, taken % RUN_COPY_MAX)
    finally:
        PyBuffer_Release(&view)
    return out, base + i
