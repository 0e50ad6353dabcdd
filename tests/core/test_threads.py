"""bkfast.threads: the names bkfast's threads carry into the kernel (/proc/<pid>/task/<tid>/comm)."""

from __future__ import annotations

import os
import threading

from twisted.python.threadpool import ThreadPool

from bkfast.threads import OS_NAME_BYTES, NamedThread, name_this_thread, os_name, start_thread, thread_factory


def _comm(tid: int) -> str:
    with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
        return f.read().strip()


def _os_name_seen_by(start) -> str:
    """The kernel's name of a thread started by `start(body)`, read from inside the thread."""
    seen: list[str] = []
    done = threading.Event()

    def body() -> None:
        seen.append(_comm(threading.get_native_id()))
        done.set()

    start(body)
    assert done.wait(10)
    return seen[0]


def test_a_named_thread_has_its_name_in_the_kernel():
    thread = NamedThread(lambda: None, "journal-3")
    assert thread.daemon
    assert _os_name_seen_by(lambda body: NamedThread(body, "journal-3").start()) == "journal-3"
    assert _os_name_seen_by(lambda body: start_thread(body, "read-7")) == "read-7"


def test_a_name_too_long_for_the_kernel_keeps_its_end():
    assert os_name("read-12") == "read-12"
    assert os_name("a-very-long-pool-name-12") == "a-very-long-pool-name-12"[-OS_NAME_BYTES:]
    assert len(os_name("x" * 40).encode()) == OS_NAME_BYTES
    assert _os_name_seen_by(lambda body: start_thread(body, "replication-worker-12")) == \
        "replication-worker-12"[-OS_NAME_BYTES:]


def test_a_running_thread_can_name_itself_and_its_children_do_not_inherit_it_when_named():
    seen: dict[str, str] = {}

    def outer() -> None:
        name_this_thread("bookie-io")
        seen["outer"] = _comm(threading.get_native_id())
        assert threading.current_thread().name == "bookie-io"
        seen["inner"] = _os_name_seen_by(lambda body: start_thread(body, "flush-0"))

    t = threading.Thread(target=outer)
    t.start()
    t.join(10)
    assert seen == {"outer": "bookie-io", "inner": "flush-0"}


def test_twisted_thread_pools_started_with_the_factory_name_their_threads():
    pool = ThreadPool(minthreads=1, maxthreads=1, name="test")
    pool.threadFactory = thread_factory("zk-meta")
    pool.start()
    try:
        seen: list[str] = []
        done = threading.Event()
        pool.callInThread(lambda: (seen.append(_comm(threading.get_native_id())), done.set()))
        assert done.wait(10)
        assert seen == ["zk-meta"]
    finally:
        pool.stop()
