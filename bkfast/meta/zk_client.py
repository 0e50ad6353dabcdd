"""The one way bkfast builds a kazoo client for a ZooKeeper session (a bookie's, a driver's, a shell command's).

Owns the connection retry: after a ZooKeeper outage the client must be back well within the session
timeout, or the server (which restarts every session's timer when it comes back) expires the session
and the bookie's registration with it. kazoo's default retry doubles its delay up to an hour: after a
20 s outage its next attempt came up to ~25 s later, and 2 of 3 bookies lost their sessions. Here the
delay starts at RETRY_START_S and is capped at the smaller of RETRY_MAX_S and a tenth of the session
timeout (Java's ZooKeeper client also tries again within a second), retried forever.

Also owns how a first connection is tried in front of an operator: kazoo logs a WARNING per failed attempt
(eight in ten seconds against a port nobody listens on) before the caller's own one-line error says the
same; `quiet_connect_attempts` holds those back and hands their text to the caller.

Must never: block the caller beyond `start`'s timeout, or hide a session loss (listeners still see
LOST; the bookie registration re-creates its node on the new session at once), or an ERROR of kazoo's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

__all__ = ["RETRY_MAX_S", "RETRY_START_S", "connection_retry", "make_zk_client", "quiet_connect_attempts"]

log = logging.getLogger(__name__)

RETRY_START_S = 0.05
RETRY_MAX_S = 1.0


def connection_retry(session_timeout_s: float) -> KazooRetry:
    """Unbounded reconnect attempts, quick backoff: 50 ms doubling up to min(1 s, timeout / 10)."""
    cap = max(RETRY_START_S, min(RETRY_MAX_S, session_timeout_s / 10.0))
    return KazooRetry(max_tries=-1, delay=RETRY_START_S, backoff=2, max_jitter=0.2, max_delay=cap)


def make_zk_client(hosts: str, session_timeout_s: float, *, log_states: bool = True, **kwargs) -> KazooClient:
    """A KazooClient (not started) with the quick connection retry; `kwargs` go to KazooClient."""
    kwargs.setdefault("connection_retry", connection_retry(session_timeout_s))
    client = KazooClient(hosts=hosts, timeout=session_timeout_s, **kwargs)
    if log_states:
        def on_state(state) -> None:          # runs on kazoo's event thread: log only
            if state == KazooState.SUSPENDED:
                log.warning("ZooKeeper %s: connection lost, reconnecting (the session lasts %.1f s)",
                            hosts, session_timeout_s)
            elif state == KazooState.LOST:
                log.warning("ZooKeeper %s: session ended (expired, or the client closed it)", hosts)
            else:
                log.info("ZooKeeper %s: connected", hosts)

        client.add_listener(on_state)
    return client


@contextlib.contextmanager
def quiet_connect_attempts(client: KazooClient, shown_from: int = logging.DEBUG) -> Iterator[list[str]]:
    """Around `client.start()`: keep kazoo's lines below ERROR off the log and yield the list their text is
    collected in, oldest first (the first one is why the first attempt failed: "Connection dropped: ...
    Connection refused", "Cannot resolve ..."). Nothing is held back when the client's logger is enabled
    for `shown_from`: whoever turned that on asked to see every attempt."""
    held: list[str] = []
    logger = client.logger
    if logger.isEnabledFor(shown_from):
        yield held
        return

    class _HoldBack(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.levelno >= logging.ERROR:
                return True
            held.append(record.getMessage())
            return False

    hold = _HoldBack()
    logger.addFilter(hold)
    try:
        yield held
    finally:
        logger.removeFilter(hold)
