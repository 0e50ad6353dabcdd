"""Choose and open the ledger storage a bookie's `ledgerStorageClass` names.

Owns the mapping from BookKeeper's storage class names (and short names) to bkfast's implementations:
SortedLedgerStorage -> IndexedLedgerStorage with a memtable, InterleavedLedgerStorage -> without one,
ldb.DbLedgerStorage -> bkfast.dbstorage. Must never fall back silently to another on-disk format than
the operator asked for: anything else is a ConfigurationError naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bkfast.errors import ConfigurationError

__all__ = ["open_ledger_storage", "storage_kind", "DB_LEDGER_STORAGE_NAMES", "SORTED_LEDGER_STORAGE_NAMES",
           "INTERLEAVED_LEDGER_STORAGE_NAMES"]

DB_LEDGER_STORAGE_NAMES = frozenset({
    "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage", "DbLedgerStorage", "db",
})
SORTED_LEDGER_STORAGE_NAMES = frozenset({
    "org.apache.bookkeeper.bookie.SortedLedgerStorage", "SortedLedgerStorage", "sorted",
})
INTERLEAVED_LEDGER_STORAGE_NAMES = frozenset({
    "org.apache.bookkeeper.bookie.InterleavedLedgerStorage", "InterleavedLedgerStorage", "interleaved",
})


def storage_kind(storage_class: str) -> str:
    """"db", "sorted" or "interleaved" for a ledgerStorageClass value; ConfigurationError otherwise."""
    name = (storage_class or "").strip()
    if name in DB_LEDGER_STORAGE_NAMES:
        return "db"
    if name in SORTED_LEDGER_STORAGE_NAMES:
        return "sorted"
    if name in INTERLEAVED_LEDGER_STORAGE_NAMES:
        return "interleaved"
    raise ConfigurationError(
        f"ledgerStorageClass: {storage_class!r} is not a storage bkfast serves; use "
        f"org.apache.bookkeeper.bookie.SortedLedgerStorage, org.apache.bookkeeper.bookie.InterleavedLedgerStorage "
        f"or org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage")


def open_ledger_storage(conf, ledger_dirs: Sequence[str | os.PathLike[str]],
                        index_dirs: Sequence[str | os.PathLike[str]] | None, stats=None):
    """The ledger storage `conf.ledgerStorageClass` names, opened on these directories; `stats`: the
    `bookie` scope StatsLogger its stats go to (None: none)."""
    kind = storage_kind(conf.get("ledgerStorageClass"))
    ledger_dirs = [str(d) for d in ledger_dirs]
    index_dirs = [str(d) for d in index_dirs] if index_dirs else None
    if kind == "db":
        from bkfast.dbstorage.storage import DbLedgerStorage

        return DbLedgerStorage.from_conf(ledger_dirs, index_dirs, conf, stats=stats)
    from bkfast.indexstorage.storage import IndexedLedgerStorage

    return IndexedLedgerStorage.from_conf(ledger_dirs, index_dirs, conf, sorted=(kind == "sorted"), stats=stats)
