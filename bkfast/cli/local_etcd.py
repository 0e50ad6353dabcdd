"""A real, throw-away etcd server for tests and local sandboxes.

Owns one single-member etcd process (Debian's ``/usr/bin/etcd``, package ``etcd-server``) bound to 127.0.0.1
only, on a free client port and a free peer port, with its own data dir and log file; it is stopped, killed,
paused and resumed by pid. Plain Python, no pytest imports, so ``bkfast sandbox --etcd`` can reuse it::

    etcd = EtcdServer()             # or EtcdServer(data_dir=..., port=2379)
    etcd.start()
    try:
        uri = f"etcd://{etcd.endpoint}/ledgers"      # a metadataServiceUri
        ...
    finally:
        etcd.stop()

    with EtcdServer() as etcd:      # same thing
        ...

Layout of the data dir: ``etcd/`` is etcd's own ``--data-dir`` and ``etcd.log`` its log (zap JSON, warnings
and up, plus anything etcd prints on stderr before its logger exists).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bkfast.errors import EtcdServerError

from .local_cluster import free_port
from .local_process import LocalServerProcess, wait_until_stopped

__all__ = ["EtcdServer", "EtcdServerError", "EtcdTls", "find_etcd", "etcd_health"]

DEBIAN_ETCD = "/usr/bin/etcd"
INSTALL_HINT = "run `make test`, which installs Debian's etcd-server package (scripts/install-system-deps.sh)"
HOST = "127.0.0.1"
MEMBER_NAME = "bkfast"
# etcd's defaults (100 ms / 1000 ms) make a fresh member wait ~1 s before it elects itself; the loopback
# round trip is far below 50 ms, and 10 heartbeats per election timeout is etcd's own recommended ratio.
HEARTBEAT_MS = 50
ELECTION_TIMEOUT_MS = 500


def find_etcd(binary: str = "etcd") -> str | None:
    """Path of the etcd executable ``binary`` (a name looked up on PATH, or a path), or None.

    Debian's path is tried too for the plain name, since a service's PATH may lack /usr/bin."""
    found = shutil.which(binary)
    if found is None and binary == "etcd" and os.access(DEBIAN_ETCD, os.X_OK):
        found = DEBIAN_ETCD
    return found


@dataclass(frozen=True)
class EtcdTls:
    """PEM files of a TLS etcd: its certificate and key (also shown as its client certificate to itself), and
    the CA that signs the clients it accepts (`--client-cert-auth`)."""

    cert_file: str
    key_file: str
    trusted_ca_file: str

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.trusted_ca_file)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def etcd_health(url: str, timeout: float = 1.0, context: ssl.SSLContext | None = None) -> bool:
    """True if ``GET <url>/health`` answers ``{"health": "true"}``: the member has a leader and serves.

    Raises OSError (URLError, a timeout) when nothing answers; False for an answer that is not healthy."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout, context=context) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()                  # etcd answers 503 with a JSON body while it has no leader
    try:
        return json.loads(body).get("health") == "true"
    except (ValueError, AttributeError):
        return False


