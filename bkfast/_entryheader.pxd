# The ids at the head of a stored entry (spec/bookkeeper-formats.md §3: v1 `ledger | entry | lac | length`,
# scoped `0x80|digest | scope | ledger | entry | lac | length`), inline, for every Cython module that
# peeks them (_codec's peek_entry_ids, _writecache's batch put). Cimporting adds no run-time module.

from libc.stdint cimport int64_t, uint8_t, uint64_t

from bkfast._bigendian cimport get_i64, get_u64


cdef inline int peek_ids(const uint8_t *p, Py_ssize_t n, uint64_t *scope_id, int64_t *ledger_id,
                         int64_t *entry_id) noexcept nogil:
    """The entry's ids; its format version (1 or 2), or -1 when it is too short to hold them."""
    if n >= 1 and (p[0] & 0x80):
        if n < 25:
            return -1
        scope_id[0], ledger_id[0], entry_id[0] = get_u64(p + 1), get_i64(p + 9), get_i64(p + 17)
        return 2
    if n < 16:
        return -1
    scope_id[0], ledger_id[0], entry_id[0] = 0, get_i64(p), get_i64(p + 8)
    return 1


cdef inline int peek_lac(const uint8_t *p, Py_ssize_t n, int64_t *lac) noexcept nogil:
    """The last-add-confirmed its writer piggy-backed on the entry (bkfast.storage.entry_header.entry_lac);
    0, or -1 when the entry is too short to hold it."""
    if n >= 1 and (p[0] & 0x80):
        if n < 33:
            return -1
        lac[0] = get_i64(p + 25)
        return 0
    if n < 24:
        return -1
    lac[0] = get_i64(p + 16)
    return 0
