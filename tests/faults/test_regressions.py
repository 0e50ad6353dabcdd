"""Bugs the fault campaigns found in bkfast, each pinned by a test on a real cluster (on loopback, or in
the harness's namespaces when the bug needs a partition)."""

from __future__ import annotations

import os
import time

import pytest

from bkfast import BookKeeper
from tests.client_cluster import Cluster
from tests.faults.cluster import SESSION_TIMEOUT_MS, ZK_PORT, FaultCluster
from tests.faults.netns import run_in_netns

pytestmark = pytest.mark.zookeeper

PASSWORD = b"regressions"


def test_ensemble_change_uses_a_recently_failed_bookie_rather_than_failing_the_writer(zookeeper_server, tmp_path):
    """Campaign seed 1 (kill_bookie after a pause): a writer's ensemble change refused the only spare bookie
    because it had failed within the last minute, and the writer failed with 'need 1 writable bookies, have
    0'. Java's BookieWatcher prefers non-quarantined bookies but falls back to quarantined ones."""
    cluster = Cluster(zookeeper_server, tmp_path, bookies=4)
    try:
        with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as bk:
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
            ensemble = lh.metadata.ensembles[0][1]
            spare = next(b.bookie_id for b in cluster.bookies if b.bookie_id not in ensemble)
            bk.async_client.note_failed_bookies([spare])        # it failed a moment ago, now it is back
            for i in range(20):
                lh.add_entry(b"before %d" % i)
            cluster.by_id(ensemble[0]).kill()
            for i in range(20):
                lh.add_entry(b"after %d" % i)
            assert lh.metadata.ensembles[-1][1] == (spare, *ensemble[1:])
            lh.close()
            assert [e.data for e in lh.read_entries(0, 39)] == \
                [b"before %d" % i for i in range(20)] + [b"after %d" % i for i in range(20)]
    finally:
        cluster.stop()



def _children(cluster, path: str) -> list[str]:
    """ZooKeeper's children of `path`, asked from the checker's host (the test's own thread is outside
    the cluster's namespaces)."""
    from kazoo.client import KazooClient

    def ask():
        client = KazooClient(hosts=f"{cluster.net.hosts['zk']}:{ZK_PORT}", timeout=10.0)
        client.start(timeout=30)
        try:
            return client.get_children(path)
        finally:
            client.stop()
            client.close()

    return run_in_netns(cluster.net.ns("chk"), ask)


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_registration_follows_a_read_only_switch_made_while_zookeeper_was_unreachable(tmp_path):
    """Campaign seed 100 (disk_full during zk_restart): the bookie turned read-only while its ZooKeeper
    connection was down; moving the registration failed (ConnectionLoss, an unhandled error in the log) and
    was never tried again, and the session's re-registration re-created the old, writable node. Clients
    kept choosing a bookie that refused every add."""
    with FaultCluster(tmp_path, bookies=1, prefix=f"bkr{os.getpid()}") as cluster:
        bookie_id = cluster.bookies["b1"].bookie_id
        assert _children(cluster, "/ledgers/available/readonly") == []
        cluster.net.cut("b1", ["zk"])
        cluster.fill_disk()                      # the disk checker (every 500 ms) turns the bookie read-only
        time.sleep(3 * SESSION_TIMEOUT_MS / 1000.0)
        cluster.net.uncut("b1")
        deadline = time.monotonic() + 30
        while _children(cluster, "/ledgers/available/readonly") != [bookie_id]:
            assert time.monotonic() < deadline, _children(cluster, "/ledgers/available")
            time.sleep(0.5)
        assert bookie_id not in _children(cluster, "/ledgers/available")
        cluster.empty_disk()                     # and back to writable, with ZooKeeper reachable
        deadline = time.monotonic() + 30
        while bookie_id not in _children(cluster, "/ledgers/available"):
            assert time.monotonic() < deadline, _children(cluster, "/ledgers/available")
            time.sleep(0.5)
        assert _children(cluster, "/ledgers/available/readonly") == []


def test_failed_recovery_adds_leave_no_unhandled_errors(zookeeper_server, tmp_path):
    """Campaign seed 101: a recovery whose re-adds could not replace a dead bookie failed as it should
    (BKLedgerRecoveryException), but every re-add's Deferred was dropped failed, and Twisted logged each as
    'Unhandled error in Deferred' with a traceback, which reads like a crash of the client."""
    import gc

    from twisted.logger import globalLogPublisher

    from bkfast.errors import BKLedgerRecoveryException

    unhandled = []

    def observer(event):
        if "Unhandled error in Deferred" in str(event.get("log_format", "")):
            unhandled.append(event)

    cluster = Cluster(zookeeper_server, tmp_path, bookies=3)
    globalLogPublisher.addObserver(observer)
    try:
        with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as writer, \
                BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5) as reader:
            lh = writer.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
            for i in range(10):
                lh.add_entry(b"entry %d" % i)       # entry 9 carries LAC 8: recovery re-adds entry 9
            cluster.by_id(lh.metadata.ensembles[0][1][0]).kill()
            with pytest.raises(BKLedgerRecoveryException):
                reader.open_ledger(lh.ledger_id, PASSWORD)
            gc.collect()
            time.sleep(0.5)                          # the reactor thread finishes the failed handle
            gc.collect()
        assert unhandled == []
    finally:
        globalLogPublisher.removeObserver(observer)
        cluster.stop()


