"""Helpers for the bookie server tests: a `bkfast bookie` subprocess and a raw-socket client."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

from bkfast.cli.local_cluster import LocalBookie
from bkfast.proto import BookkeeperProtocol_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still "exists"; only count it alive if it is not one
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False



class BookieProcess(LocalBookie):
    """`python -m bkfast.cli.main bookie --no-metadata` on 127.0.0.1 and a free port (kept across
    restarts), small caches, stopped by pid. `extra` are more `bkfast bookie` flags."""

    def __init__(self, data_dir: Path, *extra: str):
        super().__init__(Path(data_dir), 0, extra_conf={"dbStorage_writeCacheMaxSizeMb": "16",
                                                        "dbStorage_readAheadCacheMaxSizeMb": "16"},
                         extra_args=list(extra))

    def start(self, timeout_s: float = START_TIMEOUT_S) -> BookieProcess:
        super().start(timeout_s)
        return self

    def log(self, tail: int | None = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
            return text[-tail:] if tail else text
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        rc = super().stop(timeout)
        return 0 if rc is None else rc

    def connect(self) -> Client:
        return Client(self.host, self.port)


class Client:
    """Blocking raw-socket client speaking length-prefixed frames."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.txn = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_body(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _fill(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed by the bookie")
            self.buf += chunk

    def recv_frame(self) -> bytes:
        """The next whole frame, length prefix included."""
        self._fill(4)
        (n,) = struct.unpack_from(">I", self.buf)
        self._fill(4 + n)
        frame, self.buf = self.buf[:4 + n], self.buf[4 + n:]
        return frame

    def recv_body(self) -> bytes:
        return self.recv_frame()[4:]

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    # --- v3 ---
    def v3(self, operation: int, **sub) -> pb.Response:
        self.txn += 1
        request = pb.Request()
        request.header.version = pb.VERSION_THREE
        request.header.operation = operation
        request.header.txnId = self.txn
        for field, values in sub.items():
            msg = getattr(request, field)
            for k, v in values.items():
                setattr(msg, k, v)
        self.send_body(request.SerializeToString())
        response = pb.Response.FromString(self.recv_body())
        assert response.header.txnId == self.txn
        return response
