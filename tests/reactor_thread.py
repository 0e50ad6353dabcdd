"""Run Twisted code from tests: the global reactor runs in a background thread for the whole pytest
process, and `call` runs a function in the reactor thread and waits for its result (`bkfast.reactor`).

`fn` may return a plain value or a Deferred (or be a coroutine function: it is wrapped with
`Deferred.fromCoroutine`). Exceptions raised in the reactor are re-raised in the test thread.
"""

from __future__ import annotations

from bkfast.reactor import call as _reactor_call
from bkfast.reactor import start_reactor_thread

start_reactor_thread()

from twisted.internet import reactor  # noqa: E402 - the reactor thread is started first

__all__ = ["call", "reactor"]


def call(fn, *args, timeout: float = 60.0, **kwargs):
    """`fn(*args, **kwargs)` in the reactor thread; its (Deferred's) result, or its exception."""
    return _reactor_call(fn, *args, timeout=timeout, **kwargs)