class _AnswerDroppingProxy:
    """A TCP proxy on 127.0.0.1 in front of ZooKeeper. Once armed with a byte pattern, it forwards the client's
    request that contains it, forwards no answer any more, and closes the connection half a second later: the
    server has carried the request out, the client only sees its connection lost (what a ZooKeeper restart
    or a network cut does to a request in flight). New connections are proxied normally."""

    def __init__(self, target: str):
        import socket
        import threading

        host, port = target.split(",")[0].rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pattern: bytes | None = None
        self.fired = threading.Event()
        self._sockets: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, pattern: bytes) -> None:
        self.fired.clear()
        self.pattern = pattern

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    def _up(self, client, server, cut) -> None:
        try:
            while data := client.recv(65536):
                hit = self.pattern is not None and self.pattern in data
                if hit:
                    self.pattern = None
                    cut.set()                      # from now on, no answer reaches the client
                server.sendall(data)
                if hit:
                    time.sleep(0.5)                # the server carries the request out
                    self.fired.set()
                    break
        except OSError:
            pass
        for s in (client, server):
            s.close()

    def _down(self, server, client, cut) -> None:
        try:
            while data := server.recv(65536):
                if cut.is_set():
                    continue
                client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for s in self._sockets:
            s.close()


def _proxied_urm(zookeeper_server):
    """(proxy, urm over a client through the proxy, urm over a direct client), both under one fresh chroot."""
    import uuid

    from kazoo.client import KazooClient

    from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager

    chroot = f"/regress-{uuid.uuid4().hex}"
    direct = KazooClient(hosts=zookeeper_server + chroot, timeout=10.0)
    setup = KazooClient(hosts=zookeeper_server, timeout=10.0)
    setup.start(timeout=15)
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()
    direct.start(timeout=15)
    proxy = _AnswerDroppingProxy(zookeeper_server)
    proxied = KazooClient(hosts=f"127.0.0.1:{proxy.port}{chroot}", timeout=10.0)
    proxied.start(timeout=15)
    urm = UnderReplicationManager(proxied, "/ledgers", lock_holder="worker-under-test")
    urm.ensure_layout()
    return proxy, urm, UnderReplicationManager(direct, "/ledgers", lock_holder="another-worker")


def _close(*urms) -> None:
    for urm in urms:
        urm.zk.stop()
        urm.zk.close()


def test_a_lock_created_just_before_the_connection_dropped_is_known_to_be_held(zookeeper_server):
    """Campaign seed 101 (zk_restart during AutoRecovery): a worker's lock create reached ZooKeeper but its
    answer was lost with the connection; try_lock raised ConnectionLoss, the worker moved on, and its live
    session kept the lock, so no worker took the mark again: two marks were still there 60 s after healing."""
    proxy, urm, other = _proxied_urm(zookeeper_server)
    try:
        urm.mark(123, ["127.0.0.1:3181"])
        proxy.arm(b"/locks/urL0000000123")
        assert urm.try_lock(123)                           # its own create happened: the lock is its
        assert proxy.fired.is_set()
        assert other.lock_holder_of(123) == "worker-under-test" and not other.try_lock(123)
        urm.release_lock(123)
        assert other.try_lock(123)
    finally:
        proxy.close()
        _close(urm, other)


def test_a_worker_that_loses_zookeeper_while_processing_a_mark_releases_its_lock(zookeeper_server):
    """Same campaign: a ConnectionLoss half-way through processing a mark left the worker's lock in place
    (the error was only logged), so the mark was never processed again while the session lived."""
    from kazoo.exceptions import ConnectionLoss

    from bkfast.conf import ServerConfiguration
    from bkfast.replication.settings import WorkerSettings
    from bkfast.replication.stats import ReplicationStats
    from bkfast.replication.worker import ReplicationWorker

    proxy, urm, other = _proxied_urm(zookeeper_server)
    try:
        urm.mark(123, ["127.0.0.1:3181"])
        worker = ReplicationWorker(urm, WorkerSettings.from_conf(ServerConfiguration({})), None, ReplicationStats(),
                                   None)
        proxy.arm(b"007b/urL0000000123")                   # the mark's read, after the lock was taken
        with pytest.raises(ConnectionLoss):
            worker._take_one()
        assert proxy.fired.is_set()
        assert other.lock_holder_of(123) is None and other.list_marked() == [123]
        assert other.try_lock(123)                         # another worker can take the mark over
    finally:
        proxy.close()
        _close(urm, other)
