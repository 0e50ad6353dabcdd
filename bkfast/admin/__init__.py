"""The operations behind `bkfast shell` and the HTTP admin API: they return data and never print.

- `common`: AdminError (an operator's mistake, one line), ledger references (id, scope, qualified name),
  the metadata URI / ZooKeeper session of a command, the reactor bridge for client calls.
- `cluster`: ZooKeeper-side cluster operations (initnewcluster, metaformat, nukeexistingcluster,
  whatisinstanceid, listbookies, bookieinfo, clusterinfo).
- `ledgers`: ledger operations through the client (listledgers, ledgermetadata, readledger,
  deleteledger, simpletest).
- `bookie_files`: a stopped bookie's own files (lastmark, readjournal, readentrylog, ledger index,
  listfilesondisc, localconsistencycheck), both storages and Java-written directories.
- `bookie_ops`: one bookie's cookies (bookieformat, updatecookie) and bookiesanity.
- `storage_access`: the ONE place admin imports the bookie's storage modules from (journal, entry logs,
  lastMark, storage factory), so moving them is one import to fix.

Long operations take `progress(done, total)` callables (total may be None) so a face can show a bar.
"""

from .common import AdminError, LedgerRef

__all__ = ["AdminError", "LedgerRef"]
