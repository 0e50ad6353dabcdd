"""DbLedgerStorage's keys as typed values, read once by `from_conf` where a storage is built from a configuration
(the edge): the storage and its directories never parse a configuration. The keys (and their defaults, in
bkfast.conf_keys) are BookKeeper's."""

from __future__ import annotations

from dataclasses import dataclass

from bkfast.storage.entrylogger import EntryLoggerSettings

__all__ = ["DbStorageSettings"]

_MiB = 1 << 20
DEFAULT_BLOCK_CACHE_BYTES = 32 << 20   # dbStorage_rocksDB_blockCacheSize unset


@dataclass(frozen=True)
class DbStorageSettings:
    write_cache_bytes: int          # dbStorage_writeCacheMaxSizeMb, over all directories
    read_cache_bytes: int           # dbStorage_readAheadCacheMaxSizeMb, over all directories
    block_cache_bytes: int          # dbStorage_rocksDB_blockCacheSize, per directory
    max_throttle_s: float           # dbStorage_maxThrottleTimeMs: an add's wait for write-cache room
    read_ahead_batch_entries: int   # dbStorage_readAheadCacheBatchSize
    read_ahead_batch_bytes: int     # dbStorage_readAheadCacheBatchBytesSize (<= 0: by entries only)
    test_read_delay_s: float        # testEntryLogReadDelayMs (tests make a slow disk; 0 in production)
    test_flush_delay_s: float       # testWriteCacheFlushDelayMs
    entry_logger: EntryLoggerSettings

    @classmethod
    def from_conf(cls, conf) -> DbStorageSettings:
        block_cache = conf.db_storage_rocksdb_block_cache_size
        return cls(
            write_cache_bytes=int(conf.db_storage_write_cache_max_size_mb) * _MiB,
            read_cache_bytes=int(conf.db_storage_read_ahead_cache_max_size_mb) * _MiB,
            block_cache_bytes=int(block_cache) if block_cache is not None else DEFAULT_BLOCK_CACHE_BYTES,
            max_throttle_s=conf.db_storage_max_throttle_time_ms / 1000.0,
            read_ahead_batch_entries=int(conf.db_storage_read_ahead_cache_batch_size),
            read_ahead_batch_bytes=int(conf.db_storage_read_ahead_cache_batch_bytes_size),
            test_read_delay_s=max(conf.get("testEntryLogReadDelayMs"), 0) / 1000.0,
            test_flush_delay_s=max(conf.get("testWriteCacheFlushDelayMs"), 0) / 1000.0,
            entry_logger=EntryLoggerSettings.from_conf(conf),
        )
