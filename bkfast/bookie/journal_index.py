"""The records a start-up replay could not store, served from the journal files themselves.

Owns: an in-memory index of the journal records after the positions where the start-up replay stopped
(a full ledger disk, see bookie/storage_full.py) — for entries, (scope, ledger, entry) -> (journal
file, offset, length); for ledgers with meta records among them, the master key, fence and explicit LAC
those records set — the reads of entries through their journal file, and forgetting entries as the
resumed replay stores them. The Bookie asks it after ledger storage (storage_full's read view), so an
acknowledged entry stays readable, and its ledger's last entry, LAC and fence stay true, until the
replay has room to store it.

Bounded: it holds the records after the stop only, and at most MAX_ENTRIES entries (about 100 bytes of
memory each); entries after that are left out and `complete` turns False (reads of them answer an I/O
error, never "no such entry"). Meta records are always taken: a fence must never be forgotten.

Must never: hand out bytes other than the indexed record (length and ids are checked on every read), or
keep a journal file open: each read opens the file, so the index never holds one back from deletion;
the Bookie runs no checkpoint, hence no journal garbage collection, while an index exists.
"""

from __future__ import annotations

import logging
import os
import threading

from bkfast.bookie import journal_files
from bkfast.bookie.journal import RecordKind, parse_record
from bkfast.codec import peek_entry_ids
from bkfast.errors import BKBookieIOException, JournalCorruptionError

__all__ = ["MAX_ENTRIES", "JournalIndex"]

log = logging.getLogger(__name__)

MAX_ENTRIES = 1_000_000
# A location is one int: offset << 48 | length << 16 | file slot (65,536 files, records below 4 GiB).
_SLOT_BITS = 16
_LENGTH_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1


class _LedgerMeta:
    __slots__ = ("master_key", "fenced", "explicit_lac")

    def __init__(self):
        self.master_key: bytes | None = None
        self.fenced = False
        self.explicit_lac: bytes | None = None


