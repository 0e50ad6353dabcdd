"""The embedded store's AutoRecovery metadata: `UnderReplicationManager` and `AuditorElection`
(bkfast.meta.underreplication) for one process.

Owns, per embedded store (shared by every driver opened on its directory): the marks, the switch, the delay
and the checks' last run times, persisted in the store's RocksDB (keys `U` + ledger id, `R:...`; a mark is
version (8 bytes, big endian) + JSON `{"replicas": [...], "ctime": ms}`), fsynced as the ledgers are; the
locks and the votes in memory, each owned by the driver that took it, as ZooKeeper ephemerals are by a
session: a driver's close (its "session" ending) frees its locks and withdraws its votes. Thread-safe: the
callers are AutoRecovery's threads; watches run in the thread that made the change, after it is stored.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable

from rocksdict import ReadOptions

from .underreplication import (
    CTIME_NAMES,
    AuditorElection,
    MarkInfo,
    ReplicationUnavailableError,
    UnderReplicationManager,
    Watch,
    check_recovery_delay,
)

__all__ = ["ReplicationState", "EmbeddedUnderReplicationManager", "EmbeddedAuditorElection"]

log = logging.getLogger(__name__)

_MARK = b"U"
_MARK_END = b"V"
_DISABLED = b"R:disabled"
_DELAY = b"R:lostBookieRecoveryDelay"
_CTIME = b"R:ctime:"
_ID = struct.Struct(">Q")
_VERSION = struct.Struct(">q")


def _mark_key(ledger_id: int) -> bytes:
    return _MARK + _ID.pack(ledger_id)


def _fire(watches: list[Watch]) -> None:
    for watch in watches:
        try:
            watch()
        except Exception:
            log.exception("under-replication watch %r failed", watch)


class ReplicationState:
    """What every driver on one embedded store shares (see the module docstring)."""

    def __init__(self, db, sync):
        self.db = db
        self.sync = sync
        self.lock = threading.Lock()
        self.locks: dict[int, tuple[str, object]] = {}           # ledger id -> (holder text, owner driver)
        self.votes: dict[int, tuple[str, object]] = {}           # sequence -> (bookie id, owner driver)
        self.next_vote = 0
        self.candidates: list[threading.Event] = []               # each candidate's wake
        self.switch_watches: list[Watch] = []
        self.delay_watches: list[Watch] = []

    def read_mark(self, ledger_id: int) -> MarkInfo | None:
        raw = self.db.get(_mark_key(ledger_id))
        if raw is None:
            return None
        body = json.loads(raw[_VERSION.size:])
        return MarkInfo(ledger_id, tuple(body["replicas"]), body["ctime"], _VERSION.unpack_from(raw)[0])

    def write_mark(self, ledger_id: int, replicas: list[str], ctime: int, version: int) -> None:
        body = json.dumps({"replicas": replicas, "ctime": ctime}).encode()
        self.db.put(_mark_key(ledger_id), _VERSION.pack(version) + body, write_opt=self.sync)

    def marked(self) -> list[int]:
        ro = ReadOptions()
        ro.set_iterate_upper_bound(_MARK_END)
        return [_ID.unpack(key[1:])[0] for key in self.db.keys(from_key=_MARK, read_opt=ro)
                if key.startswith(_MARK)]

    def wake_candidates(self) -> None:
        for wake in self.candidates:
            wake.set()

    def release_owner(self, owner) -> None:
        """The driver `owner` closed: its locks and votes go, as a session's ephemerals do."""
        with self.lock:
            for ledger_id in [i for i, (_h, o) in self.locks.items() if o is owner]:
                del self.locks[ledger_id]
            gone = [seq for seq, (_b, o) in self.votes.items() if o is owner]
            for seq in gone:
                del self.votes[seq]
            if gone:
                self.wake_candidates()


