"""`bkfast bookie --conf` with a BookKeeper bk_server.conf, against a real ZooKeeper (issue 14):

* `listeningInterface=lo` without `advertisedAddress` binds lo's address (127.0.0.1) and registers as
  `127.0.0.1:PORT` (Java's BookieImpl.getBookieAddress);
* bind first: a bookie whose port (bookie or admin HTTP) is taken stops with one line on stderr, exit
  code 1, and leaves no cookie (in ZooKeeper or its directories) and no registration; when the port is
  held by a live bookie of the same id, that bookie's cookie is not touched;
* a ZooKeeper that does not answer is one line naming metadataServiceUri and the remedies.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.meta import zk_layout
from bkfast.proto import BookieServiceInfoFormat

pytestmark = pytest.mark.zookeeper

# An excerpt of BookKeeper 4.16's conf/bk_server.conf layout: its sections, its keys (some of which bkfast
# does not read: kept and logged), its commented-out defaults; advertisedAddress stays commented out.
JAVA_CONF = """\
#!/bin/sh
## Bookie settings

#############################################################################
## Server parameters
#############################################################################

# Port that bookie server listen on
bookiePort={port}

# Set the network interface that the bookie should listen on.
# If not set, the bookie will listen on all interfaces.
listeningInterface=lo

# Configure a specific hostname or IP address that the bookie should use to advertise itself to
# clients. If not set, bookie will advertised its own IP address or hostname, depending on the
# listeningInterface and useHostNameAsBookieID settings.
# advertisedAddress=

# Whether the bookie allowed to use a loopback interface as its primary
# interface(i.e. the interface it uses to establish its identity)?
allowLoopback=true

# Whether the bookie should use its hostname to register with the
# co-ordination service(eg: Zookeeper service).
# useHostNameAsBookieID=false
# useShortHostName=false

# Whether the bookie is allowed to use an ephemeral port (port 0) as its server port.
# allowEphemeralPorts=false

# The number of threads that should handle journal callbacks
numJournalCallbackThreads=8

#############################################################################
## Http server settings
#############################################################################

httpServerEnabled={http}
httpServerPort={http_port}
httpServerClass=org.apache.bookkeeper.http.vertx.VertxHttpServer

#############################################################################
## Journal settings
#############################################################################

journalDirectories={journal}
journalMaxGroupWaitMSec=1

#############################################################################
## Ledger storage settings
#############################################################################

ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
ledgerDirectories={ledgers}
dbStorage_writeCacheMaxSizeMb=16
dbStorage_readAheadCacheMaxSizeMb=16

#############################################################################
## Metadata Services
#############################################################################

