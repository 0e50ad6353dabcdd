"""The interface of an in-memory entry source, for Cython read loops (see _entrysource.pxd).

Owns: nothing but the contract. `find_c` answers the entry's length and sets `data` to its bytes, which
stay valid until the next `find_c` on the same source (a source copies the entry out under its own lock,
so a writer on another thread cannot change them meanwhile); -1 when memory does not hold the entry. It
is called with the GIL held, by one thread at a time (the reactor).

Must never: touch the disk (the reactor calls it).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t

MAX_U64 = (1 << 64) - 1


cdef class EntrySource:
    """A source that holds nothing; subclasses override find_c."""

    cdef Py_ssize_t find_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id,
                           const uint8_t **data) except -2:
        return -1

    def get(self, ledger_id, int64_t entry_id, scope_id=0):
        """The entry's bytes, None when memory does not hold it (find_c for Python callers and tests)."""
        cdef const uint8_t *data = NULL
        cdef Py_ssize_t length
        if entry_id < 0:
            return None
        length = self.find_c(<uint64_t>(scope_id & MAX_U64), <uint64_t>(ledger_id & MAX_U64), entry_id, &data)
        if length < 0:
            return None
        return PyBytes_FromStringAndSize(<const char *>data, length)
