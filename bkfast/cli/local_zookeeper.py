"""A real, throw-away ZooKeeper server for tests and local sandboxes.

Runs Debian's ZooKeeper (jars in /usr/share/java, package ``zookeeper``) as a standalone
``ZooKeeperServerMain`` JVM bound to 127.0.0.1 on a free port, with its own data dir. Plain Python,
no pytest imports, so ``bkfast sandbox --zk`` can reuse it::

    zk = ZooKeeperServer()          # or ZooKeeperServer(tick_time=500) for short session timeouts
    zk.start()
    try:
        client = KazooClient(hosts=zk.connect_string)
        ...
    finally:
        zk.stop()

    with ZooKeeperServer() as zk:   # same thing
        ...
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bkfast.errors import ZooKeeperServerError

from .local_process import LocalServerProcess

__all__ = [
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "find_classpath",
    "four_letter_word",
    "probe_session",
]

JAVA_DIR = Path("/usr/share/java")
INSTALL_HINT = "run `make test`, which installs Debian's zookeeper package (scripts/install-system-deps.sh)"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def find_classpath(java_dir: Path | str = JAVA_DIR) -> str:
    """Classpath for Debian's ZooKeeper: zookeeper.jar (its manifest pulls in most dependencies),
    an slf4j binding, and netty-codec (missing from the manifest, but needed as soon as someone
    selects ``NettyServerCnxnFactory``; the default NIO factory works without it)."""
    java_dir = Path(java_dir)
    zk_jar = java_dir / "zookeeper.jar"
    if not zk_jar.is_file():
        versioned = sorted(java_dir.glob("zookeeper-3.*.jar"))
        versioned = [p for p in versioned if p.name.count("-") == 1]   # not zookeeper-jute-3.8.0.jar etc.
        if not versioned:
            raise ZooKeeperServerError(f"{zk_jar} not found; {INSTALL_HINT}")
        zk_jar = versioned[-1]
    jars = [zk_jar]
    # slf4j-simple first: its output (stderr -> our log file) is what makes start failures debuggable.
    for pattern in ("slf4j-simple.jar", "slf4j-simple-*.jar", "slf4j-nop.jar", "slf4j-nop-*.jar"):
        found = sorted(java_dir.glob(pattern))
        if found:
            jars.append(found[0])
            break
    for name in ("netty-codec.jar",):
        if (java_dir / name).is_file():
            jars.append(java_dir / name)
    return os.pathsep.join(str(j) for j in jars)


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperServerError(f"`java` not found on PATH; {INSTALL_HINT}")
    return java


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> bytes:
    """Send a ZooKeeper four-letter command (must be whitelisted) and return the whole reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by ZooKeeper")
        buf += chunk
    return bytes(buf)


def probe_session(
    host: str, port: int, timeout: float = 5.0, session_timeout_ms: int = 30000
) -> tuple[int, int]:
    """Open a real client session with the raw wire protocol, close it, and return
    ``(session id, negotiated session timeout in ms)``.

    ``ruok`` answers as soon as the socket listens, before the server serves clients; this proves
    the request pipeline is up. Raises OSError/ConnectionError if the server is not serving yet."""
    # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd (len + bytes), readOnly
    connect = struct.pack(">iqiqi16s?", 0, 0, session_timeout_ms, 0, 16, b"\0" * 16, False)
    close = struct.pack(">ii", 1, -11)                        # RequestHeader(xid=1, type=closeSession)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(connect)) + connect)
        (n,) = struct.unpack(">i", _recv_exact(s, 4))
        body = _recv_exact(s, n)
        _proto, negotiated_timeout, session_id = struct.unpack_from(">iiq", body)
        if negotiated_timeout <= 0 or session_id == 0:
            raise ConnectionError(f"ZooKeeper refused the session (timeout={negotiated_timeout})")
        s.sendall(struct.pack(">i", len(close)) + close)
        (n,) = struct.unpack(">i", _recv_exact(s, 4))
        xid, _zxid, err = struct.unpack(">iqi", _recv_exact(s, n)[:16])
        if xid != 1 or err != 0:
            raise ConnectionError(f"closeSession failed: xid={xid} err={err}")
    return session_id, negotiated_timeout


