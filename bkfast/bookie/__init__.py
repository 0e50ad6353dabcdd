"""The bookie: journal, entry logs, ledger storage orchestration, checkpoint and recovery (no sockets)."""
