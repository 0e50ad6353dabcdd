"""A real bookie process (ZooKeeper, AutoRecovery inside, the Prometheus provider on its own port) serves the
series a Java 4.16.7 bookie serves (tests/vectors/java_metrics_4.16.7.txt): same names, kinds and label keys,
after adds, reads, a ledger recovery and a ledger delete; every Java series it does not serve is listed, with
the reason, in docs/metrics.md. Values make sense: bookie_WRITE_BYTES grows by the bytes written,
bookie_SERVER_STATUS goes 1 -> 0 -> 1 as the bookie turns read-only and back."""

from __future__ import annotations

import re

import pytest

from bkfast import BookKeeper
from tests import REPO
from tests.cluster_factory import cluster_fixture
from tests.metrics_text import documented_exceptions, java_series, label_keys, scrape, value
from tests.replication_support import admin_request
from tests.waiting import wait_until

pytestmark = pytest.mark.zookeeper

DOC = REPO / "docs" / "metrics.md"
PASSWORD = b"metrics"
ENTRY_HEADER_BYTES = 32            # ledger id, entry id, LAC, length
CRC32_DIGEST_BYTES = 8
CONF = {
    "statsProviderClass": "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
    "prometheusStatsHttpAddress": "127.0.0.1",
    "prometheusStatsHttpPort": "0",
    "prometheusStatsLatencyRolloverSeconds": "1",
    "autoRecoveryDaemonEnabled": "true",
    "httpServerEnabled": "true",
    "httpServerPort": "0",
    "gcWaitTime": "1000",
    "flushInterval": "500",
}


def stats_port(bookie) -> int:
    return int(re.findall(r"Prometheus metrics on http://[\d.]+:(\d+)/metrics", bookie.log_path.read_text())[-1])


def scrape_with_add_latency(port: int):
    """A scrape once a rollover has published the quantiles of a window with adds in it (an empty window's
    are NaN), else None."""
    families = scrape(port)
    p50 = value(families, "bookie_journal_JOURNAL_ADD_ENTRY", success="true", quantile="0.5")
    return families if p50 == p50 else None


cluster = cluster_fixture(bookies=3, **CONF)


@pytest.fixture(scope="module")
def after_workload(cluster):
    """Adds, reads, a recovery (open with fencing of a ledger left open) and a delete, then a scrape of
    bookie 0 once the deleted ledger is gone from it."""
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        written = bk.create_ledger(3, 3, 3, digest_type="CRC32", password=PASSWORD)
        written.add_entries([b"x" * 1000] * 50)
        assert [e.data for e in written.read_entries(0, 49)] == [b"x" * 1000] * 50
        left_open = bk.create_ledger(3, 3, 3, password=PASSWORD)
        left_open.add_entries([b"y" * 100] * 10)
        recovered = bk.open_ledger(left_open.ledger_id, PASSWORD, recovery=True)
        assert recovered.last_add_confirmed == 9
        doomed = bk.create_ledger(3, 3, 3, password=PASSWORD)
        doomed.add_entries([b"z"] * 5)
        doomed.close()
        bk.delete_ledger(doomed.ledger_id)
        port = stats_port(cluster.bookies[0])
        wait_until("the deleted ledger to be collected",
                   lambda: value(scrape(port), "bookie_DELETED_LEDGER_TOTAL") >= 1, 60, 0.2)
        yield bk, wait_until("a latency rollover publishing the workload's quantiles",
                             lambda: scrape_with_add_latency(port), 30, 0.1)
    finally:
        bk.close()


def test_every_java_series_is_served_with_its_kind_and_labels_or_documented(after_workload):
    _, families = after_workload
    exceptions = documented_exceptions(DOC)
    missing, wrong = [], []
    for series in java_series():
        family = families.get(series.name)
        if series.name.startswith("bookie_ledger_dir_"):
            # the name carries the ledger dir's path (Java's /data/bookkeeper/ledgers here)
            family = next((families[name] for name in families
                           if re.fullmatch(r"bookie_ledger_dir__\w+_usage", name)), None)
        if family is None:
            if series.name not in exceptions:
                missing.append(series.name)
            continue
        if family["kind"] != series.kind:
            wrong.append(f"{series.name}: {family['kind']}, Java: {series.kind}")
        elif series.labels not in label_keys(family):
            wrong.append(f"{series.name}: labels {sorted(map(sorted, label_keys(family)))}, "
                         f"Java: {sorted(series.labels)}")
    assert not missing, f"Java series neither served nor listed in docs/metrics.md: {sorted(set(missing))}"
    assert not wrong, wrong
    served_anyway = sorted(name for name in exceptions if name in families)
    assert not served_anyway, f"docs/metrics.md lists as not served: {served_anyway}"


