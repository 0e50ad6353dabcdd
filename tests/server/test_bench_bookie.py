"""`bkfast bench bookie` (bkfast/cli/bench_bookie.py) and its load generator (bkfast/loadgen.py).

Unit tests: option parsing, percentiles, request bytes against the Java-made vectors in
tests/vectors/protocol.json, and the connection Protocol driven over a StringTransport (one write per
batch, v2 matching by (ledgerId, entryId), v3 by txnId, error and connection-loss accounting).
Integration: a real `bkfast bookie` subprocess (127.0.0.1, ephemeral port, temp dirs, DbLedgerStorage,
stopped by pid) benchmarked over v2 and v3 with --json; a refused add (wrong master key) exits 1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from twisted.internet import task
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from bkfast import codec, loadgen
from bkfast.cli.bench_bookie import bookie_bench, format_phase, parse_bookie
from bkfast.cli.main import main
from bkfast.digests import DigestType
from bkfast.proto import OperationType, ProtocolVersion, Request, Response
from tests import VECTORS_DIR

VECTORS = json.loads((VECTORS_DIR / "protocol.json").read_text())["encoded"]
BY_NAME = {item["name"]: item for item in VECTORS}
DIGESTS = ["CRC32", "CRC32C", "MAC", "DUMMY"]


# --- pure helpers -------------------------------------------------------------------------------------
def test_percentile_nearest_rank():
    values = [float(i) for i in range(1, 1001)]          # 1..1000
    assert loadgen.percentile(values, 50) == 500.0
    assert loadgen.percentile(values, 99) == 990.0
    assert loadgen.percentile(values, 99.9) == 999.0
    assert loadgen.percentile(values, 100) == 1000.0
    assert loadgen.percentile([7.0], 99.9) == 7.0
    assert loadgen.percentile([], 50) is None
    assert loadgen.percentile([1.0, 2.0], 0) == 1.0


def test_summarize_keys_and_units():
    from collections import Counter
    res = loadgen.summarize([0.001, 0.002, 0.003, 0.004], 4, Counter({104: 1}), 2.0, 1000)
    assert res["adds"] == 5 and res["ok"] == 4 and res["errors"] == 1
    assert res["error_codes"] == {"104": 1}
    assert res["adds_per_s"] == 2.0 and res["mb_per_s"] == pytest.approx(0.002)
    assert res["mean_ms"] == pytest.approx(2.5)
    assert res["p50_ms"] == pytest.approx(2.0) and res["p99_ms"] == pytest.approx(4.0)
    assert res["p999_ms"] == pytest.approx(4.0) and res["max_ms"] == pytest.approx(4.0)
    empty = loadgen.summarize([], 0, Counter(), 0.0, 10)
    assert empty["mean_ms"] is None and empty["p99_ms"] is None and empty["adds_per_s"] == 0.0
    line = format_phase("latency", res)
    assert line.startswith("latency") and "errors 1" in line and "104: 1" in line


def test_parse_bookie():
    assert parse_bookie("127.0.0.1:3181") == ("127.0.0.1", 3181)
    assert parse_bookie("bookie-1.example:3181") == ("bookie-1.example", 3181)
    assert parse_bookie("[::1]:3181") == ("::1", 3181)
    for bad in ("nope", ":3181", "host:", "host:0", "host:70000", "host:x"):
        with pytest.raises(ValueError):
            parse_bookie(bad)


def test_cli_options():
    runner = CliRunner()
    res = runner.invoke(main, ["bench", "bookie", "--help"])
    assert res.exit_code == 0
    for opt in ("--bookie", "--protocol", "--latency-count", "--throughput-count", "--outstanding", "--size",
                "--ledgers", "--rate", "--first-ledger-id", "--connections", "--json"):
        assert opt in res.output
    assert runner.invoke(bookie_bench, []).exit_code == 2                       # --bookie is required
    assert runner.invoke(bookie_bench, ["--bookie", "nope"]).exit_code == 2
    assert runner.invoke(bookie_bench, ["--bookie", "h:1", "--protocol", "v4"]).exit_code == 2
    assert runner.invoke(bookie_bench, ["--bookie", "h:1", "--digest-type", "SHA9"]).exit_code == 2
    assert runner.invoke(bookie_bench, ["--bookie", "h:1", "--outstanding", "0"]).exit_code == 2


def test_unreachable_bookie_exits_2():
    with socket.socket() as s:                 # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "bookie",
                           "--bookie", f"127.0.0.1:{port}", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "refused" in proc.stderr.lower()


# --- request bytes against the Java vectors ----------------------------------------------------------
@pytest.mark.parametrize("digest", DIGESTS)
def test_v2_add_frame_matches_java(digest):
    item = BY_NAME[f"v2_add_req_{digest}"]
    f = item["fields"]
    w = loadgen.Writer("v2", f["ledgerId"], 1, 0, DigestType.parse(f["digestType"]),
                       f["password_utf8"].encode(), payload=bytes.fromhex(f["payload"]))
    assert w.master_key.hex() == f["masterKey"]
    out = codec.FrameBuilder()        # the load generator's send buffer, built in place
    out.add_add_request(w.master_key, f["ledgerId"], f["entryId"], f["lastAddConfirmed"], f["length"], w.payload,
                        w.digest_type, w.mac_key, f["flags"])
    assert out.take().hex() == item["hex"]


@pytest.mark.parametrize("digest", DIGESTS)
def test_v3_add_frame_matches_java(digest):
    item = BY_NAME[f"v3_add_req_{digest}"]
    f = item["fields"]
    w = loadgen.Writer("v3", f["ledgerId"], 1, 0, DigestType.parse(f["digestType"]),
                       f["password_utf8"].encode(), payload=bytes.fromhex(f["payload"]))
    out = codec.FrameBuilder()        # built in place, as the load generator sends it
    out.add_v3_add_request(w.master_key, f["ledgerId"], f["entryId"], f["lastAddConfirmed"], f["length"], w.payload,
                           w.digest_type, w.mac_key, f["txnId"])
    assert out.take().hex() == item["hex"]


def test_writer_sequence_round_robin():
    w = loadgen.Writer("v2", 1000, 3, 10, DigestType.CRC32C)
    out = codec.FrameBuilder()
    keys = [w.append_next(out) for _ in range(7)]
    assert keys == [(1000, 0), (1001, 0), (1002, 0), (1000, 1), (1001, 1), (1002, 1), (1000, 2)]
    assert out.frame_count == 7
    frames = codec.FrameSplitter().feed(out.take())
    assert [(r.ledger_id, r.entry_id) for r in map(codec.decode_request, frames)] == keys
    w3 = loadgen.Writer("v3", 5, 2, 10, DigestType.CRC32C)
    txn = w3.append_next(out)
    frame = out.take()
    req = Request.FromString(frame[4:])
    assert txn == 1 and req.header.txnId == 1 and req.header.version == ProtocolVersion.VERSION_THREE
    assert req.header.operation == OperationType.ADD_ENTRY
    entry = codec.decode_entry(req.addRequest.body, int(DigestType.CRC32C), expected_ledger_id=5,
                               expected_entry_id=0)
    assert bytes(entry.payload) == bytes(10)


# --- the connection Protocol over a StringTransport -----------------------------------------------
class SocketStringTransport(StringTransport):
    """A StringTransport whose handle is one end of a real socketpair: the protocol sends on it (as it
    does on a TCP transport's socket) and `value()` is what arrived at the other end."""

    def __init__(self, sndbuf: int | None = None):
        super().__init__()
        self.sock, self.peer = socket.socketpair()
        if sndbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            self.peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
        self.sock.setblocking(False)
        self.peer.setblocking(False)
        self.write_requests = 0

    def getHandle(self):
        return self.sock

    def startWriting(self):
        self.write_requests += 1

    def value(self):
        while True:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.io.write(chunk)
        return super().value()

    def close_sockets(self):
        self.sock.close()
        self.peer.close()


_TRANSPORTS: list[SocketStringTransport] = []


@pytest.fixture(autouse=True)
def _close_socketpairs():
    yield
    while _TRANSPORTS:
        _TRANSPORTS.pop().close_sockets()


def _conn(v3: bool, sndbuf: int | None = None):
    proto = loadgen.BenchProtocol(v3)
    tr = SocketStringTransport(sndbuf)
    _TRANSPORTS.append(tr)
    proto.makeConnection(tr)
    return proto, tr


def _sent_frames(tr):
    frames = codec.FrameSplitter().feed(tr.value())
    tr.clear()
    return frames


def _v2_ack(frame_body, rc=0):
    req = codec.decode_request(frame_body)
    return codec.encode_add_response(rc, req.ledger_id, req.entry_id)


def _v3_ack(frame_body, status=0):
    req = Request.FromString(frame_body)
    resp = Response()
    resp.header.version = ProtocolVersion.VERSION_THREE
    resp.header.operation = OperationType.ADD_ENTRY
    resp.header.txnId = req.header.txnId
    resp.status = status
    resp.addResponse.status = status
    resp.addResponse.ledgerId = req.addRequest.ledgerId
    resp.addResponse.entryId = req.addRequest.entryId
    data = resp.SerializeToString()
    return len(data).to_bytes(4, "big") + data


def test_v2_closed_loop_one_write_per_batch_and_errors():
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 77, 2, 100, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=7, window=3)
    results = []
    started = time.perf_counter()
    phase.start().addCallback(results.append)
    assert proto.writes == 1
    first = _sent_frames(tr)
    assert len(first) == 3 and len(proto.pending) == 3
    # answer out of order, one with EFENCED, all in one chunk: the 3 freed slots refill in one write
    acks = _v2_ack(first[2]) + _v2_ack(first[0], rc=104) + _v2_ack(first[1])
    proto.dataReceived(acks[:5])                  # split mid-frame: the splitter must cope
    proto.dataReceived(acks[5:])
    assert proto.writes == 2
    second = _sent_frames(tr)
    assert len(second) == 3
    proto.dataReceived(b"".join(_v2_ack(f) for f in second))
    third = _sent_frames(tr)
    assert len(third) == 1 and proto.writes == 3
    assert not results
    proto.dataReceived(_v2_ack(third[0]))
    assert tr.value() == b""                       # nothing beyond total
    (res,) = results
    assert res["adds"] == 7 and res["ok"] == 6 and res["errors"] == 1 and res["error_codes"] == {"104": 1}
    # every add was sent and answered inside this test: its latency, in ms, is within the test's own time
    assert 0 < res["p50_ms"] <= (time.perf_counter() - started) * 1000
    assert proto.phase is None and not proto.pending


