"""Which thread of a running bookie holds the GIL, and for how long per operation: py-spy samples.

    sampler = GilSampler(pid, rate=250); sampler.start(); ...; sampler.stop(ops)
    -> {"bookie-io": 0.39, "flush-0": 0.74, ..., "total": 1.2, "held_share": 0.43, "samples": 1389}

Why: thread CPU (/proc) says what each thread costs, not how much of it holds the GIL, and every thread
that holds it shares that one lock: a bookie's adds/s can be bounded by the sum of the GIL-held time per
add over its threads (1e6 / total) well before its reactor thread runs out of CPU (the scaling model of
docs/threads.md). `py-spy record --gil` keeps, at each tick, the stack of the thread holding the GIL (no
sample when none does); the share of ticks a thread was sampled in is the share of wall time it held the
GIL. The ticks are `rate` x the sampled time: `--nonblocking` ticks py-spy failed to read (its "Errors")
are counted as unheld, so the figures are a lower bound by the error share (reported).

Needs the `py-spy` executable (the `bench` extra) and permission to read the process's memory (same user
and ptrace allowed). `GilSampler.available()` says whether it is there.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

_THREAD = re.compile(r"thread \((?:0x)?[0-9a-fA-F]+\): ([^;]*)")
_SAMPLES = re.compile(r"Samples: (\d+) Errors: (\d+)")


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def held_by_thread(raw_lines) -> Counter:
    """Samples per thread name in py-spy's raw (collapsed) output with --threads."""
    counts: Counter = Counter()
    for line in raw_lines:
        stack, _, n = line.rstrip().rpartition(" ")
        match = _THREAD.match(stack)
        if match and n.isdigit():
            counts[match.group(1).strip() or "?"] += int(n)
    return counts


class GilSampler:
    """py-spy sampling the GIL holder of process `pid` between start() and stop()."""

    def __init__(self, pid: int, rate: int = 250):
        self.pid = pid
        self.rate = rate
        self._proc: subprocess.Popen | None = None
        self._out = ""
        self._started = 0.0

    @staticmethod
    def available() -> bool:
        return _py_spy() is not None

    def start(self) -> None:
        exe = _py_spy()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install 'bkfast[bench]')")
        fd, self._out = tempfile.mkstemp(prefix="bkfast-gil-", suffix=".txt")
        os.close(fd)
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--gil", "--threads", "--nonblocking", "--rate", str(self.rate),
             "--format", "raw", "-o", self._out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._started = time.monotonic()

    def stop(self, ops: int) -> dict:
        """GIL-held microseconds per op by thread name and in total, the share of wall time some thread
        held it, and py-spy's sample and error counts."""
        proc = self._proc
        assert proc is not None, "start() first"
        elapsed = time.monotonic() - self._started
        proc.send_signal(signal.SIGINT)               # py-spy writes its output on an interrupt
        try:
            log, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        try:
            counts = held_by_thread(Path(self._out).read_text().splitlines())
        finally:
            os.unlink(self._out)
        match = _SAMPLES.search(log or "")
        if match is None or not counts:
            raise RuntimeError(f"py-spy took no GIL sample of pid {self.pid}: {(log or '')[-500:]}")
        ticks = max(1.0, self.rate * elapsed)
        per_op = 1e6 * elapsed / max(1, ops) / ticks     # microseconds of wall time per op, per tick
        result = {name: round(n * per_op, 3) for name, n in counts.most_common()}
        result["total"] = round(sum(counts.values()) * per_op, 3)
        result["held_share"] = round(sum(counts.values()) / ticks, 3)
        result["samples"], result["errors"] = int(match.group(1)), int(match.group(2))
        return result
