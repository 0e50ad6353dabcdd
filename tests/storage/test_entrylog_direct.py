"""O_DIRECT entry log writes (`entryLogDirectWrites`): same file bytes as buffered writes, whole aligned
blocks on the way (a partial last block kept and rewritten), reads through a buffered fd while writing,
and the zero tail a crash can leave read as the end of the log. Real files on tmp_path (ext4 here: it
takes O_DIRECT) and on /dev/shm (tmpfs: refuses O_DIRECT on older kernels, which is the fallback).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from bkfast._entrylog import DIRECT_BLOCK, BufferedChannel
from bkfast.codec import encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from tests import REPO

CRC32C = 3
BLOCK = DIRECT_BLOCK
REPO = REPO


def conf(direct: bool, **overrides) -> EntryLoggerSettings:
    return EntryLoggerSettings.from_conf(ServerConfiguration({"entryLogDirectWrites": direct, **overrides}))


def entry(ledger_id: int, entry_id: int, payload_len: int) -> bytes:
    seed = hashlib.sha256(f"{ledger_id}:{entry_id}".encode()).digest()
    payload = (seed * (payload_len // 32 + 1))[:payload_len]
    return encode_entry(ledger_id, entry_id, entry_id - 1, payload_len, payload, CRC32C)


def ids(data: bytes) -> tuple[int, int]:
    return struct.unpack_from(">qq", data)


def log_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "current").glob("*.log"))}


def workload(el: EntryLogger) -> list[tuple[int, bytes]]:
    """Adds of many sizes (some larger than the 10,000-byte buffer), flushes at unaligned positions, a
    roll forced by logSizeLimit and one by roll()."""
    rng = random.Random(7)
    written = []
    for i in range(400):
        ledger_id = 1 + i % 5
        data = entry(ledger_id, i, rng.choice([20, 300, 4000, 9000, 25_000, rng.randrange(17, 3000)]))
        written.append((el.add_entry(ledger_id, data), data))
        if i % 13 == 0:
            el.flush()
        if i == 250:
            el.roll()
    batch = [entry(9, j, 700 + j) for j in range(40)]
    written.extend(zip(el.add_entries(9, batch), batch, strict=True))
    return written


def test_direct_writes_leave_the_same_files_as_buffered_writes(tmp_path):
    roots = {}
    for direct in (False, True):
        root = tmp_path / ("direct" if direct else "buffered")
        el = EntryLogger([root], conf(direct, logSizeLimit=600_000, writeBufferSizeBytes=10_000))
        written = workload(el)
        assert el._current.channel.direct is direct
        for location, data in written:
            assert el.read_entry(*ids(data), location) == data
        el.close()
        roots[direct] = root
    buffered, direct = log_files(roots[False]), log_files(roots[True])
    assert len(buffered) >= 3
    assert direct.keys() == buffered.keys()
    for name in buffered:
        assert direct[name] == buffered[name], name


def test_direct_logs_buffer_4_mib_unless_write_buffer_size_is_configured(tmp_path):
    data = [entry(1, i, 16_000) for i in range(200)]                  # 3.2 MB
    sizes = {}
    for name, overrides in (("default", {}), ("configured", {"writeBufferSizeBytes": 65536})):
        el = EntryLogger([tmp_path / name], conf(True, **overrides))
        el.add_entries(1, data)
        sizes[name] = (tmp_path / name / "current" / "0.log").stat().st_size
        el.close()
    assert sizes["default"] == BLOCK                    # all still buffered: only the header block probe
    assert sizes["configured"] == 65536 * ((1024 + sum(len(d) + 4 for d in data)) // 65536)


def open_direct_channel(path: Path, buffer_size: int) -> BufferedChannel:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    direct_fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    return BufferedChannel(fd, 1, 0, buffer_size, 0, direct_fd)


def test_a_forced_flush_writes_whole_blocks_and_keeps_the_partial_one_to_rewrite(tmp_path):
    path = tmp_path / "x.log"
    channel = open_direct_channel(path, 10_000)          # rounded up to 12,288: three blocks
    assert channel.direct and channel.writeback_bytes == 0
    expected = bytearray()
    channel.write(b"H" * 1024)
    expected += b"H" * 1024
    first = (bytes(range(256)) * 12)[:3000]              # the log ends 68 bytes short of a block
    at = channel.add_entry(first) & 0xFFFFFFFF
    expected += struct.pack(">i", len(first)) + first
    channel.sync()
    # The file holds the log and zeros up to the block; the block is still buffered (to be rewritten).
    raw = path.read_bytes()
    assert len(raw) == BLOCK and raw == bytes(expected) + bytes(BLOCK - len(expected))
    assert channel.position == len(expected) == channel.synced_position and not channel.unsynced
    assert channel.read_entry(at) == first
    # An entry across the kept block's end and the next block: served from the buffer, then the file.
    straddling = bytes([7]) * 2000
    at2 = channel.add_entry(straddling) & 0xFFFFFFFF
    expected += struct.pack(">i", len(straddling)) + straddling
    assert at2 < BLOCK < at2 + len(straddling)
    assert channel.read_entry(at2) == straddling and channel.unsynced
    channel.flush()
    raw = path.read_bytes()
    assert len(raw) == 2 * BLOCK and raw[:len(expected)] == bytes(expected) and not any(raw[len(expected):])
    assert channel.read_entry(at) == first and channel.read_entry(at2) == straddling
    # An entry bigger than the buffer goes through it in pieces: whole blocks again, the same bytes.
    big = hashlib.sha256(b"big").digest() * 1500           # 48,000 bytes
    at3 = channel.add_entry(big) & 0xFFFFFFFF
    expected += struct.pack(">i", len(big)) + big
    assert channel.read_entry(at3) == big
    assert os.path.getsize(path) % BLOCK == 0
    # write_at into the kept block and into a block already in the file.
    channel.write_at(b"PATCH", 8)
    channel.write_at(b"PAT", len(expected) - 3)            # in the kept block (flushed, still buffered)
    expected[8:13] = b"PATCH"
    expected[len(expected) - 3:] = b"PAT"
    assert channel.read(len(expected) - 3, 3) == b"PAT" and channel.read(8, 5) == b"PATCH"
    with pytest.raises(ValueError):
        channel.write_at(b"PATCH2", len(expected) - 3)     # past the end of the log
    channel.sync()
    channel.finish()
    assert path.read_bytes() == bytes(expected)            # cut to the log's size
    assert not channel.writable and channel.read(8, 5) == b"PATCH"
    with pytest.raises(ValueError):
        channel.add_entry(first)
    channel.sync()
    channel.close()


class ReadersOnOtherThreads:
    """Two threads reading random entries of `written` (each appended after its add returned) until the
    block ends and at least `min_reads` reads were made; a failed read ends the block with its error."""

    def __init__(self, el: EntryLogger, min_reads: int):
        self.el, self.min_reads = el, min_reads
        self.written: list[tuple[int, bytes]] = []
        self.done = threading.Event()
        self.failures: list[BaseException] = []
        self.reads = 0
        self.threads = [threading.Thread(target=self._read, args=(seed,)) for seed in range(2)]

    def _read(self, seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not self.done.is_set() or self.reads < self.min_reads:
                if not self.written:
                    continue
                location, data = self.written[rng.randrange(len(self.written))]
                assert self.el.read_entry(*ids(data), location) == data
                self.reads += 1
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.failures.append(e)
            self.done.set()

    def __enter__(self) -> ReadersOnOtherThreads:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for t in self.threads:
            t.join()
        if exc[0] is None:
            assert not self.failures, self.failures[0]
            for location, data in self.written:
                assert self.el.read_entry(*ids(data), location) == data


def test_reads_from_other_threads_while_writing_directly(tmp_path):
    el = EntryLogger([tmp_path], conf(True, writeBufferSizeBytes=8192, logSizeLimit=2_000_000))
    rng = random.Random(3)
    with ReadersOnOtherThreads(el, 2000) as readers:
        for i in range(1500):
            if readers.done.is_set():
                break
            data = entry(1 + i % 4, i, rng.choice([30, 1000, 3000, 6000, 20_000]))
            readers.written.append((el.add_entry(1 + i % 4, data), data))
            if i % 7 == 0:
                el.flush()                     # unaligned: a kept block that later entries straddle
            if i % 50 == 0:
                assert sum(1 for _ in el.scan_records(el.current_log_id, with_data=False)) > 0
    assert el.log_ids()[-1] > 0                # it rolled while being read
    el.close()


def test_a_zero_tail_after_the_last_record_scans_cleanly(tmp_path, caplog):
    src = tmp_path / "src"
    el = EntryLogger([src], conf(True, writeBufferSizeBytes=65536))
    written = [(el.add_entry(2, e), e) for e in (entry(2, i, 777 + 31 * i) for i in range(30))]
    el.flush()                                 # direct: the file ends in zeros up to the block
    logical = el._current.channel.position
    crashed = tmp_path / "crashed"
    shutil.copytree(src, crashed)              # the file as a crash leaves it (no finish, no map)
    el.close()
    path = crashed / "current" / "0.log"
    size = path.stat().st_size
    assert size % BLOCK == 0 and size > logical and not any(path.read_bytes()[logical:])

    caplog.set_level(logging.DEBUG, logger="bkfast.storage.entrylogger")
    el = EntryLogger([crashed], conf(True))
    scanned = list(el.scan_records(0))
    assert [(r.location, r.data) for r in scanned] == written
    assert el.ledgers_map(0) == {2: sum(len(e) + 4 for _, e in written)}
    assert "torn" not in caplog.text
    el.close()

    # A finished log with zeros after its ledgers map (a crash between the map and the cut): the map is
    # read from the header's offset up to the zeros, and a scan still ends at the last entry.
    finished = src / "current" / "0.log"
    os.truncate(finished, finished.stat().st_size + 3000)
    caplog.clear()
    el = EntryLogger([src], conf(True))
    assert el._ledgers_map_from_index(0) == {2: sum(len(e) + 4 for _, e in written)}
    assert [(r.location, r.data) for r in el.scan_records(0)] == written
    assert "torn" not in caplog.text
    el.close()


CHILD = """
import sys, time
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from bkfast.codec import encode_entry
from bkfast.conf import ServerConfiguration
el = EntryLogger([sys.argv[1]], EntryLoggerSettings.from_conf(ServerConfiguration({"entryLogDirectWrites": True})))
locations = [el.add_entry(3, encode_entry(3, i, i - 1, 0, bytes([i]) * (100 + 57 * i), 3)) for i in range(40)]
el.flush()
assert el._current.channel.direct
print(",".join(map(str, locations)), el._current.channel.position, flush=True)
time.sleep(60)
"""


def test_entries_flushed_before_a_sigkill_are_all_read_back(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, cwd=REPO)
    try:
        line = child.stdout.readline().split()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert line, "the child did not report its flushed entries"
    locations, logical = [int(x) for x in line[0].split(",")], int(line[1])
    assert (tmp_path / "current" / "0.log").stat().st_size == -(-logical // BLOCK) * BLOCK
    el = EntryLogger([tmp_path], conf(True))
    expected = [encode_entry(3, i, i - 1, 0, bytes([i]) * (100 + 57 * i), CRC32C) for i in range(40)]
    assert [r.data for r in el.scan_records(0)] == expected
    assert [el.read_entry(3, i, loc) for i, loc in enumerate(locations)] == expected
    assert el.add_entry(3, entry(3, 40, 10)) >> 32 == 1           # new writes go to a new log
    el.close()


FAILING_CHILD = """
import errno, resource, signal, sys
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from bkfast.codec import encode_entry
el = EntryLogger([sys.argv[1]], EntryLoggerSettings(direct_writes=True, write_buffer_size=65536,
                                                    write_buffer_size_set=True))
