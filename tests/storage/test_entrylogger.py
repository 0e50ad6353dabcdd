"""Entry logs (spec/bookkeeper-formats.md §4.4) checked against an independent reader written from the spec.

`SpecLog` below knows nothing of bkfast: it parses a log file with `struct` exactly as the spec text
describes it (1024-byte "BKLO" header, `int size | entry` records from offset 1024, ledgers-map batches
`int (batchBytes-4) | long -1 | long -2 | int count | count x (long ledgerId, long bytes)`), and the tests
compare what EntryLogger wrote with it byte for byte. Java-written logs come from
tests/vectors/java_bookie_dirs (a stopped Apache BookKeeper 4.16.7 bookie).
"""

from __future__ import annotations

import hashlib
import json
import struct
import tarfile
from pathlib import Path

import pytest

from bkfast.codec import encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKIllegalOpException, StorageCorruptionError
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from tests import VECTORS_DIR

VECTORS = VECTORS_DIR / "java_bookie_dirs"
CRC32C = 3


# --- the independent reader -------------------------------------------------------------------------
class SpecLog:
    """An entry log file parsed with struct from the spec text alone."""

    def __init__(self, path: Path):
        self.raw = path.read_bytes()
        raw = self.raw
        assert len(raw) >= 1024, "a log starts with a 1024-byte header"
        self.magic = raw[0:4]
        (self.version,) = struct.unpack_from(">i", raw, 4)
        (self.map_offset,) = struct.unpack_from(">q", raw, 8)
        (self.ledgers_count,) = struct.unpack_from(">i", raw, 16)
        self.header_rest = raw[20:1024]
        # Entries: from 1024 to the map (or the end of the file when there is no map).
        self.records = []  # (offset of the entry bytes, entry bytes)
        end = self.map_offset if self.map_offset else len(raw)
        pos = 1024
        while pos + 4 <= end:
            (size,) = struct.unpack_from(">i", raw, pos)
            if size <= 0:
                pos += 1
                continue
            (ledger_id,) = struct.unpack_from(">q", raw, pos + 4)
            if ledger_id != -1:
                self.records.append((pos + 4, raw[pos + 4:pos + 4 + size]))
            pos += 4 + size
        self.entries_end = pos
        # The ledgers map: batches from map_offset to the end of the file.
        self.batches = []  # list of [(ledgerId, bytes)]
        pos = self.map_offset
        while self.map_offset and pos < len(raw):
            (size,) = struct.unpack_from(">i", raw, pos)
            lid, eid, count = struct.unpack_from(">qqi", raw, pos + 4)
            assert (lid, eid) == (-1, -2)
            assert size == 24 + 16 * count - 4
            items = [struct.unpack_from(">qq", raw, pos + 24 + 16 * i) for i in range(count)]
            self.batches.append(items)
            pos += 4 + size
        self.map_end = pos


def spec_header(map_offset=0, count=0) -> bytes:
    return b"BKLO" + struct.pack(">iqi", 1, map_offset, count) + bytes(1004)


def conf(direct: bool = False, **overrides) -> EntryLoggerSettings:
    return EntryLoggerSettings.from_conf(ServerConfiguration({"entryLogDirectWrites": direct, **overrides}))


@pytest.fixture(params=[False, True], ids=["buffered", "direct"])
def direct(request):
    """Writing tests run with buffered and with O_DIRECT entry log writes (tmp_path's file system takes
    O_DIRECT: `assert_mode` checks the logger did not fall back)."""
    return request.param


def assert_mode(el: EntryLogger, direct: bool) -> None:
    """The log being written goes through an O_DIRECT fd exactly when asked to."""
    channel = el._current.channel
    assert channel.direct is direct and (channel.direct_fd >= 0) is direct


