# Big-endian (Java's byte order) integer reads and writes shared at build time by every Cython module
# that packs or parses BookKeeper's bytes (_codec, _clientpath, _journal, _entrylog). Inline only, so
# cimporting this file adds no module to import at run time.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline void put_u32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void put_u64(uint8_t *p, uint64_t v) noexcept nogil:
    put_u32(p, <uint32_t>(v >> 32))
    put_u32(p + 4, <uint32_t>v)


cdef inline uint32_t get_u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint64_t get_u64(const uint8_t *p) noexcept nogil:
    return (<uint64_t>get_u32(p) << 32) | <uint64_t>get_u32(p + 4)


cdef inline int64_t get_i64(const uint8_t *p) noexcept nogil:
    return <int64_t>get_u64(p)


cdef inline int32_t get_i32(const uint8_t *p) noexcept nogil:
    return <int32_t>get_u32(p)
