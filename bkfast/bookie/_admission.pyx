# cython: language_level=3, boundscheck=True, wraparound=True, cdivision=True
"""The rules an add passes before ledger storage takes it, for one add or a batch (the Bookie's add_entry and
add_entries), in Cython: the bookie writable or the add a recovery / high-priority one, ids not negative,
the ledger's master key (checked, or remembered and journaled on first sight: Bookie.admit_ledger), the
ledger not fenced (or the add a recovery one); then one ledger storage call for the batch.

Why Cython: this runs once per add on the reactor thread; in Python it cost ~0.3 us per add (a call, a
tuple of ids, a key tuple, a dict lookup). Here the ids are read from the entry's header in place, and an
add to one of the last RECENT ledgers admitted (a writer's batch, or writers taking turns over a few
ledgers, as load generators and brokers do) needs no dict lookup and no Python object at all.

Must never: run without the Bookie's ledger lock held (a fence could come in between), or journal anything
but through the Bookie's first-sight key check (Bookie.admit_ledger).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint64_t

from bkfast._entryheader cimport peek_ids

from bkfast.codec import peek_entry_ids
from bkfast.errors import (
    BKError,
    BKIllegalOpException,
    BKLedgerFencedException,
    BKWriteOnReadOnlyBookieException,
    StorageBusyError,
)
from bkfast.storage.entry_header import entry_lac

__all__ = ["AddAdmission"]

cdef enum:
    RECENT = 8                          # ledgers an AddAdmission remembers as admitted


def _batch_index(failure):
    return failure[0]


cdef int64_t _ledger_of(bytes entry) except? -1:
    """The ledger id in an admitted entry's header (admit checked that it has one)."""
    cdef uint64_t scope_id
    cdef int64_t ledger_id, entry_id
    peek_ids(<const uint8_t *>PyBytes_AS_STRING(entry), PyBytes_GET_SIZE(entry), &scope_id, &ledger_id, &entry_id)
    return ledger_id


