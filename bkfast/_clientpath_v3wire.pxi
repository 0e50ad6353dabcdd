# Included by _clientpath.pyx: just enough of protobuf's wire format to build v3 ADD_ENTRY / READ_ENTRY
# requests and to read their answers without a protobuf parser (bookkeeper-formats.md §2). Anything
# these readers do not accept goes to the channel's protobuf path, which decides.

from bkfast._protowire cimport pw_varint as _varint, pw_skip_field as _skip_field, pw_put_varint as _put_varint


cdef int _v3_answer(const uint8_t *p, Py_ssize_t n, uint64_t *txn, int *operation, int *status,
                    Py_ssize_t *body_at, Py_ssize_t *body_len) noexcept nogil:
    """Reads a v3 Response far enough to match an ADD_ENTRY or READ_ENTRY answer: header.txnId and
    operation, the inner response's status (else the top-level one) and a read's body (offset and
    length; -1 when absent). 0 on success, -1 if it is not a well-formed Response (the caller's
    protobuf parser then decides)."""
    cdef Py_ssize_t pos = 0, end
    cdef uint64_t key, value, length
    cdef int field, wire, top_status = -1, inner_status = -1
    cdef bint have_txn = False
    operation[0] = -1
    body_at[0] = -1
    body_len[0] = 0
    while pos < n:
        if _varint(p, n, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if (field == 1 or field == 100 or field == 101) and wire == 2:
            if _varint(p, n, &pos, &length) < 0 or length > <uint64_t>(n - pos):
                return -1
            end = pos + <Py_ssize_t>length
            while pos < end:
                if _varint(p, end, &pos, &key) < 0:
                    return -1
                if (key & 7) == 0:
                    if _varint(p, end, &pos, &value) < 0:
                        return -1
                    if field == 1 and (key >> 3) == 2:
                        operation[0] = <int>value
                    elif field == 1 and (key >> 3) == 3:
                        txn[0] = value
                        have_txn = True
                    elif field != 1 and (key >> 3) == 1:
                        inner_status = <int>value
                elif field == 100 and key == ((4 << 3) | 2):
                    if _varint(p, end, &pos, &length) < 0 or length > <uint64_t>(end - pos):
                        return -1
                    body_at[0] = pos
                    body_len[0] = <Py_ssize_t>length
                    pos += <Py_ssize_t>length
                elif _skip_field(p, end, &pos, <int>(key & 7)) < 0:
                    return -1
            pos = end
        elif field == 2 and wire == 0:
            if _varint(p, n, &pos, &value) < 0:
                return -1
            top_status = <int>value
        elif _skip_field(p, n, &pos, wire) < 0:
            return -1
    if not have_txn or operation[0] < 0 or top_status < 0:
        return -1
    status[0] = inner_status if inner_status >= 0 else top_status
    return 0


cdef Py_ssize_t _v3_header(uint8_t *p, int operation, uint64_t txn) noexcept nogil:
    """Request.header (field 1) with version 3, `operation` and `txn`; returns its size."""
    cdef Py_ssize_t h = 2
    p[0] = 0x0A
    p[2] = 0x08; p[3] = 3
    p[4] = 0x10; p[5] = <uint8_t>operation
    p[6] = 0x18
    h = 7 + _put_varint(p + 7, txn)
    p[1] = <uint8_t>(h - 2)
    return h


cdef inline void _put_u32be(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24); p[1] = <uint8_t>(v >> 16); p[2] = <uint8_t>(v >> 8); p[3] = <uint8_t>v
