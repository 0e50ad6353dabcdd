"""The AutoRecovery admin operations shared by `bkfast shell` and the HTTP admin API (blocking): enable /
disable / status, the list of under-replicated ledgers, the current auditor, triggerAudit,
lostBookieRecoveryDelay, and decommissioning a bookie. They take the metadata driver's interfaces
(bkfast.meta.underreplication: `urm`, an UnderReplicationManager; `election`, an AuditorElection observer),
never a store's client. Operator mistakes raise AdminError (one line)."""

from __future__ import annotations

import time

from bkfast.errors import AdminError
from bkfast.meta.underreplication import AuditorElection, ReplicationUnavailableError, UnderReplicationManager

__all__ = ["autorecovery_status", "set_autorecovery", "list_under_replicated", "who_is_auditor", "trigger_audit",
           "get_lost_bookie_recovery_delay", "set_lost_bookie_recovery_delay", "decommission_bookie"]


def autorecovery_status(urm: UnderReplicationManager) -> dict:
    return {"enabled": urm.is_enabled()}


def set_autorecovery(urm: UnderReplicationManager, enabled: bool) -> dict:
    """Enable or disable re-replication; AdminError if already so."""
    try:
        urm.enable() if enabled else urm.disable()
    except ReplicationUnavailableError as err:
        raise AdminError(str(err)) from None
    return {"enabled": enabled}


def list_under_replicated(urm: UnderReplicationManager, missing_replica: str | None = None,
                          excluding_missing_replica: str | None = None) -> list[dict]:
    """Marked ledgers (sorted) with their missing replicas, ctime and the worker holding the lock, optionally
    only those missing (or not missing) a given bookie."""
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


def who_is_auditor(election: AuditorElection) -> str | None:
    return election.current_auditor()


def trigger_audit(urm: UnderReplicationManager, election: AuditorElection) -> dict:
    """Java's triggerAudit: needs replication enabled and an elected auditor."""
    if not urm.is_enabled():
        raise AdminError("autorecovery is disabled: enable it first (bkfast shell autorecovery --enable)")
    auditor = election.current_auditor()
    if auditor is None:
        raise AdminError("no auditor is elected: start autorecovery (autoRecoveryDaemonEnabled=true or "
                         "bkfast autorecovery)")
    urm.trigger_audit()
    return {"auditor": auditor, "triggered": True}


def get_lost_bookie_recovery_delay(urm: UnderReplicationManager) -> int:
    value = urm.get_lost_bookie_recovery_delay()
    if value is None:
        raise AdminError("lostBookieRecoveryDelay is not set yet: no auditor has run on this cluster")
    return value


def set_lost_bookie_recovery_delay(urm: UnderReplicationManager, seconds: int) -> int:
    if seconds < 0:
        raise AdminError(f"lostBookieRecoveryDelay must be >= 0 seconds, got {seconds}")
    urm.set_lost_bookie_recovery_delay(seconds)
    return seconds


def decommission_bookie(client, urm: UnderReplicationManager, bookie_id: str, timeout_s: float = 3600.0,
                        progress=None) -> dict:
    """Re-replicate every ledger off `bookie_id` (live or not), check that no ledger and no mark lists it
    any more, then delete its cookie. `client` is a blocking BookKeeper (its metadata driver answers for the
    cookie and the registration)."""
    from bkfast.client.blocking import call_in_reactor

    from .recover import recover_bookies_blocking

    driver = client.async_client.driver

    def ask(fn, *args):
        return call_in_reactor(60.0, lambda: fn(*args))

    if not ask(driver.bookie_cookie_exists, bookie_id) and not _registered(ask, driver, bookie_id):
        raise AdminError(f"{bookie_id} is not a bookie of this cluster (no cookie, not registered)")
    started = time.monotonic()
    out = recover_bookies_blocking(client, [bookie_id], timeout_s, progress=progress)
    if not out["ok"]:
        failed = [row["ledgerId"] for row in out["ledgers"] if row["status"] in ("failed", "entries-lost")]
        raise AdminError(f"decommission of {bookie_id} stopped: ledgers {failed} could not be re-replicated; "
                         "its cookie is kept")
    for row in list_under_replicated(urm, missing_replica=bookie_id):
        urm.unmark(row["ledgerId"])                    # every ledger is off the bookie now: the marks are stale
    cookie_deleted = ask(driver.delete_bookie_cookie, bookie_id)
    return {"bookieId": bookie_id, "ledgersReplicated": out["ledgersReplicated"],
            "entriesCopied": out["entriesCopied"], "bytesCopied": out["bytesCopied"], "cookieDeleted": cookie_deleted,
            "stillRegistered": _registered(ask, driver, bookie_id),
            "elapsedSeconds": round(time.monotonic() - started, 3)}


def _registered(ask, driver, bookie_id: str) -> bool:
    return any(bookie_id in ask(driver.get_bookies, read_only) for read_only in (False, True))
