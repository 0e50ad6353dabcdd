"""`bkfast sandbox`: the README's first command (a local cluster in one command)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.server_support import REPO, pid_alive


def _wait_file(path, proc, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"sandbox exited with {proc.returncode}: {proc.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("sandbox.json never appeared")
        time.sleep(0.2)
    return json.loads(path.read_text())


def test_sandbox_demo_embedded(tmp_path):
    data_dir = tmp_path / "sb"
    proc = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "sandbox", "--demo", "--exit-after-demo", "--demo-entries", "3000",
         "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    out = proc.stdout
    assert "sandbox ready: metadata embedded://" in out
    assert "demo: wrote 3000 entries" in out and "byte-identical" in out
    assert "closed at entry 2999" in out
    assert "fenced, as it must be" in out and "demo: done" in out
    # The fencing the demo sets out to show is the expected outcome: no WARNING line for it.
    assert "WARNING" not in out + proc.stderr, [line for line in (out + proc.stderr).splitlines() if "WARNING" in line]
    info = json.loads((data_dir / "sandbox.json").read_text())
    assert info["metadata_uri"].startswith("embedded://")
    assert len(info["bookies"]) == 3 and all(b.startswith("127.0.0.1:") for b in info["bookies"])
    for pid in info["pids"].values():
        assert not pid_alive(pid), f"bookie pid {pid} still running after the sandbox exited"
    # A second start on the same data dir keeps the bookie ports (ledger metadata names bookies by address).
    again = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "sandbox", "--demo", "--exit-after-demo", "--demo-entries", "10",
         "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr[-4000:]
    assert json.loads((data_dir / "sandbox.json").read_text())["bookies"] == info["bookies"]


@pytest.mark.zookeeper
def test_sandbox_with_zookeeper_serves_other_processes(tmp_path):
    """`--zk`: a real ZooKeeper, so a client in another process can use the cluster; SIGTERM stops all."""
    data_dir = tmp_path / "sbzk"
    proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "sandbox", "--zk", "--data-dir", str(data_dir)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        info = _wait_file(data_dir / "sandbox.json", proc)
        assert info["metadata_uri"].startswith("zk+hierarchical://127.0.0.1:")
        script = (
            "from bkfast import BookKeeper\n"
            f"with BookKeeper({info['metadata_uri']!r}) as bk:\n"
            "    lh = bk.create_ledger(3, 2, 2, password=b'p')\n"
            "    lh.add_entries([b'%d' % i for i in range(500)])\n"
            "    lh.close()\n"
            "    rh = bk.open_ledger(lh.ledger_id, b'p')\n"
            "    assert [e.data for e in rh.read_entries(0, 499)] == [b'%d' % i for i in range(500)]\n"
            "    print('client ok', rh.last_add_confirmed)\n")
        client = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr[-3000:]
        assert "client ok 499" in client.stdout
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
    for pid in [*info["pids"].values(), info["zookeeper_pid"]]:
        assert not pid_alive(pid)
    # Restarted on the same data dir: the same ZooKeeper port, so the same metadata URI for every client.
    first_pid = info["zookeeper_pid"]
    again = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "sandbox", "--zk", "--data-dir", str(data_dir)],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:  # sandbox.json is rewritten once the restarted cluster is up
            second = _wait_file(data_dir / "sandbox.json", again)
            if second.get("zookeeper_pid") != first_pid:
                break
            assert time.monotonic() < deadline, "the restarted sandbox never came up"
            time.sleep(0.3)
        assert second["metadata_uri"] == info["metadata_uri"] and second["bookies"] == info["bookies"]
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(60)


def test_embedded_uri_used_from_a_second_process_says_to_use_zk(tmp_path):
    """Embedded metadata serves one process: a second one gets a sentence naming --zk, not a RocksDB LOCK."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from bkfast.meta.factory import open_metadata_driver\n"
         "from bkfast.reactor import call, start_reactor_thread\n"
         "start_reactor_thread()\n"
         f"d = open_metadata_driver('embedded://{tmp_path}/meta')\n"
         "call(d.start, timeout=30)\n"
         "print('open', flush=True)\n"
         "time.sleep(60)\n"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        second = subprocess.run(
            [sys.executable, "-c",
             "from bkfast.meta.factory import open_metadata_driver\n"
             "from bkfast.reactor import call, start_reactor_thread\n"
             "start_reactor_thread()\n"
             f"d = open_metadata_driver('embedded://{tmp_path}/meta')\n"
             "try:\n"
             "    call(d.start, timeout=30)\n"
             "except Exception as e:\n"
             "    print(e)\n"],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert "in use by another process" in second.stdout and "--zk" in second.stdout, second.stdout + second.stderr
    finally:
        holder.kill()
        holder.wait(10)
