"""The blocking face of named log streams, for scripts, the CLI and Spark executors.

    from bkfast.streams import Namespace, EARLIEST
    with Namespace("zk+hierarchical://127.0.0.1:2181/ledgers") as ns:
        ns.create_stream("events")
        with ns.open_writer("events") as w:
            w.write(b"hello").wait()          # a future: .wait() gives the DLSN
            w.write_many([b"a", b"b"])        # blocks; returns the last record's DLSN
        for record in ns.open_reader("events", EARLIEST).tail(stop_at_end=True):
            print(record.position, record.value)

Same names and semantics as `AsyncNamespace` / the async writer and reader; the reactor runs in a
background thread (bkfast.reactor.start_reactor_thread), so any thread may call these.
"""

from __future__ import annotations

from collections.abc import Iterator

from bkfast.client.blocking import DEFAULT_TIMEOUT_S, ClosedOnExit, call_in_reactor
from bkfast.reactor import start_reactor_thread, submit

from .position import EARLIEST

__all__ = ["Namespace", "StreamWriter", "StreamReader"]


class StreamWriter(ClosedOnExit):
    def __init__(self, writer, timeout: float):
        self._w = writer
        self._timeout = timeout

    @property
    def async_writer(self):
        return self._w

    @property
    def epoch(self) -> int:
        return self._w.epoch

    def write(self, value, key=None, timestamp: int | None = None):
        """Start appending one record; returns a future (a bkfast.reactor.Pending: `.wait(timeout)` -> DLSN)."""
        return submit(self._w.write, value, key, timestamp)

    def write_many(self, values, keys=None, timestamps=None):
        """Append many records and wait; returns the DLSN of the last one."""
        return call_in_reactor(self._timeout, self._w.write_many, list(values), keys, timestamps)

    def flush(self):
        return call_in_reactor(self._timeout, self._w.flush)

    def close(self) -> None:
        call_in_reactor(self._timeout, self._w.close)


class StreamReader(ClosedOnExit):
    def __init__(self, reader, timeout: float):
        self._r = reader
        self._timeout = timeout

    @property
    def position(self):
        """The DLSN of the next record (save it; `open_reader(name, start=position)` resumes there)."""
        return self._r.position

    def read(self, max_records: int = 1000, timeout_ms: int = 0) -> list:
        return call_in_reactor(self._timeout + timeout_ms / 1000.0, self._r.read, max_records, timeout_ms)

    def read_entries(self, max_entries: int | None = None, timeout_ms: int = 0) -> list:
        return call_in_reactor(self._timeout + timeout_ms / 1000.0, self._r.read_entries, max_entries, timeout_ms)

    def tail(self, poll_ms: int = 1000, stop_at_end: bool = False) -> Iterator:
        """Yield records as they arrive; with `stop_at_end`, stop at the first moment nothing is left."""
        while True:
            records = self.read(10000, 0 if stop_at_end else poll_ms)
            if not records and stop_at_end:
                return
            yield from records

    def close(self) -> None:
        call_in_reactor(self._timeout, self._r.close)


class Namespace(ClosedOnExit):
    """Blocking namespace: ``Namespace(metadata_uri, **client conf)``, or ``Namespace(bk=BookKeeper(...))``."""

    def __init__(self, metadata_uri: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, bk=None, **conf):
        from .namespace import AsyncNamespace

        start_reactor_thread()
        self._timeout = timeout
        if bk is not None:
            self._ns = AsyncNamespace(bk.async_client)
        else:
            self._ns = call_in_reactor(timeout, AsyncNamespace.connect, metadata_uri, None, **conf)

    @property
    def async_namespace(self):
        return self._ns

    def _call(self, fn, *args, **kwargs):
        return call_in_reactor(self._timeout, fn, *args, **kwargs)

    def create_stream(self, name: str, retention_ms: int = 0, retention_bytes: int = 0, properties=None):
        return self._call(self._ns.create_stream, name, retention_ms, retention_bytes, properties)

    def list_streams(self) -> list[str]:
        return self._call(self._ns.list_streams)

    def describe(self, name: str):
        return self._call(self._ns.describe, name)

    def delete_stream(self, name: str) -> None:
        self._call(self._ns.delete_stream, name)

    def set_retention(self, name: str, retention_ms=None, retention_bytes=None):
        return self._call(self._ns.set_retention, name, retention_ms, retention_bytes)

    def truncate(self, name: str, before=None, retention: bool = False):
        return self._call(self._ns.truncate, name, before, retention)

    def append_segments(self, name: str, segments, commit_key: str = ""):
        return self._call(self._ns.append_segments, name, segments, commit_key)

    def end_position(self, name: str, password: bytes = b""):
        return self._call(self._ns.end_position, name, password)

    def check_records(self, values, keys=None) -> None:
        """Raise EntryTooLargeError for the first record no stream entry can hold (before any writer)."""
        self._ns.check_records(values, keys)

    def open_writer(self, name: str, **options) -> StreamWriter:
        return StreamWriter(self._call(self._ns.open_writer, name, **options), self._timeout)

    def open_reader(self, name: str, start=EARLIEST, password: bytes = b"", **options) -> StreamReader:
        return StreamReader(self._call(self._ns.open_reader, name, start, password, **options), self._timeout)

    def close(self) -> None:
        self._call(self._ns.close)