metadataServiceUri={metadata_uri}
# zkServers=localhost:2181
zkTimeout=10000
"""


@dataclass
class Meta:
    zk: KazooClient
    root: str
    uri: str

    def cookie(self, bookie_id: str):
        return self.zk.exists(f"{self.root}/cookies/{bookie_id}")

    def cookies(self) -> list[str]:
        path = f"{self.root}/cookies"
        return self.zk.get_children(path) if self.zk.exists(path) else []

    def registered(self) -> list[str]:
        return [c for c in self.zk.get_children(f"{self.root}/available") if c != "readonly"]


@pytest.fixture
def meta(zookeeper_server):
    base = f"/bk-{uuid.uuid4().hex[:12]}"
    zk = KazooClient(hosts=zookeeper_server, timeout=15.0)
    zk.start(timeout=30)
    zk_layout.init_new_cluster(zk, base + "/ledgers")
    try:
        yield Meta(zk, base + "/ledgers", f"zk+hierarchical://{zookeeper_server}{base}/ledgers")
    finally:
        try:
            zk.delete(base, recursive=True)
        finally:
            zk.stop()
            zk.close()


def write_conf(data_dir: Path, port: int, metadata_uri: str, http_port: int | None = None) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "bk_server.conf"
    path.write_text(JAVA_CONF.format(
        port=port, http="true" if http_port else "false", http_port=http_port or 8000,
        journal=data_dir / "journal", ledgers=data_dir / "ledgers", metadata_uri=metadata_uri))
    return path


@dataclass
class ConfBookie(LocalBookie):
    """`bkfast bookie --conf FILE` and nothing else on the command line (LocalBookie's start/stop by pid)."""

    conf_path: Path | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bkfast.cli.main", "bookie", "--conf", str(self.conf_path)]


def run_bookie(conf_path: Path) -> subprocess.CompletedProcess:
    """A bookie expected to fail at start: its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bookie", "--conf", str(conf_path)],
                          capture_output=True, text=True, timeout=60)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "bookie listening" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert all(word in errors[0] for word in words), errors[0]
    return errors[0]


def has_local_cookie(data_dir: Path) -> bool:
    return any((data_dir / d / "current" / "VERSION").exists() for d in ("journal", "ledgers"))


def test_java_conf_with_listening_interface_lo_binds_loopback_and_registers_as_127_0_0_1(meta, tmp_path):
    port = free_port()
    bookie = ConfBookie(tmp_path / "a", port, conf_path=write_conf(tmp_path / "a", port, meta.uri))
    bookie.start()
    try:
        assert bookie.port == port, "the bookie did not print the port of its conf"
        bookie_id = f"127.0.0.1:{port}"
        assert meta.registered() == [bookie_id]
        info = BookieServiceInfoFormat()
        info.ParseFromString(meta.zk.get(f"{meta.root}/available/{bookie_id}")[0])
        assert [(ep.host, ep.port) for ep in info.endpoints] == [("127.0.0.1", port)]
        assert meta.cookie(bookie_id) is not None
        log = bookie.log_path.read_text()
        assert f"bookie {bookie_id} registered" in log
        assert "allowLoopback" in log and "httpServerClass" in log     # kept, named once at start
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass

        # The same conf, new directories: same bookie id, same port, held by the live bookie. It fails at
        # bind, before ZooKeeper: the live bookie's cookie is not rewritten, no cookie in the new dirs.
        stat = meta.cookie(bookie_id)
        proc = run_bookie(write_conf(tmp_path / "b", port, meta.uri))
        line = assert_one_line_error(proc, f"127.0.0.1:{port}", "already in use", "bookiePort")
        assert "bookieformat" not in line
        assert meta.cookie(bookie_id) == stat and not has_local_cookie(tmp_path / "b")
        assert meta.registered() == [bookie_id] and bookie.alive()
    finally:
        assert bookie.stop() == 0, bookie.log_path.read_text()[-3000:]


@pytest.mark.parametrize("taken", ["bookiePort", "httpServerPort"])
def test_a_bookie_whose_port_is_taken_leaves_nothing_in_zookeeper(meta, tmp_path, taken):
    port, http_port = free_port(), free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port if taken == "bookiePort" else http_port))
        holder.listen()
        proc = run_bookie(write_conf(tmp_path, port, meta.uri, http_port=http_port))
    held = port if taken == "bookiePort" else http_port
    assert_one_line_error(proc, taken, f"127.0.0.1:{held}", "already in use")
    assert meta.cookies() == []
    assert meta.registered() == []
    assert not has_local_cookie(tmp_path)


def test_a_zookeeper_that_does_not_answer_is_one_line_naming_metadata_service_uri(tmp_path):
    uri = f"zk+hierarchical://127.0.0.1:{free_port()}/ledgers"       # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "bookie", "--port", "0", "-D", "listeningInterface=127.0.0.1",
         "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'ledgers'}",
         "-D", f"metadataServiceUri={uri}", "-D", "zkTimeout=1000"],
        capture_output=True, text=True, timeout=60)
    assert_one_line_error(proc, "cannot reach ZooKeeper", uri, "--no-metadata")
    assert not has_local_cookie(tmp_path)
