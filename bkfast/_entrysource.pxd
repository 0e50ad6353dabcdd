# Where the reactor's read loops (_codec's serve_v2_reads / serve_v3_reads) find an entry in memory
# without a Python call: ledger storage supplies a subclass (bkfast._writecache.MemoryEntries for
# DbLedgerStorage). It sits below both so the codec needs no import of the storage's modules.

from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef class EntrySource:
    cdef Py_ssize_t find_c(self, uint64_t scope_id, uint64_t ledger_id, int64_t entry_id,
                           const uint8_t **data) except -2
