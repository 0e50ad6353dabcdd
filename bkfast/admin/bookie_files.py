"""A stopped bookie's own files, read offline (BookKeeper's lastmark, readjournal, readentrylog, ledger,
listfilesondisc, localconsistencycheck), for both ledger storages and for directories a Java bookie wrote.

`conf` is the bookie's ServerConfiguration (its journal, ledger and index directories). These read the
files as they are: entries a killed bookie has only in its journal are in `read_journal`, not in the
index. Opening DbLedgerStorage takes RocksDB's lock, so a running bookie's directories are refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from bkfast.codec import peek_entry_ids

from .common import AdminError, LedgerRef, Progress
from .storage_access import (
    EntryLogger,
    EntryLoggerSettings,
    RecordKind,
    journal_index_for,
    list_journal_ids,
    open_ledger_storage,
    parse_record,
    read_last_mark,
    scan_journal,
    storage_kind,
)

__all__ = ["last_mark", "read_journal", "read_entry_log", "ledger_index", "list_files", "consistency_check",
           "open_storage", "journal_dirs", "ledger_dirs", "index_dirs"]

_CURRENT = "current"


def journal_dirs(conf) -> list[str]:
    return list(conf.get("journalDirectories"))


def ledger_dirs(conf) -> list[str]:
    return list(conf.get("ledgerDirectories"))


def index_dirs(conf) -> list[str]:
    return list(conf.get("indexDirectories"))


def _existing(dirs: list[str], what: str, key: str) -> list[str]:
    missing = [d for d in dirs if not os.path.isdir(os.path.join(d, _CURRENT))]
    if missing:
        raise AdminError(f"{what} {', '.join(missing)} has no current/ directory: not a bookie's {what} "
                         f"(check {key} in --conf)")
    return dirs


def last_mark(conf) -> dict:
    """lastmark: the journal position the ledger storage holds everything up to. With several journal
    directories (one lastMark.<i> each) the first journal's, and every journal's under "journals"."""
    dirs = _existing(ledger_dirs(conf), "ledger directory", "ledgerDirectories")
    count = len(journal_dirs(conf))
    marks = [read_last_mark(dirs, journal_index_for(i, count)) for i in range(count)]
    out = [{"journalId": m.journal_id, "journalIdHex": f"{m.journal_id:x}", "offset": m.offset} for m in marks]
    return out[0] if count == 1 else {**out[0], "journals": out}


_DECIMAL = re.compile(r"[0-9]{1,20}")
_HEX = re.compile(r"0[xX][0-9a-fA-F]{1,16}")


def _parse_number(text: str, what: str) -> int:
    # ASCII only: int() would also read other scripts' digits, "_" separators, signs and spaces.
    if _HEX.fullmatch(text):
        return int(text, 16)
    if _DECIMAL.fullmatch(text):
        return int(text)
    raise AdminError(f"{what} {text!r} is neither a number (decimal, or hex with 0x) nor an existing file")


def _file_location(ref: str, kind: str, a_file: str, suffix: str, dirs: list[str], holds) -> tuple[str, int]:
    """(directory, id) of a journal or entry log named by its path or by its id (decimal or 0x-hex), the
    id looked up in `dirs` with `holds(directory, id)`. `kind` and `a_file` name it in errors."""
    path = Path(ref)
    if path.is_file():
        if path.suffix != suffix:
            raise AdminError(f"{ref} is not {a_file} (<hex id>{suffix})")
        return str(path.parent.parent), _parse_number("0x" + path.stem, f"{kind} file name")
    file_id = _parse_number(ref, f"{kind} id")
    for d in dirs:
        if holds(d, file_id):
            return d, file_id
    raise AdminError(f"no {kind} {file_id} ({file_id:x}{suffix}) in {', '.join(dirs)}")


def _journal_location(conf, ref: str) -> tuple[str, int]:
    return _file_location(ref, "journal", "a journal file", ".txn", journal_dirs(conf),
                          lambda d, journal_id: journal_id in list_journal_ids(d))


def read_journal(conf, ref: str, with_data: bool = False) -> Iterator[dict]:
    """readjournal: every record of one journal file (by id, decimal or 0x-hex, or by path), in order:
    {"offset" (just past the record), "kind", "scopeId", "ledgerId", "entryId", "length"[, "data"]}."""
    directory, journal_id = _journal_location(conf, ref)
    for offset, record in scan_journal(directory, journal_id, skip_invalid=False):
        parsed = parse_record(record)
        row: dict[str, object] = {"journalId": journal_id, "offset": offset, "kind": parsed.kind.value,
                                  "scopeId": parsed.scope_id, "ledgerId": parsed.ledger_id,
                                  "entryId": parsed.entry_id, "length": len(record)}
        if with_data and parsed.kind is not RecordKind.FENCE:
            row["data"] = bytes(parsed.body)
        yield row


def _entry_log_location(conf, ref: str) -> tuple[str, int]:
    return _file_location(ref, "entry log", "an entry log", ".log", ledger_dirs(conf),
                          lambda d, log_id: os.path.exists(os.path.join(d, _CURRENT, f"{log_id:x}.log")))


def read_entry_log(conf, ref: str, ledger: LedgerRef | None = None, entry_id: int | None = None,
                   with_data: bool = False) -> Iterator[dict]:
    """readentrylog: the entries of one entry log (by id or path), optionally of one ledger / entry:
    {"logId", "offset", "location", "scopeId", "ledgerId", "entryId", "size"[, "data"]}."""
    directory, log_id = _entry_log_location(conf, ref)
    logger = EntryLogger([directory], EntryLoggerSettings.from_conf(conf))
    try:
        for r in logger.scan_records(log_id, with_data=with_data):
            if ledger is not None and (r.scope_id, r.ledger_id) != (ledger.scope_id, ledger.ledger_id):
                continue
            if entry_id is not None and r.entry_id != entry_id:
                continue
            row: dict[str, object] = {"logId": log_id, "offset": r.location & 0xFFFFFFFF, "location": r.location,
                                      "scopeId": r.scope_id, "ledgerId": r.ledger_id, "entryId": r.entry_id,
                                      "size": r.size}
            if with_data and r.data is not None:           # scan_records(with_data=True) reads every body
                row["data"] = bytes(r.data)
            yield row
    finally:
        logger.close()


def open_storage(conf):
    """The bookie's ledger storage opened on its directories; AdminError when they are missing or in use."""
    storage_kind(conf.get("ledgerStorageClass"))
    dirs = _existing(ledger_dirs(conf), "ledger directory", "ledgerDirectories")
    idx = _existing(index_dirs(conf), "index directory", "indexDirectories")
    try:
        return open_ledger_storage(conf, dirs, idx if conf.is_set("indexDirectories") else None)
    except Exception as err:
        if "lock" in str(err).lower():
            raise AdminError(f"the ledger storage in {', '.join(dirs)} is in use (RocksDB lock held): stop the "
                             "bookie first") from None
        raise


