"""The file-based index storage's keys (SortedLedgerStorage, InterleavedLedgerStorage) as typed values, read
once by `from_conf` where a storage is built from a configuration (the edge): the storage never parses a
configuration. The keys (and their defaults, in bkfast.conf_keys) are BookKeeper's."""

from __future__ import annotations

from dataclasses import dataclass

from bkfast.indexstorage.ledger_cache import default_open_file_limit
from bkfast.storage.entrylogger import EntryLoggerSettings

__all__ = ["IndexStorageSettings"]


@dataclass(frozen=True)
class IndexStorageSettings:
    page_size: int                 # pageSize: bytes per index page
    page_limit: int                # pageLimit (<= 0: derived from the host's memory)
    open_file_limit: int           # openFileLimit, never above what the process's descriptor limit allows
    file_info_version: int         # fileInfoFormatVersionToWrite
    skip_list_size_limit: int      # skipListSizeLimit: the sorted storage's memtable, bytes
    entry_logger: EntryLoggerSettings

    @classmethod
    def from_conf(cls, conf) -> IndexStorageSettings:
        open_limit = conf.get("openFileLimit", None)
        return cls(
            page_size=int(conf.page_size),
            page_limit=int(conf.page_limit),
            open_file_limit=(min(int(open_limit), default_open_file_limit()) if open_limit
                             else default_open_file_limit()),
            file_info_version=int(conf.file_info_format_version_to_write),
            skip_list_size_limit=int(conf.skip_list_size_limit),
            entry_logger=EntryLoggerSettings.from_conf(conf),
        )
