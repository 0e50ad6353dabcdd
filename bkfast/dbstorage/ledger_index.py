"""Per-ledger metadata of DbLedgerStorage: master key, fenced flag, explicit LAC, limbo.

Owns the `ledgers` RocksDB store (key = ledgerId(8) big-endian, value = serialized `LedgerData`
protobuf, byte-identical to Java's; spec/bookkeeper-formats.md §4.6) and bkfast's `ledgers128` store
for scope != 0 (key = scope(8) | ledgerId(8)), plus an in-memory copy of every record (loaded on open,
as Java's LedgerMetadataIndex does) so lookups on the add/read path never touch RocksDB. The copy holds
each record serialized (~130 bytes of RSS per ledger with its dict slot; a parsed LedgerData took ~630)
and parses it on lookup (~0.4 us): a bookie may hold millions of ledgers.

Must never: list the storage-state key -0xeefd as a ledger (it holds Java's 8-byte storage flags), or
drop fields it does not change (limbo is preserved on every update).

Durability: every update is written through to RocksDB at once, without a sync: master keys, fences and
explicit LACs alike. Their journal records cover a crash (replay re-applies them), and sync(), which the
storage calls at every flush/checkpoint, makes them durable here before the Bookie moves its lastMark past
those records. Never a synced write on an update: the Bookie updates from the reactor thread (a fence
stalled every connection for a RocksDB WAL fsync, issue 26).
"""

from __future__ import annotations

import builtins
import struct
import threading
from pathlib import Path

from bkfast.dbstorage.index import RocksStore, ScopedStorePair, qualified_key, split_key
from bkfast.errors import BKNoSuchLedgerExistsException, BKUnauthorizedAccessException
from bkfast.proto.DbLedgerStorageDataFormats_pb2 import LedgerData

__all__ = ["LEDGERS", "LEDGERS128", "STORAGE_STATE_KEY", "LedgerMetadataIndex"]

LEDGERS = "ledgers"
LEDGERS128 = "ledgers128"

_LONG = struct.Struct(">q")
_KEY128 = struct.Struct(">Qq")
STORAGE_STATE_KEY = _LONG.pack(-0xEEFD)
"""Key of Java's storage-state flags word in `ledgers` (not a ledger)."""


def _all_zeros(key: bytes) -> bool:
    return not any(key)


