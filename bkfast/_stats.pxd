# The C view of bkfast._stats, for Cython modules that record without a Python call per event.

cdef class Counter:
    cdef public long long value
    cdef bint enabled
    cpdef void inc(self)
    cpdef void dec(self)
    cpdef void add(self, long long delta)


cdef class OpStats:
    cdef void *ok_window
    cdef void *fail_window
    cdef readonly long long ok_count
    cdef readonly long long fail_count
    cdef readonly double ok_sum
    cdef readonly double fail_sum
    cdef double ok_result[7]
    cdef double fail_result[7]
    cdef bint enabled
    cdef void record_ok(self, double value) noexcept
    cdef void record_ok_many(self, long long n, double value) noexcept
    cdef void record_fail(self, double value) noexcept
    cpdef void ok_ns(self, long long nanos)
    cpdef void ok_ns_many(self, long long n, long long nanos)
    cpdef void fail_ns(self, long long nanos)
    cpdef void fail_ns_many(self, long long n, long long nanos)
    cpdef void ok_since(self, long long start_ns)
    cpdef void fail_since(self, long long start_ns)
    cpdef void ok_value(self, double value)
    cpdef void fail_value(self, double value)


cdef long long monotonic_ns() noexcept nogil
