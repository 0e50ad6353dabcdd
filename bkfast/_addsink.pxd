# Where the frame splitter (_codec's FrameSplitter.feed) hands a plain v2 ADD or v3 ADD_ENTRY without making
# a Python object of it: the bookie supplies a subclass (bkfast.bookie._addrun.AddRun). It sits below both, as
# _entrysource.pxd does for reads, so the codec imports nothing of the bookie.

from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef class AddSink:
    cdef int take_c(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                    const uint8_t *entry, Py_ssize_t length) except -1
    cdef void feed_done_c(self) noexcept
    # The GIL-free side: while ready_nogil() the splitter may offer whole plain adds to take_nogil with the
    # GIL released (0 answers "not here": the splitter offers that add to take_c, with the GIL); it calls
    # stretch_done_nogil before it takes the GIL back.
    cdef bint ready_nogil(self) noexcept nogil
    cdef int take_nogil(self, int64_t ledger_id, int64_t entry_id, uint64_t tag, const uint8_t *master_key,
                        const uint8_t *entry, Py_ssize_t length) noexcept nogil
    cdef void stretch_done_nogil(self) noexcept nogil


# One add a sink took, as it lists them for the answers (FrameBuilder.add_taken_add_responses and
# add_v3_taken_add_responses read them).
cdef struct TakenAdd:
    int64_t ledger_id
    int64_t entry_id
    uint64_t tag                # what else the answer needs: a v2 request's protocol version, a v3 txn id
