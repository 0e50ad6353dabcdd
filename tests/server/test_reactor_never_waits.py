"""The bookie's reactor keeps answering while the disk is slow, the write cache is full, or a client does
not read its answers (issue 12 point 3, issue 18 point 1). Real `bkfast bookie` processes; the slow disk
is made with the bookie's test hooks (testEntryLogReadDelayMs, testWriteCacheFlushDelayMs), which delay
the real entry-log read and the real flush."""

from __future__ import annotations

import socket
import statistics
import time

import pytest

from bkfast.codec import DigestType, decode_response, encode_add_request, encode_read_request, master_key
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.server_support import BookieProcess, Client

KEY = master_key("secret")
CRC = DigestType.CRC32C
PROBES = 10
FAST_S = 0.05


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _probe_reads(c: Client, ledger: int, entry: int) -> list[float]:
    """Latency of PROBES reads of one cached entry, 100 ms apart."""
    latencies = []
    for _ in range(PROBES):
        t0 = time.perf_counter()
        c.send_raw(encode_read_request(ledger, entry))
        r = decode_response(c.recv_body())
        latencies.append(time.perf_counter() - t0)
        assert r.rc == 0 and r.entry_id == entry
        time.sleep(0.1)
    return latencies


def _assert_responsive(latencies: list[float]) -> None:
    # Before this change every probe waited seconds behind the blocked reactor.
    fast = sum(1 for x in latencies if x <= FAST_S)
    assert fast >= PROBES - 2 and max(latencies) < 1.0, [round(x * 1000, 1) for x in latencies]


def test_reactor_answers_cached_reads_while_a_disk_read_is_slow(tmp_path):
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1", "-D", "testEntryLogReadDelayMs=3000").start()
    try:
        with b.connect() as writer:
            n = 700  # > half the 1 MiB write cache: the first ~480 entries are flushed to the entry log
            writer.send_raw(b"".join(encode_add_request(KEY, 1, e, e - 1, e + 1, b"x" * 1024, CRC)
                                     for e in range(n)))
            assert all(decode_response(writer.recv_body()).rc == 0 for _ in range(n))
        time.sleep(1.0)  # the flush of the first half completes
        with b.connect() as slow, b.connect() as probe:
            t0 = time.perf_counter()
            slow.send_raw(encode_read_request(1, 0))        # from the entry log: 3 s
            latencies = _probe_reads(probe, 1, n - 1)       # still in the write cache
            r = decode_response(slow.recv_body())
            assert r.rc == 0 and r.entry_id == 0
            assert time.perf_counter() - t0 >= 2.5           # the slow read really was slow
        _assert_responsive(latencies)
    finally:
        b.stop()


