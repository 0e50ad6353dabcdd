"""The journal writer on real files: bytes on disk, group commit, completions, force, rolling, failures.

Files are checked against `spec_*` below: an independent reader/writer of journal bytes written from
spec bookkeeper-formats.md §4.2 alone (it shares no code with bkfast). Reading back, corruption, replay,
the Java journal and lastMark are in test_journal_recovery.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest
from click.testing import CliRunner

from bkfast import _journal as _jr
from bkfast.bookie import journal as jm
from bkfast.cli.main import main
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKBookieIOException, BKTooManyRequestsException

MiB = 1024 * 1024

# --- the spec, independently ------------------------------------------------------------------------

SPEC_MAGIC = b"BKLG"
SPEC_PADDING = -256            # int 0xFFFFFF00


def spec_padding(position: int, align: int = 512) -> bytes:
    """The padding record the spec writes at `position` (nothing when already aligned)."""
    gap = align - position % align
    if gap == align:
        return b""
    pad_len = gap - 8 if gap >= 8 else align + gap - 8
    return struct.pack(">ii", SPEC_PADDING, pad_len) + bytes(pad_len)


def spec_batch(position: int, records: list[bytes], align: int = 512, pad: bool = True) -> bytes:
    """One group flush: `int len | bytes` per record, then the padding record."""
    out = b"".join(struct.pack(">i", len(r)) + r for r in records)
    return out + (spec_padding(position + len(out), align) if pad else b"")


def spec_header(version: int = 6) -> bytes:
    h = SPEC_MAGIC + struct.pack(">i", version)
    return h.ljust(512, b"\0") if version >= 5 else h


@dataclass
class SpecParsed:
    version: int
    header_len: int
    records: list = field(default_factory=list)    # (offset of the length field, record bytes)
    paddings: list = field(default_factory=list)   # (offset, padLen)
    end: int = 0                                   # where the log ends
    why: str = ""                                  # "zero", "eof" or "torn"


def spec_read(data: bytes) -> SpecParsed:
    """Parse a whole journal file as the spec describes it."""
    if data[:4] == SPEC_MAGIC and len(data) >= 8:
        (version,) = struct.unpack_from(">i", data, 4)
        hlen = 512 if version >= 5 else 8
    else:
        version, hlen = 1, 0
    p, pos = SpecParsed(version, hlen), hlen
    while True:
        if pos + 4 > len(data):
            p.end, p.why = pos, "eof" if pos == len(data) else "torn"
            return p
        (n,) = struct.unpack_from(">i", data, pos)
        if n == 0:
            p.end, p.why = pos, "zero"
            return p
        if n == SPEC_PADDING and version >= 5:
            (pad_len,) = struct.unpack_from(">i", data, pos + 4) if pos + 8 <= len(data) else (1 << 40,)
            if pos + 8 + pad_len > len(data):
                p.end, p.why = pos, "torn"
                return p
            assert data[pos + 8:pos + 8 + pad_len] == bytes(pad_len), f"non-zero padding at {pos}"
            p.paddings.append((pos, pad_len))
            pos += 8 + pad_len
            continue
        assert n > 0, f"negative length {n} at {pos}"
        if pos + 4 + n > len(data):
            p.end, p.why = pos, "torn"
            return p
        p.records.append((pos, data[pos + 4:pos + 4 + n]))
        pos += 4 + n


# --- helpers ----------------------------------------------------------------------------------------


_WRITE_MODE = {"journalDirectWrites": False}


@pytest.fixture(autouse=True, params=["buffered", "direct"])
def write_mode(request):
    """Every test runs with buffered and with O_DIRECT journal writes: the bytes must not differ."""
    _WRITE_MODE["journalDirectWrites"] = request.param == "direct"
    yield request.param
    _WRITE_MODE["journalDirectWrites"] = False


def make_conf(**overrides) -> ServerConfiguration:
    base = {"journalPreAllocSizeMB": 1, "journalMaxGroupWaitMSec": 0,   # 0: one batch per idle wake
            **_WRITE_MODE}
    base.update(overrides)
    return ServerConfiguration(base)


class Sink:
    """completion_sink / error_sink that remember every call and let a test wait for tokens."""

    def __init__(self):
        self.calls: list[list] = []
        self.errors: list[tuple[list, BaseException]] = []
        self.cond = threading.Condition()
        self.on_call = None

    def __call__(self, tokens):
        if self.on_call is not None:
            self.on_call(tokens)
        with self.cond:
            self.calls.append(list(tokens))
            self.cond.notify_all()

    def error(self, tokens, exc):
        with self.cond:
            self.errors.append((list(tokens), exc))
            self.cond.notify_all()

    @property
    def tokens(self) -> list:
        return [t for call in self.calls for t in call]

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.tokens) + sum(len(t) for t, _ in self.errors) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"only {len(self.tokens)} of {count} tokens completed"
                self.cond.wait(left)


def open_journal(tmp_path, sink=None, **overrides) -> tuple[jm.Journal, Sink]:
    sink = sink or Sink()
    j = jm.Journal(tmp_path / "journal", make_conf(**overrides), sink, sink.error)
    j.start()
    return j, sink


def journal_bytes(tmp_path, journal_id: int) -> bytes:
    return (tmp_path / "journal" / "current" / f"{journal_id:x}.txn").read_bytes()


def log_one_per_batch(tmp_path, j, sink, records) -> tuple[int, bytes]:
    """Log each record as its own batch (wait for each before the next), stop; (journal id, file bytes)."""
    for i, r in enumerate(records):
        j.log_record(r, i)
        sink.wait_for(i + 1)
    journal_id = j.current_journal_id
    j.stop()
    return journal_id, journal_bytes(tmp_path, journal_id)


def spec_one_per_batch(records, align: int = 512) -> tuple[bytes, int]:
    """The spec's V6 file of one batch per record: (its bytes, where the log ends)."""
    expected, pos = spec_header(6), 512
    for r in records:
        b = spec_batch(pos, [r], align=align)
        expected, pos = expected + b, pos + len(b)
    return expected, pos


