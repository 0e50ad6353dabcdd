"""The interface of an add sink, for the Cython frame splitter (see _addsink.pxd).

Owns: nothing but the contract. `take_c` is offered each plain add the splitter completes, in stream
order: a v2 ADD (version 1 or 2, no flags, an unscoped entry of at least its two ids; `tag` is its
version) or, on a v3 connection, an ADD_ENTRY (no recovery flag, no priority, no scope, a 20-byte master
key; `tag` is its txn id), with the master key (20 bytes) and the entry. It answers 1 when it took the add (stored and listed for the
journal: the splitter makes no frame of it), 0 when it did not (the splitter then makes a frame of this one
and of every later one of the same feed, so the general path sees them in order). The pointers are valid
only during the call. It is called with the GIL held, by one thread at a time (the reactor, or the add
worker of bkfast.net.add_workers).
`feed_done_c` ends each feed that offered anything (in the splitter's `finally`): what `take_c` may hold
across the feed's takes (a lock) it releases there, before any Python code runs again.

Must never: take an add it cannot journal, or take one after refusing an earlier one of the same feed
(the splitter does not offer it: order is the splitter's duty, not the sink's).
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

MASTER_KEY_BYTES = 20
TAKEN_ADD_BYTES = sizeof(TakenAdd)      # one taken add's packed ids in a run's answers


cdef class AddSink:
    """A sink that takes nothing; subclasses override take_c."""

    cdef int take_c(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                    const uint8_t *entry, Py_ssize_t length) except -1:
        return 0

    cdef void feed_done_c(self) noexcept:
        pass

    cdef bint ready_nogil(self) noexcept nogil:
        return False

    cdef int take_nogil(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                        const uint8_t *entry, Py_ssize_t length) noexcept nogil:
        return 0

    cdef void stretch_done_nogil(self) noexcept nogil:
        pass

    def take(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, bytes master_key, bytes entry):
        """take_c for Python callers (the pure-Python splitter and tests): whether the add was taken."""
        if PyBytes_GET_SIZE(master_key) != MASTER_KEY_BYTES:
            raise ValueError(f"a master key has {MASTER_KEY_BYTES} bytes, not {PyBytes_GET_SIZE(master_key)}")
        try:
            return self.take_c(ledger_id, entry_id, tag, <const uint8_t *>PyBytes_AS_STRING(master_key),
                               <const uint8_t *>PyBytes_AS_STRING(entry), PyBytes_GET_SIZE(entry)) == 1
        finally:
            self.feed_done_c()