def test_reactor_answers_reads_while_the_write_cache_is_full_and_no_add_is_lost(tmp_path):
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1",
                      "-D", "testWriteCacheFlushDelayMs=2000").start()
    try:
        with b.connect() as writer, b.connect() as probe:
            n = 1200  # ~2.4 write-cache halves: adds wait for two slow flushes
            writer.send_raw(b"".join(encode_add_request(KEY, 2, e, e - 1, e + 1, b"w" * 1024, CRC)
                                     for e in range(n)))
            time.sleep(0.3)
            latencies = _probe_reads(probe, 2, 0)
            acked = [decode_response(writer.recv_body()) for _ in range(n)]
            assert sorted(r.entry_id for r in acked) == list(range(n))
            assert all(r.rc == 0 for r in acked)
            for e in (0, n // 2, n - 1):
                probe.send_raw(encode_read_request(2, e))
                assert decode_response(probe.recv_body()).rc == 0
        _assert_responsive(latencies)
    finally:
        b.stop()


def _v3_read(txn: int, ledger: int, entry: int, **fields) -> bytes:
    """One framed v3 READ_ENTRY request (fields: more ReadRequest fields, e.g. a long poll's)."""
    request = pb.Request()
    request.header.version, request.header.operation, request.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    request.readRequest.ledgerId, request.readRequest.entryId = ledger, entry
    for k, v in fields.items():
        setattr(request.readRequest, k, v)
    body = request.SerializeToString()
    return len(body).to_bytes(4, "big") + body


# What the attacker sends, never reading an answer: 2,000 reads of ledger 5's 1 MiB entry 0 (2 GB of
# answers) over v2 or v3, or 2,000 v3 long polls for it (previousLAC 0, answered with the entry once the
# probe's adds to ledger 5 move its LAC past 0, and at once after that).
ATTACKS = {
    "v2": lambda: encode_read_request(5, 0) * 2000,
    "v3": lambda: b"".join(_v3_read(t, 5, 0) for t in range(2000)),
    "v3-long-poll": lambda: b"".join(_v3_read(t, 5, 0, previousLAC=0, timeOut=60_000) for t in range(2000)),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_client_that_never_reads_answers_cannot_grow_the_bookie_or_slow_others(tmp_path, attack):
    b = BookieProcess(tmp_path, "-D", "waitTimeoutOnResponseBackpressureMs=4000").start()
    try:
        with b.connect() as c:
            c.send_raw(encode_add_request(KEY, 5, 0, -1, 1 << 20, b"m" * (1 << 20), CRC))
            assert decode_response(c.recv_body()).rc == 0
        rss_before = _rss_bytes(b.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect((b.host, b.port))
        attacker.sendall(ATTACKS[attack]())
        peak = rss_before
        latencies = []
        with b.connect() as c:
            stop_at = time.monotonic() + 3.0
            e = 1
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                c.send_raw(encode_add_request(KEY, 5, e, e - 1, e + 1, b"n" * 100, CRC))
                assert decode_response(c.recv_body()).rc == 0
                latencies.append(time.perf_counter() - t0)
                peak = max(peak, _rss_bytes(b.pid))
                e += 1
        # Before: RSS grew by gigabytes in these seconds and each add took seconds.
        assert peak - rss_before < 200 * 1024 * 1024, (rss_before, peak)
        assert statistics.median(latencies) < 0.1, statistics.median(latencies)
        # The attacker did not drain within waitTimeoutOnResponseBackpressureMs: disconnected.
        time.sleep(2.0)
        attacker.settimeout(10)
        closed = False
        try:
            while True:
                if not attacker.recv(1 << 20):
                    closed = True
                    break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        assert closed
        attacker.close()
        assert "has not read its answers" in b.log(tail=None)
        with b.connect() as c:  # the bookie serves on
            c.send_raw(encode_read_request(5, e - 1))
            assert decode_response(c.recv_body()).rc == 0
    finally:
        b.stop()


def test_adds_waiting_for_room_past_the_throttle_time_are_refused_and_later_requests_go_on(tmp_path):
    """A flush that takes longer than dbStorage_maxThrottleTimeMs: the held adds get ETOOMANYREQUESTS at
    the deadline (not when room finally comes) and the read behind them on the same connection is answered."""
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1", "-D", "testWriteCacheFlushDelayMs=8000",
                      "-D", "dbStorage_maxThrottleTimeMs=1000").start()
    try:
        with b.connect() as c:
            n = 1200
            t0 = time.perf_counter()
            c.send_raw(b"".join(encode_add_request(KEY, 3, e, e - 1, e + 1, b"t" * 1024, CRC) for e in range(n))
                       + encode_read_request(3, 0))
            answers = [decode_response(c.recv_body()) for _ in range(n + 1)]
            elapsed = time.perf_counter() - t0
        adds = [r for r in answers if r.opcode == 1]
        reads = [r for r in answers if r.opcode == 2]
        assert len(reads) == 1 and reads[0].rc == 0
        assert {r.rc for r in adds} <= {0, 106} and any(r.rc == 106 for r in adds)
        # Before: the connection waited for the 8 s flush; now the deadline (1 s) answers.
        assert elapsed < 6.0, elapsed
    finally:
        b.stop()


def test_long_polls_woken_together_are_all_answered_as_the_client_reads(tmp_path):
    """The other side of the long-poll bound: answers held until the peer drains its output all come."""
    b = BookieProcess(tmp_path).start()
    try:
        with b.connect() as writer, b.connect() as poller:
            writer.send_raw(encode_add_request(KEY, 7, 0, -1, 1 << 20, b"L" * (1 << 20), CRC))
            assert decode_response(writer.recv_body()).rc == 0
            n = 40                                    # 40 MiB of answers: 40 times the output limit
            poller.send_raw(b"".join(_v3_read(t, 7, 0, previousLAC=0, timeOut=30_000) for t in range(n)))
            time.sleep(0.5)                           # all waiting: the LAC is -1 (0 after entry 1)
            for e in (1, 2):                          # entry 2 carries LAC 1: every poll wakes at once
                writer.send_raw(encode_add_request(KEY, 7, e, e - 1, e + 1, b"s", CRC))
                assert decode_response(writer.recv_body()).rc == 0
            answers = [pb.Response.FromString(poller.recv_body()) for _ in range(n)]
        assert sorted(a.header.txnId for a in answers) == list(range(n))
        assert all(a.status == pb.EOK and a.readResponse.body[-(1 << 20):] == b"L" * (1 << 20) for a in answers)
    finally:
        b.stop()


def test_client_that_never_reads_answers_of_entries_not_in_memory_cannot_grow_the_bookie(tmp_path):
    """Reads that memory cannot answer go to the read pool, where each brings back a whole entry: a
    connection may have at most 4x its output limit of them in flight (at least 8 reads). Before, one
    socket read's 2,000 READs of 1 MiB entries were all put on the pool at once: 2 GB of answers."""
    entries = 48
    args = ("-D", "waitTimeoutOnResponseBackpressureMs=4000", "-D", "dbStorage_readAheadCacheMaxSizeMb=1",
            "-D", "dbStorage_readAheadCacheBatchSize=1")
    b = BookieProcess(tmp_path, *args).start()
    try:
        with b.connect() as c:
            for e in range(entries):
                c.send_raw(encode_add_request(KEY, 6, e, e - 1, (e + 1) << 20, bytes([e]) * (1 << 20), CRC))
            for _ in range(entries):
                assert decode_response(c.recv_body()).rc == 0
    finally:
        assert b.stop() == 0
    b = BookieProcess(tmp_path, *args).start()   # nothing of ledger 6 in memory any more
    try:
        rss_before = _rss_bytes(b.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect((b.host, b.port))
        attacker.sendall(b"".join(encode_read_request(6, i % entries) for i in range(2000)))
        peak = rss_before
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            peak = max(peak, _rss_bytes(b.pid))
            time.sleep(0.02)
        assert peak - rss_before < 200 * 1024 * 1024, (rss_before, peak)
        assert "bookie-read" not in b.log(tail=None)    # no read failed on the pool
        with b.connect() as c:  # other connections are served, from the disk too
            c.send_raw(encode_read_request(6, entries - 1))
            r = decode_response(c.recv_body())
            assert r.rc == 0 and bytes(r.data[-1:]) == bytes([entries - 1])
        attacker.close()
    finally:
        b.stop()
