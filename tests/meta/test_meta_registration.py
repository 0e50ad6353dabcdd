"""Bookie id and ZooKeeper registration with a real ZooKeeper, including a real session expiry."""

import json
import socket
import threading
import time

import pytest
from kazoo.client import KazooClient

from bkfast.conf import ServerConfiguration
from bkfast.meta import (
    SCOPE_IDS_PROPERTY,
    BookieIdInUseError,
    BookieRegistration,
    bookie_id,
    bookie_service_info,
    init_new_cluster,
    split_bookie_id,
)
from bkfast.proto import BookieServiceInfoFormat
from tests import VECTORS_DIR
from tests.zk_server import expire_session

VECTOR = json.loads((VECTORS_DIR / "zk_layout.json").read_text())
NODES = {n["path"]: n for n in VECTOR["nodes"]}
BID = "127.0.0.1:3285"


def _wait(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_bookie_id_from_conf():
    conf = ServerConfiguration({"advertisedAddress": "bk1.example", "bookiePort": 4000})
    assert bookie_id(conf) == "bk1.example:4000"
    assert bookie_id(ServerConfiguration({"bookieId": "my-bookie", "advertisedAddress": "x"})) == "my-bookie"
    assert bookie_id(ServerConfiguration({"useHostNameAsBookieID": True})) == f"{socket.getfqdn()}:3181"
    host, port = split_bookie_id(bookie_id(ServerConfiguration()))
    assert port == 3181 and socket.inet_aton(host)          # an IPv4 address


def test_service_info_matches_java():
    java = bytes.fromhex(NODES[f"/ledgers/available/{BID}"]["dataHex"])
    assert bookie_service_info("127.0.0.1", 3285, scope_ids=False) == java
    info = BookieServiceInfoFormat.FromString(bookie_service_info("127.0.0.1", 3285))
    assert dict(info.properties) == {SCOPE_IDS_PROPERTY: "1"}
    ep = info.endpoints[0]
    assert (ep.id, ep.protocol, ep.host, ep.port) == ("bookie", "bookie-rpc", "127.0.0.1", 3285)


@pytest.fixture
def cluster(zk_client):
    init_new_cluster(zk_client, "/ledgers")
    return zk_client


def _other_client(zk_client):
    hosts = ",".join(f"{h}:{p}" for h, p in zk_client.hosts) + zk_client.chroot
    c = KazooClient(hosts=hosts, timeout=10.0)
    c.start(timeout=15)
    return c


@pytest.mark.zookeeper
def test_register_readonly_unregister(cluster):
    zk = cluster
    info = bookie_service_info("127.0.0.1", 3285)
    reg = BookieRegistration(zk, "/ledgers", BID, info)
    reg.register()
    data, stat = zk.get(f"/ledgers/available/{BID}")
    assert data == info and stat.ephemeralOwner == zk.client_id[0]
    reg.set_read_only(True)
    assert zk.exists(f"/ledgers/available/{BID}") is None
    data, stat = zk.get(f"/ledgers/available/readonly/{BID}")
    assert data == info and stat.ephemeralOwner == zk.client_id[0]
    reg.set_read_only(False)
    assert zk.exists(f"/ledgers/available/readonly/{BID}") is None
    assert zk.exists(f"/ledgers/available/{BID}") is not None
    reg.unregister()
    assert zk.get_children("/ledgers/available") == ["readonly"]
    assert zk.get_children("/ledgers/available/readonly") == []


@pytest.mark.zookeeper
def test_register_readonly_from_start(cluster):
    reg = BookieRegistration(cluster, "/ledgers", BID, b"")
    reg.register(read_only=True)
    assert cluster.get_children("/ledgers/available/readonly") == [BID]
    assert cluster.exists(f"/ledgers/available/{BID}") is None
    reg.unregister()


@pytest.mark.zookeeper
def test_duplicate_bookie_refused(cluster):
    first_client = _other_client(cluster)
    other = _other_client(cluster)
    try:
        BookieRegistration(first_client, "/ledgers", BID, b"a").register()
        dup = BookieRegistration(other, "/ledgers", BID, b"b", wait_expired_timeout=0.3)
        with pytest.raises(BookieIdInUseError, match=f"bookie id {BID} is already registered"):
            dup.register()
        assert cluster.get(f"/ledgers/available/{BID}")[0] == b"a"
        # a restarted bookie waits for its previous session's node to go away, then registers
        stopper = threading.Timer(0.5, first_client.stop)
        stopper.start()
        dup2 = BookieRegistration(other, "/ledgers", BID, b"b", wait_expired_timeout=10)
        dup2.register()
        stopper.join()
        data, stat = cluster.get(f"/ledgers/available/{BID}")
        assert data == b"b" and stat.ephemeralOwner == other.client_id[0]
        dup2.unregister()
    finally:
        for c in (first_client, other):
            c.stop()
            c.close()


@pytest.mark.zookeeper
def test_persistent_node_refused(cluster):
    cluster.create(f"/ledgers/available/{BID}", b"")
    with pytest.raises(BookieIdInUseError, match="not ephemeral"):
        BookieRegistration(cluster, "/ledgers", BID, b"x", wait_expired_timeout=0).register()


@pytest.mark.zookeeper
def test_own_session_leftover_is_reused(cluster):
    cluster.create(f"/ledgers/available/{BID}", b"old", ephemeral=True)
    reg = BookieRegistration(cluster, "/ledgers", BID, b"new", wait_expired_timeout=0)
    reg.register()
    assert cluster.get(f"/ledgers/available/{BID}")[0] == b"new"
    reg.unregister()


@pytest.mark.zookeeper
def test_reregister_after_session_expiry(cluster):
    zk = cluster
    reg = BookieRegistration(zk, "/ledgers", BID, b"info")
    reg.register()
    old_session = zk.client_id[0]
    expire_session(zk)
    assert zk.client_id[0] != old_session
    assert reg.reregistered.wait(15), "bookie was not re-registered"
    assert _wait(lambda: zk.exists(f"/ledgers/available/{BID}") is not None)
    data, stat = zk.get(f"/ledgers/available/{BID}")
    assert data == b"info" and stat.ephemeralOwner == zk.client_id[0] and reg.reregistrations == 1
    # read-only state survives an expiry too
    reg.set_read_only(True)
    expire_session(zk)
    assert reg.reregistered.wait(15)
    assert _wait(lambda: zk.exists(f"/ledgers/available/readonly/{BID}") is not None)
    assert zk.exists(f"/ledgers/available/{BID}") is None
    reg.unregister()
    assert zk.exists(f"/ledgers/available/readonly/{BID}") is None
