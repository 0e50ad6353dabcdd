"""The blocking ledger API for scripts, notebooks and Spark executors.

Same method names and semantics as the async API, but every call waits for its result. The Twisted
reactor runs in a background thread (`bkfast.reactor`), so this may be used from any thread, by many threads.

    from bkfast import BookKeeper
    with BookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers") as bk:
        with bk.create_ledger(3, 2, 2, password=b"pw") as lh:
            lh.add_entry(b"hello")
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from bkfast.attributes import forwarded
from bkfast.reactor import call, start_reactor_thread, submit

__all__ = ["BookKeeper", "BlockingLedgerHandle", "ClosedOnExit", "call_in_reactor", "pipelined_adds"]

DEFAULT_TIMEOUT_S = 120.0


class _Closeable(Protocol):
    def close(self) -> None: ...


def call_in_reactor(timeout: float, fn, *args, **kwargs):
    """Run `fn(*args, **kwargs)` (which may return a Deferred or a coroutine) in the client's reactor thread
    and wait for its result (a BKTimeoutException after `timeout` s). For callers of the async API, e.g.
    bkfast.admin asking a bookie through `BookKeeper.async_client`."""
    start_reactor_thread()
    return call(fn, *args, timeout=timeout, **kwargs)


class ClosedOnExit:
    """`with obj:` closes obj when the block ends (the blocking faces: clients, handles, writers)."""

    def __enter__(self):
        return self

    def __exit__(self: _Closeable, *exc) -> None:
        self.close()


class BlockingLedgerHandle(ClosedOnExit):
    """A ledger handle whose calls block; wraps a `LedgerHandle` / `WriteHandle` of the async API."""

    def __init__(self, handle, timeout: float):
        self._handle = handle
        self._timeout = timeout

    # identity and state (read from the handle; plain attribute reads are safe across threads)
    ledger_id = forwarded("_handle.ledger_id")
    id = ledger_id
    scope_id = forwarded("_handle.scope_id")
    qualified_name = forwarded("_handle.qualified_name")
    last_add_confirmed = forwarded("_handle.last_add_confirmed")
    length = forwarded("_handle.length")
    metadata = forwarded("_handle.metadata")
    is_closed = forwarded("_handle.is_closed")

    @property
    def async_handle(self):
        """The underlying async handle (use only from the reactor thread)."""
        return self._handle

    # writes
    def add_entry(self, *args) -> int:
        """Append (`add_entry(data)`, or `add_entry(entry_id, data)` on an adv ledger); returns the entry id."""
        return call(self._handle.add_entry, *args, timeout=self._timeout)

    append = add_entry

    def add_entry_async(self, *args):
        """Start an add; returns a `bkfast.reactor.Pending` (`.wait(timeout)` gives the entry id)."""
        return submit(self._handle.add_entry, *args)

    def add_entries(self, payloads: Iterable[bytes], max_outstanding: int = 1000) -> list[int]:
        """Append many payloads with up to `max_outstanding` adds in flight; returns their entry ids."""
        return call(pipelined_adds, self._handle, list(payloads), max_outstanding, timeout=self._timeout * 10)

    def force(self) -> int:
        return call(self._handle.force, timeout=self._timeout)

    def close(self) -> None:
        call(self._handle.close, timeout=self._timeout)

    # reads
    def read_entries(self, first: int, last: int) -> list:
        return call(self._handle.read_entries, first, last, timeout=self._timeout)

    def read_unconfirmed_entries(self, first: int, last: int) -> list:
        return call(self._handle.read_unconfirmed_entries, first, last, timeout=self._timeout)

    def read_entry(self, entry_id: int):
        return call(self._handle.read_entry, entry_id, timeout=self._timeout)

    def read_last_add_confirmed(self) -> int:
        return call(self._handle.read_last_add_confirmed, timeout=self._timeout)

    def read_explicit_lac(self) -> int:
        return call(self._handle.read_explicit_lac, timeout=self._timeout)

    def read_lac_long_poll(self, previous_lac: int | None = None, timeout_ms: int = 10000) -> int:
        return call(self._handle.read_lac_long_poll, previous_lac, timeout_ms,
                    timeout=self._timeout + timeout_ms / 1000.0)

    def refresh_metadata(self):
        return call(self._handle.refresh_metadata, timeout=self._timeout)

    def tail(self, start: int = 0, poll_timeout_ms: int = 1000, batch: int = 1000,
             stop_when_closed: bool = True) -> Iterator:
        """Yield entries from `start` as they become confirmed (long-poll LAC reads); ends once the
        ledger is closed and fully read (unless `stop_when_closed` is False)."""
        next_entry = start
        while True:
            lac = self._handle.last_add_confirmed
            if next_entry <= lac:
                last = min(lac, next_entry + batch - 1)
                yield from self.read_entries(next_entry, last)
                next_entry = last + 1
                continue
            if self._handle.is_closed:
                if stop_when_closed:
                    return
            new_lac = self.read_lac_long_poll(next_entry - 1, poll_timeout_ms)
            if new_lac < next_entry:
                metadata = self.refresh_metadata()
                if metadata.is_closed and next_entry > metadata.last_entry_id and stop_when_closed:
                    return

    def __repr__(self) -> str:
        return f"Blocking{self._handle!r}"


def pipelined_adds(handle, payloads: list, max_outstanding: int):
    """Reactor thread: add `payloads` to a WriteHandle with at most `max_outstanding` in flight; a Deferred of
    their entry ids, in order (or of the first error)."""
    from twisted.internet import defer

    done: defer.Deferred[list[int]] = defer.Deferred()
    ids: list[int] = [0] * len(payloads)
    state = {"next": 0, "in_flight": 0, "completed": 0, "failed": False}

    def on_done(error, entry_id, index):
        state["in_flight"] -= 1
        if error is None:
            ids[index] = entry_id
            state["completed"] += 1
            pump()
        elif not state["failed"]:
            state["failed"] = True
            done.errback(error)

    add = handle.async_add_entry        # a callback per add, no Deferred (the cheap path)

    def pump():
        if state["failed"] or done.called:
            return
        while state["next"] < len(payloads) and state["in_flight"] < max_outstanding:
            index = state["next"]
            state["next"] += 1
            state["in_flight"] += 1
            add(payloads[index], on_done, index)
        if state["completed"] == len(payloads) and not done.called:
            done.callback(ids)

    pump()
    return done


class BookKeeper(ClosedOnExit):
    """Blocking client: ``BookKeeper(metadata_uri, **conf)`` (BookKeeper key names, or protocol="v3")."""

    def __init__(self, metadata_uri: str, timeout: float = DEFAULT_TIMEOUT_S, **conf):
        from .bookkeeper import AsyncBookKeeper

        start_reactor_thread()
        self._timeout = timeout
        self._bk = call(AsyncBookKeeper.connect, metadata_uri, None, **conf, timeout=timeout)

    @property
    def async_client(self):
        return self._bk

    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, digest_type=None,
                      password: bytes | str = b"", custom_metadata: dict | None = None,
                      scope_id: int = 0, deferred_sync: bool = False) -> BlockingLedgerHandle:
        handle = call(self._bk.create_ledger, ensemble_size, write_quorum, ack_quorum, digest_type,
                      password, custom_metadata, scope_id, deferred_sync, timeout=self._timeout)
        return BlockingLedgerHandle(handle, self._timeout)

    def create_ledger_adv(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                          digest_type=None, password: bytes | str = b"", custom_metadata: dict | None = None,
                          scope_id: int = 0, ledger_id: int | None = None) -> BlockingLedgerHandle:
        handle = call(self._bk.create_ledger_adv, ensemble_size, write_quorum, ack_quorum,
                      digest_type, password, custom_metadata, scope_id, ledger_id, timeout=self._timeout)
        return BlockingLedgerHandle(handle, self._timeout)

    def open_ledger(self, ledger_id: int, password: bytes | str = b"", recovery: bool = True,
                    scope_id: int = 0) -> BlockingLedgerHandle:
        handle = call(self._bk.open_ledger, ledger_id, password, recovery, scope_id, timeout=self._timeout)
        return BlockingLedgerHandle(handle, self._timeout)

    def delete_ledger(self, ledger_id: int, scope_id: int = 0) -> None:
        call(self._bk.delete_ledger, ledger_id, scope_id, timeout=self._timeout)

    def list_ledgers(self, scope_id: int = 0) -> list[int]:
        return call(self._bk.list_ledgers, scope_id, timeout=self._timeout)

    def get_ledger_metadata(self, ledger_id: int, scope_id: int = 0):
        return call(self._bk.get_ledger_metadata, ledger_id, scope_id, timeout=self._timeout)

    def close(self) -> None:
        call(self._bk.close, timeout=self._timeout)
