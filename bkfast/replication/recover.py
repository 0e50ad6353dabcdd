"""Manual bookie recovery: `bkfast shell recover` and `PUT /api/v1/autorecovery/bookie` (Java's
BookKeeperAdmin.recoverBookieData, spec §7.7).

Owns the run over every ledger of every scope: validation (the failed bookies, the target), a bounded number
of ledgers handled at once (`rereplicate.rereplicate_ledger` each), progress (ledgers, entries, bytes) and the
summary. `recover_bookies` is async (reactor thread); `recover_bookies_blocking` wraps it for the shell.
"""

from __future__ import annotations

import time

from twisted.internet import defer

from bkfast.errors import AdminError
from bkfast.ids import LedgerId

from .copier import ByteRateLimiter
from .rereplicate import FAILED, LOST, OK, PLANNED, rereplicate_ledger

__all__ = ["recover_bookies", "recover_bookies_blocking", "list_all_ledgers"]

CONCURRENT_LEDGERS = 4


async def list_all_ledgers(bk) -> list[LedgerId]:
    """Every ledger of scope 0 and of every other scope the metadata driver lists."""
    ledgers = [LedgerId(0, i) for i in await bk.list_ledgers(0)]
    for scope in await bk.driver.list_scopes():
        ledgers += [LedgerId(scope, i) for i in await bk.list_ledgers(scope)]
    return ledgers


def _check_bookies(bk, failed: list[str], target: str | None) -> None:
    if not failed:
        raise AdminError("no bookie to recover: give BOOKIE_ID[,BOOKIE_ID...]")
    for bookie in failed:
        if ":" not in bookie:
            raise AdminError(f"{bookie!r} is not a bookie id (host:port)")
    if target is not None:
        if target in failed:
            raise AdminError(f"--target {target} is one of the bookies being recovered")
        if target not in bk.writable_bookies:
            raise AdminError(f"--target {target} is not a registered writable bookie "
                             f"(writable: {', '.join(sorted(bk.writable_bookies)) or 'none'})")


async def recover_bookies(bk, failed: list[str], *, target: str | None = None, dry_run: bool = False,
                          skip_open: bool = False, ledger: LedgerId | None = None, rate_bytes: int = -1,
                          progress=None) -> dict:
    """Re-replicate every ledger holding data on `failed`; returns the summary (see the module doc).
    `progress(ledgers_done, ledgers_total, entries, bytes)` is called as it advances."""
    _check_bookies(bk, failed, target)
    started = time.monotonic()
    ledgers = [ledger] if ledger is not None else await list_all_ledgers(bk)
    limiter = ByteRateLimiter(rate_bytes, bk.reactor) if rate_bytes and rate_bytes > 0 else None
    totals = {"entries": 0, "bytes": 0, "done": 0}
    outcomes = []

    def on_entry(nbytes: int) -> None:
        totals["entries"] += 1
        totals["bytes"] += nbytes
        if progress is not None and totals["entries"] % 100 == 0:
            progress(totals["done"], len(ledgers), totals["entries"], totals["bytes"])

    queue = iter(ledgers)

    async def worker():
        for lid in queue:
            outcome = await rereplicate_ledger(bk, lid, failed, target=target, dry_run=dry_run, skip_open=skip_open,
                                               limiter=limiter, on_entry=on_entry)
            outcomes.append(outcome)
            totals["done"] += 1
            if progress is not None:
                progress(totals["done"], len(ledgers), totals["entries"], totals["bytes"])

    await defer.gatherResults([defer.ensureDeferred(worker()) for _ in range(CONCURRENT_LEDGERS)],
                              consumeErrors=True).addErrback(lambda f: f.value.subFailure)
    affected = sorted((o for o in outcomes if o.status in (OK, LOST, FAILED, PLANNED) or o.fenced
                       or o.status == "skipped-open"), key=lambda o: (o.ledger.scope_id, o.ledger.ledger_id))
    elapsed = time.monotonic() - started
    nbytes = sum(o.stats.bytes for o in outcomes)
    nentries = sum(o.stats.entries for o in outcomes)
    failed_ledgers = [o for o in affected if o.status in (LOST, FAILED)]
    return {
        "bookies": list(failed),
        "dryRun": dry_run,
        "ledgersScanned": len(ledgers),
        "ledgersAffected": len(affected),
        "ledgersReplicated": sum(1 for o in affected if o.status == OK),
        "ledgersFailed": len(failed_ledgers),
        "ledgersSkippedOpen": sum(1 for o in affected if o.status == "skipped-open"),
        "ledgersFenced": sum(1 for o in affected if o.fenced),
        "entriesCopied": nentries,
        "bytesCopied": nbytes,
        "elapsedSeconds": round(elapsed, 3),
        "entriesPerSecond": round(nentries / elapsed, 1) if elapsed > 0 else 0.0,
        "megabytesPerSecond": round(nbytes / elapsed / 1e6, 2) if elapsed > 0 else 0.0,
        "ok": not failed_ledgers,
        "ledgers": [o.to_dict() for o in affected],
    }


def recover_bookies_blocking(client, failed: list[str], timeout_s: float = 24 * 3600.0, **kwargs) -> dict:
    """`recover_bookies` from a thread that is not the reactor's, through the blocking client `client`."""
    from bkfast.client.blocking import call_in_reactor

    return call_in_reactor(timeout_s, lambda: defer.ensureDeferred(recover_bookies(client.async_client, failed,
                                                                                   **kwargs)))