class LedgerMetadataIndex(ScopedStorePair):
    """LedgerData of every ledger of one index directory, cached in memory, written through."""

    def __init__(self, current_dir: Path, block_cache_bytes: int = 4 << 20):
        self._dir = Path(current_dir)
        self._cache_bytes = block_cache_bytes
        self._lock = threading.RLock()
        self._plain = RocksStore(self._dir / LEDGERS, block_cache_bytes=block_cache_bytes)
        self._scoped: RocksStore | None = None
        # records written while a store was read-only (full disk): name -> (store, key, value or None)
        self._pending: dict[bytes, tuple[RocksStore, bytes, bytes | None]] = {}
        # qualified ledger key -> serialized LedgerData (as stored; parsed on lookup)
        self._ledgers: dict[int, bytes] = {}
        for key, value in self._plain.items():
            if len(key) != 8 or key == STORAGE_STATE_KEY:
                continue
            LedgerData.FromString(value)        # a record that does not parse fails the open, as before
            self._ledgers[_LONG.unpack(key)[0]] = value
        if (self._dir / LEDGERS128).is_dir():
            for key, value in self._open_scoped().items():
                if len(key) != 16:
                    continue
                scope_id, ledger_id = _KEY128.unpack(key)
                LedgerData.FromString(value)
                self._ledgers[qualified_key(scope_id, ledger_id)] = value

    def _open_scoped(self) -> RocksStore:
        if self._scoped is None:
            self._scoped = RocksStore(self._dir / LEDGERS128, block_cache_bytes=self._cache_bytes)
        return self._scoped

    def _store_key(self, scope_id: int, ledger_id: int) -> tuple[RocksStore, bytes]:
        if not scope_id:
            return self._plain, _LONG.pack(ledger_id)
        return self._open_scoped(), _KEY128.pack(scope_id, ledger_id)

    def _write(self, scope_id: int, ledger_id: int, data: LedgerData) -> None:
        """Write through to RocksDB, then replace the in-memory copy.

        A store opened read-only on a full disk keeps the record pending (memory only) until
        reopen_writable(): the Bookie's journal holds it, and sync() refuses while any is pending, so the
        Bookie cannot move its lastMark past the journal record."""
        value = data.SerializeToString()
        store, key = self._store_key(scope_id, ledger_id)
        if store.read_only:
            self._pending[key if not scope_id else b"s" + key] = (store, key, value)
        else:
            store.put(key, value)
        self._ledgers[qualified_key(scope_id, ledger_id)] = value

    def sync(self) -> None:
        """Make every update so far durable; OSError(ENOSPC) while updates wait for a writable store."""
        if self._pending:
            self._write_pending()
        super().sync()

    def _write_pending(self) -> None:
        with self._lock:
            for name, (store, key, value) in list(self._pending.items()):
                if value is None:
                    store.delete(key)       # raises OSError(ENOSPC) while the store is read-only
                else:
                    store.put(key, value)
                del self._pending[name]

    def reopen_writable(self) -> None:
        """The disk has room again: open the stores for writing and write the pending records."""
        super().reopen_writable()
        self.sync()

    # -- reads (no lock: one dict lookup, and records are replaced, never mutated) ------------------

    def get(self, scope_id: int, ledger_id: int) -> LedgerData | None:
        """A parsed copy of the ledger's record (changing it changes nothing stored)."""
        value = self._ledgers.get(qualified_key(scope_id, ledger_id))
        return None if value is None else LedgerData.FromString(value)

    @property
    def count(self) -> int:
        """Ledgers with a record (Java's ledgers_count gauge)."""
        return len(self._ledgers)

    def exists(self, scope_id: int, ledger_id: int) -> bool:
        return qualified_key(scope_id, ledger_id) in self._ledgers

    def list(self, scope_id: int) -> list[int]:
        """Ledger ids of one scope, ascending."""
        keys = list(self._ledgers)
        if not scope_id:
            return sorted(k for k in keys if k >> 64 == 0)
        return sorted(ledger for scope, ledger in map(split_key, keys) if scope == scope_id)

    def keys(self) -> builtins.list[tuple[int, int]]:       # builtins: `list` here is the method above
        """(scope_id, ledger_id) of every ledger, in (scope, ledger) order."""
        return [split_key(k) for k in sorted(self._ledgers)]

    # -- updates ------------------------------------------------------------------------------------

    def _required(self, scope_id: int, ledger_id: int) -> LedgerData:
        data = self.get(scope_id, ledger_id)
        if data is None:
            what = f"ledger {ledger_id}" + (f" (scope {scope_id})" if scope_id else "")
            raise BKNoSuchLedgerExistsException(f"No such ledger exists: {what} is not on this bookie")
        return data

    def set_master_key(self, scope_id: int, ledger_id: int, master_key: bytes) -> None:
        """Create the ledger with this key, or check the key of an existing ledger (Java's rules: a key
        of all zeros is a placeholder that a real key replaces; otherwise keys must match)."""
        master_key = bytes(master_key)
        with self._lock:
            old = self.get(scope_id, ledger_id)
            if old is None:
                new = LedgerData(exists=True, fenced=False, masterKey=master_key)
            elif old.masterKey == master_key or _all_zeros(master_key):
                return
            elif _all_zeros(old.masterKey):
                new = old
                new.masterKey = master_key
            else:
                raise BKUnauthorizedAccessException(
                    f"ledger {ledger_id}" + (f" (scope {scope_id})" if scope_id else "")
                    + " already has another master key")
            self._write(scope_id, ledger_id, new)

    def set_fenced(self, scope_id: int, ledger_id: int) -> bool:
        """Fence the ledger (durable at the next sync(); see the module's Durability); True if it was not
        fenced before."""
        with self._lock:
            old = self._required(scope_id, ledger_id)
            if old.fenced:
                return False
            old.fenced = True                   # a parsed copy: the stored record changes in _write
            self._write(scope_id, ledger_id, old)
            return True

    def set_explicit_lac(self, scope_id: int, ledger_id: int, lac: bytes) -> None:
        with self._lock:
            data = self._required(scope_id, ledger_id)
            data.explicitLac = bytes(lac)
            self._write(scope_id, ledger_id, data)

    def delete(self, scope_id: int, ledger_id: int) -> bool:
        with self._lock:
            if self._ledgers.pop(qualified_key(scope_id, ledger_id), None) is None:
                return False
            store, key = self._store_key(scope_id, ledger_id)
            if store.read_only:
                self._pending[key if not scope_id else b"s" + key] = (store, key, None)
            else:
                store.delete(key)
            return True
