"""bkfast.stats.thread_cpu: CPU per thread of a process, from /proc, and CPU per operation by thread."""

from __future__ import annotations

import os
import threading
import time

import pytest

from bkfast.stats.thread_cpu import ThreadCpuMeter, ThreadTime, cpu_by_thread, per_op_us, sample
from bkfast.threads import NamedThread


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_thread_that_burned_the_cpu_gets_it():
    meter = ThreadCpuMeter(os.getpid())
    meter.start()
    spun, measured = threading.Event(), threading.Event()
    spinner = NamedThread(lambda: (_spin(0.3), spun.set(), measured.wait(30)), "spinner-0")
    spinner.start()
    assert spun.wait(30)
    per_op = meter.stop(ops=1000)           # while the spinner still lives: an ended thread is not in /proc
    measured.set()
    spinner.join(30)
    assert 0.25 <= meter.spent["spinner-0"] <= 2.0, meter.spent
    # 0.3 s over 1000 ops: ~300 us per op; the spinner is the largest share, and the total holds it
    assert next(iter(per_op)) == "spinner-0"
    assert 250 <= per_op["spinner-0"] <= 2000
    assert per_op["total"] >= per_op["spinner-0"]


def test_sample_lists_every_live_thread_by_its_kernel_name():
    started, stop = threading.Event(), threading.Event()
    worker = NamedThread(lambda: (started.set(), stop.wait(10)), "sampled-1")
    worker.start()
    try:
        assert started.wait(10)
        threads = sample(os.getpid())
        assert threads[worker.native_id].name == "sampled-1"
        assert threads[threading.main_thread().native_id].cpu_s > 0
    finally:
        stop.set()
        worker.join(10)


def test_threads_sharing_a_name_add_up_and_a_reused_tid_is_a_new_thread():
    before = {1: ThreadTime(1, "read-0", 1.0), 2: ThreadTime(2, "read-0", 2.0), 3: ThreadTime(3, "gone", 5.0)}
    after = {1: ThreadTime(1, "read-0", 1.5), 2: ThreadTime(2, "read-0", 2.25),
             4: ThreadTime(4, "journal-0", 0.5), 3: ThreadTime(3, "new", 0.125)}
    assert cpu_by_thread(before, after) == {"read-0": 0.75, "journal-0": 0.5, "new": 0.125}


def test_per_op_folds_small_threads_into_other_and_adds_a_total():
    spent = {"bookie-io": 2.0, "journal-0": 1.0, "zk-client": 0.001, "gc": 0.002}
    assert per_op_us(spent, 1_000_000) == {"bookie-io": 2.0, "journal-0": 1.0, "other": 0.003, "total": 3.003}
    assert per_op_us(spent, 0) == {}


def test_a_process_that_is_gone_is_an_error():
    with pytest.raises(OSError):
        sample(2**22 + 12345)
