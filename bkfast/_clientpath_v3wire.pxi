# Included by _clientpath.pyx: just enough of protobuf's wire format to build v3 ADD_ENTRY / READ_ENTRY
# requests and to read their answers without a protobuf parser (bookkeeper-formats.md §2). Anything
# these readers do not accept goes to the channel's protobuf path, which decides. The answers are read
# by _protowire's pw_v3_answer, the same reader as _codec's decode_v3_answer.

from bkfast._protowire cimport V3Answer, pw_put_varint as _put_varint, pw_v3_answer


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
