"""AutoRecovery and manual bookie recovery (issue 13), compatible with Java BookKeeper 4.16's ZooKeeper layout.

Its metadata (marks, locks, the switch, the delay, the auditor election) is reached only through the metadata
driver's interfaces (bkfast.meta.underreplication); the ZooKeeper layout lives in bkfast.meta.
- `settings`: the configuration keys the auditor, the worker and the daemon follow, as typed values.
- `loop`: the thread the auditor and the worker run in, and the registered bookies they judge by.
- `scan`: every ledger's metadata read in windows (the auditor's index, the placement check).
- `copier`: copying the entries of a segment from surviving replicas to a replacement, and the CAS of the
  segment's ensemble (used by the manual `recover` and by the replication worker).
- `recover`: `bkfast shell recover` (Java's BookKeeperAdmin.recoverBookieData).
- `auditor`, `worker`, `daemon`: the auditor, the replication worker and the AutoRecovery process.
"""
