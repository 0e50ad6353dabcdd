"""What both ledger storages build on: entry logs (`entrylogger`), their scanner and the ledgers map.

Sits below `bkfast.dbstorage` and `bkfast.indexstorage` (which import it) and above the `bkfast._entrylog`
hot path; it never imports the bookie or a storage (docs/architecture.md, "Layers").
"""
