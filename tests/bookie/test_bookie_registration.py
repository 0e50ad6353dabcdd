"""`bkfast bookie` with a real ZooKeeper: cookies checked before start, registration, clean deregistration."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.main import main
from bkfast.proto import BookieServiceInfoFormat
from tests import REPO
from tests.waiting import wait_until

pytestmark = pytest.mark.zookeeper
REPO = REPO


def start_bookie(zk_connect: str, root: str, base: Path, ledger_dir: str = "ledgers"):
    cmd = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", "0",
           "-D", f"metadataServiceUri=zk+hierarchical://{zk_connect}{root}",
           "-D", "listeningInterface=127.0.0.1", "-D", "advertisedAddress=127.0.0.1",
           "-D", f"journalDirectory={base / 'journal'}", "-D", f"ledgerDirectories={base / ledger_dir}",
           "-D", "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
           "-D", "dbStorage_writeCacheMaxSizeMb=16", "-D", "dbStorage_readAheadCacheMaxSizeMb=16"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def wait_listening(proc) -> int:
    line = proc.stdout.readline().decode()
    assert line.startswith("bookie listening on "), f"{line!r} {proc.stderr.read().decode()[-3000:]}"
    return int(line.rsplit(":", 1)[1])


def stop(proc) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_bookie_writes_cookies_registers_and_deregisters(zookeeper_server, tmp_path):
    root = f"/ledgers-{time.time_ns()}"
    result = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", zookeeper_server, "--root", root])
    assert result.exit_code == 0, result.output
    zk = KazooClient(hosts=zookeeper_server)
    zk.start(timeout=15)
    proc = start_bookie(zookeeper_server, root, tmp_path)
    try:
        port = wait_listening(proc)
        bid = f"127.0.0.1:{port}"
        data, stat = zk.get(f"{root}/available/{bid}")
        assert stat.ephemeralOwner != 0
        info = BookieServiceInfoFormat.FromString(data)
        assert info.endpoints[0].port == port and info.endpoints[0].protocol == "bookie-rpc"
        assert dict(info.properties)["bkfast.scopeIds"] == "1"
        cookie_zk, _ = zk.get(f"{root}/cookies/{bid}")
        for d in ("journal", "ledgers"):
            assert (tmp_path / d / "current" / "VERSION").read_bytes() == cookie_zk
        assert stop(proc) == 0
        assert zk.exists(f"{root}/available/{bid}") is None
    finally:
        stop(proc)
        zk.stop()
        zk.close()


def test_bookie_refuses_to_start_when_its_dirs_do_not_match_the_cookie(zookeeper_server, tmp_path):
    root = f"/ledgers-{time.time_ns()}"
    assert CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", zookeeper_server,
                                     "--root", root]).exit_code == 0
    proc = start_bookie(zookeeper_server, root, tmp_path)
    port = wait_listening(proc)
    assert stop(proc) == 0
    # Same bookie id (pin the port), other ledger dir: Java refuses, and so do we, saying what differs.
    cmd_proc = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", str(port),
         "-D", f"metadataServiceUri=zk+hierarchical://{zookeeper_server}{root}",
         "-D", "listeningInterface=127.0.0.1", "-D", "advertisedAddress=127.0.0.1",
         "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'other'}",
         "-D", "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert cmd_proc.returncode != 0
    assert "ledgerDirs" in cmd_proc.stderr or "cookie" in cmd_proc.stderr.lower(), cmd_proc.stderr[-2000:]


def _connections_to(port: int) -> list[str]:
    """This machine's TCP sockets ESTABLISHED with, or in CLOSE_WAIT to, remote `port` (/proc/net/tcp rows):
    a client that has noticed its server is gone has closed its socket."""
    rows = [row.split() for row in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [" ".join(row) for row in rows if row[2].endswith(f":{port:04X}") and row[3] in ("01", "08")]


def test_a_bookie_whose_zookeeper_is_gone_still_stops_promptly(tmp_path):
    """Found running benchmarks: with ZooKeeper stopped first, SIGTERM left the bookie waiting forever in
    unregister (kazoo's blocking get waits for a reconnection)."""
    from tests.zk_server import ZooKeeperServer

    server = ZooKeeperServer()
    server.start()
    proc = None
    try:
        root = "/ledgers"
        result = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", server.connect_string,
                                           "--root", root])
        assert result.exit_code == 0, result.output
        proc = start_bookie(server.connect_string, root, tmp_path)
        wait_listening(proc)
        server.stop()
        wait_until("the bookie's ZooKeeper client to notice the lost connection and close its socket",
                   lambda: not _connections_to(server.port), 30)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail("the bookie did not exit within 20 s of SIGTERM with ZooKeeper gone")
        assert code == 0, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() - started < 20
    finally:
        if proc is not None:
            stop(proc)
        server.stop()


def test_a_bookie_restarted_after_kill_9_refuses_connections_until_it_registers(zookeeper_server, tmp_path):
    """After kill -9 the old process's ZooKeeper session holds the registration until it expires. The new
    process waits for that before it listens: meanwhile a client's connection is refused at once, and once
    the bookie listens it answers; never a connection accepted and left silent (the old behaviour: ~9 s)."""
    import socket
    import struct

    from bkfast.cli.local_cluster import free_port
    from bkfast.codec import encode_read_request

    root = f"/ledgers-{time.time_ns()}"
    assert CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", zookeeper_server,
                                     "--root", root]).exit_code == 0
    port = free_port()

    def launch():
        cmd = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", str(port), "-D", "zkTimeout=4000",
               "-D", f"metadataServiceUri=zk+hierarchical://{zookeeper_server}{root}",
               "-D", "listeningInterface=127.0.0.1", "-D", "advertisedAddress=127.0.0.1",
               "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'ledgers'}",
               "-D", "dbStorage_writeCacheMaxSizeMb=16", "-D", "dbStorage_readAheadCacheMaxSizeMb=16"]
        return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)

    def probe() -> str:
        """'refused', 'answered', or 'silent' (connected, and no answer within 1 s)."""
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
        except ConnectionRefusedError:
            return "refused"
        with sock:
            sock.settimeout(1.0)
            try:
                sock.sendall(encode_read_request(1, 0))
                head = sock.recv(4)
            except ConnectionResetError:
                return "refused"
            except TimeoutError:
                return "silent"
            return "answered" if len(head) == 4 and struct.unpack(">I", head)[0] > 0 else "refused"

    first = launch()
    try:
        assert wait_listening(first) == port
        assert probe() == "answered"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = launch()
        try:
            outcomes = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                outcome = probe()
                outcomes.append(outcome)
                assert outcome != "silent", outcomes
                if outcome == "answered":
                    break
                time.sleep(0.1)
            assert outcomes[-1] == "answered" and "refused" in outcomes, outcomes
            assert wait_listening(second) == port
        finally:
            stop(second)
    finally:
        stop(first)
