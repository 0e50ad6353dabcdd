"""`bkfast shell` commands on one bookie, named by --conf: its files read offline (lastmark, readjournal,
readentrylog, ledger, listfilesondisc, localconsistencycheck), its cookies (bookieformat, updatecookie) and
bookiesanity. Thin: bkfast.admin.bookie_files / bookie_ops do the work."""

from __future__ import annotations

import itertools

import click

from bkfast.admin import bookie_files, bookie_ops

from .shell_common import (
    ENTRY_ID,
    LEDGER_ID,
    SCOPE_ID,
    client_of,
    common_options,
    cookie_store_of,
    emit,
    json_option,
    ledger_options,
    progress,
    ref_of,
)

__all__ = ["COMMANDS"]


def _payload(row: dict, fmt: str) -> None:
    if "data" in row:
        data = row.pop("data")
        row["data"] = data.hex() if fmt == "hex" else data.decode("utf-8", "backslashreplace")


@click.command()
@common_options
@json_option
def lastmark(target, as_json):
    """Print the journal position the ledger storage holds everything up to (lastMark)."""
    out = bookie_files.last_mark(target.conf)
    emit(out, as_json, lambda o: [
        f"LastLogMark: Journal Id - {m['journalId']}({m['journalIdHex']}.txn), Pos - {m['offset']}"
        for m in o.get("journals", [o])])       # one line per journal directory, as Java's lastmark


@click.command()
@common_options
@click.argument("journal")
@click.option("--msg", "-m", "with_msg", is_flag=True, help="Print each record's bytes too")
@click.option("--as", "fmt", type=click.Choice(["hex", "text"]), default="hex", show_default=True,
              help="How to print the bytes with --msg")
@json_option
def readjournal(target, journal, with_msg, fmt, as_json):
    """Print the records of a journal file: JOURNAL is its id (decimal, or 0x-hex as in the file name) or
    its path."""
    rows = []
    for row in bookie_files.read_journal(target.conf, journal, with_msg):
        _payload(row, fmt)
        rows.append(row)

    def text(rs):
        for r in rs:
            line = (f"offset {r['offset']}\t{r['kind']}\tledger {r['ledgerId']}"
                    + (f" scope {r['scopeId']:x}" if r["scopeId"] else "")
                    + f"\tentry {r['entryId']}\t{r['length']} bytes")
            yield line + (f"\t{r['data']}" if "data" in r else "")

    emit(rows, as_json, text)


@click.command()
@common_options
@click.argument("entry_log")
@click.option("--ledger", "-l", "ledger_id", type=LEDGER_ID, default=None,
              help="Only entries of this ledger")
@click.option("--ledger-scope-id", "scope_id", type=SCOPE_ID, default=None,
              help="Scope of --ledger (default 0)")
@click.option("--ledger-qualified-name", "qualified_name", default=None, metavar="HEX32",
              help="Only entries of this ledger, as 32 hex digits (instead of --ledger)")
@click.option("--entry", "-e", "entry_id", type=ENTRY_ID, default=None,
              help="Only this entry (with a ledger)")
@click.option("--msg", "-m", "with_msg", is_flag=True, help="Print each entry's bytes too")
@click.option("--as", "fmt", type=click.Choice(["hex", "text"]), default="hex", show_default=True,
              help="How to print the bytes with --msg")
@json_option
def readentrylog(target, entry_log, ledger_id, scope_id, qualified_name, entry_id, with_msg, fmt, as_json):
    """Print the entries of an entry log: ENTRY_LOG is its id (decimal, or 0x-hex as in the file name) or
    its path."""
    ref = None
    if ledger_id is not None or qualified_name is not None:
        ref = ref_of(ledger_id, scope_id, qualified_name)
    elif scope_id is not None:
        raise click.UsageError("--ledger-scope-id needs --ledger")
    if entry_id is not None and ref is None:
        raise click.UsageError("--entry needs --ledger")
    rows = []
    for row in bookie_files.read_entry_log(target.conf, entry_log, ref, entry_id, with_msg):
        _payload(row, fmt)
        rows.append(row)
    emit(rows, as_json, lambda rs: [f"location {r['logId']:x}:{r['offset']}\tledger {r['ledgerId']}\t"
                                    f"entry {r['entryId']}\t{r['size']} bytes"
                                    + (f"\t{r['data']}" if "data" in r else "") for r in rs])


@click.command("ledger")
@common_options
@ledger_options
@json_option
def ledger_cmd(target, ledger_id, scope_id, qualified_name, as_json):
    """Print what the bookie's index holds for a ledger (both storages): key, fenced, entry locations."""
    ref = ref_of(ledger_id, scope_id, qualified_name)
    out = bookie_files.ledger_index(target.conf, ref)

    def text(o):
        yield f"ledger {ref}: masterKey {o['masterKey']}, fenced {o['fenced']}, {len(o['entries'])} entries"
        for e in o["entries"]:
            yield f"entry {e['entryId']}\tlog {e['logId']:x}\toffset {e['offset']}"

    emit(out, as_json, text)


