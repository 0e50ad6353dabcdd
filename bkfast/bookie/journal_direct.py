"""O_DIRECT for a new journal file (journalDirectWrites): probe that the file system takes the journal's
writes through O_DIRECT, and switch the file and its JournalWriter to them, or stay buffered.

Must never: leave a file in O_DIRECT mode that refused an aligned write (every later batch would fail).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os

__all__ = ["enable_direct"]

log = logging.getLogger(__name__)


def enable_direct(fd: int, writer, journal_dir: str, header: bytes) -> bool:
    """Switch a new journal file to O_DIRECT writes; False (and buffered) if its file system refuses.

    The probe is a real write: the 512-byte header again, through O_DIRECT at offset 0, the smallest and
    least aligned write the journal makes (batches start on 512-byte boundaries whatever the
    journalAlignmentSize), because a file system may accept the O_DIRECT flag and still refuse such
    writes (a 4 KiB-sector device).
    """
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        with mmap.mmap(-1, mmap.PAGESIZE) as block:      # page-aligned memory, as O_DIRECT needs
            block.write(header)
            with memoryview(block) as view:
                os.pwrite(fd, view[:len(header)], 0)
        writer.set_direct(True)
        return True
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
        writer.set_direct(False)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        log.info("journal %s: the file system refuses O_DIRECT writes of %d bytes (%s); writing through "
                 "the page cache", journal_dir, writer.alignment, err)
        return False
