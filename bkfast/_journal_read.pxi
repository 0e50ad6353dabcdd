# Included by bkfast/_journal.pyx (one module): reading journals back, the `len | bytes` record scanner,
# the zero-tail finder and the record classifier used on replay. The write side is in the .pyx.


cdef enum:
    ST_PADDING = -1         # padding_at: a whole padding record, `value` bytes long


cdef int padding_at(const uint8_t *p, Py_ssize_t left, int64_t max_record_size, int64_t *value) noexcept nogil:
    """The padding record at p (`left` bytes from there): ST_PADDING with its whole size in `value`, or
    why it cannot be stepped over (ST_NEED_MORE / ST_INVALID, with scan_records' `value`)."""
    cdef int32_t pad
    if left < PADDING_HEADER:
        value[0] = PADDING_HEADER
        return ST_NEED_MORE
    pad = get_i32(p + 4)
    if pad < 0 or (pad > max_record_size and pad > MAX_PADDING):
        value[0] = pad
        return ST_INVALID
    if left - PADDING_HEADER < pad:
        value[0] = PADDING_HEADER + <int64_t>pad
        return ST_NEED_MORE
    value[0] = PADDING_HEADER + <int64_t>pad
    return ST_PADDING


def scan_records(buf, Py_ssize_t start=0, bint padding_allowed=True, int64_t max_record_size=INT32_MAX_LEN):
    """Parse `int len | bytes` records of `buf` from `start`.

    Returns (records, ends, stop, status, value): the records as bytes, the offset just past each
    (relative to `buf`), the offset where parsing stopped, and why (SCAN_NEED_MORE, SCAN_END or
    SCAN_INVALID; see their comments). Padding records (V5+) are skipped; a padding length of 0 is
    allowed. A length that is negative (and not padding) or above `max_record_size` is SCAN_INVALID, as
    is a negative padLen or one above both `max_record_size` and 1 MiB.
    """
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, off = start
    cdef int32_t ln
    cdef int status = ST_NEED_MORE
    cdef int64_t value = 4
    cdef list records = []
    cdef list ends = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        if start < 0 or start > n:
            raise ValueError(f"start {start} is outside the buffer of {n} bytes")
        while True:
            if n - off < 4:
                status = ST_NEED_MORE
                value = 4
                break
            ln = get_i32(p + off)
            if ln == 0:
                status = ST_END
                value = 0
                break
            if ln == PADDING_MASK_INT and padding_allowed:
                status = padding_at(p + off, n - off, max_record_size, &value)
                if status != ST_PADDING:
                    break
                off += value
                continue
            if ln < 0 or ln > max_record_size:
                status = ST_INVALID
                value = ln
                break
            if n - off - 4 < ln:
                status = ST_NEED_MORE
                value = 4 + <int64_t>ln
                break
            records.append(PyBytes_FromStringAndSize(<const char*>p + off + 4, ln))
            off += 4 + ln
            ends.append(off)
    finally:
        PyBuffer_Release(&view)
    return records, ends, off, status, value


def find_nonzero(buf, Py_ssize_t start=0):
    """Offset of the first non-zero byte of `buf` at or after `start`, or -1."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t i, n, found = -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        with nogil:
            for i in range(start if start > 0 else 0, n):
                if p[i] != 0:
                    found = i
                    break
    finally:
        PyBuffer_Release(&view)
    return found


# --- records on replay -----------------------------------------------------------------------------------


class RecordKind(enum.Enum):
    ENTRY = "entry"
    MASTER_KEY = "master_key"
    FENCE = "fence"
    EXPLICIT_LAC = "explicit_lac"
    UNKNOWN_META = "unknown_meta"   # a negative entry id replay ignores, or a layout no writer produces


JournalRecord = namedtuple("JournalRecord", "kind scope_id ledger_id entry_id body")
JournalRecord.__doc__ = """A parsed record; `body` is the whole entry (ENTRY), the key or LAC buffer, or b"" (FENCE)."""

cdef object K_ENTRY = RecordKind.ENTRY
cdef object K_UNKNOWN = RecordKind.UNKNOWN_META
cdef dict META_KINDS = {METAENTRY_ID_LEDGER_KEY: RecordKind.MASTER_KEY, METAENTRY_ID_FENCE_KEY: RecordKind.FENCE,
                        METAENTRY_ID_LEDGER_EXPLICITLAC: RecordKind.EXPLICIT_LAC}


def parse_record(record):
    """Classify a journal record by its first byte and (negative = meta) entry id -> JournalRecord.

    v1 (first byte < 0x80): ledger at 0, entry at 8. v2 (bit 7 set): scope at 1, ledger at 9, entry at
    17; a digest nibble != 0 with revision 0 is a scoped entry, byte 0x80 with a negative entry id a
    scoped meta record (master key and explicit LAC carry `int len | bytes` after the ids). Anything else
    is UNKNOWN_META. Raises JournalCorruptionError when the record is too short for what it claims.
    """
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, at
    cdef int first
    cdef int64_t ledger_id, entry_id, body_len
    cdef uint64_t scope_id = 0
    PyObject_GetBuffer(record, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        if n < 16:
            raise JournalCorruptionError(f"journal record of {n} bytes is too short for ledger and entry ids")
        first = p[0]
        if first & 0x80:
            if n < 25:
                raise JournalCorruptionError(f"scoped journal record of {n} bytes is too short for its ids")
            scope_id = get_u64(p + 1)
            ledger_id = <int64_t>get_u64(p + 9)
            entry_id = <int64_t>get_u64(p + 17)
            at = 25
            if first != C_SCOPED_META or entry_id >= 0:
                kind = K_ENTRY if (first & 0x0F) and not (first & 0x70) else K_UNKNOWN
                return JournalRecord(kind, scope_id, ledger_id, entry_id, record)
        else:
            ledger_id = <int64_t>get_u64(p)
            entry_id = <int64_t>get_u64(p + 8)
            at = 16
            if entry_id >= 0:
                return JournalRecord(K_ENTRY, 0, ledger_id, entry_id, record)
        kind = META_KINDS.get(entry_id, K_UNKNOWN)
        if entry_id == C_FENCE_KEY:
            body = b""
        elif kind is K_UNKNOWN:
            body = PyBytes_FromStringAndSize(<const char*>p + at, n - at)
        else:
            body_len = get_i32(p + at) if n - at >= 4 else -1
            if body_len < 0 or body_len > n - at - 4:
                raise JournalCorruptionError(
                    f"journal {kind.value} record of {n} bytes has no valid body length ({body_len})")
            body = PyBytes_FromStringAndSize(<const char*>p + at + 4, body_len)
        return JournalRecord(kind, scope_id, ledger_id, entry_id, body)
    finally:
        PyBuffer_Release(&view)
