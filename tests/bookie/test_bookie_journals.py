"""Several journal directories: one journal each, ledgers mapped as Java 4.16 maps them (ledgerId mod
count; a scoped ledger by its 64-bit ledger id), a lastMark per journal, replay of every journal from its
own mark, and refusal of a bookie whose journal directories changed since it last ran (fewer, more or
reordered; in-process, and a real `bkfast bookie --no-metadata`)."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from bkfast.bookie import journal as jm
from bkfast.bookie.bookie import Bookie
from bkfast.bookie.journals import journal_index
from bkfast.codec import DigestType, encode_entry, encode_lac, mac_key, master_key
from bkfast.conf import ServerConfiguration
from bkfast.errors import ConfigurationError
from bkfast.meta import CookieMismatchError, check_local_cookies
from tests.server_support import REPO, BookieProcess

KEY = master_key(b"journals")
DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"


def conf_for(tmp_path: Path, journals: list[str], ledgers=("l1", "l2"), **extra) -> ServerConfiguration:
    values = {
        "journalDirectories": [str(tmp_path / j) for j in journals],
        "ledgerDirectories": [str(tmp_path / d) for d in ledgers],
        "ledgerStorageClass": DB,
        "dbStorage_writeCacheMaxSizeMb": 8,
        "dbStorage_readAheadCacheMaxSizeMb": 8,
    }
    values.update(extra)
    return ServerConfiguration(values)


def entry(ledger: int, entry_id: int) -> bytes:
    payload = hashlib.sha256(f"{ledger}:{entry_id}".encode()).digest() * 4
    return encode_entry(ledger, entry_id, entry_id - 1, (entry_id + 1) * len(payload), payload, DigestType.CRC32C)


def scoped_entry(scope: int, ledger: int, entry_id: int) -> bytes:
    payload = hashlib.sha256(f"{scope}:{ledger}:{entry_id}".encode()).digest()
    return encode_entry(ledger, entry_id, entry_id - 1, (entry_id + 1) * len(payload), payload, DigestType.CRC32C,
                        mac_key(b"journals"), scope)


def records_by_scoped_ledger(journal_dir: Path) -> dict[tuple[int, int], list[int]]:
    """(scope id, ledger id) -> entry ids (meta records as their negative ids) of every record in a journal dir."""
    out: dict[tuple[int, int], list[int]] = {}
    for journal_id in jm.list_journal_ids(journal_dir):
        for _, record in jm.scan_journal(journal_dir, journal_id):
            r = jm.parse_record(record)
            out.setdefault((r.scope_id, r.ledger_id), []).append(r.entry_id)
    return out


def records_by_ledger(journal_dir: Path) -> dict[int, list[int]]:
    """ledger id -> entry ids (meta records as their negative ids) of every record in a journal dir."""
    out: dict[int, list[int]] = {}
    for journal_id in jm.list_journal_ids(journal_dir):
        for _, record in jm.scan_journal(journal_dir, journal_id):
            r = jm.parse_record(record)
            out.setdefault(r.ledger_id, []).append(r.entry_id)
    return out


def test_each_ledger_goes_to_journal_ledger_id_mod_count_with_its_own_lastmark(tmp_path):
    assert [journal_index(lid, 3) for lid in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    conf = conf_for(tmp_path, ["j0", "j1", "j2"])
    with Bookie(conf) as bookie:
        for ledger in range(1, 7):
            for e in range(3):
                bookie.add_entry_sync(entry(ledger, e), KEY)
            bookie.set_explicit_lac_sync(ledger, encode_lac(ledger, 1, DigestType.CRC32C, mac_key(b"journals")), KEY)
        bookie.fence_sync(5, KEY)
        bookie._wait(lambda cb: bookie.force_ledger(4, cb))
        mark = bookie.checkpoint()
    for i in range(3):
        seen = records_by_ledger(tmp_path / f"j{i}")
        assert sorted(seen) == [lid for lid in range(1, 7) if lid % 3 == i]
        for ledger, ids in seen.items():
            # master key first, then the entries, the explicit LAC (and the fence) in the order they came
            expected = [jm.METAENTRY_ID_LEDGER_KEY, 0, 1, 2, jm.METAENTRY_ID_LEDGER_EXPLICITLAC]
            assert ids == expected + ([jm.METAENTRY_ID_FENCE_KEY] if ledger == 5 else [])
    for d in ("l1", "l2"):
        current = tmp_path / d / "current"
        assert not (current / "lastMark").exists()
        marks = [jm.read_last_mark([tmp_path / d], journal_index=i) for i in range(3)]
        assert all((current / f"lastMark.{i}").stat().st_size == 16 for i in range(3))
        assert tuple(marks[0]) == tuple(mark)
        # each mark names a journal of its own dir, at or past the end of the records written before stop
        for i, m in enumerate(marks):
            assert m.journal_id in jm.list_journal_ids(tmp_path / f"j{i}")
    with Bookie(conf) as bookie:        # clean restart: nothing to replay, everything served
        assert bookie.replayed_records == 0
        for ledger in range(1, 7):
            assert bookie.read_entry(ledger, 2) == entry(ledger, 2)
        assert bookie.is_fenced(5) and not bookie.is_fenced(4)


def test_scoped_ledgers_go_to_journal_ledger_id_mod_count_whatever_their_scope(tmp_path):
    # (scope, ledger): neither scope mod 3 nor the 128-bit id (scope << 64 | ledger) mod 3 = (scope + ledger)
    # mod 3 names the journal ledger mod 3 does; ledger 4 is there classic and scoped.
    ledgers = [(0, 4), (77, 4), (1, 6), (5, 7), (2**63 + 5, 8)]
    for scope, ledger in ledgers[1:]:
        assert ledger % 3 not in (scope % 3, ((scope << 64) | ledger) % 3)
    conf = conf_for(tmp_path, ["j0", "j1", "j2"])
    with Bookie(conf) as bookie:
        for scope, ledger in ledgers:
            for e in range(2):
                bookie.add_entry_sync(scoped_entry(scope, ledger, e), KEY)
        done = threading.Event()            # entry 2 of every ledger in one batch, split over the journals
        assert bookie.add_entries([(scoped_entry(scope, ledger, 2), KEY, False, False) for scope, ledger in ledgers],
                                  lambda accepted, error: done.set()) == []
        assert done.wait(10)
        for scope, ledger in ledgers:
            bookie.set_explicit_lac_sync(ledger, encode_lac(ledger, 1, DigestType.CRC32C, mac_key(b"journals"), scope),
                                         KEY, scope_id=scope)
        bookie.fence_sync(4, KEY, scope_id=77)
        bookie._wait(lambda cb: bookie.force_ledger(8, cb, scope_id=2**63 + 5))
    for i in range(3):
        seen = records_by_scoped_ledger(tmp_path / f"j{i}")
        assert sorted(seen) == sorted(sl for sl in ledgers if sl[1] % 3 == i), f"journal {i}"
        for scoped_ledger, ids in seen.items():
            expected = [jm.METAENTRY_ID_LEDGER_KEY, 0, 1, 2, jm.METAENTRY_ID_LEDGER_EXPLICITLAC]
            assert ids == expected + ([jm.METAENTRY_ID_FENCE_KEY] if scoped_ledger == (77, 4) else [])
    with Bookie(conf) as bookie:        # and each scoped ledger is served from where it went
        for scope, ledger in ledgers:
            assert bookie.read_entry(ledger, 2, scope_id=scope) == scoped_entry(scope, ledger, 2)
        assert bookie.is_fenced(4, 77) and not bookie.is_fenced(4)


def test_batched_adds_over_two_journals_complete_once_per_journal_with_its_entries(tmp_path):
    """Each journal's share of a batch completes on its own, when that journal is durable (as Java answers
    each add from its own journal), with the indices of the adds it holds."""
    with Bookie(conf_for(tmp_path, ["j0", "j1"])) as bookie:
        both = threading.Semaphore(0)
        outcome = []
        adds = [(entry(lid, 0), KEY, False, False) for lid in (10, 11, 12, 13)]
        adds.append((entry(14, 0), master_key(b"other"), False, False))   # refused at once: ledger 14 is new
        bookie.add_entry_sync(entry(14, 1), KEY)                            # ...so first give it a key

        def callback(accepted, error):
            outcome.append((accepted, error))
            both.release()

        failures = bookie.add_entries(adds, callback)
        assert [i for i, _ in failures] == [4]
        assert both.acquire(timeout=10) and both.acquire(timeout=10)
        assert sorted(outcome) == [([0, 2], None), ([1, 3], None)]
        assert sorted(records_by_ledger(tmp_path / "j0")) == [10, 12, 14]
        assert sorted(records_by_ledger(tmp_path / "j1")) == [11, 13]


_KILLED_CHILD = textwrap.dedent("""
    import sys
    from bkfast.bookie.bookie import Bookie
    from tests.bookie.test_bookie_journals import KEY, conf_for, entry
    from pathlib import Path
    bookie = Bookie(conf_for(Path(sys.argv[1]), ["j0", "j1"], flushInterval=3_600_000))
    bookie.start()
    for ledger in (1, 3, 5):        # all in the second journal (odd ids)
        for e in range(50):
            bookie.add_entry_sync(entry(ledger, e), KEY)
    print("acked", flush=True)
    sys.stdin.read()                # wait to be killed
