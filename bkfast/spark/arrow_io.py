"""Record batches <-> Arrow, without touching rows one by one (executor side of the Spark source).

Reading: a stream entry's batch sections already have Arrow's layout (int32 offsets + data, LSB
validity bitmap, int64 timestamps), so the `value`, `key` and `timestamp` columns are built with
`pa.Array.from_buffers` over the entry payload; the constant and positional columns (`stream`,
`segment`, `entry`, `slot`, `position`) come from Arrow kernels. Writing: a task's Arrow `value` /
`key` columns are cut into entry-sized row ranges and packed with `encode_sections` from their buffers;
a range is halved until its entry fits in a frame (rows of uneven sizes), and a row that cannot fit
even alone fails the task with EntryTooLargeError (no add is sent: a retry could not do better).
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

from bkfast.streams.batch import DecodedBatch, encode_sections, encoded_size
from bkfast.streams.limits import max_batch_payload, record_error

__all__ = ["entry_arrays", "to_record_batches", "encode_arrow", "SPARK_ARROW_SCHEMA"]

_TS = pa.timestamp("us", tz="UTC")
SPARK_ARROW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("stream", pa.string()),
                                ("segment", pa.int64()), ("entry", pa.int64()), ("slot", pa.int32()),
                                ("position", pa.string()), ("timestamp", _TS)])
_SLOTS = pa.array(range(1 << 17), pa.int32())


def entry_arrays(batch: DecodedBatch, first: int, end: int):
    """(key, value, timestamp ms, slot) arrays of records [first, end) of one decoded batch."""
    n = batch.count
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(batch.value_offsets()),
                                                    pa.py_buffer(batch.value_data())])
    if batch.has_keys:
        keys = pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(batch.key_bitmap()),
                                                      pa.py_buffer(batch.key_offsets()),
                                                      pa.py_buffer(batch.key_data())], null_count=-1)
    else:
        keys = pa.nulls(n, pa.binary())
    ts = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(batch.timestamps())])
    count = end - first
    slots = _SLOTS.slice(first, count) if end <= len(_SLOTS) else pa.array(range(first, end), pa.int32())
    return keys.slice(first, count), values.slice(first, count), ts.slice(first, count), slots


def to_record_batches(stream: str, segment: int, parts: list, columns=None) -> list[pa.RecordBatch]:
    """Spark batches of `parts`: a list of (entry id, key, value, ts ms, slot) arrays of one segment,
    with `columns` (names of SPARK_ARROW_SCHEMA, in the order wanted; None: all). Only those are built.

    The value column is never copied: each entry's values stay the Arrow view over its payload, and the
    batches are cut at entry boundaries (one per entry). Concatenating them into one big array costs a
    copy of every value byte (plus first-touch page faults on the new buffer), which profiling showed to
    be most of a read task's Python time for 1 KiB values. The small per-row columns are built once for
    all parts and sliced by Arrow."""
    columns = SPARK_ARROW_SCHEMA.names if columns is None else list(columns)
    n = sum(len(p[2]) for p in parts)
    built: dict[str, object] = {}

    def column(name: str):
        if name in built:
            return built[name]
        if name == "key":
            a = pa.chunked_array([p[1] for p in parts], pa.binary())
        elif name == "value":
            a = pa.chunked_array([p[2] for p in parts], pa.binary())
        elif name == "stream":
            a = pa.nulls(n, pa.string()).fill_null(stream)
        elif name == "segment":
            a = pa.nulls(n, pa.int64()).fill_null(segment)
        elif name == "entry":
            a = pa.concat_arrays([pa.nulls(len(p[2]), pa.int64()).fill_null(p[0]) for p in parts])
        elif name == "slot":
            a = pa.concat_arrays([p[4] for p in parts])
        elif name == "position":
            a = pc.binary_join_element_wise(pc.cast(column("segment"), pa.string()),
                                            pc.cast(column("entry"), pa.string()),
                                            pc.cast(column("slot"), pa.string()), ":")
        else:  # timestamp
            ts = pa.concat_arrays([p[3] for p in parts])
            a = pc.multiply(ts, 1000).cast(pa.timestamp("us")).cast(_TS)
        built[name] = a
        return a

    schema = pa.schema([SPARK_ARROW_SCHEMA.field(name) for name in columns])
    return pa.Table.from_arrays([column(name) for name in columns], schema=schema).to_batches()


def _binary(col, what: str) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = pa.concat_arrays(col.chunks)
    if pa.types.is_string(col.type) or pa.types.is_binary(col.type):
        return col.cast(pa.binary())
    if pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type):
        return col.cast(pa.binary())
    raise TypeError(f"bkfast: the {what} column must be binary or string, not {col.type}")


def _fitting_rows(vlen: pa.Array, klen: pa.Array | None, a: int, m: int, limit: int, max_frame_size: int,
                  base_index: int) -> int:
    """How many of rows [a, a + m) (at most m, at least 1) make an entry of at most `limit` bytes."""
    while True:
        vbytes = pc.sum(vlen.slice(a, m)).as_py() or 0
        kbytes = (pc.sum(klen.slice(a, m)).as_py() or 0) if klen is not None else 0
        if encoded_size(m, vbytes, kbytes, klen is not None) <= limit:
            return m
        if m == 1:
            error = record_error(vbytes, kbytes if klen is not None else None, max_frame_size,
                                 f"record (row {base_index + a} of the task)")
            assert error is not None, "one record that does not fit: record_error says so"
            raise error
        m //= 2


def encode_arrow(rb: pa.RecordBatch, ts_ms: int, base_index: int, max_batch_bytes: int = 256 * 1024,
                 max_batch_records: int = 10000, max_frame_size: int = 5 * 1024 * 1024):
    """Yield (payload, records) entry payloads for the rows of `rb` (its `value` and optional `key`
    columns); `base_index` is the number of records already in the segment. Each payload fits in a
    frame of `max_frame_size` bytes (the client's nettyMaxFrameSizeBytes)."""
    names = rb.schema.names
    values = _binary(rb.column(names.index("value")), "value")
    keys = _binary(rb.column(names.index("key")), "key") if "key" in names else None
    if values.null_count:
        raise ValueError("bkfast: the value column has nulls; every record needs a value")
    n = len(values)
    if n == 0:
        return
    avg = max(1, (values.nbytes // n)) + 12 + (keys.nbytes // n if keys is not None else 0)
    step = max(1, min(max_batch_records, max_batch_bytes // avg))
    ts_one = struct.pack("<q", ts_ms)
    limit = max_batch_payload(max_frame_size)
    vlen = pc.binary_length(values).cast(pa.int64())
    klen = pc.binary_length(keys).fill_null(0).cast(pa.int64()) if keys is not None else None
    a = 0
    while a < n:
        m = _fitting_rows(vlen, klen, a, min(step, n - a), limit, max_frame_size, base_index)
        v = pa.concat_arrays([values.slice(a, m)])              # offset 0, own buffers
        vo = pa.Array.from_buffers(pa.int32(), m + 1, [None, v.buffers()[1]])
        start, stop = vo[0].as_py(), vo[m].as_py()
        if start:
            vo = pc.subtract(vo, pa.scalar(start, pa.int32()))
        voff = vo.buffers()[1].to_pybytes()[:4 * (m + 1)]
        vdata = v.buffers()[2].to_pybytes()[start:stop] if v.buffers()[2] is not None else b""
        key_parts = None
        ks = keys.slice(a, m) if keys is not None else None
        if ks is not None and ks.null_count < m:
            k = pa.concat_arrays([ks])
            ko = pa.Array.from_buffers(pa.int32(), m + 1, [None, k.buffers()[1]])
            kstart, kstop = ko[0].as_py(), ko[m].as_py()
            if kstart:
                ko = pc.subtract(ko, pa.scalar(kstart, pa.int32()))
            bitmap = (k.buffers()[0].to_pybytes()[:(m + 7) >> 3] if k.buffers()[0] is not None
                      else b"\xff" * ((m + 7) >> 3))
            kdata = k.buffers()[2].to_pybytes()[kstart:kstop] if k.buffers()[2] is not None else b""
            key_parts = (bitmap, ko.buffers()[1].to_pybytes()[:4 * (m + 1)], kdata)
        yield encode_sections(m, ts_one * m, voff, vdata, key_parts, base_index + a), m
        a += m
