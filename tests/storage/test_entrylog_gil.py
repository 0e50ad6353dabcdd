"""An entry log channel copies large appends into its buffer with the GIL released, and readers on other
threads still see only whole, written bytes."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest

from bkfast._entrylog import BufferedChannel
from bkfast.storage.entrylogger import EntryLogger
from tests.storage.test_entrylog_direct import ReadersOnOtherThreads, conf, entry, open_direct_channel

# Big enough that the copy into the buffer takes milliseconds: a thread waiting for the GIL gets it then.
BIG_APPEND = 32 << 20
SWITCH_INTERVAL_S = 0.2
ATTEMPTS = 10


def ran_during(append) -> bool:
    """Whether a Python thread spinning on the GIL ran while `append()` was inside its C call."""
    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    spinner = threading.Thread(target=spin)
    interval = sys.getswitchinterval()
    # The spinner may force a GIL hand-over only after waiting this long: not within the few milliseconds
    # from `before` to the read after the call, so only a release inside the call lets it count.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    spinner.start()
    try:
        time.sleep(0.001)               # the spinner runs; the main thread comes back with a fresh GIL
        before = count[0]
        append()
        return count[0] != before
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)


def open_channel(path, direct: bool) -> BufferedChannel:
    """A channel whose buffer holds BIG_APPEND twice: an append of it is one copy, never a write out."""
    if direct:
        return open_direct_channel(path, 2 * BIG_APPEND)
    return BufferedChannel(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), 0, 0, 2 * BIG_APPEND)


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_a_large_append_is_copied_with_the_gil_released(tmp_path, direct):
    channel = open_channel(tmp_path / "small.log", direct)
    try:
        assert not ran_during(lambda: channel.write(b"x" * 1000))
    finally:
        channel.close()
    big = bytes(range(256)) * (BIG_APPEND // 256)

    def copied_with_the_gil_released(attempt: int) -> bool:
        path = tmp_path / f"{attempt}.log"
        channel = open_channel(path, direct)          # a fresh one: no append may write its buffer out
        try:
            released = ran_during(lambda: channel.write(big))
            assert channel.read(0, len(big)) == big
            channel.sync()
            assert path.read_bytes()[:len(big)] == big
            return released
        finally:
            channel.close()
    # Each try needs the spinner scheduled within the copy's few milliseconds, which a loaded machine (the
    # whole suite on two cores) may not give; with the GIL held through the copy no try can pass.
    assert any(copied_with_the_gil_released(attempt) for attempt in range(ATTEMPTS))


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_readers_on_other_threads_see_whole_entries_while_large_ones_are_copied_in(tmp_path, direct):
    el = EntryLogger([tmp_path], conf(direct, writeBufferSizeBytes=4 << 20, logSizeLimit=64 << 20))
    rng = random.Random(5)
    with ReadersOnOtherThreads(el, 500) as readers:
        for i in range(300):
            if readers.done.is_set():
                break
            data = entry(1 + i % 3, i, rng.choice([100, 70_000, 200_000, 900_000]))
            readers.written.append((el.add_entry(1 + i % 3, data), data))
            if i % 11 == 0:
                el.flush()
    el.close()