def test_a_send_the_socket_does_not_take_waits_for_writable_and_keeps_the_order():
    # A 64 KiB socket buffer takes a fraction of 200 x 16 KiB adds: the rest stays in the connection's
    # send buffer until Twisted reports the socket writable (resumeProducing of its pull producer).
    proto, tr = _conn(False, sndbuf=64 * 1024)
    assert tr.producer is proto and not tr.streaming
    w = loadgen.Writer("v2", 9, 1, 16384, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=200, window=200)
    phase.start()
    assert len(proto.out) > 0 and tr.write_requests == 1
    received, rounds = b"", 0
    while len(proto.out) or rounds == 0:
        received += tr.value()
        tr.clear()
        proto.resumeProducing()
        rounds += 1
        assert rounds < 10_000
    frames = codec.FrameSplitter().feed(received + tr.value())
    assert len(frames) == 200
    assert [codec.decode_request(f).entry_id for f in frames] == list(range(200))
    assert proto.bytes_sent == sum(4 + len(f) for f in frames)
    assert tr.write_requests > 1


def test_close_unregisters_the_pull_producer_first():
    proto, tr = _conn(False)
    proto.close()
    assert tr.producer is None and tr.disconnecting


def test_v2_unknown_response_is_ignored():
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("latency", w, [proto], total=1, window=1)
    results = []
    phase.start().addCallback(results.append)
    (frame,) = _sent_frames(tr)
    proto.dataReceived(codec.encode_add_response(0, 999, 0))      # not ours
    assert not results
    proto.dataReceived(_v2_ack(frame))
    assert results and results[0]["ok"] == 1


