# Included by _codec.pyx: the bookie's v3 fast path. Reads a v3 ADD_ENTRY or plain READ_ENTRY Request
# straight from its protobuf bytes (bookkeeper-formats.md §2), without building protobuf objects.
# Anything it does not take (another operation, a header version other than 3, fencing or long-poll
# reads, DEFERRED_SYNC adds, unknown enum values, a repeated sub-message, malformed bytes) is left to
# the protobuf path in bkfast.net.v3_handler, which decides exactly as before.

from bkfast._protowire cimport V3Answer, pw_skip_field, pw_v3_answer, pw_varint
from bkfast._stats cimport Counter, OpStats

cdef enum:
    V3_OP_READ_ENTRY = 1       # OperationType
    V3_OP_ADD_ENTRY = 2
    V3_WRITE_FLAG_DEFERRED_SYNC = 1


cdef struct V3Request:
    int operation
    uint64_t txn
    uint64_t priority
    int64_t ledger_id
    int64_t entry_id
    uint64_t scope_id
    Py_ssize_t key_at
    Py_ssize_t key_len
    Py_ssize_t body_at
    Py_ssize_t body_len
    bint recovery


cdef int _v3_header(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, V3Request *r) noexcept nogil:
    cdef uint64_t key, value
    cdef int field, wire
    cdef bint have_version = False, have_op = False, have_txn = False
    while pos < end:
        if pw_varint(p, end, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if wire == 0 and 1 <= field <= 4:
            if pw_varint(p, end, &pos, &value) < 0:
                return -1
            if field == 1:
                if value != 3:
                    return -1        # the protobuf path answers EBADVERSION (or refuses the enum)
                have_version = True
            elif field == 2:
                r.operation = <int>value if value < 1000 else -1
                have_op = True
            elif field == 3:
                r.txn = value
                have_txn = True
            else:
                r.priority = value
        elif pw_skip_field(p, end, &pos, wire) < 0:
            return -1
    return 0 if (have_version and have_op and have_txn) else -1


cdef int _v3_add(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, V3Request *r) noexcept nogil:
    cdef uint64_t key, value, length
    cdef int field, wire
    cdef bint have_ledger = False, have_entry = False
    r.key_at = -1
    r.body_at = -1
    while pos < end:
        if pw_varint(p, end, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if wire == 0 and (field == 1 or field == 2 or field == 5 or field == 100 or field == 1000):
            if pw_varint(p, end, &pos, &value) < 0:
                return -1
            if field == 1:
                r.ledger_id = <int64_t>value
                have_ledger = True
            elif field == 2:
                r.entry_id = <int64_t>value
                have_entry = True
            elif field == 5:
                if value & V3_WRITE_FLAG_DEFERRED_SYNC:
                    return -1
            elif field == 100:
                if value != 1:
                    return -1
                r.recovery = True
            else:
                r.scope_id = value
        elif wire == 2 and (field == 3 or field == 4):
            if pw_varint(p, end, &pos, &length) < 0 or length > <uint64_t>(end - pos):
                return -1
            if field == 3:
                r.key_at = pos
                r.key_len = <Py_ssize_t>length
            else:
                r.body_at = pos
                r.body_len = <Py_ssize_t>length
            pos += <Py_ssize_t>length
        elif pw_skip_field(p, end, &pos, wire) < 0:
            return -1
    if not (have_ledger and have_entry) or r.key_at < 0 or r.body_at < 0:
        return -1
    return 0


cdef int _v3_read(const uint8_t *p, Py_ssize_t end, Py_ssize_t pos, V3Request *r) noexcept nogil:
    cdef uint64_t key, value
    cdef int field, wire
    cdef bint have_ledger = False, have_entry = False
    while pos < end:
        if pw_varint(p, end, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if field == 100 or field == 4:
            return -1                # fencing, piggyback and long-poll reads take the protobuf path
        if wire == 0 and (field == 1 or field == 2 or field == 1000):
            if pw_varint(p, end, &pos, &value) < 0:
                return -1
            if field == 1:
                r.ledger_id = <int64_t>value
                have_ledger = True
            elif field == 2:
                r.entry_id = <int64_t>value
                have_entry = True
            else:
                r.scope_id = value
        elif pw_skip_field(p, end, &pos, wire) < 0:
            return -1
    return 0 if (have_ledger and have_entry) else -1


cdef int _v3_request(const uint8_t *p, Py_ssize_t n, V3Request *r) noexcept nogil:
    """0 if p[:n] is a v3 Request the fast path takes (r filled in), -1 otherwise."""
    cdef Py_ssize_t pos = 0, header_at = -1, header_end = 0, sub_at = -1, sub_end = 0
    cdef uint64_t key, length
    cdef int field, wire, sub_field = 0
    r.operation = -1
    r.priority = 0
    r.scope_id = 0
    r.recovery = False
    while pos < n:
        if pw_varint(p, n, &pos, &key) < 0:
            return -1
        field = <int>(key >> 3)
        wire = <int>(key & 7)
        if wire == 2 and (field == 1 or field == 100 or field == 101):
            if pw_varint(p, n, &pos, &length) < 0 or length > <uint64_t>(n - pos):
                return -1
            if field == 1:
                if header_at >= 0:
                    return -1        # protobuf would merge repeated messages: not for the fast path
                header_at = pos
                header_end = pos + <Py_ssize_t>length
            else:
                if sub_at >= 0:
                    return -1
                sub_field = field
                sub_at = pos
                sub_end = pos + <Py_ssize_t>length
            pos += <Py_ssize_t>length
        elif pw_skip_field(p, n, &pos, wire) < 0:
            return -1
    if header_at < 0 or sub_at < 0 or _v3_header(p, header_end, header_at, r) < 0:
        return -1
    if r.operation == V3_OP_ADD_ENTRY and sub_field == 101:
        return _v3_add(p, sub_end, sub_at, r)
    if r.operation == V3_OP_READ_ENTRY and sub_field == 100:
        return _v3_read(p, sub_end, sub_at, r)
    return -1


def decode_v3_adds(list frames, Py_ssize_t start=0):
    """Decode the run of v3 ADD_ENTRY requests that starts at frames[start] (the bookie's batch path).

    Returns (adds, ids, end) like decode_v2_adds: adds gets (entry bytes, master key bytes, recovery,
    high_priority), ids gets (ledger_id, entry_id, txn_id, scope_id); `end` is the first frame not
    decoded, which the caller hands to the protobuf path. Frames with the same master key as the one
    before share its bytes object.
    """
    cdef Py_ssize_t i = start, n = len(frames)
    cdef list adds = [], ids = []
    cdef bytes frame
    cdef object key = None
    cdef const uint8_t *p
    cdef V3Request r
    while i < n:
        obj = frames[i]
        if type(obj) is not bytes:
            break
        frame = <bytes>obj
        p = <const uint8_t*>PyBytes_AS_STRING(frame)
        if _v3_request(p, PyBytes_GET_SIZE(frame), &r) < 0 or r.operation != V3_OP_ADD_ENTRY:
            break
        if (key is None or PyBytes_GET_SIZE(key) != r.key_len
                or memcmp(PyBytes_AS_STRING(key), p + r.key_at, r.key_len) != 0):
            key = PyBytes_FromStringAndSize(<const char*>p + r.key_at, r.key_len)
        adds.append((PyBytes_FromStringAndSize(<const char*>p + r.body_at, r.body_len), key,
                     r.recovery, r.recovery or r.priority > 0))
        ids.append((r.ledger_id, r.entry_id, r.txn, r.scope_id))
        i += 1
    return adds, ids, i


cdef inline bint plain_v3_add(const uint8_t *p, Py_ssize_t n, V3Request *r) noexcept nogil:
    """Whether a frame is a plain v3 ADD_ENTRY as decode_v3_adds reads it, with no recovery flag, no
    priority, no scope and a 20-byte master key, whose entry carries the ids the request names (ledger
    storage files an entry under its own header's ids); `r`: its fields."""
    cdef uint64_t scope_id
    cdef int64_t ledger_id, entry_id
    return not (_v3_request(p, n, r) < 0 or r.operation != V3_OP_ADD_ENTRY or r.recovery or r.priority != 0
                or r.scope_id != 0 or r.key_len != MASTER_KEY_LENGTH
                or peek_ids(p + r.body_at, r.body_len, &scope_id, &ledger_id, &entry_id) < 0 or scope_id != 0
                or ledger_id != r.ledger_id or entry_id != r.entry_id)


cdef int offer_v3_add(AddSink sink, const uint8_t *p, Py_ssize_t n) except -1:
    """Offer a frame to `sink` if it is a plain v3 ADD_ENTRY: 1 when the sink took it."""
    cdef V3Request r
    if not plain_v3_add(p, n, &r):
        return 0
    return sink.take_c(r.ledger_id, r.entry_id, r.txn, p + r.key_at, p + r.body_at, r.body_len)


cdef int offer_v3_add_nogil(AddSink sink, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """offer_v3_add to the sink's GIL-free side: 1 when it took the frame."""
    cdef V3Request r
    if not plain_v3_add(p, n, &r):
        return 0
    return sink.take_nogil(r.ledger_id, r.entry_id, r.txn, p + r.key_at, p + r.body_at, r.body_len)


cdef struct LacMemo:            # the LAC of the last ledger serve_v3_reads asked lac_of about
    bint have
    int64_t ledger_id
    uint64_t scope_id
    int64_t lac


cdef int64_t _lac_for(LacMemo *memo, lac_of, V3Request *r) except? -2:
    if not memo.have or memo.ledger_id != r.ledger_id or memo.scope_id != r.scope_id:
        memo.lac = lac_of(r.scope_id, r.ledger_id)
        memo.ledger_id, memo.scope_id, memo.have = r.ledger_id, r.scope_id, True
    return memo.lac


cdef Py_ssize_t _answer_v3_from_memory(FrameBuilder out, V3Request *r, EntrySource source, lookup, LacMemo *memo,
                                       lac_of) except -2:
    """Append r's READ_ENTRY answer if memory holds the entry: its size, else -1. The LAC is asked before
    the lookup: a Python call could let another thread use the source's buffer in between."""
    cdef const uint8_t *found = NULL
    cdef Py_ssize_t size
    cdef Py_buffer view
    cdef int64_t lac
    if source is not None:
        lac = _lac_for(memo, lac_of, r)
        size = source.find_c(r.scope_id, <uint64_t>r.ledger_id, r.entry_id, &found)
        if size >= 0:
            out._v3_read_response(0, r.ledger_id, r.entry_id, r.txn, found, size, True, lac, False, 0, r.scope_id)
        return size
    data = lookup(r.ledger_id, r.entry_id, r.scope_id)
    if data is None:
        return -1
    lac = _lac_for(memo, lac_of, r)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        out._v3_read_response(0, r.ledger_id, r.entry_id, r.txn, <const uint8_t *>view.buf, view.len, True, lac,
                              False, 0, r.scope_id)
        size = view.len
    finally:
        PyBuffer_Release(&view)
    return size


def serve_v3_reads(list frames, Py_ssize_t start, FrameBuilder out, lookup, lac_of, dict busy,
                   Py_ssize_t out_limit=-1, Py_ssize_t max_misses=-1, OpStats entry_bytes=None,
                   Counter read_bytes=None):
    """Answer the run of plain v3 READ_ENTRY requests that starts at frames[start] from memory.

    `lookup` is an EntrySource (bkfast._entrysource: looked up and copied into the answer in C), or a
    callable `lookup(ledger_id, entry_id, scope_id)` that returns the cached entry or None (not in memory:
    the caller reads it on its read pool); `lac_of(scope_id, ledger_id)` is the bookie's known LAC, sent as maxLAC
    with each entry as Java does (asked once per ledger of the run). Hits are appended to `out` as
    READ_ENTRY responses. `busy` holds the ledger ids with reads still pending on the connection's read
    pool: their reads are misses too, so answers of one ledger keep their order (clients match v2 answers
    in order, and Java's bookie answers a ledger's reads in order); a miss adds its ledger to `busy`
    (value 0: the caller counts). It stops early once `out` holds `out_limit` bytes or more (a connection's
    output bound; -1 = none), and once it has `max_misses` misses (the reads the connection may still put on
    the read pool; -1 = none). Returns (end, misses): misses are (ledger_id, entry_id, txn_id, scope_id).
    Stats, if given: each hit's size into `entry_bytes` (a C call), their sum into `read_bytes` (per run)."""
    cdef Py_ssize_t i = start, n = len(frames)
    cdef list misses = []
    cdef bytes frame
    cdef const uint8_t *p
    cdef V3Request r
    cdef Py_ssize_t size, total = 0
    cdef LacMemo memo
    cdef EntrySource source = lookup if isinstance(lookup, EntrySource) else None
    memo.have = False
    while i < n:
        if out_limit >= 0 and out.length - out.start >= out_limit:
            break
        if max_misses >= 0 and len(misses) >= max_misses:
            break
        obj = frames[i]
        if type(obj) is not bytes:
            break
        frame = <bytes>obj
        p = <const uint8_t*>PyBytes_AS_STRING(frame)
        if _v3_request(p, PyBytes_GET_SIZE(frame), &r) < 0 or r.operation != V3_OP_READ_ENTRY:
            break
        size = -1
        if not (busy and r.ledger_id in busy):
            size = _answer_v3_from_memory(out, &r, source, lookup, &memo, lac_of)
        if size < 0:
            ledger = r.ledger_id
            if ledger not in busy:
                busy[ledger] = 0
            misses.append((r.ledger_id, r.entry_id, r.txn, r.scope_id))
        else:
            total += size
            if entry_bytes is not None:
                entry_bytes.record_ok(<double>size)
        i += 1
    if read_bytes is not None and total:
        read_bytes.add(total)
    return i, misses


def serve_v2_reads(list frames, Py_ssize_t start, FrameBuilder out, lookup, dict busy, Py_ssize_t out_limit=-1,
                   Py_ssize_t max_misses=-1, OpStats entry_bytes=None, Counter read_bytes=None):
    """Answer the run of plain v2 READ requests (versions 1 and 2, no fencing) that starts at
    frames[start] from memory, as serve_v3_reads does (stats too). Returns (end, misses): misses are
    (ledger_id, entry_id, version)."""
    cdef Py_ssize_t i = start, n = len(frames)
    cdef Py_ssize_t size, total = 0
    cdef list misses = []
    cdef bytes frame
    cdef const uint8_t *p
    cdef int version, opcode, flags
    cdef int64_t ledger_id, entry_id
    cdef EntrySource source = lookup if isinstance(lookup, EntrySource) else None
    cdef const uint8_t *found = NULL
    while i < n:
        if out_limit >= 0 and out.length - out.start >= out_limit:
            break
        if max_misses >= 0 and len(misses) >= max_misses:
            break
        obj = frames[i]
        if type(obj) is not bytes:
            break
        frame = <bytes>obj
        if PyBytes_GET_SIZE(frame) < 20:
            break
        p = <const uint8_t*>PyBytes_AS_STRING(frame)
        split_header(get_u32(p), &version, &opcode, &flags)
        if opcode != OP_READ or version < 1 or version > 2 or (flags & FLAG_DO_FENCING):
            break
        ledger_id = get_i64(p + 4)
        entry_id = get_i64(p + 12)
        size = -1
        if busy and ledger_id in busy:
            pass
        elif source is not None:
            size = source.find_c(0, <uint64_t>ledger_id, entry_id, &found)
            if size >= 0:
                out._read_response(0, ledger_id, entry_id, found, size, version)
        else:
            data = lookup(ledger_id, entry_id, 0)
            if data is not None:
                out.add_read_response(0, ledger_id, entry_id, data, version)
                size = len(data)
        if size < 0:
            ledger = ledger_id
            if ledger not in busy:
                busy[ledger] = 0
            misses.append((ledger_id, entry_id, version))
        else:
            total += size
            if entry_bytes is not None:
                entry_bytes.record_ok(<double>size)
        i += 1
    if read_bytes is not None and total:
        read_bytes.add(total)
    return i, misses


def decode_v3_answer(frame):
    """(txn_id, operation, status) of a v3 Response, reading only what a load generator matches answers
    with: header.txnId and operation, and the status of the operation's own sub-response (else the
    top-level one), by the same reader as the client's (_protowire's pw_v3_answer). Raises
    MalformedFrameError if the bytes are not a well-formed Response."""
    cdef Py_buffer view
    cdef V3Answer answer
    cdef int verdict
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        verdict = pw_v3_answer(<const uint8_t*>view.buf, view.len, &answer)
    finally:
        PyBuffer_Release(&view)
    if verdict < 0:
        raise MalformedFrameError("not a well-formed v3 Response")
    return answer.txn, answer.operation, answer.status
