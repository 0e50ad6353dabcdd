"""Spark ingest job into a bkfast log stream, and the read back.

Generates N rows (default 1,000,000) with a few columns, serializes each row to JSON as `value` (its id
as `key`), appends them to a stream with one Spark job (one ledger per task, all committed in one
metadata CAS), reads the stream back, and checks the row count and an order-independent checksum
(the XOR of xxhash64 of every value), printing rows/s both ways.

    bkfast sandbox --zk --data-dir /tmp/bk-sandbox &          # ZooKeeper + 3 bookies
    python examples/spark_ingest.py --sandbox-dir /tmp/bk-sandbox
    python examples/spark_ingest.py --metadata-uri zk+hierarchical://127.0.0.1:2181/ledgers --rows 100000

On a cluster whose executors have bkfast installed (`pip install "bkfast[spark]"`), the same job runs
with `spark-submit --master <master> examples/spark_ingest.py --metadata-uri zk+hierarchical://zk:2181/ledgers`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--metadata-uri", help="zk+hierarchical://host:port/ledgers")
    p.add_argument("--sandbox-dir", help="a `bkfast sandbox --zk --data-dir DIR` directory (reads sandbox.json)")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--stream", default=f"ingest-{int(time.time())}")
    p.add_argument("--master", default=None, help="default: local[2] unless run by spark-submit")
    args = p.parse_args(argv)
    uri = args.metadata_uri
    if uri is None and args.sandbox_dir:
        uri = json.loads((Path(args.sandbox_dir) / "sandbox.json").read_text())["metadata_uri"]
    if not uri or not uri.startswith("zk"):
        p.error("give --metadata-uri zk+... or --sandbox-dir of a `bkfast sandbox --zk` (executors need ZooKeeper)")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import bkfast.spark

    builder = SparkSession.builder.appName("bkfast-ingest").config("spark.ui.showConsoleProgress", "false")
    if args.master or "PYSPARK_GATEWAY_PORT" not in os.environ:      # spark-submit sets the master itself
        builder = builder.master(args.master or "local[2]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    bkfast.spark.register(spark)
    opts = {"metadataServiceUri": uri, "stream": args.stream}

    rows = (spark.range(args.rows, numPartitions=args.partitions)
            .select(F.col("id"), (F.col("id") % 1000).alias("customer"),
                    (F.col("id") * 7 % 10007 / 100).alias("amount"), F.lit("2026-11-26").alias("day")))
    df = rows.select(F.col("id").cast("string").cast("binary").alias("key"),
                     F.to_json(F.struct("id", "customer", "amount", "day")).cast("binary").alias("value")).cache()
    expected = df.agg(F.count("*").alias("n"), F.bit_xor(F.xxhash64("value")).alias("x")).first()

    started = time.perf_counter()
    df.write.format("bkfast").options(**opts, createStream="true").mode("append").save()
    write_s = time.perf_counter() - started

    started = time.perf_counter()
    back = spark.read.format("bkfast").options(**opts).load()
    got = back.agg(F.count("*").alias("n"), F.bit_xor(F.xxhash64("value")).alias("x")).first()
    read_s = time.perf_counter() - started

    ok = (got.n, got.x) == (expected.n, expected.x)
    print(f"stream {args.stream}: wrote {args.rows:,} rows in {write_s:.1f} s ({args.rows / write_s:,.0f} rows/s), "
          f"read {got.n:,} in {read_s:.1f} s ({got.n / read_s:,.0f} rows/s); "
          f"checksum {got.x:#x} {'matches' if ok else 'DIFFERS from ' + hex(expected.x)}")
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
