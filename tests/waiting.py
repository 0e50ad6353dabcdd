"""Waiting on a condition instead of sleeping: the one helper tests use to wait for something to become true.

A fixed sleep is either too short on a loaded machine (a flaky test) or too long everywhere else (a slow one);
polling a condition under a deadline is neither, and when the deadline passes the message names what did not
happen. Sleeps that are the point of a test ("nothing happens during X seconds") stay sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(what: str, predicate: Callable[[], T], timeout: float = 30.0, step: float = 0.05) -> T:
    """Poll `predicate` every `step` s until it returns something truthy, and return that; after `timeout` s,
    fail naming `what` was waited for (and the last value seen)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {result!r})")
        time.sleep(step)
    return result
