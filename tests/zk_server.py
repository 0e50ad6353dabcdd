"""The test suite's real ZooKeeper server (`bkfast.cli.local_zookeeper`, shared with `bkfast sandbox --zk`),
and what only tests do to it: `expire_session` expires a kazoo client's session on the server (its ephemerals
vanish) the way the Java ZooKeeper test harness does it, a second client joining the session and closing it."""

from __future__ import annotations

import threading
import time

from bkfast.cli.local_zookeeper import (  # noqa: F401 - re-exported for the tests
    ZooKeeperServer,
    ZooKeeperServerError,
    find_classpath,
    four_letter_word,
    probe_session,
)


def expire_session(client, timeout: float = 15.0, wait_reconnect: bool = True) -> None:
    """Really expire ``client``'s session on the server (its ephemerals are deleted), then wait until
    the client has seen ``KazooState.LOST`` and, if ``wait_reconnect``, is CONNECTED on a new session.

    A second client joins the session with the same (session id, password) and closes it; the server
    then drops the original connection, and kazoo's reconnect is told the session expired."""
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState

    client_id = client.client_id
    if client_id is None:
        raise ValueError("client is not connected; cannot expire its session")
    lost = threading.Event()

    def listener(state):
        if state == KazooState.LOST:
            lost.set()
        return lost.is_set()                 # True removes the listener

    client.add_listener(listener)
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in client.hosts)
    other = KazooClient(hosts=hosts, client_id=client_id, timeout=timeout)
    try:
        other.start(timeout=timeout)
    finally:
        other.stop()
        other.close()
    if not lost.wait(timeout):
        client.remove_listener(listener)
        raise TimeoutError(f"client did not observe session expiry within {timeout} s")
    if wait_reconnect:
        deadline = time.monotonic() + timeout
        while not (client.connected and client.client_id not in (None, client_id)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"client did not reconnect within {timeout} s after session expiry")
            time.sleep(0.02)
