"""The add worker (numAddWorkerThreads=1, bkfast.net.add_workers): a socket read's adds are split and taken
on `add-worker-0`, not the reactor. A real Bookie (DbLedgerStorage, journal sync on) and its server on the
tests' reactor thread, real sockets; the case tested hardest is a fence from one connection while another
connection's adds of the same ledger are being taken on the worker (issue 27: "fence vs in-flight adds on
another worker")."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bkfast import _codec, _refcodec
from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    OP_ADD,
    decode_response,
    encode_add_request,
    encode_read_request,
)
from bkfast.conf import ServerConfiguration
from bkfast.errors import V2Rc
from bkfast.net.add_workers import WORKER_BACKLOG_BYTES, carries_adds
from bkfast.net.server import ADD_WORKER_MIN_CORES, RECV_BUFFER_SIZE, add_worker_threads_from_conf
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.bookie.test_fast_adds import _v3_add, _v3_long_poll
from tests.server.test_reactor_never_waits import CRC, KEY, InProcessBookie
from tests.server_support import Client
from tests.waiting import wait_until

DB = "DbLedgerStorage"


@pytest.fixture
def worker_bookie(tmp_path):
    b = InProcessBookie(tmp_path, DB, numAddWorkerThreads="1")
    try:
        assert b.factory.add_worker is not None
        yield b
    finally:
        b.stop()


def _adds(ledger: int, entries, payload: bytes = b"w" * 100) -> bytes:
    return b"".join(encode_add_request(KEY, ledger, e, e - 1, e + 1, payload, CRC) for e in entries)


def _settled(b: InProcessBookie) -> bool:
    worker = b.factory.add_worker
    return b.factory.pending_adds == 0 and worker.taken == worker.counted


def test_adds_taken_on_the_add_worker_are_answered_in_entry_order_and_stored(worker_bookie):
    """Several connections pipeline thousands of v2 adds of many ledgers in reads of every size: every add is
    answered EOK, each ledger's answers in entry order, most adds were taken on the worker, and every entry
    reads back; afterwards nothing is left counted in flight."""
    b = worker_bookie
    worker = b.factory.add_worker
    assert worker._thread.name == "add-worker-0"
    clients = [b.connect() for _ in range(3)]
    ledgers = {c: [100 + 10 * i + k for k in range(5)] for i, c in enumerate(clients)}
    per_ledger = 400
    rng = random.Random(7)
    for c in clients:
        stream = b"".join(_adds(ledger, [e]) for e in range(per_ledger) for ledger in ledgers[c])
        at = 0
        while at < len(stream):                 # cut anywhere, frames split across socket reads
            step = rng.randint(1, 20_000)
            c.send_raw(stream[at:at + step])
            at += step
    for c in clients:
        seen: dict[int, list[int]] = {ledger: [] for ledger in ledgers[c]}
        for _ in range(per_ledger * len(ledgers[c])):
            r = decode_response(c.recv_body())
            assert r.rc == V2Rc.EOK, r
            seen[r.ledger_id].append(r.entry_id)
        assert all(entries == list(range(per_ledger)) for entries in seen.values()), seen
    assert worker.taken > per_ledger * 5, "most adds were taken on the worker"
    for c in clients:
        for ledger in ledgers[c]:
            c.send_raw(b"".join(encode_read_request(ledger, e) for e in (0, per_ledger // 2, per_ledger - 1)))
            assert all(decode_response(c.recv_body()).rc == V2Rc.EOK for _ in range(3))
        c.close()
    wait_until("every taken add counted and answered", lambda: _settled(b))


def test_v3_adds_on_the_add_worker_keep_their_txn_ids(worker_bookie):
    b = worker_bookie
    with b.connect() as c:
        c.send_raw(_v3_add(7, 0, txn=1000))          # the general path admits the ledger
        answers = [pb.Response.FromString(c.recv_body())]
        c.send_raw(b"".join(_v3_add(7, e, txn=1000 + e) for e in range(1, 600)))
        answers += [pb.Response.FromString(c.recv_body()) for _ in range(599)]
    assert [(a.header.txnId, a.status, a.addResponse.entryId) for a in answers] == [
        (1000 + e, pb.EOK, e) for e in range(600)]
    assert b.factory.add_worker.taken > 0


def _stream_adds(c: Client, ledger: int, n: int, chunk: int) -> None:
    """Entries 1 to n - 1 (entry 0 is added before the stream), `chunk` a send."""
    for first in range(1, n, chunk):
        c.send_raw(_adds(ledger, range(first, min(n, first + chunk))))
        time.sleep(0.0005)


def _recovered_last(b: InProcessBookie, ledger: int, n: int) -> int:
    """What a recovering client finds after the fence: the last entry of the prefix the bookie can read."""
    with b.connect() as c:
        c.send_raw(b"".join(encode_read_request(ledger, e) for e in range(n)))
        rcs = {}
        for _ in range(n):
            r = decode_response(c.recv_body())
            rcs[r.entry_id] = r.rc
    last = -1
    while last + 1 < n and rcs[last + 1] == V2Rc.EOK:
        last += 1
    return last


def test_a_fence_while_another_connections_adds_are_on_the_worker_loses_no_acknowledged_add(worker_bookie):
    """Round after round, a writer streams adds of a ledger while another connection fences it at a random
    moment. Once the fence is answered, every add the writer gets EOK for must be one a recovery can read
    (stored before the fence), the EOKs are a prefix of the entries, and every add after it is EFENCED:
    a run on the worker holds the ledger lock, so the fence comes between two runs, never inside one."""
    b = worker_bookie
    rng = random.Random(11)
    rounds, n = 16, 3000
    splits = 0
    for round_no in range(rounds):
        ledger = 5000 + round_no
        with b.connect() as writer, b.connect() as fencer:
            writer.send_raw(_adds(ledger, [0]))             # admitted by the general path: then runs take its adds
            assert decode_response(writer.recv_body()).rc == V2Rc.EOK
            streaming = threading.Thread(target=_stream_adds, args=(writer, ledger, n, rng.randint(20, 200)))
            streaming.start()
            time.sleep(rng.uniform(0.0, 0.03))
            fencer.send_raw(encode_read_request(ledger, -1, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, KEY))
            assert decode_response(fencer.recv_body()).rc in (V2Rc.EOK, V2Rc.ENOENTRY)
            recovered = _recovered_last(b, ledger, n)
            streaming.join()
            rcs = {0: V2Rc.EOK}
            for _ in range(n - 1):
                r = decode_response(writer.recv_body())
                rcs[r.entry_id] = r.rc
        acked = sorted(e for e, rc in rcs.items() if rc == V2Rc.EOK)
        assert acked == list(range(len(acked))), "the acknowledged adds are a prefix of the entries"
        assert all(rc == V2Rc.EFENCED for e, rc in rcs.items() if e >= len(acked)), rcs
        assert acked[-1] <= recovered, (round_no, acked[-1], recovered)
        splits += 0 < len(acked) - 1 < n - 1
    assert splits, "no round fenced the ledger while its adds were streaming"
    assert b.factory.add_worker.taken > 0
    wait_until("every taken add counted and answered", lambda: _settled(b))


def test_connections_that_go_away_with_reads_at_the_worker_leave_nothing_counted(worker_bookie):
    """Clients send bursts of adds and close without reading the answers, some while their reads are at the
    worker: the bookie goes on serving, and every add it took is counted out again."""
    b = worker_bookie
    with b.connect() as c:
        c.send_raw(_adds(77, range(3)))
        assert all(decode_response(c.recv_body()).rc == V2Rc.EOK for _ in range(3))
    for i in range(20):
        c = b.connect()
        first = 3 + 501 * i
        c.send_raw(_adds(77, [first]))              # a connection's first read tells its protocol
        assert decode_response(c.recv_body()).rc == V2Rc.EOK
        c.send_raw(_adds(77, range(first + 1, first + 501)))
        c.close()
    wait_until("every taken add counted and answered", lambda: _settled(b))
    with b.connect() as c:
        c.send_raw(_adds(78, range(50)))
        assert all(decode_response(c.recv_body()).rc == V2Rc.EOK for _ in range(50))
    assert b.factory.add_worker.taken > 0


def test_a_long_poll_is_answered_by_adds_taken_on_the_worker(worker_bookie):
    """A v3 long poll on one connection waits for ledger 41's LAC to pass 2; the writer's adds, taken on the
    worker, carry LAC 7: the worker leaves the LACs to the reactor, which advances them and wakes the poll."""
    b = worker_bookie
    with b.connect() as writer, b.connect() as reader:
        writer.send_raw(_adds(41, range(2)))
        assert all(decode_response(writer.recv_body()).rc == V2Rc.EOK for _ in range(2))
        reader.send_raw(_v3_long_poll(41, 2, 60_000, txn=77))
        wait_until("the ledger watched", lambda: b.bookie.fast_adds.run.watches(41))
        taken = b.factory.add_worker.taken
        writer.send_raw(_adds(41, range(2, 9)))
        assert all(decode_response(writer.recv_body()).rc == V2Rc.EOK for _ in range(7))
        answer = pb.Response.FromString(reader.recv_body())
        assert b.factory.add_worker.taken > taken, "the adds that woke the poll were taken on the worker"
    assert answer.header.txnId == 77 and answer.status == pb.EOK
    assert answer.readResponse.maxLAC == 7 and answer.readResponse.entryId == 3


def test_the_add_worker_runs_when_configured_and_by_default_on_hosts_of_four_cores_or_more():
    unset = ServerConfiguration({})
    assert add_worker_threads_from_conf(unset, cores=2) == 0
    assert add_worker_threads_from_conf(unset, cores=ADD_WORKER_MIN_CORES) == 1
    assert add_worker_threads_from_conf(unset, cores=64) == 1
    for wanted, runs in ((0, 0), (1, 1), (8, 1)):
        conf = ServerConfiguration({"numAddWorkerThreads": wanted})
        assert add_worker_threads_from_conf(conf, cores=2) == runs
        assert add_worker_threads_from_conf(conf, cores=64) == runs


@pytest.mark.parametrize("splitter_class", [_codec.FrameSplitter, _refcodec.FrameSplitter])
def test_only_reads_whose_first_frame_is_an_add_go_to_the_worker_as_java_encodes_them(splitter_class):
    """The reactor peeks at a read's first frame (Java 4.16.7's request bytes, tests/vectors/protocol.json):
    an ADD (v2) or ADD_ENTRY (v3) goes to the worker; reads, LAC and every other request stay on the reactor;
    cut anywhere, the frame's start the splitter holds from the read before says it."""
    vectors = json.loads((Path(__file__).parent.parent / "vectors" / "protocol.json").read_text())
    requests = [v for v in vectors["encoded"] if v["kind"] == "request" and "hex" in v]
    assert {v["protocol"] for v in requests} == {"v2", "v3"} and len(requests) > 20
    for v in requests:
        frame = bytes.fromhex(v["hex"])
        for cut in range(0, 12):
            conn = SimpleNamespace(v2=v["protocol"] == "v2", splitter=splitter_class(1 << 20))
            assert conn.splitter.feed(frame[:cut]) == []
            assert carries_adds(conn, frame[cut:]) == (v["op"] == "ADD_ENTRY"), (v["name"], cut)


