"""The bookie's accept backlog (issue 18 point 5): the system maximum by default, serverTcpBacklog to set it.

With Twisted's default backlog of 50, 20 of 1,500 back-to-back connects waited the kernel's 1 s SYN
retransmission (their SYNs were dropped while the accept queue was full).
"""

from __future__ import annotations

import socket
import subprocess
import time

from bkfast.conf import system_max_backlog
from tests.server_support import BookieProcess

CONNECTS = 1500
SYN_RETRY_S = 0.9       # the kernel retransmits a dropped SYN after 1 s


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on 127.0.0.1:port (ss shows it as Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines, f"nothing listens on port {port}"
    return int(lines[0][2])


def test_bookie_listens_with_the_system_maximum_backlog_and_1500_connects_do_not_wait(tmp_path):
    bookie = BookieProcess(tmp_path / "b").start()
    sockets: list[socket.socket] = []
    try:
        assert listen_backlog(bookie.port) == system_max_backlog()
        slow = []
        for i in range(CONNECTS):
            s = socket.socket()
            sockets.append(s)
            s.settimeout(10)
            t0 = time.monotonic()
            s.connect((bookie.host, bookie.port))
            elapsed = time.monotonic() - t0
            if elapsed >= SYN_RETRY_S:
                slow.append((i, round(elapsed, 2)))
        assert not slow, f"{len(slow)} of {CONNECTS} connects waited a SYN retransmission: {slow[:10]}"
    finally:
        for s in sockets:
            s.close()
        assert bookie.stop() == 0, bookie.log()


def test_server_tcp_backlog_sets_the_listen_backlog(tmp_path):
    bookie = BookieProcess(tmp_path / "b", "-D", "serverTcpBacklog=777").start()
    try:
        assert listen_backlog(bookie.port) == 777
    finally:
        assert bookie.stop() == 0, bookie.log()
