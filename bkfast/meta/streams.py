"""The stored form of a named log stream: its segments (ledgers) and settings, versioned for CAS.

A stream's record lives in the metadata store (ZooKeeper: ``<root>/streams/<name>``; the embedded
driver: one key per stream) as UTF-8 JSON, ``"format": 1``. It is only ever changed by a
compare-and-set on the store's version (`MetadataDriver.write_stream`), so two writers, a Spark job's
commit and a truncation never overwrite each other's change. This module owns the data classes, the
name rule and the (de)serialization; the drivers store the bytes, `bkfast.streams` decides what changes.

Segments are kept in sequence order. ``seq`` numbers start at 1 and are never reused; a segment is
``open`` (a writer may still append to its ledger) or ``sealed`` (its ledger is closed and its
``last_entry`` / ``records`` / ``bytes`` are final). ``commits`` remembers the identities of the last
writes that appended segments in one CAS (Spark jobs, micro-batches), so a retried commit is a no-op.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace

from bkfast.attributes import Summed
from bkfast.errors import StreamError

__all__ = ["Segment", "StreamMetadata", "VersionedStream", "check_stream_name", "parse_stream", "serialize_stream",
           "MAX_REMEMBERED_COMMITS"]

FORMAT = 1
MAX_REMEMBERED_COMMITS = 1000
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def check_stream_name(name: str) -> str:
    """`name` if it is a valid stream name (letters, digits, ``._-``, not starting with ``.`` or ``-``,
    at most 200 characters); StreamError otherwise."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise StreamError(f"invalid stream name {name!r}: use 1-200 letters, digits, '.', '_' or '-', "
                          "starting with a letter, digit or '_'")
    return name


@dataclass(frozen=True)
class Segment:
    """One log segment: a ledger of the stream. `last_entry` -1 and counts 0 while open (unknown)."""

    seq: int
    ledger: int
    scope: int = 0
    state: str = "open"                    # "open" | "sealed"
    last_entry: int = -1
    records: int = 0
    bytes: int = 0
    first_ts: int = 0                      # ms since the epoch of its first / last record (0: unknown)
    last_ts: int = 0
    origin: str = ""                       # who wrote it: "writer:<epoch>", "spark:<write id>/<task>"

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def replace(self, **changes) -> Segment:
        return replace(self, **changes)


@dataclass(frozen=True)
class StreamMetadata:
    """A stream: settings, its segments in order, and what the writer / committers need for CAS."""

    name: str
    ctime: int = 0
    retention_ms: int = 0                   # 0: keep forever
    retention_bytes: int = 0                # 0: no size bound
    next_seq: int = 1
    writer_epoch: int = 0
    segments: tuple[Segment, ...] = ()
    truncated_records: int = 0             # records removed by truncation/retention so far
    commits: tuple[str, ...] = ()          # identities of the last committed multi-segment appends
    properties: dict = field(default_factory=dict)

    def replace(self, **changes) -> StreamMetadata:
        return replace(self, **changes)

    records = Summed("segments")
    bytes = Summed("segments")

    @property
    def open_segment(self) -> Segment | None:
        return self.segments[-1] if self.segments and self.segments[-1].is_open else None

    def segment(self, seq: int) -> Segment | None:
        for s in self.segments:
            if s.seq == seq:
                return s
        return None

    def with_commit(self, key: str) -> StreamMetadata:
        commits = (*self.commits, key)[-MAX_REMEMBERED_COMMITS:]
        return self.replace(commits=commits)


@dataclass(frozen=True)
class VersionedStream:
    """A stream's metadata with the store's version of it (for CAS)."""

    metadata: StreamMetadata
    version: int


def serialize_stream(md: StreamMetadata) -> bytes:
    d = asdict(md)
    d["format"] = FORMAT
    d["segments"] = [asdict(s) for s in md.segments]
    d["commits"] = list(md.commits)
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode("utf-8")


def parse_stream(data: bytes, where: str = "") -> StreamMetadata:
    try:
        d = json.loads(bytes(data).decode("utf-8"))
        if d.pop("format", None) != FORMAT:
            raise ValueError("unknown stream metadata format")
        d["segments"] = tuple(Segment(**s) for s in d.get("segments", ()))
        d["commits"] = tuple(d.get("commits", ()))
        return StreamMetadata(**d)
    except (ValueError, TypeError, KeyError) as e:
        raise StreamError(f"stream metadata {where} is not bkfast stream format {FORMAT}: {e}") from None
