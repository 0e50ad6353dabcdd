# cython: language_level=3
"""A queue from the reactor to the add worker whose wake-up runs with the GIL released.

Owns: the items handed over and not yet taken (a deque, touched only with the GIL held) and a count of
them under a pthread mutex, with a condition the taker sleeps on.

Why: the reactor hands the add worker one socket read at a time, and the worker, faster than the reactor,
is usually asleep when the next one comes. Waking it is a futex syscall; a queue.SimpleQueue or a
threading.Condition makes it with the GIL held, and it was the reactor's largest GIL-held line under adds
(py-spy: 18% of its GIL-held samples with the worker). Here `put` appends and counts with the GIL held and,
when the worker sleeps, signals it without the GIL.

Not for the read pool: its threads hold the GIL for most of a read, so a put that lets the GIL go hands it
to one of them and the reactor waits to get it back. Measured on cold reads (bench/thread_cpu_scaling.py,
alternated): reactor CPU 5.1-8.2 us per read through this queue against 3.1-4.9 through queue.SimpleQueue.
The add worker runs its adds with the GIL released, and the reactor's CPU per add did not grow with it.

Must never: let `get` return before the item `put` counted is in the deque (put appends first), or be
taken from by more than one thread.
"""

from collections import deque

from libc.stdlib cimport malloc, free


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)
    int pthread_cond_init(pthread_cond_t *cond, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *cond)
    int pthread_cond_wait(pthread_cond_t *cond, pthread_mutex_t *mutex)
    int pthread_cond_signal(pthread_cond_t *cond)


cdef class HandOff:
    """put(item) from the reactor; get() on the one worker thread blocks (GIL released) until an item is
    there and returns the items in the order put."""

    cdef object items
    cdef pthread_mutex_t *mutex
    cdef pthread_cond_t *cond
    cdef Py_ssize_t counted     # items put and not taken (under mutex)
    cdef bint waiting           # the taker sleeps on cond (under mutex)

    def __cinit__(self):
        self.items = deque()
        self.mutex = <pthread_mutex_t *>malloc(sizeof(pthread_mutex_t))
        self.cond = <pthread_cond_t *>malloc(sizeof(pthread_cond_t))
        if self.mutex == NULL or self.cond == NULL:
            free(self.mutex)
            free(self.cond)
            self.mutex = NULL
            self.cond = NULL
            raise MemoryError("hand-off queue: out of memory")
        pthread_mutex_init(self.mutex, NULL)
        pthread_cond_init(self.cond, NULL)

    def __dealloc__(self):
        if self.mutex != NULL:
            pthread_cond_destroy(self.cond)
            pthread_mutex_destroy(self.mutex)
            free(self.mutex)
            free(self.cond)

    def put(self, item) -> None:
        cdef bint wake
        self.items.append(item)
        # The mutex is taken with the GIL held: the taker never holds it while it waits for the GIL. The
        # GIL is let go only to wake a taker that sleeps: letting it go hands it to whichever thread waits
        # for it, and the reactor then waits to get it back.
        pthread_mutex_lock(self.mutex)
        self.counted += 1
        wake = self.waiting
        pthread_mutex_unlock(self.mutex)
        if wake:
            with nogil:
                pthread_cond_signal(self.cond)

    def get(self):
        with nogil:
            pthread_mutex_lock(self.mutex)
            while self.counted == 0:
                self.waiting = True
                pthread_cond_wait(self.cond, self.mutex)
                self.waiting = False
            self.counted -= 1
            pthread_mutex_unlock(self.mutex)
        return self.items.popleft()

    def __len__(self) -> int:
        return len(self.items)
