"""CPU time per thread of a running process, from /proc, and CPU per operation by thread.

Owns: reading every thread's CPU time of a process (`sample`), the difference of two samples by thread
name (`cpu_by_thread`), and CPU microseconds per operation by thread name and in total (`per_op_us`).
bkfast names its threads in the kernel (bkfast.threads), so the reactor (`bookie-io`), the journals
(`journal-N`), the flush threads (`flush-N`) and the read pool (`read-N`) each get their own figure.

Where the kernel keeps scheduler statistics, a thread's time is /proc/<pid>/task/<tid>/schedstat's first
field (nanoseconds on the CPU); otherwise utime + stime of its `stat` (clock ticks, usually 10 ms). A
thread that ends before the second sample is not counted (it has left /proc); one that starts after the
first counts all its time. The bookie's threads live as long as it does.
Linux only: elsewhere `sample` raises OSError.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class ThreadTime:
    tid: int
    name: str
    cpu_s: float


def stat_cpu_s(stat_path: str) -> float:
    """utime + stime, in seconds, of a /proc `stat` file: /proc/<pid>/stat is the whole process (every
    thread, live or ended), /proc/<pid>/task/<tid>/stat one thread."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _CLOCK_TICK_S


def _thread_cpu_s(task_dir: str) -> float:
    try:
        with open(os.path.join(task_dir, "schedstat")) as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return stat_cpu_s(os.path.join(task_dir, "stat"))


def sample(pid: int) -> dict[int, ThreadTime]:
    """tid -> (name, CPU seconds so far) for every thread of process `pid`."""
    tasks = f"/proc/{pid}/task"
    threads: dict[int, ThreadTime] = {}
    for entry in os.listdir(tasks):
        task_dir = os.path.join(tasks, entry)
        try:
            with open(os.path.join(task_dir, "comm")) as f:
                name = f.read().strip()
            threads[int(entry)] = ThreadTime(int(entry), name, _thread_cpu_s(task_dir))
        except (FileNotFoundError, ProcessLookupError):
            continue                                    # the thread ended while we read it
    return threads


def cpu_by_thread(before: dict[int, ThreadTime], after: dict[int, ThreadTime]) -> dict[str, float]:
    """CPU seconds spent between two samples, summed by thread name (threads sharing a name add up)."""
    spent: dict[str, float] = {}
    for tid, now in after.items():
        then = before.get(tid)
        used = now.cpu_s - (then.cpu_s if then is not None and then.name == now.name else 0.0)
        spent[now.name] = spent.get(now.name, 0.0) + max(0.0, used)
    return spent


def per_op_us(spent: dict[str, float], ops: int, min_share: float = 0.005) -> dict[str, float]:
    """CPU microseconds per operation by thread name, largest first, plus `total`; threads under
    `min_share` of the total are summed under `other`."""
    total = sum(spent.values())
    if ops <= 0:
        return {}
    shown: dict[str, float] = {}
    other = 0.0
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        if total and seconds / total < min_share:
            other += seconds
        else:
            shown[name] = round(seconds * 1e6 / ops, 3)
    if other:
        shown["other"] = round(other * 1e6 / ops, 3)
    shown["total"] = round(total * 1e6 / ops, 3)
    return shown


class ThreadCpuMeter:
    """Measure a process's CPU per thread over a span: `start()`, then `stop(ops)` -> per_op_us."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._before: dict[int, ThreadTime] | None = None
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self._before = sample(self.pid)

    def stop(self, ops: int) -> dict[str, float]:
        if self._before is None:
            raise RuntimeError("ThreadCpuMeter.stop() before start()")
        self.spent = cpu_by_thread(self._before, sample(self.pid))
        self._before = None
        return per_op_us(self.spent, ops)
