"""Read-ahead runs read with O_DIRECT (`entryLogDirectReads`, a bkfast key; Java's DirectIO entry logger
reads the same way).

Why: a catch-up reader makes the bookie read entry logs sequentially, a run of entries per cache miss.
Through the page cache, the kernel allocates, maps and copies every page, and with a large device
read-ahead window (8 MiB on the test VMs) it also reads far ahead on its own. Measured on a cold 2 GiB
file with 1.6 MiB preads: 1.0-1.8 s of system CPU buffered, 0.12-0.16 s with O_DIRECT. In the bookie under
bench/read_isolation.py's catch-up reader, the read thread went from ~70% of a core (almost all of it
system time) to ~22% while reading faster (350 -> 500 MB/s), and that CPU is what the journal and the
reactor were short of on 2 cores. Entries read this way also stay out of the page cache, which is right
for a catch-up read: it is read once, and the read-ahead cache keeps it.

Owns: opening each log's O_DIRECT read fd (handed to its channel, which closes it), one page-aligned
buffer per reading thread, and falling back to the channel's buffered read where direct reads cannot
serve a range: bytes still in the write buffer, a file system that refuses O_DIRECT (tmpfs before Linux
6.6: the open fails with EINVAL; said once per directory in an INFO line), or any other failure of the
direct read.

Must never: parse records (the caller's parse_run does), or serve bytes above the channel's file_end
(they may still change in the file, or exist only in the write buffer).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

from bkfast._entrylog import DIRECT_BLOCK, BufferedChannel

log = logging.getLogger(__name__)

_MIN_BUFFER = 2 << 20


class DirectRunReader:
    """Reads a range of an entry log through an O_DIRECT fd when it can (read()); None means "use the
    channel's buffered read"."""

    def __init__(self, enabled: bool, find_log: Callable[[int], Path], open_lock: threading.Lock):
        self.enabled = enabled
        self._find_log = find_log
        self._open_lock = open_lock
        self._refused: set[Path] = set()  # dirs whose file system refused O_DIRECT reads
        self._buffered_logs: set[int] = set()  # log ids read through the page cache from now on
        self._local = threading.local()
        self.direct_reads = 0

    def read(self, channel: BufferedChannel, offset: int, n: int) -> memoryview | None:
        """Up to n bytes of the log at `offset`, as a view into this thread's buffer (valid until the
        thread's next read()); None when the range should be read through the page cache instead."""
        if not self.enabled or n <= 0 or channel.log_id in self._buffered_logs:
            return None
        file_end = channel.file_end
        if offset + n > file_end and channel.position > file_end:
            # The range goes on past file_end, in the write buffer (or in the block a direct write
            # keeps): the channel's own read serves both parts.
            return None
        if channel.direct_read_fd < 0 and not self._open(channel):
            return None
        buf = self._buffer(n)
        try:
            at, count = channel.read_direct_into(buf, offset, n)
        except ValueError:
            return None  # closed under us (garbage collection): the buffered read reports it
        except OSError as e:
            self._buffered_logs.add(channel.log_id)
            try:
                self._refuse(self._find_log(channel.log_id).parent, e)
            except FileNotFoundError:
                pass  # removed by garbage collection meanwhile
            return None
        self.direct_reads += 1
        return memoryview(buf)[at:at + count]

    def _buffer(self, n: int) -> mmap.mmap:
        buf = getattr(self._local, "buf", None)
        need = n + 2 * DIRECT_BLOCK
        if buf is None or len(buf) < need:
            # Not closed: a view of it may still be held; it is unmapped once the last one goes.
            buf = self._local.buf = mmap.mmap(-1, max(_MIN_BUFFER, need))  # page-aligned, as O_DIRECT needs
        return buf

    def _open(self, channel: BufferedChannel) -> bool:
        try:
            path = self._find_log(channel.log_id)
        except FileNotFoundError:
            return False
        if path.parent in self._refused:
            self._buffered_logs.add(channel.log_id)
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return False
            self._buffered_logs.add(channel.log_id)
            self._refuse(path.parent, e)
            return False
        with self._open_lock:
            channel.set_direct_read_fd(fd)  # closes fd if another thread won, or the log closed
        return channel.direct_read_fd >= 0

    def _refuse(self, d: Path, err: OSError) -> None:
        if d not in self._refused:
            self._refused.add(d)
            log.info("entry logs in %s: direct reads failed (%s); reading them through the page cache", d, err)