@click.command()
@common_options
@click.option("--txn", "-txn", "txn", is_flag=True, help="Journal files")
@click.option("--log", "-log", "log", is_flag=True, help="Entry log files")
@click.option("--idx", "-idx", "idx", is_flag=True, help="Index files (.idx, or RocksDB for DbLedgerStorage)")
@json_option
def listfilesondisc(target, txn, log, idx, as_json):
    """List the bookie's journal, entry log and index files (all kinds unless some are asked for)."""
    every = not (txn or log or idx)
    out = bookie_files.list_files(target.conf, journal=every or txn, entry_logs=every or log, index=every or idx)
    emit(out, as_json, lambda o: itertools.chain.from_iterable(
        [f"{kind}: {len(files)} files"] + [f"  {f['path']}\t{f['size']}" for f in files] for kind, files in o.items()))


@click.command()
@common_options
@json_option
def localconsistencycheck(target, as_json):
    """Check that every entry in the bookie's index is readable at its location (the bookie must be stopped
    for DbLedgerStorage). Exit 1 when any is not."""
    with progress("checking ledgers", not as_json) as bar:
        out = bookie_files.consistency_check(target.conf, bar)
    emit(out, as_json, lambda o: [f"checked {o['entries']} entries of {o['ledgers']} ledgers: "
                                  f"{len(o['problems'])} problems"]
         + [f"ledger {p['ledgerId']} entry {p['entryId']}: {p['problem']}" for p in o["problems"]])
    if out["problems"]:
        raise SystemExit(1)


@click.command()
@common_options
@click.option("--force", is_flag=True, help="Wipe a bookie that holds data")
@json_option
def bookieformat(target, force, as_json):
    """Wipe this bookie's journal/ledger/index directories and delete its cookie in the metadata store."""
    with cookie_store_of(target) as store:
        out = bookie_ops.bookie_format(store, target.conf, force)
    emit(out, as_json, lambda o: o["actions"] + [f"formatted bookie {o['bookieId']}"])


@click.command()
@common_options
@click.option("--bookie-id", "-b", "bookie_id", type=click.Choice(["hostname", "ip"]), default=None,
              help="Move the cookies to the id built from the host name or from the IP address")
@click.option("--expandstorage", "-e", is_flag=True, help="Add the conf's new (empty) directories to the cookie")
@click.option("--list", "-l", "list_", is_flag=True, help="Print the cookies")
@click.option("--delete", "-d", is_flag=True, help="Delete this bookie's cookie from ZooKeeper (with --force)")
@click.option("--force", is_flag=True, help="Confirm --delete")
@json_option
def updatecookie(target, bookie_id, expandstorage, list_, delete, force, as_json):
    """Change this bookie's cookies: its id (--bookie-id), its directories (--expandstorage), or --list /
    --delete them. The bookie must be stopped."""
    chosen = [name for name, on in (("--bookie-id", bookie_id), ("--expandstorage", expandstorage),
                                    ("--list", list_), ("--delete", delete)) if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --bookie-id, --expandstorage, --list, --delete")
    with cookie_store_of(target) as store:
        if bookie_id:
            out = bookie_ops.update_cookie_bookie_id(store, target.conf, bookie_id)
            text = f"moved cookies from {out['oldBookieId']} to {out['newBookieId']}"
        elif expandstorage:
            out = bookie_ops.expand_storage(store, target.conf)
            text = f"added {', '.join(out['addedDirectories'])} to the cookie of {out['bookieId']}"
        elif list_:
            out = bookie_ops.list_cookies(store, target.conf)
            text = "\n".join(_cookie_lines(out, store.store_name))
        else:
            out = bookie_ops.delete_cookie(store, target.conf, force)
            text = f"deleted the {store.store_name} cookie of {out['bookieId']}"
    emit(out, as_json, lambda _o: text)


def _cookie_lines(out: dict, store_name: str):
    bid = out["bookieId"]
    stored = out[store_name.lower()]
    if stored is None:
        yield f"no cookie for {bid} in {store_name} ({out['where']})"
    else:
        yield f"{store_name} cookie of {bid}:"
        yield stored.rstrip()
    for directory, cookie in out["directories"].items():
        if cookie is None:
            yield f"{directory}: no cookie"
        else:
            yield f"{directory}:"
            yield cookie.rstrip()


@click.command()
@common_options
@click.option("--entries", "-e", type=click.IntRange(1), default=10, show_default=True, help="Entries to write")
@json_option
def bookiesanity(target, entries, as_json):
    """Write, read back and delete a ledger on this (running) bookie alone."""
    with client_of(target) as bk:
        out = bookie_ops.bookie_sanity(bk, target.conf, entries)
    emit(out, as_json, lambda o: f"bookie sanity test succeeded on {o['bookieId']}: {o['entries']} entries "
                                 f"in {o['seconds']:.3f} s")


COMMANDS = [lastmark, readjournal, readentrylog, ledger_cmd, listfilesondisc, localconsistencycheck,
            bookieformat, updatecookie, bookiesanity]
