"""RocksDB (rocksdict, raw mode) stores of DbLedgerStorage, and the entry location index on top of them.

Owns: opening and closing one RocksDB database per store directory (so a store can be reopened in the
same process: no iterator, view or snapshot outlives a call), the key layouts of the location stores
(spec/bookkeeper-formats.md §4.6 and spec/scope-ids.md "Bookie storage"):

    locations     key = ledgerId(8) | entryId(8)               value = location(8)   (Java's, byte-identical)
    locations128  key = scope(8) | ledgerId(8) | entryId(8)    value = location(8)   (scope != 0 only)

all big-endian (ids signed, scope unsigned), and the location operations: point lookup, floor lookup of
a ledger's last entry, a ledger's entry ids, ledger deletion by deleteRange, and atomic batch commits;
and the check that a store is not behind its last checkpoint (CHECKPOINT_FILE: a truncated MANIFEST can
open as an empty store).

Must never: read entry logs, cache entries, or decide when a batch is committed (the storage commits
only after the entry logs holding the batch's entries are fsynced). `locations128` is created on the
first scoped write, so a bookie that never sees scope != 0 keeps a Java-identical directory.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
)

from bkfast._stats import OpStats, now_ns
from bkfast.errors import StorageCorruptionError

if TYPE_CHECKING:
    from bkfast.dbstorage._flushslices import FlushSlice

__all__ = [
    "CHECKPOINT_FILE",
    "LOCATIONS",
    "LOCATIONS128",
    "LocationBatch",
    "LocationIndex",
    "RocksStore",
    "ledger_prefix",
    "qualified_key",
    "split_key",
]

log = logging.getLogger(__name__)

LOCATIONS = "locations"
LOCATIONS128 = "locations128"

_LONG = struct.Struct(">q")
_LOC_KEY = struct.Struct(">qq")
_LOC_KEY128 = struct.Struct(">Qqq")
_PREFIX128 = struct.Struct(">Qq")
_MAX_LONG = 2**63 - 1
_LOW64 = (1 << 64) - 1
LOCATION_CHUNK = 4096
"""Locations per RocksDB write of a flush (see LocationBatch)."""
CHECKPOINT_FILE = "BKFAST-CHECKPOINT"
"""In a store's directory: the RocksDB sequence number the store had made durable at the bookie's last
checkpoint (decimal text; see RocksStore.record_checkpoint). RocksDB ignores files it did not name."""


def qualified_key(scope_id: int, ledger_id: int) -> int:
    """One int naming a ledger in every in-memory map: the ledger id for scope 0, else scope<<64|id.

    Sorting these keys sorts ledgers by (scope, ledger) with scope 0 first, which is the order a flush
    writes them in.
    """
    return ledger_id if not scope_id else (scope_id << 64) | ledger_id


def split_key(key: int) -> tuple[int, int]:
    """(scope_id, ledger_id) of a qualified_key."""
    return key >> 64, key & _LOW64


def ledger_prefix(scope_id: int, ledger_id: int) -> bytes:
    """Key prefix of a ledger's entries in its location store."""
    return _LONG.pack(ledger_id) if not scope_id else _PREFIX128.pack(scope_id, ledger_id)


