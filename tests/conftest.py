"""Shared pytest fixtures for the bkfast test suite.

ZooKeeper (a real server; Java and Debian's ``zookeeper`` package are installed by ``make test``):
  * ``zookeeper_server`` (session): starts one standalone ZooKeeper JVM on 127.0.0.1 with
    ``tests/zk_server.py``'s ``ZooKeeperServer`` and yields its connect string ``"127.0.0.1:PORT"``.
    The JVM is stopped by pid (SIGTERM, then SIGKILL) when the session ends.
  * ``zk_client`` (function): a started ``KazooClient`` chrooted to a fresh ``/test-<uuid>`` on that
    server; its tree is deleted and the client stopped and closed after the test.
"""

from __future__ import annotations

import uuid

import pytest

from tests.zk_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server():
    """Connect string of a real ZooKeeper server shared by the whole test session."""
    server = ZooKeeperServer()
    server.start()
    try:
        yield server.connect_string
    finally:
        server.stop()


@pytest.fixture
def zk_client(zookeeper_server):
    """A connected KazooClient chrooted to a unique, freshly created ``/test-<uuid>`` path."""
    from kazoo.client import KazooClient

    chroot = f"/test-{uuid.uuid4().hex}"
    setup = KazooClient(hosts=zookeeper_server, timeout=10.0)
    setup.start(timeout=15)
    try:
        setup.ensure_path(chroot)
    finally:
        setup.stop()
        setup.close()
    client = KazooClient(hosts=zookeeper_server + chroot, timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        try:
            if client.connected:
                client.delete("/", recursive=True)     # "/" is the chroot: removes /test-<uuid> too
        except Exception:
            pass                                       # best effort; the server is thrown away anyway
        finally:
            client.stop()
            client.close()
