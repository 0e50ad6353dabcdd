"""Run Twisted code from tests: the global reactor runs in a background thread (crochet) for the
whole pytest process, and `call` runs a function in the reactor thread and waits for its result.

`fn` may return a plain value or a Deferred (or be a coroutine function: it is wrapped with
`Deferred.fromCoroutine`). Exceptions raised in the reactor are re-raised in the test thread.
"""

from __future__ import annotations

import inspect

import crochet

crochet.setup()

from twisted.internet import defer, reactor  # noqa: E402 - crochet must install its reactor thread first

__all__ = ["call", "reactor"]


def call(fn, *args, timeout: float = 60.0, **kwargs):
    """`fn(*args, **kwargs)` in the reactor thread; its (Deferred's) result, or its exception."""

    @crochet.run_in_reactor
    def _in_reactor():
        result = fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            return defer.Deferred.fromCoroutine(result)
        return result

    return _in_reactor().wait(timeout)
