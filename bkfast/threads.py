"""Threads the operating system can tell apart: every thread bkfast starts carries its name into the kernel.

Owns: `NamedThread` (a `threading.Thread` that sets its OS-level name, /proc/<pid>/task/<tid>/comm, when it
starts), `name_this_thread` (the same for a thread that already runs, such as the reactor's), and the
names of the bookie's thread kinds. Python's `threading` names a thread for Python only; before 3.14 the
kernel keeps the process name for every thread, so `top -H`, `perf` and the per-thread CPU figures of
`bench/` could not tell the reactor from a journal. A thread inherits its creator's OS name, so a thread
bkfast starts without a name here would show up as whichever thread created it.

Linux keeps 15 bytes of a name: names here are short, the index last (`journal-0`, `read-7`), and a name
cut to 15 bytes keeps its end (the index), not its start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from setproctitle import setthreadtitle

# The kernel's limit (TASK_COMM_LEN - 1).
OS_NAME_BYTES = 15

# The bookie's threads, as `top -H` shows them (issue "every core"): Java names them after its executors.
BOOKIE_IO = "bookie-io"            # the reactor: sockets, framing, dispatch
ADD_WORKER = "add-worker"          # add-worker-N: a socket read's adds split and taken (numAddWorkerThreads)
JOURNAL = "journal"                # journal-N: group commit and fdatasync of journalDirectories[N]
FLUSH = "flush"                    # flush-N: write cache -> entry log -> index of ledgerDirectories[N]
READ = "read"                      # read-N: reads that memory cannot answer (numReadWorkerThreads)
SYNC = "bookie-sync"               # the checkpoint (SyncThread)
GC = "bookie-gc"                   # garbage collection and compaction
DISK_CHECK = "disk-check"          # LedgerDirsMonitor
ZK = "zk"                          # zk-N: the metadata client's event and connection threads


def os_name(name: str) -> str:
    """`name` as the kernel will keep it: at most OS_NAME_BYTES bytes, the end kept."""
    encoded = name.encode("utf-8", "replace")
    if len(encoded) <= OS_NAME_BYTES:
        return name
    return encoded[-OS_NAME_BYTES:].decode("utf-8", "ignore")


def name_this_thread(name: str) -> None:
    """Give the calling thread `name` in Python and in the kernel."""
    threading.current_thread().name = name
    setthreadtitle(os_name(name))


class NamedThread(threading.Thread):
    """A daemon thread (unless told) whose OS-level name is its Python name, set as it starts."""

    def __init__(self, target: Callable[..., Any], name: str, args: tuple = (), kwargs: dict | None = None,
                 daemon: bool = True) -> None:
        super().__init__(target=target, name=name, args=args, kwargs=kwargs, daemon=daemon)

    def run(self) -> None:
        setthreadtitle(os_name(self.name))
        super().run()


def thread_factory(name: str) -> Callable[..., NamedThread]:
    """A `threadFactory` for Twisted's ThreadPool (called with target= and its own name=) or any pool that
    makes threads with keyword arguments: its threads are all named `name` in the kernel."""
    def make(*_args: Any, target: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
             **_ignored: Any) -> NamedThread:
        return NamedThread(target, name, args=args, kwargs=kwargs)
    return make


def start_thread(target: Callable[..., Any], name: str, *args: Any, daemon: bool = True) -> NamedThread:
    """Start `target(*args)` on a NamedThread and return it."""
    thread = NamedThread(target, name, args=args, daemon=daemon)
    thread.start()
    return thread