class JournalIndex:
    """Entries and ledger metadata of the unreplayed journal records (see the module docstring)."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._lock = threading.Lock()
        self._max_entries = max_entries
        self._files: list[str] = []
        self._slots: dict[str, int] = {}
        self._entries: dict[tuple[int, int], dict[int, int]] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._meta: dict[tuple[int, int], _LedgerMeta] = {}
        self.entries = 0
        self.bytes = 0
        self.complete = True

    @classmethod
    def build(cls, sources, skip_invalid: bool = False, max_entries: int = MAX_ENTRIES) -> JournalIndex:
        """Index every record after each `(journal_dir, mark)` of `sources`."""
        index = cls(max_entries)
        for journal_dir, mark in sources:
            try:
                for journal_id, end, record in journal_files.records_after(journal_dir, mark, skip_invalid):
                    index._note(journal_files.journal_path(journal_dir, journal_id), end - len(record), record)
            except JournalCorruptionError as error:
                # The replay will meet the same record: what follows it is not served either.
                log.error("indexing the unreplayed journal records of %s stopped: %s", journal_dir, error)
                index.complete = False
        if index.entries >= max_entries:
            log.error("only the first %d unreplayed journal entries are served from the journal "
                      "(at most %d are indexed)", index.entries, max_entries)
        return index

    def _note(self, path: str, offset: int, record: bytes) -> None:
        r = parse_record(record)
        key = (r.scope_id, r.ledger_id)
        if r.kind == RecordKind.ENTRY:
            if self.entries >= self._max_entries:
                self.complete = False
                return
            slot = self._slots.get(path)
            if slot is None:
                slot = self._slots[path] = len(self._files)
                self._files.append(path)
            entries = self._entries.setdefault(key, {})
            old = entries.get(r.entry_id)
            if old is None:
                self.entries += 1
            else:
                self.bytes -= (old >> _SLOT_BITS) & _LENGTH_MASK
            entries[r.entry_id] = (offset << (_LENGTH_BITS + _SLOT_BITS)) | (len(record) << _SLOT_BITS) | slot
            self.bytes += len(record)
            if r.entry_id > self._last.get(key, -1):
                self._last[key] = r.entry_id
            return
        meta = self._meta.get(key)
        if meta is None:
            meta = self._meta[key] = _LedgerMeta()
        if r.kind == RecordKind.MASTER_KEY:
            if meta.master_key is None:          # as replay: the first key of a ledger is its key
                meta.master_key = bytes(r.body)
        elif r.kind == RecordKind.FENCE:
            meta.fenced = True
        elif r.kind == RecordKind.EXPLICIT_LAC:
            meta.explicit_lac = bytes(r.body)

    def __len__(self) -> int:
        return self.entries

    @property
    def ledgers(self) -> int:
        return len(self._entries)

    # --- entries -------------------------------------------------------------------------------------
    def _location(self, key: tuple[int, int], entry_id: int) -> int | None:
        entries = self._entries.get(key)
        return None if entries is None else entries.get(entry_id)

    def read_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's record from its journal file; None when the index does not hold it (never did,
        or the replay stored it meanwhile). BKBookieIOException when it holds it and cannot read it."""
        key = (scope_id, ledger_id)
        with self._lock:
            location = self._location(key, entry_id)
            if location is None:
                return None
            path = self._files[location & _SLOT_MASK]
        offset = location >> (_LENGTH_BITS + _SLOT_BITS)
        length = (location >> _SLOT_BITS) & _LENGTH_MASK
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.pread(fd, length, offset)
            finally:
                os.close(fd)
            if len(data) == length and peek_entry_ids(data)[1:] == (scope_id, ledger_id, entry_id):
                return data
            problem = f"{path} holds other bytes at offset {offset}"
        except (OSError, ValueError) as error:
            problem = str(error)
        with self._lock:
            if self._location(key, entry_id) != location:
                return None                      # stored by the replay meanwhile: ledger storage has it
        raise BKBookieIOException(f"entry {entry_id} of ledger {ledger_id} is only in the journal, and "
                                  f"reading it failed: {problem}")

    def last_entry(self, scope_id: int, ledger_id: int) -> int:
        """The highest entry id of the ledger the index holds, -1 when none."""
        return self._last.get((scope_id, ledger_id), -1)

    def entry_ids(self, scope_id: int, ledger_id: int) -> set[int]:
        with self._lock:
            return set(self._entries.get((scope_id, ledger_id), ()))

    def forget_entry(self, scope_id: int, ledger_id: int, entry_id: int) -> None:
        """The replay stored this entry in ledger storage: reads find it there from now on."""
        key = (scope_id, ledger_id)
        with self._lock:
            entries = self._entries.get(key)
            if entries is None:
                return
            location = entries.pop(entry_id, None)
            if location is None:
                return
            self.entries -= 1
            self.bytes -= (location >> _SLOT_BITS) & _LENGTH_MASK
            if not entries:
                del self._entries[key]
                del self._last[key]
            elif self._last[key] == entry_id:
                self._last[key] = max(entries)

    def forget_ledger(self, scope_id: int, ledger_id: int) -> None:
        """The ledger was deleted."""
        key = (scope_id, ledger_id)
        with self._lock:
            entries = self._entries.pop(key, None)
            if entries:
                self.entries -= len(entries)
                self.bytes -= sum((loc >> _SLOT_BITS) & _LENGTH_MASK for loc in entries.values())
            self._last.pop(key, None)
            self._meta.pop(key, None)

    # --- ledger metadata -------------------------------------------------------------------------------
    def knows(self, scope_id: int, ledger_id: int) -> bool:
        key = (scope_id, ledger_id)
        return key in self._entries or key in self._meta

    def master_key(self, scope_id: int, ledger_id: int) -> bytes | None:
        meta = self._meta.get((scope_id, ledger_id))
        return None if meta is None else meta.master_key

    def fenced(self, scope_id: int, ledger_id: int) -> bool:
        meta = self._meta.get((scope_id, ledger_id))
        return meta is not None and meta.fenced

    def explicit_lac(self, scope_id: int, ledger_id: int) -> bytes | None:
        meta = self._meta.get((scope_id, ledger_id))
        return None if meta is None else meta.explicit_lac
