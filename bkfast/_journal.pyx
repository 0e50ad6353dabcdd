# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The journal's hot path in Cython: append a batch of records to a journal file, and read records back.

Owns: the byte layout of a journal batch (`int len | bytes` per record, then BookKeeper's V5+ padding
record up to `journalAlignmentSize`), pre-allocation of the file in `journalPreAllocSizeMB` steps, and
the syscalls that make a batch durable (pwrite/pwritev, or O_DIRECT writes from one page-aligned stage;
fdatasync; optional page-cache drop), all in ONE GIL-free block per call; and, in the included
_journal_read.pxi, `scan_records`, the parser of `len | bytes` records in a buffer, and `parse_record`,
which classifies a record (entry or meta record, classic or scoped) on replay.

Must never: import bkfast modules but the leaf bkfast.errors, open, name or close files (the caller owns the fd), decide when a batch
ends (group commit is bkfast.bookie.journal's), or keep a reference to a record after a call returns.

Why one nogil block: with a CPU-bound Python thread running, every GIL re-acquisition can cost a whole
switch interval (5 ms), so write + sync of a batch must cost at most one (see notes/dependencies.md §1).
"""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_FillInfo, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.list cimport PyList_GET_SIZE, PyList_GET_ITEM
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.errno cimport errno, EINTR, EIO
from libc.stdint cimport uint8_t, uint32_t, int32_t, int64_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset
from posix.fcntl cimport posix_fadvise, POSIX_FADV_DONTNEED
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from posix.unistd cimport pwrite, fdatasync

from bkfast._bigendian cimport get_i32, get_u32, get_u64, put_u32

cdef extern from "stdlib.h" nogil:
    int posix_memalign(void **memptr, size_t alignment, size_t size)

cdef extern from "sys/prctl.h" nogil:
    int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4, unsigned long arg5)
    enum:
        PR_SET_TIMERSLACK

import enum
import os
from collections import namedtuple

from bkfast.errors import JournalCorruptionError

cdef enum:
    PADDING_MASK_INT = -0x100       # Journal.PADDING_MASK: a padding record's length field
    PADDING_HEADER = 8              # int mask | int padLen
    IOV_BATCH = 1024                # IOV_MAX on Linux
    # A padding record is shorter than two alignment blocks; journalAlignmentSize is not known when
    # reading, so any padLen up to this (or up to the record limit, if higher) is accepted.
    MAX_PADDING = 1024 * 1024
    INT32_MAX_LEN = 0x7FFFFFFF
    ST_NEED_MORE = 0
    ST_END = 1
    ST_INVALID = 2
    # Direct (O_DIRECT) writes: buffers aligned to a page, which satisfies every device's memory
    # alignment; a batch goes out in pieces of at most DIRECT_CHUNK bytes (a multiple of the page).
    DIRECT_MEM_ALIGN = 4096
    DIRECT_CHUNK = 4 * 1024 * 1024
    C_FENCE_KEY = -0x2000
    C_SCOPED_META = 0x80

PADDING_MASK = PADDING_MASK_INT
METAENTRY_ID_LEDGER_KEY = -0x1000
METAENTRY_ID_FENCE_KEY = -0x2000
METAENTRY_ID_FORCE_LEDGER = -0x4000     # a queue marker only, never written
METAENTRY_ID_LEDGER_EXPLICITLAC = -0x8000
SCOPED_META_FLAGS = 0x80                # v2 prefix with digest nibble 0 (scope-ids.md, Bookie storage)
SCAN_NEED_MORE = ST_NEED_MORE   # the next record does not fit in the buffer; `value` = bytes it needs from `stop`
SCAN_END = ST_END               # a zero length at `stop`: the end of the log (the pre-allocated zeros)
SCAN_INVALID = ST_INVALID       # a length at `stop` that no writer produces; `value` = that length


# Records shorter than this are copied into the staging buffer next to their length field; longer ones
# are written from their own buffer through an iovec. Copying costs a second pass over the bytes (the
# kernel copies them once more into the page cache); an iovec costs a slot (1024 per syscall). Measured
# here (2M records, 10k per batch): 1 KiB records write 2.5x faster through iovecs, 100 B records 3x
# faster copied; 256-512 B is the crossover.
DEFAULT_COPY_BELOW = 512


cdef inline int64_t mono_ns() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <int64_t>now.tv_sec * 1000000000 + now.tv_nsec


cdef void *grown(void *p, size_t size) except NULL:
    """`p` reallocated to `size` bytes; MemoryError if there is no room (then `p` is still valid and
    still owned by the caller, which frees it)."""
    cdef void *q = PyMem_Realloc(p, size)
    if q == NULL:
        raise MemoryError()
    return q


cdef inline int64_t padding_bytes(int64_t position, int64_t align) noexcept nogil:
    """Size of the whole padding record (header included) that aligns `position`; 0 if aligned.

    Journal.writePaddingBytes: gap = align - pos % align; padLen = gap - 8, or align + gap - 8 when the
    gap cannot hold the 8-byte header.
    """
    cdef int64_t rem = position % align
    cdef int64_t gap
    if rem == 0:
        return 0
    gap = align - rem
    if gap >= PADDING_HEADER:
        return gap
    return align + gap


def padding_record_size(int64_t position, int64_t align):
    """Bytes of the padding record written at `position` (0 when already aligned), header included."""
    if align <= 0:
        raise ValueError(f"alignment must be positive, got {align}")
    return padding_bytes(position, align)


cdef int write_all(int fd, iovec *iov, Py_ssize_t count, int64_t offset) noexcept nogil:
    """pwritev every iovec at `offset`, resuming after short writes; 0 or an errno."""
    cdef ssize_t rc
    cdef int n
    while count > 0:
        if iov[0].iov_len == 0:
            iov += 1
            count -= 1
            continue
        n = <int>(count if count < IOV_BATCH else IOV_BATCH)
        if n == 1:
            rc = pwrite(fd, iov[0].iov_base, iov[0].iov_len, <off_t>offset)
        else:
            rc = pwritev(fd, iov, n, <off_t>offset)
        if rc < 0:
            if errno == EINTR:
                continue
            return errno
        if rc == 0:
            return EIO      # a regular file that accepts no bytes: never loop on it
        offset += rc
        while rc > 0:
            if <size_t>rc >= iov[0].iov_len:
                rc -= iov[0].iov_len
                iov += 1
                count -= 1
            else:
                iov[0].iov_base = <void*>(<uint8_t*>iov[0].iov_base + rc)
                iov[0].iov_len -= rc
                rc = 0
    return 0


@cython.final
@cython.no_gc               # it refers to a bytes object only: never in a cycle, and making one starts no collection
cdef class FramedRecords:
    """`count` journal records already framed as a batch holds them (`int len | record` each, back to
    back), `nbytes` bytes at `offset` of `owner`: one object for many records (the add run's records of one
    journal), which the writer copies as they are. Checked on creation: every length 1..2^31-1, the
    lengths adding up to `nbytes`. len() is its bytes, length fields included."""

    cdef readonly bytes owner
    cdef readonly Py_ssize_t offset
    cdef readonly Py_ssize_t nbytes
    cdef readonly Py_ssize_t count

    def __cinit__(self, bytes owner, Py_ssize_t offset, Py_ssize_t nbytes):
        cdef const uint8_t *p
        cdef Py_ssize_t at = 0, count = 0
        cdef uint32_t ln
        if offset < 0 or nbytes <= 0 or offset + nbytes > PyBytes_GET_SIZE(owner):
            raise ValueError(f"framed records of {nbytes} bytes at {offset} do not fit {PyBytes_GET_SIZE(owner)} bytes")
        p = <const uint8_t*>PyBytes_AS_STRING(owner) + offset
        while at < nbytes:
            if nbytes - at < 4:
                raise ValueError(f"framed records: a length field cut at byte {at} of {nbytes}")
            ln = get_u32(p + at)
            if ln == 0 or ln > INT32_MAX_LEN or <Py_ssize_t>ln > nbytes - at - 4:
                raise ValueError(f"framed record {count} at byte {at} has length {ln}: not 1..{nbytes - at - 4}")
            at += 4 + ln
            count += 1
        self.owner, self.offset, self.nbytes, self.count = owner, offset, nbytes, count

    cdef inline const uint8_t *start(self):
        return <const uint8_t*>PyBytes_AS_STRING(self.owner) + self.offset

    def __len__(self):
        return self.nbytes

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, <void*>self.start(), self.nbytes, 1, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def records(self):
        """Each record's bytes, in order (their length fields stripped)."""
        cdef const uint8_t *p = self.start()
        cdef Py_ssize_t at = 0
        cdef uint32_t ln
        out = []
        while at < self.nbytes:
            ln = get_u32(p + at)
            out.append(PyBytes_FromStringAndSize(<const char*>p + at + 4, ln))
            at += 4 + ln
        return out


cdef class JournalWriter:
    """Appends batches of records to one open journal file descriptor.

    `position` is where the next record goes (the caller wrote the header before it). Each `write()`
    lays out its records, then (if `padding`) the padding record that aligns the file position to
    `alignment`, pre-allocates first if the batch crosses `next_prealloc`, and issues the writes and
    (if asked) fdatasync in one GIL-free block. On an OSError the batch is not counted: `position` stays
    at its start if a write failed (its bytes may be partly on disk: a torn tail for the reader), or
    moves past it if only the fdatasync failed (`synced_position` does not).
    """

    cdef int fd
    cdef readonly int64_t position
    cdef readonly int64_t synced_position
    cdef readonly int64_t next_prealloc
    cdef readonly int64_t prealloc_step
    cdef readonly int64_t alignment
    cdef readonly bint padding
    cdef readonly int64_t drop_cache_lag
    cdef readonly Py_ssize_t copy_below
    cdef int64_t dropped_to
    cdef readonly uint64_t write_calls
    cdef readonly uint64_t sync_calls
    cdef readonly uint64_t records_written
    cdef readonly uint64_t bytes_written
    cdef readonly uint64_t prealloc_calls
    cdef readonly bint direct
    # Nanoseconds the last write() spent writing (pre-allocation included) and the last fdatasync took
    # (0: the last write() did not sync): the journal's JOURNAL_FLUSH_LATENCY and JOURNAL_SYNC.
    cdef readonly int64_t last_write_ns
    cdef readonly int64_t last_sync_ns
    cdef uint8_t *zeros
    cdef uint8_t *dstage         # direct mode: the aligned buffer a batch is copied into
    cdef Py_ssize_t dfill
    cdef int64_t doff
    cdef uint8_t *stage
    cdef Py_ssize_t stage_cap
    cdef const uint8_t **ptrs
    cdef Py_ssize_t *lens
    cdef uint8_t *framed             # per record of the batch: already framed (FramedRecords), no length field
    cdef Py_ssize_t rec_cap
    cdef Py_buffer *views
    cdef Py_ssize_t view_cap
    cdef iovec *iov
    cdef Py_ssize_t iov_cap

    def __cinit__(self, int fd, int64_t position, int64_t alignment, int64_t prealloc_step,
                  bint padding=True, int64_t next_prealloc=0, int64_t drop_cache_lag=-1,
                  Py_ssize_t copy_below=DEFAULT_COPY_BELOW):
        if alignment < 512 or alignment % 512:
            raise ValueError(f"alignment must be a positive multiple of 512, got {alignment}")
        if prealloc_step < alignment or prealloc_step % alignment:
            raise ValueError(f"pre-allocation step {prealloc_step} must be a multiple of the alignment {alignment}")
        self.fd = fd
        self.position = position
        self.synced_position = position
        self.alignment = alignment
        self.prealloc_step = prealloc_step
        self.padding = padding
        self.next_prealloc = next_prealloc
        self.drop_cache_lag = drop_cache_lag
        self.copy_below = copy_below
        self.dropped_to = 0
        if posix_memalign(<void**>&self.zeros, DIRECT_MEM_ALIGN, <size_t>alignment) != 0:
            raise MemoryError()
        memset(self.zeros, 0, alignment)

    def __dealloc__(self):
        free(self.zeros)
        free(self.dstage)
        PyMem_Free(self.stage)
        PyMem_Free(self.ptrs)
        PyMem_Free(self.lens)
        PyMem_Free(self.framed)
        PyMem_Free(self.views)
        PyMem_Free(self.iov)

    cdef int reserve(self, Py_ssize_t records, Py_ssize_t views, Py_ssize_t stage, Py_ssize_t iovs) except -1:
        # Scratch arrays only grow, so a steady workload allocates nothing per batch.
        if records > self.rec_cap:
            self.ptrs = <const uint8_t**>grown(<void*>self.ptrs, records * sizeof(uint8_t*))
            self.lens = <Py_ssize_t*>grown(self.lens, records * sizeof(Py_ssize_t))
            self.framed = <uint8_t*>grown(self.framed, records * sizeof(uint8_t))
            self.rec_cap = records
        if views > self.view_cap:
            self.views = <Py_buffer*>grown(self.views, views * sizeof(Py_buffer))
            self.view_cap = views
        if stage > self.stage_cap:
            self.stage = <uint8_t*>grown(self.stage, stage)
            self.stage_cap = stage
        if iovs > self.iov_cap:
            self.iov = <iovec*>grown(self.iov, iovs * sizeof(iovec))
            self.iov_cap = iovs
        return 0

    cdef int prealloc_nogil(self, int64_t end) noexcept nogil:
        """JournalChannel.preAllocIfNeeded: one zeroed alignment block just below the next boundary."""
        cdef int64_t boundary
        cdef iovec one
        cdef int err
        if end <= self.next_prealloc:
            return 0
        boundary = ((end + self.prealloc_step - 1) // self.prealloc_step) * self.prealloc_step
        one.iov_base = self.zeros
        one.iov_len = <size_t>self.alignment
        err = write_all(self.fd, &one, 1, boundary - self.alignment)
        if err == 0:
            self.next_prealloc = boundary
            self.prealloc_calls += 1
        return err

    cdef int sync_nogil(self) noexcept nogil:
        cdef int64_t upto
        cdef int64_t t0 = mono_ns()
        if fdatasync(self.fd) != 0:
            return errno
        self.last_sync_ns = mono_ns() - t0
        self.synced_position = self.position
        self.sync_calls += 1
        if self.drop_cache_lag >= 0 and not self.direct:
            # Journal pages are never read again while the bookie runs; dropping them (behind a lag
            # that keeps the pages still being appended to) leaves the page cache to ledger storage.
            upto = ((self.position - self.drop_cache_lag) // 4096) * 4096
            if upto > self.dropped_to:
                posix_fadvise(self.fd, <off_t>self.dropped_to, <off_t>(upto - self.dropped_to),
                              POSIX_FADV_DONTNEED)
                self.dropped_to = upto
        return 0

    def set_direct(self, bint on):
        """Lay batches out for an fd opened (or fcntl'ed) with O_DIRECT, or back to buffered writes.

        Direct mode copies every batch into one page-aligned buffer and writes it in aligned pieces: the
        kernel then DMAs from it instead of copying into the page cache (which cost ~40% of a bookie's
        CPU with 16 KiB entries). It needs the padding record (every batch ends on `alignment`) and a
        position on a 512-byte boundary; the caller must have checked that the device takes 512-byte
        writes at such offsets.
        """
        if on:
            if not self.padding:
                raise ValueError("direct writes need the V5+ padding record (batches must end aligned)")
            if self.position % 512:
                raise ValueError(f"direct writes need a sector-aligned position, not {self.position}")
            if self.dstage == NULL and posix_memalign(<void**>&self.dstage, DIRECT_MEM_ALIGN, DIRECT_CHUNK) != 0:
                self.dstage = NULL
                raise MemoryError()
        self.direct = on

    cdef int dput(self, const uint8_t *p, Py_ssize_t n) noexcept nogil:
        """Append `n` bytes (zeros if `p` is NULL) to the direct stage, writing it out each time it fills."""
        cdef Py_ssize_t take
        cdef int err
        while n > 0:
            take = DIRECT_CHUNK - self.dfill
            if take > n:
                take = n
            if p != NULL:
                memcpy(self.dstage + self.dfill, p, take)
                p += take
            else:
                memset(self.dstage + self.dfill, 0, take)
            self.dfill += take
            n -= take
            if self.dfill == DIRECT_CHUNK:
                err = self.dflush()
                if err:
                    return err
        return 0

    cdef int dflush(self) noexcept nogil:
        cdef iovec one
        cdef int err
        if self.dfill == 0:
            return 0
        one.iov_base = self.dstage
        one.iov_len = <size_t>self.dfill
        err = write_all(self.fd, &one, 1, self.doff)
        if err == 0:
            self.doff += self.dfill
            self.dfill = 0
        return err

    cdef int write_direct(self, Py_ssize_t n, int64_t start, int64_t pad) noexcept nogil:
        """The batch (records of ptrs/lens, then `pad` bytes of padding record) through the direct stage."""
        cdef uint8_t head[PADDING_HEADER]
        cdef Py_ssize_t i, ln
        cdef int err = 0
        self.dfill = 0
        self.doff = start
        for i in range(n):
            ln = self.lens[i]
            if ln < 0:
                continue
            if self.framed[i]:
                err = self.dput(self.ptrs[i], ln)
                if err:
                    return err
                continue
            put_u32(head, <uint32_t>ln)
            err = self.dput(head, 4)
            if err == 0:
                err = self.dput(self.ptrs[i], ln)
            if err:
                return err
        if pad:
            put_u32(head, <uint32_t>PADDING_MASK_INT)
            put_u32(head + 4, <uint32_t>(pad - PADDING_HEADER))
            err = self.dput(head, PADDING_HEADER)
            if err == 0:
                err = self.dput(NULL, pad - PADDING_HEADER)
            if err:
                return err
        return self.dflush()

    def ensure_preallocated(self, int64_t nbytes=1):
        """Extend the file (zero block) so that `nbytes` past `position` lie inside it."""
        cdef int err
        with nogil:
            err = self.prealloc_nogil(self.position + nbytes)
        if err:
            raise OSError(err, f"journal pre-allocation failed: {os.strerror(err)}")

    cdef int64_t gather(self, list records, Py_ssize_t *nviews, Py_ssize_t *nrec, Py_ssize_t *nbig,
                        Py_ssize_t *stage_need) except -1:
        """Pointers and lengths of `records` into ptrs / lens (-1 for None), holding a buffer view of
        each one that is not bytes (counted in nviews as it is taken, for the caller to release);
        returns the bytes the records take with their length headers."""
        cdef Py_ssize_t i, ln
        cdef int64_t total = 0
        cdef object obj
        cdef FramedRecords run
        for i in range(PyList_GET_SIZE(records)):
            obj = <object>PyList_GET_ITEM(records, i)
            self.framed[i] = False
            if obj is None:
                self.lens[i] = -1
                continue
            if type(obj) is FramedRecords:
                run = <FramedRecords>obj
                self.ptrs[i] = run.start()
                self.lens[i] = ln = run.nbytes
                self.framed[i] = True
                nrec[0] += run.count
                total += ln
                if ln >= self.copy_below:
                    nbig[0] += 1
                else:
                    stage_need[0] += ln
                continue
            if PyBytes_CheckExact(obj):
                self.ptrs[i] = <const uint8_t*>PyBytes_AS_STRING(obj)
                ln = PyBytes_GET_SIZE(obj)
            else:
                if nviews[0] == self.view_cap:
                    self.reserve(0, 2 * nviews[0] + 8, 0, 0)
                PyObject_GetBuffer(obj, &self.views[nviews[0]], PyBUF_SIMPLE)
                nviews[0] += 1
                self.ptrs[i] = <const uint8_t*>self.views[nviews[0] - 1].buf
                ln = self.views[nviews[0] - 1].len
            if ln <= 0 or ln > INT32_MAX_LEN:
                # A zero length would read back as the end of the log and hide every later record.
                raise ValueError(f"journal record {i} has length {ln}; it must be 1..{INT32_MAX_LEN}")
            self.lens[i] = ln
            nrec[0] += 1
            total += 4 + ln
            if ln >= self.copy_below:
                nbig[0] += 1
                stage_need[0] += 4
            else:
                stage_need[0] += 4 + ln
        return total

    cdef Py_ssize_t lay_out(self, Py_ssize_t n, int64_t pad) noexcept nogil:
        """Lays the gathered batch out: headers and small records go to the staging buffer, big records
        get their own iovec, so one pwritev (usually one pwrite) covers it all. Returns the iovecs."""
        cdef uint8_t *st = self.stage
        cdef Py_ssize_t i, ln, s = 0, seg = 0, k = 0
        for i in range(n):
            ln = self.lens[i]
            if ln < 0:
                continue
            if self.framed[i]:
                if ln >= self.copy_below:
                    if s > seg:
                        self.iov[k].iov_base = st + seg
                        self.iov[k].iov_len = <size_t>(s - seg)
                        k += 1
                    self.iov[k].iov_base = <void*>self.ptrs[i]
                    self.iov[k].iov_len = <size_t>ln
                    k += 1
                    seg = s
                else:
                    memcpy(st + s, self.ptrs[i], ln)
                    s += ln
                continue
            put_u32(st + s, <uint32_t>ln)
            s += 4
            if ln >= self.copy_below:
                self.iov[k].iov_base = st + seg
                self.iov[k].iov_len = <size_t>(s - seg)
                self.iov[k + 1].iov_base = <void*>self.ptrs[i]
                self.iov[k + 1].iov_len = <size_t>ln
                k += 2
                seg = s
            else:
                memcpy(st + s, self.ptrs[i], ln)
                s += ln
        if pad:
            put_u32(st + s, <uint32_t>PADDING_MASK_INT)
            put_u32(st + s + 4, <uint32_t>(pad - PADDING_HEADER))
            memset(st + s + PADDING_HEADER, 0, pad - PADDING_HEADER)
            s += pad
        if s > seg:
            self.iov[k].iov_base = st + seg
            self.iov[k].iov_len = <size_t>(s - seg)
            k += 1
        return k

    def write(self, list records, bint sync=False):
        """Append `records` (bytes-like; None entries are skipped) plus padding; fdatasync if `sync`.

        Returns the new position. Raises OSError with the errno of the failing syscall.
        """
        cdef Py_ssize_t i, n = PyList_GET_SIZE(records), nviews = 0, nrec = 0, nbig = 0, stage_need = 0
        cdef int64_t total, pad = 0, start = self.position, end, t0
        cdef int err = 0
        cdef bint sync_failed = False
        self.reserve(n, 0, 0, 0)
        try:
            total = self.gather(records, &nviews, &nrec, &nbig, &stage_need)
            if self.padding:
                pad = padding_bytes(start + total, self.alignment)
            stage_need += pad
            end = start + total + pad
            if not self.direct:
                self.reserve(0, 0, stage_need if stage_need > 0 else 1, 2 * nbig + 2)
            self.last_sync_ns = 0
            with nogil:
                t0 = mono_ns()
                err = self.prealloc_nogil(end)
                if err == 0 and self.direct:
                    err = self.write_direct(n, start, pad)
                elif err == 0:
                    err = write_all(self.fd, self.iov, self.lay_out(n, pad), start)
                self.last_write_ns = mono_ns() - t0
                if err == 0:
                    self.position = end
                    if sync:
                        err = self.sync_nogil()
                        sync_failed = err != 0
        finally:
            for i in range(nviews):
                PyBuffer_Release(&self.views[i])
        if err:
            what = "fdatasync" if sync_failed else "write"
            raise OSError(err, f"journal {what} failed at offset {start}: {os.strerror(err)}")
        self.write_calls += 1
        self.records_written += nrec
        self.bytes_written += <uint64_t>(end - start)
        return self.position

    def sync(self):
        """fdatasync everything written so far (a no-op when nothing new was written)."""
        cdef int err = 0
        self.last_sync_ns = 0
        if self.synced_position == self.position:
            return self.position
        with nogil:
            err = self.sync_nogil()
        if err:
            raise OSError(err, f"journal fdatasync failed at offset {self.position}: {os.strerror(err)}")
        return self.position


def set_thread_timer_slack(unsigned long nanoseconds):
    """Set the calling thread's timer slack (Linux prctl PR_SET_TIMERSLACK); True if it was set.

    The journal thread sleeps journalMaxGroupWaitMSec per group; the default 50 us slack made that wait
    overshoot by ~140 us here (measured: 2 ms Condition.wait, mean oversleep 139 us -> 73 us at 1 us slack).
    """
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0


include "_journal_read.pxi"