def test_v3_matching_by_txn_id():
    proto, tr = _conn(True)
    w = loadgen.Writer("v3", 500, 1, 64, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=4, window=4)
    results = []
    phase.start().addCallback(results.append)
    frames = _sent_frames(tr)
    assert len(frames) == 4 and proto.writes == 1
    assert sorted(proto.pending) == [1, 2, 3, 4]
    proto.dataReceived(_v3_ack(frames[3]) + _v3_ack(frames[1], status=506) + _v3_ack(frames[0]))
    assert not results
    proto.dataReceived(_v3_ack(frames[2]))
    (res,) = results
    assert res["ok"] == 3 and res["errors"] == 1 and res["error_codes"] == {"506": 1}


def test_connection_loss_fails_unanswered_adds():
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=10, window=4)
    results = []
    phase.start().addCallback(results.append)
    frames = _sent_frames(tr)
    proto.dataReceived(_v2_ack(frames[0]))
    proto.connectionLost(Failure(ConnectionError("reset")))
    (res,) = results
    assert res["ok"] == 1 and res["errors"] == 9 and res["failure"].startswith("connection lost")


def test_bad_frame_fails_phase():
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=2, window=2)
    results = []
    phase.start().addCallback(results.append)
    proto.dataReceived(b"\xff\xff\xff\xff")                        # negative frame length
    (res,) = results
    assert res["errors"] == 2 and "bad frame" in res["failure"]
    assert tr.disconnecting


