"""The "bkfast" PySpark data source: batch and Structured Streaming reads and writes of log streams.

    bkfast.spark.register(spark)
    df = spark.read.format("bkfast").option("metadataServiceUri", uri).option("stream", "events").load()
    df.write.format("bkfast").option("metadataServiceUri", uri).option("stream", "events").mode("append").save()

Schema (the Kafka source's, with a stream position): key binary, value binary, stream string,
segment long, entry long, slot int, position string, timestamp timestamp. A read may name fewer of
them, in any order: `spark.read.format("bkfast").schema("value binary")` builds only `value` (Python
data sources get no column pruning from Spark; this is the way to ask for less).

Reads yield Arrow record batches (`arrow_io.py`). Writes: each task writes its rows into its own new
ledger and returns it; the driver's commit appends every task's segment to the stream in ONE metadata
CAS, keyed by the write's identity (`writeId` option, else one per job; per micro-batch for streaming:
checkpoint location or `writeId` + batch id), so a retried commit or a replayed micro-batch is never
appended twice. Abort deletes the task ledgers. Option mistakes raise BkfastSparkError at analysis.
"""

from __future__ import annotations

import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from bkfast.errors import NoSuchStreamError

from .options import COLUMNS, SCHEMA, BkfastSparkError, parse_options, projected_columns
from .plan import abort_segments, begin_write, commit_segments, end_write, extents, limit_end, plan_partitions, resolve
from .tasks import namespace, read_partition, write_task

__all__ = ["BkfastDataSource"]


def _describe(opts, create: bool = False):
    ns = namespace(opts)
    try:
        return ns.describe(opts.stream)
    except NoSuchStreamError:
        if create:
            ns.create_stream(opts.stream)
            return ns.describe(opts.stream)
        raise BkfastSparkError(f"bkfast: stream {opts.stream!r} does not exist at {opts.metadata_uri} (create it "
                               "with `bkfast stream create`, or set option createStream=true when writing)") from None


def _check_write_schema(schema) -> None:
    fields = {f.name: f.dataType.typeName() for f in schema.fields}
    if "value" not in fields:
        raise BkfastSparkError(f"bkfast: the DataFrame needs a 'value' column (binary or string); it has "
                               f"{sorted(fields)}")
    for col in ("value", "key"):
        if col in fields and fields[col] not in ("binary", "string"):
            raise BkfastSparkError(f"bkfast: column {col!r} must be binary or string, not {fields[col]} "
                                   f"(cast it, or serialize with to_json)")


def _columns(schema):
    """None for the source's own schema, else the user's column names (checked at analysis)."""
    columns = projected_columns(schema)
    return None if columns == COLUMNS else columns


def _with_columns(partitions, columns):
    for p in partitions:
        p.columns = columns
    return partitions


class BkfastDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bkfast"

    def __init__(self, options):
        super().__init__(options)
        self.opts = parse_options(options)

    def schema(self):
        # Spark asks for the schema when load() is analysed: the moment to say that the stream is missing.
        if not self.opts.create_stream:
            _describe(self.opts)
        return SCHEMA

    def reader(self, schema):
        return BatchReader(self.opts, _columns(schema))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise BkfastSparkError("bkfast: streams are append-only; use mode('append')")
        _check_write_schema(schema)
        _describe(self.opts, create=self.opts.create_stream)
        return BatchWriter(self.opts)

    def streamReader(self, schema):
        return StreamReader(self.opts, _columns(schema))

    def streamWriter(self, schema, overwrite: bool):
        _check_write_schema(schema)
        _describe(self.opts, create=self.opts.create_stream)
        return StreamWriter(self.opts)


class BatchReader(DataSourceReader):
    def __init__(self, opts, columns=None):
        self.opts = opts
        self.columns = columns
        md = _describe(opts)
        self._ext = extents(opts, md)
        self._md = md
        self.start = resolve(opts, md, opts.starting, self._ext)
        self.end = resolve(opts, md, opts.ending, self._ext)

    def partitions(self):
        return _with_columns(plan_partitions(self.opts, self._md, self.start, self.end, self._ext) or [], self.columns)

    def read(self, partition):
        return read_partition(self.opts, partition)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts):
        self.opts = opts
        self.write_id = opts.write_id or f"job-{uuid.uuid4().hex}"
        begin_write(opts, self.write_id)

    def write(self, iterator):
        return write_task(self.opts, self.write_id, iterator)

    def commit(self, messages):
        commit_segments(self.opts, messages, f"spark:{self.write_id}", f"spark:{self.write_id}")
        end_write(self.opts, self.write_id)

    def abort(self, messages):
        abort_segments(self.opts, messages)
        end_write(self.opts, self.write_id)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts):
        self.opts = opts
        self.identity = opts.write_id or opts.checkpoint
        if not self.identity:
            raise BkfastSparkError("bkfast: a streaming write needs option checkpointLocation (or writeId) so a "
                                   "replayed micro-batch is recognised")

    def write(self, iterator):
        return write_task(self.opts, self.identity, iterator)

    def commit(self, messages, batchId):
        key = f"spark-stream:{self.identity}:{batchId}"
        commit_segments(self.opts, messages, key, f"spark-stream:{batchId}")

    def abort(self, messages, batchId):
        abort_segments(self.opts, messages)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"position": "segment:entry:slot"} (the next record to read)."""

    def __init__(self, opts, columns=None):
        self.opts = opts
        self.columns = columns
        _describe(opts)
        self._available_now_end = None

    def _state(self):
        md = namespace(self.opts).describe(self.opts.stream)
        return md, extents(self.opts, md)

    def initialOffset(self):
        md, ext = self._state()
        return {"position": str(resolve(self.opts, md, self.opts.starting, ext))}

    def getDefaultReadLimit(self):
        if self.opts.max_records_per_trigger:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self):
        md, ext = self._state()
        self._available_now_end = resolve(self.opts, md, "latest", ext)

    def latestOffset(self, start=None, limit=None):
        from bkfast.streams.position import DLSN

        md, ext = self._state()
        end = resolve(self.opts, md, "latest", ext)
        if self._available_now_end is not None:
            end = min(end, self._available_now_end)
        if start is None:
            return {"position": str(end)}
        begin = DLSN.parse(start["position"])
        if end <= begin:
            return start
        if limit is None:
            limit = self.getDefaultReadLimit()
        if isinstance(limit, ReadMaxRows):
            end = limit_end(self.opts, md, begin, end, limit.max_rows, ext)
        return {"position": str(end)}

    def reportLatestOffset(self):
        md, ext = self._state()
        return {"position": str(resolve(self.opts, md, "latest", ext))}

    def partitions(self, start, end):
        from bkfast.streams.position import DLSN

        md, ext = self._state()
        return _with_columns(plan_partitions(self.opts, md, DLSN.parse(start["position"]),
                                             DLSN.parse(end["position"]), ext), self.columns)

    def read(self, partition):
        return read_partition(self.opts, partition)

    def commit(self, end):
        if self.opts.truncate_on_commit:
            namespace(self.opts).truncate(self.opts.stream, end["position"])