def ledger_index(conf, ledger: LedgerRef) -> dict:
    """ledger: what the index holds for one ledger (both storages): master key, fenced, and where each
    entry is ({"entryId", "logId", "offset"})."""
    storage = open_storage(conf)
    try:
        sid, lid = ledger.scope_id, ledger.ledger_id
        if not storage.ledger_exists(lid, sid):
            raise AdminError(f"ledger {ledger} is not in the index of {', '.join(ledger_dirs(conf))}")
        key = storage.get_master_key(lid, sid)
        entries = []
        for eid in storage.entries_of_ledger(lid, sid):
            location = storage.entry_location(sid, lid, eid)
            if location is None:
                continue       # still in SortedLedgerStorage's memtable: not possible offline
            entries.append({"entryId": eid, "logId": location >> 32, "offset": location & 0xFFFFFFFF})
        return {"ledgerId": lid, "scopeId": sid, "masterKey": key.hex() if key is not None else None,
                "fenced": storage.is_fenced(lid, sid), "entries": entries}
    finally:
        storage.close()


def _files_under(directory: str, keep) -> list[dict]:
    out = []
    base = os.path.join(directory, _CURRENT)
    for dirpath, _dirs, names in os.walk(base):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            if keep(path, name):
                try:
                    size = os.path.getsize(path)
                except OSError:
                    continue
                out.append({"path": path, "size": size})
    return sorted(out, key=lambda f: f["path"])


def list_files(conf, journal: bool = True, entry_logs: bool = True, index: bool = True) -> dict:
    """listfilesondisc: {"journal": [...], "entrylog": [...], "index": [...]} of {"path", "size"}.
    Index files are the `.idx` files (Sorted/Interleaved) or the RocksDB files (DbLedgerStorage)."""
    out: dict[str, list[dict]] = {}
    if journal:
        out["journal"] = [f for d in journal_dirs(conf) for f in _files_under(d, lambda p, n: n.endswith(".txn"))]
    if entry_logs:
        def is_log(path: str, name: str) -> bool:
            return name.endswith(".log") and os.path.basename(os.path.dirname(path)) == _CURRENT

        out["entrylog"] = [f for d in ledger_dirs(conf) for f in _files_under(d, is_log)]
    if index:
        db = storage_kind(conf.get("ledgerStorageClass")) == "db"

        def is_index(path: str, name: str) -> bool:
            if db:
                parent = os.path.basename(os.path.dirname(path))
                return parent in ("ledgers", "locations") or parent.startswith(("ledgers", "locations"))
            return name.endswith(".idx")

        seen: set[str] = set()
        out["index"] = []
        for d in index_dirs(conf):
            for f in _files_under(d, is_index):
                if f["path"] not in seen:
                    seen.add(f["path"])
                    out["index"].append(f)
    return out


def consistency_check(conf, progress: Progress | None = None) -> dict:
    """localconsistencycheck: every entry the index knows must be readable at its location and carry its
    own ledger and entry ids. {"ledgers", "entries", "problems": [{"scopeId", "ledgerId", "entryId",
    "problem"}]}."""
    storage = open_storage(conf)
    problems: list[dict] = []
    checked = 0
    try:
        ledgers = storage.all_ledgers()
        for n, (sid, lid) in enumerate(ledgers, 1):
            for eid in storage.entries_of_ledger(lid, sid):
                checked += 1
                try:
                    data = storage.get_entry(lid, eid, sid)
                    got = peek_entry_ids(data)
                    if tuple(got[1:]) != (sid, lid, eid):
                        problems.append({"scopeId": sid, "ledgerId": lid, "entryId": eid,
                                         "problem": f"entry at its location has ids {tuple(got)}"})
                except Exception as err:     # each unreadable entry is a finding, not the end of the check
                    problems.append({"scopeId": sid, "ledgerId": lid, "entryId": eid,
                                     "problem": f"{type(err).__name__}: {err}"})
            if progress is not None:
                progress(n, len(ledgers))
        return {"ledgers": len(ledgers), "entries": checked, "problems": problems}
    finally:
        storage.close()
