"""O_DIRECT reads of read-ahead runs (`entryLogDirectReads`, bkfast.storage.direct_reads): the same entries
as buffered reads, never a byte above the channel's file_end (the write buffer serves those), and the
pages read this way are not left in the page cache, which is the point. Real files on tmp_path (ext4
here: it takes O_DIRECT); the page-cache check uses a buffered RWF_NOWAIT read, which fails with EAGAIN
for a range that is not cached.
"""

from __future__ import annotations

import hashlib
import mmap
import os

import pytest

from bkfast._entrylog import DIRECT_BLOCK
from bkfast.codec import encode_entry
from bkfast.conf import ServerConfiguration
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings

CRC32C = 3


def conf(direct_reads: bool = True, **overrides) -> EntryLoggerSettings:
    return EntryLoggerSettings.from_conf(ServerConfiguration({"entryLogDirectReads": direct_reads, **overrides}))


def entry(ledger_id: int, entry_id: int, payload_len: int) -> bytes:
    seed = hashlib.sha256(f"{ledger_id}:{entry_id}".encode()).digest()
    payload = (seed * (payload_len // 32 + 1))[:payload_len]
    return encode_entry(ledger_id, entry_id, entry_id - 1, payload_len, payload, CRC32C)


def finished_log(tmp_path, direct_reads: bool, count: int = 300, size: int = 5000):
    """A logger over a log of `count` entries of ledger 6 then one of ledger 8, written, closed and
    reopened (a read-only channel, as after a restart); its page cache dropped."""
    el = EntryLogger([tmp_path], conf(direct_reads))
    locs = [el.add_entry(6, entry(6, i, size)) for i in range(count)]
    el.add_entry(8, entry(8, 0, 100))
    el.close()
    drop_cache(tmp_path)
    return EntryLogger([tmp_path], conf(direct_reads)), locs


def drop_cache(tmp_path) -> None:
    for path in (tmp_path / "current").glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cached(path, offset: int, n: int) -> bool:
    """Whether [offset, offset + n) of the file is in the page cache (a buffered read that may not
    wait for the disk succeeds)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(n)], offset, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_run_read_directly_holds_the_same_entries_and_leaves_the_page_cache_alone(tmp_path):
    el, locs = finished_log(tmp_path, direct_reads=True)
    run = el.read_run(0, 6, locs[10], 1000, 4 << 20)
    assert [eid for eid, _, _ in run] == list(range(10, 300))             # stops at ledger 8's entry
    assert [loc for _, loc, _ in run] == locs[10:]
    assert all(data == entry(6, eid, 5000) for eid, _, data in run)
    assert el.direct_runs.direct_reads >= 2                               # 1.4 MiB in 1 MiB chunks
    log_path = next((tmp_path / "current").glob("*.log"))
    middle = (locs[150] & 0xFFFFFFFF) // 4096 * 4096
    assert not cached(log_path, middle, 4096)
    el.close()


def test_with_direct_reads_off_the_same_run_goes_through_the_page_cache(tmp_path):
    # The check above can fail: this is the same read, buffered, and its pages are cached.
    el, locs = finished_log(tmp_path, direct_reads=False)
    run = el.read_run(0, 6, locs[10], 1000, 4 << 20)
    assert [eid for eid, _, _ in run] == list(range(10, 300))
    assert el.direct_runs.direct_reads == 0
    log_path = next((tmp_path / "current").glob("*.log"))
    middle = (locs[150] & 0xFFFFFFFF) // 4096 * 4096
    assert cached(log_path, middle, 4096)
    el.close()


def test_runs_of_the_log_being_written_are_right_across_the_write_buffer(tmp_path):
    # Part of the run is in the file (read directly), the rest still in the write buffer: the bytes
    # above file_end come from the buffer, whatever the file holds there.
    el = EntryLogger([tmp_path], conf(True, writeBufferSizeBytes=65536))
    locs = [el.add_entry(6, entry(6, i, 3000)) for i in range(200)]
    channel = el._current.channel
    assert 0 < channel.file_end < channel.position
    first_buffered = next(i for i, loc in enumerate(locs) if (loc & 0xFFFFFFFF) + 3000 > channel.file_end)
    for start in (0, first_buffered - 3, first_buffered, 199):
        run = el.read_run(0, 6, locs[start], 1000, 8 << 20)
        assert [eid for eid, _, _ in run] == list(range(start, 200))
        assert all(data == entry(6, eid, 3000) for eid, _, data in run)
    assert el.direct_runs.direct_reads >= 1
    el.close()


def test_read_direct_into_stops_at_file_end_and_at_the_end_of_the_file(tmp_path):
    el, locs = finished_log(tmp_path, direct_reads=True, count=40, size=1000)
    channel = el._channel(locs[0] >> 32)
    raw = next((tmp_path / "current").glob("*.log")).read_bytes()
    assert channel.file_end == len(raw)
    fd = os.open(next((tmp_path / "current").glob("*.log")), os.O_RDONLY | os.O_DIRECT)
    assert channel.set_direct_read_fd(fd)
    buf = mmap.mmap(-1, 1 << 20)
    for offset, n in ((0, 10), (1, 4095), (4095, 2), (1000, 20000), (len(raw) - 7, 100), (len(raw) - 4096, 4096),
                      (len(raw), 10), (len(raw) + 5000, 10)):
        at, count = channel.read_direct_into(buf, offset, n)
        assert count == max(0, min(n, len(raw) - offset)), (offset, n)
        assert buf[at:at + count] == raw[offset:offset + count]
    with pytest.raises(ValueError, match="page-aligned"):
        channel.read_direct_into(memoryview(buf)[1:], 0, 10)
    with pytest.raises(ValueError, match="do not fit"):
        channel.read_direct_into(mmap.mmap(-1, DIRECT_BLOCK), 0, 2 * DIRECT_BLOCK)
    other = os.open(next((tmp_path / "current").glob("*.log")), os.O_RDONLY)
    assert not channel.set_direct_read_fd(other)                          # it has one: the new fd is closed
    with pytest.raises(OSError):
        os.fstat(other)
    el.close()
    with pytest.raises(OSError):                                          # closed with the channel
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        channel.read_direct_into(buf, 0, 10)


@pytest.mark.parametrize("size", [300_000, 3_000_000], ids=["above-a-chunk", "above-the-thread-buffer"])
def test_a_run_of_entries_larger_than_a_direct_read_chunk_is_read_whole(tmp_path, size):
    from bkfast.storage.entrylogger import DIRECT_RUN_CHUNK

    assert size > DIRECT_RUN_CHUNK
    el, locs = finished_log(tmp_path, direct_reads=True, count=4, size=size)
    run = el.read_run(0, 6, locs[1], 10, 8 * size)
    assert [eid for eid, _, _ in run] == [1, 2, 3]
    assert all(data == entry(6, eid, size) for eid, _, data in run)
    # Within the byte budget only: one entry's worth reads nothing past the first.
    assert [eid for eid, _, _ in el.read_run(0, 6, locs[1], 10, size + 200)] == [1]
    el.close()
