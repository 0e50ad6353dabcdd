"""The one way a thread that is not the reactor's runs something on the Twisted reactor and waits for it.

Users: the blocking client facade (`bkfast.client.blocking`), the sandbox, the bookie's garbage
collector asking the metadata driver which ledgers exist, and the tests. `submit(fn, ...)` starts
`fn(*args, **kwargs)` in the reactor thread and returns a `Pending`; `Pending.wait(timeout)` gives its
result (a returned Deferred or coroutine is followed to its end) or raises its error; `call(...)` is
both at once. A process with no reactor of its own (a script, a notebook, a Spark executor, pytest)
gets the global reactor running in a background thread with `start_reactor_thread()` (crochet); a
process that runs the reactor itself (the bookie) is served as it is.

Where no reactor runs at all, or when the caller IS the reactor thread, `fn` is called directly: it must
then answer at once (a plain value or an already fired Deferred) — waiting there could never end, so it
fails at once instead. Must never: block the reactor thread, or import anything of bkfast but errors.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any

from bkfast.errors import ReactorTimeoutError

__all__ = ["Pending", "call", "start_reactor_thread", "submit"]

_setup_lock = threading.Lock()
_thread_started = False
_outstanding: weakref.WeakSet = weakref.WeakSet()
_shutdown_hooked = False


def start_reactor_thread() -> None:
    """Run the global reactor in a background thread ("CrochetReactor") unless this process did already."""
    global _thread_started
    with _setup_lock:
        if not _thread_started:
            import crochet

            crochet.setup()
            _thread_started = True


class Pending:
    """The outcome of one `submit`: `wait(timeout)` returns the result or raises the error."""

    __slots__ = ("_done", "_value", "_failure", "_what", "__weakref__")

    def __init__(self, what: str):
        self._done = threading.Event()
        self._value = None
        self._failure = None
        self._what = what

    def _succeeded(self, value) -> None:
        self._value = value
        self._done.set()

    def _failed(self, failure) -> None:
        self._failure = failure
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None):
        """The result; the call's exception re-raised; ReactorTimeoutError after `timeout` seconds."""
        from twisted.python.threadable import isInIOThread

        if not self._done.is_set():
            if isInIOThread():
                raise ReactorTimeoutError(f"{self._what} did not answer at once, and the reactor thread cannot "
                                          "wait for it (its answer needs the reactor)")
            if not self._done.wait(timeout):
                raise ReactorTimeoutError(f"no result within {timeout} s from {self._what}")
        if self._failure is not None:
            self._failure.raiseException()
        return self._value


def _run(pending: Pending, fn, args, kwargs) -> None:
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

    try:
        result = fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            result = Deferred.fromCoroutine(result)
    except BaseException:  # noqa: BLE001 - handed to the waiting thread
        pending._failed(Failure())
        return
    if isinstance(result, Deferred):
        result.addCallbacks(pending._succeeded, pending._failed)
    else:
        pending._succeeded(result)


def _fail_outstanding() -> None:
    # The reactor is stopping: nothing will answer the calls still waiting; let their threads go.
    from twisted.python.failure import Failure

    for pending in list(_outstanding):
        if not pending.done():
            pending._failed(Failure(ReactorTimeoutError(f"{pending._what}: the reactor stopped before it answered")))


def submit(fn, *args, **kwargs) -> Pending:
    """Start `fn(*args, **kwargs)` in the reactor thread (see the module docstring for where none runs)."""
    global _shutdown_hooked
    from twisted.internet import reactor as global_reactor
    from twisted.python.threadable import isInIOThread

    reactor: Any = global_reactor     # it provides every IReactor* interface; Twisted types it as one of them

    pending = Pending(getattr(fn, "__qualname__", None) or repr(fn))
    if isInIOThread() or not (reactor.running or _thread_started):
        _run(pending, fn, args, kwargs)
        return pending
    with _setup_lock:
        if not _shutdown_hooked:
            reactor.callFromThread(reactor.addSystemEventTrigger, "before", "shutdown", _fail_outstanding)
            _shutdown_hooked = True
        _outstanding.add(pending)
    reactor.callFromThread(_run, pending, fn, args, kwargs)
    return pending


def call(fn, *args, timeout: float | None, **kwargs):
    """`fn(*args, **kwargs)` run in the reactor thread, waited for: its (Deferred's) result or its error."""
    return submit(fn, *args, **kwargs).wait(timeout)
