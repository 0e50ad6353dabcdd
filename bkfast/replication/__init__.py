"""AutoRecovery and manual bookie recovery (issue 13), compatible with Java BookKeeper 4.16's ZooKeeper layout.

- `zk_urm`: the under-replication znodes (marks, locks, disable, ctime nodes, lostBookieRecoveryDelay).
- `election`: the auditor election (EPHEMERAL_SEQUENTIAL votes).
- `copier`: copying the entries of a segment from surviving replicas to a replacement, and the CAS of the
  segment's ensemble (used by the manual `recover` and by the replication worker).
- `recover`: `bkfast shell recover` (Java's BookKeeperAdmin.recoverBookieData).
- `auditor`, `worker`, `daemon`: the auditor, the replication worker and the AutoRecovery process.
"""
