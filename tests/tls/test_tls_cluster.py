"""A TLS cluster through the bkfast client: real ZooKeeper, 4 `bkfast bookie` processes with TLS, mutual
TLS and BookieAuthZFactory, certificates from a real CA made here. The ledger client passes the same
ledger tests as in plaintext (create, add, ensemble change after a SIGKILL, recovery, read), on v2 and v3;
a client without an authorized role, or without TLS, writes nothing."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import uuid

import pytest
from kazoo.client import KazooClient

from bkfast import BookKeeper
from bkfast.cli.local_cluster import LocalBookie, free_port, start_bookies
from bkfast.errors import BKError
from bkfast.meta import zk_layout
from tests.client.test_client_cluster import _write_while_killing
from tests.cluster_factory import running_cluster
from tests.tls_support import make_pki

pytestmark = pytest.mark.zookeeper

PASSWORD = b"tls-tests"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory, pki):
    with running_cluster(zookeeper_server, tmp_path_factory.mktemp("tlscluster"), 4,
                         **pki.bookie_conf(authz=True)) as started:
        yield started


@pytest.fixture
def running(cluster):
    cluster.ensure_all_running()
    return cluster


def _client(cluster, pki, who="good", **conf):
    return BookKeeper(cluster.metadata_uri, timeout=60, **pki.client_conf(who), **conf)


@pytest.mark.parametrize("protocol", ["v2", "v3"])
def test_tls_ledger_create_add_ensemble_change_read(running, pki, protocol):
    rng = random.Random(3)
    payloads = [rng.randbytes(700) for _ in range(3000)]
    with _client(running, pki, protocol=protocol, addEntryTimeoutSec=5,
                 tlsHostnameVerificationEnabled=True) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
        victim = running.by_id(lh.metadata.ensembles[0][1][1])
        acked, errors = _write_while_killing(lh, payloads, 300, 100, 800, [victim])
        assert not errors, errors
        assert acked == list(range(len(payloads)))
        assert len(lh.metadata.ensembles) >= 2 and victim.bookie_id not in lh.metadata.ensembles[-1][1]
        assert [e.data for e in lh.read_entries(0, len(payloads) - 1)] == payloads
        lh.close()
    with _client(running, pki, protocol=protocol) as other:
        rh = other.open_ledger(lh.ledger_id, PASSWORD)
        assert [e.data for e in rh.read_entries(0, len(payloads) - 1)] == payloads


def test_tls_recovery_of_an_unclosed_ledger(running, pki):
    with _client(running, pki) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
        payloads = [b"entry-%d" % i for i in range(50)]
        lh.add_entries(payloads)
        with _client(running, pki, protocol="v3") as other:
            rh = other.open_ledger(lh.ledger_id, PASSWORD, recovery=True)
            assert rh.metadata.last_entry_id == 49
            assert [e.data for e in rh.read_entries(0, 49)] == payloads


@pytest.mark.parametrize("who", ["intruder", None])
def test_unauthorized_or_certificateless_client_writes_nothing(running, pki, who):
    with pytest.raises(BKError):
        with _client(running, pki, who, protocol="v3", addEntryTimeoutSec=3, readEntryTimeoutSec=3) as bk:
            lh = bk.create_ledger(3, 3, 3, password=PASSWORD)
            lh.add_entry(b"must not be stored")


def test_plaintext_client_refused_by_the_tls_cluster(running):
    with pytest.raises(BKError):
        with BookKeeper(running.metadata_uri, timeout=30, addEntryTimeoutSec=3) as bk:
            lh = bk.create_ledger(3, 3, 3, password=PASSWORD)
            lh.add_entry(b"must not be stored")


def test_tls_client_against_a_bookie_without_tls_fails_cleanly(zookeeper_server, tmp_path, pki):
    with running_cluster(zookeeper_server, tmp_path, 1) as plain:
        with pytest.raises(BKError):
            with BookKeeper(plain.metadata_uri, timeout=30, addEntryTimeoutSec=3, **pki.client_conf()) as bk:
                bk.create_ledger(1, 1, 1, password=PASSWORD).add_entry(b"x")


def _bench_ledger(metadata_uri, conf, *args):
    out = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "ledger", "--metadata-uri",
                          metadata_uri, "--duration", "1", "--no-read", "--tailing", "0", "--outstanding", "200",
                          "--tls-conf", str(conf), "--json", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _write_client_conf(path, keys):
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return path


def test_bench_ledger_over_tls(running, pki, tmp_path):
    doc = _bench_ledger(running.metadata_uri, _write_client_conf(tmp_path / "client.conf", pki.client_conf("good")))
    assert doc["adds"] > 0 and doc["errors"] == 0


def test_bench_ledger_tls_compares_with_plaintext(zookeeper_server, tmp_path, pki):
    """`bench ledger --tls` runs in plaintext, then over TLS, against a TLS bookie that serves both (no client
    authentication), and compares; the bookie's log (DEBUG) shows the second run really used TLS."""
    zk = KazooClient(hosts=zookeeper_server, timeout=15.0)
    zk.start(timeout=30)
    root = f"/bk-{uuid.uuid4().hex[:12]}"
    bookie = None
    try:
        zk_layout.init_new_cluster(zk, f"{root}/ledgers")
        uri = f"zk+hierarchical://{zookeeper_server}{root}/ledgers"
        bookie = LocalBookie(tmp_path / "bookie", free_port(), uri, {"journalMaxGroupWaitMSec": "1",
                                                                     **pki.bookie_conf()},
                             extra_args=["--log-level", "DEBUG"])
        start_bookies([bookie])
        conf = _write_client_conf(tmp_path / "client.conf", pki.client_conf())
        doc = _bench_ledger(uri, conf, "--tls", "--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")
        log = bookie.log_path.read_text(errors="replace")
    finally:
        if bookie is not None:
            bookie.stop()
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()
    plain, tls, cmp = doc["plaintext"], doc["tls"], doc["tls_vs_plaintext"]
    for run in (plain, tls):
        assert run["adds"] > 0 and run["errors"] == 0 and run["adds_per_s"] > 0
        assert 0 < run["p50_ms"] <= run["p99_ms"]
    assert cmp["throughput_ratio"] == round(tls["adds_per_s"] / plain["adds_per_s"], 3) > 0
    assert cmp["p99_ms_delta"] == round(tls["p99_ms"] - plain["p99_ms"], 3)
    assert "is TLS-protected" in log, log[-3000:]