data = lambda i, n: encode_entry(4, i, i - 1, 0, bytes([i]) * n, 3)
kept = [data(i, 5000) for i in range(30)]                 # 150 KB: flushed whole buffers, 2 in file
el.add_entries(4, kept)
el.flush()                                                # unaligned: a kept block
channel = el._current.channel
assert channel.direct
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)             # a write past RLIMIT_FSIZE fails with EFBIG
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
limit = -(-channel.position // 4096) * 4096 + 65536       # room for one more buffer, not for 200 KB
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
for entry in (data(30, 200_000), data(31, 100)):          # the big one fails mid-entry, a buffer written
    try:
        el.add_entry(4, entry)
    except OSError as e:
        assert e.errno == errno.EFBIG, e
        print("failed", entry[8:16].hex(), flush=True)
    else:
        kept.append(entry)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
kept.append(data(32, 7000))
el.add_entry(4, kept[-1])
el.close()
print(len(kept), flush=True)
"""


def test_a_failed_direct_append_leaves_no_partial_record(tmp_path):
    out = subprocess.run([sys.executable, "-c", FAILING_CHILD, str(tmp_path)], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[:2] == ["failed", (30).to_bytes(8, "big").hex()] and lines[2] == "32"
    el = EntryLogger([tmp_path], conf(True))
    records = list(el.scan_records(0))
    sizes = {**dict.fromkeys(range(30), 5000), 31: 100, 32: 7000}
    expected = [encode_entry(4, i, i - 1, 0, bytes([i]) * n, CRC32C) for i, n in sizes.items()]
    assert [r.data for r in records] == expected
    assert [el.read_entry(4, r.entry_id, r.location) for r in records] == expected
    assert el.ledgers_map(0) == {4: sum(r.size + 4 for r in records)}   # the map agrees with the scan
    el.close()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_file_system_refusing_o_direct_gets_buffered_logs_and_one_info_line(caplog):
    root = Path("/dev/shm") / f"bkfast-dio-{uuid.uuid4().hex}"
    try:
        root.mkdir()
        probe = root / "probe"
        try:
            os.close(os.open(probe, os.O_RDWR | os.O_CREAT | os.O_DIRECT))
            refused = False
        except OSError:
            refused = True
        probe.unlink(missing_ok=True)
        caplog.set_level(logging.INFO, logger="bkfast.storage.entrylogger")
        el = EntryLogger([root], conf(True))
        written = []
        for log_id in range(3):
            written.append((el.add_entry(1, entry(1, log_id, 5000)), entry(1, log_id, 5000)))
            assert el._current.channel.direct is not refused
            el.roll()
        el.close()
        lines = [r for r in caplog.records if "refuses O_DIRECT" in r.getMessage()]
        if refused:
            assert len(lines) == 1 and lines[0].levelno == logging.INFO
            assert str(root / "current") in lines[0].getMessage()
        else:
            assert lines == []                   # this kernel's tmpfs takes O_DIRECT (Linux >= 6.6)
        el = EntryLogger([root], conf(True))
        assert [el.read_entry(1, i, loc) for i, (loc, _) in enumerate(written)] == [d for _, d in written]
        el.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
