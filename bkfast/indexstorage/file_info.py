"""One ledger's `.idx` index file (Java's FileInfo): path, 1024-byte "BKLE" header, location pages.

Owns (spec/bookkeeper-formats.md §4.5, scope-ids.md "Bookie storage"): where the file of a ledger lives
(`current/<hex((id>>8)&0xff)>/<hex(id&0xff)>/<hex(id)>.idx`, scoped ledgers under
`current/scoped/<scope 16 hex>/`), the header layout byte for byte (signature, version, master key,
state bits with FENCED, and in version 1 the explicit LAC), and reading/writing whole pages of 8-byte
big-endian locations at offset 1024 + 8 * entry.

Must never: decide when data is durable (the ledger cache calls write_header/write_page/sync), keep a
page cache of its own, or create the file before there is something to write (a ledger seen only in
memory leaves no file behind).

Threads: the ledger cache changes the state (header fields, pages) under its lock and writes it out
without that lock, from snapshots (header_bytes(), copies of pages): write_header(raw), write_page,
sync and close take `io_lock` themselves, so a concurrent close() cannot pull the descriptor away, and
after unlink() nothing writes (or re-creates) the file of a deleted ledger.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from pathlib import Path

from bkfast.errors import StorageCorruptionError
from bkfast.storage.files import fsync_dir

__all__ = ["FileInfo", "START_OF_DATA", "SIGNATURE", "STATE_FENCED", "index_path", "parse_header", "build_header"]

START_OF_DATA = 1024
SIGNATURE = 0x424B4C45  # "BKLE"
HEADER_V0 = 0
HEADER_V1 = 1
STATE_FENCED = 0x1
_INT = struct.Struct(">i")
_HEAD = struct.Struct(">iii")  # signature, version, master key length


def ledger_rel_path(scope_id: int, ledger_id: int) -> str:
    """Path of a ledger's index file relative to `<dir>/current`."""
    rel = f"{(ledger_id >> 8) & 0xff:x}/{ledger_id & 0xff:x}/{ledger_id:x}.idx"
    return rel if not scope_id else f"scoped/{scope_id:016x}/{rel}"


def index_path(index_dir: str | os.PathLike[str], scope_id: int, ledger_id: int) -> Path:
    return Path(index_dir) / "current" / ledger_rel_path(scope_id, ledger_id)


def build_header(version: int, master_key: bytes, state_bits: int, explicit_lac: bytes | None) -> bytes:
    parts = [_HEAD.pack(SIGNATURE, version, len(master_key)), master_key, _INT.pack(state_bits)]
    if version >= HEADER_V1:
        if explicit_lac is None:
            parts.append(_INT.pack(0))
        else:
            parts += [_INT.pack(len(explicit_lac)), explicit_lac]
    raw = b"".join(parts)
    if len(raw) > START_OF_DATA:
        raise ValueError(f"index header of {len(raw)} bytes does not fit {START_OF_DATA} (master key or LAC too long)")
    return raw + bytes(START_OF_DATA - len(raw))


def parse_header(raw: bytes, path: Path) -> tuple[int, bytes, int, bytes | None]:
    """(version, master key, state bits, explicit LAC or None) of an index file header."""
    if len(raw) < _HEAD.size + 4:
        raise StorageCorruptionError(f"index file {path} is shorter than its header ({len(raw)} bytes)")
    signature, version, key_len = _HEAD.unpack_from(raw)
    if signature != SIGNATURE:
        raise StorageCorruptionError(f"index file {path} has signature {signature:#x}, expected BKLE {SIGNATURE:#x}")
    if version not in (HEADER_V0, HEADER_V1):
        raise StorageCorruptionError(f"index file {path} has unknown header version {version}")
    pos = _HEAD.size
    if key_len < 0 or pos + key_len + 4 > len(raw):
        raise StorageCorruptionError(f"index file {path} has a bad master key length {key_len}")
    key = bytes(raw[pos:pos + key_len])
    pos += key_len
    (state_bits,) = _INT.unpack_from(raw, pos)
    pos += 4
    lac = None
    if version >= HEADER_V1:
        (lac_len,) = _INT.unpack_from(raw, pos)
        pos += 4
        if lac_len < 0 or pos + lac_len > len(raw):
            raise StorageCorruptionError(f"index file {path} has a bad explicit LAC length {lac_len}")
        if lac_len:
            lac = bytes(raw[pos:pos + lac_len])
    return version, key, state_bits, lac


