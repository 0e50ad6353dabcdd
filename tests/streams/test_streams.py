"""Named log streams (issue 15): batch format, positions, metadata CAS in both drivers, and writers and
readers against a real cluster (real ZooKeeper, 3 real bookie processes)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from click.testing import CliRunner

from bkfast import BookKeeper
from bkfast.cli.main import main as cli_main
from bkfast.errors import (
    BKMetadataVersionException,
    BKNoSuchLedgerExistsException,
    NoSuchStreamError,
    StreamError,
    StreamExistsError,
    StreamFencedError,
)
from bkfast.meta.streams import Segment
from bkfast.streams import DLSN, EARLIEST, LATEST, Namespace, decode_batch, encode_batch
from tests.stream_cluster import cluster, ns  # noqa: F401  (fixtures)

# --- the batch format and positions (no cluster) -----------------------------------------------------


def test_batch_round_trips_values_keys_and_timestamps_with_sections_aligned():
    rng = random.Random(7)
    for n in (1, 2, 3, 8, 9, 100):
        values = [rng.randbytes(rng.choice([0, 1, 5, 100, 3000])) for _ in range(n)]
        keys = [None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 20)) for _ in range(n)]
        ts = [1_700_000_000_000 + i for i in range(n)]
        payload = encode_batch(values, keys, ts, base_index=41)
        b = decode_batch(payload)
        assert (b.count, b.base_index) == (n, 41)
        assert b.values() == values
        assert b.keys() == keys
        assert list(b.timestamps()) == ts
        assert b.values(n - 1) == values[-1:]
        assert b.voff_at % 8 == 0 and b.vdata_at % 8 == 0
        no_keys = decode_batch(encode_batch(values, None, ts, 0))
        assert no_keys.values() == values and no_keys.keys() == [None] * n and not no_keys.has_keys


def test_batch_decoder_rejects_what_is_not_a_batch():
    good = encode_batch([b"abc", b"de"], None, [1, 2], 0)
    for bad in (b"", b"hello world, not a batch at all", good[:-1], good + b"x", b"XKSR" + good[4:]):
        with pytest.raises(StreamError):
            decode_batch(bad)


def test_dlsn_prints_parses_and_orders():
    d = DLSN(3, 120, 7)
    assert str(d) == "3:120:7" and DLSN.parse("3:120:7") == d
    assert DLSN(1, 9, 9) < DLSN(2, 0, 0) < DLSN(2, 0, 1) < DLSN(2, 1, 0)
    assert d.next_after(8) == DLSN(3, 121, 0) and d.next_after(9) == DLSN(3, 120, 8)
    for bad in ("", "1:2", "a:b:c", "1:-1:0", "1:2:3:4"):
        with pytest.raises(StreamError):
            DLSN.parse(bad)


def test_embedded_driver_stores_streams_with_versions_and_cas(tmp_path):
    with Namespace(f"embedded://{tmp_path}/meta", timeout=10) as ns:
        _stream_crud_and_cas(ns)


def _stream_crud_and_cas(ns):
    driver = ns.async_namespace.driver
    from bkfast.client.blocking import call_in_reactor as _wait

    md = ns.create_stream("orders", retention_ms=1000)
    assert md.name == "orders" and md.retention_ms == 1000 and md.segments == ()
    with pytest.raises(StreamExistsError):
        ns.create_stream("orders")
    with pytest.raises(StreamError):
        ns.create_stream("../etc")
    vs = _wait(10, driver.read_stream, "orders")
    seg = Segment(seq=1, ledger=5, state="sealed", records=3)
    v2 = _wait(10, driver.write_stream, vs.metadata.replace(segments=(seg,), next_seq=2), vs.version)
    assert v2.version > vs.version
    with pytest.raises(BKMetadataVersionException):
        _wait(10, driver.write_stream, vs.metadata, vs.version)
    assert ns.describe("orders").segments == (seg,)
    ns.create_stream("a.b-c_1")
    assert ns.list_streams() == ["a.b-c_1", "orders"]
    _wait(10, driver.delete_stream, "a.b-c_1")
    with pytest.raises(NoSuchStreamError):
        ns.describe("a.b-c_1")


# --- against a real cluster ---------------------------------------------------------------------------


def _name(prefix: str) -> str:
    return f"{prefix}-{random.randrange(1 << 30):x}"


@pytest.mark.zookeeper
def test_zookeeper_driver_stores_streams_with_versions_and_cas(cluster):
    with Namespace(cluster.metadata_uri, timeout=30) as ns:
        _stream_crud_and_cas(ns)
        assert cluster.zk.exists(f"{cluster.root}/streams/orders")
        ns.delete_stream("orders")


def _read_all(ns, name, start=EARLIEST, expect=None, timeout_s=30.0):
    reader = ns.open_reader(name, start)
    out = []
    deadline = time.monotonic() + timeout_s
    while (expect is None or len(out) < expect) and time.monotonic() < deadline:
        got = reader.read(10000, 200 if expect is not None else 0)
        if not got and expect is None:
            break
        out.extend(got)
    return out, reader


@pytest.mark.zookeeper
def test_records_read_back_once_in_order_across_segment_rolls(ns):
    name = _name("rolls")
    ns.create_stream(name)
    values = [f"record-{i}".encode() * (1 + i % 5) for i in range(20000)]
    with ns.open_writer(name, max_batch_records=500, max_segment_records=3000, linger_ms=1) as w:
        first = w.write(b"first", key=b"k0").wait(30)
        last = w.write_many(values[1:])
    md = ns.describe(name)
    assert len(md.segments) >= 6 and all(not s.is_open for s in md.segments)
    assert md.records == 20000
    assert first == DLSN(md.segments[0].seq, 0, 0)
    records, reader = _read_all(ns, name)
    assert [r.value for r in records] == [b"first"] + values[1:]
    assert records[0].key == b"k0" and all(r.key is None for r in records[1:])
    positions = [r.position for r in records]
    assert positions == sorted(positions) and len(set(positions)) == 20000
    assert positions[-1] == last
    # a saved position resumes exactly there
    mid = records[12345].position
    again, _ = _read_all(ns, name, start=mid)
    assert [r.value for r in again] == values[12345:]
    assert reader.position > last


@pytest.mark.zookeeper
def test_new_writer_fences_the_old_one_and_readers_see_every_acknowledged_record_once(ns):
    name = _name("takeover")
    ns.create_stream(name)
    w1 = ns.open_writer(name, linger_ms=1)
    acked = [w1.write(f"w1-{i}".encode()).wait(30) for i in range(50)]
    w1.write_many([f"w1-{i}".encode() for i in range(50, 1000)])
    w2 = ns.open_writer(name, linger_ms=1)
    assert w2.epoch == w1.epoch + 1
    with pytest.raises(StreamFencedError):
        w1.write(b"late").wait(30)
    with pytest.raises(StreamFencedError):
        w1.write_many([b"later"])
    w2.write_many([f"w2-{i}".encode() for i in range(1000)])
    w2.close()
    records, _ = _read_all(ns, name)
    assert [r.value for r in records] == [f"w1-{i}".encode() for i in range(1000)] + \
        [f"w2-{i}".encode() for i in range(1000)]
    assert records[49].position == acked[49]
    segs = ns.describe(name).segments
    assert [s.origin for s in segs] == ["writer:1", "writer:2"] and segs[0].records == 1000


@pytest.mark.zookeeper
def test_tailing_reader_gets_everything_across_rolls_and_takeover_exactly_once(ns):
    name = _name("tail")
    ns.create_stream(name)
    got: list = []
    stop = threading.Event()
    reader = ns.open_reader(name, LATEST)

    def consume():
        while not stop.is_set() or len(got) < 3000:
            got.extend(reader.read(5000, 200))
            if stop.is_set() and len(got) >= 3000:
                return

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    w1 = ns.open_writer(name, linger_ms=1, max_segment_records=700, max_batch_records=50)
    for i in range(0, 1500, 100):
        w1.write_many([f"{j}".encode() for j in range(i, i + 100)])
        time.sleep(0.01)
    w2 = ns.open_writer(name, linger_ms=1, max_segment_records=700, max_batch_records=50)   # takes over
    for i in range(1500, 3000, 100):
        w2.write_many([f"{j}".encode() for j in range(i, i + 100)])
    w2.flush()
    stop.set()
    t.join(60)
    assert not t.is_alive(), (len(got), reader.position, ns.describe(name).segments)
    assert [int(r.value) for r in got] == list(range(3000))
    assert len(ns.describe(name).segments) >= 5


@pytest.mark.zookeeper
def test_truncation_and_retention_delete_ledgers_before_the_cut_and_nothing_after(ns, cluster):
    name = _name("trunc")
    ns.create_stream(name)
    with ns.open_writer(name, max_batch_records=100, max_segment_records=1000) as w:
        w.write_many([f"{i}".encode() for i in range(5000)])
    segs = ns.describe(name).segments
    assert len(segs) == 5
    cut_at = DLSN(segs[2].seq, 3, 1)
    removed = ns.truncate(name, before=cut_at)
    assert [s.seq for s in removed] == [segs[0].seq, segs[1].seq]
    with BookKeeper(cluster.metadata_uri) as bk:
        for s in removed:
            with pytest.raises(BKNoSuchLedgerExistsException):
                bk.open_ledger(s.ledger, recovery=False)
        remaining = set(bk.list_ledgers())
    assert {s.ledger for s in segs[2:]} <= remaining
    records, _ = _read_all(ns, name)
    assert [int(r.value) for r in records] == list(range(2000, 5000))
    # retention by bytes, applied by the writer when it rolls: only the newest segments stay
    ns.set_retention(name, retention_bytes=segs[0].bytes * 2)
    with ns.open_writer(name, max_batch_records=100, max_segment_records=1000) as w:
        w.write_many([f"{i}".encode() for i in range(5000, 7000)])
        w.flush()
    md = ns.describe(name)
    # at the last roll the sealed segments fitted the bound; the segment then open was never cut
    assert md.bytes - md.segments[-1].bytes <= segs[0].bytes * 2 and md.truncated_records >= 3000
    records, _ = _read_all(ns, name)
    values = [int(r.value) for r in records]
    assert values == list(range(values[0], 7000)) and values[0] >= 4000
    with BookKeeper(cluster.metadata_uri) as bk:
        assert not {s.ledger for s in segs[2:4]} & set(bk.list_ledgers())


@pytest.mark.zookeeper
def test_stream_command_line(ns, cluster):
    runner = CliRunner()
    uri = ["--metadata-uri", cluster.metadata_uri]
    name = _name("cli")
    r = runner.invoke(cli_main, ["stream", "create", *uri, name])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli_main, ["stream", "append", *uri, name, "--key", "k"], input="alpha\nbeta\ngamma\n")
    assert r.exit_code == 0 and "appended 3 records" in r.output, r.output
    r = runner.invoke(cli_main, ["stream", "list", *uri])
    assert name in r.output.split()
    r = runner.invoke(cli_main, ["stream", "describe", *uri, name])
    assert r.exit_code == 0 and "3 records" in r.output, r.output
    r = runner.invoke(cli_main, ["stream", "tail", *uri, name, "--no-follow"])
    lines = r.output.splitlines()
    assert r.exit_code == 0 and [line.split("\t")[2:] for line in lines] == [["k", "alpha"], ["k", "beta"],
                                                                            ["k", "gamma"]]
    r = runner.invoke(cli_main, ["stream", "tail", *uri, "nope-" + name, "--no-follow"])
    assert r.exit_code == 1 and "does not exist" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli_main, ["stream", "truncate", *uri, name, "--before", "bad"])
    assert r.exit_code == 1 and "not a stream position" in r.output
    r = runner.invoke(cli_main, ["stream", "delete", *uri, name, "--yes"])
    assert r.exit_code == 0
    assert name not in ns.list_streams()


@pytest.mark.zookeeper
def test_writer_rolls_when_another_client_recovers_its_ledger_and_loses_no_acknowledged_record(ns, cluster):
    """Fencing that is not a takeover (here: a reader recovering the open segment's ledger) fails the
    segment, not the writer: it seals the recovered ledger, re-sends what recovery did not keep to a new
    segment and goes on."""
    name = _name("recovered")
    ns.create_stream(name)
    w = ns.open_writer(name, max_batch_records=100, linger_ms=1)
    w.write_many([f"{i}".encode() for i in range(1000)])
    open_seg = ns.describe(name).segments[-1]
    with BookKeeper(cluster.metadata_uri) as bk:
        bk.open_ledger(open_seg.ledger, recovery=True).close()      # fences the writer's ledger
    last = w.write_many([f"{i}".encode() for i in range(1000, 2000)])
    w.close()
    segs = ns.describe(name).segments
    assert len(segs) == 2 and segs[0].records == 1000 and segs[0].ledger == open_seg.ledger
    assert last.segment == segs[1].seq
    records, _ = _read_all(ns, name)
    assert [int(r.value) for r in records] == list(range(2000))


@pytest.mark.zookeeper
def test_reader_starts_at_a_timestamp(ns):
    name = _name("ts")
    ns.create_stream(name)
    with ns.open_writer(name, max_batch_records=10, max_segment_records=50) as w:
        w.write_many([b"old"] * 120, timestamps=[1_000_000 + i for i in range(120)])
        w.write_many([b"new"] * 30, timestamps=[2_000_000 + i for i in range(30)])
    records, _ = _read_all(ns, name, start=2_000_005)
    assert [r.timestamp for r in records] == [2_000_000 + i for i in range(5, 30)]
    records, _ = _read_all(ns, name, start=1_000_100)
    assert len(records) == 50 and records[0].timestamp == 1_000_100


@pytest.mark.zookeeper
def test_retention_by_age_drops_old_sealed_segments_at_a_roll(ns, cluster):
    name = _name("age")
    ns.create_stream(name, retention_ms=60_000)
    old = int(time.time() * 1000) - 3_600_000
    with ns.open_writer(name, max_batch_records=50, max_segment_records=100) as w:
        w.write_many([b"old"] * 300, timestamps=[old + i for i in range(300)])      # three old segments
        w.write_many([b"new"] * 250)                                                # rolls: retention runs
    md = ns.describe(name)
    assert md.truncated_records == 300 and all(s.first_ts > old + 1000 for s in md.segments)
    records, _ = _read_all(ns, name)
    assert [r.value for r in records] == [b"new"] * 250


@pytest.mark.zookeeper
def test_stream_tail_command_prints_records_as_they_arrive(ns, cluster):
    import os
    import signal
    import subprocess
    import sys

    name = _name("follow")
    ns.create_stream(name)
    proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "stream", "tail", "--metadata-uri",
                             cluster.metadata_uri, name, "--from", "earliest", "--max", "6"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        w = ns.open_writer(name, linger_ms=1)
        for i in range(3):
            w.write(f"early-{i}".encode()).wait(30)
        # the tail has printed every record written so far: the late ones it can only get by following
        watchdog = threading.Timer(60, proc.kill)   # a tail that prints nothing must not hang the test
        watchdog.start()
        try:
            early_lines = [proc.stdout.readline() for _ in range(3)]
        finally:
            watchdog.cancel()
        w.write_many([f"late-{i}".encode() for i in range(3)])
        out, err = proc.communicate(timeout=60)      # --max 6: exits after the sixth record
        out = "".join(early_lines) + out
        w.close()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    values = [line.split("\t")[3] for line in out.splitlines()]
    assert proc.returncode == 0, err[-2000:]
    assert values == [f"early-{i}" for i in range(3)] + [f"late-{i}" for i in range(3)]


@pytest.mark.zookeeper
def test_segments_roll_by_age_and_by_size(ns):
    name = _name("age-roll")
    ns.create_stream(name)
    with ns.open_writer(name, linger_ms=1, max_segment_age_ms=300) as w:
        first = w.write(b"one").wait(30)
        time.sleep(0.5)
        second = w.write(b"two").wait(30)
    assert second.segment > first.segment
    name = _name("size-roll")
    ns.create_stream(name)
    with ns.open_writer(name, max_batch_bytes=4096, max_segment_bytes=20_000) as w:
        w.write_many([bytes(1000)] * 100)
    segs = ns.describe(name).segments
    assert len(segs) >= 4 and all(s.bytes < 20_000 + 4096 + 100 for s in segs) and sum(s.records for s in segs) == 100
