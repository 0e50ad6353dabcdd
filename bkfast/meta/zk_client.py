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

Also owns Java's ZooKeeperClient stats for a session handed a StatsLogger (`stats=`): every request as
an OpStats `zk_<op>` (create, delete, exists, get_data, get_children, set_data, get_acl, set_acl, sync,
multi: success or failure, latency from the call to its answer; an error answer such as NoNode on a read
is a failure, `exists` of a missing node is not), `zk_create_client` (a new session after an expiry, from
the expiry to the new session), and counters `watcher_state_<KeeperState>` of the session's states. The
requests are timed by wrapping kazoo's *_async methods (its blocking methods call them) and transactions'
commit_async, so no request of the session goes unrecorded; a client without `stats=` is kazoo's own.

Must never: block the caller beyond `start`'s timeout, or hide a session loss (listeners still see
LOST; the bookie registration re-creates its node on the new session at once), or an ERROR of kazoo's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator

from kazoo.client import KazooClient, TransactionRequest
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.retry import KazooRetry

from bkfast._stats import now_ns
from bkfast.threads import ZK, start_thread

__all__ = ["RETRY_MAX_S", "RETRY_START_S", "WATCHER_STATES", "ZK_OPS", "StatsKazooClient", "ZkStats",
           "connection_retry", "make_zk_client", "quiet_connect_attempts"]

log = logging.getLogger(__name__)

RETRY_START_S = 0.05
RETRY_MAX_S = 1.0

# Java's ZooKeeperClient OpStats (scope `zk`) and the KeeperState names of its watcher counters (scope
# `watcher`, `state_<name>`), by the kazoo state the session is in when its listeners are told.
ZK_OPS = ("create", "create_client", "delete", "exists", "get_acl", "get_children", "get_data", "multi",
          "set_acl", "set_data", "sync")
WATCHER_STATES = {KeeperState.CONNECTED: "SyncConnected", KeeperState.CONNECTED_RO: "ConnectedReadOnly",
                  KeeperState.CONNECTING: "Disconnected", KeeperState.EXPIRED_SESSION: "Expired",
                  KeeperState.AUTH_FAILED: "AuthFailed", KeeperState.CLOSED: "Closed"}


def connection_retry(session_timeout_s: float) -> KazooRetry:
    """Unbounded reconnect attempts, quick backoff: 50 ms doubling up to min(1 s, timeout / 10)."""
    cap = max(RETRY_START_S, min(RETRY_MAX_S, session_timeout_s / 10.0))
    return KazooRetry(max_tries=-1, delay=RETRY_START_S, backoff=2, max_jitter=0.2, max_delay=cap)


class ZkStats:
    """The stats of one ZooKeeper session under a StatsLogger (`<scope>_zk_<op>`, `<scope>_watcher_state_*`).
    The state counters exist from the start (0 until the session is in that state)."""

    def __init__(self, stats):
        zk = stats.scope("zk")
        self.ops = {name: zk.op_stats(name) for name in ZK_OPS}
        watcher = stats.scope("watcher")
        self.states = {name: watcher.counter(f"state_{name}") for name in WATCHER_STATES.values()}
        self._expired_at: int | None = None

    def timed(self, op: str, call, *args, **kwargs):
        """`call(*args, **kwargs)` (a kazoo *_async method), its answer recorded as `op` when it comes."""
        stat = self.ops[op]
        start = now_ns()
        result = call(*args, **kwargs)

        def answered(done) -> None:      # kazoo's completion thread
            if done.exception is None:
                stat.ok_since(start)
            else:
                stat.fail_since(start)

        result.rawlink(answered)
        return result

    def timed_multi(self, result, start: int):
        """A transaction's answer: a failed operation inside it (kazoo answers with the exceptions in the
        list) fails the multi, as Java's multi() throws."""
        stat = self.ops["multi"]

        def answered(done) -> None:
            ok = done.exception is None and not any(isinstance(r, Exception) for r in done.value or ())
            (stat.ok_since if ok else stat.fail_since)(start)

        result.rawlink(answered)
        return result

    def on_state(self, keeper_state) -> None:
        """A state change of the session (kazoo's listener thread): count it; a session that follows an
        expiry is Java's `create_client`."""
        name = WATCHER_STATES.get(keeper_state)
        if name is not None:
            self.states[name].inc()
        if keeper_state == KeeperState.EXPIRED_SESSION:
            self._expired_at = now_ns()
        elif keeper_state in (KeeperState.CONNECTED, KeeperState.CONNECTED_RO) and self._expired_at is not None:
            self.ops["create_client"].ok_since(self._expired_at)
            self._expired_at = None
        elif keeper_state == KeeperState.CLOSED and self._expired_at is not None:
            self.ops["create_client"].fail_since(self._expired_at)
            self._expired_at = None


class _TimedAsync:
    """A StatsKazooClient method: the kazoo *_async method of the same name (the next class's in the MRO),
    each call timed as the session's `zk_<op>`."""

    def __init__(self, op: str):
        self.op = op

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner = owner
        self.name = name

    def __get__(self, client, owner=None):
        if client is None:
            return self
        kazoo_call = getattr(super(self.owner, client), self.name)
        return functools.partial(client.zk_stats.timed, self.op, kazoo_call)


class _StatsTransaction(TransactionRequest):
    def commit_async(self):
        start = now_ns()
        return self.client.zk_stats.timed_multi(super().commit_async(), start)


class StatsKazooClient(KazooClient):
    """A KazooClient whose every request and state change is recorded in a ZkStats (`zk_stats`)."""

    def __init__(self, *args, zk_stats: ZkStats, **kwargs):
        super().__init__(*args, **kwargs)
        self.zk_stats = zk_stats
        self.add_listener(lambda _state: zk_stats.on_state(self.client_state))

    create_async = _TimedAsync("create")
    delete_async = _TimedAsync("delete")
    exists_async = _TimedAsync("exists")
    get_async = _TimedAsync("get_data")
    get_children_async = _TimedAsync("get_children")
    set_async = _TimedAsync("set_data")
    get_acls_async = _TimedAsync("get_acl")
    set_acls_async = _TimedAsync("set_acl")
    sync_async = _TimedAsync("sync")

    def transaction(self):
        return _StatsTransaction(self)


class NamedThreadingHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose threads (connection, events, completions) are `zk-client` in the
    kernel, not whatever thread happened to start the client."""

    def spawn(self, func, *args, **kwargs):
        return start_thread(functools.partial(func, *args, **kwargs), f"{ZK}-client")


def make_zk_client(hosts: str, session_timeout_s: float, *, log_states: bool = True, stats=None,
                   **kwargs) -> KazooClient:
    """A KazooClient (not started) with the quick connection retry; `kwargs` go to KazooClient. With a
    StatsLogger `stats` that records (an enabled registry's), a StatsKazooClient recording Java's ZooKeeper
    client stats under it."""
    kwargs.setdefault("connection_retry", connection_retry(session_timeout_s))
    kwargs.setdefault("handler", NamedThreadingHandler())
    if stats is not None and stats.enabled:
        client = StatsKazooClient(hosts=hosts, timeout=session_timeout_s, zk_stats=ZkStats(stats), **kwargs)
    else:
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
