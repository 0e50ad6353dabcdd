"""Bookie processes of a local cluster (`bkfast sandbox`, `bkfast bench ledger --local`, integration tests).

Each bookie is a real `bkfast bookie` subprocess on 127.0.0.1 with its own journal and ledger dirs under
the cluster's data dir. With a ZooKeeper metadata URI the bookies check cookies and register themselves;
otherwise they run with `--no-metadata` and the owner registers them in its (embedded) metadata store.
Processes are stopped by pid: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LocalBookie", "start_bookies", "free_port", "DB_LEDGER_STORAGE"]

DB_LEDGER_STORAGE = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
START_TIMEOUT_S = 60.0


@dataclass
class LocalBookie:
    """One bookie subprocess."""

    data_dir: Path
    port: int
    metadata_uri: str | None = None
    extra_conf: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    host: str = "127.0.0.1"
    extra_args: list[str] = field(default_factory=list)      # more `bkfast bookie` flags, e.g. -D k=v

    @property
    def bookie_id(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "bookie.log"

    def command(self) -> list[str]:
        conf = {
            "journalDirectory": str(self.data_dir / "journal"),
            "ledgerDirectories": str(self.data_dir / "ledgers"),
            "ledgerStorageClass": DB_LEDGER_STORAGE,
            "listeningInterface": self.host,
            "advertisedAddress": self.host,
            "dbStorage_writeCacheMaxSizeMb": "64",
            "dbStorage_readAheadCacheMaxSizeMb": "64",
        }
        if self.metadata_uri:
            conf["metadataServiceUri"] = self.metadata_uri
        conf.update(self.extra_conf)
        args = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", str(self.port)]
        for key, value in conf.items():
            args += ["-D", f"{key}={value}"]
        if not self.metadata_uri:
            args.append("--no-metadata")
        return args + list(self.extra_args)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LocalBookie:
        return self.launch().wait_started(timeout_s)

    def launch(self) -> LocalBookie:
        """Start the process without waiting for it to serve (start many, then `wait_started` each)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log_file,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        return self

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> LocalBookie:
        deadline = time.monotonic() + timeout_s
        line = b""
        proc = self.proc
        assert proc is not None and proc.stdout is not None, "launch() started it with a stdout pipe"
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                line = proc.stdout.readline()
                if line.startswith(b"bookie listening on "):
                    # port 0 lets the bookie choose (--no-metadata only: a registered id names its port)
                    self.port = int(line.strip().rsplit(b":", 1)[1])
                    return self
                if not line:
                    break
            if proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"bookie {self.bookie_id} did not start ({line!r}); log: {self.log_path}\n"
                           + self.log_path.read_text(errors="replace")[-3000:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout and not self.proc.stdout.closed:
            self.proc.stdout.close()


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_bookies(bookies: list[LocalBookie], timeout_s: float = START_TIMEOUT_S) -> list[LocalBookie]:
    """Launch all, then wait for each (they start in parallel); on failure every one is killed."""
    try:
        for bookie in bookies:
            bookie.launch()
        for bookie in bookies:
            bookie.wait_started(timeout_s)
    except BaseException:
        for bookie in bookies:
            bookie.kill()
        raise
    return bookies
