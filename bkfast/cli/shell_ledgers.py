"""`bkfast shell` ledger commands (through the ledger client): listledgers, ledgermetadata, readledger,
deleteledger, simpletest. Thin: bkfast.admin.ledgers does the work."""

from __future__ import annotations

import click

from bkfast.admin import ledgers as admin_ledgers

from .shell_common import (
    ENTRY_ID,
    LAST_ENTRY_ID,
    SCOPE_ID,
    client_of,
    common_options,
    emit,
    json_option,
    ledger_options,
    progress,
    ref_of,
)

__all__ = ["COMMANDS"]


def _last_ensemble(md: dict) -> str:
    ensembles = md["allEnsembles"]
    return ",".join(b["id"] for b in ensembles[max(ensembles, key=int)])


@click.command()
@common_options
@click.option("--meta", "-m", "with_meta", is_flag=True, help="Also print each ledger's metadata")
@click.option("--ledger-scope-id", "scope_id", type=SCOPE_ID, default=0, show_default=True,
              help="List the ledgers of this scope")
@json_option
def listledgers(target, with_meta, scope_id, as_json):
    """List the ledgers (ids, optionally with metadata)."""
    with client_of(target) as bk, progress("reading ledgers", not as_json) as bar:
        out = admin_ledgers.list_ledgers(bk, scope_id, with_meta, bar)

    def text(rows):
        for r in rows:
            if "metadata" in r:
                m = r["metadata"]
                yield (f"ledgerID: {r['ledgerId']}\tstate {m['state']}\tE/W/A {m['ensembleSize']}/"
                       f"{m['writeQuorumSize']}/{m['ackQuorumSize']}\tlastEntryId {m['lastEntryId']}\t"
                       f"length {m['length']}\tbookies {_last_ensemble(m)}")
            else:
                yield f"ledgerID: {r['ledgerId']}"

    emit(out, as_json, text)


@click.command()
@common_options
@ledger_options
@json_option
def ledgermetadata(target, ledger_id, scope_id, qualified_name, as_json):
    """Print a ledger's metadata."""
    ref = ref_of(ledger_id, scope_id, qualified_name)
    with client_of(target) as bk:
        out = admin_ledgers.ledger_metadata(bk, ref)
    emit(out, as_json, lambda o: [f"{k}: {v}" for k, v in o.items()])


@click.command()
@common_options
@ledger_options
@click.option("--first", "-fe", "first", type=ENTRY_ID, default=0, show_default=True, help="First entry")
@click.option("--last", "-le", "last", type=LAST_ENTRY_ID, default=-1, show_default=True,
              help="Last entry (-1 = the last confirmed one)")
@click.option("--as", "fmt", type=click.Choice(["text", "hex"]), default="text", show_default=True,
              help="How to print each entry's payload")
@json_option
def readledger(target, ledger_id, scope_id, qualified_name, first, last, fmt, as_json):
    """Read entries of a ledger without recovering it."""
    ref = ref_of(ledger_id, scope_id, qualified_name)
    with client_of(target) as bk, progress("reading entries", not as_json) as bar:
        rows = admin_ledgers.read_ledger(bk, ref, first, last, bar)
    for row in rows:
        data = row.pop("data")
        row["data"] = data.hex() if fmt == "hex" else data.decode("utf-8", "backslashreplace")
    emit(rows, as_json, lambda rs: [f"entry {r['entryId']}\t{r['length']} bytes\t{r['data']}" for r in rs])


@click.command()
@common_options
@ledger_options
@click.option("--force", "-f", is_flag=True, help="Delete without asking")
@json_option
def deleteledger(target, ledger_id, scope_id, qualified_name, force, as_json):
    """Delete a ledger (its metadata; bookies reclaim the entries)."""
    ref = ref_of(ledger_id, scope_id, qualified_name)
    if not force:
        click.confirm(f"delete ledger {ref}?", abort=True, err=True)
    with client_of(target) as bk:
        out = admin_ledgers.delete_ledger(bk, ref)
    emit(out, as_json, lambda o: f"deleted ledger {ref}")


@click.command()
@common_options
@click.option("--ensemble", "-e", type=click.IntRange(1), default=3, show_default=True, help="Ensemble size")
@click.option("--write-quorum", "-w", type=click.IntRange(1), default=2, show_default=True, help="Write quorum")
@click.option("--ack-quorum", "-a", type=click.IntRange(1), default=2, show_default=True, help="Ack quorum")
@click.option("--entries", "-n", type=click.IntRange(1), default=100, show_default=True, help="Entries to write")
@click.option("--entry-size", type=click.IntRange(0), default=100, show_default=True, help="Bytes per entry")
@click.option("--keep", is_flag=True, help="Keep the ledger (default: delete it after the test)")
@json_option
def simpletest(target, ensemble, write_quorum, ack_quorum, entries, entry_size, keep, as_json):
    """Write entries to a new ledger, read them back, print the rates."""
    if not ensemble >= write_quorum >= ack_quorum:
        raise click.UsageError(f"need ensemble >= write quorum >= ack quorum, got {ensemble}/{write_quorum}/"
                               f"{ack_quorum}")
    with client_of(target) as bk, progress("simpletest", not as_json) as bar:
        out = admin_ledgers.simple_test(bk, ensemble, write_quorum, ack_quorum, entries, entry_size,
                                        delete=not keep, progress=bar)
    emit(out, as_json, lambda o: [
        f"ledger {o['ledgerId']}: wrote {o['entries']} entries of {o['entrySize']} bytes "
        f"(E={o['ensembleSize']} W={o['writeQuorumSize']} A={o['ackQuorumSize']})",
        f"adds: {o['addsPerSecond']:.0f}/s ({o['writeSeconds']:.3f} s)",
        f"reads: {o['readsPerSecond']:.0f}/s ({o['readSeconds']:.3f} s)",
        "ledger deleted" if o["deleted"] else "ledger kept"])


COMMANDS = [listledgers, ledgermetadata, readledger, deleteledger, simpletest]
