# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Entry log file I/O in Cython: the buffered channel and the record scanner (the hot path).

Owns: the byte framing of an entry log body (`int size | entry`, spec/bookkeeper-formats.md §4.4), the
write buffer of the log being written (appends are memcpy'd into it; the file sees large pwrites with
the GIL released, through an O_DIRECT fd in direct mode), buffer-aware reads (an entry still in the
buffer is served from memory, the rest with pread, GIL released), fdatasync with the GIL released, and
the scanner that walks a region of a log file record by record (padding skipped, ledgers-map
pseudo-entries skipped, a torn tail detected; in the included _entrylog_scan.pxi).

Must never: know about file names, log ids allocation, the ledgers map layout or rotation (that is
bkfast.storage.entrylogger), open or choose files (it is handed file descriptors), or import bkfast
modules other than the leaf `bkfast.errors`.

Concurrency contract: calls that write (add_entry, write, write_at, flush, sync, close) must be
serialized by the caller. Reads may run in other threads at the same time: every change to the buffer
and to the buffer/file boundary happens with the GIL held, and a read copies its in-buffer part under
the GIL before it preads its in-file part (bytes below the boundary never change again).

Direct mode (a second, O_DIRECT fd to write through): the page cache copy of every written byte cost ~40%
of a bookie's CPU with 16 KiB entries; O_DIRECT lets the disk DMA from the (page-aligned) buffer instead.
The file offset of buf[0] stays a multiple of BLOCK, so every write is whole aligned blocks: a flush at
an unaligned position writes the last block zero-filled past the logical end and keeps that partial block
at the head of the buffer, so the next flush rewrites it with more bytes. The file can therefore be up to
BLOCK - 1 bytes longer than the log (zeros) until finish() cuts it, or for good after a crash: readers
take those zeros for padding (LogScanner) or for the end of the ledgers map. Reads never use the O_DIRECT
fd (unaligned preads fail there); they use `fd`, which the kernel keeps coherent with direct writes.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.errno cimport errno, EINTR, EIO
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, int32_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memmove, memset
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport pread, pwrite, fdatasync, ftruncate, close as c_close

from bkfast._bigendian cimport get_u32, get_u64, put_u32

cdef extern from "stdlib.h" nogil:
    int posix_memalign(void **memptr, size_t alignment, size_t size)

cdef extern from "fcntl.h" nogil:
    int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags)
    enum:
        SYNC_FILE_RANGE_WAIT_BEFORE
        SYNC_FILE_RANGE_WRITE
        SYNC_FILE_RANGE_WAIT_AFTER

from bkfast.errors import StorageCorruptionError

cdef enum:
    SIZE_LEN = 4
    MIN_SANE_ENTRY_SIZE = 16     # ledgerId + entryId (Java's MIN_SANE_ENTRY_SIZE)
    SCOPED_IDS_LEN = 25          # flags(1) + scope(8) + ledger(8) + entry(8) of a v2 (scoped) entry
    SCRATCH = 4096               # first read of an entry: its size and, usually, all of it
    # Direct writes: file offsets, lengths and memory aligned to a page, which every device accepts
    # (logical blocks are 512 B or 4 KiB).
    BLOCK = 4096
    # Appends of at least this many bytes are copied into the buffer with the GIL released (copy_in).
    NOGIL_COPY_BYTES = 65536

LOGFILE_HEADER_SIZE = 1024
DIRECT_BLOCK = BLOCK
INVALID_LID = -1
LEDGERS_MAP_ENTRY_ID = -2
MIN_ENTRY_SIZE = MIN_SANE_ENTRY_SIZE


# --- raw syscalls (GIL released by the callers) ----------------------------------------------------------
cdef int pwrite_all(int fd, const uint8_t *p, Py_ssize_t n, int64_t off) noexcept nogil:
    """Write all n bytes at off; 0 or an errno."""
    cdef Py_ssize_t rc
    while n > 0:
        rc = pwrite(fd, p, n, <off_t>off)
        if rc < 0:
            if errno == EINTR:
                continue
            return errno
        p += rc
        n -= rc
        off += rc
    return 0


