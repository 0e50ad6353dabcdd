"""bkfast.reactor: running a function on the reactor thread from another thread and waiting for it."""

from __future__ import annotations

import pytest
from twisted.internet import defer, task
from twisted.python.threadable import isInIOThread

from bkfast.errors import BKTimeoutException, ReactorTimeoutError
from bkfast.reactor import call, submit
from tests.reactor_thread import reactor


def test_call_runs_the_function_in_the_reactor_thread_and_returns_its_value():
    assert not isInIOThread()
    assert call(lambda a, b=0: (isInIOThread(), a + b), 2, b=3, timeout=10) == (True, 5)


def test_a_deferred_result_is_followed_to_its_value():
    assert call(lambda: task.deferLater(reactor, 0.01, lambda: "later"), timeout=10) == "later"


def test_a_coroutine_result_is_awaited():
    async def two_steps():
        first = await task.deferLater(reactor, 0.01, lambda: 20)
        return first + 1

    assert call(two_steps, timeout=10) == 21


def test_errors_are_raised_in_the_waiting_thread():
    def fails():
        raise KeyError("raised in the reactor")

    with pytest.raises(KeyError, match="raised in the reactor"):
        call(fails, timeout=10)
    with pytest.raises(ZeroDivisionError):
        call(lambda: defer.fail(ZeroDivisionError()), timeout=10)


def test_a_call_without_an_answer_in_time_raises_a_timeout_every_caller_understands():
    never = defer.Deferred()
    with pytest.raises(ReactorTimeoutError, match="no result within 0.05 s") as info:
        call(lambda: never, timeout=0.05)
    assert isinstance(info.value, BKTimeoutException) and isinstance(info.value, TimeoutError)


def test_submit_returns_at_once_and_wait_gives_the_result_later():
    answer = defer.Deferred()
    pending = submit(lambda: answer)
    assert not pending.done()
    reactor.callFromThread(answer.callback, "fired")
    assert pending.wait(10) == "fired"
    assert pending.done()


def test_in_the_reactor_thread_the_call_is_direct_and_must_answer_at_once():
    def inside():
        direct = submit(lambda: "now").wait(1)
        unanswered = submit(defer.Deferred)
        with pytest.raises(ReactorTimeoutError, match="reactor thread cannot wait"):
            unanswered.wait(1)
        return direct

    assert call(inside, timeout=10) == "now"
