"""The read-ahead cache of DbLedgerStorage: entries read from entry logs ahead of the reader.

Owns: a size-bounded set of recently read-ahead entries (`dbStorage_readAheadCacheMaxSizeMb`, already
divided across ledger dirs by the caller), organised as Java's ReadCache is: a ring of segments, new
entries go to the newest segment, and when it is full the oldest segment is dropped whole (FIFO
eviction in coarse steps; no per-read bookkeeping, so a hit costs a few dict lookups).

Must never: do I/O or decide what to read ahead (the storage does), or be the only copy of an entry
(everything here is also in an entry log). A size of 0 disables it.
"""

from __future__ import annotations

import threading

__all__ = ["ReadCache"]

_SEGMENTS = 4
_ENTRY_OVERHEAD = 64


class _Segment:
    __slots__ = ("ledgers", "size", "count")

    def __init__(self):
        self.ledgers: dict[int, dict[int, bytes]] = {}
        self.size = 0
        self.count = 0


class ReadCache:
    """Segmented FIFO cache of (ledger key, entry id) -> entry bytes."""

    def __init__(self, max_size_bytes: int, segments: int = _SEGMENTS):
        self.max_size = max(0, max_size_bytes)
        self._segment_size = self.max_size // max(1, segments)
        self._segments_max = max(1, segments)
        self._lock = threading.Lock()
        # Newest first. Replaced (never mutated) on rotation, so readers iterate a stable tuple.
        self._segments: tuple[_Segment, ...] = (_Segment(),)

    @property
    def enabled(self) -> bool:
        return self._segment_size > 0

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def count(self) -> int:
        return sum(s.count for s in self._segments)

    def get(self, key: int, entry_id: int) -> bytes | None:
        for segment in self._segments:
            entries = segment.ledgers.get(key)
            if entries is not None:
                data = entries.get(entry_id)
                if data is not None:
                    return data
        return None

    def put(self, key: int, entry_id: int, data: bytes) -> None:
        self.put_run(key, [(entry_id, 0, data)])

    def put_run(self, key: int, run: list[tuple[int, int, bytes]]) -> None:
        """put() for each (entry_id, location, data) of a read-ahead run, under one lock."""
        limit = self._segment_size
        with self._lock:
            newest = self._segments[0]
            entries = newest.ledgers.get(key)
            for entry_id, _, data in run:
                need = len(data) + _ENTRY_OVERHEAD
                if need > limit:
                    continue
                if newest.size + need > limit:
                    newest = _Segment()
                    self._segments = (newest,) + self._segments[: self._segments_max - 1]
                    entries = None
                if entries is None:
                    entries = newest.ledgers.get(key)
                    if entries is None:
                        entries = newest.ledgers[key] = {}
                if entry_id not in entries:
                    newest.count += 1
                    newest.size += need
                entries[entry_id] = data

    def delete_ledger(self, key: int) -> None:
        with self._lock:
            for segment in self._segments:
                entries = segment.ledgers.pop(key, None)
                if entries:
                    segment.count -= len(entries)
                    segment.size -= sum(len(d) + _ENTRY_OVERHEAD for d in entries.values())

    def clear(self) -> None:
        with self._lock:
            self._segments = (_Segment(),)