cdef int pwritev2_all(int fd, const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb,
                      int64_t off) noexcept nogil:
    """Write a then b contiguously at off with as few syscalls as the kernel allows; 0 or an errno."""
    cdef iovec iov[2]
    cdef Py_ssize_t rc
    while na > 0:
        iov[0].iov_base = <void*>a
        iov[0].iov_len = na
        iov[1].iov_base = <void*>b
        iov[1].iov_len = nb
        rc = pwritev(fd, iov, 2, <off_t>off)
        if rc < 0:
            if errno == EINTR:
                continue
            return errno
        off += rc
        if rc >= na:
            rc -= na
            na = 0
            b += rc
            nb -= rc
        else:
            a += rc
            na -= rc
    return pwrite_all(fd, b, nb, off)


cdef Py_ssize_t pread_upto(int fd, uint8_t *p, Py_ssize_t n, int64_t off, int *err,
                           bint direct=False) noexcept nogil:
    """Read up to n bytes at off (fewer only at end of file); sets *err to an errno on failure.
    `direct`: fd is O_DIRECT (p, n and off block-aligned), so a read that ends short of a block boundary
    is the end of the file (another pread there would be unaligned and fail with EINVAL)."""
    cdef Py_ssize_t got = 0, rc
    err[0] = 0
    while got < n:
        rc = pread(fd, p + got, n - got, <off_t>(off + got))
        if rc < 0:
            if errno == EINTR:
                continue
            err[0] = errno
            return got
        if rc == 0:
            break
        got += rc
        if direct and rc % BLOCK:
            break
    return got


cdef inline int entry_ids(const uint8_t *p, Py_ssize_t n, uint64_t *scope, int64_t *ledger,
                          int64_t *entry) noexcept nogil:
    """Ids of a stored entry of n bytes: 0 ok, -1 too short for its format."""
    if n >= 1 and (p[0] & 0x80):
        if n < SCOPED_IDS_LEN:
            return -1
        scope[0] = get_u64(p + 1)
        ledger[0] = <int64_t>get_u64(p + 9)
        entry[0] = <int64_t>get_u64(p + 17)
        return 0
    if n < MIN_SANE_ENTRY_SIZE:
        return -1
    scope[0] = 0
    ledger[0] = <int64_t>get_u64(p)
    entry[0] = <int64_t>get_u64(p + 8)
    return 0


cdef inline bint is_map_record(const uint8_t *p) noexcept nogil:
    # A ledgers-map batch starts with INVALID_LID (-1): eight 0xff bytes. No entry can start like that:
    # a v1 ledger id is non-negative and 0xff is not a valid v2 flags byte.
    return get_u64(p) == 0xFFFFFFFFFFFFFFFFULL