def test_a_slow_worker_stops_the_reactor_reading_the_connection_instead_of_piling_up_its_reads(worker_bookie):
    """While a connection's read is held at the worker (here: the worker made to wait), its later reads
    pile up on the reactor only to WORKER_BACKLOG_BYTES, then the socket is not read; once the read is
    back, reading resumes and every add is answered."""
    b = worker_bookie
    worker = b.factory.add_worker
    release = threading.Event()
    real_take = worker._take

    def waiting_take(read):
        release.wait(30)
        real_take(read)
    with b.connect() as c:
        c.send_raw(_adds(61, [0]))
        assert decode_response(c.recv_body()).rc == V2Rc.EOK
        (conn,) = [p for p in b.factory.connections if p.v2]
        worker._take = waiting_take
        n = 20_000                                    # ~21 MB of adds: more than the bound and the socket buffers
        sending = threading.Thread(target=c.send_raw, args=(_adds(61, range(1, n + 1), b"s" * 1000),))
        sending.start()
        try:
            wait_until("reading stopped", lambda: conn.worker_paused_reading)
            time.sleep(0.3)
            assert conn.worker_backlog_bytes <= WORKER_BACKLOG_BYTES + RECV_BUFFER_SIZE, conn.worker_backlog_bytes
            assert sending.is_alive(), "the bookie stopped reading: the client's send waits"
        finally:
            worker._take = real_take
            release.set()
        sending.join(30)
        answers = [decode_response(c.recv_body()) for _ in range(n)]
    assert all(r.rc == V2Rc.EOK for r in answers) and sorted(r.entry_id for r in answers) == list(range(1, n + 1))
    assert not conn.worker_paused_reading
    wait_until("every taken add counted and answered", lambda: _settled(b))


