"""Compaction crash-test child: writes ledgers, deletes some, and compacts until it is killed.

    python -m tests.crash.compaction_child DATA_DIR SEED FIRST_LEDGER

Prints `A <ledger> <entry> <sha256>` per acknowledged (durable) add, `C` when the writes are checkpointed,
`S` when the ledgers are deleted and garbage collection starts, `P <step> <log id hex>` after each compaction
step (copied / indexed / removed),
`G <logs compacted>` after each GC cycle and `E` at the end. Deleted ledgers are appended (and fsynced) to
DATA_DIR/deleted.txt before they leave the metadata source the GC asks; the parent never checks them.
Small entry logs and a throttled compaction make a SIGKILL land between any two steps.
"""

import hashlib
import os
import random
import sys
import threading

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.conf import ServerConfiguration

LEDGERS = 8
ENTRIES = 40
PASSWORD = b"compaction-crash"


def compaction_conf(data_dir: str) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [os.path.join(data_dir, "journal")],
        "ledgerDirectories": [os.path.join(data_dir, "ledgers")],
        "ledgerStorageClass": os.environ.get(
            "BKFAST_LEDGER_STORAGE", "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"),
        "flushInterval": 200,
        "journalMaxSizeMB": 1,
        "journalPreAllocSizeMB": 1,
        "dbStorage_writeCacheMaxSizeMb": 4,
        "dbStorage_readAheadCacheMaxSizeMb": 4,
        "logSizeLimit": 256 * 1024,
        "compactionRate": 400,
    })


def read_deleted(data_dir: str) -> set[int]:
    try:
        with open(os.path.join(data_dir, "deleted.txt")) as f:
            return {int(line) for line in f if line.strip()}
    except FileNotFoundError:
        return set()


class DeletedFile:
    """The metadata source: every ledger exists unless it is listed in deleted.txt."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, "deleted.txt")
        self.deleted = read_deleted(data_dir)

    def delete(self, ledger_id: int) -> None:
        with open(self.path, "a") as f:
            f.write(f"{ledger_id}\n")
            f.flush()
            os.fsync(f.fileno())
        self.deleted.add(ledger_id)

    def ledgers_exist(self, ledgers):
        return {x for x in ledgers if x.ledger_id not in self.deleted}


def main() -> None:
    data_dir, seed, first_ledger = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    source = DeletedFile(data_dir)
    key = master_key(PASSWORD)
    bookie = Bookie(compaction_conf(data_dir), ledger_exists_source=source)
    bookie.start()
    entries = []
    for lid in range(first_ledger, first_ledger + LEDGERS):
        for eid in range(ENTRIES):
            payload = rng.randbytes(rng.randrange(100, 6000))
            entries.append(encode_entry(lid, eid, eid - 1, 0, payload, DigestType.CRC32C, b""))
    done = threading.Semaphore(0)

    def acked(data, lid, eid):
        def callback(error):
            if error is None:
                say(f"A {lid} {eid} {hashlib.sha256(data).hexdigest()}")
            done.release()
        return callback

    for i, data in enumerate(entries):
        bookie.add_entry(data, key, acked(data, first_ledger + i // ENTRIES, i % ENTRIES))
    for _ in entries:
        done.acquire()
    bookie.checkpoint()
    for logger in bookie.storage.entry_loggers():
        logger.roll()
    say("C")
    candidates = sorted({lid for _, lid in bookie.storage.all_ledgers()} - source.deleted)
    for lid in rng.sample(candidates, len(candidates) // 2):
        source.delete(lid)
    bookie.gc.compactor.step_hook = lambda step, log_id: say(f"P {step} {log_id:x}")
    say("S")
    for _ in range(3):
        stats = bookie.gc.run_once(force_major=True)
        say(f"G {stats.logs_compacted if stats else 0}")
    bookie.stop()
    say("E")


if __name__ == "__main__":
    main()
