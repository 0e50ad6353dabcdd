"""The client's `throttle` (bkfast/client/throttle.py): adds per second per ledger handle, in order."""

from __future__ import annotations

from twisted.internet import task

from bkfast.client.throttle import AddThrottle


def _throttle(rate):
    clock = task.Clock()
    return clock, AddThrottle(rate, clock, clock=clock.seconds)


def test_adds_beyond_the_rate_wait_for_their_permit_in_order():
    clock, throttle = _throttle(100)            # one permit every 10 ms
    ran: list[int] = []
    for i in range(5):
        throttle.submit(lambda i=i: ran.append(i))
    assert ran == [0] and len(throttle) == 4     # the first goes at once
    clock.advance(0.010)
    assert ran == [0, 1]
    clock.advance(0.025)
    assert ran == [0, 1, 2, 3]
    throttle.submit(lambda: ran.append(5))       # queued behind 4, never ahead of it
    clock.advance(0.010)
    assert ran == [0, 1, 2, 3, 4]
    clock.advance(0.010)
    assert ran == [0, 1, 2, 3, 4, 5] and len(throttle) == 0


def test_idle_time_buys_at_most_one_second_of_burst():
    clock, throttle = _throttle(10)
    ran: list[int] = []
    throttle.submit(lambda: ran.append(-1))
    clock.advance(60)                            # a minute idle: still only 10 permits stored
    for i in range(15):
        throttle.submit(lambda i=i: ran.append(i))
    assert ran == [-1] + list(range(10)) and len(throttle) == 5
    clock.advance(0.5)
    assert ran == [-1] + list(range(15))


def test_drop_returns_the_waiting_jobs_and_cancels_the_release():
    clock, throttle = _throttle(1)
    ran: list[int] = []
    for i in range(3):
        throttle.submit(lambda i=i: ran.append(i))
    dropped = throttle.drop()
    assert len(dropped) == 2 and len(throttle) == 0 and not clock.getDelayedCalls()
    clock.advance(10)
    assert ran == [0]