class FileInfo:
    """Header state and file handle of one ledger's index file; pages are cached by the LedgerCache."""

    __slots__ = ("scope_id", "ledger_id", "path", "version", "master_key", "state_bits", "explicit_lac",
                 "header_dirty", "fd", "data_size", "pages", "dirty_pages", "last_entry", "io_lock",
                 "write_seq", "synced_seq", "created", "removed")

    def __init__(self, scope_id: int, ledger_id: int, path: Path, version: int):
        self.scope_id = scope_id
        self.ledger_id = ledger_id
        self.path = path
        self.version = version
        self.master_key: bytes = b""
        self.state_bits = 0
        self.explicit_lac: bytes | None = None
        self.header_dirty = False
        self.fd: int | None = None
        self.data_size = 0              # bytes of location data in the file (file size - 1024)
        self.pages: dict[int, bytearray] = {}   # cached pages (the ledger cache's pool owns the LRU)
        self.dirty_pages: set[int] = set()
        self.last_entry: int | None = None      # highest entry id with a location; None = not computed
        self.io_lock = threading.Lock()
        self.write_seq = 0
        self.synced_seq = 0
        self.created = False            # the file was created by this process and its dir not yet synced
        self.removed = False            # unlink()ed: writes are dropped, the file is never re-created

    def name(self) -> str:
        return f"ledger {self.ledger_id}" + (f" (scope {self.scope_id})" if self.scope_id else "")

    @property
    def fenced(self) -> bool:
        return bool(self.state_bits & STATE_FENCED)

    @property
    def on_disk(self) -> bool:
        return self.fd is not None

    # -- opening -----------------------------------------------------------------------------------

    @classmethod
    def load(cls, scope_id: int, ledger_id: int, path: Path) -> FileInfo:
        """Open an existing index file and read its header. FileNotFoundError when there is none."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, START_OF_DATA, 0)
            if not raw.strip(b"\0"):
                # Created but its header never written (a crash in between): the ledger is not there
                # yet; journal replay recreates it (and _create reuses the file).
                raise FileNotFoundError(errno.ENOENT, f"index file {path} has an empty header")
            version, key, bits, lac = parse_header(raw, path)
            info = cls(scope_id, ledger_id, path, version)
            info.master_key, info.state_bits, info.explicit_lac = key, bits, lac
            info.data_size = max(0, os.fstat(fd).st_size - START_OF_DATA)
        except BaseException:
            os.close(fd)
            raise
        info.fd = fd
        return info

    def _create(self) -> int:
        """Create (or, after a crash, reopen) the file; its descriptor."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            # A file left by a crash before its ledger's header was durable: rewrite its header.
            fd = os.open(self.path, os.O_RDWR)
            self.data_size = max(0, os.fstat(fd).st_size - START_OF_DATA)
        self.fd = fd
        self.created = True
        self.header_dirty = True
        return fd

    def _open_fd(self) -> int:
        """The descriptor once write_header has created the file."""
        fd = self.fd
        if fd is None:
            raise StorageCorruptionError(f"index file {self.path} written before its header")
        return fd

    # -- I/O (called with the ledger cache lock held, except sync) ---------------------------------

    def read_page(self, page_no: int, page_size: int) -> bytearray:
        """A page of locations as stored (zero-filled past the end of the file)."""
        page = bytearray(page_size)
        if self.fd is None:
            return page
        offset = page_no * page_size
        if offset >= self.data_size:
            return page
        raw = os.pread(self.fd, page_size, START_OF_DATA + offset)
        page[:len(raw)] = raw
        return page

    def header_bytes(self) -> bytes:
        """The header as it stands (the ledger cache takes it under its lock, writes it later)."""
        return build_header(self.version, self.master_key, self.state_bits, self.explicit_lac)

    def write_header(self, raw: bytes | None = None) -> None:
        """Write `raw` (header_bytes() taken earlier; header_dirty is then the caller's) or the header as
        it stands, creating the file if needed."""
        with self.io_lock:
            if self.removed:
                return
            fd = self.fd if self.fd is not None else self._create()
            os.pwrite(fd, self.header_bytes() if raw is None else raw, 0)
            if raw is None:
                self.header_dirty = False
            self.write_seq += 1

    def write_page(self, page_no: int, page: bytes | bytearray) -> None:
        """Write one page; the header (which creates the file) is written first by the caller."""
        with self.io_lock:
            if self.removed:
                return
            offset = page_no * len(page)
            written = os.pwrite(self._open_fd(), page, START_OF_DATA + offset)
            if written != len(page):
                raise OSError(errno.EIO, f"short write of index page {page_no} to {self.path}")
            self.data_size = max(self.data_size, offset + len(page))
            self.write_seq += 1

    def needs_sync(self) -> bool:
        return self.write_seq != self.synced_seq

    def sync(self) -> bool:
        """fdatasync what was written so far (fsync plus the parent dir for a new file). True if synced."""
        with self.io_lock:
            if self.fd is None or self.write_seq == self.synced_seq:
                return False
            seq = self.write_seq
            if self.created:
                os.fsync(self.fd)
                _fsync_dir(self.path.parent)
                self.created = False
            else:
                os.fdatasync(self.fd)
            self.synced_seq = seq
            return True

    def close(self) -> None:
        with self.io_lock:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None

    def unlink(self) -> None:
        with self.io_lock:
            self.removed = True
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _fsync_dir(path: Path) -> None:
    # A new ledger may also have created the levels above its file, up to `current/`.
    dirs = [path]
    while dirs[-1].name != "current" and len(dirs) < 5:
        dirs.append(dirs[-1].parent)
    for d in dirs:
        fsync_dir(d)