def test_timeout_fails_unanswered_adds():
    clock = task.Clock()
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("throughput", w, [proto], total=3, window=3, timeout_s=5, clock=clock)
    results = []
    phase.start().addCallback(results.append)
    clock.advance(5)
    (res,) = results
    assert res["errors"] == 3 and "timed out" in res["failure"]


def test_rate_phase_latency_from_scheduled_time():
    clock = task.Clock()
    proto, tr = _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("rate", w, [proto], total=5, window=100, rate=1000.0, clock=clock)
    results = []
    phase.start().addCallback(results.append)
    # the first add is due at t0; later ones are issued by ticks (or responses) once due
    starts = sorted(proto.pending.values())
    assert starts[0] == phase.t0
    for i, s in enumerate(starts):
        assert s == pytest.approx(phase.t0 + i / 1000.0)
    deadline = time.perf_counter() + 5
    while phase.issued < 5 and time.perf_counter() < deadline:
        clock.advance(0.001)
        time.sleep(0.001)
    assert phase.issued == 5
    assert sorted(proto.pending.values()) == pytest.approx([phase.t0 + i / 1000.0 for i in range(5)])
    proto.dataReceived(b"".join(_v2_ack(f) for f in _sent_frames(tr)))
    (res,) = results
    assert res["ok"] == 5 and res["target_adds_per_s"] == 1000.0


# --- against a real bkfast bookie (`bkfast bookie` subprocess, DbLedgerStorage) -------------------
@pytest.fixture(scope="module")
def bookie_addr(tmp_path_factory):
    import os
    import select
    import signal

    base = tmp_path_factory.mktemp("bench-bookie")
    (base / "journal").mkdir()
    (base / "ledgers").mkdir()
    cmd = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--no-metadata", "--port", "0",
           "-D", "listeningInterface=127.0.0.1",
           "-D", f"journalDirectory={base / 'journal'}",
           "-D", f"ledgerDirectories={base / 'ledgers'}",
           "-D", "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"]
    err = open(base / "bookie.stderr", "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=str(base))
    try:
        addr, buf, deadline = None, b"", time.monotonic() + 60
        while addr is None and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    if line.startswith("bookie listening on "):
                        addr = line.rsplit(" ", 1)[1]
        if addr is None:
            raise RuntimeError(f"bookie did not start: {(base / 'bookie.stderr').read_text()[-2000:]}")
        yield addr
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        proc.stdout.close()
        err.close()


def _run_bench(addr, *args):
    proc = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "bookie", "--bookie", addr,
                           "--json", *args], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _sane(res, count):
    assert res["adds"] == count and res["ok"] == count and res["errors"] == 0 and res["error_codes"] == {}
    assert res["adds_per_s"] > 0 and res["mb_per_s"] > 0 and res["duration_s"] > 0
    assert 0 < res["p50_ms"] <= res["p99_ms"] <= res["p999_ms"] <= res["max_ms"] < 60_000
    assert 0 < res["mean_ms"] <= res["max_ms"]


