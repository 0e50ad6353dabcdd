"""The real-ZooKeeper fixtures (tests/conftest.py) and tests/zk_server.py, exercised with kazoo."""

from __future__ import annotations

import ipaddress
import os
import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError

from tests.server_support import pid_alive
from tests.zk_server import ZooKeeperServer, expire_session, four_letter_word, probe_session

pytestmark = pytest.mark.zookeeper


def _listeners(port: int) -> list[tuple[str, int]]:
    """(local address, socket inode) of every TCP socket LISTENing on ``port`` (IPv4 and IPv6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            addr, hexport = cols[1].split(":")
            if int(hexport, 16) == port and cols[3] == "0A":        # 0A = TCP_LISTEN
                # the kernel prints each 32-bit word of the address in host (little-endian) order
                raw = b"".join(bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, len(addr), 8))
                ip = ipaddress.ip_address(raw)
                if ip.version == 6 and ip.ipv4_mapped:                 # Java listens on ::ffff:127.0.0.1
                    ip = ip.ipv4_mapped
                found.append((str(ip), int(cols[9])))
    return found


def _pids_owning_inode(inode: int) -> list[int]:
    target = f"socket:[{inode}]"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    pids.append(int(entry))
                    break
        except OSError:
            continue
    return pids


def _new_client(connect_string: str) -> KazooClient:
    client = KazooClient(hosts=connect_string, timeout=10.0)
    client.start(timeout=15)
    return client


def test_server_is_a_java_process_on_loopback(zookeeper_server):
    host, port = zookeeper_server.rsplit(":", 1)
    port = int(port)
    assert host == "127.0.0.1"
    listeners = _listeners(port)
    assert [ip for ip, _ in listeners] == ["127.0.0.1"], listeners      # loopback only, not 0.0.0.0
    pids = _pids_owning_inode(listeners[0][1])
    assert len(pids) == 1, pids
    pid = pids[0]
    assert pid_alive(pid)
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    assert os.path.basename(argv[0]) == "java"
    assert "org.apache.zookeeper.server.ZooKeeperServerMain" in argv
    assert four_letter_word(host, port, "ruok") == b"imok"
    assert b"Mode: standalone" in four_letter_word(host, port, "srvr")


def test_create_get_set_and_cas(zk_client):
    zk = zk_client
    assert zk.create("/node", b"v1") == "/node"
    with pytest.raises(NodeExistsError):
        zk.create("/node", b"again")
    data, stat = zk.get("/node")
    assert data == b"v1" and stat.version == 0
    stat2 = zk.set("/node", b"v2", version=stat.version)
    assert stat2.version == 1
    with pytest.raises(BadVersionError):
        zk.set("/node", b"stale", version=stat.version)                 # CAS with a stale version
    assert zk.get("/node")[0] == b"v2"
    zk.create("/a/b/c", b"deep", makepath=True)
    assert set(zk.get_children("/")) == {"node", "a"}
    assert zk.get("/a/b/c")[0] == b"deep"


def test_chroot_is_unique_per_test(zk_client, zookeeper_server):
    assert zk_client.chroot.startswith("/test-")
    assert zk_client.get_children("/") == []
    root = _new_client(zookeeper_server)
    try:
        assert root.exists(zk_client.chroot) is not None
    finally:
        root.stop()
        root.close()


def test_ephemeral_disappears_when_its_client_closes(zk_client, zookeeper_server):
    owner = _new_client(zookeeper_server + zk_client.chroot)
    try:
        owner.create("/bookie-1", b"", ephemeral=True)
        assert zk_client.exists("/bookie-1").ephemeralOwner == owner.client_id[0]
    finally:
        owner.stop()                                   # closes the session: ephemerals go at once
        owner.close()
    assert zk_client.exists("/bookie-1") is None


def test_sequential_nodes(zk_client):
    paths = [zk_client.create("/ids/ID-", b"", sequence=True, makepath=True) for _ in range(3)]
    assert paths == [f"/ids/ID-{i:010d}" for i in range(3)]
    assert sorted(zk_client.get_children("/ids")) == [p.rsplit("/", 1)[1] for p in paths]


def test_children_watch_fires(zk_client, zookeeper_server):
    zk_client.ensure_path("/available")
    seen: list[list[str]] = []
    changed = threading.Condition()

    @zk_client.ChildrenWatch("/available")
    def _watch(children):
        with changed:
            seen.append(sorted(children))
            changed.notify_all()

    other = _new_client(zookeeper_server + zk_client.chroot)         # change made by another session
    try:
        other.create("/available/h1:3181", b"", ephemeral=True)
        with changed:
            assert changed.wait_for(lambda: ["h1:3181"] in seen, timeout=10), seen
        other.delete("/available/h1:3181")
        with changed:
            assert changed.wait_for(lambda: seen[-1] == [], timeout=10), seen
    finally:
        other.stop()
        other.close()
    assert seen[0] == []


def test_expire_session_removes_ephemerals(zk_client, zookeeper_server):
    victim = _new_client(zookeeper_server + zk_client.chroot)
    try:
        old_session = victim.client_id[0]
        victim.create("/bookie-2", b"", ephemeral=True)
        assert zk_client.exists("/bookie-2") is not None
        expire_session(victim)
        assert zk_client.exists("/bookie-2") is None                  # seen from another session
        assert victim.connected and victim.client_id[0] != old_session  # kazoo got a new session
        assert victim.exists("/bookie-2") is None
    finally:
        victim.stop()
        victim.close()


def test_stop_kills_a_separate_server(tmp_path):
    server = ZooKeeperServer(tick_time=200)                          # short ticks: sessions down to 0.4 s
    server.start()
    try:
        pid, workdir = server.pid, server.dir
        assert pid_alive(pid)
        assert os.getpgid(pid) == pid                                # own process group / session
        assert os.path.isdir(workdir)
        cfg = (workdir / "zoo.cfg").read_text()
        assert "tickTime=200\n" in cfg and "clientPortAddress=127.0.0.1\n" in cfg
        host, port = server.connect_string.split(":")
        assert probe_session(host, int(port), session_timeout_ms=500)[1] == 500     # >= 2 ticks: granted
        assert probe_session(host, int(port), session_timeout_ms=100)[1] == 400     # raised to 2 ticks
        assert probe_session(host, int(port), session_timeout_ms=30000)[1] == 4000  # capped at 20 ticks
    finally:
        server.stop()
    assert not pid_alive(pid), f"ZooKeeper pid {pid} survived stop()"
    assert not os.path.exists(workdir)                               # temp dir we created is gone
    assert not server.is_running() and server.pid is None
    server.stop()                                                    # idempotent

    kept = tmp_path / "zk"                                           # a given directory is kept
    with ZooKeeperServer(kept) as server2:
        pid2 = server2.pid
        assert (kept / "zoo.cfg").exists()
    assert not pid_alive(pid2)
    assert (kept / "zookeeper.log").exists()