# --- the buffered channel ------------------------------------------------------------------------------
cdef class BufferedChannel:
    """One entry log file: an append buffer in front of the file, and buffer-aware reads.

    The channel owns `fd` (and `direct_fd`) and closes them in close(). `buffer_size` 0 makes a read-only
    channel (for logs written by an earlier process). Positions are file offsets; `position` includes
    buffered bytes. `direct_fd` >= 0, an O_DIRECT fd of the same file, selects direct mode (module
    docstring): appends go out through it in whole DIRECT_BLOCKs, `fd` serves reads and write_at, the
    buffer is rounded up to a multiple of DIRECT_BLOCK and `file_size` must be one.
    """

    cdef readonly int fd
    cdef readonly int direct_fd  # the O_DIRECT write fd; -1 in buffered mode (and after finish())
    cdef readonly int direct_read_fd  # an O_DIRECT read-only fd for read_direct_into; -1 = none yet
    cdef readonly bint direct
    cdef readonly int64_t log_id
    cdef uint8_t *buf
    cdef Py_ssize_t capacity
    cdef Py_ssize_t used
    cdef Py_ssize_t flushed      # leading buffered bytes the file has too (direct mode's kept block)
    cdef int64_t file_pos        # file offset of buf[0]; every byte below it is in the file
    cdef bint dirty              # the file got bytes since the last fdatasync
    cdef bint broken             # a failed direct append could not be undone: no more writes
    cdef readonly bint closed
    cdef readonly int64_t synced_position    # every byte below this is durable (fdatasync'd)
    cdef readonly int64_t writeback_bytes    # start writeback every this many file bytes; 0 = never
    cdef int64_t wb_started      # disk writeback has been started for the file bytes below this

    def __cinit__(self, int fd, int64_t log_id, int64_t file_size, Py_ssize_t buffer_size=65536,
                  int64_t writeback_bytes=0, int direct_fd=-1):
        self.buf = NULL
        self.fd = fd
        self.direct_fd = direct_fd if direct_fd >= 0 else -1
        self.direct = self.direct_fd >= 0
        self.direct_read_fd = -1
        self.log_id = log_id
        self.file_pos = file_size
        self.synced_position = file_size
        self.writeback_bytes = writeback_bytes if writeback_bytes > 0 else 0
        self.wb_started = file_size
        self.capacity = buffer_size if buffer_size > 0 else 0
        self.used = 0
        self.flushed = 0
        self.dirty = False
        self.broken = False
        self.closed = False
        if self.direct:
            if self.capacity == 0:
                raise ValueError("a direct channel writes: it needs a buffer")
            if file_size % BLOCK:
                raise ValueError(f"a direct channel starts at a multiple of {BLOCK}, not at {file_size}")
            self.capacity = (self.capacity + BLOCK - 1) // BLOCK * BLOCK
            # Direct writes never sit dirty in the page cache: there is no writeback to start.
            self.writeback_bytes = 0
        if self.capacity:
            if posix_memalign(<void**>&self.buf, BLOCK, <size_t>self.capacity) != 0:
                self.buf = NULL
                raise MemoryError()

    def __dealloc__(self):
        if self.buf != NULL:
            free(self.buf)
            self.buf = NULL
        # The fds are closed only by close(): closing in a finalizer could close an fd number that the
        # process has since reused for another file.

    @property
    def position(self):
        """Logical end of the log: file bytes plus buffered bytes (where the next write lands)."""
        return self.file_pos + self.used

    @property
    def buffered(self):
        return self.used

    @property
    def writable(self):
        return self.capacity > 0 and not self.closed

    @property
    def unsynced(self):
        """True when some written bytes may not be durable yet (buffered or not fdatasync'd)."""
        return self.used > self.flushed or self.dirty

    cdef int check_writable(self) except -1:
        if self.closed:
            raise ValueError(f"entry log {self.log_id:x} is closed")
        if self.capacity == 0:
            raise ValueError(f"entry log {self.log_id:x} was opened read-only")
        if self.broken:
            raise OSError(EIO, f"entry log {self.log_id:x}: a failed write left a partial record behind")
        return 0

    cdef int flush_buffer(self) except -1:
        cdef int err
        cdef Py_ssize_t n = self.used, whole, keep
        if n == self.flushed:
            return 0
        if not self.direct:
            with nogil:
                err = pwrite_all(self.fd, self.buf, n, self.file_pos)
            if err:
                raise OSError(err, f"write to entry log {self.log_id:x} failed")
            # Move the boundary only now, with the GIL held: a concurrent reader sees either "in buffer"
            # (still valid until the next append) or "in file" (already written).
            self.file_pos += n
            self.used = 0
            self.dirty = True
            if self.writeback_bytes and self.file_pos - self.wb_started >= self.writeback_bytes:
                self.start_writeback()
            return 0
        # Direct: whole blocks; the last one zero-filled past the logical end (readers never look there).
        whole = (n + BLOCK - 1) // BLOCK * BLOCK
        memset(self.buf + n, 0, whole - n)
        with nogil:
            err = pwrite_all(self.direct_fd, self.buf, whole, self.file_pos)
        if err:
            raise OSError(err, f"direct write to entry log {self.log_id:x} failed")
        # GIL held from here to the end, as above. A partial last block stays at the head of the buffer
        # (buf[0] must stay at an aligned offset): the next flush rewrites it with the bytes that follow.
        keep = n % BLOCK
        if keep and n > keep:
            memmove(self.buf, self.buf + (n - keep), keep)
        self.file_pos += n - keep
        self.used = keep
        self.flushed = keep
        self.dirty = True
        return 0

    cdef void start_writeback(self) noexcept:
        """Start disk writeback of the file bytes written since the last call (SYNC_FILE_RANGE_WRITE,
        GIL released; it does not wait for the disk).

        Why: without it every byte of a write-cache flush stayed dirty in the page cache until the final
        fdatasync, which then put tens of MB in the disk queue at once, and a journal fdatasync (of this
        or another bookie on the same disk) queued behind that burst waited for all of it (measured, 3
        bookies x 16,700 adds/s: 34 MB flush syncs of 17-69 ms, journal syncs up to 60 ms, the whole
        open-loop p99 of ~38 ms). Handed over as it is written, the data streams out as background
        writeback, which the block layer throttles in favour of sync writes, and the final fdatasync
        has little left (1-5 ms). Waiting for each piece as well (bounded in-flight writeback) cost the
        16 KiB throughput benchmark a third of its bandwidth and is not done. Durability is unchanged:
        only fdatasync (sync()) counts; a sync_file_range error is left for it to report."""
        cdef int64_t start = self.wb_started, end = self.file_pos
        with nogil:
            sync_file_range(self.fd, start, end - start, SYNC_FILE_RANGE_WRITE)
        self.wb_started = end

    cdef inline void copy_in(self, const uint8_t *p, Py_ssize_t n) noexcept:
        """Copy n bytes to the end of the buffer (`used`, not moved here). A copy of NOGIL_COPY_BYTES or
        more runs with the GIL released: a flush slice (1 MiB) took ~0.1 ms of GIL per copy, which every
        other thread waited out. Safe without the GIL: readers (read_into) look only below `used`, which
        moves after the copy, with the GIL held; writers are serialized by the entry logger's lock, and
        the buffer is freed only by finish(), a writer too."""
        if n < NOGIL_COPY_BYTES:
            memcpy(self.buf + self.used, p, n)
            return
        cdef uint8_t *dst = self.buf + self.used
        with nogil:
            memcpy(dst, p, n)

    cdef int put_direct(self, const uint8_t *p, Py_ssize_t n) except -1:
        """Direct mode: copy n bytes into the buffer, writing it out each time it is full (whole blocks,
        nothing kept), so an entry bigger than the buffer goes out in buffer-sized pieces."""
        cdef Py_ssize_t k
        while n > 0:
            k = self.capacity - self.used
            if k > n:
                k = n
            self.copy_in(p, k)
            self.used += k
            p += k
            n -= k
            if self.used == self.capacity:
                self.flush_buffer()
        return 0

    cdef void rewind_direct(self, int64_t end) noexcept:
        """A direct append failed: make `end`, where it started, the end of the log again, as a failed
        buffered append leaves it (the ledger storage retries its flush: a partial record in between
        would misalign every record after it). The partial record's bytes that reached the file stay
        past the end until the next flush overwrites them or finish() cuts them."""
        cdef int64_t base
        cdef Py_ssize_t n
        cdef int err = 0
        if end >= self.file_pos:
            self.used = end - self.file_pos
            if self.flushed > self.used:
                self.flushed = self.used
            return
        # The buffer was written out (whole) during the append: read the bytes of the block `end`
        # falls in back from the file (GIL held: no reader looks at the buffer past the old end meanwhile).
        base = end // BLOCK * BLOCK
        n = end - base
        if pread_upto(self.fd, self.buf, n, base, &err) != n:
            self.broken = True
            return
        self.file_pos = base
        self.used = n
        self.flushed = n

    cdef int64_t append(self, const uint8_t *p, Py_ssize_t n, bint with_size) except -1:
        """Append [size] + bytes; return the file offset of the bytes (after the size)."""
        cdef Py_ssize_t total = n + (SIZE_LEN if with_size else 0)
        cdef int64_t at
        cdef uint8_t hdr[4]
        cdef int err
        self.check_writable()
        if self.direct:
            at = self.file_pos + self.used
            try:
                if with_size:
                    put_u32(hdr, <uint32_t>n)
                    self.put_direct(hdr, SIZE_LEN)
                self.put_direct(p, n)
            except BaseException:
                self.rewind_direct(at)
                raise
            return at + (SIZE_LEN if with_size else 0)
        if self.used + total > self.capacity:
            self.flush_buffer()
        if total <= self.capacity:
            at = self.file_pos + self.used
            if with_size:
                put_u32(self.buf + self.used, <uint32_t>n)
                at += SIZE_LEN
                self.used += SIZE_LEN
            if n:
                self.copy_in(p, n)
            self.used += n
            return at
        # Bigger than the whole buffer: straight to the file (the buffer is empty here), one syscall.
        put_u32(hdr, <uint32_t>n)
        with nogil:
            if with_size:
                err = pwritev2_all(self.fd, hdr, SIZE_LEN, p, n, self.file_pos)
            else:
                err = pwrite_all(self.fd, p, n, self.file_pos)
        if err:
            raise OSError(err, f"write to entry log {self.log_id:x} failed")
        at = self.file_pos + (SIZE_LEN if with_size else 0)
        self.file_pos += total
        self.dirty = True
        if self.writeback_bytes and self.file_pos - self.wb_started >= self.writeback_bytes:
            self.start_writeback()
        return at

    cdef int64_t append_entry(self, entry) except -1:
        """Append `int size | entry` (any buffer); return the offset of the entry bytes."""
        cdef Py_buffer view
        PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE)
        try:
            if view.len > 0x7FFFFFFF:
                raise ValueError(f"entry of {view.len} bytes does not fit an int size")
            return self.append(<const uint8_t*>view.buf, view.len, True)
        finally:
            PyBuffer_Release(&view)

    def add_entry(self, entry):
        """Append `int size | entry`; return the location `(log_id << 32) | offset of the entry bytes`."""
        return (self.log_id << 32) | self.append_entry(entry)

    def add_entries(self, list entries):
        """add_entry for each buffer of a list; the list of their locations (one call per flush batch)."""
        cdef list out = []
        cdef object base = self.log_id << 32
        for entry in entries:
            out.append(base | self.append_entry(entry))
        return out

    def write(self, data):
        """Append raw bytes (header, ledgers map); return the offset they start at."""
        cdef Py_buffer view
        cdef int64_t at
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            at = self.append(<const uint8_t*>view.buf, view.len, False)
        finally:
            PyBuffer_Release(&view)
        return at

    def write_at(self, data, int64_t offset):
        """Overwrite bytes at `offset` in place (header patch). Buffered bytes are flushed first.

        Direct mode writes the patch through `fd` (the page cache) as well, and into the kept block of
        the buffer when it falls there: it is a few bytes once per log, sync() fdatasyncs it like any
        other write, and the kernel writes a dirty page back before a direct write to its block, so an
        aligned read-modify-write through the O_DIRECT fd would buy nothing."""
        cdef Py_buffer view
        cdef int err
        cdef int64_t start
        self.check_writable()
        self.flush_buffer()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if offset < 0 or offset + view.len > self.file_pos + self.used:
                raise ValueError(f"write_at({offset}, {view.len} bytes) outside the written log")
            with nogil:
                err = pwrite_all(self.fd, <const uint8_t*>view.buf, view.len, offset)
            if err:
                raise OSError(err, f"write to entry log {self.log_id:x} failed")
            if offset + view.len > self.file_pos:
                start = offset if offset > self.file_pos else self.file_pos
                memcpy(self.buf + (start - self.file_pos), <const uint8_t*>view.buf + (start - offset),
                       offset + view.len - start)
        finally:
            PyBuffer_Release(&view)
        self.dirty = True

    def flush(self):
        """Hand buffered bytes to the file (no fdatasync)."""
        if not self.closed and self.capacity:
            self.flush_buffer()

    def sync(self):
        """flush() and fdatasync the file (GIL released), so every appended byte is durable."""
        cdef int rc = 0, err = 0
        if self.closed:
            raise ValueError(f"entry log {self.log_id:x} is closed")
        if self.capacity:
            self.flush_buffer()
        if not self.dirty:
            return
        # fdatasync works on the file, whichever fd: it covers the direct writes, write_at's page-cache
        # patch and, after a direct write or finish() changed it, the file size.
        with nogil:
            rc = fdatasync(self.fd)
            if rc != 0:
                err = errno
        if err:
            raise OSError(err, f"fdatasync of entry log {self.log_id:x} failed")
        self.dirty = False
        self.synced_position = self.file_pos + self.flushed
        self.wb_started = self.file_pos

    def finish(self):
        """The log is complete: flush the buffer, cut the file to the log's size (a direct flush leaves
        the last block zero-filled past it) and free the buffer. The channel stays open for reads and
        sync() (the cut is durable only after it); later writes raise."""
        cdef int rc = 0, err = 0
        cdef int64_t end
        cdef uint8_t *old
        if self.closed or self.capacity == 0:
            return
        self.flush_buffer()
        end = self.file_pos + self.used
        if self.direct:
            with nogil:
                rc = ftruncate(self.fd, <off_t>end)
                if rc != 0:
                    err = errno
            if err:
                raise OSError(err, f"truncate of entry log {self.log_id:x} to {end} bytes failed")
            self.dirty = True
            c_close(self.direct_fd)
            self.direct_fd = -1
        # GIL held: a reader sees the kept bytes in the buffer or, from here on, in the file.
        self.file_pos = end
        self.used = 0
        self.flushed = 0
        self.capacity = 0
        old = self.buf
        self.buf = NULL
        free(old)

    def close(self):
        """Close the fds. Buffered bytes are dropped: the caller flushes/syncs first."""
        if self.closed:
            return
        self.closed = True
        if self.direct_fd >= 0:
            c_close(self.direct_fd)
            self.direct_fd = -1
        if self.direct_read_fd >= 0:
            c_close(self.direct_read_fd)
            self.direct_read_fd = -1
        c_close(self.fd)

    @property
    def file_end(self):
        """Every byte of the log below this offset is in the file and never changes again."""
        return self.file_pos

    def set_direct_read_fd(self, int fd):
        """Hand over an O_DIRECT read-only fd of this log's file; the channel closes it in close().
        Returns False (and closes `fd`) when the channel is closed or already has one."""
        if self.closed or self.direct_read_fd >= 0:
            c_close(fd)
            return False
        self.direct_read_fd = fd
        return True

    def read_direct_into(self, buffer, int64_t offset, Py_ssize_t n):
        """Read up to n bytes at `offset`, at most up to file_end, through the O_DIRECT read fd into the
        page-aligned writable `buffer` (at least n + 2 * DIRECT_BLOCK bytes), GIL released.

        Returns (index in buffer where the bytes at `offset` start, count); count is short at file_end
        and at the end of the file. The disk writes straight into `buffer`: no page-cache copy (module
        docstring of bkfast.storage.direct_reads). OSError on failure (EINVAL: the file system refuses).
        """
        cdef Py_buffer view
        cdef int64_t start, end, stop
        cdef Py_ssize_t got, span
        cdef int err = 0
        cdef int fd = self.direct_read_fd
        if self.closed:
            raise ValueError(f"entry log {self.log_id:x} is closed")
        if fd < 0:
            raise ValueError(f"entry log {self.log_id:x} has no direct read fd")
        if n <= 0 or offset < 0:
            return 0, 0
        end = offset + n
        if end > self.file_pos:
            end = self.file_pos
        if end <= offset:
            return 0, 0
        start = offset - offset % BLOCK
        stop = (end + BLOCK - 1) // BLOCK * BLOCK
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            if (<size_t>view.buf) % BLOCK:
                raise ValueError("read_direct_into needs a page-aligned buffer")
            if stop - start > view.len:
                raise ValueError(f"read_direct_into: {stop - start} bytes do not fit a {view.len}-byte buffer")
            span = <Py_ssize_t>(stop - start)
            with nogil:
                got = pread_upto(fd, <uint8_t*>view.buf, span, start, &err, True)
        finally:
            PyBuffer_Release(&view)
        if err:
            raise OSError(err, f"direct read of entry log {self.log_id:x} at {start} failed")
        got -= <Py_ssize_t>(offset - start)
        if got > end - offset:
            got = <Py_ssize_t>(end - offset)
        return <Py_ssize_t>(offset - start), (got if got > 0 else 0)

    cdef Py_ssize_t read_into(self, uint8_t *dst, int64_t offset, Py_ssize_t n) except -1:
        """Copy up to n bytes at offset (buffer first, under the GIL; then file, without it)."""
        cdef int64_t boundary = self.file_pos
        cdef int64_t end = self.file_pos + self.used
        cdef Py_ssize_t in_file, got = 0, k
        cdef int err = 0
        if self.closed:
            raise ValueError(f"entry log {self.log_id:x} is closed")
        if self.capacity and offset + n > end:
            n = end - offset if end > offset else 0
        if n <= 0:
            return 0
        in_file = n
        if self.capacity and offset + n > boundary:
            in_file = boundary - offset if boundary > offset else 0
            k = n - in_file
            memcpy(dst + in_file, self.buf + (offset + in_file - boundary), k)
            got = k
        if in_file:
            with nogil:
                k = pread_upto(self.fd, dst, in_file, offset, &err)
            if err:
                raise OSError(err, f"read of entry log {self.log_id:x} failed")
            if k < in_file:
                # A short file read: only the part before the gap is usable.
                return k
            got += k
        return got

    def read(self, int64_t offset, Py_ssize_t n):
        """Up to n bytes at offset (fewer at the end of the log)."""
        cdef bytes out
        cdef Py_ssize_t got
        if n < 0 or offset < 0:
            raise ValueError("negative offset or length")
        out = PyBytes_FromStringAndSize(NULL, n)
        got = self.read_into(<uint8_t*>PyBytes_AS_STRING(out), offset, n)
        return out if got == n else out[:got]

    def read_entry(self, int64_t pos, Py_ssize_t max_sane_size=0):
        """The entry whose bytes start at file offset `pos` (its int size is at pos - 4).

        Checks the size is >= 16 and that the whole entry exists; StorageCorruptionError otherwise.
        `max_sane_size` > 0 rejects larger sizes (a damaged size field would otherwise make us allocate
        whatever it says).
        """
        cdef uint8_t scratch[SCRATCH]
        cdef Py_ssize_t got, size, have
        cdef bytes out
        if pos < SIZE_LEN:
            raise StorageCorruptionError(f"entry log {self.log_id:x}: no entry can start at offset {pos}")
        got = self.read_into(scratch, pos - SIZE_LEN, SCRATCH)
        if got < SIZE_LEN:
            raise StorageCorruptionError(
                f"entry log {self.log_id:x}: offset {pos} is past the end of the log")
        size = <int32_t>get_u32(scratch)
        if size < MIN_SANE_ENTRY_SIZE:
            raise StorageCorruptionError(
                f"entry log {self.log_id:x}: invalid entry size {size} at offset {pos} (minimum 16)")
        if max_sane_size > 0 and size > max_sane_size:
            raise StorageCorruptionError(
                f"entry log {self.log_id:x}: entry size {size} at offset {pos} exceeds {max_sane_size}")
        out = PyBytes_FromStringAndSize(NULL, size)
        have = got - SIZE_LEN
        if have > size:
            have = size
        memcpy(PyBytes_AS_STRING(out), scratch + SIZE_LEN, have)
        if have < size:
            got = self.read_into(<uint8_t*>PyBytes_AS_STRING(out) + have, pos + have, size - have)
            if got < size - have:
                raise StorageCorruptionError(
                    f"entry log {self.log_id:x}: short read of the {size}-byte entry at offset {pos} "
                    f"({have + got} bytes available)")
        return out

    def scanner(self, int64_t start, int64_t end=-1, Py_ssize_t chunk_size=1 << 20):
        """A LogScanner over [start, end) of this log (end -1 = the current end). Flushes the buffer."""
        if self.capacity and not self.closed:
            self.flush_buffer()
        if end < 0:
            end = self.file_pos + self.used
        return LogScanner(self, start, end, chunk_size)


# --- scanning ------------------------------------------------------------------------------------------
include "_entrylog_scan.pxi"
