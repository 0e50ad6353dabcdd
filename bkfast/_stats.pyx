# cython: language_level=3
"""BookKeeper's stats primitives as preallocated C state: a Counter (Java's LongAdder counter) and an
OpStats (Java's OpStatsLogger: success/failure counts, sums and latency or value quantiles).

Recording is a C method call on memory allocated once when the stat is created: no Python object is made
per event, and a whole batch of requests with one latency is one call (`ok_ns_many`). Every method runs
with the GIL held and releases nothing, so a record is atomic with respect to other Python threads.

Quantiles come from a log-linear histogram (32 sub-buckets per power of two: a reported quantile is
within 1.6% of the true value, clamped to the window's exact minimum and maximum) that rolls over like
Java's DataSketches logger: `rollover()` publishes the quantiles of the window that just ended and starts
an empty one; until the first rollover, and for a window without events, a quantile is NaN (Java's empty
sketch). Latencies are kept in milliseconds (Java's unit); values (bytes, entries) as given.
"""

from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.math cimport NAN, frexp, ldexp
from libc.stdint cimport uint32_t
from libc.string cimport memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef enum:
    SUB_BUCKETS = 32
    # Exponents of 2 kept apart: values from 2**-24 (1e-7 ms, a tenth of a nanosecond) to 2**48.
    MIN_EXP = -24
    MAX_EXP = 48
    N_BUCKETS = 1 + (MAX_EXP - MIN_EXP) * SUB_BUCKETS
    N_QUANTILES = 7

# Java's PrometheusTextFormat writes these quantiles of every OpStatsLogger.
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
cdef double C_QUANTILES[7]
C_QUANTILES[:] = [0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0]


cdef struct Window:
    uint32_t counts[N_BUCKETS]
    long long total
    double low
    double high
    int first_bucket
    int last_bucket


cdef long long monotonic_ns() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <long long>now.tv_sec * 1000000000 + now.tv_nsec


def now_ns():
    """CLOCK_MONOTONIC in nanoseconds: the same clock as time.monotonic_ns() and time.perf_counter_ns()."""
    return monotonic_ns()


cdef inline int bucket_of(double value) noexcept nogil:
    cdef int exponent
    cdef double mantissa
    if not value > 0:
        return 0
    mantissa = frexp(value, &exponent)        # value = mantissa * 2**exponent, 0.5 <= mantissa < 1
    if exponent <= MIN_EXP:
        return 1
    if exponent > MAX_EXP:
        return N_BUCKETS - 1
    return 1 + (exponent - MIN_EXP - 1) * SUB_BUCKETS + <int>((mantissa - 0.5) * (2 * SUB_BUCKETS))


cdef inline double bucket_middle(int index) noexcept nogil:
    cdef int k, exponent, sub
    if index == 0:
        return 0.0
    k = index - 1
    exponent = k // SUB_BUCKETS + MIN_EXP + 1
    sub = k % SUB_BUCKETS
    return ldexp(0.5 + (sub + 0.5) / (2.0 * SUB_BUCKETS), exponent)


cdef inline void window_add(Window *window, double value, long long n) noexcept nogil:
    cdef int index = bucket_of(value)
    window.counts[index] += <uint32_t>n
    if window.total == 0:
        window.low = value
        window.high = value
        window.first_bucket = index
        window.last_bucket = index
    else:
        if value < window.low:
            window.low = value
        if value > window.high:
            window.high = value
        if index < window.first_bucket:
            window.first_bucket = index
        if index > window.last_bucket:
            window.last_bucket = index
    window.total += n


cdef void window_publish(Window *window, double *result) noexcept nogil:
    """The window's quantiles into result (NaN when it saw nothing), then empty the window."""
    cdef int q, index
    cdef long long seen, rank
    cdef double value
    if window.total == 0:
        for q in range(N_QUANTILES):
            result[q] = NAN
        return
    index = window.first_bucket
    seen = window.counts[index]
    for q in range(N_QUANTILES):
        if C_QUANTILES[q] >= 1.0:
            result[q] = window.high
            continue
        # The smallest value with at least q of the window at or below it (rank counted from 1).
        rank = <long long>(C_QUANTILES[q] * window.total)
        if rank < 1:
            rank = 1
        while seen < rank and index < window.last_bucket:
            index += 1
            seen += window.counts[index]
        value = bucket_middle(index)
        if value < window.low:
            value = window.low
        if value > window.high:
            value = window.high
        result[q] = value
    memset(&window.counts[window.first_bucket], 0,
           (window.last_bucket - window.first_bucket + 1) * sizeof(uint32_t))
    window.total = 0


