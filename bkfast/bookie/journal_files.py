"""Journal files (spec bookkeeper-formats.md §4.2-4.3): their naming, header and versions, the meta
records (master key, fence, explicit LAC; scoped forms per scope-ids.md), and reading them back: scan
one file, every record after a lastMark with its position (records_after), replay them.

Owns: the format constants, the readers, and the deletion of journals a lastMark no longer needs. The
writer (group commit, rolling, O_DIRECT) is bkfast.bookie.journal, which writes what this module reads;
`parse_record` and the record layouts live in bkfast._journal (they run once per record on replay).

Must never: write a journal file, or read past a corrupt record as if the log ended.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator

from bkfast import _journal
from bkfast._journal import (
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    PADDING_MASK,
    SCOPED_META_FLAGS,
)
from bkfast.bookie.logmark import LogMark
from bkfast.errors import JournalCorruptionError, ReplayInterrupted
from bkfast.ids import validate_ledger_id, validate_scope_id

log = logging.getLogger(__name__)

CURRENT_DIR = "current"
MAGIC = b"BKLG"
V1, V2, V3, V4, V5, V6 = 1, 2, 3, 4, 5, 6
CURRENT_JOURNAL_FORMAT_VERSION = V6
HEADER_SIZE = 512          # V5+: magic, version, zeros up to one sector
VERSION_HEADER_SIZE = 8    # V2-V4: magic, version

DEFAULT_MAX_RECORD_SIZE = 5 * 1024 * 1024   # nettyMaxFrameSizeBytes' default: no entry is bigger
_READ_CHUNK = 4 * 1024 * 1024

_CLASSIC_IDS = struct.Struct(">qq")
_SCOPED_IDS = struct.Struct(">BQqq")
_INT = struct.Struct(">i")


# --- meta records ----------------------------------------------------------------------------------


def _meta_prefix(ledger_id: int, meta_entry_id: int, scope_id: int) -> bytes:
    validate_ledger_id(ledger_id)
    if validate_scope_id(scope_id):
        return _SCOPED_IDS.pack(SCOPED_META_FLAGS, scope_id, ledger_id, meta_entry_id)
    return _CLASSIC_IDS.pack(ledger_id, meta_entry_id)


def master_key_record(ledger_id: int, master_key: bytes, scope_id: int = 0) -> bytes:
    """`long ledgerId | long -4096 | int keyLen | key` (scoped: 0x80 | scope | ledger | -4096 | ...)."""
    key = bytes(master_key)
    return _meta_prefix(ledger_id, METAENTRY_ID_LEDGER_KEY, scope_id) + _INT.pack(len(key)) + key


def fence_record(ledger_id: int, scope_id: int = 0) -> bytes:
    """`long ledgerId | long -8192` (scoped: 0x80 | scope | ledger | -8192)."""
    return _meta_prefix(ledger_id, METAENTRY_ID_FENCE_KEY, scope_id)


def explicit_lac_record(ledger_id: int, lac_buffer: bytes, scope_id: int = 0) -> bytes:
    """`long ledgerId | long -32768 | int len | LAC buffer` (scoped: 0x80 | scope | ledger | -32768 | ...)."""
    lac = bytes(lac_buffer)
    return _meta_prefix(ledger_id, METAENTRY_ID_LEDGER_EXPLICITLAC, scope_id) + _INT.pack(len(lac)) + lac


# --- files ------------------------------------------------------------------------------------------


def journal_path(journal_dir, journal_id: int) -> str:
    """`<journal_dir>/current/<lower-case hex id>.txn` (Long.toHexString, no padding)."""
    return os.path.join(os.fspath(journal_dir), CURRENT_DIR, f"{journal_id:x}.txn")


def list_journal_ids(journal_dir) -> list[int]:
    """Sorted ids of the `.txn` files in `<journal_dir>/current/` ([] if the directory is missing)."""
    try:
        names = os.listdir(os.path.join(os.fspath(journal_dir), CURRENT_DIR))
    except FileNotFoundError:
        return []
    ids = []
    for name in names:
        stem, _, ext = name.partition(".")
        try:
            if ext == "txn":
                ids.append(int(stem, 16))
        except ValueError:
            log.warning("ignoring journal file with a non-hex name: %s", name)
    return sorted(ids)


def delete_old_journals(journal_dir, before_id: int, keep_id: int | None, max_backups: int) -> list[int]:
    """Delete the journals older than `before_id` (never `keep_id`, the one being written) beyond the newest
    `max_backups` of them; return their ids. A file that cannot be deleted is logged and kept."""
    old = [i for i in list_journal_ids(journal_dir) if i < before_id and i != keep_id]
    deleted = []
    for journal_id in old[:max(0, len(old) - max_backups)]:
        path = journal_path(journal_dir, journal_id)
        try:
            os.unlink(path)
        except OSError as err:
            if not isinstance(err, FileNotFoundError):
                log.warning("could not delete old journal %s: %s", path, err)
            continue
        log.info("garbage collected journal %s", os.path.basename(path))
        deleted.append(journal_id)
    return deleted


def _read_header(fd: int, path: str) -> tuple[int, int]:
    """(format version, offset of the first record). No magic = V1 from offset 0, as JournalChannel."""
    head = os.pread(fd, VERSION_HEADER_SIZE, 0)
    if head[:4] != MAGIC:
        return V1, 0
    if len(head) < VERSION_HEADER_SIZE:
        return V2, VERSION_HEADER_SIZE      # torn inside the header: nothing to read
    (version,) = _INT.unpack_from(head, 4)
    if not V2 <= version <= CURRENT_JOURNAL_FORMAT_VERSION:
        raise JournalCorruptionError(f"journal {path}: unknown format version {version}", path, 4)
    return version, HEADER_SIZE if version >= V5 else VERSION_HEADER_SIZE


def _has_data_after(fd: int, offset: int, size: int) -> bool:
    while offset < size:
        chunk = os.pread(fd, min(_READ_CHUNK, size - offset), offset)
        if not chunk:
            return False
        if _journal.find_nonzero(chunk) >= 0:
            return True
        offset += len(chunk)
    return False


def scan_journal(journal_dir, journal_id: int, start_offset: int = 0, skip_invalid: bool = False,
                 max_record_size: int = DEFAULT_MAX_RECORD_SIZE) -> Iterator[tuple[int, bytes]]:
    """Yield (offset just past the record, record bytes) for each record of one journal file.

    Starts at `start_offset`, or after the header when it is <= 0. Padding records are skipped. The scan
    ends cleanly at a zero length (the pre-allocated tail), at a length field or record cut by the end
    of the file (a torn tail), and at a bad length followed only by zeros. A bad length (negative and not
    padding, or above `max_record_size`) with any non-zero byte after it is corruption: it raises
    JournalCorruptionError naming the file and offset, or with `skip_invalid` (skipInvalidJournalRecord)
    logs a warning and skips the rest of this file, as Java does.
    """
    path = journal_path(journal_dir, journal_id)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        try:
            version, header_end = _read_header(fd, path)
        except JournalCorruptionError as err:
            if not skip_invalid:
                raise
            log.warning("%s; skipping this journal file (skipInvalidJournalRecord)", err)
            return
        pos = start_offset if start_offset > 0 else header_end
        want = _READ_CHUNK
        while pos < size:
            chunk = os.pread(fd, want, pos)
            records, ends, stop, status, value = _journal.scan_records(
                chunk, 0, version >= V5, max_record_size)
            for end, record in zip(ends, records, strict=True):
                yield pos + end, record
            if status == _journal.SCAN_END:
                return
            if status == _journal.SCAN_INVALID:
                bad = pos + stop
                length_fields = 8 if chunk[stop:stop + 4] == _INT.pack(PADDING_MASK) else 4
                if not _has_data_after(fd, bad + length_fields, size):
                    return      # garbage only at the very end: nothing is lost by stopping here
                msg = (f"journal {path}: invalid record length {value} at offset {bad} "
                       f"(format V{version}) with data after it")
                if skip_invalid:
                    log.warning("%s; skipping the rest of this journal file (skipInvalidJournalRecord)", msg)
                    return
                raise JournalCorruptionError(msg, path, bad)
            if len(chunk) < want or pos + len(chunk) >= size:
                return          # the file ends inside this record: a torn tail
            pos += stop
            want = max(_READ_CHUNK, value)
    finally:
        os.close(fd)


def records_after(journal_dir, mark, skip_invalid: bool = False, max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
                  before_journal_id: int | None = None) -> Iterator[tuple[int, int, bytes]]:
    """Yield (journal id, offset just past the record, record bytes) for every record after `mark`, in order.

    Journals with id >= mark.journal_id are read (and < before_journal_id when given): the marked one
    from mark.offset, later ones from their header end. A mark naming a journal that no longer exists is
    an error, as in Java. A record starts `len(record)` bytes before the offset yielded with it.
    """
    mark = LogMark(*mark)
    ids = [i for i in list_journal_ids(journal_dir) if i >= mark.journal_id
           and (before_journal_id is None or i < before_journal_id)]
    if mark.journal_id > 0 and (not ids or ids[0] != mark.journal_id):
        path = journal_path(journal_dir, mark.journal_id)
        raise JournalCorruptionError(f"journal {path} named by lastMark {tuple(mark)} is missing",
                                     path, mark.offset)
    for journal_id in ids:
        start = mark.offset if journal_id == mark.journal_id else 0
        log.info("reading journal %x from offset %d", journal_id, start)
        for offset, record in scan_journal(journal_dir, journal_id, start, skip_invalid, max_record_size):
            yield journal_id, offset, record


def replay(journal_dir, mark, visitor: Callable[[bytes], object], skip_invalid: bool = False,
           max_record_size: int = DEFAULT_MAX_RECORD_SIZE, before_journal_id: int | None = None,
           interruptible: bool = False) -> LogMark:
    """Call `visitor(record)` for every record after `mark` (see records_after), in order; return the
    position reached. With `interruptible`, an exception of the visitor becomes ReplayInterrupted
    carrying the mark to resume from (the record it failed on is replayed again then, nothing before it).
    """
    reached = LogMark(*mark)
    for journal_id, offset, record in records_after(journal_dir, reached, skip_invalid, max_record_size,
                                                    before_journal_id):
        try:
            visitor(record)
        except Exception as err:
            if not interruptible:
                raise
            # resume at the start of this record: the end of the previous one, or where this file began
            resume = reached if reached.journal_id == journal_id else LogMark(journal_id, 0)
            raise ReplayInterrupted(resume, err) from err
        reached = LogMark(journal_id, offset)
    return reached
