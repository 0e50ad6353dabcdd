"""The client's `throttle` (bkfast/client/throttle.py): adds per second per ledger handle, in order."""

from __future__ import annotations

from twisted.internet import task

from bkfast.client.throttle import AddThrottle, WaitingAdd


def _throttle(rate):
    clock = task.Clock()
    sent: list[int] = []
    return clock, AddThrottle(rate, clock, lambda add: sent.append(add.entry_id), clock=clock.seconds), sent


def _add(entry_id: int) -> WaitingAdd:
    return WaitingAdd(entry_id, b"data-%d" % entry_id, None, None, None)


def test_adds_beyond_the_rate_wait_for_their_permit_in_order():
    clock, throttle, sent = _throttle(100)       # one permit every 10 ms
    for i in range(5):
        throttle.submit(_add(i))
    assert sent == [0] and len(throttle) == 4     # the first goes at once
    clock.advance(0.010)
    assert sent == [0, 1]
    clock.advance(0.025)
    assert sent == [0, 1, 2, 3]
    throttle.submit(_add(5))                     # queued behind 4, never ahead of it
    clock.advance(0.010)
    assert sent == [0, 1, 2, 3, 4]
    clock.advance(0.010)
    assert sent == [0, 1, 2, 3, 4, 5] and len(throttle) == 0


def test_idle_time_buys_at_most_one_second_of_burst():
    clock, throttle, sent = _throttle(10)
    throttle.submit(_add(100))
    clock.advance(60)                            # a minute idle: still only 10 permits stored
    for i in range(15):
        throttle.submit(_add(i))
    assert sent == [100] + list(range(10)) and len(throttle) == 5
    clock.advance(0.5)
    assert sent == [100] + list(range(15))


def test_the_waiting_entry_ids_are_known_until_their_permit_comes():
    clock, throttle, sent = _throttle(10)
    for i in (7, 3, 9):
        throttle.submit(_add(i))
    assert sent == [7]
    assert 7 not in throttle and 3 in throttle and 9 in throttle and 4 not in throttle
    clock.advance(0.1)
    assert sent == [7, 3] and 3 not in throttle and 9 in throttle


def test_drop_returns_the_waiting_adds_and_cancels_the_release():
    clock, throttle, sent = _throttle(1)
    for i in range(3):
        throttle.submit(_add(i))
    dropped = throttle.drop()
    assert [add.entry_id for add in dropped] == [1, 2] and dropped[0].data == b"data-1"
    assert len(throttle) == 0 and 1 not in throttle and not clock.getDelayedCalls()
    clock.advance(10)
    assert sent == [0]
