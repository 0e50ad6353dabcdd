"""LastLogMark: the journal position up to which ledger storage holds everything (BookKeeper's lastMark).

Owns the 16-byte `lastMark` file (`long journalFileId | long offsetInJournal`, big-endian) kept in every
ledger dir's `current/` (`lastMark.<journalIndex>` with several journal dirs, as Java's Journal names it):
reading the greatest copy, writing all copies durably, and telling from the copies on disk whether the
bookie ran with fewer, more or differently counted journal directories than it is configured with now.
Must never decide when a mark is safe to write — the checkpoint does.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import NamedTuple

from bkfast.errors import ConfigurationError
from bkfast.storage.files import fsync_dir

log = logging.getLogger(__name__)

CURRENT_DIR = "current"
_MARK = struct.Struct(">qq")


class LogMark(NamedTuple):
    """A journal position: (journal file id, offset in that file). Compared as a tuple, as Java does."""

    journal_id: int
    offset: int


LAST_MARK = "lastMark"


def _mark_name(journal_index: int | None) -> str:
    return LAST_MARK if journal_index is None else f"{LAST_MARK}.{journal_index}"


def journal_index_for(index: int, journal_count: int) -> int | None:
    """The `journal_index` argument for journal `index` of `journal_count`: None (plain `lastMark`) when
    the bookie has one journal directory, else the index (`lastMark.<index>`), as Java's Journal does."""
    return None if journal_count == 1 else index


def marks_on_disk(ledger_dirs) -> tuple[bool, set[int]]:
    """(a plain `lastMark` exists in some ledger dir, the indices of the `lastMark.<i>` files found)."""
    plain, indices = False, set()
    for d in ledger_dirs:
        try:
            names = os.listdir(os.path.join(os.fspath(d), CURRENT_DIR))
        except FileNotFoundError:
            continue
        for name in names:
            if name == LAST_MARK:
                plain = True
            elif name.startswith(LAST_MARK + ".") and name[len(LAST_MARK) + 1:].isdigit():
                indices.add(int(name[len(LAST_MARK) + 1:]))
    return plain, indices


def check_journal_count(ledger_dirs, journal_dirs) -> None:
    """Refuse a journal directory list that cannot be the one the lastMark copies were written for.

    Every checkpoint writes one mark per journal into every ledger dir, so the files there tell how many
    journals the bookie last ran with: `lastMark.<i>` up to i = count - 1 (several), or a plain
    `lastMark` (one). Fewer journal directories than before, or a switch between one and several, would
    leave a journal unreplayed (its entries lost after a crash) or replay one from another's mark:
    raise ConfigurationError. Adding a directory to several is not visible here (the cookie check sees it).
    """
    journal_dirs = [os.fspath(d) for d in journal_dirs]
    count = len(journal_dirs)
    plain, indices = marks_on_disk(ledger_dirs)
    where = ", ".join(os.path.join(os.fspath(d), CURRENT_DIR) for d in ledger_dirs)
    configured = f"{count} journal director{'y' if count == 1 else 'ies'} ({','.join(journal_dirs)})"
    if indices and (max(indices) >= count or count == 1):
        had = max(max(indices) + 1, 2)
        raise ConfigurationError(
            f"{where} holds {_mark_name(max(indices))}: this bookie ran with at least {had} journal "
            f"directories and is now configured with {configured}; the journals of the missing "
            "directories would not be replayed: configure journalDirectories as before")
    if count > 1 and plain and not indices:
        raise ConfigurationError(
            f"{where} holds {LAST_MARK} (one journal directory) but this bookie is configured with {configured}: "
            "configure journalDirectories as before")


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
