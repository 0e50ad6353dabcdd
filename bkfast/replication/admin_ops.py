"""The AutoRecovery admin operations shared by `bkfast shell` and the HTTP admin API (blocking, kazoo):
enable / disable / status, the list of under-replicated ledgers, the current auditor, triggerAudit,
lostBookieRecoveryDelay, and decommissioning a bookie. Operator mistakes raise AdminError (one line)."""

from __future__ import annotations

import time

from kazoo.exceptions import NoNodeError

from bkfast.errors import AdminError

from .election import current_auditor
from .zk_urm import ReplicationUnavailableError, UnderReplicationManager

__all__ = ["autorecovery_status", "set_autorecovery", "list_under_replicated", "who_is_auditor", "trigger_audit",
           "get_lost_bookie_recovery_delay", "set_lost_bookie_recovery_delay", "decommission_bookie"]


def autorecovery_status(zk, root: str) -> dict:
    return {"enabled": UnderReplicationManager(zk, root).is_enabled()}


def set_autorecovery(zk, root: str, enabled: bool) -> dict:
    """Delete (enable) or create (disable) the `disable` znode; AdminError if already so."""
    urm = UnderReplicationManager(zk, root)
    try:
        urm.enable() if enabled else urm.disable()
    except ReplicationUnavailableError as err:
        raise AdminError(str(err)) from None
    return {"enabled": enabled}


def list_under_replicated(zk, root: str, missing_replica: str | None = None,
                          excluding_missing_replica: str | None = None) -> list[dict]:
    """Marked ledgers (sorted) with their missing replicas, ctime and the worker holding the lock, optionally
    only those missing (or not missing) a given bookie."""
    urm = UnderReplicationManager(zk, root)
    if zk.exists(urm.ledgers_path) is None:
        return []
    marks = urm.list_marks()
    locked = urm.locked()
    rows = []
    for lid in sorted(marks):
        info = marks[lid]
        if missing_replica and missing_replica not in info.replicas:
            continue
        if excluding_missing_replica and excluding_missing_replica in info.replicas:
            continue
        rows.append({"ledgerId": lid, "missingReplicas": list(info.replicas), "ctime": info.ctime,
                     "beingReplicatedBy": urm.lock_holder_of(lid) if lid in locked else None})
    return rows


def who_is_auditor(zk, root: str) -> str | None:
    return current_auditor(zk, root)


def trigger_audit(zk, root: str) -> dict:
    """Java's triggerAudit: needs replication enabled and an elected auditor."""
    urm = UnderReplicationManager(zk, root)
    if not urm.is_enabled():
        raise AdminError("autorecovery is disabled: enable it first (bkfast shell autorecovery --enable)")
    auditor = current_auditor(zk, root)
    if auditor is None:
        raise AdminError("no auditor is elected: start autorecovery (autoRecoveryDaemonEnabled=true or "
                         "bkfast autorecovery)")
    urm.trigger_audit()
    return {"auditor": auditor, "triggered": True}


def get_lost_bookie_recovery_delay(zk, root: str) -> int:
    value = UnderReplicationManager(zk, root).get_lost_bookie_recovery_delay()
    if value is None:
        raise AdminError("lostBookieRecoveryDelay is not set yet: no auditor has run on this cluster")
    return value


def set_lost_bookie_recovery_delay(zk, root: str, seconds: int) -> int:
    if seconds < 0:
        raise AdminError(f"lostBookieRecoveryDelay must be >= 0 seconds, got {seconds}")
    UnderReplicationManager(zk, root).set_lost_bookie_recovery_delay(seconds)
    return seconds


def decommission_bookie(client, zk, root: str, bookie_id: str, timeout_s: float = 3600.0, progress=None) -> dict:
    """Re-replicate every ledger off `bookie_id` (live or not), check that no ledger and no mark lists it
    any more, then delete its cookie. `client` is a blocking BookKeeper."""
    from .recover import recover_bookies_blocking

    if zk.exists(f"{root}/cookies/{bookie_id}") is None and not _registered(zk, root, bookie_id):
        raise AdminError(f"{bookie_id} is not a bookie of this cluster (no cookie, not registered)")
    started = time.monotonic()
    out = recover_bookies_blocking(client, [bookie_id], timeout_s, progress=progress)
    if not out["ok"]:
        failed = [row["ledgerId"] for row in out["ledgers"] if row["status"] in ("failed", "entries-lost")]
        raise AdminError(f"decommission of {bookie_id} stopped: ledgers {failed} could not be re-replicated; "
                         "its cookie is kept")
    still = [row["ledgerId"] for row in list_under_replicated(zk, root, missing_replica=bookie_id)]
    urm = UnderReplicationManager(zk, root)
    for lid in still:                                  # every ledger is off the bookie now: the marks are stale
        urm.unmark(lid)
    try:
        zk.delete(f"{root}/cookies/{bookie_id}")
        cookie_deleted = True
    except NoNodeError:
        cookie_deleted = False
    return {"bookieId": bookie_id, "ledgersReplicated": out["ledgersReplicated"],
            "entriesCopied": out["entriesCopied"], "bytesCopied": out["bytesCopied"], "cookieDeleted": cookie_deleted,
            "stillRegistered": _registered(zk, root, bookie_id),
            "elapsedSeconds": round(time.monotonic() - started, 3)}


def _registered(zk, root: str, bookie_id: str) -> bool:
    return any(zk.exists(p) is not None for p in (f"{root}/available/{bookie_id}",
                                                   f"{root}/available/readonly/{bookie_id}"))
