"""File-based index ledger storage (BookKeeper's InterleavedLedgerStorage and SortedLedgerStorage).

Entries go to entry logs (bkfast.storage.entrylogger); their locations go to one `.idx` file per ledger
(spec/bookkeeper-formats.md §4.5), cached in fixed-size pages (ledger_cache). SortedLedgerStorage puts a
sorted memtable (memtable) in front so entries of one ledger land together in the entry log.
"""

from bkfast.indexstorage.storage import IndexedLedgerStorage

__all__ = ["IndexedLedgerStorage"]
