# Protobuf wire-format primitives shared at build time by _codec.pyx (the bookie's v3 fast path) and
# _clientpath.pyx (the client's): base-128 varints and skipping a field. Inline only, so cimporting this
# file adds no module to import at run time.

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
