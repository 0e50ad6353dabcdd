"""The Spark source's Arrow building, without Spark: read batches keep each entry's values where they
arrived (no copy), cut at entry boundaries, build only the columns asked for, in that order; and the
read schema a user gives is checked against the source's columns."""

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from bkfast.spark.arrow_io import SPARK_ARROW_SCHEMA, entry_arrays, to_record_batches
from bkfast.spark.options import COLUMNS, BkfastSparkError, projected_columns
from bkfast.streams.batch import DecodedBatch, encode_batch


def _entries():
    """Two stream entries (ids 5 and 6) of 3 and 2 records; the second has keys."""
    first = encode_batch([b"a" * 10, b"bb", b"ccc"], None, [1000, 1001, 1002], 0)
    second = encode_batch([b"dddd", b"e"], [b"k1", None], [2000, 2001], 3)
    return [(5, first), (6, second)]


def _parts(entries):
    return [(entry_id, *entry_arrays(DecodedBatch(payload), 0, DecodedBatch(payload).count))
            for entry_id, payload in entries]


def _within(buffer: pa.Buffer, payload: bytes) -> bool:
    start = pa.py_buffer(payload).address
    return start <= buffer.address and buffer.address + buffer.size <= start + len(payload)


def test_values_stay_in_their_entry_payloads_and_batches_are_cut_at_entries():
    entries = _entries()
    batches = to_record_batches("s", 7, _parts(entries))
    assert [b.num_rows for b in batches] == [3, 2]
    for batch, (_, payload) in zip(batches, entries, strict=True):
        assert batch.schema == SPARK_ARROW_SCHEMA
        assert _within(batch.column("value").buffers()[2], payload), "the value bytes were copied"
    table = pa.Table.from_batches(batches)
    assert table.column("value").to_pylist() == [b"a" * 10, b"bb", b"ccc", b"dddd", b"e"]
    assert table.column("key").to_pylist() == [None, None, None, b"k1", None]
    assert table.column("position").to_pylist() == ["7:5:0", "7:5:1", "7:5:2", "7:6:0", "7:6:1"]
    assert table.column("stream").to_pylist() == ["s"] * 5
    assert table.column("slot").to_pylist() == [0, 1, 2, 0, 1]
    assert [t.timestamp() for t in table.column("timestamp").to_pylist()] == [1.0, 1.001, 1.002, 2.0, 2.001]


def test_only_the_columns_asked_for_are_built_in_the_order_asked():
    batches = to_record_batches("s", 7, _parts(_entries()), ["position", "value"])
    table = pa.Table.from_batches(batches)
    assert table.schema.names == ["position", "value"]
    assert table.column("position").to_pylist()[-1] == "7:6:1"
    assert table.column("value").to_pylist()[0] == b"a" * 10


def test_a_read_schema_is_checked_against_the_source_columns():
    def schema(*fields):
        return StructType([StructField(name, t) for name, t in fields])

    assert projected_columns(schema(("value", BinaryType()))) == ("value",)
    assert projected_columns(schema(("slot", IntegerType()), ("segment", LongType()))) == ("slot", "segment")
    with pytest.raises(BkfastSparkError, match="column 'value' is binary, not string"):
        projected_columns(schema(("value", StringType())))
    with pytest.raises(BkfastSparkError, match="a column 'offset', which the source does not have"):
        projected_columns(schema(("offset", LongType())))
    with pytest.raises(BkfastSparkError, match="names a column twice"):
        projected_columns(schema(("value", BinaryType()), ("value", BinaryType())))
    assert COLUMNS == tuple(SPARK_ARROW_SCHEMA.names)
