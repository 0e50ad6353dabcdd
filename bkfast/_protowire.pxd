# Protobuf wire-format primitives shared at build time by _codec.pyx (the bookie's v3 fast path) and
# _clientpath.pyx (the client's): base-128 varints, skipping a field, and the one reader of the v3
# Response fields that match an answer to its request (the client's dispatch and the load generator's
# decode_v3_answer must reach the same verdict). Inline only, so cimporting this file adds no module to
# import at run time.

from libc.stdint cimport uint8_t, uint64_t


cdef inline int pw_varint(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, uint64_t *out) noexcept nogil:
    """Protobuf base-128 varint at p[pos]; -1 if truncated or longer than 10 bytes."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while pos[0] < n and shift < 70:
        b = p[pos[0]]
        pos[0] += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = v
            return 0
        shift += 7
    return -1


cdef inline int pw_skip_field(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, int wire_type) noexcept nogil:
    """Step over one field's value of `wire_type`; -1 if it runs past n or the type is not one protobuf 2
    messages use here (groups are refused)."""
    cdef uint64_t length
    if wire_type == 0:
        return pw_varint(p, n, pos, &length)
    if wire_type == 1:
        pos[0] += 8
    elif wire_type == 5:
        pos[0] += 4
    elif wire_type == 2:
        if pw_varint(p, n, pos, &length) < 0 or length > <uint64_t>(n - pos[0]):
            return -1
        pos[0] += <Py_ssize_t>length
    else:
        return -1
    return 0 if pos[0] <= n else -1


cdef inline Py_ssize_t pw_put_varint(uint8_t *p, uint64_t v) noexcept nogil:
    """Write v as a varint at p; returns its length (1 to 10)."""
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        p[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    p[n] = <uint8_t>v
    return n + 1


cdef inline Py_ssize_t pw_varint_size(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef enum:
    PW_V3_READ_ENTRY = 1           # OperationType
    PW_V3_ADD_ENTRY = 2
    PW_V3_HEADER = 1               # Response's fields
    PW_V3_STATUS = 2
    PW_V3_READ_RESPONSE = 100
    PW_V3_ADD_RESPONSE = 101


cdef struct V3Answer:
    uint64_t txn
    int operation
    int status                     # the verdict: the operation's own sub-response's status, else Response.status
    Py_ssize_t body_at             # readResponse.body; -1 when absent
    Py_ssize_t body_len
    int top_status                 # -1: absent
    int sub_status[2]              # readResponse.status, addResponse.status; -1: absent
    bint sub_seen[2]
    bint have_txn


cdef inline int pw_v3_answer_part(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, int field,
                                  V3Answer *a) noexcept nogil:
    """Reads one sub-message of a Response: the header (operation, txnId) or readResponse / addResponse
    (status; a read's body). A repeated one merges into what came before, as protobuf merges it."""
    cdef uint64_t key, value, length
    cdef int sub, wire, slot = field - PW_V3_READ_RESPONSE
    if field != PW_V3_HEADER:
        a.sub_seen[slot] = True
    while pos < end:
        if pw_varint(p, end, &pos, &key) < 0:
            return -1
        sub = <int>(key >> 3)
        wire = <int>(key & 7)
        if wire == 0:
            if pw_varint(p, end, &pos, &value) < 0:
                return -1
            if field == PW_V3_HEADER and sub == 2:
                a.operation = <int>value
            elif field == PW_V3_HEADER and sub == 3:
                a.txn = value
                a.have_txn = True
            elif field != PW_V3_HEADER and sub == 1:
                a.sub_status[slot] = <int>value
        elif field == PW_V3_READ_RESPONSE and sub == 4 and wire == 2:
            if pw_varint(p, end, &pos, &length) < 0 or length > <uint64_t>(end - pos):
                return -1
            a.body_at = pos
            a.body_len = <Py_ssize_t>length
            pos += <Py_ssize_t>length
        elif pw_skip_field(p, end, &pos, wire) < 0:
            return -1
    return 0


cdef inline int pw_v3_answer(const uint8_t *p, Py_ssize_t n, V3Answer *a) noexcept nogil:
    """Reads a v3 Response far enough to match an ADD_ENTRY or READ_ENTRY answer (bookkeeper-formats.md
    §2). 0 with `a` filled in; -1 if it is not a well-formed Response or lacks what protobuf requires
    of these fields (the caller's protobuf parser then decides). The status is the one the client's
    protobuf path takes: the sub-response of the header's operation (readResponse for READ_ENTRY,
    addResponse for ADD_ENTRY) when present, else the top-level one; other sub-responses are skipped."""
    cdef Py_ssize_t pos = 0, end
    cdef uint64_t key, value, length
    cdef int field, wire, slot
    a.operation = a.top_status = a.sub_status[0] = a.sub_status[1] = -1
    a.sub_seen[0] = a.sub_seen[1] = a.have_txn = False
    a.body_at = -1
    a.body_len = 0
    while pos < n:
        if pw_varint(p, n, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if wire == 2 and (field == PW_V3_HEADER or field == PW_V3_READ_RESPONSE
                          or field == PW_V3_ADD_RESPONSE):
            if pw_varint(p, n, &pos, &length) < 0 or length > <uint64_t>(n - pos):
                return -1
            end = pos + <Py_ssize_t>length
            if pw_v3_answer_part(p, pos, end, field, a) < 0:
                return -1
            pos = end
        elif field == PW_V3_STATUS and wire == 0:
            if pw_varint(p, n, &pos, &value) < 0:
                return -1
            a.top_status = <int>value
        elif pw_skip_field(p, n, &pos, wire) < 0:
            return -1
    if not a.have_txn or a.operation < 0 or a.top_status < 0:
        return -1
    slot = -1
    if a.operation == PW_V3_READ_ENTRY or a.operation == PW_V3_ADD_ENTRY:
        slot = a.operation - PW_V3_READ_ENTRY
    if slot < 0 or not a.sub_seen[slot]:
        a.status = a.top_status
    elif a.sub_status[slot] < 0:
        return -1                  # protobuf refuses a sub-response without its required status
    else:
        a.status = a.sub_status[slot]
    return 0