def _next_prefix(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with prefix (None: no such key)."""
    value = int.from_bytes(prefix, "big") + 1
    if value >> (8 * len(prefix)):
        return None
    return value.to_bytes(len(prefix), "big")


def open_error(path: Path, err: Exception) -> Exception:
    """One line for a RocksDB store that does not open: which store, RocksDB's reason, what to do.

    Corruption (a truncated MANIFEST or .sst, a bad CURRENT) -> StorageCorruptionError; no space ->
    OSError(ENOSPC) (the bookie starts read-only on it); anything else -> StorageCorruptionError too,
    since a bookie cannot serve without its index either way."""
    text = " ".join(str(err).split())       # RocksDB's status spans lines; keep one
    if "No space left on device" in text or "Disk quota exceeded" in text:
        return OSError(errno.ENOSPC, f"RocksDB store {path} cannot open: {text}")
    if text.startswith("Corruption") or "corrupt" in text.lower():
        what = (f"RocksDB store {path} is corrupt ({text}); the bookie cannot start on it: restore this "
                "directory from a backup, or wipe the bookie (bkfast shell bookieformat --force) and let "
                "AutoRecovery re-replicate its ledgers")
    elif "lock" in text.lower() and ("resource temporarily unavailable" in text.lower() or "LOCK" in text):
        what = (f"RocksDB store {path} is in use by another process (its LOCK is held): another bookie (or a "
                "shell command) runs on this directory; stop it, or give this bookie other directories")
    else:
        what = (f"RocksDB store {path} cannot open ({text}); check the directory's files and permissions, "
                "or restore it from a backup")
    return StorageCorruptionError(what)


def read_checkpoint(path: Path) -> int | None:
    """The sequence number recorded in a store's CHECKPOINT_FILE; None when there is none (a store a Java
    bookie or an older bkfast made) or it does not parse."""
    try:
        text = (path / CHECKPOINT_FILE).read_text()
    except FileNotFoundError:
        return None
    try:
        return int(text.strip())
    except ValueError:
        log.warning("%s does not hold a sequence number (%r): the store is opened without the check",
                    path / CHECKPOINT_FILE, text[:40])
        return None


def write_checkpoint(path: Path, seq: int) -> None:
    """Replace a store's CHECKPOINT_FILE atomically: the new file is fsynced before the rename. The
    directory is not: a rename lost in a crash leaves the previous, lower number, still a valid bound."""
    tmp = path / (CHECKPOINT_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"%d\n" % seq)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path / CHECKPOINT_FILE)


def check_not_behind(path: Path) -> int | None:
    """Refuse a store that holds less than it had made durable at the last checkpoint.

    A MANIFEST truncated at some offsets opens without any error as an EMPTY store (RocksDB takes the
    cut record for the end of the log), and a read-write open then deletes the store's .sst files as
    obsolete: the bookie would answer "no such entry" for acknowledged entries. So the store is opened
    READ-ONLY first (which deletes nothing) and its sequence number compared with the recorded one; a
    crash cannot make it lower, since the number recorded was durable when it was written. Returns the
    store's sequence number (None: nothing recorded, no check)."""
    recorded = read_checkpoint(path)
    if recorded is None:
        return None
    try:
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as err:  # noqa: BLE001 - rocksdict raises a bare Exception with RocksDB's status
        raise open_error(path, err) from err
    try:
        seq = db.latest_sequence_number()
    finally:
        db.close()
        del db
    if seq < recorded:
        raise StorageCorruptionError(
            f"RocksDB store {path} is corrupt: it opens at sequence number {seq}, behind the {recorded} it "
            f"had made durable at the last checkpoint ({path / CHECKPOINT_FILE}), so files of it are missing "
            "or truncated (a MANIFEST?) and acknowledged entries would be missing; the bookie cannot start on "
            "it (nothing was changed): restore this directory from a backup, or wipe the bookie (bkfast shell "
            "bookieformat --force) and let AutoRecovery re-replicate its ledgers")
    return seq