@pytest.mark.parametrize("protocol", ["v2", "v3"])
def test_real_bookie_latency_and_throughput(bookie_addr, protocol):
    doc = _run_bench(bookie_addr, "--protocol", protocol, "--latency-count", "200", "--throughput-count", "5000")
    assert doc["errors"] == 0 and doc["protocol"] == protocol and doc["bookie"] == bookie_addr
    _sane(doc["latency"], 200)
    _sane(doc["throughput"], 5000)
    assert "rate" not in doc


def test_real_bookie_rate_connections_ledgers(bookie_addr):
    doc = _run_bench(bookie_addr, "--latency-count", "0", "--throughput-count", "2000", "--rate", "2000",
                     "--rate-count", "2000", "--connections", "2", "--ledgers", "3", "--size", "100",
                     "--first-ledger-id", "424242000")
    assert "latency" not in doc and doc["first_ledger_id"] == 424242000
    _sane(doc["throughput"], 2000)
    _sane(doc["rate"], 2000)
    assert doc["rate"]["target_adds_per_s"] == 2000.0
    assert doc["rate"]["duration_s"] >= 0.9                 # 2000 adds on a 2000/s schedule take ~1 s


def test_real_bookie_errors_exit_nonzero(bookie_addr):
    # same ledger ids again with another password: the bookie refuses (EUA) -> counted, exit 1
    _run_bench(bookie_addr, "--latency-count", "5", "--throughput-count", "0", "--first-ledger-id", "737373000")
    proc = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "bookie", "--bookie", bookie_addr,
                           "--json", "--latency-count", "5", "--throughput-count", "0",
                           "--first-ledger-id", "737373000", "--password", "other"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["errors"] == 5 and doc["latency"]["ok"] == 0 and doc["latency"]["error_codes"] == {"102": 5}


def test_rate_phase_spreads_due_adds_over_connections():
    clock = task.Clock()
    (p1, t1), (p2, t2) = _conn(False), _conn(False)
    w = loadgen.Writer("v2", 1, 1, 10, DigestType.CRC32C)
    phase = loadgen.Phase("rate", w, [p1, p2], total=10, window=100, rate=1e9, clock=clock)
    results = []
    phase.start().addCallback(results.append)       # at 1e9/s everything is due at once
    f1, f2 = _sent_frames(t1), _sent_frames(t2)
    assert len(f1) == 5 and len(f2) == 5 and p1.writes == 1 and p2.writes == 1
    p2.dataReceived(b"".join(_v2_ack(f) for f in f2))
    p1.dataReceived(b"".join(_v2_ack(f) for f in f1))
    assert results and results[0]["ok"] == 10


def test_real_bookie_samples_out_has_every_add_of_the_last_phase(bookie_addr, tmp_path):
    import time
    from array import array

    out = tmp_path / "samples.bin"
    before = time.perf_counter()
    doc = _run_bench(bookie_addr, "--latency-count", "0", "--throughput-count", "300", "--rate", "1000",
                     "--rate-count", "500", "--samples-out", str(out))
    after = time.perf_counter()
    samples = array("d")
    samples.frombytes(out.read_bytes())
    starts, latencies = samples[0::2], samples[1::2]
    assert len(latencies) == doc["rate"]["ok"] == 500               # the rate phase only (the last one)
    assert before < min(starts) <= max(starts) < after               # the same monotonic clock
    assert round(max(latencies) * 1000.0, 4) == doc["rate"]["max_ms"]