class EmbeddedUnderReplicationManager(UnderReplicationManager):
    """The embedded store's marks, locks, switch, delay and ctimes (see the module docstring). `owner` is the
    driver whose close frees the locks taken here."""

    def __init__(self, state: ReplicationState, owner, *, store_ctime: bool = True, lock_holder: str | None = None,
                 clock_ms: Callable[[], int] | None = None):
        self.state = state
        self.owner = owner
        self.store_ctime = store_ctime
        self.lock_holder = lock_holder or socket.gethostname()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def ensure_layout(self) -> None:
        """Nothing to create: the embedded store has one format."""

    # --- marks ----------------------------------------------------------------------------------------
    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        replicas = list(dict.fromkeys(replicas))
        ctime = self._clock_ms() if self.store_ctime else -1
        with self.state.lock:
            info = self.state.read_mark(ledger_id)
            if info is None:
                self.state.write_mark(ledger_id, replicas, ctime, 0)
                return True
            new = [r for r in replicas if r not in info.replicas]
            if not new:
                return False
            self.state.write_mark(ledger_id, [*info.replicas, *new], ctime, info.version + 1)
            return True

    def mark_many(self, ledger_ids: Iterable[int], replicas: Iterable[str]) -> int:
        replicas = list(replicas)
        return sum(self.mark(ledger_id, replicas) for ledger_id in dict.fromkeys(ledger_ids))

    def get_mark(self, ledger_id: int) -> MarkInfo | None:
        return self.state.read_mark(ledger_id)

    def list_marked(self) -> list[int]:
        return self.state.marked()

    def list_marks(self) -> dict[int, MarkInfo]:
        marks = {ledger_id: self.state.read_mark(ledger_id) for ledger_id in self.state.marked()}
        return {ledger_id: info for ledger_id, info in marks.items() if info is not None}

    def mark_replicated(self, ledger_id: int, version: int) -> bool:
        with self.state.lock:
            info = self.state.read_mark(ledger_id)
            deleted = info is None or info.version == version
            if info is not None and deleted:
                self.state.db.delete(_mark_key(ledger_id), write_opt=self.state.sync)
        if not deleted:
            log.info("ledger %d was marked again while being replicated; the mark stays", ledger_id)
        self.release_lock(ledger_id)
        return deleted

    # --- locks ----------------------------------------------------------------------------------------
    def try_lock(self, ledger_id: int) -> bool:
        with self.state.lock:
            if ledger_id in self.state.locks:
                return False
            self.state.locks[ledger_id] = (self.lock_holder, self.owner)
            return True

    def release_lock(self, ledger_id: int) -> None:
        with self.state.lock:
            self.state.locks.pop(ledger_id, None)

    def lock_holder_of(self, ledger_id: int) -> str | None:
        held = self.state.locks.get(ledger_id)
        return held[0] if held is not None else None

    def locked(self) -> set[int]:
        with self.state.lock:
            return set(self.state.locks)

    # --- enable / disable -----------------------------------------------------------------------------
    def is_enabled(self, watch: Watch | None = None) -> bool:
        with self.state.lock:
            if watch is not None:
                self.state.switch_watches.append(watch)
            return self.state.db.get(_DISABLED) is None

    def _switch(self, disabled: bool) -> None:
        with self.state.lock:
            if (self.state.db.get(_DISABLED) is not None) == disabled:
                raise ReplicationUnavailableError(f"AutoRecovery is already {'disabled' if disabled else 'enabled'}!")
            if disabled:
                self.state.db.put(_DISABLED, b"", write_opt=self.state.sync)
            else:
                self.state.db.delete(_DISABLED, write_opt=self.state.sync)
            watches, self.state.switch_watches = self.state.switch_watches, []
        _fire(watches)

    def disable(self) -> None:
        self._switch(True)

    def enable(self) -> None:
        self._switch(False)

    # --- lostBookieRecoveryDelay ----------------------------------------------------------------------
    def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        with self.state.lock:
            if self.state.db.get(_DELAY) is None:
                self.state.db.put(_DELAY, check_recovery_delay(seconds).encode("ascii"), write_opt=self.state.sync)

    def get_lost_bookie_recovery_delay(self, watch: Watch | None = None) -> int | None:
        with self.state.lock:
            if watch is not None:
                self.state.delay_watches.append(watch)
            raw = self.state.db.get(_DELAY)
        return int(raw.decode("ascii")) if raw is not None else None

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        data = check_recovery_delay(seconds).encode("ascii")
        with self.state.lock:
            self.state.db.put(_DELAY, data, write_opt=self.state.sync)
            watches, self.state.delay_watches = self.state.delay_watches, []
        _fire(watches)

    # --- ctimes ---------------------------------------------------------------------------------------
    def get_ctime(self, name: str) -> int:
        raw = self.state.db.get(_ctime_key(name))
        return _VERSION.unpack(raw)[0] if raw is not None else -1

    def set_ctime(self, name: str, epoch_ms: int) -> None:
        self.state.db.put(_ctime_key(name), _VERSION.pack(int(epoch_ms)), write_opt=self.state.sync)


def _ctime_key(name: str) -> bytes:
    if name not in CTIME_NAMES:
        raise KeyError(name)
    return _CTIME + name.encode("ascii")


class EmbeddedAuditorElection(AuditorElection):
    """A candidate (or an observer: bookie_id None) in the store's in-process election; the earliest living
    vote is the auditor, and every vote that goes wakes every candidate to run a round again."""

    def __init__(self, state: ReplicationState, owner, bookie_id: str | None = None):
        self.state = state
        self.owner = owner
        self.bookie_id = bookie_id
        self.vote: int | None = None
        self.is_auditor = False
        self.wake = threading.Event()

    def run_once(self) -> bool:
        if self.bookie_id is None:
            raise ValueError("an observer of the auditor election (no bookie id) cannot vote")
        self.wake.clear()
        with self.state.lock:
            if self.wake not in self.state.candidates:
                self.state.candidates.append(self.wake)
            if self.vote not in self.state.votes:
                self.vote = self.state.next_vote
                self.state.next_vote += 1
                self.state.votes[self.vote] = (self.bookie_id, self.owner)
                log.info("auditor election: %s voted %d", self.bookie_id, self.vote)
            won = min(self.state.votes) == self.vote
        if won and not self.is_auditor:
            log.info("auditor election: %s is the auditor (vote %d)", self.bookie_id, self.vote)
        self.is_auditor = won
        return won

    def withdraw(self) -> None:
        with self.state.lock:
            if self.vote is not None and self.state.votes.pop(self.vote, None) is not None:
                self.state.wake_candidates()
            if self.wake in self.state.candidates:
                self.state.candidates.remove(self.wake)
        self.vote = None
        self.is_auditor = False

    def current_auditor(self) -> str | None:
        with self.state.lock:
            return self.state.votes[min(self.state.votes)][0] if self.state.votes else None
