# Where the frame splitter (_codec's FrameSplitter.feed) hands a plain v2 ADD without making a Python object
# of it: the bookie supplies a subclass (bkfast.bookie._addrun.AddRun). It sits below both, as
# _entrysource.pxd does for reads, so the codec imports nothing of the bookie.

from libc.stdint cimport int64_t, uint8_t


cdef class AddSink:
    cdef int take_c(self, int64_t ledger_id, int64_t entry_id, int version, const uint8_t *master_key,
                    const uint8_t *entry, Py_ssize_t length) except -1
    cdef void feed_done_c(self) noexcept


# One add a sink took, as it lists them for the answers (FrameBuilder.add_taken_add_responses reads them).
cdef struct TakenAdd:
    int64_t ledger_id
    int64_t entry_id
    int64_t version
