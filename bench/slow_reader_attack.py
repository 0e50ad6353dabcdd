"""A client that sends reads and never reads the answers (issue 18 point 1): the bookie's RSS and a second
client's add latency under the attack.

    .venv/bin/python bench/slow_reader_attack.py [--reads 2000] [--entry-mb 1] [--seconds 10]
        [--bookie-pythonpath DIR]

A fresh `bkfast bookie`; one entry of --entry-mb MiB is written; an attacker socket with SO_RCVBUF=4096
sends --reads v2 READs of it in one write and never reads; meanwhile a second connection adds 100-byte
entries one at a time for --seconds. Prints one JSON line: the bookie's RSS before and at its peak (MB),
the adds' p50/p99/max (ms), and whether the attacker was disconnected
(waitTimeoutOnResponseBackpressureMs). Goal: peak RSS under 300 MB, add p99 under 20 ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol_compare import start_bookie  # noqa: E402

from bkfast.codec import DigestType, encode_add_request, encode_read_request, master_key  # noqa: E402

KEY = master_key("attack")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def recv_frame(sock: socket.socket) -> bytes:
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    n = int.from_bytes(exactly(4), "big")
    return exactly(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--entry-mb", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--bookie-pythonpath", default=None)
    args = ap.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="bkfast-attack-"))
    bookie = start_bookie(data_dir, args.bookie_pythonpath)
    try:
        c = socket.create_connection(("127.0.0.1", bookie.port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size = args.entry_mb << 20
        c.sendall(encode_add_request(KEY, 1, 0, -1, size, b"a" * size, DigestType.CRC32C))
        recv_frame(c)
        before = peak = rss_mb(bookie.proc.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect(("127.0.0.1", bookie.port))
        attacker.sendall(encode_read_request(1, 0) * args.reads)
        latencies = []
        e = 0
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            c.sendall(encode_add_request(KEY, 2, e, e - 1, e + 1, b"n" * 100, DigestType.CRC32C))
            recv_frame(c)
            latencies.append((time.perf_counter() - t0) * 1000)
            peak = max(peak, rss_mb(bookie.proc.pid))
            e += 1
        attacker.setblocking(False)
        try:
            disconnected = attacker.recv(1) == b""
        except BlockingIOError:
            disconnected = False
        except (ConnectionResetError, BrokenPipeError):
            disconnected = True
        latencies.sort()
        print(json.dumps({"rss_before_mb": round(before), "rss_peak_mb": round(peak),
                          "adds": len(latencies), "add_p50_ms": round(statistics.median(latencies), 2),
                          "add_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
                          "add_max_ms": round(latencies[-1], 2), "attacker_disconnected": disconnected,
                          "loadavg": open("/proc/loadavg").read().split()[0]}), flush=True)
        attacker.close()
        c.close()
    finally:
        bookie.stop(60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