def test_reads_that_waited_at_the_worker_are_split_in_turn_and_a_fall_through_sends_every_later_add_on(worker_bookie):
    """Reads of a connection that waited behind its read at the worker go over together, unjoined. Within
    them the run takes adds only up to the first frame it cannot take (here a read request); every add
    after it, in the same read or a later one, goes to the general path behind it, as one read's split
    would leave them. Every add is answered in entry order and the read is answered."""
    b = worker_bookie
    worker = b.factory.add_worker
    release = threading.Event()
    real_take = worker._take
    handed: list[tuple[int, int]] = []         # (pieces, adds the run took) per read at the worker

    def recording_take(read):
        release.wait(30)
        pieces = len(read.pieces)
        real_take(read)
        handed.append((pieces, read.count))
    with b.connect() as c:
        c.send_raw(_adds(71, [0]))
        assert decode_response(c.recv_body()).rc == V2Rc.EOK
        (conn,) = [p for p in b.factory.connections if p.v2]
        worker._take = recording_take
        try:
            c.send_raw(_adds(71, range(1, 51)))
            wait_until("the first read at the worker", lambda: conn.worker_backlog is not None)
            c.send_raw(_adds(71, range(51, 61)) + encode_read_request(71, 0) + _adds(71, range(61, 101)))
            wait_until("the second read waits", lambda: conn.worker_backlog)
            waited = conn.worker_backlog_bytes
            c.send_raw(_adds(71, range(101, 151)))
            wait_until("the third read waits", lambda: conn.worker_backlog_bytes > waited)
        finally:
            release.set()
        answers = [decode_response(c.recv_body()) for _ in range(151)]
        worker._take = real_take
    assert all(r.rc == V2Rc.EOK for r in answers), answers
    added = [r.entry_id for r in answers if r.opcode == OP_ADD]
    assert added == list(range(1, 151))
    assert [r.entry_id for r in answers if r.opcode != OP_ADD] == [0]
    assert handed[:2] == [(1, 50), (2, 10)], handed
    wait_until("every taken add counted and answered", lambda: _settled(b))