class EtcdServer(LocalServerProcess):
    """One single-member etcd on 127.0.0.1.

    :param data_dir: directory for etcd's data and log; a temp dir (removed by ``stop()``) when None.
        A given directory is kept.
    :param port: client port; a free one is picked when None (and re-picked if the bind races).
    :param binary: the etcd executable, a name on PATH or a path.

    ``kill()`` and ``restart()`` keep the data dir and both ports, so the next ``start()`` recovers the
    same member at the same endpoint; ``stop()`` forgets them (and removes a temp dir).
    """

    host = HOST

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int | None = None,
                 binary: str = "etcd", tls: EtcdTls | None = None) -> None:
        self.tls = tls                               # https only, client certificates required
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._given_port = port
        self.binary = binary
        self._dir: Path | None = None
        self._created_dir = False
        self._client_port: int | None = None
        self._peer_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ properties
    @property
    def client_port(self) -> int | None:
        return self._client_port

    @property
    def endpoint(self) -> str:
        """``"127.0.0.1:<client port>"``."""
        if self._client_port is None:
            raise EtcdServerError("etcd server is not started")
        return f"{self.host}:{self._client_port}"

    @property
    def url(self) -> str:
        """``"http(s)://127.0.0.1:<client port>"``: the v3 JSON gateway is under ``/v3/``."""
        return f"{'https' if self.tls else 'http'}://{self.endpoint}"

    @property
    def data_dir(self) -> Path | None:
        return self._dir

    @property
    def log_path(self) -> Path | None:
        return self._dir / "etcd.log" if self._dir is not None else None

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> "EtcdServer":
        """Launch etcd (on the kept data dir and ports after ``kill()``) and wait until it is healthy."""
        with self._lock:
            if self.is_running():
                return self
            binary = find_etcd(self.binary)
            if binary is None:
                raise EtcdServerError(f"etcd binary {self.binary!r} not found; {INSTALL_HINT}")
            self._terminate()                        # reap a member that died on its own
            fresh = self._client_port is None
            self._prepare_dir()
            if fresh:
                atexit.register(self.stop)
            try:
                # Only ports we picked ourselves may be re-picked: another process can take a free port
                # between our probe and etcd's bind.
                attempts = 3 if fresh and self._given_port is None else 1
                for attempt in range(1, attempts + 1):
                    if fresh:
                        self._client_port = self._given_port or free_port(self.host)
                        self._peer_port = free_port(self.host)
                    try:
                        self.proc = self._launch(binary)
                        self._wait_until_healthy(self.proc, binary, timeout)
                        return self
                    except EtcdServerError:
                        bind_race = "address already in use" in self.log_tail(20)
                        self._terminate()
                        if not bind_race or attempt == attempts:
                            raise
            except BaseException:
                self._terminate()
                if fresh:
                    self._forget()
                # else keep the member's data dir and ports: its log explains, and start() may retry
                raise
            raise AssertionError("unreachable")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; reap; remove our temp dir. Idempotent."""
        with self._lock:
            self._terminate(timeout)
            self._forget()

    def kill(self) -> None:
        """SIGKILL, as a crash would: the data dir and ports are kept for the next ``start()``."""
        with self._lock:
            self._terminate(timeout=0)

    def restart(self, timeout: float = 30.0) -> "EtcdServer":
        """Stop gracefully and start again on the same data dir and ports; the data survives."""
        with self._lock:
            if self._client_port is None:
                raise EtcdServerError("etcd server was never started; nothing to restart")
            self._terminate()
            return self.start(timeout)

    def pause(self) -> None:
        """SIGSTOP: the sockets stay open but nothing answers, like a hung or partitioned member."""
        self._signal(signal.SIGSTOP)
        if self.pid is not None:
            wait_until_stopped(self.pid)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<EtcdServer {self.host}:{self._client_port} pid={self.pid} {state} dir={self._dir}>"

    # ------------------------------------------------------------------ internals
    def _prepare_dir(self) -> None:
        if self._dir is not None:
            return                                   # kill()/restart(): same member, same data
        if self._given_dir is not None:
            self._dir, self._created_dir = self._given_dir, False
            self._dir.mkdir(parents=True, exist_ok=True)
        else:
            self._dir, self._created_dir = Path(tempfile.mkdtemp(prefix="bkfast-etcd-")), True

    def _command(self, binary: str, home: Path) -> list[str]:
        peer = f"http://{self.host}:{self._peer_port}"
        client = self.url
        tls = [] if self.tls is None else ["--cert-file", self.tls.cert_file, "--key-file", self.tls.key_file,
                                           "--trusted-ca-file", self.tls.trusted_ca_file, "--client-cert-auth"]
        return [
            binary,
            *tls,
            "--name", MEMBER_NAME,
            "--data-dir", str(home / "etcd"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            # ignored once the data dir holds a member: a restart keeps the cluster it bootstrapped
            "--initial-cluster", f"{MEMBER_NAME}={peer}",
            "--initial-cluster-state", "new",
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_TIMEOUT_MS),
            # 3.4 defaults to the deprecated capnslog logger, which warns about itself on every start
            "--logger", "zap",
            "--log-level", "warn",
            "--log-outputs", str(home / "etcd.log"),
        ]

    def _launch(self, binary: str) -> subprocess.Popen:
        home = self._dir
        assert home is not None, "_prepare_dir() first"
        cmd = self._command(binary, home)
        # etcd refuses to start when an ETCD_* variable shadows a flag we pass; a developer's shell may set some.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        with open(home / "etcd.log", "ab") as log:    # append: zap opens the same file O_APPEND too
            log.write(f"# {' '.join(cmd)}\n".encode())
            log.flush()
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=home,
                env=env,
                start_new_session=True,              # a ^C in the sandbox's terminal is ours to forward
                close_fds=True,
            )

    def _wait_until_healthy(self, proc: subprocess.Popen, binary: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: object = None
        what = f"etcd {binary} on {self.endpoint} (pid {proc.pid})"
        while True:
            if proc.poll() is not None:
                raise EtcdServerError(
                    f"{what} exited with code {proc.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if etcd_health(self.url, context=self.tls.client_context() if self.tls else None):
                    return
                last_error = "not healthy (no leader yet)"
            except OSError as e:
                last_error = repr(e)
            if time.monotonic() > deadline:
                raise EtcdServerError(
                    f"{what} was not healthy within {timeout:.0f} s "
                    f"(last: {last_error}); log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _signal(self, sig: int) -> None:
        with self._lock:
            proc = self.proc
            if proc is None or proc.poll() is not None:
                raise EtcdServerError(f"etcd server is not running; cannot send {signal.Signals(sig).name}")
            os.kill(proc.pid, sig)

    def _forget(self) -> None:
        if self._created_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir, self._created_dir = None, False
        self._client_port = self._peer_port = None
        atexit.unregister(self.stop)