""")


def test_entries_only_in_the_second_journal_are_replayed_after_sigkill_before_any_checkpoint(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(tmp_path)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        assert line == b"acked\n", proc.stderr.read().decode()[-3000:]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    # The only checkpoint ran at start: both marks point at the then-new journals' headers, and the
    # entries live in the second journal alone (the write cache was never flushed to an entry log).
    assert records_by_ledger(tmp_path / "j0") == {}
    assert sorted(records_by_ledger(tmp_path / "j1")) == [1, 3, 5]
    with Bookie(conf_for(tmp_path, ["j0", "j1"])) as bookie:
        assert bookie.replayed_records == 3 * (50 + 1)           # entries + a master key per ledger
        for ledger in (1, 3, 5):
            for e in range(50):
                assert bookie.read_entry(ledger, e) == entry(ledger, e)


def test_one_journal_dir_fewer_is_refused_in_process(tmp_path):
    with Bookie(conf_for(tmp_path, ["j0", "j1"])) as bookie:
        bookie.add_entry_sync(entry(1, 0), KEY)
    with pytest.raises(ConfigurationError, match=r"holds lastMark\.1: .* at least 2 journal directories .* "
                                                 r"configured with 1 journal directory"):
        Bookie(conf_for(tmp_path, ["j0"]))
    # and one journal dir fewer than three
    with Bookie(conf_for(tmp_path / "three", ["a", "b", "c"])):
        pass
    with pytest.raises(ConfigurationError, match=r"lastMark\.2"):
        Bookie(conf_for(tmp_path / "three", ["a", "b"]))
    # one journal dir before, two now: the plain lastMark gives it away
    with Bookie(conf_for(tmp_path / "one", ["a"])):
        pass
    with pytest.raises(ConfigurationError, match="holds lastMark .one journal directory."):
        Bookie(conf_for(tmp_path / "one", ["a", "b"]))
    with pytest.raises(ConfigurationError, match="lists .*/a more than once"):
        Bookie(conf_for(tmp_path / "twice", ["a", "b", "a"]))


def test_reordered_journal_dirs_are_refused_by_the_cookie_files_naming_both_orders(tmp_path):
    conf = conf_for(tmp_path, ["j0", "j1"])
    check_local_cookies(conf, "127.0.0.1:3181")         # a new bookie: its cookie files are written
    with Bookie(conf) as bookie:
        bookie.add_entry_sync(entry(1, 0), KEY)
    j0, j1 = tmp_path / "j0", tmp_path / "j1"
    with pytest.raises(CookieMismatchError) as refused:
        check_local_cookies(conf_for(tmp_path, ["j1", "j0"]), "127.0.0.1:3181")
    message = str(refused.value)
    assert f"journalDirs: cookie says {j0},{j1}, this bookie has {j1},{j0}" in message
    assert "same directories, another order" in message
    assert "\n" not in message
    check_local_cookies(conf, "127.0.0.1:3181")         # the order it ran with is still accepted


def test_bookie_process_started_with_one_journal_dir_fewer_more_or_reordered_refuses_and_names_them(tmp_path):
    j0, j1 = tmp_path / "j0", tmp_path / "j1"
    bookie = BookieProcess(tmp_path, "-D", f"journalDirectories={j0},{j1}")
    try:
        bookie.start()
        assert bookie.stop() == 0
    finally:
        bookie.kill()
    assert (j1 / "current" / "VERSION").exists()
    journal_files = [jm.list_journal_ids(j) for j in (j0, j1)]
    fewer = BookieProcess(tmp_path, "-D", f"journalDirectories={j0}")
    result = subprocess.run(fewer.command(), capture_output=True, timeout=120)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: bookie ") and "cookie mismatch" in last
    assert f"missing journal directory {j1}" in last
    # the bookie had no metadata service: the cookie files alone hold what it ran with
    added = BookieProcess(tmp_path, "-D", f"journalDirectories={j0},{j1},{tmp_path / 'j2'}")
    result = subprocess.run(added.command(), capture_output=True, timeout=120)
    assert result.returncode == 1
    assert f"new journal directory {tmp_path / 'j2'}" in result.stderr.decode()
    # the same two directories in the other order: every ledger would change journal
    reordered = BookieProcess(tmp_path, "-D", f"journalDirectories={j1},{j0}")
    result = subprocess.run(reordered.command(), capture_output=True, timeout=120)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: bookie ") and "cookie mismatch" in last
    assert f"journalDirs: cookie says {j0},{j1}, this bookie has {j1},{j0}" in last
    assert "another order" in last
    # refused before a journal was opened: no refused start created a journal file
    assert [jm.list_journal_ids(j) for j in (j0, j1)] == journal_files


def test_shell_lastmark_prints_every_journal_mark(tmp_path):
    from click.testing import CliRunner

    from bkfast.cli.main import main

    conf = conf_for(tmp_path, ["j0", "j1"])
    # Ledger 2 goes to journal 0 with one entry, ledger 1 to journal 1 with many: the two marks differ
    # in position even when both journals were created in the same millisecond (same file id).
    with Bookie(conf) as bookie:
        bookie.add_entry_sync(entry(2, 0), KEY)
        for entry_id in range(40):
            bookie.add_entry_sync(entry(1, entry_id), KEY)
    marks = [jm.read_last_mark([tmp_path / "l1"], journal_index=i) for i in range(2)]
    conf_file = tmp_path / "bk_server.conf"
    conf_file.write_text(f"journalDirectories={tmp_path / 'j0'},{tmp_path / 'j1'}\n"
                         f"ledgerDirectories={tmp_path / 'l1'},{tmp_path / 'l2'}\nledgerStorageClass={DB}\n")
    result = CliRunner().invoke(main, ["shell", "lastmark", "--conf", str(conf_file)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"LastLogMark: Journal Id - {m.journal_id}({m.journal_id:x}.txn), "
                                          f"Pos - {m.offset}" for m in marks]
    assert marks[1].offset > marks[0].offset > 0
