"""The Bookie's blocking conveniences (scripts, tests, the crash-test child): an operation's callback
waited for on the calling thread. Never for the reactor thread: the server calls the callback API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from bkfast.errors import BKTimeoutException

__all__ = ["BlockingCalls", "SYNC_WAIT_SECONDS"]

SYNC_WAIT_SECONDS = 30.0

Callback = Callable[[BaseException | None], None]


class BlockingCalls:
    """Mixed into the Bookie: add_entry_sync, fence_sync, set_explicit_lac_sync."""

    # The Bookie's asynchronous calls: declared here, defined there.
    add_entry: Callable[..., None]
    fence: Callable[..., None]
    set_explicit_lac: Callable[..., None]

    def _wait(self, start: Callable[[Callback], None]) -> None:
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def callback(error):
            outcome.append(error)
            done.set()

        start(callback)
        if not done.wait(SYNC_WAIT_SECONDS):
            raise BKTimeoutException(f"bookie operation not durable after {SYNC_WAIT_SECONDS} s")
        if outcome[0] is not None:
            raise outcome[0]

    def add_entry_sync(self, entry, master_key: bytes, recovery: bool = False) -> None:
        self._wait(lambda cb: self.add_entry(entry, master_key, cb, recovery=recovery))

    def fence_sync(self, ledger_id: int, master_key: bytes, scope_id: int = 0) -> None:
        self._wait(lambda cb: self.fence(ledger_id, master_key, cb, scope_id))

    def set_explicit_lac_sync(self, ledger_id: int, lac_buffer: bytes, master_key: bytes, scope_id: int = 0):
        self._wait(lambda cb: self.set_explicit_lac(ledger_id, lac_buffer, master_key, cb, scope_id))
