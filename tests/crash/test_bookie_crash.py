"""SIGKILL a bookie at random moments: every acknowledged entry, fence and master key survives.

A child process (tests/crash/bookie_child.py) runs a real Bookie on real files, once per ledger storage
(DbLedgerStorage, SortedLedgerStorage, InterleavedLedgerStorage) with one journal directory, and for
DbLedgerStorage and SortedLedgerStorage again with two journal directories (ledgers spread over both,
single and batched adds), and prints each acknowledgement. The parent kills it with SIGKILL after a
random delay — with frequent checkpoints, journal rolls and write-cache flushes going on — restarts a
Bookie on the same directories and checks every entry acknowledged in that run (plus a sample of
earlier runs) byte for byte. With two journal directories it also scans (with the bookie's journal reader)
the journal files each child wrote: every entry record of a child ledger is in journal ledgerId mod 2, and
over the runs both journals got entries.
BKFAST_CRASH_ITERATIONS (per storage, default 30) and BKFAST_CRASH_SEED change the run.
"""

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bkfast.bookie.bookie import Bookie
from bkfast.bookie.journal import RecordKind, list_journal_ids, parse_record, scan_journal
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.errors import BKLedgerFencedException, BKUnauthorizedAccessException
from tests.crash.bookie_child import LEDGERS, PASSWORD, STORAGE_CLASSES, crash_conf, journal_dirs

ITERATIONS = int(os.environ.get("BKFAST_CRASH_ITERATIONS", "30"))
SEED = int(os.environ.get("BKFAST_CRASH_SEED", "20261123"))
REPO = Path(__file__).resolve().parents[2]
KEY = master_key(PASSWORD)


def run_child_until_killed(data_dir: Path, seed: int, first_ledger: int, kill_after: float,
                           storage: str, journals: int = 1) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crash.bookie_child", str(data_dir), str(seed), str(first_ledger), storage,
         str(journals)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines: list[str] = []
    started = threading.Event()

    def read():
        for raw in proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill is not an acknowledgement
                lines.append(raw.decode().strip())
                if lines[-1] == "S":
                    started.set()
        started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "crash child did not start"
        if proc.poll() is not None:
            pytest.fail(f"crash child exited early: {proc.stderr.read().decode()[-3000:]}")
        time.sleep(kill_after)
        assert proc.poll() is None, f"crash child died by itself: {proc.stderr.read().decode()[-3000:]}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(30)
        proc.stdout.close()
        proc.stderr.close()
    return lines


def child_entries_per_journal(dirs: list[str], since: list[int], first_ledger: int) -> list[int]:
    """How many entry records of the child's ledgers each journal dir holds in the files the child created
    (ids above `since`, what the dir held before it ran), scanned with the bookie's own journal reader;
    fails if a journal holds an entry of a ledger that maps to another journal (ledger mod count)."""
    counts = []
    for i, journal_dir in enumerate(dirs):
        n = 0
        for journal_id in list_journal_ids(journal_dir):
            if journal_id <= since[i]:
                continue
            for _, record in scan_journal(journal_dir, journal_id):
                r = parse_record(record)
                if r.kind == RecordKind.ENTRY and first_ledger <= r.ledger_id < first_ledger + LEDGERS:
                    assert r.ledger_id % len(dirs) == i, f"ledger {r.ledger_id} in journal {journal_dir}"
                    n += 1
        counts.append(n)
    return counts


@pytest.mark.parametrize(("storage", "journals"),
                         [*((s, 1) for s in sorted(STORAGE_CLASSES)), ("db", 2), ("sorted", 2)])
def test_sigkill_loses_no_acknowledged_entry(tmp_path, storage, journals):
    iterations = ITERATIONS
    rng = random.Random(SEED)
    acked: dict[tuple[int, int], str] = {}
    fenced: set[int] = set()
    dirs = journal_dirs(str(tmp_path), journals)
    journaled = [0] * journals      # entry records the children left in each journal dir
    for iteration in range(iterations):
        first_ledger = 1 + iteration * 100
        since = [max(list_journal_ids(d), default=0) for d in dirs]
        lines = run_child_until_killed(tmp_path, rng.randrange(2**31), first_ledger, rng.uniform(0.05, 1.5),
                                       storage, journals)
        if journals > 1:
            journaled = [a + b for a, b in zip(journaled, child_entries_per_journal(dirs, since, first_ledger),
                                               strict=True)]
        this_run = {}
        for line in lines:
            kind, *fields = line.split()
            if kind == "A":
                this_run[(int(fields[0]), int(fields[1]))] = fields[2]
            elif kind == "F":
                fenced.add(int(fields[0]))
        earlier = rng.sample(sorted(acked), min(200, len(acked)))
        acked.update(this_run)

        bookie = Bookie(crash_conf(str(tmp_path), storage, journals))
        bookie.start()
        try:
            for ledger_entry in [*this_run, *earlier]:
                stored = bookie.read_entry(*ledger_entry)
                assert hashlib.sha256(stored).hexdigest() == acked[ledger_entry], (
                    f"iteration {iteration}: ledger {ledger_entry[0]} entry {ledger_entry[1]} differs after SIGKILL")
            for ledger in fenced:
                assert bookie.is_fenced(ledger), f"fence of ledger {ledger} lost"
            if fenced:
                ledger = min(fenced)
                entry = encode_entry(ledger, 10**6, -1, 1, b"x", DigestType.CRC32C)
                with pytest.raises(BKLedgerFencedException):
                    bookie.add_entry_sync(entry, KEY)
                bookie.add_entry_sync(entry, KEY, recovery=True)
            if this_run:
                ledger = next(iter(this_run))[0]
                with pytest.raises(BKUnauthorizedAccessException):
                    bookie.add_entry_sync(encode_entry(ledger, 10**6, -1, 1, b"x", DigestType.CRC32C),
                                          master_key(b"wrong"))
            fresh_ledger = 10**6 + iteration
            bookie.add_entry_sync(encode_entry(fresh_ledger, 0, -1, 3, b"new", DigestType.CRC32C), KEY)
            assert bookie.read_entry(fresh_ledger, -1)[-3:] == b"new"
        finally:
            bookie.stop()
    assert len(acked) > iterations * 10, "the children acknowledged suspiciously few entries"
    if journals > 1:   # the children wrote entry records to every journal, and each has its own mark
        for i, journal_dir in enumerate(dirs):
            assert journaled[i] > 0, f"no child wrote an entry to journal {journal_dir}: {journaled}"
            assert (tmp_path / "ledgers" / "current" / f"lastMark.{i}").stat().st_size == 16
