"""What the local metadata servers of the sandbox and the tests (ZooKeeper, etcd) share as processes: the pid,
whether it runs, the tail of its log for an error message, a context manager's start/stop, and stopping it
by pid (SIGTERM, then SIGKILL, always reaped). A server class supplies `start`, `stop` and `log_path`."""

from __future__ import annotations

import abc
import contextlib
import signal
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["LocalServerProcess"]


class LocalServerProcess(abc.ABC):
    proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    @abc.abstractmethod
    def log_path(self) -> Path | None:
        """The server's log file (None before its directory exists)."""

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return "(no log)"
        text = path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(log is empty)"

    @abc.abstractmethod
    def start(self) -> Any:
        """Start the server and wait until it serves; returns self."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop it by pid; idempotent."""

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM (none when `timeout` is 0: a crash), wait up to `timeout` s, then SIGKILL; always reaped."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            # Not gone in time (or gone already): SIGKILL below settles it either way.
            with contextlib.suppress(subprocess.TimeoutExpired, ProcessLookupError):
                if timeout > 0:
                    proc.send_signal(signal.SIGTERM)
                    proc.send_signal(signal.SIGCONT)     # a paused (SIGSTOP) server only acts on SIGTERM once running
                    proc.wait(timeout=timeout)
            if proc.poll() is None:
                proc.kill()
        proc.wait()
