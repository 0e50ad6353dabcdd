"""The hand-off queue to the add worker (bkfast.net._handoff): items come out in the order put, a taker
asleep in get() is woken by put(), and nothing is lost between two threads."""

from __future__ import annotations

import threading

from bkfast.net._handoff import HandOff


def test_items_come_out_in_order_across_threads():
    queue: HandOff[int | None] = HandOff()
    got: list[int] = []

    def take() -> None:
        while (item := queue.get()) is not None:
            got.append(item)

    taker = threading.Thread(target=take)
    taker.start()
    n = 200_000
    for i in range(n):
        queue.put(i)
    queue.put(None)
    taker.join(30)
    assert not taker.is_alive() and got == list(range(n))
    assert len(queue) == 0


def test_a_taker_asleep_in_get_is_woken_by_put():
    queue: HandOff[str] = HandOff()
    asleep = threading.Event()
    got: list[str] = []

    def take() -> None:
        asleep.set()
        got.append(queue.get())

    taker = threading.Thread(target=take)
    taker.start()
    asleep.wait(10)
    taker.join(0.2)
    assert taker.is_alive() and not got      # nothing put: it waits
    queue.put("read")
    taker.join(10)
    assert got == ["read"]
