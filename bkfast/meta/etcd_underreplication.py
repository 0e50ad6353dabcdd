"""AutoRecovery's metadata on etcd, which Java's etcd driver lacks: the etcd implementation of
`bkfast.meta.underreplication.UnderReplicationManager` and `AuditorElection` (docs/etcd.md lists the keys).

Owns these keys under `<scope>/underreplication/` (bkfast's own: Java defines none), with ZooKeeper's value
encodings (bkfast.meta.zk_underreplication), so one reader serves both stores:

* `layout`                       LAYOUT_DATA text (`type: "BASIC"` version 1); another format is refused.
* `ledgers/<ledger id %020d>`    a mark: UnderreplicatedLedgerFormat text (replicas, optional ctime). Its
                                 version for compare-and-swap is the key's mod revision (0: absent).
* `locks/<ledger id %020d>`      a worker's lock: LockDataFormat text (the holder), on the session's lease.
* `disable`                      present (empty) while re-replication is disabled.
* `lostBookieRecoveryDelay`      decimal text, seconds.
* `checkallledgersctime`, `placementpolicycheckctime`, `replicascheckctime`
                                 the periodic checks' last runs: ZooKeeper's binary protobufs (epoch ms).
* `auditorelection/V_<lease %016x>_<candidate token>`
                                 a candidate's vote: AuditorVoteFormat text, on the candidate's lease. The
                                 living vote with the lowest create revision is the auditor's.

A lock or a vote lives as long as the session's lease: `EtcdSession.close()` revokes it, and a lease that
expired and was replaced took them with it, as a ZooKeeper session expiry does (nothing here remembers a
lock, so there is nothing to forget; a candidate votes again under its new lease). A watch is one etcd watch
from the revision of the read it answers, so no change in between is lost; it fires once and is cancelled.

Must never: run in the reactor thread (every call blocks on etcd), hold a lock or vote on a lease other than
the session's, write a key outside `<scope>/underreplication/`.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf import text_format

from bkfast.proto import DataFormats_pb2 as df

from .etcd_kv import (
    MAX_TXN_OPS,
    EtcdKV,
    EtcdWatch,
    KeyValue,
    WatchEvent,
    cmp_absent,
    cmp_lease,
    cmp_mod_revision,
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

ELECTION = "auditorelection"


# --- one-shot watches -------------------------------------------------------------------------------------

@dataclass
class _Shot:
    handle: EtcdWatch | None = None
    done: bool = False


class _OneShotWatches:
    """Watches of single keys, each called once at the first change after the read at `revision`.

    A watch already pending on the same key is not opened again (kazoo keeps a set of watchers too): the
    worker re-reads the switch every second with the same callable, and each etcd watch is a thread and a
    connection. The pending one started from an earlier read, so it covers the later read as well."""

    def __init__(self, kv: EtcdKV, name: str):
        self.kv, self.name = kv, name
        self._lock = threading.Lock()
        self._pending: dict[tuple, _Shot] = {}
        self._closed = False

    def add(self, key: bytes, revision: int, watch: Watch) -> None:
        entry = (key, _identity(watch))
        shot = _Shot()
        with self._lock:
            if self._closed or entry in self._pending:
                return
            self._pending[entry] = shot
        resets = itertools.count()

        def on_reset() -> int:
            # The first call starts the watch after our read. A later one means the stream broke: the key
            # may have changed unseen, and a spurious call costs the caller one read.
            if next(resets):
                self._fire(entry, shot, watch)
            return revision

        handle = self.kv.watch(key, None, lambda _events: self._fire(entry, shot, watch), on_reset,
                               name=self.name)
        with self._lock:
            shot.handle = handle
            fired = shot.done
        if fired:                       # fired or closed before the handle was stored
            handle.cancel()

    def _fire(self, entry: tuple, shot: _Shot, watch: Watch) -> None:
        with self._lock:
            if shot.done:
                return
            shot.done = True
            if self._pending.get(entry) is shot:
                del self._pending[entry]
            handle = shot.handle
        if handle is not None:
            handle.cancel()
        try:
            watch()
        except Exception:
            log.exception("under-replication watch %r failed", watch)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            shots = list(self._pending.values())
            self._pending.clear()
            for shot in shots:
                shot.done = True
        for shot in shots:
            if shot.handle is not None:
                shot.handle.cancel()


def _identity(watch: Watch) -> object:
    """The watch itself when hashable (bound methods of one object compare equal), else its id."""
    try:
        hash(watch)
    except TypeError:
        return id(watch)
    return watch


def _id_of(key: bytes, prefix: bytes) -> int | None:
    tail = key[len(prefix):]
    return int(tail) if tail.isdigit() else None


def _check_layout(key: bytes, data: bytes) -> None:
    msg = df.LedgerRereplicationLayoutFormat()
    try:
        text_format.Parse(data.decode("utf-8"), msg)
    except (text_format.ParseError, UnicodeDecodeError) as err:
        raise ReplicationUnavailableError(f"unreadable {key.decode()}: {err}") from None
    if msg.type != "BASIC" or msg.version != 1:
        raise ReplicationUnavailableError(f"{key.decode()} says type {msg.type!r} version {msg.version}; "
                                          "only BASIC version 1 is supported")


def _merged(found: KeyValue | None, wanted: list[str], ctime: int | None) -> bytes | None:
    """The mark to write over `found` (None: absent) so it lists `wanted`; None when it lists them all."""
    existing = parse_mark(found.value)[0] if found is not None else []
    new = [r for r in wanted if r not in existing]
    if found is not None and not new:
        return None
    return encode_mark(existing + new, ctime)


# --- the manager ------------------------------------------------------------------------------------------

class EtcdUnderReplicationManager(UnderReplicationManager):
    """See the module docstring. `store_ctime` is storeSystemTimeAsLedgerUnderreplicatedMarkTime;
    `lock_holder` the text a lock records (Java: the host name)."""

    def __init__(self, kv: EtcdKV, keys: EtcdKeys, session: EtcdSession | None, *, store_ctime: bool = True,
                 lock_holder: str | None = None):
        self.kv, self.keys, self.session = kv, keys, session
        self.store_ctime = store_ctime
        self.lock_holder = lock_holder or socket.gethostname()
        self.marks_range = EtcdKeys.children(keys.ur("ledgers"))
        self.locks_range = EtcdKeys.children(keys.ur("locks"))
        self._watches = _OneShotWatches(kv, "etcd-ur-watch")
        self._layout_checked = False

    def close(self) -> None:
        """Cancel the watches not fired yet; they are never called."""
        self._watches.close()

    def _mark_key(self, ledger_id: int) -> bytes:
        return self.marks_range[0] + b"%020d" % ledger_id

    def _lock_key(self, ledger_id: int) -> bytes:
        return self.locks_range[0] + b"%020d" % ledger_id

    def _now_ms(self) -> int | None:
        return int(time.time() * 1000) if self.store_ctime else None

    def ensure_layout(self) -> None:
        if self._layout_checked:
            return
        key = self.keys.ur("layout")
        result = self.kv.txn([cmp_absent(key)], [op_put(key, LAYOUT_DATA)], [op_get(key)],
                             what="create the under-replication layout")
        if not result.succeeded:
            _check_layout(key, result.ranges()[0][0].value)
        self._layout_checked = True

    # --- marks ----------------------------------------------------------------------------------------
    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        """Create the mark or append the replicas it lacks (and refresh ctime), compared on the mod revision
        read; a concurrent writer's mark is merged again. Whether anything was written."""
        self.ensure_layout()
        key = self._mark_key(ledger_id)
        wanted = list(dict.fromkeys(replicas))
        found = self.kv.get(key)
        while True:
            data = _merged(found, wanted, self._now_ms())
            if data is None:
                return False
            seen = found.mod_revision if found is not None else 0
            result = self.kv.txn([cmp_mod_revision(key, seen)], [op_put(key, data)], [op_get(key)],
                                 what=f"mark ledger {ledger_id} under-replicated")
            if result.succeeded:
                return True
            current = result.ranges()[0]
            found = current[0] if current else None

    def mark_many(self, ledger_ids: Iterable[int], replicas: Iterable[str]) -> int:
        """`mark` for many ledgers, MAX_TXN_OPS at a time: one transaction reads them, one writes every
        mark that changes, compared on the mod revisions read. Returns the marks written."""
        self.ensure_layout()
        ids = list(dict.fromkeys(ledger_ids))
        wanted = list(dict.fromkeys(replicas))
        return sum(self._mark_batch(ids[start:start + MAX_TXN_OPS], wanted)
                   for start in range(0, len(ids), MAX_TXN_OPS))

    def _mark_batch(self, ids: list[int], wanted: list[str]) -> int:
        keys = [self._mark_key(i) for i in ids]
        found = self.kv.txn([], [op_get(k) for k in keys], what=f"read {len(ids)} marks").ranges()
        ctime = self._now_ms()
        compares, puts = [], []
        for key, kvs in zip(keys, found, strict=True):
            current = kvs[0] if kvs else None
            data = _merged(current, wanted, ctime)
            if data is not None:
                compares.append(cmp_mod_revision(key, current.mod_revision if current is not None else 0))
                puts.append(op_put(key, data))
        if not puts:
            return 0
        if self.kv.txn(compares, puts, what=f"mark {len(puts)} ledgers under-replicated").succeeded:
            return len(puts)
        return sum(self.mark(i, wanted) for i in ids)      # a concurrent writer: one by one

    def _info(self, ledger_id: int, found: KeyValue) -> MarkInfo:
        replicas, ctime = parse_mark(found.value)
        return MarkInfo(ledger_id, tuple(replicas), ctime, found.mod_revision)

    def get_mark(self, ledger_id: int) -> MarkInfo | None:
        found = self.kv.get(self._mark_key(ledger_id))
        return None if found is None else self._info(ledger_id, found)

    def _marks(self, keys_only: bool) -> list[tuple[int, KeyValue]]:
        start, end = self.marks_range
        found, _ = self.kv.range(start, end, keys_only=keys_only)
        return [(lid, kv) for kv in found if (lid := _id_of(kv.key, start)) is not None]

    def list_marked(self) -> list[int]:
        return [lid for lid, _ in self._marks(keys_only=True)]

    def list_marks(self) -> dict[int, MarkInfo]:
        return {lid: self._info(lid, kv) for lid, kv in self._marks(keys_only=False)}

    def mark_replicated(self, ledger_id: int, version: int) -> bool:
        key = self._mark_key(ledger_id)
        try:
            result = self.kv.txn([cmp_mod_revision(key, version)], [op_delete(key)], [op_get(key)],
                                 what=f"resolve the mark of ledger {ledger_id}")
            gone = result.succeeded or not result.ranges()[0]
        finally:
            self.release_lock(ledger_id)
        if not gone:
            log.info("ledger %d was marked again while being replicated; the mark stays", ledger_id)
        return gone

    # --- locks ----------------------------------------------------------------------------------------
    def _lease(self) -> int:
        if self.session is None:
            raise ReplicationUnavailableError("this under-replication manager reads only: it has no lease to lock on")
        return self.session.lease

    def try_lock(self, ledger_id: int) -> bool:
        key = self._lock_key(ledger_id)
        put = op_put(key, encode_lock(self.lock_holder), self._lease())
        return self.kv.txn([cmp_absent(key)], [put], what=f"lock ledger {ledger_id} for re-replication").succeeded

    def release_lock(self, ledger_id: int) -> None:
        """Delete the lock only if it is on our lease: another worker's lock (ours went with an expired
        lease, and it took the ledger since) stays."""
        key = self._lock_key(ledger_id)
        if self.session is None:
            return                                   # a reader holds no lock
        self.kv.txn([cmp_lease(key, self.session.lease)], [op_delete(key)], what=f"unlock ledger {ledger_id}")

    def lock_holder_of(self, ledger_id: int) -> str | None:
        found = self.kv.get(self._lock_key(ledger_id))
        return None if found is None else parse_lock(found.value)

    def locked(self) -> set[int]:
        start, end = self.locks_range
        found, _ = self.kv.range(start, end, keys_only=True)
        return {lid for kv in found if (lid := _id_of(kv.key, start)) is not None}

    # --- enable / disable -----------------------------------------------------------------------------
    def _read(self, key: bytes, watch: Watch | None) -> KeyValue | None:
        kvs, revision = self.kv.range(key, None)
        if watch is not None:
            self._watches.add(key, revision, watch)
        return kvs[0] if kvs else None

    def is_enabled(self, watch: Watch | None = None) -> bool:
        return self._read(self.keys.ur("disable"), watch) is None

    def disable(self) -> None:
        self.ensure_layout()
        key = self.keys.ur("disable")
        if not self.kv.txn([cmp_absent(key)], [op_put(key, b"")], what="disable AutoRecovery").succeeded:
            raise ReplicationUnavailableError("AutoRecovery is already disabled!")

    def enable(self) -> None:
        if self.kv.delete(self.keys.ur("disable")) == 0:
            raise ReplicationUnavailableError("AutoRecovery is already enabled!")

    # --- lostBookieRecoveryDelay ----------------------------------------------------------------------
    def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        key = self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY)
        self.kv.txn([cmp_absent(key)], [op_put(key, check_recovery_delay(seconds).encode("ascii"))],
                    what="initialize lostBookieRecoveryDelay")

    def get_lost_bookie_recovery_delay(self, watch: Watch | None = None) -> int | None:
        found = self._read(self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY), watch)
        return None if found is None else int(found.value.decode("ascii"))

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        # A put of the same value is still an etcd event: the auditor's watch fires (triggerAudit).
        self.kv.put(self.keys.ur(LOST_BOOKIE_RECOVERY_DELAY), check_recovery_delay(seconds).encode("ascii"))

    # --- the checks' last runs ------------------------------------------------------------------------
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


