"""The ledger cache: index pages of `.idx` files in a bounded LRU pool, plus the open FileInfo handles.

Owns (Java's IndexInMemPageMgr + IndexPersistenceMgr): the location of every (scope, ledger, entry)
known to the file-based index, served from fixed-size pages (`pageSize` bytes, pageSize/8 entries) held
in a pool of at most `pageLimit` pages, evicted least recently used; dirty pages are written lazily by
flush() (the checkpoint) and after eviction; FileInfo handles are cached up to an open-file limit (an
evicted handle writes its dirty pages and header, syncs and closes). Also owns the ledger header state
kept in the FileInfo (master key, fenced, explicit LAC) and the listing of ledgers on disk.

Eviction never writes: the cache lock is taken by the Bookie's reactor (master keys, fences, LACs,
InterleavedLedgerStorage's adds), so under it an evicted clean page is dropped and a clean handle closed,
while a dirty page or handle is only set aside ("retired", still found by lookups, so one ledger never
has two FileInfos). Retired ones are written, synced and let go by settle(), without the cache lock,
on the threads that may wait for a disk: flush() (the checkpoint), the memtable drain (put_locations)
and compaction's flush; until then the pool may hold up to twice its limits (past that, any caller
settles: bounded memory and descriptors win over latency). Writers take
`_io_lock` and write snapshots taken under the cache lock (header bytes, page copies), in the order
taken, so an older snapshot never lands after a newer one.

Durability contract: before ANY page is written to an index file (flush or settle), the callback
`before_page_write` runs; the storage uses it to fsync the entry logs, so an index page on disk never
points at entry-log bytes a crash could lose (the pages are snapshotted first: every location in them
was appended before that fsync). flush() returns only after every page and header changed before it was
called is fdatasynced (new files: fsync plus their directories).

Must never: write a page without calling before_page_write first, hold two FileInfo objects for one
ledger, or write or sync a file (or call before_page_write) while holding the cache lock.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from array import array
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Literal, overload

from bkfast.errors import BKNoSuchLedgerExistsException, BKUnauthorizedAccessException
from bkfast.indexstorage.file_info import STATE_FENCED, FileInfo, index_path, ledger_rel_path

__all__ = ["LedgerCache", "default_page_limit", "default_open_file_limit"]

log = logging.getLogger(__name__)

_LONG = struct.Struct(">q")
_HEX_DIR = re.compile(r"[0-9a-f]{1,2}")
_IDX_FILE = re.compile(r"([0-9a-f]{1,16})\.idx")
_SCOPE_DIR = re.compile(r"[0-9a-f]{16}")


def default_page_limit(page_size: int) -> int:
    """Java uses (max direct memory / 3) / pageSize; here min(RAM / 16, 256 MiB) / pageSize."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 1 << 32
    return max(16, min(ram // 16, 256 << 20) // page_size)


def default_open_file_limit() -> int:
    """Java's openFileLimit is 20000; bounded here by a quarter of this process's descriptor limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        soft = 1024
    if soft <= 0:
        soft = 1024
    return max(16, min(20000, soft // 4))


def _ledger_name(scope_id: int, ledger_id: int) -> str:
    return f"ledger {ledger_id}" + (f" (scope {scope_id})" if scope_id else "")


class LedgerCache:
    """Index pages and ledger headers of the ledgers in some index directories."""

    def __init__(self, index_dirs, page_size: int, page_limit: int, open_file_limit: int,
                 header_version: int, before_page_write):
        self._dirs = [Path(d) for d in index_dirs]
        self._epp = max(1, page_size // 8)
        self._page_size = self._epp * 8
        self.page_limit = page_limit if page_limit > 0 else default_page_limit(self._page_size)
        self.open_file_limit = max(1, open_file_limit)
        self._version = header_version
        self._before_page_write = before_page_write
        self._infos: OrderedDict[tuple[int, int], FileInfo] = OrderedDict()
        self._lru: OrderedDict[tuple[FileInfo, int], None] = OrderedDict()
        # Evicted while dirty (module docstring), written out by settle(): handles past the open-file
        # limit, and pages past the pool (still in their FileInfo's pages, out of the LRU).
        self._retired_infos: dict[tuple[int, int], FileInfo] = {}
        self._retired_pages: dict[tuple[FileInfo, int], None] = {}
        # What writers are writing or syncing now (counted per writer): eviction retires these rather
        # than drop or close them.
        self._in_flight_infos: Counter[FileInfo] = Counter()
        self._in_flight_pages: Counter[tuple[FileInfo, int]] = Counter()
        self._lock = threading.RLock()
        self._io_lock = threading.Lock()    # one writer of index files at a time (never the reactor)

    @property
    def entries_per_page(self) -> int:
        return self._epp

    @property
    def cached_pages(self) -> int:
        return len(self._lru)

    # -- FileInfo handles ---------------------------------------------------------------------------

    @overload
    def _info(self, scope_id: int, ledger_id: int, create: Literal[True]) -> FileInfo: ...

    @overload
    def _info(self, scope_id: int, ledger_id: int, create: bool = False) -> FileInfo | None: ...

    def _info(self, scope_id: int, ledger_id: int, create: bool = False) -> FileInfo | None:
        key = (scope_id, ledger_id)
        info = self._infos.get(key)
        if info is not None:
            self._infos.move_to_end(key)
            return info
        info = self._retired_infos.pop(key, None)
        if info is not None:     # not written out yet: the same handle comes back
            self._adopt(key, info)
            return info
        rel = ledger_rel_path(scope_id, ledger_id)
        torn: Path | None = None
        for d in self._dirs:
            path = d / "current" / rel
            if not path.exists():
                continue
            try:
                info = FileInfo.load(scope_id, ledger_id, path)
                break
            except FileNotFoundError:  # removed meanwhile, or created but its header never written
                torn = torn or (path if path.exists() else None)
        if info is None:
            if not create:
                return None
            selector = ledger_id if not scope_id else scope_id ^ ledger_id
            # Reuse a file whose header was never written rather than create a second one elsewhere.
            path = torn or index_path(self._dirs[selector % len(self._dirs)], scope_id, ledger_id)
            info = FileInfo(scope_id, ledger_id, path, self._version)
            info.header_dirty = True
            info.last_entry = -1
            log.debug("new index file for %s at %s", info.name(), path)
        self._adopt(key, info)
        return info

    def _adopt(self, key: tuple[int, int], info: FileInfo) -> None:
        self._infos[key] = info
        while len(self._infos) > self.open_file_limit:
            self._evict_info(next(iter(self._infos)))

    def _evict_info(self, key: tuple[int, int]) -> None:
        """Close a handle past the open-file limit, or retire it when it has something to write."""
        info = self._infos.pop(key)
        if info.dirty_pages or info.header_dirty or info.needs_sync() or info in self._in_flight_infos:
            self._retired_infos[key] = info
            return
        log.debug("closing index file of %s (open file limit %d)", info.name(), self.open_file_limit)
        self._drop(info)

    def _drop(self, info: FileInfo) -> None:
        """Forget a clean handle and its pages, and close it (lock held)."""
        for page_no in info.pages:
            self._lru.pop((info, page_no), None)
            self._retired_pages.pop((info, page_no), None)
        info.pages.clear()
        info.close()

    # -- pages --------------------------------------------------------------------------------------

    def _touch(self, info: FileInfo, page_no: int) -> None:
        """A cached page was used: most recently used (back in the LRU if it was retired)."""
        key = (info, page_no)
        if key in self._retired_pages:
            del self._retired_pages[key]
            self._lru[key] = None
            if len(self._lru) > self.page_limit:
                self._evict_pages()
        else:
            self._lru.move_to_end(key)

    def _page(self, info: FileInfo, page_no: int) -> bytearray:
        page = info.pages.get(page_no)
        lru = self._lru
        if page is not None:
            self._touch(info, page_no)
            return page
        page = info.read_page(page_no, self._page_size)
        info.pages[page_no] = page
        lru[(info, page_no)] = None
        if len(lru) > self.page_limit:
            self._evict_pages()
        return page

    def _evict_pages(self) -> None:
        lru = self._lru
        while len(lru) > self.page_limit:
            key, _ = lru.popitem(last=False)
            info, page_no = key
            if page_no in info.dirty_pages or key in self._in_flight_pages:
                self._retired_pages[key] = None     # kept readable until settle() has written it
            else:
                del info.pages[page_no]

    def _max_page(self, info: FileInfo) -> int:
        on_disk = (info.data_size + self._page_size - 1) // self._page_size - 1
        return max(on_disk, max(info.pages, default=-1))

    def _peek_page(self, info: FileInfo, page_no: int) -> bytes | bytearray:
        """A page for a scan, without caching it when it is not cached already."""
        page = info.pages.get(page_no)
        return page if page is not None else info.read_page(page_no, self._page_size)

    # -- locations ----------------------------------------------------------------------------------

    def put_location(self, scope_id: int, ledger_id: int, entry_id: int, location: int) -> None:
        self._put_location(scope_id, ledger_id, entry_id, location)
        self._settle_if_over()

    def _put_location(self, scope_id: int, ledger_id: int, entry_id: int, location: int) -> None:
        with self._lock:
            info = self._info(scope_id, ledger_id, create=True)
            page_no, slot = divmod(entry_id, self._epp)
            _LONG.pack_into(self._page(info, page_no), slot * 8, location)
            info.dirty_pages.add(page_no)
            if info.last_entry is not None and entry_id > info.last_entry:
                info.last_entry = entry_id

    def put_locations(self, scope_id: int, ledger_id: int, entry_ids, locations) -> None:
        """put_location for a run of one ledger (a memtable flush)."""
        epp, pack = self._epp, _LONG.pack_into
        with self._lock:
            info = self._info(scope_id, ledger_id, create=True)
            page_no, page = -1, bytearray()    # replaced at the first entry (page numbers are >= 0)
            for entry_id, location in zip(entry_ids, locations, strict=True):
                p, slot = divmod(entry_id, epp)
                if p != page_no:
                    page_no, page = p, self._page(info, p)
                    info.dirty_pages.add(p)
                pack(page, slot * 8, location)
            if info.last_entry is not None and entry_ids:
                info.last_entry = max(info.last_entry, max(entry_ids))
        self.settle()      # the memtable drain's thread may wait for the disk; the reactor's adds may not

    def update_location(self, scope_id: int, ledger_id: int, entry_id: int, location: int) -> bool:
        """put_location for a ledger the index knows (compaction); False (nothing done) otherwise."""
        with self._lock:
            if self._info(scope_id, ledger_id) is None:
                return False
            self._put_location(scope_id, ledger_id, entry_id, location)
            # No settle() here: the caller holds the lock of the reactor's adds; compaction's flush writes.
            return True

    def get_location(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None:
        """The entry's location, None when the index has none (or the ledger is unknown)."""
        with self._lock:
            info = self._info(scope_id, ledger_id)
            if info is None:
                return None
            page_no, slot = divmod(entry_id, self._epp)
            page = info.pages.get(page_no)
            if page is not None:
                self._touch(info, page_no)
            elif page_no * self._page_size >= info.data_size:
                return None  # past the end of the file and not cached: no location
            else:
                page = self._page(info, page_no)
            location = _LONG.unpack_from(page, slot * 8)[0]
        self._settle_if_over()
        return location or None

    def last_entry(self, scope_id: int, ledger_id: int) -> int:
        """Highest entry id with a location, -1 when none (or the ledger is unknown)."""
        with self._lock:
            info = self._info(scope_id, ledger_id)
            if info is None:
                return -1
            if info.last_entry is None:
                info.last_entry = -1
                for page_no in range(self._max_page(info), -1, -1):
                    used = len(bytes(self._peek_page(info, page_no)).rstrip(b"\0"))
                    if used:
                        info.last_entry = page_no * self._epp + (used - 1) // 8
                        break
            return info.last_entry

    def entries(self, scope_id: int, ledger_id: int) -> list[int]:
        """Sorted ids of every entry with a location."""
        out: list[int] = []
        with self._lock:
            info = self._info(scope_id, ledger_id)
            if info is None:
                return out
            for page_no in range(self._max_page(info) + 1):
                values = array("q", bytes(self._peek_page(info, page_no)))
                if not any(values):
                    continue
                if values.itemsize != 8:
                    raise RuntimeError("array('q') is not 8 bytes on this platform")
                values.byteswap()
                base = page_no * self._epp
                out.extend(base + i for i, v in enumerate(values) if v)
        return out

    # -- ledger header state ------------------------------------------------------------------------

    def exists(self, scope_id: int, ledger_id: int) -> bool:
        with self._lock:
            found = self._info(scope_id, ledger_id) is not None
        self._settle_if_over()
        return found

    def set_master_key(self, scope_id: int, ledger_id: int, key: bytes) -> None:
        with self._lock:
            info = self._info(scope_id, ledger_id, create=True)
            if not info.master_key:
                info.master_key = bytes(key)
                info.header_dirty = True
            elif info.master_key != bytes(key):
                raise BKUnauthorizedAccessException(
                    f"wrong master key for {_ledger_name(scope_id, ledger_id)}")
        self._settle_if_over()

    def get_master_key(self, scope_id: int, ledger_id: int) -> bytes | None:
        with self._lock:
            info = self._info(scope_id, ledger_id)
            # An empty key means "not known yet" (Java keys are SHA-1 digests, never empty).
            key = None if info is None or not info.master_key else info.master_key
        self._settle_if_over()
        return key

    def _known(self, scope_id: int, ledger_id: int) -> FileInfo:
        info = self._info(scope_id, ledger_id)
        if info is None:
            raise BKNoSuchLedgerExistsException(
                f"No such ledger exists: {_ledger_name(scope_id, ledger_id)} has no index file")
        return info

    def set_fenced(self, scope_id: int, ledger_id: int) -> bool:
        with self._lock:
            info = self._known(scope_id, ledger_id)
            if info.state_bits & STATE_FENCED:
                return False
            info.state_bits |= STATE_FENCED
            info.header_dirty = True
            return True

    def is_fenced(self, scope_id: int, ledger_id: int) -> bool:
        with self._lock:
            return self._known(scope_id, ledger_id).fenced

    def set_explicit_lac(self, scope_id: int, ledger_id: int, lac: bytes) -> None:
        with self._lock:
            info = self._known(scope_id, ledger_id)
            info.explicit_lac = bytes(lac)
            info.header_dirty = True

    def get_explicit_lac(self, scope_id: int, ledger_id: int) -> bytes | None:
        with self._lock:
            return self._known(scope_id, ledger_id).explicit_lac

    def delete(self, scope_id: int, ledger_id: int) -> None:
        """Forget a ledger: drop its cached pages and handle, unlink its index file(s)."""
        with self._lock:
            key = (scope_id, ledger_id)
            info = self._infos.pop(key, None) or self._retired_infos.pop(key, None)
            if info is not None:
                for page_no in info.pages:
                    self._lru.pop((info, page_no), None)
                    self._retired_pages.pop((info, page_no), None)
                info.pages.clear()
                info.dirty_pages.clear()
                info.unlink()     # a writer holding a snapshot of it now writes nothing
            log.info("removed index file of %s", _ledger_name(scope_id, ledger_id))
            rel = ledger_rel_path(scope_id, ledger_id)
            for d in self._dirs:
                try:
                    (d / "current" / rel).unlink()
                except FileNotFoundError:
                    pass

    # -- listing ------------------------------------------------------------------------------------

    def _scan_dir(self, base: Path) -> set[int]:
        found: set[int] = set()
        try:
            firsts = os.listdir(base)
        except FileNotFoundError:
            return found
        for first in firsts:
            if not _HEX_DIR.fullmatch(first):
                continue
            try:
                seconds = os.listdir(base / first)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for second in seconds:
                if not _HEX_DIR.fullmatch(second):
                    continue
                try:
                    names = os.listdir(base / first / second)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                for name in names:
                    m = _IDX_FILE.fullmatch(name)
                    if m:
                        found.add(int(m.group(1), 16))
        return found

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        with self._lock:
            found: set[int] = set()
            for d in self._dirs:
                base = d / "current" if not scope_id else d / "current" / "scoped" / f"{scope_id:016x}"
                found |= self._scan_dir(base)
            found |= {lid for (scope, lid) in (*self._infos, *self._retired_infos) if scope == scope_id}
            return sorted(found)

    def all_ledgers(self) -> list[tuple[int, int]]:
        with self._lock:
            scopes = {0}
            for d in self._dirs:
                try:
                    scopes |= {int(n, 16) for n in os.listdir(d / "current" / "scoped") if _SCOPE_DIR.fullmatch(n)}
                except FileNotFoundError:
                    pass
            scopes |= {scope for (scope, _) in (*self._infos, *self._retired_infos)}
            return sorted((scope, lid) for scope in scopes for lid in self.list_ledgers(scope))

    # -- durability ---------------------------------------------------------------------------------

    def flush(self) -> int:
        """Write every dirty page and header, then fdatasync the files written. Returns files synced."""
        with self._io_lock:
            with self._lock:
                infos = [*self._infos.values(), *self._retired_infos.values()]
                work = self._take_writes(infos)
                held = self._hold(infos, work)
            try:
                self._write(work)
            except BaseException:
                self._let_go(held)
                raise
        try:
            # Outside the io lock too: a flush of another thread (GC) writes meanwhile, then syncs.
            synced = sum(info.sync() for info in infos if info.needs_sync())
        finally:
            self._let_go(held)
        if work or synced:
            log.debug("index flush: %d ledgers written, %d index files synced", len(work), synced)
        return synced

    def settle(self) -> None:
        """Write out what eviction retired (module docstring): retired handles are written, synced and
        closed, retired pages written and dropped. Not for the reactor: it waits for the disk."""
        if not self._retired_infos and not self._retired_pages:
            return
        with self._io_lock:
            with self._lock:
                retired = list(self._retired_infos.values())
                work = self._take_writes({*retired, *(info for info, _ in self._retired_pages)})
                held = self._hold(retired, work)
            try:
                self._write(work)
                for info in retired:
                    if info.needs_sync():
                        info.sync()
            finally:
                self._let_go(held)

    def _settle_if_over(self) -> None:
        """settle() once retirement has doubled a limit (the pool or the open files): memory and
        descriptors stay bounded. Short of that (any real load between two checkpoints) the calls the
        reactor makes never write; the checkpoint and the memtable drain settle."""
        if len(self._retired_pages) > self.page_limit or len(self._retired_infos) > self.open_file_limit:
            self.settle()

    def _take_writes(self, infos) -> list[tuple[FileInfo, bytes | None, list[tuple[int, bytes]]]]:
        """Snapshots of the dirty header and pages of `infos`, now marked clean (cache lock held)."""
        work = []
        for info in infos:
            if not (info.dirty_pages or info.header_dirty):
                continue
            header = info.header_bytes() if info.header_dirty or info.fd is None else None
            pages = [(page_no, bytes(info.pages[page_no])) for page_no in sorted(info.dirty_pages)]
            info.header_dirty = False
            info.dirty_pages.clear()
            work.append((info, header, pages))
        return work

    def _write(self, work: list[tuple[FileInfo, bytes | None, list[tuple[int, bytes]]]]) -> None:
        """Write snapshots (io lock held, cache lock not): entry logs synced first when pages go out."""
        try:
            if any(pages for _, _, pages in work):
                self._before_page_write()
            for info, header, pages in work:
                if header is not None:
                    info.write_header(header)
                for page_no, page in pages:
                    info.write_page(page_no, page)
        except BaseException:
            with self._lock:    # written again by the next flush (rewriting a page or header is harmless)
                for info, header, pages in work:
                    if header is not None:
                        info.header_dirty = True
                    info.dirty_pages.update(page_no for page_no, _ in pages if page_no in info.pages)
            raise

    def _hold(self, infos, work) -> tuple[list[FileInfo], list[tuple[FileInfo, int]]]:
        """Mark `infos`, and the handles and pages `work` writes, in flight (cache lock held)."""
        held = [*infos, *(info for info, _, _ in work)]
        pages = [(info, page_no) for info, _, written in work for page_no, _ in written]
        self._in_flight_infos.update(held)
        self._in_flight_pages.update(pages)
        return held, pages

    def _let_go(self, held: tuple[list[FileInfo], list[tuple[FileInfo, int]]]) -> None:
        """A writer is done with what it held: drop the retired pages and close the retired handles that
        are clean now and held by no other writer."""
        with self._lock:
            self._in_flight_infos.subtract(held[0])
            self._in_flight_pages.subtract(held[1])
            for done in [k for k, n in self._in_flight_infos.items() if n <= 0]:
                del self._in_flight_infos[done]
            for page_done in [k for k, n in self._in_flight_pages.items() if n <= 0]:
                del self._in_flight_pages[page_done]
            for page_key in [k for k in self._retired_pages
                             if k[1] not in k[0].dirty_pages and k not in self._in_flight_pages]:
                del self._retired_pages[page_key]
                del page_key[0].pages[page_key[1]]
            for key, info in list(self._retired_infos.items()):
                if not (info.dirty_pages or info.header_dirty or info.needs_sync()
                        or info in self._in_flight_infos):
                    del self._retired_infos[key]
                    self._drop(info)

    def close(self) -> None:
        self.flush()
        with self._lock:
            for info in [*self._infos.values(), *self._retired_infos.values()]:
                info.close()
            self._infos.clear()
            self._retired_infos.clear()
            self._retired_pages.clear()
            self._lru.clear()
