"""LastLogMark: the journal position up to which ledger storage holds everything (BookKeeper's lastMark).

Owns the 16-byte `lastMark` file (`long journalFileId | long offsetInJournal`, big-endian) kept in every
ledger dir's `current/` (`lastMark.<journalIndex>` with several journal dirs): reading the greatest copy
and writing all copies durably. Must never decide when a mark is safe to write — the checkpoint does.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import NamedTuple

from bkfast.storage.files import fsync_dir

log = logging.getLogger(__name__)

CURRENT_DIR = "current"
_MARK = struct.Struct(">qq")


class LogMark(NamedTuple):
    """A journal position: (journal file id, offset in that file). Compared as a tuple, as Java does."""

    journal_id: int
    offset: int


def _mark_name(journal_index: int | None) -> str:
    return "lastMark" if journal_index is None else f"lastMark.{journal_index}"


def read_last_mark(ledger_dirs, journal_index: int | None = None) -> LogMark:
    """The greatest mark over every `<ledgerDir>/current/lastMark` (16 bytes); (0, 0) if there is none.

    A missing or short copy is skipped (logged), as Java's readLog does.
    """
    best = LogMark(0, 0)
    for d in ledger_dirs:
        path = os.path.join(os.fspath(d), CURRENT_DIR, _mark_name(journal_index))
        try:
            with open(path, "rb") as f:
                data = f.read(_MARK.size)
        except FileNotFoundError:
            continue
        if len(data) != _MARK.size:
            log.error("ignoring %s: %d bytes, expected %d", path, len(data), _MARK.size)
            continue
        best = max(best, LogMark(*_MARK.unpack(data)))
    return best


def write_last_mark(ledger_dirs, mark, journal_index: int | None = None) -> None:
    """Persist `mark` in every ledger dir: temp file, fsync, rename, fsync of the directory.

    A dir that fails is logged and skipped (the reader keeps the greatest copy); if every dir fails, the
    last error is raised, so that the caller does not go on to delete journals the mark would cover.
    """
    data = _MARK.pack(*LogMark(*mark))
    written, failure = 0, None
    for d in ledger_dirs:
        current = os.path.join(os.fspath(d), CURRENT_DIR)
        final = os.path.join(current, _mark_name(journal_index))
        tmp = final + ".tmp"
        try:
            os.makedirs(current, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"short write of {tmp}")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            fsync_dir(current)
            written += 1
        except OSError as err:
            log.error("could not write %s: %s", final, err)
            failure = err
    if failure is not None and not written:
        raise failure