cdef class AddAdmission:
    """Built and used with the Bookie's ledger lock held throughout, so no fence can come in between: a
    ledger seen not fenced with a key needs no second look in its batch.

    `admit` / `admit_all` check adds and list them; `store` hands every listed add to ledger storage in one
    call (LedgerStorage.add_entries) and keeps, in the lists, those it stored."""

    cdef object _bookie
    cdef object _is_fenced
    cdef object _tracked
    cdef object _fast_adds
    cdef bint _read_only
    cdef dict _admitted                # (scope, ledger) -> the key admitted for a ledger seen not fenced
    # The last RECENT ledgers admitted (not fenced; keys in _recent_keys), replaced round-robin.
    cdef uint64_t _recent_scope[RECENT]
    cdef int64_t _recent_ledger[RECENT]
    cdef list _recent_keys
    cdef int _recent_count
    cdef int _recent_next
    cdef public dict lacs              # (scope, ledger) -> highest piggy-backed LAC, for tracked ledgers
    # the admitted adds, in order: their index in the batch, bytes (the journal record), storage's
    # high_priority flag and recovery flag (their ledger ids are read from the bytes when asked)
    cdef public list indices
    cdef public list entries
    cdef public list high_priority
    cdef public list recovery
    cdef public Py_ssize_t recoveries

    def __init__(self, bookie):
        """`bookie`: what admission reads of the Bookie — read_only, storage_full.fence_check(),
        lac.tracked and admit_ledger()."""
        self._bookie = bookie
        self._read_only = bookie.read_only
        self._is_fenced = bookie.storage_full.fence_check()
        self._tracked = bookie.lac.tracked
        self._fast_adds = bookie.fast_adds
        self._admitted = {}
        self._recent_keys = [None] * RECENT
        self._recent_count = self._recent_next = 0
        self.lacs = {}
        self.indices, self.entries, self.high_priority, self.recovery = [], [], [], []
        self.recoveries = 0

    cpdef admit(self, Py_ssize_t index, entry, master_key, bint recovery, bint high_priority):
        """Check the add and list it; raises the BKError that refuses it."""
        cdef uint64_t scope_id
        cdef int64_t ledger_id, entry_id
        if self._read_only and not (recovery or high_priority):
            raise BKWriteOnReadOnlyBookieException("bookie is read-only")
        if type(entry) is not bytes:
            entry = bytes(entry)
        if peek_ids(<const uint8_t *>PyBytes_AS_STRING(entry), PyBytes_GET_SIZE(entry), &scope_id, &ledger_id,
                    &entry_id) < 0:
            peek_entry_ids(entry)          # raises the precise TruncatedEntryError
        if ledger_id < 0 or entry_id < 0:
            raise BKIllegalOpException(f"add with invalid ids: ledger {ledger_id} entry {entry_id}")
        if recovery or not self._recently_admitted(scope_id, ledger_id, master_key):
            self._check_ledger(scope_id, ledger_id, master_key, recovery)
        self.indices.append(index)
        self.entries.append(entry)
        self.high_priority.append(recovery or high_priority)
        self.recovery.append(recovery)

    cdef _check_ledger(self, uint64_t scope_id, int64_t ledger_id, master_key, bint recovery):
        key = (scope_id, ledger_id)
        if self._admitted.get(key) != master_key:
            self._bookie.admit_ledger(scope_id, ledger_id, master_key)
            if recovery:
                return
            if self._is_fenced(ledger_id, scope_id):
                raise BKLedgerFencedException(f"ledger {ledger_id} is fenced")
            self._admitted[key] = master_key
            if not scope_id:
                self._fast_adds.note_admitted(ledger_id, master_key)
        elif recovery:
            return
        at = self._recent_next
        self._recent_scope[at], self._recent_ledger[at], self._recent_keys[at] = scope_id, ledger_id, master_key
        self._recent_next = (at + 1) % RECENT
        if self._recent_count < RECENT:
            self._recent_count += 1

    cdef bint _recently_admitted(self, uint64_t scope_id, int64_t ledger_id, master_key) except -1:
        """Whether this ledger is one of the last admitted with this key (then it needs no other check)."""
        cdef int i
        for i in range(self._recent_count):
            if self._recent_ledger[i] == ledger_id and self._recent_scope[i] == scope_id:
                known = self._recent_keys[i]
                return master_key is known or master_key == known
        return False

    def admit_all(self, list adds, list failures, unexpected):
        """admit for each (entry, master key, recovery, high priority) of `adds`; each refusal goes to
        `failures` as (index, error) — a BKError as raised, anything else as `unexpected(index, error)`."""
        cdef Py_ssize_t i
        for i in range(len(adds)):
            entry, master_key, recovery, high_priority = adds[i]
            try:
                self.admit(i, entry, master_key, recovery, high_priority)
            except BKError as error:
                failures.append((i, error))
            except Exception as error:
                failures.append((i, unexpected(i, error)))

    def store(self, storage, list failures, Py_ssize_t n_adds, unexpected):
        """Hand the listed adds to `storage` (one add_entries call, again past each one it refuses); those
        refused leave the lists for `failures`, which ends sorted by batch index. An add refused for want of
        room (StorageBusyError) makes it and every later add of the batch (`n_adds` in all) wait in order for
        the room the flush makes: none of them is stored or journaled, whatever else was wrong with it."""
        cdef Py_ssize_t start = 0, at
        while start < len(self.entries):
            if start:
                stored, error = storage.add_entries(self.entries[start:], self.high_priority[start:])
            else:
                stored, error = storage.add_entries(self.entries, self.high_priority)
            at = start + stored
            if error is None:
                break
            index = self.indices[at]
            failures.append((index, error if isinstance(error, BKError) else unexpected(index, error)))
            if isinstance(error, StorageBusyError):
                self._drop(at, len(self.entries))
                failures[:] = [f for f in failures if f[0] < index] + [(i, error) for i in range(index, n_adds)]
                break
            self._drop(at, at + 1)
            start = at
        if failures:
            failures.sort(key=_batch_index)
        self.recoveries = sum(self.recovery)
        if self._tracked:
            for entry in self.entries:
                self._note_lac(entry)

    cdef _note_lac(self, bytes entry):
        _, scope_id, ledger_id, _ = peek_entry_ids(entry)
        key = (scope_id, ledger_id)
        if key in self._tracked:
            self.lacs[key] = max(self.lacs.get(key, -1), entry_lac(entry))

    cdef _drop(self, Py_ssize_t start, Py_ssize_t end):
        for listed in (self.indices, self.entries, self.high_priority, self.recovery):
            del listed[start:end]

    def journals(self, Py_ssize_t n_journals):
        """Each stored add's journal (several journals only): ledgerId mod n."""
        if n_journals <= 1:
            return None
        return [_ledger_of(entry) % n_journals for entry in self.entries]

    def store_one(self, storage):
        """The single add admitted last, stored now: (its ledger id, its bytes: its journal record)."""
        entry = self.entries[-1]
        storage.add_entry(entry, self.high_priority[-1])
        if self._tracked:
            self._note_lac(entry)
        return _ledger_of(entry), entry
