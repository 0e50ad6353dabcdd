"""What runs in Spark's Python workers: one cached client per process, reading a partition as Arrow
batches, writing a task's rows into its own new ledger.

Python workers are reused across tasks (`spark.python.worker.reuse`, on by default), so each process
connects once per metadata URI + client settings and keeps the connection (the reactor runs in a
crochet thread). A write task's ledger is tagged in its custom metadata (`bkfast.stream`,
`bkfast.write`, `bkfast.task`) and deleted by the task itself if the task fails; the driver's
commit appends it to the stream, the driver's abort deletes it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition, WriterCommitMessage

from bkfast.streams.batch import DecodedBatch

__all__ = ["client", "namespace", "SegmentRange", "TaskSegment", "read_partition", "write_task"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_clients: dict = {}
_ROWS_PER_BATCH = 65536
_ENTRIES_PER_READ = 256
_ENTRIES_PER_WRITE = 64


def client(opts):
    """The process's blocking BookKeeper client for these options."""
    from bkfast.client.blocking import BookKeeper

    key = (opts.metadata_uri, tuple(sorted(opts.client_conf.items())))
    with _lock:
        bk = _clients.get(key)
        if bk is None:
            bk = _clients[key] = BookKeeper(opts.metadata_uri, timeout=120, **opts.client_conf)
            # A reused Python worker runs gc.collect() after every task (pyspark.daemon); with the client's
            # modules loaded, each full collection walked all their objects (about 0.1 s per task,
            # profiled). They live as long as the process: move them out of the collector's reach.
            gc.freeze()
        return bk


def namespace(opts):
    from bkfast.streams.blocking import Namespace

    return Namespace(bk=client(opts), timeout=120)


class SegmentRange(InputPartition):
    """Entries [first_entry, last_entry] of one segment; records before `first_slot` in the first entry
    and from `end_slot` on in the last entry (-1: none) are not part of it."""

    columns = None      # the read schema's column names when it is narrower than the source's (see source.py)

    def __init__(self, stream, seq, ledger, scope, first_entry, last_entry, first_slot=0, end_slot=-1):
        super().__init__((stream, seq, first_entry))
        self.stream, self.seq, self.ledger, self.scope = stream, seq, ledger, scope
        self.first_entry, self.last_entry = first_entry, last_entry
        self.first_slot, self.end_slot = first_slot, end_slot

    def __repr__(self) -> str:
        return f"SegmentRange({self.stream} seg {self.seq} entries {self.first_entry}..{self.last_entry})"


def _read_range(lh, first: int, last: int):
    """Start reading entries [first, last] in the reactor thread; .wait() gives them."""
    from bkfast.reactor import submit

    handle = lh.async_handle
    if last <= lh.last_add_confirmed:
        return submit(handle.read_entries, first, last)
    return submit(handle.read_unconfirmed_entries, first, last)  # planned from a LAC this handle has not seen


def read_partition(opts, p: SegmentRange):
    """Yield pyarrow RecordBatches of the partition's records, in order.

    The next range of entries is read while this one is turned into Arrow arrays: the bookies' answers
    arrive in the reactor thread meanwhile, so the worker never waits for the network between ranges."""
    from .arrow_io import entry_arrays, to_record_batches

    bk = client(opts)
    lh = bk.open_ledger(p.ledger, opts.password, recovery=False, scope_id=p.scope)
    parts, rows = [], 0
    first = p.first_entry
    last = min(p.last_entry, first + _ENTRIES_PER_READ - 1)
    in_flight = _read_range(lh, first, last) if first <= p.last_entry else None
    while in_flight is not None:
        entries = in_flight.wait(120)
        first = last + 1
        if first <= p.last_entry:
            last = min(p.last_entry, first + _ENTRIES_PER_READ - 1)
            in_flight = _read_range(lh, first, last)
        else:
            in_flight = None
        for e in entries:
            batch = DecodedBatch(e.data)
            lo = p.first_slot if e.entry_id == p.first_entry else 0
            hi = p.end_slot if e.entry_id == p.last_entry and p.end_slot >= 0 else batch.count
            hi = min(hi, batch.count)
            if hi <= lo:
                continue
            parts.append((e.entry_id, *entry_arrays(batch, lo, hi)))
            rows += hi - lo
            if rows >= _ROWS_PER_BATCH:
                yield from to_record_batches(p.stream, p.seq, parts, p.columns)
                parts, rows = [], 0
    if parts:
        yield from to_record_batches(p.stream, p.seq, parts, p.columns)


@dataclass
class TaskSegment(WriterCommitMessage):
    """A task's ledger, closed, ready to become a sealed segment."""

    partition: int
    attempt: int
    ledger: int
    scope: int
    last_entry: int
    records: int
    bytes: int
    first_ts: int
    last_ts: int


def write_task(opts, write_id: str, batches) -> TaskSegment:
    """Write the task's Arrow batches into one new ledger, close it, and describe it."""
    from pyspark import TaskContext

    from .arrow_io import encode_arrow

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    bk = client(opts)
    lh = bk.create_ledger(opts.ensemble_size, opts.write_quorum, opts.ack_quorum, password=opts.password,
                          custom_metadata={"bkfast.stream": opts.stream, "bkfast.write": write_id,
                                           "bkfast.task": f"{partition}.{attempt}"})
    records, first_ts, last_ts = 0, 0, 0
    in_flight = None
    max_frame = bk.async_client.bookie_client.max_frame_size
    try:
        pending: list[bytes] = []
        for rb in batches:
            ts = int(time.time() * 1000)
            for payload, m in encode_arrow(rb, ts, records, max_frame_size=max_frame):
                pending.append(payload)
                records += m
                first_ts = first_ts or ts
                last_ts = ts
                if len(pending) >= _ENTRIES_PER_WRITE:
                    in_flight = _submit(lh, pending, in_flight)
                    pending = []
        if pending:
            in_flight = _submit(lh, pending, in_flight)
        if in_flight is not None:
            in_flight.wait(120)
        lh.close()
    except BaseException:
        discard_ledgers(bk, [(lh.ledger_id, lh.scope_id)])
        raise
    return TaskSegment(partition, attempt, lh.ledger_id, lh.scope_id, lh.last_add_confirmed, records, lh.length,
                       first_ts, last_ts)


def _submit(lh, payloads: list[bytes], previous):
    """Push all of `payloads` now (in order, so entry ids follow record order), then wait for the
    previous chunk: one chunk is always in flight while the next one is encoded."""
    from bkfast.client.blocking import pipelined_adds
    from bkfast.reactor import submit

    current = submit(pipelined_adds, lh.async_handle, payloads, len(payloads))
    if previous is not None:
        previous.wait(120)
    return current


def discard_ledgers(bk, ledgers) -> None:
    for ledger_id, scope in ledgers:
        try:
            bk.delete_ledger(ledger_id, scope)
        except Exception as e:                  # already gone, or the store is away: say so, go on
            log.warning("bkfast: could not delete ledger %s: %s", ledger_id, e)
