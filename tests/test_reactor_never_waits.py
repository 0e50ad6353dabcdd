"""The bookie's reactor keeps answering while the disk is slow, the write cache is full, or a client does
not read its answers (issue 12 point 3, issue 18 point 1). Real `bkfast bookie` processes; the slow disk
is made with the bookie's test hooks (testEntryLogReadDelayMs, testWriteCacheFlushDelayMs), which delay
the real entry-log read and the real flush."""

from __future__ import annotations

import socket
import statistics
import time

from bkfast.codec import DigestType, decode_response, encode_add_request, encode_read_request, master_key

from .server_support import BookieProcess, Client

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


def test_client_that_never_reads_answers_cannot_grow_the_bookie_or_slow_others(tmp_path):
    b = BookieProcess(tmp_path, "-D", "waitTimeoutOnResponseBackpressureMs=4000").start()
    try:
        with b.connect() as c:
            c.send_raw(encode_add_request(KEY, 5, 0, -1, 1 << 20, b"m" * (1 << 20), CRC))
            assert decode_response(c.recv_body()).rc == 0
        rss_before = _rss_bytes(b.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect((b.host, b.port))
        attacker.sendall(encode_read_request(5, 0) * 2000)    # 2 GB of answers, never read
        peak = rss_before
        latencies = []
        with b.connect() as c:
            stop_at = time.monotonic() + 3.0
            e = 0
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                c.send_raw(encode_add_request(KEY, 6, e, e - 1, e + 1, b"n" * 100, CRC))
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
            c.send_raw(encode_read_request(6, 0))
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
