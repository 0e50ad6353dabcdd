"""A user's mistake at `bkfast bookie` / `bkfast sandbox` is one line on stderr naming what and what to do.

Every case runs the real command in a subprocess (real ZooKeeper, real bookie processes, real files):
exit code 1 (2 for usage), exactly one `Error:` line and it is the last one, no traceback unless
`--verbose`. The bookie port in use and an unreachable `metadataServiceUri` given with -D are in
tests/bookie/test_bookie_address.py (with what they leave in ZooKeeper).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bkfast.cli.local_cluster import LocalBookie, free_port
from tests.server_support import REPO, BookieProcess, pid_alive
from tests.tmpfs_support import fill, tmpfs

BKFAST = [sys.executable, "-m", "bkfast.cli.main"]


def run(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([*BKFAST, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 1, no traceback, one `Error:` line, the last one on stderr, containing every word."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip("\n").splitlines()[-1] == errors[0], proc.stderr
    assert all(word in errors[0] for word in words), errors[0]
    return errors[0]


def bookie_args(tmp_path: Path, *more: str) -> list[str]:
    return ["bookie", "--port", "0", "-D", "listeningInterface=127.0.0.1",
            "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'ledgers'}",
            *more]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


# --- bookie ---------------------------------------------------------------------------------------------------

def test_bookie_without_conf_and_no_zookeeper_names_the_key_conf_and_no_metadata(tmp_path):
    """The default metadataServiceUri (localhost:2181) with nothing there: the three ways out, in one line."""
    if _listening("127.0.0.1", 2181):
        pytest.skip("something listens on localhost:2181, the default metadataServiceUri")
    started = time.monotonic()
    proc = run(*bookie_args(tmp_path, "-D", "zkTimeout=1000"))
    line = assert_one_line_error(proc, "cannot reach ZooKeeper", "localhost:2181", "metadataServiceUri", "--conf",
                                 "--no-metadata")
    assert line.endswith("--no-metadata serves without one"), line
    # kazoo's per-attempt lines ("Connection dropped ... refused") stay off stderr
    assert "kazoo" not in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60


def test_bookie_with_an_etcd_that_does_not_answer_is_one_line(tmp_path):
    """metadataServiceUri=etcd://... with nothing listening: one line naming etcd, the URI and the ways out,
    within zkTimeout (the etcd driver's call bound), and nothing written to the directories."""
    endpoint = f"127.0.0.1:{free_port()}"            # nothing listens there
    started = time.monotonic()
    proc = run(*bookie_args(tmp_path, "-D", f"metadataServiceUri=etcd://{endpoint}/ledgers", "-D", "zkTimeout=2000"))
    line = assert_one_line_error(proc, "cannot reach etcd", endpoint, "metadataServiceUri", "--no-metadata")
    assert "did not answer within 5 s" in line, line
    assert time.monotonic() - started < 60
    assert _leftovers(tmp_path / "ledgers") == []


def test_bookie_on_an_etcd_scope_that_holds_no_cluster_is_one_line(tmp_path, etcd_server):
    proc = run(*bookie_args(tmp_path, "-D", f"metadataServiceUri=etcd://{etcd_server.endpoint}/nothing-here"))
    assert_one_line_error(proc, "cluster not initialized", "/nothing-here/instanceid", "bkfast shell initnewcluster")


@pytest.mark.parametrize("key", ["journalDirectory", "journalDirectories", "ledgerDirectories", "indexDirectories"])
def test_a_dir_that_cannot_be_created_names_its_key(tmp_path, key):
    """A dir under a regular file cannot be created (the tests run as root, so permissions cannot refuse)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    bad = blocker / "dir"
    proc = run(*bookie_args(tmp_path, "--no-metadata", "-D", f"{key}={bad}"))
    assert_one_line_error(proc, f"{key}:", str(bad / "current"), "Not a directory")
    assert "bookie listening" not in proc.stdout


def test_verbose_shows_the_traceback_and_still_ends_with_the_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run(*bookie_args(tmp_path, "--no-metadata", "--verbose", "-D", f"ledgerDirectories={blocker}"))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" in proc.stderr and "ConfigurationError" in proc.stderr
    last = proc.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("Error: ledgerDirectories:"), proc.stderr


def test_bookie_usage_mistake_exits_2(tmp_path):
    proc = run("bookie", "-D", "journalDirectory")
    assert proc.returncode == 2, proc.stderr
    assert "expected KEY=VALUE" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.zookeeper
def test_a_bad_dir_stops_the_bookie_before_zookeeper_is_touched(tmp_path, zookeeper_server):
    from kazoo.client import KazooClient

    from bkfast.meta import zk_layout

    root = f"/errors-{uuid.uuid4().hex[:8]}/ledgers"
    zk = KazooClient(hosts=zookeeper_server, timeout=10.0)
    zk.start(timeout=15)
    try:
        zk.ensure_path(root.rsplit("/", 1)[0])
        zk_layout.init_new_cluster(zk, root)
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        proc = run(*bookie_args(tmp_path, "-D", f"metadataServiceUri=zk+hierarchical://{zookeeper_server}{root}",
                                "-D", f"journalDirectory={blocker / 'journal'}"))
        assert_one_line_error(proc, "journalDirectory:", "Not a directory")
        assert zk.exists(f"{root}/cookies") is None or zk.get_children(f"{root}/cookies") == []
        assert [c for c in zk.get_children(f"{root}/available") if c != "readonly"] == []
    finally:
        zk.delete(root.rsplit("/", 1)[0], recursive=True)
        zk.stop()
        zk.close()


@pytest.mark.zookeeper
def test_a_zookeeper_without_a_cluster_says_to_run_initnewcluster(tmp_path, zookeeper_server):
    root = f"/uninitialized-{uuid.uuid4().hex[:8]}/ledgers"
    proc = run(*bookie_args(tmp_path, "-D", f"metadataServiceUri=zk+hierarchical://{zookeeper_server}{root}"))
    assert_one_line_error(proc, "not initialized", "bkfast shell initnewcluster")
    assert not any((tmp_path / d / "current" / "VERSION").exists() for d in ("journal", "ledgers"))


# --- full, read-only and forbidden dirs ---------------------------------------------------------------------

def _leftovers(*dirs: Path) -> list[Path]:
    """Cookie files (and their temp files) under the dirs' current/."""
    return sorted(p for d in dirs for p in (d / "current").glob("VERSION*"))


def test_a_full_journal_dir_on_a_new_bookie_names_the_key_and_leaves_no_cookie(tmp_path):
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    with tmpfs(journal, 1):
        fill(journal)
        proc = run(*bookie_args(tmp_path, "--no-metadata"))
        line = assert_one_line_error(proc, "journalDirectory:", f"{journal / 'current'} is full",
                                     "No space left on device", "free space or point journalDirectory at")
        assert "bookie listening" not in proc.stdout, line
        assert _leftovers(journal, ledgers) == []              # no VERSION.tmp, no cookie anywhere


@pytest.mark.zookeeper
def test_a_full_ledger_dir_on_a_new_bookie_writes_no_cookie_anywhere_and_starts_once_freed(tmp_path,
                                                                                           zookeeper_server):
    """The journal dir's cookie is written before the ledger dir's: it is taken back when the ledger dir's
    fails, so that the start after freeing space sees a new bookie (not "a cookie in some dirs only")."""
    from kazoo.client import KazooClient

    from bkfast.meta import zk_layout

    top = f"/full-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zookeeper_server, timeout=10.0)
    zk.start(timeout=15)
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    bookie = LocalBookie(tmp_path, free_port(), metadata_uri=f"zk+hierarchical://{zookeeper_server}{top}/ledgers",
                         extra_conf={"dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16"})
    try:
        zk.ensure_path(top)
        zk_layout.init_new_cluster(zk, f"{top}/ledgers")
        with tmpfs(ledgers, 1):
            ballast = fill(ledgers)
            proc = subprocess.run(bookie.command(), cwd=REPO, capture_output=True, text=True, timeout=90)
            assert_one_line_error(proc, "ledgerDirectories:", f"{ledgers / 'current'} is full",
                                  "free space or point ledgerDirectories at another disk")
            assert _leftovers(journal, ledgers) == []
            assert zk.exists(f"{top}/ledgers/cookies/{bookie.bookie_id}") is None
            assert [c for c in zk.get_children(f"{top}/ledgers/available") if c != "readonly"] == []
            ballast.unlink()
            bookie.start()                  # room again: a new bookie, cookies written everywhere
            assert bookie.stop() == 0
            assert _leftovers(journal, ledgers) == [journal / "current" / "VERSION", ledgers / "current" / "VERSION"]
            assert zk.exists(f"{top}/ledgers/cookies/{bookie.bookie_id}") is not None
    finally:
        bookie.kill()
        zk.delete(top, recursive=True)
        zk.stop()
        zk.close()


def test_a_full_journal_disk_at_restart_names_the_key_and_leaves_no_stub_journal(tmp_path):
    """A bookie restarts into a new journal file; with no room for it the start cannot go on (a full
    *ledger* disk at restart starts read-only instead: tests/bookie/test_bookie_full_ledger_disk.py)."""
    journal = tmp_path / "journal"
    with tmpfs(journal, 8):
        bookie = BookieProcess(tmp_path).start()
        assert bookie.stop() == 0
        journals = sorted((journal / "current").glob("*.txn"))
        assert len(journals) == 1
        fill(journal)
        proc = subprocess.run(bookie.command(), cwd=REPO, capture_output=True, text=True, timeout=90)
        assert_one_line_error(proc, "journalDirectory:", f"{journal / 'current'} is full",
                              "free space or point journalDirectory at another disk")
        assert sorted((journal / "current").glob("*.txn")) == journals
        assert _leftovers(journal) == [journal / "current" / "VERSION"]


def _remount_read_only(path: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs read-only here: {done.stderr.strip()}")


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "existing-current"])
def test_a_ledger_dir_on_a_read_only_file_system_names_the_key(tmp_path, existing):
    """EROFS: creating current/ fails (a new dir), or current/ exists and cannot be written (a disk
    remounted read-only under a bookie that ran before)."""
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    with tmpfs(ledgers, 1):
        if existing:
            (ledgers / "current").mkdir()
        _remount_read_only(ledgers)
        proc = run(*bookie_args(tmp_path, "--no-metadata"))
        line = assert_one_line_error(proc, "ledgerDirectories:", str(ledgers / "current"),
                                     "remount it read-write or give ledgerDirectories another directory")
        assert "read-only file system" in line.lower(), line
        assert _leftovers(journal) == []          # refused before the first cookie is written


NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def _without_dac_override() -> list[str]:
    """A prefix that runs a command without the capabilities that let root ignore file permissions: the
    bookie then meets a dir it does not own, mode 0700, as any other user would. (Running it as `nobody`
    cannot work here: the interpreter lives under /root, mode 0700.)"""
    if os.geteuid() != 0:
        pytest.skip("the permission test runs as root and drops root's permission override")
    try:
        probe = subprocess.run([*NO_DAC, "sh", "-c", "grep CapEff /proc/self/status"], capture_output=True,
                               text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("setpriv (util-linux) is not installed")
    if probe.returncode != 0:
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE here: {probe.stderr.strip()}")
    return NO_DAC


@pytest.mark.parametrize("forbidden", ["dir", "current"])
def test_a_journal_dir_without_permission_names_the_key(tmp_path, forbidden):
    """The journal dir (or its current/) belongs to another user, mode 0700: one line naming the key and
    the dir, before any cookie is written."""
    prefix = _without_dac_override()
    journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
    (journal / "current").mkdir(parents=True)
    target = journal if forbidden == "dir" else journal / "current"
    os.chown(target, 65534, 65534)                     # nobody
    target.chmod(0o700)
    proc = subprocess.run([*prefix, *BKFAST, *bookie_args(tmp_path, "--no-metadata")], cwd=REPO,
                          capture_output=True, text=True, timeout=90)
    line = assert_one_line_error(proc, "journalDirectory:", str(journal / "current"),
                                 "give journalDirectory")
    assert "permission" in line.lower(), line
    assert _leftovers(ledgers) == []


# --- sandbox --------------------------------------------------------------------------------------------------

def test_sandbox_zk_connect_to_nothing_is_one_line(tmp_path):
    connect = f"127.0.0.1:{free_port()}"            # nothing listens there
    proc = run("sandbox", "--zk-connect", connect, "--data-dir", str(tmp_path / "sb"))
    assert_one_line_error(proc, "cannot reach ZooKeeper", connect, "--zk-connect", "--zk")
    assert "kazoo" not in proc.stderr, proc.stderr
    assert not (tmp_path / "sb" / "sandbox.json").exists()


def test_sandbox_usage_mistake_exits_2(tmp_path):
    proc = run("sandbox", "--zk", "--zk-connect", "127.0.0.1:1", "--data-dir", str(tmp_path / "sb"))
    assert proc.returncode == 2, proc.stderr
    assert "exclude each other" in proc.stderr and "Traceback" not in proc.stderr


def test_sandbox_data_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run("sandbox", "--data-dir", str(blocker / "sb"))
    assert_one_line_error(proc, str(blocker / "sb"))
    verbose = run("sandbox", "--verbose", "--data-dir", str(blocker / "sb"))
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr, verbose.stderr
    assert verbose.stderr.rstrip("\n").splitlines()[-1].startswith("Error: "), verbose.stderr


def test_sandbox_bookie_port_taken_on_restart_names_the_bookie_and_its_error(tmp_path):
    """A data dir keeps its bookie ports; when one is taken the bookie's own error line is the sandbox's."""
    data_dir = tmp_path / "sb"
    data_dir.mkdir()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        (data_dir / "sandbox.json").write_text(json.dumps({"bookies": [f"127.0.0.1:{port}"]}))
        proc = run("sandbox", "--bookies", "1", "--data-dir", str(data_dir))
    assert_one_line_error(proc, f"bookie 127.0.0.1:{port} did not start", "bookiePort", "already in use",
                          "bookie.log")


def test_second_sandbox_on_a_data_dir_in_use_names_the_running_one(tmp_path):
    data_dir = tmp_path / "sb"
    first = subprocess.Popen([*BKFAST, "sandbox", "--bookies", "1", "--data-dir", str(data_dir)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    info = None
    try:
        deadline = time.monotonic() + 90
        while not (data_dir / "sandbox.json").exists():
            assert first.poll() is None, first.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the first sandbox did not write sandbox.json"
            time.sleep(0.2)
        info = json.loads((data_dir / "sandbox.json").read_text())
        assert info["pid"] == first.pid
        proc = run("sandbox", "--bookies", "1", "--data-dir", str(data_dir))
        assert_one_line_error(proc, f"data dir {data_dir}", "running sandbox", f"pid {first.pid}", "--data-dir")
        assert "LOCK" not in proc.stderr
        # the first one is untouched: still running, same description
        assert first.poll() is None
        assert json.loads((data_dir / "sandbox.json").read_text()) == info
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGTERM)
        try:
            first.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
        for pid in (info or {}).get("pids", {}).values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        first.stdout.close()
    assert first.returncode == 0
    # once it stopped, the data dir is free again: the lock does not outlive its process
    again = run("sandbox", "--bookies", "1", "--exit-after-demo", "--data-dir", str(data_dir))
    assert again.returncode == 0, again.stderr[-3000:]
