"""The real-etcd fixture (tests/conftest.py) and tests/etcd_server.py, exercised through etcd v3's JSON gateway
with bkfast's etcd client (bkfast.meta.etcd_kv): data survives restart() and kill(), pause() hangs clients until
resume(), stop() leaves nothing."""

from __future__ import annotations

import os
import uuid

import pytest

from bkfast.errors import BKMetaStoreException
from bkfast.meta.etcd_kv import EtcdKV
from tests.etcd_server import EtcdServer, EtcdServerError, etcd_health, find_etcd
from tests.server_support import pid_alive

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(find_etcd() is None, reason="no etcd binary (scripts/install-system-deps.sh installs it)"),
]


class _Client:
    """put/get of text values, as the tests use them."""

    def __init__(self, server: EtcdServer, timeout: float):
        self.kv = EtcdKV([(server.host, server.client_port)], timeout_s=timeout)

    def put(self, key: str, value: str) -> bool:
        return self.kv.put(key.encode(), value.encode()) > 0

    def get(self, key: str) -> list[bytes]:
        found = self.kv.get(key.encode())
        return [] if found is None else [found.value]


def _client(server: EtcdServer, timeout: float = 5.0) -> _Client:
    return _Client(server, timeout)


def _key() -> str:
    return f"/test-{uuid.uuid4().hex}"


def test_the_session_server_serves_put_and_get_on_loopback(etcd_server):
    assert etcd_server.endpoint == f"127.0.0.1:{etcd_server.client_port}"
    assert pid_alive(etcd_server.pid)
    with open(f"/proc/{etcd_server.pid}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    assert os.path.basename(argv[0]) == "etcd"
    assert "--unsafe-no-fsync" not in argv
    listen = [argv[i + 1] for i, flag in enumerate(argv) if flag.startswith("--listen-")]
    assert len(listen) == 2 and all(url.startswith("http://127.0.0.1:") for url in listen), listen
    client, key = _client(etcd_server), _key()
    assert client.put(key, "value")
    assert client.get(key) == [b"value"]
    assert etcd_health(etcd_server.url)


def test_restart_keeps_the_data_and_the_endpoint():
    with EtcdServer() as server:
        endpoint, data_dir, old_pid = server.endpoint, server.data_dir, server.pid
        client, key = _client(server), _key()
        client.put(key, "before restart")
        server.restart()
        assert (server.endpoint, server.data_dir) == (endpoint, data_dir)
        assert server.pid != old_pid and not pid_alive(old_pid)
        assert client.get(key) == [b"before restart"]


def test_kill_is_a_crash_and_start_recovers_the_same_member():
    with EtcdServer() as server:
        endpoint, client, key = server.endpoint, _client(server), _key()
        client.put(key, "committed")
        pid = server.pid
        server.kill()
        assert not pid_alive(pid) and server.data_dir.is_dir()
        server.start()
        assert server.endpoint == endpoint
        assert client.get(key) == [b"committed"]


def test_pause_hangs_requests_until_resume():
    with EtcdServer() as server:
        client, key = _client(server, timeout=0.5), _key()
        client.put(key, "v")
        server.pause()
        try:
            with pytest.raises(BKMetaStoreException, match="did not answer within 0.5 s"):
                client.get(key)
            assert pid_alive(server.pid)                       # stopped, not gone
        finally:
            server.resume()
        assert _client(server).get(key) == [b"v"]


def test_stop_leaves_no_process_and_removes_its_temp_dir():
    server = EtcdServer().start()
    pid, data_dir = server.pid, server.data_dir
    assert data_dir.is_dir() and (data_dir / "etcd" / "member").is_dir()
    server.pause()                                             # SIGTERM must still work on a stopped process
    server.stop()
    assert not pid_alive(pid)
    assert not data_dir.exists()
    assert server.pid is None and server.data_dir is None
    server.stop()                                              # idempotent


def test_a_given_data_dir_is_kept_and_reused(tmp_path):
    key = _key()
    with EtcdServer(data_dir=tmp_path) as server:
        _client(server).put(key, "kept")
    assert (tmp_path / "etcd" / "member").is_dir() and (tmp_path / "etcd.log").is_file()
    with EtcdServer(data_dir=tmp_path) as server:              # a new client port, the same member data
        assert _client(server).get(key) == [b"kept"]


def test_a_missing_binary_is_a_clear_error(tmp_path):
    server = EtcdServer(data_dir=tmp_path / "d", binary="no-such-etcd-binary")
    with pytest.raises(EtcdServerError, match="no-such-etcd-binary.*not found.*etcd-server"):
        server.start()
    assert server.pid is None and not (tmp_path / "d").exists()


def test_a_binary_that_exits_at_once_is_an_error_with_its_log():
    server = EtcdServer(binary="/usr/bin/false")
    expected = r"(?s)etcd /usr/bin/false on 127\.0\.0\.1:\d+ .*exited with code 1 during start-up.*\n# /usr/bin/false "
    with pytest.raises(EtcdServerError, match=expected):
        server.start(timeout=5)
    assert server.pid is None and server.data_dir is None
