"""AsyncNamespace: the named log streams of one cluster (DistributedLog's namespace), Twisted API.

    ns = yield AsyncNamespace.connect("zk+hierarchical://127.0.0.1:2181/ledgers")
    yield ns.create_stream("events", retention_ms=7 * 86400_000)
    w = yield ns.open_writer("events")
    pos = yield w.write(b"hello", key=b"k")
    r = yield ns.open_reader("events", start=EARLIEST)
    records = yield r.read(100, timeout_ms=1000)

Owns stream lifecycle (create, list, describe, delete with its ledgers), truncation, and the one-CAS
append of sealed segments written elsewhere (Spark tasks), which is idempotent per commit identity.
Opens writers (`writer.py`) and readers (`reader.py`). Every method must be called in the reactor
thread; `bkfast.streams.blocking.Namespace` is the blocking face.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from bkfast.client.bookkeeper import AsyncBookKeeper
from bkfast.errors import StreamError
from bkfast.meta.streams import Segment, StreamMetadata, check_stream_name

from .limits import check_records
from .meta_ops import delete_ledgers, now_ms, retention_cut, update_stream, without_segments
from .position import DLSN, EARLIEST
from .reader import end_position, open_reader
from .writer import AsyncStreamWriter, WriterOptions

__all__ = ["AsyncNamespace"]

log = logging.getLogger(__name__)


class AsyncNamespace:
    def __init__(self, bk: AsyncBookKeeper, owns_client: bool = False):
        self.bk = bk
        self.driver = bk.driver
        self._owns = owns_client

    @classmethod
    @defer.inlineCallbacks
    def connect(cls, metadata_uri: str, reactor=None, **conf):
        bk = yield AsyncBookKeeper.connect(metadata_uri, reactor, **conf)
        return cls(bk, owns_client=True)

    def close(self) -> defer.Deferred:
        return self.bk.close() if self._owns else defer.succeed(None)

    # --- lifecycle ----------------------------------------------------------------------------------
    def create_stream(self, name: str, retention_ms: int = 0, retention_bytes: int = 0,
                      properties: dict | None = None) -> defer.Deferred:
        """Create an empty stream; fires with its StreamMetadata. StreamExistsError if the name is taken."""
        try:
            check_stream_name(name)
            if retention_ms < 0 or retention_bytes < 0:
                raise StreamError("retention_ms and retention_bytes must be >= 0 (0: unbounded)")
        except StreamError as e:
            return defer.fail(e)
        md = StreamMetadata(name=name, ctime=now_ms(), retention_ms=int(retention_ms),
                            retention_bytes=int(retention_bytes), properties=dict(properties or {}))
        return self.driver.create_stream(md).addCallback(lambda vs: vs.metadata)

    def list_streams(self) -> defer.Deferred:
        return self.driver.list_streams()

    def describe(self, name: str) -> defer.Deferred:
        """The stream's StreamMetadata (segments, counts, settings)."""
        return self.driver.read_stream(name).addCallback(lambda vs: vs.metadata)

    def exists(self, name: str) -> defer.Deferred:
        d = self.driver.list_streams()
        return d.addCallback(lambda names: name in names)

    async def _delete(self, name: str) -> None:
        vs = await self.driver.read_stream(name)
        await self.driver.delete_stream(name, -1)
        await delete_ledgers(self.bk, vs.metadata.segments)

    def delete_stream(self, name: str) -> defer.Deferred:
        """Remove the stream and delete its ledgers (a writer still appending gets fenced errors)."""
        return defer.ensureDeferred(self._delete(name))

    def set_retention(self, name: str, retention_ms: int | None = None, retention_bytes: int | None = None):
        def change(md):
            return md.replace(retention_ms=md.retention_ms if retention_ms is None else int(retention_ms),
                              retention_bytes=md.retention_bytes if retention_bytes is None else int(retention_bytes))
        return defer.ensureDeferred(update_stream(self.driver, name, change)).addCallback(lambda vs: vs.metadata)

    # --- truncation / retention ----------------------------------------------------------------------
    async def _truncate(self, name: str, before, retention: bool) -> list[Segment]:
        before = DLSN.parse(before) if before is not None else None
        cut_holder: dict = {}

        def change(md):
            cut = []
            if before is not None:
                cut = [s for s in md.segments if not s.is_open and s.seq < before.segment]
            if retention:
                rest = without_segments(md, cut)
                cut += list(retention_cut(rest))
            cut_holder["cut"] = cut
            return without_segments(md, cut) if cut else None

        await update_stream(self.driver, name, change)
        cut = cut_holder.get("cut", [])
        await delete_ledgers(self.bk, cut)
        if cut:
            log.info("stream %s: truncated segments %s", name, [s.seq for s in cut])
        return cut

    def truncate(self, name: str, before=None, retention: bool = False) -> defer.Deferred:
        """Delete the whole sealed segments before position `before` (their ledgers too); with
        `retention`, also those the stream's retention settings remove. Fires with the removed segments.
        Records at or after `before` are never removed."""
        return defer.ensureDeferred(self._truncate(name, before, retention))

    # --- segments written elsewhere (Spark tasks) -----------------------------------------------------
    async def _append_segments(self, name: str, segments: list[Segment], commit_key: str) -> tuple[bool, object]:
        state = {"appended": False}

        def change(md):
            if commit_key and commit_key in md.commits:
                state["appended"] = False
                return None
            seq = md.next_seq
            new_segs = [s.replace(seq=seq + i, state="sealed") for i, s in enumerate(segments)]
            new = md.replace(segments=(*md.segments, *new_segs), next_seq=seq + len(new_segs))
            if commit_key:
                new = new.with_commit(commit_key)
            state["appended"] = True
            return new

        vs = await update_stream(self.driver, name, change)
        return state["appended"], vs.metadata

    def append_segments(self, name: str, segments: list[Segment], commit_key: str = "") -> defer.Deferred:
        """Append sealed segments (their ledgers already closed) in ONE CAS, in the given order. With a
        `commit_key` already committed, nothing changes. Fires with (appended?, StreamMetadata)."""
        return defer.ensureDeferred(self._append_segments(name, segments, commit_key))

    # --- writers and readers -----------------------------------------------------------------------------
    def open_writer(self, name: str, **options) -> defer.Deferred:
        """The stream's writer (fencing any previous one); see WriterOptions for the keyword arguments."""
        try:
            check_stream_name(name)
            opts = WriterOptions(**options)
        except (StreamError, TypeError) as e:
            return defer.fail(StreamError(str(e)) if isinstance(e, TypeError) else e)
        return defer.ensureDeferred(AsyncStreamWriter(self, name, opts)._open())

    def check_records(self, values, keys=None) -> None:
        """Raise EntryTooLargeError for the first of `values` (with `keys`) that no stream entry can hold
        (the client's nettyMaxFrameSizeBytes less all framing): a check that needs no writer."""
        check_records(self.bk.bookie_client.max_frame_size, list(values), keys)

    def open_reader(self, name: str, start=EARLIEST, password: bytes = b"", **options) -> defer.Deferred:
        """A reader from `start`: EARLIEST, LATEST, a DLSN / "seq:entry:slot", or a timestamp (ms or datetime)."""
        return defer.ensureDeferred(open_reader(self, name, start, password, **options))

    def end_position(self, name: str, password: bytes = b"") -> defer.Deferred:
        async def run():
            md = (await self.driver.read_stream(name)).metadata
            return await end_position(self, md, password)
        return defer.ensureDeferred(run())

