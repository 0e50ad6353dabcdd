"""Shared pytest fixtures for the bkfast test suite.

ZooKeeper (a real server; Java and Debian's ``zookeeper`` package are installed by ``make test``):
  * ``zookeeper_server`` (session): starts one standalone ZooKeeper JVM on 127.0.0.1 with
    ``tests/zk_server.py``'s ``ZooKeeperServer`` and yields its connect string ``"127.0.0.1:PORT"``.
    The JVM is stopped by pid (SIGTERM, then SIGKILL) when the session ends.
  * ``zk_client`` (function): a started ``KazooClient`` chrooted to a fresh ``/test-<uuid>`` on that
    server; its tree is deleted and the client stopped and closed after the test.

etcd (a real server; Debian's ``etcd-server`` package is installed by ``make test``):
  * ``etcd_server`` (session): a started ``tests/etcd_server.py`` ``EtcdServer``, single member on
    127.0.0.1 (``.endpoint`` is ``"127.0.0.1:PORT"``), stopped by pid when the session ends.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.etcd_server import EtcdServer
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


@pytest.fixture(scope="session")
def etcd_server():
    """A real etcd server shared by the whole test session; tests share its keyspace, so use unique keys."""
    server = EtcdServer()
    server.start()
    try:
        yield server
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


# --- the fast tier (`make test-fast`: pytest -m "not slow") ----------------------------------------------------
_SLOW_LIST = Path(__file__).resolve().parent / "slow_tests.txt"
# Crash tests and fault campaigns are slow by what they are; the Spark tests share one JVM-backed session whose
# start alone (about 11 s) would take a twentieth of the fast tier's budget.
_ALWAYS_SLOW = ("tests/crash/", "tests/faults/", "tests/spark/")


def _slow_test_ids() -> set[str]:
    ids = set()
    for line in _SLOW_LIST.read_text().splitlines():
        node = line.split("  # ", 1)[0].strip()
        if node and not node.startswith("#"):
            ids.add(node)
    return ids


@pytest.hookimpl(tryfirst=True)       # before -k/-m deselect, so every collected test is seen
def pytest_collection_modifyitems(config, items):
    slow_ids = _slow_test_ids()
    collected = {item.nodeid for item in items}
    collected_files = {nodeid.split("::", 1)[0] for nodeid in collected}
    # A run that names single tests (file::test) collects only those: the rest of the file is not stale.
    whole_files = not any("::" in str(arg) for arg in config.args)
    stale = sorted(n for n in slow_ids if whole_files and n.split("::", 1)[0] in collected_files
                   and n not in collected)
    if stale:
        raise pytest.UsageError("tests/slow_tests.txt names tests that do not exist (renamed or removed? rerun "
                                "scripts/update_slow_tests.py or edit the list):\n  " + "\n  ".join(stale))
    for item in items:
        if item.nodeid in slow_ids or item.nodeid.startswith(_ALWAYS_SLOW):
            item.add_marker(pytest.mark.slow)
