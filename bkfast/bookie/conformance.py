"""The type checker's proof that each implementation has every method of its interface (`make typecheck`).

Nothing imports this module at run time; mypy checks it with the package. A method missing from an
implementation, or one whose signature no longer fits, fails the check here with the interface's name:
- bkfast.storage.interface.LedgerStorage: DbLedgerStorage, IndexedLedgerStorage (Sorted and Interleaved
  are the same class, with and without its memtable);
- bkfast.bookie.interface.ServerBookie: the Bookie.
"""

from __future__ import annotations

from bkfast.bookie.bookie import Bookie
from bkfast.bookie.interface import ServerBookie
from bkfast.dbstorage.storage import DbLedgerStorage
from bkfast.indexstorage.storage import IndexedLedgerStorage
from bkfast.storage.interface import LedgerStorage

__all__: list[str] = []


def _db_ledger_storage(storage: DbLedgerStorage) -> LedgerStorage:
    return storage


def _indexed_ledger_storage(storage: IndexedLedgerStorage) -> LedgerStorage:
    return storage


def _server_bookie(bookie: Bookie) -> ServerBookie:
    return bookie
