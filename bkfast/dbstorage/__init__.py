"""DbLedgerStorage: write cache, read-ahead cache and RocksDB (rocksdict) indexes over entry logs."""
