"""`bkfast shell` recovery commands: recover (manual re-replication off failed bookies), autorecovery,
listunderreplicated, whoisauditor, triggeraudit, lostbookierecoverydelay, decommissionbookie. Thin: the work
is in bkfast.replication."""

from __future__ import annotations

import contextlib
import sys
import time

import click

from .shell_common import (
    BOOKIE_ID,
    BOOKIE_IDS,
    LEDGER_ID,
    client_of,
    common_options,
    emit,
    json_option,
    replication_of,
    zk_of,
)

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
@click.argument("bookies", type=BOOKIE_IDS)
@click.option("--target", "target_bookie", type=BOOKIE_ID, default=None, metavar="BOOKIE_ID",
              help="Copy to this bookie (default: placement policy)")
@click.option("--dry-run", "-dr", "dry_run", is_flag=True, help="Print the plan, change nothing")
@click.option("--skip-open-ledgers", "-sk", "skip_open", is_flag=True, help="Leave OPEN ledgers alone")
@click.option("--ledger", "-l", "ledger_id", type=LEDGER_ID, default=None,
              help="Only this ledger (scope 0)")
@click.option("--rate", "rate", type=int, default=None, metavar="BYTES/S",
              help="Copy at most this many bytes per second (default: replicationRateByBytes, -1 = unlimited)")
@json_option
def recover(target, bookies, target_bookie, dry_run, skip_open, ledger_id, rate, as_json):
    """Re-replicate every ledger with data on BOOKIE_ID[,BOOKIE_ID...] to other bookies (exit 0 only if
    every ledger is fully replicated)."""
    from bkfast.ids import LedgerId
    from bkfast.replication.recover import recover_bookies_blocking

    rate_bytes = rate if rate is not None else target.conf.get("replicationRateByBytes")
    with client_of(target) as bk, _recovery_bar(not as_json) as bar:
        out = recover_bookies_blocking(bk, bookies, target=target_bookie, dry_run=dry_run, skip_open=skip_open,
                                       ledger=LedgerId(0, ledger_id) if ledger_id is not None else None,
                                       rate_bytes=rate_bytes, progress=bar)
    emit(out, as_json, _summary_lines)
    if not out["ok"]:
        sys.exit(1)


@click.command()
@common_options
@click.option("--enable", "-e", "enable", is_flag=True, help="Enable re-replication")
@click.option("--disable", "-d", "disable", is_flag=True, help="Disable re-replication (auditor and workers wait)")
@click.option("--status", "-s", "status", is_flag=True, help="Print whether it is enabled (the default)")
@json_option
def autorecovery(target, enable, disable, status, as_json):
    """Enable, disable or show AutoRecovery (the underreplication/disable znode)."""
    from bkfast.replication import admin_ops

    if sum((enable, disable, status)) > 1:
        raise click.UsageError("give one of --enable, --disable, --status")
    with replication_of(target) as (urm, _election):
        if enable or disable:
            out = admin_ops.set_autorecovery(urm, enable)
        else:
            out = admin_ops.autorecovery_status(urm)
    emit(out, as_json, lambda o: f"autorecovery is {'enabled' if o['enabled'] else 'disabled'}")


@click.command()
@common_options
@click.option("--missing-replica", "-mr", "missing", type=BOOKIE_ID, default=None, metavar="BOOKIE_ID",
              help="Only ledgers missing this bookie")
@click.option("--excluding-missing-replica", "-emr", "excluding", type=BOOKIE_ID, default=None, metavar="BOOKIE_ID",
              help="Only ledgers not missing this bookie")
@click.option("--print-missing-replica", "-pmr", "print_missing", is_flag=True, help="Print the missing bookies")
@json_option
def listunderreplicated(target, missing, excluding, print_missing, as_json):
    """List the ledgers marked under-replicated."""
    from bkfast.replication import admin_ops

    with replication_of(target) as (urm, _election):
        rows = admin_ops.list_under_replicated(urm, missing, excluding)

    def text(rows):
        if not rows:
            yield "no under-replicated ledgers"
        for r in rows:
            line = str(r["ledgerId"])
            if print_missing:
                line += "\t" + ",".join(r["missingReplicas"])
                if r["beingReplicatedBy"]:
                    line += f"\t(being replicated by {r['beingReplicatedBy']})"
            yield line

    emit(rows, as_json, text)


@click.command()
@common_options
@json_option
def whoisauditor(target, as_json):
    """Print the elected auditor."""
    from bkfast.replication import admin_ops

    with replication_of(target) as (_urm, election):
        auditor = admin_ops.who_is_auditor(election)
    emit({"auditor": auditor}, as_json, lambda o: f"Auditor: {o['auditor']}" if o["auditor"] else "no auditor elected")


@click.command()
@common_options
@json_option
def triggeraudit(target, as_json):
    """Make the auditor audit the bookies now."""
    from bkfast.replication import admin_ops

    with replication_of(target) as (urm, election):
        out = admin_ops.trigger_audit(urm, election)
    emit(out, as_json, lambda o: f"audit triggered on {o['auditor']}")


@click.command()
@common_options
@click.option("--get", "-g", "get", is_flag=True, help="Print the delay (the default)")
@click.option("--set", "-s", "seconds", type=int, default=None, metavar="SECONDS", help="Set the delay")
@json_option
def lostbookierecoverydelay(target, get, seconds, as_json):
    """Get or set lostBookieRecoveryDelay (seconds before a lost bookie's ledgers are marked)."""
    from bkfast.replication import admin_ops

    if get and seconds is not None:
        raise click.UsageError("give --get or --set, not both")
    with replication_of(target) as (urm, _election):
        if seconds is not None:
            value = admin_ops.set_lost_bookie_recovery_delay(urm, seconds)
        else:
            value = admin_ops.get_lost_bookie_recovery_delay(urm)
    emit({"lostBookieRecoveryDelay": value}, as_json,
         lambda o: f"lostBookieRecoveryDelay value: {o['lostBookieRecoveryDelay']}")


@click.command()
@common_options
@click.argument("bookie_id", type=BOOKIE_ID)
@json_option
def decommissionbookie(target, bookie_id, as_json):
    """Re-replicate every ledger off BOOKIE_ID, then remove its cookie."""
    from bkfast.meta.zk_underreplication import ZkUnderReplicationManager
    from bkfast.replication import admin_ops

    with client_of(target) as bk, zk_of(target) as (zk, root, _layout), _recovery_bar(not as_json) as bar:
        out = admin_ops.decommission_bookie(bk, ZkUnderReplicationManager(zk, root), bookie_id, progress=bar)
    emit(out, as_json, lambda o: (f"decommissioned {o['bookieId']}: {o['ledgersReplicated']} ledgers, "
                                  f"{o['entriesCopied']} entries re-replicated; cookie "
                                  f"{'deleted' if o['cookieDeleted'] else 'was absent'}"
                                  + ("; the bookie is still registered: stop it" if o["stillRegistered"] else "")))


COMMANDS = [recover, autorecovery, listunderreplicated, whoisauditor, triggeraudit, lostbookierecoverydelay,
            decommissionbookie]
