"""`bkfast shell` recovery commands: recover (manual re-replication off failed bookies), autorecovery,
listunderreplicated, whoisauditor, triggeraudit, lostbookierecoverydelay, decommissionbookie. Thin: the work
is in bkfast.replication."""

from __future__ import annotations

import contextlib
import sys
import time

import click

from .shell_common import client_of, common_options, emit, json_option

__all__ = ["COMMANDS"]


@contextlib.contextmanager
def _recovery_bar(enabled: bool):
    """progress(ledgers_done, ledgers_total, entries, bytes) drawing ledgers, entries, bytes and the rate on a
    terminal; a callback that does nothing otherwise."""
    if not (enabled and sys.stdout.isatty() and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    started = time.monotonic()
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("recovering", total=None)

        def update(done, total, entries, nbytes):
            rate = nbytes / max(time.monotonic() - started, 1e-6) / 1e6
            bar.update(task, completed=done, total=total,
                       description=f"ledgers {done}/{total}  entries {entries}  {nbytes / 1e6:.1f} MB  "
                                   f"{rate:.1f} MB/s")

        yield update


def _summary_lines(out: dict):
    for row in out["ledgers"]:
        head = f"ledger {row['ledgerId']}: {row['status']}"
        if row["fenceRequired"]:
            head += " [fence required]"
        if row["fenced"]:
            head += " (fenced and recovered)"
        if row.get("error"):
            head += f": {row['error']}"
        yield head
        for seg in row["segments"]:
            failed = set(out["bookies"])
            old = ",".join(b + ("*" if b in failed else "") for b in seg["oldEnsemble"])
            last = "?" if seg["lastEntryId"] is None else seg["lastEntryId"]
            line = f"  entries {seg['firstEntryId']}..{last}: {old} -> {','.join(seg['newEnsemble'])}"
            if seg.get("lostEntries"):
                line += f"  LOST entries {seg['lostEntries'][:20]}{'...' if len(seg['lostEntries']) > 20 else ''}"
            yield line
    verb = "would re-replicate" if out["dryRun"] else "re-replicated"
    yield (f"{verb} {out['ledgersAffected']} of {out['ledgersScanned']} ledgers off {','.join(out['bookies'])}: "
           f"{out['ledgersReplicated']} done, {out['ledgersFailed']} failed, {out['ledgersSkippedOpen']} skipped open, "
           f"{out['ledgersFenced']} fenced; {out['entriesCopied']} entries, {out['bytesCopied']} bytes in "
           f"{out['elapsedSeconds']} s ({out['entriesPerSecond']} entries/s, {out['megabytesPerSecond']} MB/s)")


@click.command()
@common_options
@click.argument("bookies")
@click.option("--target", "target_bookie", default=None, metavar="BOOKIE_ID",
              help="Copy to this bookie (default: placement policy)")
@click.option("--dry-run", "-dr", "dry_run", is_flag=True, help="Print the plan, change nothing")
@click.option("--skip-open-ledgers", "-sk", "skip_open", is_flag=True, help="Leave OPEN ledgers alone")
@click.option("--ledger", "-l", "ledger_id", type=click.IntRange(0, 2**63 - 1), default=None,
              help="Only this ledger (scope 0)")
@click.option("--rate", "rate", type=int, default=None, metavar="BYTES/S",
              help="Copy at most this many bytes per second (default: replicationRateByBytes, -1 = unlimited)")
@json_option
def recover(target, bookies, target_bookie, dry_run, skip_open, ledger_id, rate, as_json):
    """Re-replicate every ledger with data on BOOKIE_ID[,BOOKIE_ID...] to other bookies (exit 0 only if
    every ledger is fully replicated)."""
    from bkfast.ids import LedgerId
    from bkfast.replication.recover import recover_bookies_blocking

    failed = [b.strip() for b in bookies.split(",") if b.strip()]
    rate_bytes = rate if rate is not None else target.conf.get("replicationRateByBytes")
    with client_of(target) as bk, _recovery_bar(not as_json) as bar:
        out = recover_bookies_blocking(bk, failed, target=target_bookie, dry_run=dry_run, skip_open=skip_open,
                                       ledger=LedgerId(0, ledger_id) if ledger_id is not None else None,
                                       rate_bytes=rate_bytes, progress=bar)
    emit(out, as_json, _summary_lines)
    if not out["ok"]:
        sys.exit(1)


COMMANDS = [recover]