def test_summaries_are_javas_shape(cluster, after_workload):
    bk, families = after_workload
    family = families["bookie_journal_JOURNAL_ADD_ENTRY"]
    names = {sample for sample, _, _ in family["samples"]}
    assert names == {"bookie_journal_JOURNAL_ADD_ENTRY", "bookie_journal_JOURNAL_ADD_ENTRY_count",
                     "bookie_journal_JOURNAL_ADD_ENTRY_sum"}
    quantiles = {ls["quantile"] for sample, ls, _ in family["samples"] if "quantile" in ls}
    assert quantiles == {"0.5", "0.75", "0.95", "0.99", "0.999", "0.9999", "1.0"}
    assert value(families, "bookie_journal_JOURNAL_ADD_ENTRY_count", success="true") >= 65
    # Quantiles are those of the last (1 s) window: write until a window with adds has been published.
    handle = bk.create_ledger(3, 3, 3, password=PASSWORD)
    port = stats_port(cluster.bookies[0])

    def p50():
        handle.add_entry(b"q" * 100)
        p = value(scrape(port), "bookie_journal_JOURNAL_ADD_ENTRY", success="true", quantile="0.5")
        return p if p == p else None                            # NaN: an empty window

    assert 0 < wait_until("a published add latency", p50, 30) < 10_000          # milliseconds
    assert not any(name.endswith("_total") and name.startswith(("bookie_", "bookkeeper_server_"))
                   and families[name]["kind"] == "counter" and not name.endswith("TOTAL")
                   for name in families)


def test_write_bytes_grow_by_what_was_written_and_reads_are_counted(cluster, after_workload):
    bk, _ = after_workload
    port = stats_port(cluster.bookies[0])
    before = scrape(port)
    payloads = [bytes([i]) * (100 + 37 * i) for i in range(20)]
    handle = bk.create_ledger(3, 3, 3, digest_type="CRC32", password=PASSWORD)
    handle.add_entries(payloads)
    handle.read_entries(0, 19)
    after = scrape(port)
    stored = sum(ENTRY_HEADER_BYTES + CRC32_DIGEST_BYTES + len(p) for p in payloads)
    assert value(after, "bookie_WRITE_BYTES") - value(before, "bookie_WRITE_BYTES") == stored
    requests = (value(after, "bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true")
                - value(before, "bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true"))
    assert requests == len(payloads)
    assert value(after, "bookie_READ_BYTES") >= value(before, "bookie_READ_BYTES")


def test_server_status_follows_read_only_and_back(cluster, after_workload):
    bookie = cluster.bookies[0]
    port = stats_port(bookie)
    assert value(scrape(port), "bookie_SERVER_STATUS") == 1
    assert admin_request(bookie, "PUT", "bookie/state/readonly", {"readOnly": True})[0] == 200
    try:
        wait_until("SERVER_STATUS 0", lambda: value(scrape(port), "bookie_SERVER_STATUS") == 0, 30)
    finally:
        assert admin_request(bookie, "PUT", "bookie/state/readonly", {"readOnly": False})[0] == 200
    wait_until("SERVER_STATUS 1", lambda: value(scrape(port), "bookie_SERVER_STATUS") == 1, 30)


def test_process_and_runtime_gauges_stand_in_for_the_jvms(after_workload):
    _, families = after_workload
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "python_info", "python_gc_objects_collected_total"):
        assert name in families, name


DASHBOARD = REPO / "docs" / "grafana" / "bkfast-cluster.json"
PROMQL_WORDS = {"sum", "by", "rate", "increase", "instance", "success", "quantile", "label_values"}


def test_the_grafana_dashboard_queries_only_what_the_bookie_serves(after_workload):
    import json

    _, families = after_workload
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(exprs) >= 30
    used = set()
    for expr in exprs:
        without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
        used |= {word for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_labels)
                 if word not in PROMQL_WORDS}
    assert used
    unknown = []
    for name in sorted(used):
        family = name
        for suffix in ("_count", "_sum", "_total"):
            if family not in families and family.endswith(suffix):
                family = family[: -len(suffix)]
        if family not in families:
            unknown.append(name)
    assert not unknown, f"the dashboard queries metrics the bookie does not serve: {unknown}"
    sections = {panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"}
    assert {"Bookies", "Journals", "Storage", "AutoRecovery", "Streams' ledgers"} <= sections


def test_the_docs_list_every_metric_the_bookie_serves_with_its_type(after_workload):
    _, families = after_workload
    table = DOC.read_text().split("## Every metric", 1)[1]
    documented = {name: kind for name, kind in re.findall(r"^\| `([^`]+)` \| (\w+) \|", table, re.MULTILINE)}
    undocumented, wrong = [], []
    for name, family in families.items():
        shown = "bookie_ledger_dir_<path>_usage" if name.startswith("bookie_ledger_dir_") else name
        if shown not in documented:
            undocumented.append(name)
        elif documented[shown] != family["kind"]:
            wrong.append(f"{name}: served as {family['kind']}, documented as {documented[shown]}")
    assert not undocumented, f"served, not in docs/metrics.md: {sorted(undocumented)}"
    assert not wrong, wrong
