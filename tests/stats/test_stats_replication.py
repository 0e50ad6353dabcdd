"""Java's AutoRecovery, client and ZooKeeper client stats (issue 25), on a real ZooKeeper and real bookie processes.

- a stand-alone `bkfast autorecovery` process serves, on its own prometheusStatsHttpPort, every `replication_*`
  series of tests/vectors/java_metrics_4.16.7.txt without the `replication_` scope (Java's stand-alone
  AutoRecovery names: auditor_*, replication_worker_*, bookkeeper_client_*) with Java's kind and label keys,
  and after a bookie is killed and its ledger re-replicated the values say so;
- a ZooKeeper session made with stats counts every call (a read of a missing node is a failure), its states
  and a new session after an expiry (zk_create_client);
- a ledger client given a StatsLogger records Java's client names; one given none records nothing;
- a bookie's own session serves bookie_bookie_zk_* and bookie_bookie_watcher_state_*.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from kazoo.exceptions import NoNodeError

from bkfast import BookKeeper
from bkfast.meta.zk_client import ZK_OPS, make_zk_client
from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager
from bkfast.stats import StatsRegistry, write_java_text
from tests.cluster_factory import cluster_fixture
from tests.metrics_text import java_series, label_keys, parse, scrape, value
from tests.waiting import wait_until
from tests.zk_server import expire_session

pytestmark = pytest.mark.zookeeper

PASSWORD = b"stats-replication"
PROMETHEUS = {
    "statsProviderClass": "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
    "prometheusStatsHttpAddress": "127.0.0.1",
    "prometheusStatsHttpPort": "0",
    "prometheusStatsLatencyRolloverSeconds": "1",
}
# Java series of a bookkeeper client that bkfast's client has no part for (docs: no worker pool; its
# callbacks run on the reactor thread, so there is no executor thread to label).
NO_PART = {"bookkeeper_client_thread_executor_completed", "bookkeeper_client_thread_executor_queue",
           "bookkeeper_client_thread_executor_tasks_completed", "bookkeeper_client_thread_executor_tasks_failed",
           "bookkeeper_client_thread_executor_tasks_rejected"}


cluster = cluster_fixture(bookies=3, zkTimeout="4000", **PROMETHEUS)


def _stats_port(log_text: str) -> int:
    return int(re.findall(r"Prometheus metrics on http://[\d.]+:(\d+)/metrics", log_text)[-1])


@pytest.fixture(scope="module")
def autorecovery(cluster, tmp_path_factory):
    """`bkfast autorecovery` with the Prometheus provider on a port of its own; yields its stats port."""
    log_path = tmp_path_factory.mktemp("autorecovery") / "autorecovery.log"
    conf = {"metadataServiceUri": cluster.metadata_uri, "bookieId": "autorecovery-stats:1", "zkTimeout": "4000",
            "lostBookieRecoveryDelay": "0", "auditorPeriodicCheckInterval": "0", "rwRereplicateBackoffMs": "500",
            "openLedgerRereplicationGracePeriod": "1000", "lockReleaseOfFailedLedgerGracePeriod": "1000",
            **PROMETHEUS}
    args = [arg for key, val in conf.items() for arg in ("-D", f"{key}={val}")]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "autorecovery", *args],
                                stdout=subprocess.PIPE, stderr=log_file, text=True)
    try:
        assert proc.stdout.readline().strip() == "autorecovery running as autorecovery-stats:1", log_path.read_text()
        port = wait_until("the stats port in the log", lambda: "Prometheus metrics on" in log_path.read_text()
                        and _stats_port(log_path.read_text()), 30)
        wait_until("the client connected and the first audit done", lambda: _started(scrape(port)), 60)
        yield port
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        proc.stdout.close()


def _scrape_after_rereplication(port: int):
    """A scrape once the worker and the auditor have counted a re-replication after a lost bookie, else None."""
    families = scrape(port)
    done = (value(families, "replication_worker_rereplicate_count", success="true") >= 1
            and value(families, "bkfast_replication_replicated_ledgers_total") >= 1
            and value(families, "auditor_URL_PUBLISH_TIME_FOR_LOST_BOOKIE_count", success="true") >= 1)
    return families if done else None


def _started(families) -> bool:
    return ("bookkeeper_client_bookkeeper_client_NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK" in families
            and value(families, "auditor_AUDIT_BOOKIES_TIME_count", success="true") >= 1)


def _healed(cluster, bk, ledger_id, dead) -> bool:
    if UnderReplicationManager(cluster.zk, cluster.root).list_marked():
        return False
    return dead not in bk.get_ledger_metadata(ledger_id).all_bookies


def test_standalone_autorecovery_serves_javas_names_and_counts_a_rereplication(cluster, autorecovery):
    families = scrape(autorecovery)
    assert not [name for name in families
                if name.startswith(("replication_auditor", "replication_replication_worker", "replication_bookkeeper"))]
    missing, wrong = [], []
    for series in java_series():
        if not series.name.startswith("replication_"):
            continue
        name = series.name[len("replication_"):]
        family = families.get(name)
        if family is None:
            if name not in NO_PART:
                missing.append(name)
        elif family["kind"] != series.kind:
            wrong.append(f"{name}: {family['kind']}, Java: {series.kind}")
        elif series.labels not in label_keys(family):
            wrong.append(f"{name}: labels {label_keys(family)}, Java: {sorted(series.labels)}")
    assert not missing, missing
    assert not wrong, wrong
    assert value(families, "bookkeeper_client_watcher_state_SyncConnected") == 1
    assert value(families, "bookkeeper_client_bookkeeper_client_BOOKIES_JOINED_count", success="true") == 3
    assert value(families, "bookkeeper_client_BookKeeperClientWorker_threads") == 0

    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        payloads = [bytes([i]) * (100 + i) for i in range(20)]
        lh.add_entries(payloads)
        lh.close()
        dead = lh.metadata.ensembles[0][1][0]
        cluster.by_id(dead).kill()
        wait_until("the ledger re-replicated off the killed bookie", lambda: _healed(cluster, bk, lh.ledger_id, dead),
                 120, 0.5)
    finally:
        bk.close()
        cluster.ensure_all_running()
    # the worker and the auditor record their stats as they finish, which may be just after the ledger healed
    after = wait_until("the re-replication's stats recorded", lambda: _scrape_after_rereplication(autorecovery), 30)
    assert value(after, "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED") >= 1
    assert value(after, "replication_worker_NUM_ENTRIES_WRITTEN") >= 10        # half the entries had a copy there
    assert value(after, "replication_worker_NUM_ENTRIES_READ") >= 10
    assert value(after, "replication_worker_NUM_BYTES_WRITTEN_sum", success="true") >= 10 * 100
    assert value(after, "replication_worker_rereplicate_count", success="true") >= 1
    assert value(after, "replication_worker_WRITE_DATA_LATENCY_count", success="true") >= 10
    assert value(after, "auditor_AUDIT_BOOKIES_TIME_count", success="true") >= 2    # at start, and the loss
    assert value(after, "auditor_NUM_UNDER_REPLICATED_LEDGERS_sum", success="true") >= 1
    assert value(after, "auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE_sum", success="true") >= sum(map(len, payloads))
    assert value(after, "auditor_URL_PUBLISH_TIME_FOR_LOST_BOOKIE_count", success="true") >= 1
    assert value(after, "bookkeeper_client_bookkeeper_client_BOOKIES_LEFT_count", success="true") >= 1
    assert value(after, "bookkeeper_client_bookkeeper_client_bookie_watcher_REPLACE_BOOKIE_TIME_count",
                 success="true") >= 1
    assert value(after, "bookkeeper_client_zk_get_children_count", success="true") > \
        value(families, "bookkeeper_client_zk_get_children_count", success="true")
    assert value(after, "bkfast_replication_replicated_ledgers_total") >= 1     # bkfast's own, beside Java's


def _op(registry, op: str, ok: bool) -> int:
    family = registry.family(f"t_zk_{op}")
    return next(iter(family.series.values())).count(ok)


def test_zookeeper_session_stats_count_calls_failures_and_states(zookeeper_server):
    registry = StatsRegistry()
    zk = make_zk_client(zookeeper_server, 10.0, stats=registry.logger("t"), log_states=False)
    zk.start(timeout=30)
    root = f"/stats-{time.monotonic_ns()}"
    try:
        zk.create(root, b"x")
        zk.get(root)
        with pytest.raises(NoNodeError):
            zk.get(f"{root}/missing")
        assert zk.exists(f"{root}/missing") is None
        zk.set(root, b"y")
        zk.get_children(root)
        zk.sync(root)
        zk.set_acls(root, zk.get_acls(root)[0])
        tx = zk.transaction()
        tx.create(f"{root}/a", b"")
        tx.commit()
        failing = zk.transaction()
        failing.delete(f"{root}/nothing-here")
        failing.commit()
        zk.delete(root, recursive=True)
        expected = {("create", True): 1, ("get_data", True): 1, ("get_data", False): 1, ("exists", True): 1,
                    ("set_data", True): 1, ("sync", True): 1, ("get_acl", True): 1, ("set_acl", True): 1,
                    ("multi", True): 1, ("multi", False): 1, ("get_children", True): 2, ("delete", True): 2}
        wait_until("every call recorded", lambda: all(_op(registry, op, ok) >= n for (op, ok), n in expected.items()),
                 10, 0.05)
        assert _op(registry, "get_data", False) == 1 and _op(registry, "exists", False) == 0
        assert set(ZK_OPS) == {f.name[len("t_zk_"):] for f in registry.families() if f.name.startswith("t_zk_")}
        before = _op(registry, "get_children", True)
        zk.get_children("/")
        wait_until("the count to grow", lambda: _op(registry, "get_children", True) == before + 1, 10, 0.05)
        expire_session(zk)
        wait_until("create_client", lambda: _op(registry, "create_client", True) == 1, 10, 0.05)
    finally:
        zk.stop()
        zk.close()
    states = {f.name: next(iter(f.series.values())).value for f in registry.families() if "watcher_state" in f.name}
    assert states["t_watcher_state_SyncConnected"] == 2              # the first session and the one after expiry
    assert states["t_watcher_state_Expired"] == 1
    assert states["t_watcher_state_Closed"] == 1
    text = write_java_text(registry)
    assert "# TYPE t_zk_get_data summary" in text and "# TYPE t_watcher_state_Closed counter" in text


def test_client_with_stats_records_javas_client_names_and_one_without_records_nothing(cluster):
    registry = StatsRegistry()
    bk = BookKeeper(cluster.metadata_uri, timeout=60, stats=registry.logger("c"))
    plain = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entries([b"a" * 10] * 7)
        assert len(lh.read_entries(0, 6)) == 7
        left_open = bk.create_ledger(3, 2, 2, password=PASSWORD)
        left_open.add_entries([b"b"] * 3)
        assert bk.open_ledger(left_open.ledger_id, PASSWORD, recovery=True).last_add_confirmed == 2
        lh.close()
        bk.delete_ledger(lh.ledger_id)
        plain.create_ledger(3, 2, 2, password=PASSWORD).close()
        families = parse(write_java_text(registry))
    finally:
        bk.close()
        plain.close()
    assert not plain.async_client.client_stats.enabled
    prefix = "c_bookkeeper_client_"
    ok = {name: value(families, f"{prefix}{name}_count", success="true")
          for name in ("LEDGER_CREATE", "ADD_ENTRY", "READ_ENTRY", "LEDGER_OPEN", "LEDGER_RECOVER", "LEDGER_DELETE",
                       "bookie_watcher_NEW_ENSEMBLE_TIME", "BOOKIES_JOINED")}
    # adds: 7 + 3, and the recovery's re-adds of the entries past the LAC the bookies knew (pipelined adds
    # piggyback an older LAC: 1 to 3 of them)
    readded = value(families, f"{prefix}LEDGER_RECOVER_ADD_ENTRIES_sum", success="true")
    assert 1 <= readded <= 3
    assert value(families, f"{prefix}LEDGER_RECOVER_READ_ENTRIES_sum", success="true") == readded
    assert ok == {"LEDGER_CREATE": 2, "ADD_ENTRY": 7 + 3 + readded, "READ_ENTRY": 1, "LEDGER_OPEN": 1,
                  "LEDGER_RECOVER": 1, "LEDGER_DELETE": 1, "bookie_watcher_NEW_ENSEMBLE_TIME": 2, "BOOKIES_JOINED": 3}
    assert value(families, f"{prefix}NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK") == 3
    assert value(families, "c_zk_get_children_count", success="true") > 0          # its own driver's session
    assert value(families, "c_watcher_state_SyncConnected") == 1
    for series in java_series():
        name = series.name.replace("replication_bookkeeper_client_", "c_", 1)
        if series.name.startswith("replication_bookkeeper_client_") and "thread_executor" not in name:
            assert families[name]["kind"] == series.kind, name


def test_bookie_session_serves_bookie_bookie_zk_stats(cluster):
    bookie = next(b for b in cluster.bookies if b.alive())
    families = scrape(_stats_port(bookie.log_path.read_text()))
    for op in ZK_OPS:
        assert families[f"bookie_bookie_zk_{op}"]["kind"] == "summary", op
    assert value(families, "bookie_bookie_zk_create_count", success="true") >= 1       # its registration
    assert value(families, "bookie_bookie_zk_get_data_count", success="true") >= 1       # its cookie
    assert value(families, "bookie_bookie_watcher_state_SyncConnected") == 1
