"""The "bkfast" PySpark data source (issue 15) with a real Spark `local[2]` session, a real ZooKeeper
and 3 real bookie processes: batch and streaming reads and writes of log streams."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

pyspark = pytest.importorskip("pyspark", minversion="4.0")
pytest.importorskip("pyarrow", minversion="18")

from bkfast import BookKeeper  # noqa: E402
from bkfast.errors import StreamFencedError  # noqa: E402
from tests import REPO  # noqa: E402
from tests.cluster_factory import cluster_fixture  # noqa: E402
from tests.stream_cluster import cluster, ns  # noqa: E402, F401  (fixtures)

pytestmark = pytest.mark.zookeeper


def spark_session(app: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.task.maxFailures", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import bkfast.spark

    bkfast.spark.register(spark)
    return spark


@pytest.fixture(scope="module")
def spark():
    s = spark_session("bkfast-tests")
    try:
        yield s
    finally:
        s.stop()


# The same source on a cluster whose metadata is in etcd (docs/etcd.md): executors open it by its etcd:// URI.
etcd_cluster = cluster_fixture(bookies=3, store="etcd")


def test_a_round_trip_through_a_cluster_on_etcd(spark, etcd_cluster):
    from bkfast.streams import Namespace

    with Namespace(etcd_cluster.metadata_uri, timeout=60) as on_etcd:
        on_etcd.create_stream("etcd-trip")
        rows = _rows(20_000, "etcd")
        df = spark.createDataFrame(rows, "key binary, value binary").repartition(4)
        df.write.format("bkfast").options(**_opts(etcd_cluster, "etcd-trip")).mode("append").save()
        assert on_etcd.describe("etcd-trip").records == 20_000
    back = spark.read.format("bkfast").options(**_opts(etcd_cluster, "etcd-trip")).load()
    assert Counter((r.key, r.value) for r in back.select("key", "value").collect()) == Counter(rows)


def _opts(cluster, stream, **extra):
    return {"metadataServiceUri": cluster.metadata_uri, "stream": stream, **extra}


def _rows(n: int, tag: str = ""):
    return [(f"k{i % 97}".encode() if i % 3 else None, f'{{"i":{i},"t":"{tag}"}}'.encode()) for i in range(n)]


def _ledgers(cluster) -> set[int]:
    with BookKeeper(cluster.metadata_uri) as bk:
        return set(bk.list_ledgers())


def _stream_ledgers(ns, name) -> set[int]:
    return {s.ledger for s in ns.describe(name).segments}


def test_hundred_thousand_rows_in_eight_partitions_round_trip_as_the_exact_multiset(spark, cluster, ns):
    ns.create_stream("roundtrip")
    rows = _rows(100_000)
    df = spark.createDataFrame(rows, "key binary, value binary").repartition(8)
    df.write.format("bkfast").options(**_opts(cluster, "roundtrip")).mode("append").save()
    md = ns.describe("roundtrip")
    assert len(md.segments) == 8 and md.records == 100_000
    back = spark.read.format("bkfast").options(**_opts(cluster, "roundtrip", maxEntriesPerPartition="1")).load()
    assert back.rdd.getNumPartitions() > 8
    got = back.select("key", "value").collect()
    assert Counter((r.key, r.value) for r in got) == Counter(rows)
    meta = back.select("stream", "segment", "entry", "slot", "position", "timestamp").collect()
    assert {r.stream for r in meta} == {"roundtrip"}
    assert len({r.position for r in meta}) == 100_000
    assert all(r.position == f"{r.segment}:{r.entry}:{r.slot}" for r in meta[:1000])
    # a range of positions: from the third segment on
    third = md.segments[2]
    part = spark.read.format("bkfast").options(**_opts(cluster, "roundtrip", startingPositions=f"{third.seq}:0:0",
                                                       endingPositions=f"{third.seq + 1}:0:0")).load()
    assert part.count() == third.records


def test_analysis_time_errors_are_one_clear_line(spark, cluster, ns):
    from pyspark.errors import PySparkException
    from pyspark.sql.utils import AnalysisException

    def fails(fn, text):
        with pytest.raises((PySparkException, AnalysisException, ValueError)) as info:
            fn()
        assert text in str(info.value)

    def reader():
        return spark.read.format("bkfast")

    fails(lambda: reader().option("stream", "x").load(), "set option metadataServiceUri")
    fails(lambda: reader().options(metadataServiceUri="embedded:///tmp/x", stream="x").load(),
          "not a ZooKeeper or etcd URI")
    fails(lambda: reader().options(metadataServiceUri=cluster.metadata_uri).load(), "set option stream")
    fails(lambda: reader().options(**_opts(cluster, "missing-stream")).load(), "does not exist")
    fails(lambda: reader().options(**_opts(cluster, "roundtrip", startingPositions="soon")).load(),
          "expected earliest, latest or a position")
    df = spark.createDataFrame([(1, "a")], "id int, name string")
    fails(lambda: df.write.format("bkfast").options(**_opts(cluster, "roundtrip")).mode("append").save(),
          "needs a 'value' column")
    df = spark.createDataFrame([(1,)], "value int")
    fails(lambda: df.write.format("bkfast").options(**_opts(cluster, "roundtrip")).mode("append").save(),
          "must be binary or string")


def test_a_read_schema_naming_some_columns_reads_just_those(spark, cluster, ns):
    ns.create_stream("narrow")
    rows = _rows(5000, "narrow")
    spark.createDataFrame(rows, "key binary, value binary").repartition(2).write.format("bkfast") \
        .options(**_opts(cluster, "narrow")).mode("append").save()
    full = spark.read.format("bkfast").options(**_opts(cluster, "narrow")).load()
    narrow = (spark.read.format("bkfast").schema("position string, value binary")
              .options(**_opts(cluster, "narrow")).load())
    assert narrow.columns == ["position", "value"]
    got = narrow.collect()
    assert Counter(r.value for r in got) == Counter(v for _, v in rows)
    assert {(r.position, r.value) for r in got} == {tuple(r) for r in full.select("position", "value").collect()}
    with pytest.raises(Exception, match="column 'value' is binary, not string"):
        spark.read.format("bkfast").schema("value string").options(**_opts(cluster, "narrow")).load().collect()


def test_a_failing_task_fails_the_job_and_leaves_no_segment_and_no_orphan_ledger(spark, cluster, ns):
    ns.create_stream("failing")
    before = _ledgers(cluster)

    def explode(index, it):
        for n, row in enumerate(it):
            if index == 5 and n == 1000:
                raise RuntimeError("boom in partition 5")
            yield row

    df = spark.createDataFrame(_rows(40_000), "key binary, value binary").repartition(8)
    bad = spark.createDataFrame(df.rdd.mapPartitionsWithIndex(explode), df.schema)
    with pytest.raises(Exception, match="boom in partition 5"):
        bad.write.format("bkfast").options(**_opts(cluster, "failing")).mode("append").save()
    assert ns.describe("failing").segments == ()
    deadline = time.monotonic() + 30
    while _ledgers(cluster) != before and time.monotonic() < deadline:   # aborts of other tasks finish
        time.sleep(0.2)
    assert _ledgers(cluster) == before


def test_a_row_no_entry_can_hold_fails_the_job_naming_the_limit_and_leaves_no_segment_or_ledger(spark, cluster, ns):
    """Issue 24: the sink refuses, before sending it, a row larger than a bookie accepts in one frame; the
    job fails with that reason instead of tasks rolling ledgers against a refusal that cannot change."""
    ns.create_stream("oversized")
    before = _ledgers(cluster)
    df = spark.createDataFrame([(None, b"small"), (None, b"V" * 6_000_000)], "key binary, value binary").coalesce(1)
    with pytest.raises(Exception, match="record .* of 6000000 bytes exceeds the largest entry a bookie accepts: "
                                        "nettyMaxFrameSizeBytes=5242880"):
        df.write.format("bkfast").options(**_opts(cluster, "oversized")).mode("append").save()
    assert ns.describe("oversized").segments == ()
    assert _ledgers(cluster) == before


def test_rows_of_uneven_sizes_are_cut_into_entries_that_each_fit_a_frame(spark, cluster, ns):
    """Entries are sized from the average row; three 2 MB rows among small ones would make one 6 MB entry
    that no bookie takes: the sink cuts that range until each entry fits."""
    ns.create_stream("uneven")
    rows = [(None, b"%d" % i) for i in range(2000)]
    rows[10:13] = [(None, bytes([65 + i]) * 2_000_000) for i in range(3)]
    df = spark.createDataFrame(rows, "key binary, value binary").coalesce(1)
    df.write.format("bkfast").options(**_opts(cluster, "uneven")).mode("append").save()
    got = spark.read.format("bkfast").options(**_opts(cluster, "uneven")).load().select("value").collect()
    assert Counter(r.value for r in got) == Counter(v for _, v in rows)


def test_job_rerun_after_a_driver_failure_before_commit_does_not_duplicate(spark, cluster, ns, tmp_path):
    """The first run's driver is SIGKILLed after every task committed its ledger and before the driver
    commit (a subclass of the source kills its own process in commit()); the re-run with the same
    writeId appends once and deletes the first run's ledgers; running the same writeId again appends
    nothing."""
    ns.create_stream("rerun")
    before = _ledgers(cluster)
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.spark.test_spark import spark_session, _rows
        from bkfast.spark.source import BkfastDataSource, BatchWriter

        class CrashingWriter(BatchWriter):
            def commit(self, messages):
                open({str(tmp_path / "tasks-done")!r}, "w").write(str(len(messages)))
                os.kill(os.getpid(), signal.SIGKILL)

        class Crashing(BkfastDataSource):
            @classmethod
            def name(cls):
                return "bkfast_crash"

            def writer(self, schema, overwrite):
                return CrashingWriter(self.opts)

        spark = spark_session("crash")
        spark.dataSource.register(Crashing)
        df = spark.createDataFrame(_rows(20_000, "run"), "key binary, value binary").repartition(4)
        df.write.format("bkfast_crash").option("metadataServiceUri", {cluster.metadata_uri!r}) \\
            .option("stream", "rerun").option("writeId", "nightly-42").mode("append").save()
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (tmp_path / "tasks-done").read_text() == "4", proc.stderr.decode()[-3000:]
    assert ns.describe("rerun").segments == ()
    df = spark.createDataFrame(_rows(20_000, "run"), "key binary, value binary").repartition(4)
    for _ in range(2):
        df.write.format("bkfast").options(**_opts(cluster, "rerun", writeId="nightly-42")).mode("append").save()
    md = ns.describe("rerun")
    assert md.records == 20_000 and len(md.segments) == 4
    back = spark.read.format("bkfast").options(**_opts(cluster, "rerun")).load().select("value").collect()
    assert sorted(r.value for r in back) == sorted(v for _k, v in _rows(20_000, "run"))
    # the crashed run's task ledgers (named by no commit) were deleted by the re-run's commit
    assert _ledgers(cluster) - before == _stream_ledgers(ns, "rerun")


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_streaming_query_reads_every_acknowledged_record_once_across_roll_and_takeover_and_resumes(
        spark, cluster, ns, tmp_path):
    ns.create_stream("live")
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")

    def start(**trigger):
        src = spark.readStream.format("bkfast").options(**_opts(cluster, "live", maxRecordsPerTrigger="3000")).load()
        return (src.select("value", "position").writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", cp).trigger(**trigger).start())

    def output_count() -> int:
        try:
            return spark.read.parquet(out).count()
        except Exception:
            return 0

    query = start(processingTime="500 milliseconds")
    w1 = ns.open_writer("live", max_batch_records=200, max_segment_records=2500, linger_ms=1)
    part1 = [f"a{i}".encode() for i in range(6000)]
    for i in range(0, 6000, 1000):              # written while the query runs: several triggers, two rolls
        w1.write_many(part1[i:i + 1000])
        time.sleep(0.2)
    w2 = ns.open_writer("live", max_batch_records=200, max_segment_records=2500, linger_ms=1)   # takeover
    with pytest.raises(StreamFencedError):
        w1.write_many([b"fenced"])
    part2 = [f"b{i}".encode() for i in range(4000)]
    w2.write_many(part2)
    _wait_for(lambda: output_count() >= 10_000, 180, "the query to catch up")
    query.stop()
    part3 = [f"c{i}".encode() for i in range(3000)]
    w2.write_many(part3)
    w2.close()
    query = start(availableNow=True)            # resumes from its checkpoint, stops at the end
    query.awaitTermination(180)
    rows = spark.read.parquet(out).collect()
    assert sorted(r.value for r in rows) == sorted(part1 + part2 + part3)
    assert len({r.position for r in rows}) == len(rows)
    assert len(ns.describe("live").segments) >= 5


def test_streaming_sink_replays_a_batch_without_duplicating_it(spark, cluster, ns, tmp_path):
    ns.create_stream("sink-src")
    ns.create_stream("sink-dst")
    with ns.open_writer("sink-src") as w:
        w.write_many([f"s{i}".encode() for i in range(5000)], [b"k"] * 5000)
    cp = str(tmp_path / "cp")
    before = _ledgers(cluster)

    def run():
        src = spark.readStream.format("bkfast").options(**_opts(cluster, "sink-src")).load()
        q = (src.select("key", "value").writeStream.format("bkfast").options(**_opts(cluster, "sink-dst"))
             .option("checkpointLocation", cp).trigger(availableNow=True).start())
        q.awaitTermination(180)

    run()
    assert ns.describe("sink-dst").records == 5000
    commits = sorted(os.listdir(os.path.join(cp, "commits")), key=lambda n: (len(n), n))
    last = [n for n in commits if n.isdigit()][-1]
    for name in (last, f".{last}.crc"):             # as if the query died after the sink's commit
        path = os.path.join(cp, "commits", name)
        if os.path.exists(path):
            os.remove(path)
    run()                                           # Spark replays that batch with the same batch id
    assert os.path.exists(os.path.join(cp, "commits", last))                  # it did run again
    md = ns.describe("sink-dst")
    assert md.records == 5000
    assert any(c.startswith("spark-stream:") for c in md.commits)
    back = spark.read.format("bkfast").options(**_opts(cluster, "sink-dst")).load().select("key", "value").collect()
    assert sorted(r.value for r in back) == sorted(f"s{i}".encode() for i in range(5000))
    assert {r.key for r in back} == {b"k"}
    assert _ledgers(cluster) - before == _stream_ledgers(ns, "sink-dst")   # the replay's ledgers were deleted


def test_truncate_on_commit_deletes_consumed_segments_and_nothing_after(spark, cluster, ns, tmp_path):
    ns.create_stream("trunc")
    values = [f"t{i}".encode() for i in range(3500)]
    w = ns.open_writer("trunc", max_batch_records=100, max_segment_records=1000, linger_ms=1)
    w.write_many(values)                        # three sealed segments of 1,000 and an open one
    sealed = [s.ledger for s in ns.describe("trunc").segments][:3]
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")
    src = spark.readStream.format("bkfast").options(
        **_opts(cluster, "trunc", truncateOnCommit="true", maxRecordsPerTrigger="1000")).load()
    q = (src.select("value").writeStream.format("parquet").option("path", out).option("checkpointLocation", cp)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert sorted(r.value for r in spark.read.parquet(out).collect()) == sorted(values)
    md = ns.describe("trunc")
    left = [s.ledger for s in md.segments]
    gone = [ledger for ledger in sealed if ledger not in left]
    assert gone == sealed[:len(gone)] and len(gone) >= 2, (sealed, left)   # consumed, oldest first
    assert not set(gone) & _ledgers(cluster)                               # their ledgers deleted
    w.write_many([b"after"])                    # the stream goes on after the cut
    w.close()
    rest = spark.read.format("bkfast").options(**_opts(cluster, "trunc")).load().select("segment", "entry", "slot",
                                                                                      "value").collect()
    kept = [r.value for r in sorted(rest, key=lambda r: (r.segment, r.entry, r.slot))]
    cut = len(values) + 1 - len(kept)
    assert cut >= 1000 * len(gone) and kept == values[cut:] + [b"after"]    # a suffix: nothing after the cut lost


# --- the workers' interpreter (issue 30 point 5) ----------------------------------------------------------


def _python_without_bkfast_deps(tmp_path) -> str:
    """An interpreter that finds bkfast (the checkout) but none of its dependencies, as `python3` from PATH
    does when a job was started from a virtualenv's python without PYSPARK_PYTHON: this Python with -S (no
    site-packages), run from the checkout."""

    repo = REPO
    wrapper = tmp_path / "python-without-deps"
    wrapper.write_text(f"#!/bin/sh\ncd {repo} && exec {sys.executable} -S \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_worker_on_the_wrong_python_fails_in_one_line_naming_it_and_the_fix(tmp_path):
    python = _python_without_bkfast_deps(tmp_path)
    result = subprocess.run([python, "-c", "import bkfast.spark"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bkfast.errors.WorkerPythonError: bkfast.spark: "), result.stderr[-2000:]
    assert "cannot import twisted, kazoo" in last and "PYSPARK_PYTHON" in last and sys.executable in last


def test_register_checks_the_workers_python_on_a_local_master(spark, tmp_path):
    import bkfast.spark
    from bkfast.spark import BkfastSparkError

    python = _python_without_bkfast_deps(tmp_path)
    sc = spark.sparkContext
    saved = sc.pythonExec
    sc.pythonExec = python
    try:
        with pytest.raises(BkfastSparkError) as info:
            bkfast.spark.register(spark)
    finally:
        sc.pythonExec = saved
    message = str(info.value)
    assert "\n" not in message
    assert python in message and "cannot import bkfast.spark" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message
    bkfast.spark.register(spark)                # the right interpreter passes