cdef class Counter:
    """A counter that goes up (and, like Java's, down: a queue-size counter is one)."""

    def __cinit__(self, bint enabled=True):
        self.value = 0
        self.enabled = enabled

    cpdef void inc(self):
        if self.enabled:
            self.value += 1

    cpdef void dec(self):
        if self.enabled:
            self.value -= 1

    cpdef void add(self, long long delta):
        if self.enabled:
            self.value += delta

    def get(self):
        return self.value


cdef class OpStats:
    """Java's OpStatsLogger: events that succeeded or failed, each with a latency (ns in, ms kept) or a
    value; counts and sums since start, quantiles of the last rolled-over window."""

    def __cinit__(self, bint enabled=True):
        cdef int q
        self.enabled = enabled
        self.ok_window = NULL
        self.fail_window = NULL
        if enabled:
            self.ok_window = PyMem_Calloc(1, sizeof(Window))
            self.fail_window = PyMem_Calloc(1, sizeof(Window))
            if self.ok_window == NULL or self.fail_window == NULL:
                raise MemoryError()
        for q in range(N_QUANTILES):
            self.ok_result[q] = NAN
            self.fail_result[q] = NAN

    def __dealloc__(self):
        PyMem_Free(self.ok_window)
        PyMem_Free(self.fail_window)

    cdef void record_ok(self, double value) noexcept:
        if self.enabled:
            self.ok_count += 1
            self.ok_sum += value
            window_add(<Window *>self.ok_window, value, 1)

    cdef void record_ok_many(self, long long n, double value) noexcept:
        if self.enabled and n > 0:
            self.ok_count += n
            self.ok_sum += value * n
            window_add(<Window *>self.ok_window, value, n)

    cdef void record_fail(self, double value) noexcept:
        if self.enabled:
            self.fail_count += 1
            self.fail_sum += value
            window_add(<Window *>self.fail_window, value, 1)

    cpdef void ok_ns(self, long long nanos):
        self.record_ok(nanos / 1e6)

    cpdef void ok_ns_many(self, long long n, long long nanos):
        """n events that took the same time (the requests of one batch)."""
        self.record_ok_many(n, nanos / 1e6)

    cpdef void fail_ns(self, long long nanos):
        self.record_fail(nanos / 1e6)

    cpdef void fail_ns_many(self, long long n, long long nanos):
        cdef double value = nanos / 1e6
        if self.enabled and n > 0:
            self.fail_count += n
            self.fail_sum += value * n
            window_add(<Window *>self.fail_window, value, n)

    cpdef void ok_since(self, long long start_ns):
        """An event that started at start_ns (now_ns()) and succeeded now."""
        self.record_ok((monotonic_ns() - start_ns) / 1e6)

    cpdef void fail_since(self, long long start_ns):
        self.record_fail((monotonic_ns() - start_ns) / 1e6)

    cpdef void ok_value(self, double value):
        self.record_ok(value)

    cpdef void fail_value(self, double value):
        self.record_fail(value)

    def ok_lengths(self, list items):
        """ok_value(len(item)) for each item (a batch's entries), in one call."""
        cdef Py_ssize_t i, n = len(items)
        if self.enabled:
            for i in range(n):
                self.record_ok(<double>len(items[i]))

    def rollover(self):
        """Publish the quantiles of the window that ends now and start a new one."""
        if self.enabled:
            window_publish(<Window *>self.ok_window, self.ok_result)
            window_publish(<Window *>self.fail_window, self.fail_result)

    def quantiles(self, bint success):
        """The published quantiles, in the order of QUANTILES (NaN: nothing in the last window)."""
        cdef double *result = &self.ok_result[0] if success else &self.fail_result[0]
        return tuple(result[q] for q in range(N_QUANTILES))

    def count(self, bint success):
        return self.ok_count if success else self.fail_count

    def total(self, bint success):
        return self.ok_sum if success else self.fail_sum
