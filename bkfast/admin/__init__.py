"""The operations behind `bkfast shell` and the HTTP admin API: they return data and never print.

- `common`: AdminError (an operator's mistake, one line), ledger references (id, scope, qualified name),
  the metadata URI / ZooKeeper session of a command, the reactor bridge for client calls.
- `cluster`: ZooKeeper-side cluster operations (initnewcluster, metaformat, nukeexistingcluster,
  whatisinstanceid, listbookies, bookieinfo, clusterinfo).
- `ledgers`: ledger operations through the client (listledgers, ledgermetadata, readledger,
  deleteledger, simpletest).
- `bookie_files`: a stopped bookie's own files (lastmark, readjournal, readentrylog, ledger index,
  listfilesondisc, localconsistencycheck), plus cookies (bookieformat, updatecookie) and bookiesanity.
- `storage_access`: the ONE place admin imports the bookie's storage modules from.

Long operations take `progress(done, total)` callables (total may be None) so a face can show a bar.
"""

from .common import AdminError, LedgerRef

__all__ = ["AdminError", "LedgerRef"]