class ZooKeeperServer(LocalServerProcess):
    """One standalone ZooKeeper JVM on 127.0.0.1.

    :param data_dir: directory for zoo.cfg, the log and ``data/``; a temp dir (removed by ``stop()``)
        when None. A given directory is kept.
    :param port: client port; a free one is picked when None (and re-picked if the bind races).
    :param tick_time: ZooKeeper tickTime in ms. Sessions may ask for timeouts between
        ``min_session_timeout`` (default 2 ticks) and ``max_session_timeout`` (default 20 ticks),
        so a small tick_time (e.g. 200) allows short session timeouts in tests.
    :param start_timeout: seconds ``start()`` waits for the server to serve a client session.
    :param extra_config: more zoo.cfg lines, e.g. ``{"serverCnxnFactory": "...Netty..."}``.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        *,
        port: int | None = None,
        tick_time: int = 2000,
        min_session_timeout: int | None = None,
        max_session_timeout: int | None = None,
        start_timeout: float = 30.0,
        heap: str = "256m",
        extra_config: dict[str, object] | None = None,
        java_dir: str | os.PathLike = JAVA_DIR,
    ) -> None:
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._given_port = port
        self.tick_time = int(tick_time)
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.start_timeout = start_timeout
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        self.java_dir = Path(java_dir)
        self.dir: Path | None = None
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._created_dir = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ properties
    @property
    def connect_string(self) -> str:
        if self.port is None:
            raise ZooKeeperServerError("ZooKeeper server is not started")
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self.dir / "zookeeper.log" if self.dir is not None else None

    @property
    def config_path(self) -> Path | None:
        return self.dir / "zoo.cfg" if self.dir is not None else None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ZooKeeperServer":
        with self._lock:
            if self.is_running():
                return self
            classpath = find_classpath(self.java_dir)
            java = _find_java()
            if self._given_dir is not None:
                self.dir = self._given_dir
                self.dir.mkdir(parents=True, exist_ok=True)
                self._created_dir = False
            else:
                self.dir = Path(tempfile.mkdtemp(prefix="bkfast-zk-"))
                self._created_dir = True
            (self.dir / "data").mkdir(exist_ok=True)
            atexit.register(self.stop)
            try:
                attempts = 1 if self._given_port is not None else 3
                for attempt in range(1, attempts + 1):
                    self.port = self._given_port or _free_port(self.host)
                    self._write_config()
                    self._launch(java, classpath)
                    try:
                        self._wait_until_serving()
                        return self
                    except ZooKeeperServerError:
                        bind_race = "Address already in use" in self.log_tail(200)
                        self._terminate()
                        if not bind_race or attempt == attempts:
                            raise
            except BaseException:
                self._terminate()
                self._cleanup_dir()
                atexit.unregister(self.stop)
                self.port = None
                raise
            raise AssertionError("unreachable")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; reap; remove our temp dir. Idempotent."""
        with self._lock:
            self._terminate(timeout)
            self._cleanup_dir()
            atexit.unregister(self.stop)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<ZooKeeperServer {self.host}:{self.port} pid={self.pid} {state} dir={self.dir}>"

    # ------------------------------------------------------------------ internals
    def _write_config(self) -> None:
        assert self.dir is not None
        cfg = {
            "tickTime": self.tick_time,
            "dataDir": self.dir / "data",
            "clientPort": self.port,
            "clientPortAddress": self.host,
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr",
        }
        if self.min_session_timeout is not None:
            cfg["minSessionTimeout"] = int(self.min_session_timeout)
        if self.max_session_timeout is not None:
            cfg["maxSessionTimeout"] = int(self.max_session_timeout)
        cfg.update(self.extra_config)
        assert self.config_path is not None, "start() set the directory"
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))

    def _launch(self, java: str, classpath: str) -> None:
        assert self.log_path is not None, "start() set the directory"
        cmd = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",          # C1 only: faster start, less CPU on small CI boxes
            "-Djava.awt.headless=true",
            "-Dzookeeper.forceSync=no",         # tests only: no fsync per transaction
            "-Dzookeeper.admin.enableServer=false",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"# {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                close_fds=True,
            )

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        stage, last_error = "ruok", None
        proc, port = self.proc, self.port
        assert proc is not None and port is not None, "_launch() started it on a port"
        while True:
            if proc.poll() is not None:
                raise ZooKeeperServerError(
                    f"ZooKeeper (pid {proc.pid}) exited with code {proc.returncode} during "
                    f"start-up; log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if stage == "ruok":
                    if four_letter_word(self.host, port, "ruok") == b"imok":
                        stage = "srvr"
                if stage == "srvr":
                    reply = four_letter_word(self.host, port, "srvr")
                    if b"Mode:" in reply:
                        stage = "session"
                    else:
                        last_error = reply.decode(errors="replace").strip()
                if stage == "session":
                    probe_session(self.host, port)
                    return
            except (OSError, ConnectionError, struct.error) as e:
                last_error = repr(e)
            if time.monotonic() > deadline:
                raise ZooKeeperServerError(
                    f"ZooKeeper on {self.connect_string} (pid {proc.pid}) did not serve clients within "
                    f"{self.start_timeout:.0f} s (stage {stage}, last error {last_error}); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _cleanup_dir(self) -> None:
        if self._created_dir and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._created_dir = False
            self.dir = None