# --- the election -----------------------------------------------------------------------------------------

class EtcdAuditorElection(AuditorElection):
    """One candidate (`bookie_id`) or an observer (None: current_auditor only, never votes). The vote's key
    names the lease it lives on and this candidate, so a candidate whose lease was replaced votes again
    under a new key (behind the others), and two candidates on one session never share a vote."""

    def __init__(self, kv: EtcdKV, keys: EtcdKeys, session: EtcdSession | None, bookie_id: str | None = None):
        self.kv, self.keys, self.session = kv, keys, session
        self.bookie_id = bookie_id
        self.prefix, self.prefix_end = EtcdKeys.children(keys.ur(ELECTION))
        self._token = uuid.uuid4().hex[:12].encode("ascii")
        self.vote: bytes | None = None
        self.is_auditor = False
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._watch: EtcdWatch | None = None
        self._closed = False
        # A replaced lease took our vote: run a round now rather than when the next vote goes.
        self._forget_listener = (session.on_new_lease(lambda _lease: self.wake.set())
                                 if bookie_id is not None and session is not None else None)

    def close(self) -> None:
        """Stop watching the votes (the vote itself goes with the session, or `withdraw`)."""
        with self._lock:
            self._closed = True
        self._cancel_watch()
        if self._forget_listener is not None:
            self._forget_listener()
            self._forget_listener = None

    def _cancel_watch(self) -> None:
        with self._lock:
            handle, self._watch = self._watch, None
        if handle is not None:
            handle.cancel()

    def _votes(self) -> tuple[list[KeyValue], int]:
        kvs, revision = self.kv.range(self.prefix, self.prefix_end)
        return sorted(kvs, key=lambda kv: kv.create_revision), revision

    def current_auditor(self) -> str | None:
        votes, _ = self._votes()
        return parse_vote(votes[0].value) if votes else None

    def _ensure_vote(self) -> bytes:
        if self.bookie_id is None or self.session is None:
            raise ValueError("an observer of the auditor election (no bookie id or no session) cannot vote")
        lease = self.session.lease
        key = self.prefix + b"V_%016x_%s" % (lease, self._token)
        created = self.kv.txn([cmp_absent(key)], [op_put(key, encode_vote(self.bookie_id), lease)],
                              what=f"vote {self.bookie_id} in the auditor election").succeeded
        self.vote = key
        if created:
            log.info("auditor election: %s voted %s", self.bookie_id, key.decode())
        return key

    def run_once(self) -> bool:
        """One round: (re)vote; True if our vote is the earliest living one. Every vote deleted after this
        round's read (ours, or one ahead of ours) sets `wake`."""
        self.wake.clear()
        vote = self._ensure_vote()
        votes, revision = self._votes()
        self._watch_from(revision)
        if not any(kv.key == vote for kv in votes):
            self.vote = None             # gone between the put and the read (the lease expired): next round
            self.is_auditor = False
            self.wake.set()
            return False
        won = votes[0].key == vote
        if won and not self.is_auditor:
            log.info("auditor election: %s is the auditor (vote %s)", self.bookie_id, vote.decode())
        self.is_auditor = won
        return won

    def _watch_from(self, revision: int) -> None:
        """Watch every vote after `revision`, replacing the previous round's watch. Only deletions can
        change the outcome: a new vote is always created behind the living ones."""
        resets = itertools.count()

        def on_events(events: list[WatchEvent]) -> None:
            if any(e.deleted for e in events):
                self.wake.set()

        def on_reset() -> int:
            if not next(resets):
                return revision
            # The stream broke: deletions may have gone unseen, and our old revision may be compacted.
            self.wake.set()
            return self.kv.range(self.prefix, self.prefix_end, keys_only=True, limit=1)[1]

        handle = self.kv.watch(self.prefix, self.prefix_end, on_events, on_reset, name="etcd-election")
        old: EtcdWatch | None
        with self._lock:
            if self._closed:             # closed while this round ran: nobody waits on this watch
                old = handle
            else:
                old, self._watch = self._watch, handle
        if old is not None:
            old.cancel()

    def withdraw(self) -> None:
        if self.vote is not None:
            self.kv.delete(self.vote)
        self.vote = None
        self.is_auditor = False
        self._cancel_watch()
