"""The admin HTTP server of a real `bkfast bookie` process: heartbeat, metrics, info, read-only switch."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from bkfast.codec import DigestType, decode_response, encode_add_request, encode_read_request, master_key
from tests.server_support import BookieProcess, Client

KEY = master_key("secret")
CRC = DigestType.CRC32C


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def v2_add(client: Client, ledger, entry, payload=b"x"):
    client.send_raw(encode_add_request(KEY, ledger, entry, entry - 1, entry + 1, payload, CRC))
    r = decode_response(client.recv_body())
    assert (r.ledger_id, r.entry_id) == (ledger, entry)
    return r.rc


def v2_read(client: Client, ledger, entry):
    client.send_raw(encode_read_request(ledger, entry, 0, None))
    return decode_response(client.recv_body())


def http(port, path, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def sample(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    assert m, f"{name}{labels} not in metrics:\n{text}"
    return float(m.group(1))


@pytest.fixture(scope="module")
def admin_bookie(tmp_path_factory):
    http_port = _free_port()
    # no checkpoint on a timer: the metrics test reads the write cache holding its adds, which a checkpoint
    # (every 10 s by default) would flush away at any moment
    b = BookieProcess(tmp_path_factory.mktemp("admin"), "-D", "httpServerEnabled=true",
                      "-D", f"httpServerPort={http_port}", "-D", "flushInterval=3600000").start()
    b.http_port = http_port
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def test_heartbeat_info_and_state(admin_bookie):
    port = admin_bookie.http_port
    assert http(port, "/heartbeat") == (200, "OK\n")
    status, body = http(port, "/api/v1/bookie/info")
    assert status == 200
    info = json.loads(body)
    assert set(info) == {"freeSpace", "totalSpace"}
    assert 0 < info["freeSpace"] <= info["totalSpace"]
    status, body = http(port, "/api/v1/bookie/state")
    assert status == 200
    assert json.loads(body) == {"running": True, "readOnly": False, "shuttingDown": False,
                                "availableForHighPriorityWrites": True}
    assert http(port, "/nope")[0] == 404
    assert http(port, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": "yes"})[0] == 400


def test_metrics_count_adds_and_reads(admin_bookie):
    port = admin_bookie.http_port
    n = 20
    with admin_bookie.connect() as c:
        for e in range(n):
            assert v2_add(c, 11, e, b"payload-%d" % e) == 0
        assert v2_read(c, 11, 3).rc == 0
        assert v2_read(c, 11, 999).rc == 2                     # ENOENTRY
        status, text = http(port, "/metrics")
        assert sample(text, "bkfast_connections") >= 1
    assert status == 200
    assert sample(text, "bkfast_add_entry_total", '{status="OK"}') >= n
    assert sample(text, "bkfast_add_entry_latency_seconds_count") >= n
    assert 'bkfast_add_entry_latency_seconds_bucket{le="+Inf"}' in text
    assert sample(text, "bkfast_read_entry_total", '{status="OK"}') >= 1
    assert sample(text, "bkfast_read_entry_total", '{status="ENOENTRY"}') >= 1
    assert sample(text, "bkfast_read_entry_latency_seconds_count") >= 1
    assert sample(text, "bkfast_journal_sync_total") >= 1
    assert sample(text, "bkfast_journal_batch_total") >= 1
    assert sample(text, "bkfast_journal_bytes_total") > 0
    assert sample(text, "bkfast_journal_sync_latency_seconds_count") >= 1
    assert sample(text, "bkfast_journal_queue_size") == 0          # every add was acknowledged: none queued
    assert sample(text, "bkfast_write_cache_size_bytes") >= sum(len(b"payload-%d" % e) for e in range(n))
    assert sample(text, "bkfast_read_only") == 0
    assert sample(text, "bkfast_pending_adds") == 0


def test_readonly_switch(admin_bookie):
    port = admin_bookie.http_port
    with admin_bookie.connect() as c:
        assert v2_add(c, 12, 0) == 0
        assert http(port, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": True}) == \
            (200, '{"readOnly": true}\n')
        assert json.loads(http(port, "/api/v1/bookie/state")[1])["readOnly"] is True
        assert v2_add(c, 12, 1) == 105                          # EREADONLY
        assert v2_read(c, 12, 0).rc == 0
        text = http(port, "/metrics")[1]
        assert sample(text, "bkfast_read_only") == 1
        assert sample(text, "bkfast_add_entry_total", '{status="EREADONLY"}') >= 1
        assert http(port, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": False})[0] == 200
        assert json.loads(http(port, "/api/v1/bookie/state/readonly")[1]) == {"readOnly": False}
        assert v2_add(c, 12, 1) == 0


@pytest.mark.zookeeper
def test_readonly_switch_moves_the_zookeeper_registration(zookeeper_server, tmp_path):
    import time

    from click.testing import CliRunner
    from kazoo.client import KazooClient

    from bkfast.cli.main import main
    from tests.bookie.test_bookie_registration import REPO, stop, wait_listening

    root = f"/ledgers-http-{time.time_ns()}"
    result = CliRunner().invoke(main, ["shell", "initnewcluster", "--zk-connect", zookeeper_server, "--root", root])
    assert result.exit_code == 0, result.output
    http_port = _free_port()
    cmd = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", "0",
           "-D", f"metadataServiceUri=zk+hierarchical://{zookeeper_server}{root}",
           "-D", "listeningInterface=127.0.0.1", "-D", "advertisedAddress=127.0.0.1",
           "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'ledgers'}",
           "-D", "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
           "-D", "dbStorage_writeCacheMaxSizeMb=16", "-D", "dbStorage_readAheadCacheMaxSizeMb=16",
           "-D", "httpServerEnabled=true", "-D", f"httpServerPort={http_port}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    zk = KazooClient(hosts=zookeeper_server)
    zk.start(timeout=15)
    try:
        bid = f"127.0.0.1:{wait_listening(proc)}"
        assert zk.exists(f"{root}/available/{bid}") is not None
        assert http(http_port, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": True})[0] == 200
        assert zk.exists(f"{root}/available/readonly/{bid}") is not None
        assert zk.exists(f"{root}/available/{bid}") is None
        assert http(http_port, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": False})[0] == 200
        assert zk.exists(f"{root}/available/{bid}") is not None
        assert zk.exists(f"{root}/available/readonly/{bid}") is None
        assert stop(proc) == 0
    finally:
        stop(proc)
        zk.stop()
        zk.close()


def test_gc_trigger_details_and_metrics(admin_bookie):
    port = admin_bookie.http_port
    status, body = http(port, "/api/v1/bookie/gc", "PUT", {"forceMajor": True, "forceMinor": False})
    assert status == 200 and json.loads(body) == {"triggered": True, "forceMajor": True, "forceMinor": False}
    assert http(port, "/api/v1/bookie/gc", "PUT", {"forceMajor": "yes"})[0] == 400
    import time

    deadline = time.monotonic() + 20
    details = {}
    while time.monotonic() < deadline:
        details = json.loads(http(port, "/api/v1/bookie/gc_details")[1])
        if details["cycles"] >= 1:
            break
        time.sleep(0.1)
    assert details["cycles"] >= 1 and details["last_gc_time"] and details["last_major_compaction_time"]
    assert {"logs", "bytes_reclaimed", "read_only", "disk_usage"} <= set(details)
    assert json.loads(http(port, "/api/v1/bookie/gc")[1]) == {"is_in_force_gc": "false"}
    metrics = http(port, "/metrics")[1]
    assert sample(metrics, "bkfast_gc_cycles_total") >= 1
    assert sample(metrics, "bkfast_gc_last_run_timestamp_seconds") > 0
    assert sample(metrics, "bkfast_major_compaction_last_timestamp_seconds") > 0
