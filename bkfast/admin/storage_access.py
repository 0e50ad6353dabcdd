"""The one place `bkfast.admin` imports the bookie's on-disk modules from (journal, entry logs, lastMark,
ledger storages), so a move of one of them is one import to fix here."""

from bkfast._journal import RecordKind, parse_record
from bkfast.bookie.journal_files import journal_path, list_journal_ids, scan_journal
from bkfast.bookie.logmark import journal_index_for, read_last_mark
from bkfast.bookie.storage_factory import open_ledger_storage, storage_kind
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings, log_file_name

__all__ = ["EntryLogger", "EntryLoggerSettings", "log_file_name", "RecordKind", "journal_path", "list_journal_ids",
           "parse_record", "scan_journal", "read_last_mark", "journal_index_for", "open_ledger_storage", "storage_kind"]
