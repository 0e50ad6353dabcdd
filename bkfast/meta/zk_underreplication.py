"""The under-replication znodes of Java's ZkLedgerUnderreplicationManager (spec §5.6, §7.1), byte for byte:
the ZooKeeper implementation of `bkfast.meta.underreplication.UnderReplicationManager`.

Owns, under `<root>/underreplication`: LAYOUT (text `type: "BASIC"\\nversion: 1\\n`), the marks
`ledgers/<4 hex groups>/urL%010d` (text UnderreplicatedLedgerFormat: replica lines then ctime), the
ephemeral worker locks `locks/urL%010d` (text LockDataFormat with the worker's host name), the `disable`
node, `lostBookieRecoveryDelay` (decimal ASCII) and the three ctime nodes (binary protobuf, field 1 = epoch
ms). Everything is blocking kazoo: callers are the auditor / worker threads and the shell, never the
reactor thread. The election votes are in `zk_election`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from google.protobuf import text_format
from google.protobuf.message import Message
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError

from bkfast.proto import DataFormats_pb2 as df

from .underreplication import (
    CHECK_ALL_LEDGERS_CTIME,
    PLACEMENT_POLICY_CHECK_CTIME,
    REPLICAS_CHECK_CTIME,
    MarkInfo,
    ReplicationUnavailableError,
    UnderReplicationManager,
    Watch,
    check_recovery_delay,
)

__all__ = ["ZkUnderReplicationManager", "ReplicationUnavailableError", "mark_relative_path", "encode_mark",
           "parse_mark", "encode_lock", "encode_vote", "parse_vote", "LAYOUT_DATA", "BASE", "CTIME_NODES"]

log = logging.getLogger(__name__)

BASE = "underreplication"
LAYOUT_DATA = b'type: "BASIC"\nversion: 1\n'
LOST_BOOKIE_RECOVERY_DELAY = "lostBookieRecoveryDelay"
DISABLE = "disable"
# check name -> (its node under `underreplication`, the protobuf stored there, the field holding epoch ms)
CTIME_NODES: dict[str, tuple[str, type[Message], str]] = {
    CHECK_ALL_LEDGERS_CTIME: ("checkallledgersctime", df.CheckAllLedgersFormat, "checkAllLedgersCTime"),
    PLACEMENT_POLICY_CHECK_CTIME: ("placementpolicycheckctime", df.PlacementPolicyCheckFormat,
                                   "placementPolicyCheckCTime"),
    REPLICAS_CHECK_CTIME: ("replicascheckctime", df.ReplicasCheckFormat, "replicasCheckCTime"),
}


# --- payloads ---------------------------------------------------------------------------------------------

def _text(message) -> bytes:
    return text_format.MessageToString(message).encode("utf-8")


def encode_mark(replicas, ctime: int | None) -> bytes:
    msg = df.UnderreplicatedLedgerFormat()
    msg.replica.extend(replicas)
    if ctime is not None:
        msg.ctime = ctime
    return _text(msg)


def _parsed(data: bytes, cls):
    msg = cls()
    text_format.Parse(data.decode("utf-8"), msg)
    return msg


def parse_mark(data: bytes) -> tuple[list[str], int]:
    """(missing replicas, ctime or -1)."""
    msg = _parsed(data, df.UnderreplicatedLedgerFormat)
    return list(msg.replica), msg.ctime if msg.HasField("ctime") else -1


def encode_lock(holder: str) -> bytes:
    return _text(df.LockDataFormat(bookieId=holder))


def parse_lock(data: bytes) -> str:
    return _parsed(data, df.LockDataFormat).bookieId


def encode_vote(bookie_id: str) -> bytes:
    return _text(df.AuditorVoteFormat(bookieId=bookie_id))


def parse_vote(data: bytes) -> str:
    return _parsed(data, df.AuditorVoteFormat).bookieId


def mark_relative_path(ledger_id: int) -> str:
    """`<a>/<b>/<c>/<d>/urL%010d`: the four 16-bit groups of the id as %04x, the decimal id in the name."""
    groups = [(ledger_id >> shift) & 0xFFFF for shift in (48, 32, 16, 0)]
    return "/".join(f"{g:04x}" for g in groups) + f"/urL{ledger_id:010d}"


def _ledger_of(name: str) -> int | None:
    if not name.startswith("urL"):
        return None
    try:
        return int(name[3:])
    except ValueError:
        return None


class ZkUnderReplicationManager(UnderReplicationManager):
    """Blocking access to `<root>/underreplication` through a started kazoo client (see the module doc).

    `store_ctime` is storeSystemTimeAsLedgerUnderreplicatedMarkTime; `lock_holder` the text put in lock nodes
    (Java: the host name)."""

    def __init__(self, zk, root: str, *, store_ctime: bool = True, lock_holder: str | None = None,
                 clock_ms: Callable[[], int] | None = None):
        self.zk = zk
        self.root = root.rstrip("/")
        self.base = f"{self.root}/{BASE}"
        self.ledgers_path = f"{self.base}/ledgers"
        self.locks_path = f"{self.base}/locks"
        self.store_ctime = store_ctime
        self.lock_holder = lock_holder or socket.gethostname()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._layout_checked = False

    # --- layout ---------------------------------------------------------------------------------------
    def ensure_layout(self) -> None:
        """Create base, LAYOUT, ledgers/ and locks/ if absent (as Java's manager does); refuse another layout."""
        if self._layout_checked:
            return
        zk = self.zk
        zk.ensure_path(self.base)
        layout = f"{self.base}/LAYOUT"
        try:
            zk.create(layout, LAYOUT_DATA)
        except NodeExistsError:
            data, _ = zk.get(layout)
            try:
                msg = _parsed(data, df.LedgerRereplicationLayoutFormat)
            except (text_format.ParseError, UnicodeDecodeError) as err:
                raise ReplicationUnavailableError(f"unreadable {layout}: {err}") from None
            if msg.type != "BASIC" or msg.version != 1:
                raise ReplicationUnavailableError(
                    f"{layout} says type {msg.type!r} version {msg.version}; only BASIC version 1 is supported"
                ) from None
        for path in (self.ledgers_path, self.locks_path):
            zk.ensure_path(path)
        self._layout_checked = True

    # --- marks ----------------------------------------------------------------------------------------
    def mark_path(self, ledger_id: int) -> str:
        return f"{self.ledgers_path}/{mark_relative_path(ledger_id)}"

    def lock_path(self, ledger_id: int) -> str:
        return f"{self.locks_path}/urL{ledger_id:010d}"

    def _now_ms(self) -> int | None:
        return self._clock_ms() if self.store_ctime else None

    def mark(self, ledger_id: int, replicas) -> bool:
        """Java's markLedgerUnderreplicated: create the mark, or append the replicas it does not list yet and
        refresh ctime (setData on the read version). Returns whether anything was written."""
        self.ensure_layout()
        path = self.mark_path(ledger_id)
        replicas = list(dict.fromkeys(replicas))
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, encode_mark(replicas, self._now_ms()), makepath=True)
                    return True
                except NodeExistsError:
                    continue
            existing, _ctime = parse_mark(data)
            new = [r for r in replicas if r not in existing]
            if not new:
                return False
            try:
                self.zk.set(path, encode_mark(existing + new, self._now_ms()), version=stat.version)
                return True
            except BadVersionError:
                continue
            except NoNodeError:
                continue

    def mark_many(self, ledger_ids, replicas, window: int = 1000, batch: int = 200) -> int:
        """`mark(id, replicas)` for many ledgers, fast: the missing upper directories are created level by level
        (pipelined), then each unmarked ledger's last directory and mark go in ZooKeeper multi transactions of
        `batch` ledgers (one commit each), `window` ops in flight; a ledger already marked, or a transaction
        that fails (a concurrent writer), goes through `mark` (append + refresh). Returns marks written."""
        self.ensure_layout()
        ids = list(dict.fromkeys(ledger_ids))
        data = encode_mark(list(dict.fromkeys(replicas)), self._now_ms())
        already = set(self.list_marked())
        fresh = [i for i in ids if i not in already]
        paths = [self.mark_path(i) for i in fresh]
        for depth in range(1, 4):
            dirs = sorted({p.rsplit("/", 5 - depth)[0] for p in paths})
            self._create_many([(d, b"") for d in dirs], window)
        written = 0
        retry = [i for i in ids if i in already]
        chunks = [fresh[k:k + batch] for k in range(0, len(fresh), batch)]
        per_round = max(1, window // (2 * batch))
        for start in range(0, len(chunks), per_round):
            pending = []
            for chunk in chunks[start:start + per_round]:
                txn = self.zk.transaction()
                for ledger_id in chunk:
                    path = self.mark_path(ledger_id)
                    txn.create(path.rsplit("/", 1)[0], b"")
                    txn.create(path, data)
                pending.append((chunk, txn.commit_async()))
            for chunk, ar in pending:
                results = ar.get(timeout=60)
                if any(isinstance(r, Exception) for r in results):
                    retry.extend(chunk)
                else:
                    written += len(chunk)
        for ledger_id in retry:
            written += bool(self.mark(ledger_id, replicas))
        return written

    def _create_many(self, items: list[tuple[str, bytes]], window: int) -> None:
        for start in range(0, len(items), window):
            pending = [self.zk.create_async(path, data) for path, data in items[start:start + window]]
            for ar in pending:
                try:
                    ar.get(timeout=60)
                except NodeExistsError:
                    pass

    def get_mark(self, ledger_id: int) -> MarkInfo | None:
        try:
            data, stat = self.zk.get(self.mark_path(ledger_id))
        except NoNodeError:
            return None
        replicas, ctime = parse_mark(data)
        return MarkInfo(ledger_id, tuple(replicas), ctime, stat.version)

    def list_marked(self) -> list[int]:
        """Every marked ledger id, walking the 4 levels breadth-first with pipelined child reads."""
        level = [self.ledgers_path]
        for _depth in range(4):
            level = [f"{p}/{c}" for p, kids in self._children_many(level) for c in kids]
        ids: list[int] = []
        for _p, kids in self._children_many(level):
            ids.extend(i for i in map(_ledger_of, kids) if i is not None)
        return ids

    def list_marks(self) -> dict[int, MarkInfo]:
        """ledger id -> MarkInfo for every mark. The ids come from the 4th-level directory names (the hex
        groups of the id), so each mark costs one pipelined read; a directory without its mark is skipped."""
        level = [self.ledgers_path]
        for _depth in range(3):
            level = [f"{p}/{c}" for p, kids in self._children_many(level) for c in kids]
        ids = []
        for path, kids in self._children_many(level):
            groups = path.rsplit("/", 3)[-3:]
            for name in kids:
                try:
                    parts = [int(g, 16) for g in (*groups, name)]
                except ValueError:
                    continue
                ids.append((parts[0] << 48) | (parts[1] << 32) | (parts[2] << 16) | parts[3])
        out = {}
        for start in range(0, len(ids), 5000):
            pending = [(i, self.zk.get_async(self.mark_path(i))) for i in ids[start:start + 5000]]
            for ledger_id, ar in pending:
                try:
                    data, stat = ar.get(timeout=60)
                except NoNodeError:
                    continue
                replicas, ctime = parse_mark(data)
                out[ledger_id] = MarkInfo(ledger_id, tuple(replicas), ctime, stat.version)
        return out

    def _children_many(self, paths: list[str]) -> list[tuple[str, list[str]]]:
        pending = [(p, self.zk.get_children_async(p)) for p in paths]
        out = []
        for path, ar in pending:
            try:
                out.append((path, ar.get(timeout=30)))
            except NoNodeError:
                out.append((path, []))
        return out

    def mark_replicated(self, ledger_id: int, version: int) -> bool:
        """Java's markLedgerReplicated: delete the mark if it is still at `version` (a newer version means it
        was re-marked and stays), prune empty parent directories, release the lock. True if deleted."""
        path = self.mark_path(ledger_id)
        deleted = False
        try:
            self.zk.delete(path, version=version)
            deleted = True
        except NoNodeError:
            deleted = True
        except BadVersionError:
            log.info("ledger %d was marked again while being replicated; the mark stays", ledger_id)
        if deleted:
            parent = path
            for _ in range(4):
                parent = parent.rsplit("/", 1)[0]
                try:
                    self.zk.delete(parent)
                except (NotEmptyError, NoNodeError):
                    break
        self.release_lock(ledger_id)
        return deleted

    # --- locks ----------------------------------------------------------------------------------------
    def try_lock(self, ledger_id: int) -> bool:
        """Create the ephemeral lock; False if another worker holds it.

        A create whose answer was lost with the connection may have happened: then this session holds the
        lock and no other worker could take the mark while the session lives. So after a ConnectionLoss the
        lock counts as ours exactly when its node is owned by this session."""
        self.ensure_layout()
        path = self.lock_path(ledger_id)
        try:
            self.zk.create(path, encode_lock(self.lock_holder), ephemeral=True)
            return True
        except NodeExistsError:
            return False
        except ConnectionLoss:
            stat = self._retry_on_connection_loss(self.zk.exists, path)
            session = self.zk.client_id
            return stat is not None and session is not None and stat.ephemeralOwner == session[0]

    def release_lock(self, ledger_id: int) -> None:
        """Delete the lock; retried while the connection is lost (a lock left behind by a live session would
        keep every worker away from the mark)."""
        try:
            self._retry_on_connection_loss(self.zk.delete, self.lock_path(ledger_id))
        except NoNodeError:
            pass

    def _retry_on_connection_loss(self, fn, *args, attempts: int = 60, pause_s: float = 0.5):
        for attempt in range(attempts):
            try:
                return fn(*args)
            except ConnectionLoss:
                if attempt == attempts - 1:
                    raise
                time.sleep(pause_s)
        return None

    def lock_holder_of(self, ledger_id: int) -> str | None:
        try:
            data, _ = self.zk.get(self.lock_path(ledger_id))
        except NoNodeError:
            return None
        return parse_lock(data)

    def locked(self) -> set[int]:
        try:
            kids = self.zk.get_children(self.locks_path)
        except NoNodeError:
            return set()
        return {i for i in map(_ledger_of, kids) if i is not None}

    # --- enable / disable -----------------------------------------------------------------------------
    @property
    def disable_path(self) -> str:
        return f"{self.base}/{DISABLE}"

    def is_enabled(self, watch: Watch | None = None) -> bool:
        return self.zk.exists(self.disable_path, watch=_kazoo_watch(watch)) is None

    def disable(self) -> None:
        self.ensure_layout()
        try:
            self.zk.create(self.disable_path, b"")
        except NodeExistsError:
            raise ReplicationUnavailableError("AutoRecovery is already disabled!") from None

    def enable(self) -> None:
        try:
            self.zk.delete(self.disable_path)
        except NoNodeError:
            raise ReplicationUnavailableError("AutoRecovery is already enabled!") from None

    # --- lostBookieRecoveryDelay ------------------------------------------------------------------------
    @property
    def delay_path(self) -> str:
        return f"{self.base}/{LOST_BOOKIE_RECOVERY_DELAY}"

    def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Create the node from the conf value if absent (the auditor does this at start)."""
        self.zk.ensure_path(self.base)
        try:
            self.zk.create(self.delay_path, str(int(seconds)).encode("ascii"))
        except NodeExistsError:
            pass

    def get_lost_bookie_recovery_delay(self, watch: Watch | None = None) -> int | None:
        try:
            data, _ = self.zk.get(self.delay_path, watch=_kazoo_watch(watch))
        except NoNodeError:
            return None
        return int(data.decode("ascii"))

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        data = check_recovery_delay(seconds).encode("ascii")
        try:
            self.zk.set(self.delay_path, data)
        except NoNodeError:
            self.zk.ensure_path(self.base)
            self.zk.create(self.delay_path, data)

    # --- ctime nodes ------------------------------------------------------------------------------------
    def get_ctime(self, name: str) -> int:
        """Epoch ms stored in a ctime node; -1 when absent."""
        node, cls, field = CTIME_NODES[name]
        try:
            data, _ = self.zk.get(f"{self.base}/{node}")
        except NoNodeError:
            return -1
        msg = cls()
        msg.ParseFromString(data)
        return getattr(msg, field) if msg.HasField(field) else -1

    def set_ctime(self, name: str, epoch_ms: int) -> None:
        node, cls, field = CTIME_NODES[name]
        data = cls(**{field: int(epoch_ms)}).SerializeToString()
        path = f"{self.base}/{node}"
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.ensure_path(self.base)
            try:
                self.zk.create(path, data)
            except NodeExistsError:
                self.zk.set(path, data)


def _kazoo_watch(watch: Watch | None):
    """The interface's watch (no argument) as kazoo's (one WatchedEvent)."""
    return None if watch is None else (lambda _event: watch())