@contextlib.contextmanager
def file_size_limit(limit: int):
    """RLIMIT_FSIZE at `limit` bytes (SIGXFSZ ignored, so a write past it fails with EFBIG) for the block."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def rec(i: int, size: int = 100) -> bytes:
    return struct.pack(">qq", 1, i) + bytes([i % 251]) * (size - 16)


# --- bytes on disk ------------------------------------------------------------------------------------


def test_file_is_byte_for_byte_the_spec_layout(tmp_path):
    # Sizes chosen to hit every padding case: plain gap, gap < 8 (padLen = align + gap - 8), exact fit.
    sizes = [100, 506, 508, 1, 4000, 20000, 512 - 4 - 8, 70000, 513]
    j, sink = open_journal(tmp_path)
    records = [rec(i, s) for i, s in enumerate(sizes)]
    journal_id, data = log_one_per_batch(tmp_path, j, sink, records)
    expected, pos = spec_one_per_batch(records)
    assert len(data) == 1 * MiB                              # pre-allocated in journalPreAllocSizeMB steps
    assert data[:pos] == expected
    assert data[pos:] == bytes(len(data) - pos)              # the pre-allocated tail is zeros
    parsed = spec_read(data)
    assert [r for _, r in parsed.records] == records and parsed.why == "zero"
    assert all((off + 8 + n) % 512 == 0 for off, n in parsed.paddings)
    pad_lens = [n for _, n in parsed.paddings]
    assert len(pad_lens) == len(records) - 1            # the 508-byte record ends exactly aligned
    assert 512 + 2 - 8 in pad_lens and 0 in pad_lens     # gap 2 (< 8) and gap 8 (padLen 0)
    assert sink.calls == [[i] for i in range(len(records))]
    assert j.sync_count == j.batch_count == len(records)
    assert j.last_log_mark == (journal_id, pos)


def test_direct_mode_is_used_where_asked_and_a_batch_bigger_than_its_stage_is_whole(tmp_path, write_mode):
    # 5 MiB of records in one batch crosses the 4 MiB direct stage: it goes out in two pieces.
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedEntriesThreshold=49)
    assert j._writer.direct == (write_mode == "direct")
    records = [rec(i, 100 * 1024 + i) for i in range(50)]
    for i, r in enumerate(records):
        j.log_record(r, i)
    sink.wait_for(len(records))
    journal_id = j.current_journal_id
    assert j.sync_count == 1
    j.stop()
    data = journal_bytes(tmp_path, journal_id)
    batch = spec_batch(512, records)
    assert data[:512 + len(batch)] == spec_header(6) + batch and not any(data[512 + len(batch):])


def test_a_4096_byte_alignment_pads_the_first_batch_from_the_512_byte_header(tmp_path, write_mode):
    j, sink = open_journal(tmp_path, journalAlignmentSize=4096)
    assert j._writer.direct == (write_mode == "direct")
    records = [rec(i, s) for i, s in enumerate([100, 5000, 4090])]
    _, data = log_one_per_batch(tmp_path, j, sink, records)
    expected, pos = spec_one_per_batch(records, align=4096)
    assert pos % 4096 == 0 and data[:pos] == expected and not any(data[pos:])


def test_multi_record_batches_pad_once_at_each_batch_end(tmp_path):
    # More than 3 entries closes a batch; a long max wait leaves that as the only trigger.
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedEntriesThreshold=3)
    batches = [[rec(10 * b + i, 50 + 37 * i + b) for i in range(4)] for b in range(3)]
    for b, batch in enumerate(batches):
        for i, r in enumerate(batch):
            j.log_record(r, (b, i))
        sink.wait_for(4 * (b + 1))
    journal_id = j.current_journal_id
    j.stop()
    data = journal_bytes(tmp_path, journal_id)
    expected, pos = spec_header(6), 512
    for batch in batches:
        b = spec_batch(pos, batch)
        expected, pos = expected + b, pos + len(b)
    assert data[:pos] == expected and not any(data[pos:])
    assert sink.calls == [[(b, i) for i in range(4)] for b in range(3)]
    assert j.sync_count == 3


def test_format_v4_has_an_8_byte_header_and_no_padding(tmp_path):
    j, sink = open_journal(tmp_path, journalFormatVersionToWrite=4)
    records = [rec(i, 99 + i) for i in range(3)]
    for i, r in enumerate(records):
        j.log_record(r, i)
        sink.wait_for(i + 1)
    journal_id = j.current_journal_id
    j.stop()
    data = journal_bytes(tmp_path, journal_id)
    body = b"".join(spec_batch(0, [r], pad=False) for r in records)
    assert data[:8 + len(body)] == spec_header(4) + body and not any(data[8 + len(body):])
    assert [r for _, r in jm.scan_journal(tmp_path / "journal", journal_id)] == records


def test_new_journal_id_is_newest_plus_one_or_now_plus_one(tmp_path):
    before = int(time.time() * 1000)
    j, _ = open_journal(tmp_path)
    first = j.current_journal_id
    j.stop()
    assert before + 1 <= first <= int(time.time() * 1000) + 1
    (tmp_path / "journal" / "current" / "1ffffffffff0.txn").write_bytes(b"")
    j2, _ = open_journal(tmp_path)
    assert j2.current_journal_id == 0x1FFFFFFFFFF1
    assert os.path.exists(jm.journal_path(tmp_path / "journal", 0x1FFFFFFFFFF1))
    j2.stop()


# --- group commit, completions, force -----------------------------------------------------------------


def test_group_commit_many_records_few_syncs_tokens_in_order(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=2)      # BookKeeper's defaults otherwise
    n = 5000
    payload = bytes(1024)
    for i in range(n):
        j.log_record(payload, i)
    sink.wait_for(n)
    assert sink.tokens == list(range(n))                       # every token once, in queue order
    assert len(sink.calls) == j.batch_count == j.sync_count      # one sink call and one sync per batch
    assert j.sync_count <= n // 20, f"{j.sync_count} fdatasyncs for {n} records"
    assert all(len(call) <= 10_000 for call in sink.calls)
    j.stop()
    assert j.records_written == n


def test_byte_threshold_closes_a_batch_before_the_max_wait(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedWritesThreshold=10_000)
    t = time.monotonic()
    for i in range(3):
        j.log_record(bytes(4000), i)        # 3 x 4004 bytes > 10,000
    sink.wait_for(3)
    assert time.monotonic() - t < 5 and sink.calls == [[0, 1, 2]]
    j.log_record(b"x", "lonely")            # below every threshold: only stop() or the wait ends it
    time.sleep(0.2)
    assert sink.tokens == [0, 1, 2]
    j.stop()
    assert sink.calls[-1] == ["lonely"]


def test_max_group_wait_closes_a_small_batch(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=200)
    t = time.monotonic()
    j.log_record(b"a" * 20, "a")
    j.log_record(b"b" * 20, "b")
    sink.wait_for(2)
    assert 0.15 <= time.monotonic() - t < 5 and sink.calls == [["a", "b"]]
    j.stop()


def test_force_completes_after_everything_before_it_is_durable(tmp_path):
    j, sink = open_journal(tmp_path, journalSyncData=False, journalPageCacheFlushIntervalMSec=10_000_000)
    for i in range(3):
        j.log_record(rec(i), i)
        sink.wait_for(i + 1)
    assert j.sync_count == 0                                   # journalSyncData=false: acked unsynced
    assert j.last_log_mark == (j.current_journal_id, 512)      # ... so nothing is durable yet
    j.force("F")
    sink.wait_for(4)
    assert sink.calls[-1] == ["F"] and j.sync_count == 1
    data = journal_bytes(tmp_path, j.current_journal_id)
    assert j.last_log_mark.offset == spec_read(data).end      # durable up to the end of the records
    j.force("idle")                                            # nothing new: completes all the same
    sink.wait_for(5)
    j.stop()


def test_force_is_not_written_and_completes_in_order_with_its_batch(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedEntriesThreshold=3)
    j.log_record(rec(0), 0)
    j.log_record(rec(1), 1)
    j.force("F")
    j.log_record(rec(2), 2)                    # the 4th queued item closes the batch
    sink.wait_for(4)
    assert sink.calls == [[0, 1, "F", 2]] and j.records_written == 3
    journal_id = j.current_journal_id
    j.stop()
    assert [r for _, r in spec_read(journal_bytes(tmp_path, journal_id)).records] == [rec(i) for i in range(3)]


def test_sync_data_false_acks_after_write_and_syncs_on_stop(tmp_path):
    j, sink = open_journal(tmp_path, journalSyncData=False, journalPageCacheFlushIntervalMSec=10_000_000)
    for i in range(50):
        j.log_record(rec(i), i)
    sink.wait_for(50)
    assert sink.tokens == list(range(50)) and j.sync_count == 0
    journal_id = j.current_journal_id
    j.stop()
    assert j.sync_count == 1 and j.last_log_mark == (journal_id, spec_read(journal_bytes(tmp_path, journal_id)).end)


def test_deferred_sync_tokens_complete_before_the_sync_of_their_batch(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedEntriesThreshold=3)
    syncs_seen = []
    sink.on_call = lambda tokens: syncs_seen.append(j.sync_count)
    j.log_record(rec(0), "d0", ack_before_sync=True)
    j.log_record(rec(1), "n1")
    j.log_record(rec(2), "d2", ack_before_sync=True)
    j.log_record(rec(3), "n3")
    sink.wait_for(4)
    assert sink.calls == [["d0", "d2"], ["n1", "n3"]]
    assert syncs_seen == [0, 1]                 # the DEFERRED_SYNC ones were acked before the fdatasync
    j.stop()


def test_stop_drains_the_queue_is_idempotent_and_refuses_later_records(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=60_000, journalBufferedWritesThreshold=1 << 30)
    for i in range(1000):
        j.log_record(rec(i), i)
    journal_id = j.current_journal_id
    j.stop()
    j.stop()
    assert sink.tokens == list(range(1000))
    data = journal_bytes(tmp_path, journal_id)
    assert len(spec_read(data).records) == 1000 and j.last_log_mark == (journal_id, spec_read(data).end)
    with pytest.raises(BKBookieIOException, match="not running"):
        j.log_record(b"late", "late")
    jm.Journal(tmp_path / "j2", make_conf(), Sink()).stop()    # never started: stop is a no-op


def test_a_full_queue_blocks_then_raises_a_clear_error(tmp_path):
    entered, release = threading.Event(), threading.Event()
    sink = Sink()
    sink.on_call = lambda tokens: (entered.set(), release.wait(10))   # the thread is stuck in batch 1
    j = jm.Journal(tmp_path / "journal", make_conf(journalQueueSize=5), sink, sink.error, enqueue_timeout_s=0.3)
    j.start()
    j.log_record(b"first", 0)
    assert entered.wait(10)
    for i in range(1, 6):
        j.log_record(b"r", i)                          # fills the queue (5)
    t = time.monotonic()
    with pytest.raises(BKTooManyRequestsException, match="journalQueueSize=5"):
        j.log_record(b"r", 6)
    assert 0.25 <= time.monotonic() - t < 5
    release.set()
    sink.wait_for(6)
    j.log_record(b"r", 7)                              # space again once the thread moved on
    j.stop()
    assert sink.tokens == [0, 1, 2, 3, 4, 5, 7]


def test_empty_records_are_refused(tmp_path):
    j, _ = open_journal(tmp_path)
    with pytest.raises(ValueError):
        j.log_record(b"", 1)
    j.stop()


# --- rolling and garbage collection ---------------------------------------------------------------


def test_rolls_past_max_size_and_gc_keeps_max_backups(tmp_path):
    j, sink = open_journal(tmp_path, journalMaxSizeMB=1, journalMaxBackups=2)
    records = [rec(i, 64 * 1024) for i in range(100)]           # 6.25 MiB: at least 4 rolls
    for i, r in enumerate(records):
        j.log_record(r, i)
        if i % 5 == 4:
            sink.wait_for(i + 1)
    sink.wait_for(len(records))
    j.stop()                                   # (a roll may still be under way when the last token completes)
    last = j.current_journal_id
    ids = jm.list_journal_ids(tmp_path / "journal")
    assert len(ids) >= 4 and ids == list(range(ids[0], ids[0] + len(ids))) and ids[-1] == last
    for journal_id in ids[:-1]:
        parsed = spec_read(journal_bytes(tmp_path, journal_id))
        assert parsed.end > 1 * MiB and parsed.why == "zero"    # rolled once past journalMaxSizeMB
    seen = []
    reached = jm.replay(tmp_path / "journal", jm.LogMark(ids[0], 0), seen.append)
    assert seen == records and ids[-2] <= reached.journal_id <= last     # the newest file may be empty
    deleted = j.gc_journals(jm.LogMark(last, 0))
    assert deleted == ids[:-3]                                  # keeps the 2 newest older than the mark
    assert jm.list_journal_ids(tmp_path / "journal") == ids[-3:]
    assert j.gc_journals(jm.LogMark(last, 0)) == []


# --- failures (a real EFBIG from RLIMIT_FSIZE: no mocked disk) ------------------------------------------


def test_write_failure_errors_the_batch_once_and_stops_the_journal(tmp_path, caplog):
    j, sink = open_journal(tmp_path, journalPreAllocSizeMB=1)
    journal_id = j.current_journal_id
    with file_size_limit(int(1.5 * MiB)):
        records = [rec(i, 100 * 1024) for i in range(12)]       # #10 crosses 1 MiB: pre-allocation fails
        failed_at = None
        for i, r in enumerate(records):
            j.log_record(r, i)
            sink.wait_for(i + 1)
            if sink.errors:
                failed_at = i
                break
    assert failed_at is not None and sink.tokens == list(range(failed_at))
    assert len(sink.errors) == 1 and sink.errors[0][0] == [failed_at]
    exc = sink.errors[0][1]
    assert isinstance(exc, BKBookieIOException) and isinstance(exc.__cause__, OSError)
    assert j.failure is exc and "failed" in caplog.text
    with pytest.raises(BKBookieIOException, match="failed"):
        j.log_record(b"after", "after")
    j.stop()
    data = journal_bytes(tmp_path, journal_id)
    assert [r for _, r in spec_read(data).records] == records[:failed_at]
    assert j.last_log_mark == (journal_id, spec_read(data).end)


# --- the CLI benchmark ----------------------------------------------------------------------------------


def test_bench_journal_cli_prints_the_json_summary(tmp_path):
    result = CliRunner().invoke(main, ["bench", "journal", "--duration", "1", "--json", "--baseline",
                                       "--dir", str(tmp_path), "--entry-size", "512"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("records_per_s", "mb_per_s", "p50_ms", "p99_ms", "baseline_ratio"):
        assert isinstance(out[key], float), key
    assert out["records"] > 0 and out["records_per_s"] > 0 and out["baseline_ratio"] > 0
    assert os.listdir(tmp_path) == []                          # its temporary directory is removed


def test_bench_journal_cli_runs_one_journal_per_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    result = CliRunner().invoke(main, ["bench", "journal", "--duration", "1", "--json", "--entry-size", "512",
                                       "--dir", str(dirs[0]), "--dir", str(dirs[1])])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["journal_dirs"] == 2 and out["records"] > 0 and out["baseline_ratio"] is None
    assert out["syncs"] >= 2 and isinstance(out["p99_ms"], float)
    assert all(os.listdir(d) == [] for d in dirs)
    refused = CliRunner().invoke(main, ["bench", "journal", "--baseline", "--dir", str(dirs[0]), "--dir", str(dirs[1])])
    assert refused.exit_code != 0 and "give one --dir" in refused.output


def test_log_records_refuses_an_empty_record_and_queues_none_of_the_batch(tmp_path):
    j, sink = open_journal(tmp_path)
    try:
        with pytest.raises(ValueError, match="empty journal record"):
            j.log_records([b"first", b"", memoryview(b"third")], "batch")
        assert j.log_records([b"ok", memoryview(b"view")], "later") == 4 + 2 + 4 + 4
        sink.wait_for(2)
        assert sink.tokens == [None, "later"]             # one token per record, the batch's on its last
    finally:
        j.stop()


# --- records already framed (the add run's FramedRecords) -----------------------------------------------


def _framed(records: list[bytes]) -> bytes:
    return b"".join(len(r).to_bytes(4, "big") + r for r in records)


def test_framed_records_are_written_as_the_same_records_one_by_one(tmp_path, write_mode):
    """Pieces of framed records (small ones staged, ones past the copy threshold written from their own
    buffer) between plain records: the file holds exactly the records in queue order, each counted as a
    record (records_written, queue_length, the queue-size gauge), and the token completes once, last."""
    sizes = [100, 5000, 70_000, 17, 300, 200_000, 16]
    records = [rec(i, s) for i, s in enumerate(sizes)]
    owner = b"head" + _framed(records[1:4]) + _framed(records[4:6])
    first = _jr.FramedRecords(owner, 4, len(_framed(records[1:4])))
    second = _jr.FramedRecords(owner, 4 + first.nbytes, len(_framed(records[4:6])))
    assert (first.count, second.count, first.records()) == (3, 2, records[1:4])
    j, sink = open_journal(tmp_path, journalMaxGroupWaitMSec=200, journalFlushWhenQueueEmpty=False)
    journal_id = j.current_journal_id
    j.log_record(records[0], "plain")
    assert j.log_framed([first, second], "framed") == len(owner) - 4
    assert j.queue_length == 6, "a queued piece counts its records"
    j.log_record(records[6], "after")
    sink.wait_for(4)
    assert sink.tokens == ["plain", None, "framed", "after"]
    j.stop()
    assert j.records_written == len(records)
    assert j.stats.queue_size.get() == 0
    assert [r for _, r in spec_read(journal_bytes(tmp_path, journal_id)).records] == records


def test_framed_records_count_against_the_queue_and_are_refused_whole(tmp_path):
    j, sink = open_journal(tmp_path, journalQueueSize=4, journalMaxGroupWaitMSec=200,
                           journalFlushWhenQueueEmpty=False)
    records = [rec(i) for i in range(3)]
    piece = _jr.FramedRecords(_framed(records), 0, len(_framed(records)))
    try:
        assert j.room() == sys.maxsize
        j.log_framed([piece], "three")
        assert j.room() == 1, "three of the queue's four records"
        with pytest.raises(ValueError):
            j.log_framed([], "none")
    finally:
        j.stop()
    with pytest.raises(BKBookieIOException):
        j.log_framed([piece], "stopped")
    assert sink.tokens == ["three"]


def test_framed_records_refuse_a_framing_that_is_not_whole():
    good = _framed([b"abc", b"x"])
    for owner, offset, nbytes in [(good[:-1], 0, len(good) - 1), (b"\0\0\0\0", 0, 4), (good, 0, 3),
                                  (good, 1, len(good) - 1), (good, 0, len(good) + 1), (good, 0, 0)]:
        with pytest.raises(ValueError):
            _jr.FramedRecords(owner, offset, nbytes)


def test_recover_journals_a_failed_batchs_framed_records_again(tmp_path):
    """A piece of framed records whose batch failed (pre-allocation past RLIMIT_FSIZE) is journaled again,
    whole and counted as its records, in the new file recover() opens."""
    j, sink = open_journal(tmp_path, journalPreAllocSizeMB=1)
    first_id = j.current_journal_id
    records = [rec(i, 100 * 1024) for i in range(12)]
    with file_size_limit(int(1.5 * MiB)):
        failed_at = None
        for i in range(0, len(records), 2):
            framed = _framed(records[i:i + 2])
            j.log_framed([_jr.FramedRecords(framed, 0, len(framed))], i)
            sink.wait_for(i // 2 + 1)
            if sink.errors:
                failed_at = i
                break
    assert failed_at is not None and sink.errors[0][0] == [failed_at]
    j.recover()
    j.stop()
    assert j.records_written == failed_at + 2, "the piece's two records, counted as two, once"
    assert j.current_journal_id != first_id
    assert [r for _, r in spec_read(journal_bytes(tmp_path, first_id)).records] == records[:failed_at]
    again = spec_read(journal_bytes(tmp_path, j.current_journal_id)).records
    assert [r for _, r in again] == records[failed_at:failed_at + 2]
    assert j.stats.queue_size.get() == 0
