"""Entry logs: the `<hex id>.log` files in `<ledgerDir>/current/` that hold every stored entry.

Owns (spec/bookkeeper-formats.md §4.4): log id allocation (`lastId` file, hex + "\\n"; ids increment and
wrap to 0 after Integer.MAX_VALUE; an id whose file exists is skipped), the 1024-byte "BKLO" header
(version 1), appending entries as `int size | entry` through the buffered channel of bkfast._entrylog,
rolling to a new log when the next entry would push the log past `logSizeLimit`, the ledgers map
appended when a log is rotated or closed (batches of <= 10,000 ledgers; offset and count patched into
the header at offset 8), reading an entry back by location `(logId << 32) | offset` with its ids
checked, and scanning a log with or without its map (logs written by Java, finalized or not).

Must never: index entries (that is the ledger storage's job), decide when data must be durable (the
caller calls flush() before it commits an index that points into the logs), verify digests (bookies
store entries verbatim), or reuse an id whose file exists.

Durability: flush() writes the buffer and fdatasyncs the current log, every rotated log not yet synced,
and the directories where new logs were created (so a log file referenced by a committed index survives
a crash). It holds the writers' lock only to hand the buffer to the file and take the list of what to
sync; the fdatasyncs run after releasing it, so adds (on the reactor, for InterleavedLedgerStorage) never
wait for a checkpoint's disk sync. Flushers, close() and remove_log() are serialized by a second lock,
so no descriptor being synced is closed meanwhile. close() also finalizes the current log (map + header
patch) so a clean stop leaves no partial entry and a map that readers can use instead of scanning.

Scoped entries (scope != 0, spec/scope-ids.md): the Java ledgers map has no room for a scope, so they
are left out of the map (ledger counts and byte sizes there cover scope 0 only, which keeps the file
readable by Java tools). `ledgers_map()` therefore describes scope 0 ledgers; the sizes of scoped
ledgers are found by scanning (`scoped_ledgers_map()`), which works for every log.

Direct writes (`entryLogDirectWrites`, a bkfast key): the log being written gets a second fd opened with
O_DIRECT, and the channel writes through it in whole 4 KiB blocks (bkfast._entrylog's module docstring),
so the disk reads the data from the write buffer instead of the kernel copying it into the page cache.
The bytes of the file are the same; `fd` (buffered) serves every read but read-ahead runs, which go
through an O_DIRECT read fd (`entryLogDirectReads`, bkfast.storage.direct_reads). A finished log (rolled or
closed) is cut to its size; a crash can leave up to 4095 zero bytes after the last record, which every
reader here takes for padding / the end of the ledgers map. Where the file system refuses O_DIRECT (the
open, or an aligned write of the header block, fails with EINVAL), that directory's logs are written
through the page cache, said once in an INFO line.

Preallocation (`entryLogFilePreallocationEnabled`) is not done: a log is created when its first entry
arrives, so reopening a directory and only reading never consumes an id.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bkfast._entrylog import DIRECT_BLOCK, LOGFILE_HEADER_SIZE, BufferedChannel, parse_run
from bkfast.codec import peek_entry_ids
from bkfast.errors import BKIllegalOpException, StorageCorruptionError
from bkfast.storage.direct_reads import DirectRunReader
from bkfast.storage.files import fsync_dir

__all__ = [
    "EntryLogger",
    "EntryLoggerSettings",
    "LogRecord",
    "LOGFILE_HEADER_SIZE",
    "HEADER_VERSION",
    "LEDGERS_MAP_MAX_BATCH_SIZE",
    "MAX_LOG_ID",
]

log = logging.getLogger(__name__)

HEADER_VERSION = 1
HEADER_MAGIC = b"BKLO"
LEDGERS_MAP_OFFSET_POSITION = 8
LEDGERS_MAP_HEADER_SIZE = 24
LEDGERS_MAP_ENTRY_SIZE = 16
LEDGERS_MAP_MAX_BATCH_SIZE = 10_000
INVALID_LID = -1
LEDGERS_MAP_ENTRY_ID = -2
MAX_LOG_ID = 0x7FFFFFFF  # Integer.MAX_VALUE: the id after it is 0
CURRENT_DIR = "current"
LAST_ID_FILE = "lastId"

_HEADER = HEADER_MAGIC + struct.pack(">i", HEADER_VERSION) + bytes(LOGFILE_HEADER_SIZE - 8)
_MAP_BATCH_HEAD = struct.Struct(">iqqi")
_MAP_ITEM = struct.Struct(">qq")
_HEADER_FIELDS = struct.Struct(">4siqi")
_MAP_POINTER = struct.Struct(">qi")
_SCAN_CHUNK = 1 << 20
DIRECT_RUN_CHUNK = 256 << 10
"""Bytes per direct read of a read-ahead run. A journal write that reaches the disk behind a read waits
for it: 256 KiB takes about 0.2 ms of this VM's disk, 1 MiB about 0.7 ms. Measured with
bench/read_isolation.py (writer p99 with the reader over alone), the size matters little: 1 MiB
1.30-1.54x, 256 KiB 1.31-1.48x, 128 KiB 1.33-1.52x with a slower reader (377-413 MB/s, else ~500)."""
_MIN_READ = 4096  # first read of an entry; page-cache reads of 512 B and 4 KiB cost the same
WRITEBACK_BYTES = 1 << 20
"""The channel of the log being written starts disk writeback every this many bytes
(bkfast._entrylog.BufferedChannel.start_writeback): a flush then streams to the disk instead of dumping
tens of MB into its queue at the final fdatasync, ahead of every journal sync. (Measured with 3 bookies x
16,700 adds/s: 256 KiB, 1 MiB and 4 MiB gave the same tails within noise; 1 MiB is 32 calls a 32 MB half.)"""
DIRECT_WRITE_BUFFER_BYTES = 4 << 20
"""The write buffer of a direct-mode log unless writeBufferSizeBytes is configured. A buffered pwrite returns
once the page cache has the bytes; a direct one waits for the disk, so with Java's 64 KiB default the
ledger storage's flush waited for the disk every 64 KiB. (Measured back to back, bench/server_targets.py
16k with journalDirectWrites, adds/s: 64 KiB 20,100-22,100, 1 MiB 27,700-31,200, 4 MiB 34,500-37,500,
16 MiB 31,200-36,500; page-cache writes, 64 KiB or 4 MiB buffer: 24,600-28,300.)"""


@dataclass(frozen=True)
class EntryLoggerSettings:
    """The entry logger's keys as typed values, built once by `from_conf` where a storage is built from a
    configuration (the edge): the logger itself never parses a configuration. Defaults are BookKeeper's
    (bkfast.conf_keys)."""

    log_size_limit: int = 1073741824                      # logSizeLimit
    write_buffer_size: int = 65536                        # writeBufferSizeBytes
    write_buffer_size_set: bool = False                   # writeBufferSizeBytes was configured
    direct_writes: bool = True                            # entryLogDirectWrites
    direct_reads: bool = True                             # entryLogDirectReads
    flush_every_bytes: int = 0                            # flushEntrylogBytes (0: only at checkpoints)
    read_buffer_size: int = 512                           # readBufferSizeBytes
    max_frame_size: int = 5242880                         # nettyMaxFrameSizeBytes

    @classmethod
    def from_conf(cls, conf) -> EntryLoggerSettings:
        return cls(log_size_limit=int(conf.get("logSizeLimit")),
                   write_buffer_size=int(conf.get("writeBufferSizeBytes")),
                   write_buffer_size_set=conf.is_set("writeBufferSizeBytes"),
                   direct_writes=bool(conf.get("entryLogDirectWrites")),
                   direct_reads=bool(conf.get("entryLogDirectReads")),
                   flush_every_bytes=int(conf.get("flushEntrylogBytes") or 0),
                   read_buffer_size=int(conf.get("readBufferSizeBytes")),
                   max_frame_size=int(conf.get("nettyMaxFrameSizeBytes")))


class LogRecord(NamedTuple):
    """One entry found by scanning: where it is and what it is."""

    scope_id: int
    ledger_id: int
    entry_id: int
    location: int
    size: int
    data: bytes | None


class _ActiveLog:
    """The log being written: its channel and its (scope 0) ledgers map."""

    __slots__ = ("channel", "ledgers", "path")

    def __init__(self, channel: BufferedChannel, path: Path):
        self.channel = channel
        self.path = path
        self.ledgers: dict[int, int] = {}


def log_file_name(log_id: int) -> str:
    return f"{log_id:x}.log"


def _parse_log_id(name: str) -> int | None:
    if not name.endswith(".log"):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


class EntryLogger:
    """Entry logs of one or more ledger directories (new logs are placed round-robin)."""

    def __init__(self, ledger_dirs: Sequence[str | os.PathLike[str]], settings: EntryLoggerSettings):
        if not ledger_dirs:
            raise ValueError("EntryLogger needs at least one ledger directory")
        self._dirs = [Path(d) / CURRENT_DIR for d in ledger_dirs]
        for d in self._dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._size_limit = settings.log_size_limit
        self._write_buffer_size = max(1, settings.write_buffer_size)
        self._direct = settings.direct_writes
        self._direct_buffer_size = (self._write_buffer_size if settings.write_buffer_size_set
                                    else max(self._write_buffer_size, DIRECT_WRITE_BUFFER_BYTES))
        self._direct_refused: set[Path] = set()  # dirs whose file system refused O_DIRECT
        # Java's flushEntrylogBytes: fdatasync the current log whenever this many bytes are not yet durable.
        self._flush_every_bytes = settings.flush_every_bytes
        self._read_size = max(_MIN_READ, settings.read_buffer_size)
        # Java's sanity bound (nettyMaxFrameSizeBytes - 500) only logs a warning on read; reads here
        # also refuse sizes above the largest log, which no real entry can have.
        self._max_sane_entry_size = settings.max_frame_size - 500
        self._lock = threading.RLock()  # serializes writers (add, roll, flush, close)
        # Serializes flush, close and remove_log (never taken by adds): held across the fdatasyncs.
        self._sync_lock = threading.RLock()
        self._durable_upto = (-1, 0)    # (log id, position) the last flush made durable in the current log
        self._open_lock = threading.Lock()  # serializes opening read channels of older logs
        self.direct_runs = DirectRunReader(settings.direct_reads, self._find_log, self._open_lock)
        self._last_id = self._read_last_id()
        self._current: _ActiveLog | None = None
        self._unsynced: list[BufferedChannel] = []
        self._dirs_to_sync: set[Path] = set()
        # Every channel used for reads, by log id: logs written by this process keep their write channel
        # (its buffer serves recent entries); older logs get a read-only channel on first use.
        self._channels: dict[int, BufferedChannel] = {}
        self._next_dir = 0
        self._closed = False
        self._warned_insane = False

    # -- ids ---------------------------------------------------------------------------------------

    def _read_last_id(self) -> int:
        """Largest last-allocated id over the dirs; a dir without a readable lastId uses its newest log."""
        last = INVALID_LID
        for d in self._dirs:
            value = INVALID_LID
            try:
                text = (d / LAST_ID_FILE).read_text("utf-8").splitlines()
                value = int(text[0].strip(), 16) if text else INVALID_LID
            except (OSError, ValueError):
                value = INVALID_LID
            if value < 0:
                ids = [i for i in (_parse_log_id(n) for n in os.listdir(d)) if i is not None]
                value = max(ids, default=INVALID_LID)
            last = max(last, value)
        return last

    def _write_last_id(self, log_id: int) -> None:
        text = f"{log_id:x}\n".encode()
        for d in self._dirs:
            tmp = d / (LAST_ID_FILE + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, text)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, d / LAST_ID_FILE)
            self._dirs_to_sync.add(d)

    def _log_exists(self, log_id: int) -> bool:
        name = log_file_name(log_id)
        return any((d / name).exists() for d in self._dirs)

    def _find_log(self, log_id: int) -> Path:
        name = log_file_name(log_id)
        for d in self._dirs:
            path = d / name
            if path.exists():
                return path
        raise FileNotFoundError(errno.ENOENT, f"no entry log {name} in {[str(d) for d in self._dirs]}")

    @property
    def current_log_id(self) -> int | None:
        cur = self._current
        return None if cur is None else cur.channel.log_id

    @property
    def last_log_id(self) -> int:
        """The last id allocated (what `lastId` says), -1 when none."""
        return self._last_id

    def log_ids(self) -> list[int]:
        """Ids of every `.log` file in the ledger dirs, sorted."""
        ids: set[int] = set()
        for d in self._dirs:
            for name in os.listdir(d):
                log_id = _parse_log_id(name)
                if log_id is not None:
                    ids.add(log_id)
        return sorted(ids)

    # -- writing -----------------------------------------------------------------------------------

    def _create_log(self) -> _ActiveLog:
        log_id = self._last_id
        while True:
            log_id = 0 if log_id >= MAX_LOG_ID else log_id + 1
            if not self._log_exists(log_id):
                break
        d = self._dirs[self._next_dir % len(self._dirs)]
        self._next_dir += 1
        path = d / log_file_name(log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        direct_fd = -1
        try:
            direct_fd = self._open_direct(path, d)
            buffer_size = self._direct_buffer_size if direct_fd >= 0 else self._write_buffer_size
            channel = BufferedChannel(fd, log_id, 0, buffer_size, WRITEBACK_BYTES, direct_fd)
        except BaseException:
            if direct_fd >= 0:
                os.close(direct_fd)
            os.close(fd)
            raise
        channel.write(_HEADER)
        self._last_id = log_id
        self._write_last_id(log_id)
        self._dirs_to_sync.add(d)
        self._channels[log_id] = channel
        return _ActiveLog(channel, path)

    def _open_direct(self, path: Path, d: Path) -> int:
        """An O_DIRECT write fd of the new log `path` in dir `d`, or -1 for buffered writes (direct
        writes are off, or the file system refuses them).

        The probe is a real write of the first block, the header zero-filled (what the log's first
        flush writes there anyway): a file system can accept the flag and still refuse the writes."""
        if not self._direct or d in self._direct_refused:
            return -1
        try:
            direct_fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        except OSError as err:
            if err.errno != errno.EINVAL:
                raise
            self._refuse_direct(d, err)
            return -1
        try:
            with mmap.mmap(-1, DIRECT_BLOCK) as block:  # page-aligned memory, as O_DIRECT needs
                block.write(_HEADER)
                os.pwrite(direct_fd, block, 0)
        except OSError as err:
            os.close(direct_fd)
            if err.errno != errno.EINVAL:
                raise
            self._refuse_direct(d, err)
            return -1
        except BaseException:
            os.close(direct_fd)
            raise
        return direct_fd

    def _refuse_direct(self, d: Path, err: OSError) -> None:
        self._direct_refused.add(d)
        log.info("entry logs in %s: the file system refuses O_DIRECT writes (%s); writing them through "
                 "the page cache", d, err)

    def _finalize(self, active: _ActiveLog) -> None:
        """Append the ledgers map after the last entry, patch its offset and count into the header, and
        finish the channel (no more writes; the file cut to the log's size, its buffer freed)."""
        channel = active.channel
        map_offset = channel.position
        items = sorted(active.ledgers.items())
        for start in range(0, len(items), LEDGERS_MAP_MAX_BATCH_SIZE):
            batch = items[start:start + LEDGERS_MAP_MAX_BATCH_SIZE]
            size = LEDGERS_MAP_HEADER_SIZE + LEDGERS_MAP_ENTRY_SIZE * len(batch)
            parts = [_MAP_BATCH_HEAD.pack(size - 4, INVALID_LID, LEDGERS_MAP_ENTRY_ID, len(batch))]
            parts.extend(_MAP_ITEM.pack(ledger_id, nbytes) for ledger_id, nbytes in batch)
            channel.write(b"".join(parts))
        # The map must be in the file before the header points at it (write_at flushes the buffer).
        channel.flush()
        channel.write_at(_MAP_POINTER.pack(map_offset, len(items)), LEDGERS_MAP_OFFSET_POSITION)
        channel.finish()

    def _roll(self) -> _ActiveLog:
        old = self._current
        if old is not None:
            self._finalize(old)
            # Synced by the next flush(): rotation happens inside an add and must not wait for a disk.
            self._unsynced.append(old.channel)
        self._current = self._create_log()
        return self._current

    def _check_entry(self, entry) -> int:
        size = len(entry)
        if size < 16:
            raise BKIllegalOpException(f"an entry needs at least 16 bytes (ledger and entry id), got {size}")
        if size + 4 > self._size_limit - LOGFILE_HEADER_SIZE:
            raise BKIllegalOpException(f"an entry of {size} bytes cannot fit a log of {self._size_limit} bytes")
        return size

    def _active_for(self, size: int) -> _ActiveLog:
        cur = self._current
        if self._closed:
            raise ValueError("the entry logger is closed")
        if cur is None:
            return self._roll()
        position = cur.channel.position
        if position + size + 4 > self._size_limit and position > LOGFILE_HEADER_SIZE:
            return self._roll()
        return cur

    def add_entry(self, ledger_id: int, entry) -> int:
        """Append an entry (bytes as stored: v1 or scoped v2); return its location."""
        size = self._check_entry(entry)
        with self._lock:
            active = self._active_for(size)
            location = active.channel.add_entry(entry)
            if not entry[0] & 0x80:  # scope 0: counted in the Java ledgers map
                active.ledgers[ledger_id] = active.ledgers.get(ledger_id, 0) + size + 4
            if self._flush_every_bytes:
                self._sync_if_due(active.channel)
            return location

    def _sync_if_due(self, channel: BufferedChannel) -> None:
        # Java's flushEntrylogBytes (EntryLogManagerBase.addEntry): an fdatasync of the current log once
        # this many of its bytes are not durable. The caller's flush() still syncs everything at the end.
        log_id, upto = self._durable_upto
        synced = max(channel.synced_position, upto if log_id == channel.log_id else 0)
        if channel.position - synced >= self._flush_every_bytes:
            channel.sync()

    def add_entries(self, ledger_id: int, entries: list) -> list[int]:
        """add_entry for many entries of one ledger (a flush's run); their locations, in order."""
        if not entries:
            return []
        sizes = list(map(len, entries))
        if min(sizes) < 16 or max(sizes) + 4 > self._size_limit - LOGFILE_HEADER_SIZE:
            for e in entries:
                self._check_entry(e)
        counted = not entries[0][0] & 0x80  # one ledger, one scope: scope 0 goes in the Java map
        out: list[int] = []
        with self._lock:
            i, n = 0, len(entries)
            while i < n:
                active = self._active_for(sizes[i])
                # As many entries as fit in this log go to the channel in one call.
                room = self._size_limit - active.channel.position
                rest = sum(sizes[i:]) + 4 * (n - i)
                if rest <= room:
                    j, total = n, rest
                else:
                    j, total = i, 0
                    while j < n and (total + sizes[j] + 4 <= room or j == i):
                        total += sizes[j] + 4
                        j += 1
                out.extend(active.channel.add_entries(entries[i:j] if i or j < n else entries))
                if counted:
                    active.ledgers[ledger_id] = active.ledgers.get(ledger_id, 0) + total
                if self._flush_every_bytes:
                    self._sync_if_due(active.channel)
                i = j
        return out

    def add_runs(self, runs: list[tuple[int, list]]) -> list[int]:
        """add_entries for several ledgers' runs, in order, in one channel call when they fit the current
        log (a flush of many small ledgers: one call per ledger cost ~4 us each); the flat list of locations."""
        entries = [e for _, run in runs for e in run]
        if not entries:
            return []
        sizes = list(map(len, entries))
        total = sum(sizes) + 4 * len(sizes)
        with self._lock:
            active = self._active_for(max(sizes))
            if min(sizes) < 16 or active.channel.position + total > self._size_limit:
                out: list[int] = []
                for ledger_id, run in runs:
                    out.extend(self.add_entries(ledger_id, run))
                return out
            out = active.channel.add_entries(entries)
            counted = active.ledgers
            for ledger_id, run in runs:
                if run and not run[0][0] & 0x80:  # scope 0: counted in the Java ledgers map
                    counted[ledger_id] = counted.get(ledger_id, 0) + sum(map(len, run)) + 4 * len(run)
            if self._flush_every_bytes:
                self._sync_if_due(active.channel)
            return out

    def add_framed(self, framed: bytes, ledgers: list[tuple[int, int, int, int]],
                   max_length: int) -> tuple[int, int] | None:
        """add_runs for a flush slice already framed as a log stores it (`int size | entry` each, scope-0
        entries of at most `max_length` bytes: bkfast.dbstorage._flushslices), with one copy. `ledgers`:
        [(scope_id, ledger_id, entries, bytes in `framed`)] for the ledgers map. Returns (log id, offset of
        framed[0] in it); None when the slice does not fit the log add_runs would start it in: the caller
        then gives it to add_runs, which splits it over logs as it splits any runs."""
        with self._lock:
            active = self._active_for(max_length)
            channel = active.channel
            if channel.position + len(framed) > self._size_limit:
                return None
            offset = channel.write(framed)
            counted = active.ledgers
            for _, ledger_id, _, nbytes in ledgers:
                counted[ledger_id] = counted.get(ledger_id, 0) + nbytes
            if self._flush_every_bytes:
                self._sync_if_due(channel)
            return channel.log_id, offset

    def flush(self) -> None:
        """Make every entry added so far durable: buffer to file, fdatasync current and rotated logs."""
        with self._sync_lock:
            with self._lock:
                current = self._current.channel if self._current is not None else None
                if current is not None:
                    current.flush()     # the file has every byte added so far: what the fdatasync covers
                    upto = current.position
                rotated, self._unsynced = self._unsynced, []
                dirs, self._dirs_to_sync = self._dirs_to_sync, set()
            try:
                # Without the writers' lock: adds go on while the disk syncs. A rotated log is finished
                # (no buffer), so its sync() is only the fdatasync; the current log's buffer is the adds'
                # and not touched here. _sync_lock keeps close/remove_log from closing these fds meanwhile.
                if current is not None:
                    os.fdatasync(current.fd)
                    self._durable_upto = (current.log_id, upto)
                    self._note_synced(current, upto)
                while rotated:
                    rotated[0].sync()
                    rotated.pop(0)
                while dirs:
                    d = next(iter(dirs))
                    fsync_dir(d)
                    dirs.discard(d)
            except BaseException:
                with self._lock:    # what is not durable yet is synced again by the next flush
                    self._unsynced[:0] = rotated
                    self._dirs_to_sync |= dirs
                raise

    def _note_synced(self, channel: BufferedChannel, upto: int) -> None:
        """Let the channel know its bytes are durable (its synced_position) when no add came in since
        the fdatasync: its sync() then has nothing to write and nothing dirty to sync. Otherwise the
        next flush tells it; _durable_upto serves flushEntrylogBytes meanwhile."""
        with self._lock:
            if channel.position == upto and not channel.closed and channel is self._channels.get(channel.log_id):
                channel.sync()

    def roll(self) -> None:
        """Finalize the current log now; the next entry starts a new one (for tests and compaction)."""
        with self._lock:
            if self._current is not None:
                self._finalize(self._current)
                self._unsynced.append(self._current.channel)
                self._current = None

    def close(self) -> None:
        """flush(), finalize the current log (ledgers map + header patch) and close every file."""
        with self._sync_lock, self._lock:
            if self._closed:
                return
            if self._current is not None:
                self._finalize(self._current)
                self._unsynced.append(self._current.channel)
                self._current = None
            self.flush()
            self._closed = True
            with self._open_lock:
                for channel in self._channels.values():
                    channel.close()
                self._channels.clear()

    # -- reading -----------------------------------------------------------------------------------

    def _channel(self, log_id: int) -> BufferedChannel:
        channel = self._channels.get(log_id)
        if channel is not None:
            return channel
        with self._open_lock:
            if self._closed:
                raise ValueError("the entry logger is closed")
            channel = self._channels.get(log_id)
            if channel is None:
                path = self._find_log(log_id)
                fd = os.open(path, os.O_RDONLY)
                channel = BufferedChannel(fd, log_id, os.fstat(fd).st_size, 0)
                self._channels[log_id] = channel
            return channel

    def read_entry(self, ledger_id: int, entry_id: int, location: int, scope_id: int | None = None) -> bytes:
        """The stored entry at `location`; StorageCorruptionError unless it is (scope,) ledger, entry."""
        log_id, pos = location >> 32, location & 0xFFFFFFFF
        try:
            channel = self._channel(log_id)
        except FileNotFoundError as e:
            raise StorageCorruptionError(
                f"entry {ledger_id}:{entry_id} is indexed in entry log {log_id:x}, which is missing") from e
        data = channel.read_entry(pos, self._size_limit)
        if len(data) > self._max_sane_entry_size and not self._warned_insane:
            self._warned_insane = True
            log.warning("entry %d:%d in log %x is %d bytes, above the sane maximum %d",
                        ledger_id, entry_id, log_id, len(data), self._max_sane_entry_size)
        try:
            _, scope, found_ledger, found_entry = peek_entry_ids(data)
        except Exception as e:
            raise StorageCorruptionError(f"entry log {log_id:x} offset {pos}: {e}") from e
        if found_ledger != ledger_id or found_entry != entry_id or (scope_id is not None and scope != scope_id):
            raise StorageCorruptionError(
                f"entry log {log_id:x} offset {pos} holds entry {found_entry} of ledger {found_ledger} "
                f"(scope {scope}), expected entry {entry_id} of ledger {ledger_id}"
                + (f" (scope {scope_id})" if scope_id is not None else ""))
        return data

    def read_run(self, scope_id: int, ledger_id: int, location: int, max_count: int,
                 max_bytes: int) -> list[tuple[int, int, bytes]]:
        """Up to max_count entries of one ledger stored back to back from `location` on (read-ahead):
        [(entry_id, location, bytes)], stopping at another ledger or after about max_bytes."""
        log_id, pos = location >> 32, location & 0xFFFFFFFF
        channel = self._channel(log_id)
        out: list[tuple[int, int, bytes]] = []
        start = pos - 4
        chunk_cap = DIRECT_RUN_CHUNK if self.direct_runs.enabled else _SCAN_CHUNK
        while len(out) < max_count and max_bytes > 0:
            want = max(self._read_size, min(max_bytes, chunk_cap))
            chunk = self._read_chunk(channel, start, want)
            run, end = parse_run(chunk, start, log_id << 32, scope_id, ledger_id, max_count - len(out))
            if not run and len(chunk) == want >= 4:
                # The next record is larger than a chunk: read it whole if the budget allows.
                need = 4 + int.from_bytes(chunk[:4], "big", signed=True)
                if want < need <= max_bytes and need - 4 <= self._max_sane_entry_size:
                    chunk = self._read_chunk(channel, start, need)
                    run, end = parse_run(chunk, start, log_id << 32, scope_id, ledger_id, max_count - len(out))
            if not run:
                break
            out.extend(run)
            max_bytes -= end - start
            start = end
        return out

    def _read_chunk(self, channel: BufferedChannel, start: int, n: int):
        chunk = self.direct_runs.read(channel, start, n)
        return channel.read(start, n) if chunk is None else chunk

    def _log_end(self, channel: BufferedChannel) -> int:
        if channel.writable:
            with self._lock:
                channel.flush()
                return channel.position
        return os.fstat(channel.fd).st_size

    def scan_records(self, log_id: int, with_data: bool = True) -> Iterator[LogRecord]:
        """Every entry of a log in file order (map records and padding skipped; a torn tail ends it)."""
        channel = self._channel(log_id)
        scanner = channel.scanner(LOGFILE_HEADER_SIZE, self._log_end(channel), _SCAN_CHUNK)
        base = log_id << 32
        while not scanner.done:
            for offset, size, scope, ledger, entry, data in scanner.next_batch(with_data):
                yield LogRecord(scope, ledger, entry, base | offset, size, data)
        if scanner.truncated:
            log.warning("entry log %x ends with a torn record at offset %d", log_id, scanner.position)

    def scan(self, log_id: int) -> Iterator[tuple[int, int, int, bytes | None]]:
        """(ledger_id, entry_id, location, entry bytes) of every entry of a log, in file order."""
        for r in self.scan_records(log_id, True):
            yield r.ledger_id, r.entry_id, r.location, r.data

    def read_header(self, log_id: int) -> tuple[int, int, int]:
        """(header version, ledgers map offset, ledgers count) of a log."""
        head = self._channel(log_id).read(0, _HEADER_FIELDS.size)
        if len(head) < _HEADER_FIELDS.size:
            raise StorageCorruptionError(f"entry log {log_id:x} is shorter than its header")
        magic, version, offset, count = _HEADER_FIELDS.unpack(head)
        if magic != HEADER_MAGIC:
            raise StorageCorruptionError(f"entry log {log_id:x} does not start with BKLO: {magic!r}")
        return version, offset, count

    def _ledgers_map_from_index(self, log_id: int) -> dict[int, int]:
        version, offset, count = self.read_header(log_id)
        if version < 1 or offset == 0:
            raise StorageCorruptionError(f"entry log {log_id:x} has no ledgers map")
        channel = self._channel(log_id)
        end = os.fstat(channel.fd).st_size if not channel.writable else channel.position
        found: dict[int, int] = {}
        while offset + 4 <= end:
            (size,) = struct.unpack(">i", channel.read(offset, 4))
            if size <= 0:
                break
            body = channel.read(offset + 4, size)
            if len(body) != size or size < LEDGERS_MAP_HEADER_SIZE - 4:
                raise StorageCorruptionError(f"entry log {log_id:x}: short ledgers map batch at {offset}")
            lid, eid, n = struct.unpack_from(">qqi", body)
            if lid != INVALID_LID or eid != LEDGERS_MAP_ENTRY_ID:
                raise StorageCorruptionError(f"entry log {log_id:x}: bad ledgers map batch at {offset}")
            if size != LEDGERS_MAP_HEADER_SIZE - 4 + LEDGERS_MAP_ENTRY_SIZE * n:
                raise StorageCorruptionError(f"entry log {log_id:x}: ledgers map batch size mismatch")
            for ledger_id, nbytes in _MAP_ITEM.iter_unpack(body[20:]):
                found[ledger_id] = found.get(ledger_id, 0) + nbytes
            offset += size + 4
        if len(found) != count:
            raise StorageCorruptionError(
                f"entry log {log_id:x}: ledgers map has {len(found)} ledgers, header says {count}")
        return found

    def ledgers_map(self, log_id: int) -> dict[int, int]:
        """{ledger_id: bytes (entries + 4 each)} of scope 0 ledgers: from the map, else by scanning."""
        cur = self._current
        if cur is not None and cur.channel.log_id == log_id:
            with self._lock:
                return dict(cur.ledgers)
        try:
            return self._ledgers_map_from_index(log_id)
        except StorageCorruptionError as e:
            log.debug("entry log %x: %s; scanning instead", log_id, e)
        found: dict[int, int] = {}
        for r in self.scan_records(log_id, with_data=False):
            if r.scope_id == 0:
                found[r.ledger_id] = found.get(r.ledger_id, 0) + r.size + 4
        return found

    def scoped_ledgers_map(self, log_id: int) -> dict[tuple[int, int], int]:
        """{(scope_id, ledger_id): bytes} of scoped ledgers (scope != 0), always by scanning."""
        found: dict[tuple[int, int], int] = {}
        for r in self.scan_records(log_id, with_data=False):
            if r.scope_id:
                key = (r.scope_id, r.ledger_id)
                found[key] = found.get(key, 0) + r.size + 4
        return found

    def remove_log(self, log_id: int) -> bool:
        """Delete a log file (garbage collection). Only for logs no index points into any more."""
        with self._sync_lock, self._lock:
            if self._current is not None and self._current.channel.log_id == log_id:
                raise BKIllegalOpException(f"entry log {log_id:x} is being written; it cannot be removed")
            with self._open_lock:
                channel = self._channels.pop(log_id, None)
                if channel is not None:
                    if channel in self._unsynced:
                        self._unsynced.remove(channel)
                    channel.close()
            try:
                path = self._find_log(log_id)
            except FileNotFoundError:
                return False
            path.unlink()
            return True
