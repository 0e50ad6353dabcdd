"""The sorted memtable of SortedLedgerStorage (Java's EntryMemTable): entries kept in memory, then
written to the entry log sorted by (scope, ledger, entry) so each ledger's entries land together.

Owns: the active table (adds go there), the snapshot being flushed (reads see both), the byte count
against `skipListSizeLimit`, and backpressure: an add waits while the active table is full AND a
snapshot is still being flushed (Java throttles the same way).

Must never: lose an entry between snapshot() and clear_snapshot() (reads see the snapshot until the
storage has put every location of it in the ledger cache), or write anything itself (the storage
drains a snapshot into the entry logger and the ledger cache).

Threads: every method is safe to call from any thread; one flusher at a time (the storage's flush lock).
"""

from __future__ import annotations

import threading

__all__ = ["Memtable"]

Key = tuple[int, int]  # (scope_id, ledger_id)


class Memtable:
    def __init__(self, size_limit: int, max_wait_s: float = 10.0):
        self.size_limit = max(1, size_limit)
        self._max_wait_s = max_wait_s
        self._active: dict[Key, dict[int, bytes]] = {}
        self._snapshot: dict[Key, dict[int, bytes]] = {}
        self._active_bytes = 0
        self._snapshot_bytes = 0
        self._cond = threading.Condition(threading.Lock())

    @property
    def size(self) -> int:
        return self._active_bytes + self._snapshot_bytes

    def full(self) -> bool:
        return self._active_bytes >= self.size_limit

    def put(self, key: Key, entry_id: int, data: bytes) -> bool:
        """Add (or replace) an entry; True when the active table is full and should be flushed."""
        with self._cond:
            if self._active_bytes >= self.size_limit and self._snapshot:
                # Both full: wait for the flusher (bounded, then accept anyway rather than fail the add).
                self._cond.wait_for(lambda: not self._snapshot, self._max_wait_s)
            run = self._active.get(key)
            if run is None:
                run = self._active[key] = {}
            old = run.get(entry_id)
            run[entry_id] = data
            self._active_bytes += len(data) - (len(old) if old is not None else 0)
            return self._active_bytes >= self.size_limit

    def get(self, key: Key, entry_id: int) -> bytes | None:
        run = self._active.get(key)
        if run is not None:
            data = run.get(entry_id)
            if data is not None:
                return data
        run = self._snapshot.get(key)
        if run is not None:
            return run.get(entry_id)
        return None

    def last_entry(self, key: Key) -> int:
        with self._cond:
            runs = [r for r in (self._active.get(key), self._snapshot.get(key)) if r]
            return max((max(r) for r in runs), default=-1)

    def entry_ids(self, key: Key) -> set[int]:
        with self._cond:
            ids: set[int] = set()
            for run in (self._active.get(key), self._snapshot.get(key)):
                if run:
                    ids.update(run)
            return ids

    def delete_ledger(self, key: Key) -> None:
        with self._cond:
            run = self._active.pop(key, None)
            if run:
                self._active_bytes -= sum(map(len, run.values()))
            run = self._snapshot.pop(key, None)
            if run:
                self._snapshot_bytes -= sum(map(len, run.values()))

    def snapshot(self) -> list[tuple[Key, list[int], list[bytes]]]:
        """Move the active table to the snapshot; its runs sorted by (scope, ledger, entry).

        A snapshot left by a failed flush is returned again (merged with newer adds) so nothing is lost."""
        with self._cond:
            if self._active:
                for key, run in self._active.items():
                    target = self._snapshot.get(key)
                    if target is None:
                        self._snapshot[key] = run
                    else:
                        target.update(run)
                self._snapshot_bytes += self._active_bytes
                self._active = {}
                self._active_bytes = 0
            out = []
            for key in sorted(self._snapshot):
                run = self._snapshot[key]
                ids = sorted(run)
                out.append((key, ids, [run[i] for i in ids]))
            return out

    def clear_snapshot(self) -> None:
        with self._cond:
            self._snapshot = {}
            self._snapshot_bytes = 0
            self._cond.notify_all()
