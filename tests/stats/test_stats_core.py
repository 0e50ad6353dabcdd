"""The stats primitives (bkfast._stats) and Java's stats model and text (bkfast.stats), without a bookie."""

import math
import random
import re

import pytest

from bkfast.stats import QUANTILES, OpStats, StatsProvider, StatsRegistry, metric_name, now_ns, write_java_text


def test_quantiles_are_within_the_buckets_error_of_the_exact_ones():
    rng = random.Random(7)
    values = sorted(rng.lognormvariate(0.0, 2.0) for _ in range(50_000))
    stat = OpStats()
    for value in values:
        stat.ok_value(value)
    stat.rollover()
    got = stat.quantiles(True)
    for q, value in zip(QUANTILES, got, strict=True):
        exact = values[-1] if q == 1.0 else values[max(0, math.ceil(q * len(values)) - 1)]
        assert value == pytest.approx(exact, rel=0.02), q
    assert got[-1] == values[-1]                        # the maximum is exact
    assert stat.count(True) == len(values) and stat.total(True) == pytest.approx(sum(values))


def test_quantiles_are_nan_until_a_rollover_and_for_an_empty_window():
    stat = OpStats()
    stat.ok_ns(3_000_000)
    assert all(math.isnan(v) for v in stat.quantiles(True))
    stat.rollover()
    assert stat.quantiles(True) == (3.0,) * len(QUANTILES)          # nanoseconds in, milliseconds out
    assert all(math.isnan(v) for v in stat.quantiles(False))
    stat.rollover()                                                   # a window without events
    assert all(math.isnan(v) for v in stat.quantiles(True))
    assert stat.count(True) == 1 and stat.total(True) == 3.0          # counts and sums never roll over


def test_a_batch_counts_each_event_and_failures_are_kept_apart():
    stat = OpStats()
    stat.ok_ns_many(10, 2_000_000)
    stat.fail_ns_many(3, 500_000)
    stat.fail_value(7)
    stat.rollover()
    assert (stat.count(True), stat.total(True)) == (10, 20.0)
    assert (stat.count(False), stat.total(False)) == (4, pytest.approx(8.5))
    assert stat.quantiles(False)[-1] == 7.0


def test_ok_since_measures_from_the_monotonic_clock():
    import time

    start = now_ns()
    assert abs(start - time.monotonic_ns()) < 50_000_000
    time.sleep(0.02)
    stat = OpStats()
    stat.ok_since(start)
    assert 19.0 <= stat.total(True) < 1000.0


def test_disabled_stats_record_nothing_and_are_not_listed():
    registry = StatsRegistry(enabled=False)
    logger = registry.logger("bookie")
    logger.counter("WRITE_BYTES").add(5)
    stat = logger.op_stats("BOOKIE_ADD_ENTRY")
    stat.ok_ns(1000)
    logger.gauge("SERVER_STATUS", lambda: 1)
    assert stat.count(True) == 0 and registry.families() == [] and write_java_text(registry) == ""


def test_names_are_scopes_joined_and_sanitised_and_the_same_name_is_the_same_stat():
    assert metric_name("bookie", "ledger_dir_/data/bk-1/ledgers_usage") == "bookie_ledger_dir__data_bk_1_ledgers_usage"
    registry = StatsRegistry()
    journal = registry.logger("bookie").scope("journal").scope_label("journalIndex", 0)
    assert journal.op_stats("JOURNAL_SYNC") is journal.op_stats("JOURNAL_SYNC")
    assert journal.op_stats("JOURNAL_SYNC") is not journal.scope_label("journalIndex", 1).op_stats("JOURNAL_SYNC")
    with pytest.raises(ValueError, match="is a summary"):
        journal.counter("JOURNAL_SYNC")
    pooled = registry.logger("bookkeeper_server").thread_scoped("BookieReadThreadPool", 3)
    pooled.op_stats("READ_ENTRY")
    family = registry.family("bookkeeper_server_READ_ENTRY")
    assert list(family.series) == [(("thread", "3"), ("threadPool", "BookieReadThreadPool"))]


def test_java_text_counters_gauges_and_summaries():
    registry = StatsRegistry()
    bookie = registry.logger("bookie")
    bookie.counter("WRITE_BYTES").add(1234)
    bookie.gauge("SERVER_STATUS", lambda: -1)
    bookie.scope("ledger_dir_/d").gauge("usage", lambda: 74.5)
    sync = bookie.scope("journal").scope_label("journalIndex", 0).op_stats("JOURNAL_SYNC")
    sync.ok_ns(1_500_000)
    sync.fail_ns(250_000)
    registry.rollover()
    text = write_java_text(registry)
    assert "# TYPE bookie_WRITE_BYTES counter\nbookie_WRITE_BYTES 1234\n" in text      # no _total
    assert "bookie_SERVER_STATUS -1\n" in text and "bookie_ledger_dir__d_usage 74.5\n" in text
    assert text.count("# TYPE bookie_journal_JOURNAL_SYNC summary\n") == 1
    lines = [line for line in text.splitlines() if line.startswith("bookie_journal_JOURNAL_SYNC")]
    assert len(lines) == 2 * (len(QUANTILES) + 2)
    assert lines[0] == 'bookie_journal_JOURNAL_SYNC{success="false",quantile="0.5", journalIndex="0"} 0.25'
    assert 'bookie_journal_JOURNAL_SYNC{success="true",quantile="0.9999", journalIndex="0"} 1.5' in lines
    assert 'bookie_journal_JOURNAL_SYNC_count{success="true", journalIndex="0"} 1' in lines
    assert 'bookie_journal_JOURNAL_SYNC_sum{success="true", journalIndex="0"} 1.5' in lines


def test_label_values_are_escaped_and_a_failing_gauge_is_nan():
    registry = StatsRegistry()
    registry.logger("x").scope_label("ledgerDir", 'a"b\\c').counter("C").inc()
    registry.logger("x").gauge("G", lambda: 1 / 0)
    text = write_java_text(registry)
    assert 'x_C{ledgerDir="a\\"b\\\\c"} 1' in text and "x_G NaN" in text


def test_the_provider_follows_statsProviderClass_and_enableStatistics():
    from bkfast.conf import ServerConfiguration

    prometheus = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
    assert not StatsProvider.from_conf(ServerConfiguration({})).enabled                  # Java's default: Null
    assert StatsProvider.from_conf(ServerConfiguration({"statsProviderClass": prometheus})).enabled
    assert not StatsProvider.from_conf(ServerConfiguration({"statsProviderClass": prometheus,
                                                            "enableStatistics": "false"})).enabled
    codahale = "org.apache.bookkeeper.stats.codahale.CodahaleMetricsProvider"
    codahale = ServerConfiguration({"statsProviderClass": codahale})
    assert not StatsProvider.from_conf(codahale).enabled
    provider = StatsProvider.from_conf(ServerConfiguration({"statsProviderClass": prometheus}))
    provider.logger("bookie").counter("WRITE_BYTES").inc()
    text = provider.text()
    assert "bookie_WRITE_BYTES 1\n" in text
    assert re.search(r"^process_resident_memory_bytes \S+$", text, re.MULTILINE)
    assert re.search(r"^python_info\{", text, re.MULTILINE)
