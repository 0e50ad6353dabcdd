"""SIGKILL a bookie at random moments of garbage collection and compaction: no acknowledged entry of a live
ledger is lost, and no index entry points at a removed entry log.

A child process (tests/crash/compaction_child.py) runs a real Bookie (DbLedgerStorage, real files), adds 8
ledgers, deletes half of all live ledgers in its metadata source and compacts with a throttle. The parent
kills it with SIGKILL a short random time after a random number of compaction steps (counting steps, not
seconds, so that a slow machine kills inside compaction as often as a fast one), then opens a Bookie on the
same directories and reads back every acknowledged entry of every ledger not deleted (all iterations so far), plus every
entry the index still lists for any ledger. BKFAST_COMPACTION_CRASH_ITERATIONS (default 20) and
BKFAST_CRASH_SEED change the run.
"""

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bkfast.bookie.bookie import Bookie
from tests.crash.compaction_child import LEDGERS, compaction_conf, read_deleted

ITERATIONS = int(os.environ.get("BKFAST_COMPACTION_CRASH_ITERATIONS", "20"))
SEED = int(os.environ.get("BKFAST_CRASH_SEED", "20261123"))
REPO = Path(__file__).resolve().parents[2]


def run_child_until_killed(data_dir: Path, seed: int, first_ledger: int, steps_before_kill: int,
                           kill_after: float) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crash.compaction_child", str(data_dir), str(seed), str(first_ledger)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines: list[str] = []
    compacting = threading.Event()
    kill_moment = threading.Event()
    steps_seen = 0

    def read():
        nonlocal steps_seen
        for raw in proc.stdout:
            line = raw.decode().strip()
            lines.append(line)
            if line == "S":
                compacting.set()
            if line.startswith("P "):
                steps_seen += 1
            if compacting.is_set() and (steps_seen >= steps_before_kill or line.startswith(("G ", "E"))):
                kill_moment.set()
        kill_moment.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not compacting.wait(60):
            proc.kill()
            proc.wait()
            raise AssertionError(f"child never started compacting: {proc.stderr.read().decode()[-2000:]}")
        kill_moment.wait(60)
        time.sleep(kill_after)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return lines


def test_sigkill_during_compaction_loses_no_entry(tmp_path):
    rng = random.Random(SEED)
    acked: dict[tuple[int, int], str] = {}
    moments = Counter()
    conf = compaction_conf(str(tmp_path))
    for iteration in range(ITERATIONS):
        first_ledger = iteration * LEDGERS
        lines = run_child_until_killed(tmp_path, rng.randrange(1 << 30), first_ledger,
                                       rng.randrange(0, 8), rng.uniform(0.0, 0.1))
        steps = [line for line in lines if line.startswith(("P ", "G ", "E"))]
        moments[steps[-1].split()[0] + (" " + steps[-1].split()[1] if steps[-1].startswith("P") else "")
                if steps else "before compaction"] += 1
        for line in lines:
            if line.startswith("A "):
                _, lid, eid, digest = line.split()
                acked[(int(lid), int(eid))] = digest
        deleted = read_deleted(str(tmp_path))
        bookie = Bookie(conf)
        bookie.start()
        try:
            checked = 0
            for (lid, eid), digest in acked.items():
                if lid in deleted:
                    continue
                data = bookie.read_entry(lid, eid)
                assert hashlib.sha256(data).hexdigest() == digest, (
                    f"iteration {iteration}: ledger {lid} entry {eid} differs after SIGKILL during compaction")
                checked += 1
            assert checked > 0
            # No index entry may point at a removed log, whatever ledger it belongs to.
            for scope_id, lid in bookie.storage.all_ledgers():
                for eid in bookie.storage.entries_of_ledger(lid, scope_id):
                    bookie.read_entry(lid, eid, scope_id)
        finally:
            bookie.stop()
    # The kills must have landed inside compaction, not only before or after it.
    inside = sum(n for moment, n in moments.items() if moment.startswith(("P", "G")))
    assert inside >= ITERATIONS // 4 and moments["E"] <= ITERATIONS // 2, dict(moments)
    print(f"kill moments over {ITERATIONS} iterations: {dict(moments)}; {len(acked)} entries acknowledged")