def entry(ledger_id: int, entry_id: int, payload_len: int = 10, scope_id: int = 0) -> bytes:
    payload = hashlib.sha256(f"{scope_id}:{ledger_id}:{entry_id}".encode()).digest() * (payload_len // 32 + 1)
    return encode_entry(ledger_id, entry_id, entry_id - 1, payload_len, payload[:payload_len], CRC32C,
                        scope_id=scope_id)


# --- layout -----------------------------------------------------------------------------------------
def test_log_file_layout_matches_the_spec_byte_for_byte(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    written = []
    for ledger_id in (5, 1, 3):
        for entry_id in range(4):
            data = entry(ledger_id, entry_id, 7 * entry_id + 1)
            written.append((ledger_id, el.add_entry(ledger_id, data), data))
    assert_mode(el, direct)
    el.close()

    path = tmp_path / "current" / "0.log"
    spec = SpecLog(path)
    assert spec.magic == b"BKLO" and spec.version == 1
    assert spec.header_rest == bytes(1004)
    # Every entry is `int size | entry`, back to back from 1024; location = (logId << 32) | offset.
    assert [(0 << 32) | off for off, _ in spec.records] == [loc for _, loc, _ in written]
    assert [data for _, data in spec.records] == [data for _, _, data in written]
    assert spec.records[0][0] == 1024 + 4
    # The map is right after the last entry; the header points at it and counts the ledgers.
    assert spec.map_offset == spec.entries_end == 1024 + sum(4 + len(d) for _, _, d in written)
    assert spec.ledgers_count == 3
    expected = {}
    for ledger_id, _, data in written:
        expected[ledger_id] = expected.get(ledger_id, 0) + len(data) + 4
    assert len(spec.batches) == 1
    assert dict(spec.batches[0]) == expected
    assert spec.map_end == len(spec.raw)
    assert (tmp_path / "current" / "lastId").read_bytes() == b"0\n"


def test_ledgers_map_is_written_in_batches_of_at_most_10000_ledgers(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    for ledger_id in range(25_001):
        el.add_entry(ledger_id, entry(ledger_id, 0, 1))
    el.close()
    spec = SpecLog(tmp_path / "current" / "0.log")
    assert [len(b) for b in spec.batches] == [10_000, 10_000, 5_001]
    assert spec.ledgers_count == 25_001
    sizes = dict(item for batch in spec.batches for item in batch)
    assert sizes == {lid: len(entry(lid, 0, 1)) + 4 for lid in range(25_001)}
    # Read back through the logger: the map, not a scan, gives the same answer.
    el2 = EntryLogger([tmp_path], conf(direct))
    assert el2.ledgers_map(0) == sizes
    el2.close()


def test_reads_come_from_the_write_buffer_until_flushed_then_from_disk(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct, writeBufferSizeBytes=65536))
    small = entry(1, 0, 100)
    loc = el.add_entry(1, small)
    assert_mode(el, direct)
    path = tmp_path / "current" / "0.log"
    # Header and entry are still in memory: the file is empty (direct: only the header block its O_DIRECT
    # probe wrote), the read is served from the buffer.
    assert path.read_bytes() == (spec_header() + bytes(4096 - 1024) if direct else b"")
    assert el.read_entry(1, 0, loc) == small
    # An entry bigger than the whole buffer goes to the file at once (after what was buffered); direct
    # mode writes it through the buffer, in whole 4 KiB blocks, as the buffer fills.
    big = entry(1, 1, 100_000)
    loc_big = el.add_entry(1, big)
    end = 1024 + 4 + len(small) + 4 + len(big)
    assert path.stat().st_size == (65536 * (end // 65536) if direct else end)
    assert el.read_entry(1, 1, loc_big) == big
    third = entry(1, 2, 50)
    loc3 = el.add_entry(1, third)
    assert el.read_entry(1, 2, loc3) == third
    el.flush()
    raw = path.read_bytes()
    pos = loc3 & 0xFFFFFFFF
    assert raw[pos - 4:pos + len(third)] == struct.pack(">i", len(third)) + third
    # A second logger (another process in real life) reads the flushed entries from disk.
    other = EntryLogger([tmp_path], conf(direct))
    assert other.read_entry(1, 0, loc) == small and other.read_entry(1, 2, loc3) == third
    other.close()
    el.close()


def test_log_rolls_when_the_next_entry_would_exceed_log_size_limit(tmp_path, direct):
    limit = 20_000
    el = EntryLogger([tmp_path], conf(direct, logSizeLimit=limit, writeBufferSizeBytes=4096))
    locs = []
    for i in range(60):
        data = entry(7, i, 900)
        locs.append((el.add_entry(7, data), data))
    assert_mode(el, direct)
    el.close()
    ids = el.log_ids()
    assert len(ids) >= 3 and ids == list(range(len(ids)))
    for log_id in ids:
        spec = SpecLog(tmp_path / "current" / f"{log_id:x}.log")
        assert spec.entries_end <= limit              # entries stay under the limit; the map follows them
        assert spec.map_offset == spec.entries_end and spec.ledgers_count == 1
        assert spec.map_end == len(spec.raw)          # a finished log ends with its map (no zero tail)
        in_log = [(loc, d) for loc, d in locs if loc >> 32 == log_id]
        assert [d for _, d in spec.records] == [d for _, d in in_log]
        assert dict(spec.batches[0]) == {7: sum(len(d) + 4 for _, d in in_log)}
        if log_id != ids[-1]:
            # It rolled only because the next entry would not fit.
            assert spec.entries_end + 4 + len(entry(7, 0, 900)) > limit
    assert (tmp_path / "current" / "lastId").read_text() == f"{ids[-1]:x}\n"


def test_reopen_continues_with_a_new_log_id_and_reads_every_older_log(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    first = {(1, i): el.add_entry(1, entry(1, i)) for i in range(5)}
    el.close()
    # Second run: "crashes" after a flush, so log 1 is never finalized (header offset 0, no map).
    el = EntryLogger([tmp_path], conf(direct))
    second = {(2, i): el.add_entry(2, entry(2, i)) for i in range(5)}
    assert_mode(el, direct)
    el.flush()
    assert {loc >> 32 for loc in second.values()} == {1}
    assert SpecLog(tmp_path / "current" / "1.log").map_offset == 0
    # Third run: a new id again; every older entry is readable.
    el3 = EntryLogger([tmp_path], conf(direct))
    third = el3.add_entry(3, entry(3, 0))
    assert third >> 32 == 2
    for (lid, eid), loc in {**first, **second}.items():
        assert el3.read_entry(lid, eid, loc) == entry(lid, eid)
    assert el3.ledgers_map(0) == {1: 5 * (len(entry(1, 0)) + 4)}        # from the map
    assert el3.ledgers_map(1) == {2: 5 * (len(entry(2, 0)) + 4)}        # by scanning: no map
    assert el3.log_ids() == [0, 1, 2]
    el3.close()
    assert (tmp_path / "current" / "lastId").read_text() == "2\n"


def test_log_without_map_is_scanned_past_padding_and_stops_at_a_torn_tail(tmp_path, direct):
    current = tmp_path / "current"
    current.mkdir()
    entries = [entry(4, 0, 3), entry(9, 0, 40), entry(4, 1, 5), entry(123, 0, 1, scope_id=77)]
    body = bytearray(spec_header())
    locations = []
    for i, data in enumerate(entries):
        body += struct.pack(">i", len(data))
        locations.append((0xA << 32) | len(body))
        body += data
        if i == 1:
            body += bytes(13)                                            # zero padding between records
    body += struct.pack(">i", 500) + entry(4, 2, 3)[:30]                 # a record cut short by a crash
    (current / "a.log").write_bytes(bytes(body))
    (current / "lastId").write_text("a\n")

    el = EntryLogger([tmp_path], conf(direct))
    scanned = list(el.scan(0xA))
    assert [(lid, eid, loc) for lid, eid, loc, _ in scanned] == [
        (4, 0, locations[0]), (9, 0, locations[1]), (4, 1, locations[2]), (123, 0, locations[3])]
    assert [d for *_, d in scanned] == entries
    records = list(el.scan_records(0xA, with_data=False))
    assert [r.scope_id for r in records] == [0, 0, 0, 77]
    assert el.ledgers_map(0xA) == {4: len(entries[0]) + len(entries[2]) + 8, 9: len(entries[1]) + 4}
    assert el.scoped_ledgers_map(0xA) == {(77, 123): len(entries[3]) + 4}
    assert el.read_entry(123, 0, locations[3], scope_id=77) == entries[3]
    # New entries go to log b, never into the old file.
    assert el.add_entry(5, entry(5, 0)) >> 32 == 0xB
    el.close()


def test_read_entry_rejects_wrong_ids_bad_sizes_and_locations_past_the_end(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    loc0 = el.add_entry(1, entry(1, 0))
    loc1 = el.add_entry(1, entry(1, 1))
    el.flush()
    with pytest.raises(StorageCorruptionError, match="expected entry 0 of ledger 1"):
        el.read_entry(1, 0, loc1)
    with pytest.raises(StorageCorruptionError, match="expected entry 1 of ledger 2"):
        el.read_entry(2, 1, loc1)
    with pytest.raises(StorageCorruptionError, match="past the end"):
        el.read_entry(1, 0, loc1 + 100_000)
    with pytest.raises(StorageCorruptionError, match="scope"):
        el.read_entry(1, 0, loc0, scope_id=5)
    with pytest.raises(StorageCorruptionError, match="missing"):
        el.read_entry(1, 0, (99 << 32) | 1028)
    with pytest.raises(BKIllegalOpException):
        el.add_entry(1, b"too short")
    el.close()
    # A damaged size field (< 16) is reported, not read.
    path = tmp_path / "current" / "0.log"
    raw = bytearray(path.read_bytes())
    pos = loc0 & 0xFFFFFFFF
    raw[pos - 4:pos] = struct.pack(">i", 8)
    path.write_bytes(bytes(raw))
    el = EntryLogger([tmp_path], conf(direct))
    with pytest.raises(StorageCorruptionError, match="invalid entry size 8"):
        el.read_entry(1, 0, loc0)
    assert el.read_entry(1, 1, loc1) == entry(1, 1)
    el.close()


def test_scoped_entries_are_stored_verbatim_and_left_out_of_the_java_map(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    scoped = entry(3, 0, 20, scope_id=2**64 - 1)
    loc_s = el.add_entry(3, scoped)
    plain = entry(3, 0, 20)
    loc_p = el.add_entry(3, plain)
    assert el.read_entry(3, 0, loc_s, scope_id=2**64 - 1) == scoped
    assert el.read_entry(3, 0, loc_p, scope_id=0) == plain
    el.close()
    spec = SpecLog(tmp_path / "current" / "0.log")
    assert [d for _, d in spec.records] == [scoped, plain]
    assert spec.batches == [[(3, len(plain) + 4)]] and spec.ledgers_count == 1
    el = EntryLogger([tmp_path], conf(direct))
    assert el.scoped_ledgers_map(0) == {(2**64 - 1, 3): len(scoped) + 4}
    el.close()


def test_log_ids_wrap_to_zero_after_integer_max_and_skip_existing_files(tmp_path, direct):
    current = tmp_path / "current"
    current.mkdir()
    (current / "lastId").write_text("7fffffff\n")
    (current / "0.log").write_bytes(spec_header())
    el = EntryLogger([tmp_path], conf(direct))
    assert el.add_entry(1, entry(1, 0)) >> 32 == 1
    el.close()
    assert (current / "lastId").read_text() == "1\n"


def test_read_run_returns_the_entries_of_one_ledger_stored_back_to_back(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct, writeBufferSizeBytes=8192))
    locs = [el.add_entry(6, entry(6, i, 300)) for i in range(50)]
    assert_mode(el, direct)
    el.add_entry(8, entry(8, 0))
    run = el.read_run(0, 6, locs[10], 100, 1 << 20)
    assert [eid for eid, _, _ in run] == list(range(10, 50))            # stops at ledger 8
    assert [loc for _, loc, _ in run] == locs[10:]
    assert all(data == entry(6, eid, 300) for eid, _, data in run)
    assert [eid for eid, _, _ in el.read_run(0, 6, locs[0], 5, 1 << 20)] == [0, 1, 2, 3, 4]
    el.close()


def test_remove_log_deletes_a_finished_log_but_not_the_current_one(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct))
    loc = el.add_entry(1, entry(1, 0))
    el.roll()
    loc2 = el.add_entry(1, entry(1, 1))
    with pytest.raises(BKIllegalOpException):
        el.remove_log(loc2 >> 32)
    el.flush()
    assert el.remove_log(loc >> 32) is True
    assert el.log_ids() == [loc2 >> 32]
    with pytest.raises(StorageCorruptionError):
        el.read_entry(1, 0, loc)
    el.close()


def test_logs_spread_over_several_ledger_dirs_and_last_id_is_in_each(tmp_path, direct):
    dirs = [tmp_path / "a", tmp_path / "b"]
    el = EntryLogger(dirs, conf(direct))
    locs = []
    for i in range(4):
        locs.append(el.add_entry(1, entry(1, i)))
        el.roll()
    el.close()
    assert sorted(p.name for p in (dirs[0] / "current").glob("*.log")) == ["0.log", "2.log"]
    assert sorted(p.name for p in (dirs[1] / "current").glob("*.log")) == ["1.log", "3.log"]
    for d in dirs:
        assert (d / "current" / "lastId").read_text() == "3\n"
    el = EntryLogger(dirs, conf(direct))
    assert [el.read_entry(1, i, loc) for i, loc in enumerate(locs)] == [entry(1, i) for i in range(4)]
    el.close()


# --- a Java bookie's entry log ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def java_db_clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("java")
    with tarfile.open(VECTORS / "db_clean.tar.gz") as tar:
        tar.extractall(root, filter="data")
    manifest = json.loads((VECTORS / "db_clean.manifest.json").read_text())
    return root / "db_clean", manifest


def test_java_entry_log_scan_matches_every_entry_of_the_manifest(java_db_clean, tmp_path):
    root, manifest = java_db_clean
    expected = {(lg["ledgerId"], e["entryId"]): e for lg in manifest["ledgers"] for e in lg["entries"]}
    assert len(expected) == 2000

    # The independent reader agrees on the file first: a finalized-nowhere log (Java leaves the active
    # log without a map on shutdown), entries from offset 1024.
    spec = SpecLog(root / "ledgers" / "current" / "0.log")
    assert spec.magic == b"BKLO" and spec.version == 1 and spec.map_offset == 0
    assert len(spec.records) == 2000

    el = EntryLogger([root / "ledgers"], conf())
    assert el.log_ids() == [0, 1]                                   # 1.log: Java's preallocated, empty
    seen = {}
    for ledger_id, entry_id, location, data in el.scan(0):
        e = expected[(ledger_id, entry_id)]
        assert len(data) == e["storedLength"]
        assert hashlib.sha256(data).hexdigest() == e["storedSha256"]
        assert struct.unpack_from(">qq", data, 16) == (e["lastAddConfirmed"], e["length"])
        seen[(ledger_id, entry_id)] = location
    assert seen.keys() == expected.keys()
    assert [(0 << 32) | off for off, _ in spec.records] == list(seen.values())
    # Reads by location give the same bytes; the map (by scanning) sums storedLength + 4 per ledger.
    for (ledger_id, entry_id), location in list(seen.items())[::97]:
        data = el.read_entry(ledger_id, entry_id, location)
        assert hashlib.sha256(data).hexdigest() == expected[(ledger_id, entry_id)]["storedSha256"]
    sizes = {lg["ledgerId"]: sum(e["storedLength"] + 4 for e in lg["entries"]) for lg in manifest["ledgers"]}
    assert el.ledgers_map(0) == sizes
    assert el.ledgers_map(1) == {}
    el.close()
    # Opening and reading changed nothing on disk.
    assert (root / "ledgers" / "current" / "lastId").read_bytes() == b"1\n"
    assert (root / "ledgers" / "current" / "0.log").stat().st_size == 12029903


# --- writeback and flushEntrylogBytes -------------------------------------------------------------------
def test_channel_with_writeback_keeps_every_byte_and_only_sync_makes_them_durable(tmp_path):
    import os

    from bkfast._entrylog import BufferedChannel

    fd = os.open(tmp_path / "x.log", os.O_RDWR | os.O_CREAT, 0o644)
    channel = BufferedChannel(fd, 1, 0, 4096, 16384)
    entries = [bytes([i % 251]) * (100 + 37 * i) for i in range(200)] + [b"\x07" * 50_000]  # one unbuffered
    locations = [channel.add_entry(e) for e in entries]
    assert channel.writeback_bytes == 16384 and channel.synced_position == 0
    channel.sync()
    assert channel.synced_position == channel.position
    for e, loc in zip(entries, locations, strict=True):
        assert channel.read_entry(loc & 0xFFFFFFFF) == e
    raw = (tmp_path / "x.log").read_bytes()
    assert len(raw) == channel.position
    channel.close()


def test_flush_entrylog_bytes_syncs_the_current_log_while_writing(tmp_path, direct):
    logger = EntryLogger([tmp_path], conf(direct, flushEntrylogBytes=20000))
    data = [encode_entry(5, i, i - 1, 0, b"z" * 1000, CRC32C) for i in range(60)]
    logger.add_entries(5, data[:10])
    assert_mode(logger, direct)
    channel = logger._current.channel
    assert channel.synced_position == 0                           # ~10 KB written: below the threshold
    logger.add_entries(5, data[10:30])
    assert channel.synced_position >= 20000                       # synced without a flush() call
    for i in range(30, 60):
        logger.add_entry(5, data[i])
    assert channel.position - channel.synced_position < 20000
    logger.close()


def test_flush_entrylog_bytes_zero_syncs_only_on_flush(tmp_path, direct):
    logger = EntryLogger([tmp_path], conf(direct))
    logger.add_entries(5, [encode_entry(5, i, i - 1, 0, b"z" * 1000, CRC32C) for i in range(100)])
    channel = logger._current.channel
    assert channel.synced_position == 0
    logger.flush()
    assert channel.synced_position == channel.position
    logger.close()
