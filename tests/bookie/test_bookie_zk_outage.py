"""A bookie across ZooKeeper outages (issue 18 point 6), with a real ZooKeeper and a real bookie process.

After a 20 s outage bookies took over 11 s to reconnect (kazoo's default retry doubles its delay) and 2 of
3 lost their sessions. Now the bookie tries again within a second: after a restart of ZooKeeper (same
port, same data: the server restores the sessions and restarts their timers) it is back on its own
session at once; and when its session did expire, its registration is re-created at once on a new one.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.cli.main import main
from tests.zk_server import ZooKeeperServer, four_letter_word

pytestmark = pytest.mark.zookeeper

RECONNECTED_WITHIN_S = 3.0       # after ZooKeeper serves again; kazoo's default backoff took 4-13 s here


def _init_cluster(connect: str, root: str) -> None:
    result = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", connect, "--root", root])
    assert result.exit_code == 0, result.output


def _registration_owner(connect: str, path: str, timeout: float = 15.0) -> int | None:
    zk = KazooClient(hosts=connect, timeout=10.0)
    zk.start(timeout=timeout)
    try:
        stat = zk.exists(path)
        return None if stat is None else stat.ephemeralOwner
    finally:
        zk.stop()
        zk.close()


def _connected_sessions(server: ZooKeeperServer) -> set[int]:
    try:
        text = four_letter_word(server.host, server.port, "cons").decode(errors="replace")
    except OSError:
        return set()
    return {int(sid, 16) for sid in re.findall(r"sid=0x([0-9a-f]+)", text)}


def test_bookie_session_survives_a_zookeeper_restart_and_reconnects_at_once(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        zk_port = s.getsockname()[1]
    server = ZooKeeperServer(tmp_path / "zk", port=zk_port, extra_config={"4lw.commands.whitelist": "*"})
    server.start()
    root = "/ledgers"
    bookie = None
    try:
        _init_cluster(server.connect_string, root)
        bookie = LocalBookie(tmp_path / "b", free_port(), metadata_uri=f"zk+hierarchical://{server.connect_string}{root}",
                             extra_conf={"zkTimeout": "30000", "dbStorage_writeCacheMaxSizeMb": "16",
                                         "dbStorage_readAheadCacheMaxSizeMb": "16"}).start()
        path = f"{root}/available/{bookie.bookie_id}"
        sid = _registration_owner(server.connect_string, path)
        assert sid, "the bookie is not registered"
        assert sid in _connected_sessions(server)

        server.stop()                       # an outage well within the 30 s session timeout
        time.sleep(14)
        server.start()                      # same port, same data directory
        up = time.monotonic()
        while sid not in _connected_sessions(server):
            assert time.monotonic() - up < RECONNECTED_WITHIN_S, (
                f"the bookie's session 0x{sid:x} did not reconnect within {RECONNECTED_WITHIN_S} s of ZooKeeper "
                f"serving again\n{bookie.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        assert _registration_owner(server.connect_string, path) == sid      # same session, same node
        assert bookie.alive()
    finally:
        if bookie is not None:
            assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]
        server.stop()


def test_bookie_reregisters_at_once_after_its_session_expired(zookeeper_server, tmp_path):
    root = f"/ledgers-{time.time_ns()}"
    _init_cluster(zookeeper_server, root)
    bookie = LocalBookie(tmp_path / "b", free_port(), metadata_uri=f"zk+hierarchical://{zookeeper_server}{root}",
                         extra_conf={"zkTimeout": "4000", "dbStorage_writeCacheMaxSizeMb": "16",
                                     "dbStorage_readAheadCacheMaxSizeMb": "16"}).start()
    path = f"{root}/available/{bookie.bookie_id}"
    watcher = KazooClient(hosts=zookeeper_server, timeout=10.0)
    watcher.start(timeout=15)
    try:
        old = watcher.exists(path).ephemeralOwner
        os.kill(bookie.pid, signal.SIGSTOP)        # frozen past its session timeout (a long pause)
        try:
            deadline = time.monotonic() + 30
            while watcher.exists(path) is not None:  # ZooKeeper expired the session and removed the node
                assert time.monotonic() < deadline, "the frozen bookie's session never expired"
                time.sleep(0.1)
        finally:
            os.kill(bookie.pid, signal.SIGCONT)
        resumed = time.monotonic()
        while True:
            stat = watcher.exists(path)
            if stat is not None:
                break
            assert time.monotonic() - resumed < RECONNECTED_WITHIN_S, (
                f"not re-registered within {RECONNECTED_WITHIN_S} s\n{bookie.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        assert stat.ephemeralOwner not in (0, old)
        assert bookie.alive()
    finally:
        watcher.stop()
        watcher.close()
        assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]
