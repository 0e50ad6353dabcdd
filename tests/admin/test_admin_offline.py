"""`bkfast shell` offline commands on directories a real Java 4.16.7 bookie wrote (tests/vectors/java_bookie_dirs),
both storages: lastmark, listfilesondisc, readjournal, readentrylog, ledger, localconsistencycheck — with --json
parsed back and checked against the archive's manifest."""

from __future__ import annotations

import json
import tarfile

import pytest
from click.testing import CliRunner

from bkfast.cli.main import main
from tests import VECTORS_DIR

VECTORS = VECTORS_DIR / "java_bookie_dirs"
STORAGE_CLASSES = {
    "db_clean": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted_clean": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
}


@pytest.fixture(scope="module", params=sorted(STORAGE_CLASSES))
def java_bookie(request, tmp_path_factory):
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    with tarfile.open(VECTORS / f"{name}.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    root = tmp / name
    conf = tmp / "bk_server.conf"
    conf.write_text(f"journalDirectories={root / 'journal'}\nledgerDirectories={root / 'ledgers'}\n"
                    f"ledgerStorageClass={STORAGE_CLASSES[name]}\ndbStorage_writeCacheMaxSizeMb=16\n"
                    "dbStorage_readAheadCacheMaxSizeMb=16\nbookiePort=3281\n")
    manifest = json.loads((VECTORS / f"{name}.manifest.json").read_text())
    return name, root, str(conf), manifest


def shell(*args, ok=True):
    result = CliRunner().invoke(main, ["shell", *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def shell_json(*args):
    return json.loads(shell(*args, "--json").stdout)


def test_lastmark_names_an_existing_journal(java_bookie):
    _name, root, conf, _manifest = java_bookie
    mark = shell_json("lastmark", "--conf", conf)
    journals = [p.stem for p in (root / "journal" / "current").glob("*.txn")]
    assert mark["journalIdHex"] in journals and mark["offset"] > 0
    text = shell("lastmark", "--conf", conf).output
    assert text.strip() == (f"LastLogMark: Journal Id - {mark['journalId']}({mark['journalIdHex']}.txn), "
                            f"Pos - {mark['offset']}")


def test_listfilesondisc_lists_every_kind(java_bookie):
    name, root, conf, manifest = java_bookie
    files = shell_json("listfilesondisc", "--conf", conf)
    sizes = {str(root.parent / f["path"]): f["size"] for f in manifest["files"]}
    assert [f["path"] for f in files["journal"]] == [p for p in sizes if p.endswith(".txn")]
    assert {f["path"] for f in files["entrylog"]} == {p for p in sizes if p.endswith(".log") and "/current/" in p
                                                     and p.rsplit("/", 2)[-2] == "current"}
    for f in files["journal"] + files["entrylog"]:
        assert f["size"] == sizes[f["path"]]
    if name == "sorted_clean":
        assert len(files["index"]) == 5 and all(f["path"].endswith(".idx") for f in files["index"])
    else:
        assert any(f["path"].endswith("/locations/CURRENT") for f in files["index"])
    only_txn = shell_json("listfilesondisc", "--txn", "--conf", conf)
    assert list(only_txn) == ["journal"]


def test_readjournal_by_id_and_by_path_finds_every_entry(java_bookie):
    _name, root, conf, manifest = java_bookie
    (path,) = (root / "journal" / "current").glob("*.txn")
    by_path = shell_json("readjournal", str(path), "--conf", conf)
    by_id = shell_json("readjournal", "0x" + path.stem, "--conf", conf)
    assert by_path == by_id
    entries = {(r["ledgerId"], r["entryId"]) for r in by_path if r["kind"] == "entry"}
    expected = {(lg["ledgerId"], e["entryId"]) for lg in manifest["ledgers"] for e in lg["entries"]}
    assert entries == expected
    kinds = {r["kind"] for r in by_path}
    assert {"master_key", "fence", "explicit_lac"} <= kinds
    with_msg = shell_json("readjournal", str(path), "--msg", "--conf", conf)
    first_entry = next(r for r in with_msg if r["kind"] == "entry")
    stored = {(lg["ledgerId"], e["entryId"]): e["storedLength"] for lg in manifest["ledgers"] for e in lg["entries"]}
    assert len(bytes.fromhex(first_entry["data"])) == stored[(first_entry["ledgerId"], first_entry["entryId"])]


def test_readentrylog_filters_by_ledger_and_entry(java_bookie):
    _name, _root, conf, manifest = java_bookie
    ledger = manifest["ledgers"][2]
    rows = shell_json("readentrylog", "0", "--ledger", str(ledger["ledgerId"]), "--conf", conf)
    assert sorted(r["entryId"] for r in rows) == [e["entryId"] for e in ledger["entries"]]
    assert {r["size"] for r in rows} == {e["storedLength"] for e in ledger["entries"]}
    (one,) = shell_json("readentrylog", "0", "--ledger", str(ledger["ledgerId"]), "--entry", "3", "--conf", conf)
    assert one["size"] == ledger["entries"][3]["storedLength"]


def test_ledger_shows_the_index_of_each_ledger(java_bookie):
    _name, _root, conf, manifest = java_bookie
    for ledger in manifest["ledgers"]:
        out = shell_json("ledger", str(ledger["ledgerId"]), "--conf", conf)
        assert out["masterKey"] == ledger["masterKey"]
        assert out["fenced"] == ledger["fenced"]
        assert [e["entryId"] for e in out["entries"]] == [e["entryId"] for e in ledger["entries"]]
        assert {e["logId"] for e in out["entries"]} == {0}
    qualified = f"{0:016x}{manifest['ledgers'][0]['ledgerId']:016x}"
    assert shell_json("ledger", "--ledger-qualified-name", qualified, "--conf", conf)["entries"]


def test_localconsistencycheck_finds_every_entry_readable(java_bookie):
    _name, _root, conf, manifest = java_bookie
    out = shell_json("localconsistencycheck", "--conf", conf)
    assert out == {"ledgers": len(manifest["ledgers"]),
                   "entries": sum(len(lg["entries"]) for lg in manifest["ledgers"]), "problems": []}


def test_localconsistencycheck_reports_a_damaged_entry_log(java_bookie, tmp_path):
    name, root, _conf, manifest = java_bookie
    # A copy whose entry log is cut in half: the entries past the cut are findings, not a crash.
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    log = copy / "ledgers" / "current" / "0.log"
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size // 2)
    conf = tmp_path / "c.conf"
    conf.write_text(f"journalDirectories={copy / 'journal'}\nledgerDirectories={copy / 'ledgers'}\n"
                    f"ledgerStorageClass={STORAGE_CLASSES[name]}\ndbStorage_writeCacheMaxSizeMb=16\n"
                    "dbStorage_readAheadCacheMaxSizeMb=16\n")
    result = shell("localconsistencycheck", "--conf", str(conf), "--json", ok=False)
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    total = sum(len(lg["entries"]) for lg in manifest["ledgers"])
    assert out["entries"] == total and 0 < len(out["problems"]) < total


def test_offline_mistakes_are_one_line(java_bookie, tmp_path):
    _name, _root, conf, _manifest = java_bookie
    r = shell("readjournal", "12345", "--conf", conf, ok=False)
    assert r.exit_code == 1 and r.output.startswith("Error: no journal 12345") and len(r.output.splitlines()) == 1
    r = shell("readentrylog", "nonsense", "--conf", conf, ok=False)
    assert r.exit_code == 1 and "neither a number" in r.output and "Traceback" not in r.output
    r = shell("ledger", "99", "--conf", conf, ok=False)
    assert r.exit_code == 1 and "ledger 99 is not in the index" in r.output
    r = shell("ledger", "1", "--ledger-qualified-name", "0" * 32, "--conf", conf, ok=False)
    assert r.exit_code == 2
    r = shell("readentrylog", "0", "--entry", "1", "--conf", conf, ok=False)
    assert r.exit_code == 2 and "--entry needs --ledger" in r.output
    empty = tmp_path / "empty.conf"
    empty.write_text(f"ledgerDirectories={tmp_path / 'nothing'}\n")
    r = shell("lastmark", "--conf", str(empty), ok=False)
    assert r.exit_code == 1 and "ledgerDirectories" in r.output and len(r.output.splitlines()) == 1


def _run_on_terminal(args: list[str]) -> str:
    """Run `bkfast` with stdout and stderr on a pseudo-terminal; everything it wrote there."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env={**os.environ, "TERM": "xterm-256color",
                                                             "COLUMNS": "100"})
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:          # EIO: the other side closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        assert proc.wait(60) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_progress_bar_on_a_terminal_only(java_bookie):
    import subprocess
    import sys

    _name, _root, conf, _manifest = java_bookie
    args = ["shell", "localconsistencycheck", "--conf", conf]
    on_terminal = _run_on_terminal(args)
    assert "checking ledgers" in on_terminal and "problems" in on_terminal
    piped = subprocess.run([sys.executable, "-m", "bkfast.cli.main", *args], capture_output=True, text=True,
                           timeout=60, check=True)
    assert "checking ledgers" not in piped.stdout + piped.stderr
    assert piped.stdout.startswith("checked ") and piped.stderr == ""



LEDGER_ID_COMMANDS = {"ledgermetadata", "readledger", "deleteledger", "ledger", "readentrylog"}


def test_every_shell_command_has_help_and_the_common_options():
    from bkfast.cli.shell import shell as group

    expected = {"initnewcluster", "metaformat", "nukeexistingcluster", "whatisinstanceid", "listbookies", "bookieinfo",
                "clusterinfo", "listledgers", "ledgermetadata", "readledger", "deleteledger", "simpletest", "lastmark",
                "readjournal", "readentrylog", "ledger", "listfilesondisc", "bookieformat", "updatecookie",
                "bookiesanity", "localconsistencycheck",
                # recovery commands (issue 13)
                "recover", "autorecovery", "listunderreplicated", "whoisauditor", "triggeraudit",
                "lostbookierecoverydelay", "decommissionbookie",
                # placement (issue 29)
                "setbookierack", "getbookierack", "deletebookierack", "listbookieracks", "placementpolicycheck"}
    assert set(group.commands) == expected
    for name in sorted(expected):
        r = shell(name, "--help")
        assert r.output.startswith(f"Usage: main shell {name} ")
        assert " ".join(group.commands[name].help.split()[:3]) in r.output
        for option in ("--conf", "--metadata-uri", "--verbose", "--json"):
            assert option in r.output, (name, option)
        if name in LEDGER_ID_COMMANDS:
            assert "--ledger-scope-id" in r.output and "--ledger-qualified-name" in r.output, name
        else:
            assert "--ledger-qualified-name" not in r.output, name
