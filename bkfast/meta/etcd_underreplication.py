"""AutoRecovery's metadata on etcd, which Java's etcd driver lacks: the etcd implementation of
`bkfast.meta.underreplication.UnderReplicationManager` and `AuditorElection` (docs/etcd.md lists the keys).

Owns, under `<scope>/underreplication/`: `layout` (ZooKeeper's LAYOUT text), the marks `ledgers/<id %020d>`
(UnderreplicatedLedgerFormat text, as in ZooKeeper; version: the key's mod revision), the worker locks
`locks/<id %020d>` (LockDataFormat text) on the session's lease, the `disable` key, `lostBookieRecoveryDelay`
(decimal text), the three checks' ctime keys (ZooKeeper's protobufs) and the election's votes
`auditorelection/V_<lease hex>` (AuditorVoteFormat text) on the candidate's lease, the earliest created vote
being the auditor. The encodings are ZooKeeper's (bkfast.meta.zk_underreplication), so one reader serves both.

Every call blocks on etcd: callers are the auditor's, the workers' and the election's threads and the shell,
never the reactor thread. A lock or a vote lives as long as the session's lease: a lease that expired and was
replaced takes them with it, as a ZooKeeper session expiry does.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterable

from google.protobuf import text_format

from bkfast.proto import DataFormats_pb2 as df

from .etcd_kv import (
    EtcdKV,
    EtcdWatch,
    KeyValue,
    cmp_absent,
    cmp_lease,
    cmp_mod_revision,
    cmp_present,
    op_delete,
    op_get,
    op_put,
)
from .etcd_layout import EtcdKeys
from .etcd_session import EtcdSession
from .underreplication import (
    AuditorElection,
    MarkInfo,
    ReplicationUnavailableError,
    UnderReplicationManager,
    Watch,
    check_recovery_delay,
)
from .zk_underreplication import (
    CTIME_NODES,
    LAYOUT_DATA,
    LOST_BOOKIE_RECOVERY_DELAY,
    encode_lock,
    encode_mark,
    encode_vote,
    parse_lock,
    parse_mark,
    parse_vote,
)

__all__ = ["EtcdUnderReplicationManager", "EtcdAuditorElection"]

log = logging.getLogger(__name__)

MAX_TXN_OPS = 128          # etcd's default --max-txn-ops


class _Watches:
    """One-shot watches of single keys: `watch()` is called once, at the first change after the read at
    `revision`, then the etcd watch is cancelled. A broken stream (etcd restarted) fires it too: the state
    may have changed meanwhile, and a spurious wake costs the caller one read."""

    def __init__(self, kv: EtcdKV):
        self.kv = kv
        self._open: list[EtcdWatch] = []
        self._lock = threading.Lock()

    def once(self, key: bytes, revision: int, watch: Watch) -> None:
        state = {"resets": 0, "fired": False}
        box: list[EtcdWatch] = []

        def fire(*_args) -> None:
            if state["fired"]:
                return
            state["fired"] = True
            self._forget(box[0])
            watch()

        def on_reset() -> int:
            state["resets"] += 1
            if state["resets"] > 1:
                fire()
            return revision

        with self._lock:
            box.append(self.kv.watch(key, None, fire, on_reset, name="etcd-ur-watch"))
            self._open.append(box[0])

    def _forget(self, handle: EtcdWatch) -> None:
        handle.cancel()
        with self._lock:
            if handle in self._open:
                self._open.remove(handle)

    def close(self) -> None:
        with self._lock:
            handles, self._open = self._open, []
        for handle in handles:
            handle.cancel()


def _ledger_key_id(key: bytes, prefix: bytes) -> int | None:
    tail = key[len(prefix):]
    return int(tail) if tail.isdigit() else None


class EtcdUnderReplicationManager(UnderReplicationManager):
    """See the module docstring. `store_ctime` is storeSystemTimeAsLedgerUnderreplicatedMarkTime; `lock_holder`
    the text a lock records (Java: the host name)."""

    def __init__(self, kv: EtcdKV, keys: EtcdKeys, session: EtcdSession | None, *, store_ctime: bool = True,
                 lock_holder: str | None = None):
        self.kv, self.keys, self.session = kv, keys, session
        self.store_ctime = store_ctime
        self.lock_holder = lock_holder or socket.gethostname()
        self.marks_prefix = keys.ur("ledgers") + b"/"
        self.locks_prefix = keys.ur("locks") + b"/"
        self._watches = _Watches(kv)
        self._layout_checked = False

    def close(self) -> None:
        self._watches.close()

    def _mark_key(self, ledger_id: int) -> bytes:
        return self.marks_prefix + b"%020d" % ledger_id

    def _lock_key(self, ledger_id: int) -> bytes:
        return self.locks_prefix + b"%020d" % ledger_id

    def _now_ms(self) -> int | None:
        return int(time.time() * 1000) if self.store_ctime else None

    # --- layout -----------------------------------------------------------------------------------------
    def ensure_layout(self) -> None:
        if self._layout_checked:
            return
        key = self.keys.ur("layout")
        result = self.kv.txn([cmp_absent(key)], [op_put(key, LAYOUT_DATA)], [op_get(key)],
                             what="create the under-replication layout")
        if not result.succeeded:
            data = result.ranges()[0][0].value
            msg = df.LedgerRereplicationLayoutFormat()
            try:
                text_format.Parse(data.decode("utf-8"), msg)
            except (text_format.ParseError, UnicodeDecodeError) as err:
                raise ReplicationUnavailableError(f"unreadable {key.decode()}: {err}") from None
            if msg.type != "BASIC" or msg.version != 1:
                raise ReplicationUnavailableError(f"{key.decode()} says type {msg.type!r} version {msg.version}; "
                                                  "only BASIC version 1 is supported")
        self._layout_checked = True

    # --- marks ------------------------------------------------------------------------------------------
    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        """Create the mark, or append the replicas it lacks and refresh ctime, compared on the mod revision
        read (0: absent). Whether anything was written."""
        self.ensure_layout()
        key = self._mark_key(ledger_id)
        wanted = list(dict.fromkeys(replicas))
        while True:
            found = self.kv.get(key)
            existing = parse_mark(found.value)[0] if found is not None else []
            new = [r for r in wanted if r not in existing]
            if found is not None and not new:
                return False
            seen = found.mod_revision if found is not None else 0
            result = self.kv.txn([cmp_mod_revision(key, seen)], [op_put(key, encode_mark(existing + new,
                                                                                        self._now_ms()))],
                                 what=f"mark ledger {ledger_id} under-replicated")
            if result.succeeded:
                return True

    def mark_many(self, ledger_ids: Iterable[int], replicas: Iterable[str]) -> int:
        """Fresh marks in transactions of up to 128 creates (each only where no mark is); the ledgers already
        marked go through `mark` (append + refresh)."""
        self.ensure_layout()
        ids = list(dict.fromkeys(ledger_ids))
        wanted = list(dict.fromkeys(replicas))
        data = encode_mark(wanted, self._now_ms())
        already = set(self.list_marked())
        fresh = [i for i in ids if i not in already]
        written = 0
        for start in range(0, len(fresh), MAX_TXN_OPS):
            batch = fresh[start:start + MAX_TXN_OPS]
            keys = [self._mark_key(i) for i in batch]
            result = self.kv.txn([cmp_absent(k) for k in keys], [op_put(k, data) for k in keys],
                                 what=f"mark {len(batch)} ledgers under-replicated")
            if result.succeeded:
                written += len(batch)
            else:
                written += sum(self.mark(i, wanted) for i in batch)     # a concurrent writer: one by one
        return written + sum(self.mark(i, wanted) for i in ids if i in already)

    def _info(self, ledger_id: int, found: KeyValue) -> MarkInfo:
        replicas, ctime = parse_mark(found.value)
        return MarkInfo(ledger_id, tuple(replicas), ctime, found.mod_revision)

    def get_mark(self, ledger_id: int) -> MarkInfo | None:
        found = self.kv.get(self._mark_key(ledger_id))
        return None if found is None else self._info(ledger_id, found)

    def _marks(self, keys_only: bool) -> list[tuple[int, KeyValue]]:
        prefix = self.marks_prefix
        found, _ = self.kv.range(prefix, prefix[:-1] + b"0", keys_only=keys_only)
        return [(lid, kv) for kv in found if (lid := _ledger_key_id(kv.key, prefix)) is not None]

    def list_marked(self) -> list[int]:
        return [lid for lid, _ in self._marks(keys_only=True)]

    def list_marks(self) -> dict[int, MarkInfo]:
        return {lid: self._info(lid, kv) for lid, kv in self._marks(keys_only=False)}

    def mark_replicated(self, ledger_id: int, version: int) -> bool:
        """Delete the mark if it is still at `version` (its mod revision); release our lock either way."""
        key = self._mark_key(ledger_id)
        try:
            result = self.kv.txn([cmp_mod_revision(key, version)], [op_delete(key)], [op_get(key)],
                                 what=f"resolve the mark of ledger {ledger_id}")
            gone = result.succeeded or not result.ranges()[0]
        finally:
            self.release_lock(ledger_id)
        return gone

    # --- locks ------------------------------------------------------------------------------------------
    def _lease(self) -> int:
        if self.session is None:
            raise ReplicationUnavailableError("this under-replication manager has no session: it cannot lock")
        return self.session.lease

    def try_lock(self, ledger_id: int) -> bool:
        key = self._lock_key(ledger_id)
        return self.kv.txn([cmp_absent(key)], [op_put(key, encode_lock(self.lock_holder), self._lease())],
                           what=f"lock ledger {ledger_id} for re-replication").succeeded

    def release_lock(self, ledger_id: int) -> None:
        if self.session is None:
            return
        key = self._lock_key(ledger_id)
        self.kv.txn([cmp_lease(key, self.session.lease)], [op_delete(key)], what=f"unlock ledger {ledger_id}")

    def lock_holder_of(self, ledger_id: int) -> str | None:
        found = self.kv.get(self._lock_key(ledger_id))
        return None if found is None else parse_lock(found.value)

    def locked(self) -> set[int]:
        prefix = self.locks_prefix
        found, _ = self.kv.range(prefix, prefix[:-1] + b"0", keys_only=True)
        return {lid for kv in found if (lid := _ledger_key_id(kv.key, prefix)) is not None}

    # --- enable / disable ---------------------------------------------------------------------------------
    def _read_watched(self, key: bytes, watch: Watch | None) -> KeyValue | None:
        kvs, revision = self.kv.range(key, None)
        if watch is not None:
            self._watches.once(key, revision, watch)
        return kvs[0] if kvs else None

    def is_enabled(self, watch: Watch | None = None) -> bool:
        return self._read_watched(self.keys.ur("disable"), watch) is None

    def disable(self) -> None:
        self.ensure_layout()
        key = self.keys.ur("disable")
        if not self.kv.txn([cmp_absent(key)], [op_put(key, b"")], what="disable AutoRecovery").succeeded:
            raise ReplicationUnavailableError("AutoRecovery is already disabled!")

    def enable(self) -> None:
        key = self.keys.ur("disable")
        if not self.kv.txn([cmp_present(key)], [op_delete(key)], what="enable AutoRecovery").succeeded:
            raise ReplicationUnavailableError("AutoRecovery is already enabled!")

    # --- lostBookieRecoveryDelay ------------------------------------------------------------------------
    def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        key = self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY)
        self.kv.txn([cmp_absent(key)], [op_put(key, str(int(seconds)).encode("ascii"))],
                    what="initialize lostBookieRecoveryDelay")

    def get_lost_bookie_recovery_delay(self, watch: Watch | None = None) -> int | None:
        found = self._read_watched(self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY), watch)
        return None if found is None else int(found.value.decode("ascii"))

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        self.kv.put(self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY), check_recovery_delay(seconds).encode("ascii"))

    # --- the checks' last runs --------------------------------------------------------------------------
    def get_ctime(self, name: str) -> int:
        node, cls, field = CTIME_NODES[name]
        found = self.kv.get(self.keys.ur(node))
        if found is None:
            return -1
        msg = cls()
        msg.ParseFromString(found.value)
        return getattr(msg, field) if msg.HasField(field) else -1

    def set_ctime(self, name: str, epoch_ms: int) -> None:
        node, cls, field = CTIME_NODES[name]
        self.kv.put(self.keys.ur(node), cls(**{field: int(epoch_ms)}).SerializeToString())


class EtcdAuditorElection(AuditorElection):
    """One candidate (`bookie_id`) or an observer (None). The vote's key names the lease it lives on, so a
    candidate whose lease was replaced votes again under a new key, behind the others."""

    def __init__(self, kv: EtcdKV, keys: EtcdKeys, session: EtcdSession | None, bookie_id: str | None = None):
        self.kv, self.keys, self.session = kv, keys, session
        self.bookie_id = bookie_id
        self.prefix = keys.ur("auditorelection") + b"/"
        self.vote: bytes | None = None
        self.is_auditor = False
        self.wake = threading.Event()
        self._watch: EtcdWatch | None = None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _votes(self) -> tuple[list[KeyValue], int]:
        kvs, revision = self.kv.range(self.prefix, self.prefix[:-1] + b"0")
        return sorted(kvs, key=lambda kv: kv.create_revision), revision

    def current_auditor(self) -> str | None:
        votes, _ = self._votes()
        return parse_vote(votes[0].value) if votes else None

    def _ensure_vote(self) -> None:
        if self.bookie_id is None or self.session is None:
            raise ValueError("an observer of the auditor election (no bookie id) cannot vote")
        lease = self.session.lease
        key = self.prefix + b"V_%016x" % lease
        if key != self.vote or self.kv.get(key) is None:
            self.kv.txn([cmp_absent(key)], [op_put(key, encode_vote(self.bookie_id), lease)],
                        what=f"vote {self.bookie_id} in the auditor election")
            self.vote = key
            log.info("auditor election: %s voted %s", self.bookie_id, key.decode())

    def run_once(self) -> bool:
        """One round: (re)vote; True if our vote is the earliest. Any change of the votes after this read
        (a vote ahead of ours, or ours, going) sets `wake`."""
        self.wake.clear()
        self._ensure_vote()
        votes, revision = self._votes()
        self._watch_votes(revision)
        mine = [kv for kv in votes if kv.key == self.vote]
        if not mine:
            self.vote = None
            self.wake.set()
            return False
        won = votes[0].key == mine[0].key
        if won and not self.is_auditor:
            log.info("auditor election: %s is the auditor (vote %s)", self.bookie_id, mine[0].key.decode())
        self.is_auditor = won
        return won

    def _watch_votes(self, revision: int) -> None:
        """A one-shot watch of every vote from this round's read on (a later round sets a new one)."""
        self.close()
        state = {"resets": 0}

        def wake(*_args) -> None:
            self.wake.set()

        def on_reset() -> int:
            state["resets"] += 1
            if state["resets"] > 1:
                self.wake.set()
            return revision

        self._watch = self.kv.watch(self.prefix, self.prefix[:-1] + b"0", wake, on_reset, name="etcd-election")

    def withdraw(self) -> None:
        if self.vote is not None:
            self.kv.delete(self.vote)
        self.vote = None
        self.is_auditor = False
        self.close()
