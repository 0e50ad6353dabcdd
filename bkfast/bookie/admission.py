"""The rules an add passes before ledger storage takes it, for one add or a batch (the Bookie's add_entry and
add_entries): the bookie writable or the add a recovery / high-priority one, ids not negative, the ledger's
master key, the ledger not fenced (or the add a recovery one); then one ledger storage call for the batch.

Must never: run without the Bookie's ledger lock held (a fence could come in between), or journal anything
but through the Bookie's first-sight key check (Bookie.admit_ledger).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from bkfast.codec import peek_entry_ids
from bkfast.errors import (
    BKError,
    BKIllegalOpException,
    BKLedgerFencedException,
    BKWriteOnReadOnlyBookieException,
    StorageBusyError,
)
from bkfast.storage.entry_header import entry_lac

__all__ = ["AddAdmission", "AdmittingBookie"]


class AdmittingBookie(Protocol):
    """What admission reads of the Bookie (bkfast.bookie.bookie.Bookie)."""

    read_only: bool
    storage_full: Any          # its fence_check(): ledger storage's is_fenced, or the replay index's
    lac: Any                   # its tracked ledgers

    def admit_ledger(self, scope_id: int, ledger_id: int, master_key: bytes) -> None: ...


class AddAdmission:
    """The one home of the rules an add passes before ledger storage takes it — the bookie writable (or
    the add a recovery / high-priority one), ids not negative, the ledger's master key (checked, or
    remembered and journaled on first sight), the ledger not fenced (or the add a recovery one) — for one
    add or every add of one batch. Built and used with the Bookie's ledger lock held throughout, so no
    fence can come in between: a ledger seen not fenced with a key needs no second look in its batch.

    `admit` checks an add and lists it; `store` hands every listed add to ledger storage in one call
    (LedgerStorage.add_entries) and keeps, in the lists, those it stored."""

    __slots__ = ("_bookie", "_read_only", "_is_fenced", "_admitted", "_tracked", "lacs", "indices", "entries",
                 "high_priority", "ledgers", "recovery", "recoveries")

    def __init__(self, bookie: AdmittingBookie):
        self._bookie = bookie
        self._read_only = bookie.read_only
        self._is_fenced = bookie.storage_full.fence_check()
        # (scope, ledger) -> the master key admitted by this object for a ledger seen not fenced
        self._admitted: dict[tuple[int, int], bytes] = {}
        self._tracked = bookie.lac.tracked
        # (scope, ledger) -> the highest LAC the stored entries piggy-back, for ledgers readers track
        self.lacs: dict[tuple[int, int], int] = {}
        # the admitted adds, in order: their index in the batch, bytes (the journal record), storage's
        # high_priority flag, ledger id and recovery flag
        self.indices: list[int] = []
        self.entries: list[bytes] = []
        self.high_priority: list[bool] = []
        self.ledgers: list[int] = []
        self.recovery: list[bool] = []
        self.recoveries = 0

    def admit(self, index: int, entry, master_key: bytes, recovery: bool, high_priority: bool) -> None:
        """Check the add and list it; raises the BKError that refuses it."""
        if self._read_only and not (recovery or high_priority):
            raise BKWriteOnReadOnlyBookieException("bookie is read-only")
        _, scope_id, ledger_id, entry_id = peek_entry_ids(entry)
        if ledger_id < 0 or entry_id < 0:
            raise BKIllegalOpException(f"add with invalid ids: ledger {ledger_id} entry {entry_id}")
        key = (scope_id, ledger_id)
        if self._admitted.get(key) != master_key:
            self._bookie.admit_ledger(scope_id, ledger_id, master_key)
            if not recovery:
                if self._is_fenced(ledger_id, scope_id):
                    raise BKLedgerFencedException(f"ledger {ledger_id} is fenced")
                self._admitted[key] = master_key
        self.indices.append(index)
        self.entries.append(entry if type(entry) is bytes else bytes(entry))
        self.high_priority.append(recovery or high_priority)
        self.ledgers.append(ledger_id)
        self.recovery.append(recovery)

    def store(self, storage, failures: list, unexpected: Callable[[int, Exception], BaseException]) -> int | None:
        """Hand the listed adds to `storage` (one add_entries call, again past each one it refuses); those
        refused leave the lists for `failures`. Returns the batch index of the first add refused for want
        of room (StorageBusyError: it and every later listed add leave the lists), or None."""
        start = 0
        while start < len(self.entries):
            part = (self.entries, self.high_priority) if not start else \
                (self.entries[start:], self.high_priority[start:])
            stored, error = storage.add_entries(*part)
            at = start + stored
            if error is None:
                break
            index = self.indices[at]
            failures.append((index, error if isinstance(error, BKError) else unexpected(index, error)))
            if isinstance(error, StorageBusyError):
                self._drop(at, len(self.entries))
                return index
            self._drop(at, at + 1)
            start = at
        self.recoveries = sum(self.recovery)
        tracked = self._tracked
        if tracked:
            for entry in self.entries:
                _, scope_id, ledger_id, _ = peek_entry_ids(entry)
                key = (scope_id, ledger_id)
                if key in tracked:
                    self.lacs[key] = max(self.lacs.get(key, -1), entry_lac(entry))
        return None

    def _drop(self, start: int, end: int) -> None:
        for listed in (self.indices, self.entries, self.high_priority, self.ledgers, self.recovery):
            del listed[start:end]

    def journals(self, n_journals: int) -> list[int] | None:
        """Each stored add's journal (several journals only): ledgerId mod n."""
        return [ledger_id % n_journals for ledger_id in self.ledgers] if n_journals > 1 else None

    def store_one(self, storage) -> tuple[int, bytes]:
        """The single add admitted last, stored now: (its ledger id, its bytes: its journal record)."""
        entry = self.entries[-1]
        storage.add_entry(entry, self.high_priority[-1])
        if self._tracked:
            _, scope_id, ledger_id, _ = peek_entry_ids(entry)
            if (scope_id, ledger_id) in self._tracked:
                self.lacs[(scope_id, ledger_id)] = entry_lac(entry)
        return self.ledgers[-1], entry
