"""Shutdown time and memory per ledger of a bookie holding many one-entry ledgers (DbLedgerStorage).

    .venv/bin/python bench/shutdown_many_ledgers.py [--ledgers 1000000] [--size 64] [--dir /tmp/x] [--json]

A real `bkfast bookie --no-metadata` process gets `--ledgers` one-entry ledgers (pipelined v2 ADDs on one
socket), then SIGTERM; the time from the signal to the process's exit is the shutdown time (Kubernetes'
default grace period is 30 s). It is restarted on the same directories (the time to serve again is
reported too) and stopped once more. Memory: RSS after loading and idle after the restart, per ledger
above the RSS of the same bookie with no ledger (measured first, on an empty directory).

Measured (2 shared cores, 1,000,000 ledgers of 64-byte entries, 512 MB write cache), issue 18 point 4:
    before: shutdown loaded 91.1 s, idle 1.6 s; 1,405 B per ledger loaded, 668 B idle after restart
    after:  shutdown loaded 2.4-2.9 s, idle 0.2 s; 680 B per ledger loaded, 149 B idle after restart
The flush made one entry-logger call and one sleep(0) (~70 us of timer slack) per ledger; each ledger's
metadata was held as a parsed protobuf (~630 B).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bkfast.cli.local_cluster import LocalBookie  # noqa: E402
from bkfast.codec import DigestType, encode_add_request, master_key  # noqa: E402

WINDOW = 20000
RESPONSE_SIZE = 28          # length prefix + 24-byte v2 ADD response


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def bookie(data_dir: Path) -> LocalBookie:
    return LocalBookie(data_dir, 0, extra_conf={"dbStorage_writeCacheMaxSizeMb": "512",
                                                "dbStorage_readAheadCacheMaxSizeMb": "64"})


def load(host: str, port: int, ledgers: int, size: int) -> float:
    """Add entry 0 of ledgers 1..ledgers, WINDOW frames in flight; return the seconds taken."""
    key = master_key(b"bench")
    payload = os.urandom(size)
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    sent = 0
    received = 0
    pending = b""
    try:
        while received < ledgers:
            if sent < ledgers and sent - received < WINDOW:
                n = min(WINDOW // 2, ledgers - sent)
                frames = b"".join(encode_add_request(key, lid, 0, -1, size, payload, DigestType.CRC32C)
                                  for lid in range(sent + 1, sent + n + 1))
                sock.sendall(frames)
                sent += n
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the bookie closed the connection")
            pending += chunk
            whole = len(pending) // RESPONSE_SIZE
            for i in range(whole):
                rc = struct.unpack_from(">i", pending, i * RESPONSE_SIZE + 8)[0]
                if rc != 0:
                    raise RuntimeError(f"add failed with rc {rc}")
            received += whole
            pending = pending[whole * RESPONSE_SIZE:]
    finally:
        sock.close()
    return time.perf_counter() - t0


def stop_timed(b: LocalBookie) -> tuple[float, int]:
    t0 = time.perf_counter()
    os.kill(b.pid, signal.SIGTERM)
    rc = b.proc.wait(600)
    elapsed = time.perf_counter() - t0
    b._close()
    return elapsed, rc


def settle_rss(pid: int, seconds: float = 2.0) -> int:
    time.sleep(seconds)
    return rss_bytes(pid)


def run(args) -> dict:
    base = Path(args.dir or tempfile.mkdtemp(prefix="bkfast-bench-shutdown-"))
    try:
        empty = bookie(base / "empty").start()
        rss_empty = settle_rss(empty.pid)
        empty.stop()

        b = bookie(base / "full").start()
        load_s = load(b.host, b.port, args.ledgers, args.size)
        rss_loaded = settle_rss(b.pid)
        stop_s, rc1 = stop_timed(b)

        t0 = time.perf_counter()
        b.start(timeout_s=600)
        restart_s = time.perf_counter() - t0
        rss_idle = settle_rss(b.pid)
        stop2_s, rc2 = stop_timed(b)
        n = args.ledgers
        return {
            "ledgers": n,
            "entry_size": args.size,
            "load_s": round(load_s, 2),
            "shutdown_loaded_s": round(stop_s, 2),
            "shutdown_idle_s": round(stop2_s, 2),
            "restart_s": round(restart_s, 2),
            "exit_codes": [rc1, rc2],
            "rss_empty_mb": round(rss_empty / 2**20, 1),
            "rss_loaded_mb": round(rss_loaded / 2**20, 1),
            "rss_idle_after_restart_mb": round(rss_idle / 2**20, 1),
            "bytes_per_ledger_loaded": round((rss_loaded - rss_empty) / n),
            "bytes_per_ledger_idle": round((rss_idle - rss_empty) / n),
        }
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledgers", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=64, help="payload bytes per entry")
    parser.add_argument("--dir", default=None, help="data directory (kept); default a temporary one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(f"shutdown with {result['ledgers']} one-entry ledgers: loaded {result['shutdown_loaded_s']} s, "
          f"idle after restart {result['shutdown_idle_s']} s (goal < 10 s)")
    print(f"memory per ledger: {result['bytes_per_ledger_loaded']} B loaded, "
          f"{result['bytes_per_ledger_idle']} B idle after restart")
    for key, value in result.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