class RocksStore:
    """One RocksDB database directory opened in raw mode (bytes keys and values).

    On a full disk (RocksDB needs a little room to open: a new MANIFEST and write-ahead log, and an
    .sst of the recovered log) an existing store opens read-only instead (`read_only`): reads work,
    every write raises OSError(ENOSPC), until `reopen_writable()` succeeds once there is room."""

    def __init__(self, path: Path, *, block_cache_bytes: int = 8 << 20, bloom_bits: int = 10):
        self.path = Path(path)
        self._block_cache_bytes = block_cache_bytes
        self._bloom_bits = bloom_bits
        self._lock = threading.Lock()  # guards close and reopen against concurrent use
        self._retired: list[Rdict] = []  # read-only handles replaced by a writable one (closed at close())
        self.read_only = False
        # Before anything may purge files: is the store behind its last checkpoint (check_not_behind)?
        # _recorded_seq: a sequence number CHECKPOINT_FILE needs not be raised to (None: no file yet).
        self._recorded_seq = check_not_behind(self.path)
        # On open RocksDB replays its write-ahead log: a stopped Java bookie leaves most of its index
        # there (see tests/vectors/java_bookie_dirs), and it is recovered here.
        try:
            self._db: Rdict | None = Rdict(str(self.path), self._options())
        except Exception as err:  # rocksdict raises a bare Exception carrying RocksDB's status text
            error = open_error(self.path, err)
            if not (isinstance(error, OSError) and error.errno == errno.ENOSPC):
                raise error from err
            try:
                # A read-only open replays the write-ahead log in memory and writes nothing.
                self._db = Rdict(str(self.path), self._options(), access_type=AccessType.read_only())
            except Exception:  # noqa: BLE001 - no store to read (new): the no-space error is the one to tell
                raise error from err
            self.read_only = True
            log.warning("RocksDB store %s opened read-only: no space left to open it for writing (%s)",
                        self.path, " ".join(str(err).split()))

    def _options(self) -> Options:
        opt = Options(raw_mode=True)
        opt.create_if_missing(True)
        opt.set_compression_type(DBCompressionType.lz4())
        table = BlockBasedOptions()
        if self._block_cache_bytes > 0:
            table.set_block_cache(Cache(self._block_cache_bytes))
        if self._bloom_bits > 0:
            table.set_bloom_filter(self._bloom_bits, False)
        opt.set_block_based_table_factory(table)
        return opt

    def reopen_writable(self) -> None:
        """A store opened read-only on a full disk: open it for writing (raises as __init__ when it
        still cannot). The read-only handle stays open until close(): a read may still be using it."""
        if not self.read_only:
            return
        try:
            db = Rdict(str(self.path), self._options())
        except Exception as err:  # noqa: BLE001
            raise open_error(self.path, err) from err
        with self._lock:
            old, self._db = self._db, db
            self.read_only = False
        if old is not None:
            self._retired.append(old)
        log.info("RocksDB store %s is writable again", self.path)

    def _no_space(self) -> OSError:
        return OSError(errno.ENOSPC, f"RocksDB store {self.path} is open read-only: its disk was full when "
                                     "the bookie started")

    @property
    def db(self) -> Rdict:
        db = self._db
        if db is None:
            raise ValueError(f"RocksDB store {self.path} is closed")
        return db

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def estimated_keys(self) -> int:
        """RocksDB's estimate of the keys in the store (`rocksdb.estimate-num-keys`)."""
        return self.db.property_int_value("rocksdb.estimate-num-keys") or 0

    # A synced write is an unsynced write followed by sync() (FlushWAL(sync=true): the WAL fsync of every
    # write so far): rocksdict holds the GIL for a whole write call, fsync included, but releases it in
    # flush_wal. Measured with a busy disk: synced writes stalled every other thread of the bookie up to
    # 57 ms (its reactor among them); write + flush_wal, 19 ms max and p99 5 ms.

    @contextlib.contextmanager
    def _changing(self, sync: bool) -> Iterator[None]:
        """Around every change: refused while the store is read-only (its disk full), synced after it when
        asked."""
        if self.read_only:
            raise self._no_space()
        yield
        if sync:
            self.sync()

    def put(self, key: bytes, value: bytes, sync: bool = False) -> None:
        with self._changing(sync):
            self.db.put(key, value)

    def delete(self, key: bytes, sync: bool = False) -> None:
        with self._changing(sync):
            self.db.delete(key)

    def write(self, batch: WriteBatch, sync: bool = False) -> None:
        with self._changing(sync):
            self.db.write(batch)

    def delete_range(self, begin: bytes, end: bytes | None, sync: bool = False) -> None:
        with self._changing(sync):
            if end is None:
                keys = [k for k, _ in self.range(begin, None)]
                for k in keys:
                    self.db.delete(k)
            else:
                self.db.delete_range(begin, end)

    def floor(self, key: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        """The greatest (key, value) <= key that starts with prefix."""
        it = self.db.iter()
        try:
            it.seek_for_prev(key)
            if it.valid():
                found = it.key()
                if found.startswith(prefix):
                    return found, it.value()
            return None
        finally:
            del it  # an iterator keeps the database open (rocksdict gotcha)

    def range(self, begin: bytes, end: bytes | None) -> list[tuple[bytes, bytes]]:
        """Every (key, value) with begin <= key < end (end None: to the last key)."""
        ro = ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(end)
        it = self.db.iter(ro)
        out = []
        try:
            it.seek(begin)
            while it.valid():
                out.append((it.key(), it.value()))
                it.next()
        finally:
            del it
        return out

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) in key order, read as the caller consumes them (loading millions of
        ledgers' records built a list of all of them first: RSS the process kept). Consume it fully or
        close it before the store is closed (an open iterator keeps the database open)."""
        it = self.db.iter()
        try:
            it.seek_to_first()
            while it.valid():
                yield it.key(), it.value()
                it.next()
        finally:
            del it

    def sync(self) -> None:
        """Make every write so far durable (fsync of the write-ahead log; read-only: nothing to do)."""
        if not self.read_only:
            self.db.flush_wal(True)

    def record_checkpoint(self) -> None:
        """Sync the store and record in CHECKPOINT_FILE the sequence number it has made durable.

        The number is read BEFORE the sync: every write up to it is durable once the sync returns, even
        if other threads write meanwhile. Not recording (an I/O error here) only weakens the next open's
        check, so an error is logged, not raised."""
        with self._lock:
            db = self._db
            if db is None or self.read_only:
                return
            seq = db.latest_sequence_number()
            db.flush_wal(True)
            if seq == self._recorded_seq:
                return
            try:
                write_checkpoint(self.path, seq)
            except OSError as err:
                log.warning("cannot record the checkpoint of RocksDB store %s: %s", self.path, err)
                return
            self._recorded_seq = seq

    def close(self) -> None:
        with self._lock:
            db, self._db = self._db, None
            retired, self._retired = self._retired, []
        errors: list[Exception] = []
        for handle in (db, *retired):
            if handle is not None:
                try:
                    handle.close()      # flushes the memtable: may need room
                except Exception as err:  # noqa: BLE001 - close the others; ENOSPC as an OSError
                    text = " ".join(str(err).split())
                    if "No space left on device" in text or "Disk quota exceeded" in text:
                        errors.append(OSError(errno.ENOSPC, f"RocksDB store {self.path} close: {text}"))
                    else:
                        errors.append(err)
        del db, retired
        if errors:
            raise errors[0]


class LocationBatch:
    """Locations of one flush, committed per store by LocationIndex.commit.

    Each store's locations are kept in WriteBatches of about LOCATION_CHUNK entries: RocksDB's write
    holds the GIL, so one write of a whole write-cache half (30 ms for 170k locations) stalled the
    reactor. The chunks are written unsynced and the last one synced, which makes all of them durable
    (one WAL); a crash in between leaves some locations of entries that are already durable in their
    entry log, and the journal (lastMark not yet moved) replays the rest.
    """

    __slots__ = ("plain", "scoped", "count")

    def __init__(self):
        self.plain: list[WriteBatch] = [WriteBatch(raw_mode=True)]
        self.scoped: list[WriteBatch] | None = None
        self.count = 0

    def add(self, scope_id: int, ledger_id: int, entry_ids: Iterable[int], locations: Iterable[int]) -> None:
        pack_value = _LONG.pack
        before = self.count
        if not scope_id:
            chunks = self.plain
            wb = chunks[-1]
            put = wb.put
            pack_key = _LOC_KEY.pack
            for entry_id, location in zip(entry_ids, locations, strict=True):
                put(pack_key(ledger_id, entry_id), pack_value(location))
                self.count += 1
        else:
            if self.scoped is None:
                self.scoped = [WriteBatch(raw_mode=True)]
            chunks = self.scoped
            wb = chunks[-1]
            put = wb.put
            pack_key = _LOC_KEY128.pack
            for entry_id, location in zip(entry_ids, locations, strict=True):
                put(pack_key(scope_id, ledger_id, entry_id), pack_value(location))
                self.count += 1
        if self.count > before and wb.len() >= LOCATION_CHUNK:
            chunks.append(WriteBatch(raw_mode=True))

    def add_slice(self, piece: FlushSlice, log_id: int, offset: int) -> None:
        """add() for every entry of a scope-0 flush slice written at `offset` of entry log `log_id`, its keys
        and values made in C (FlushSlice.put_locations)."""
        wb = self.plain[-1]
        piece.put_locations(wb.put, log_id, offset)
        self.count += piece.count
        if wb.len() >= LOCATION_CHUNK:
            self.plain.append(WriteBatch(raw_mode=True))

    def add_runs(self, runs: list[tuple[int, int, list[int]]], locations: list[int]) -> None:
        """add() for several ledgers: runs = [(scope_id, ledger_id, entry_ids)], locations flat in order.
        Scope-0 runs of one entry (a flush of many small ledgers) take a short path."""
        pack_key = _LOC_KEY.pack
        pack_value = _LONG.pack
        pos = 0
        plain = self.plain
        wb = plain[-1]
        put = wb.put
        for scope_id, ledger_id, entry_ids in runs:
            n = len(entry_ids)
            if n == 1 and not scope_id:
                put(pack_key(ledger_id, entry_ids[0]), pack_value(locations[pos]))
                self.count += 1
                if wb.len() >= LOCATION_CHUNK:
                    wb = WriteBatch(raw_mode=True)
                    plain.append(wb)
                    put = wb.put
            else:
                self.add(scope_id, ledger_id, entry_ids, locations[pos:pos + n])
                wb = plain[-1]
                put = wb.put
            pos += n


def _write_chunks(store: RocksStore, chunks: list[WriteBatch]) -> None:
    """Write the non-empty chunks in order, the last one synced; hand the GIL over between them."""
    chunks = [wb for wb in chunks if wb.len()]
    for i, wb in enumerate(chunks):
        last = i == len(chunks) - 1
        store.write(wb, sync=last)
        if not last:
            time.sleep(0)


class ScopedStorePair:
    """A Java-compatible store for scope 0 (`_plain`) and bkfast's store for scoped ids (`_scoped`,
    opened on first use so a scope-0-only bookie keeps a directory identical to Java's)."""

    _plain: RocksStore
    _scoped: RocksStore | None

    def sync(self) -> None:
        self._plain.sync()
        if self._scoped is not None:
            self._scoped.sync()

    def record_checkpoint(self) -> None:
        """RocksStore.record_checkpoint of each open store."""
        self._plain.record_checkpoint()
        if self._scoped is not None:
            self._scoped.record_checkpoint()

    def close(self) -> None:
        self._plain.close()
        if self._scoped is not None:
            self._scoped.close()
            self._scoped = None

    @property
    def read_only(self) -> bool:
        """Some store was opened read-only on a full disk (see RocksStore)."""
        return self._plain.read_only or (self._scoped is not None and self._scoped.read_only)

    def reopen_writable(self) -> None:
        self._plain.reopen_writable()
        if self._scoped is not None:
            self._scoped.reopen_writable()


class LocationIndex(ScopedStorePair):
    """Entry locations of one index directory: `locations` and, once needed, `locations128`."""

    def __init__(self, current_dir: Path, block_cache_bytes: int):
        self._dir = Path(current_dir)
        self._cache_bytes = block_cache_bytes
        self._plain = RocksStore(self._dir / LOCATIONS, block_cache_bytes=block_cache_bytes)
        self._scoped: RocksStore | None = None
        self._scoped_lock = threading.Lock()
        self.lookup_stats = OpStats(False)   # the directory's lookup_entry_location, once it has stats
        if (self._dir / LOCATIONS128).is_dir():
            self._scoped = RocksStore(self._dir / LOCATIONS128, block_cache_bytes=block_cache_bytes // 4)

    def _store(self, scope_id: int, create: bool = False) -> RocksStore | None:
        if not scope_id:
            return self._plain
        if self._scoped is None and create:
            with self._scoped_lock:
                if self._scoped is None:
                    self._scoped = RocksStore(self._dir / LOCATIONS128, block_cache_bytes=self._cache_bytes // 4)
        return self._scoped

    def get(self, scope_id: int, ledger_id: int, entry_id: int) -> int | None:
        """The entry's location; None when it is not indexed (Java's lookup_entry_location: a failure)."""
        t0 = now_ns()
        if not scope_id:
            value = self._plain.get(_LOC_KEY.pack(ledger_id, entry_id))
        else:
            store = self._scoped
            value = None if store is None else store.get(_LOC_KEY128.pack(scope_id, ledger_id, entry_id))
        if value is None:
            self.lookup_stats.fail_since(t0)
            return None
        self.lookup_stats.ok_since(t0)
        return _LONG.unpack(value)[0]

    def estimated_count(self) -> int:
        """RocksDB's estimate of the indexed entries (Java's entries_count gauge)."""
        scoped = self._scoped
        return self._plain.estimated_keys() + (scoped.estimated_keys() if scoped is not None else 0)

    def commit(self, batch: LocationBatch) -> None:
        """Write a flush's locations (synced, as Java's batch.flush does), chunk by chunk (see LocationBatch)."""
        _write_chunks(self._plain, batch.plain)
        if batch.scoped is not None:
            chunks = [wb for wb in batch.scoped if wb.len()]
            store = self._store(1, create=True)
            if chunks and store is not None:          # create=True: there is one
                _write_chunks(store, chunks)

    def last_entry(self, scope_id: int, ledger_id: int) -> tuple[int, int] | None:
        """(entry_id, location) of the ledger's highest indexed entry: floor of (ledger, Long.MAX)."""
        store = self._store(scope_id)
        if store is None:
            return None
        prefix = ledger_prefix(scope_id, ledger_id)
        found = store.floor(prefix + _LONG.pack(_MAX_LONG), prefix)
        if found is None:
            return None
        key, value = found
        return _LONG.unpack_from(key, len(prefix))[0], _LONG.unpack(value)[0]

    def entries(self, scope_id: int, ledger_id: int) -> list[int]:
        """Indexed entry ids of a ledger, ascending (negative ids, which no entry has, sort last)."""
        store = self._store(scope_id)
        if store is None:
            return []
        prefix = ledger_prefix(scope_id, ledger_id)
        n = len(prefix)
        ids = [_LONG.unpack_from(k, n)[0] for k, _ in store.range(prefix, _next_prefix(prefix))]
        return sorted(ids)

    def delete_ledger(self, scope_id: int, ledger_id: int) -> None:
        store = self._store(scope_id)
        if store is None:
            return
        prefix = ledger_prefix(scope_id, ledger_id)
        store.delete_range(prefix, _next_prefix(prefix))
