"""What the local metadata servers of the sandbox and the tests (ZooKeeper, etcd) share as processes: the pid,
whether it runs, the tail of its log for an error message, a context manager's start/stop, and stopping it
by pid (SIGTERM, then SIGKILL, always reaped). A server class supplies `start`, `stop` and `log_path`."""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["LocalServerProcess", "wait_until_stopped"]


def _thread_states(pid: int) -> list[str]:
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue                                     # the thread exited between listdir and open
    return states


def wait_until_stopped(pid: int, timeout: float = 5.0) -> None:
    """Wait until every thread of `pid` has taken a SIGSTOP: kill() only queues the signal, and a thread that
    is running on another core keeps answering requests until it next enters the kernel."""
    deadline = time.monotonic() + timeout
    while True:
        states = _thread_states(pid)
        if states and all(state in ("T", "t") for state in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} did not stop within {timeout} s (thread states {states})")
        time.sleep(0.005)


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
