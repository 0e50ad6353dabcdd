"""Crash-test child: runs a Bookie and adds entries until it is killed.

    python -m tests.crash.bookie_child DATA_DIR SEED FIRST_LEDGER [STORAGE]

STORAGE is "db" (DbLedgerStorage, the default), "sorted" (SortedLedgerStorage) or "interleaved"
(InterleavedLedgerStorage).

Adds entries of random size (1 B .. 64 KiB) to 20 ledgers with many adds in flight and prints one line
per acknowledgement, `A <ledger> <entry> <sha256 of the stored entry>`, only after the bookie called
back with success (so the line means "durable"). Each run also fences one ledger (`F <ledger>` after the
fence is acknowledged). Small journal files, a small write cache and a short flushInterval make journal
rolling, write-cache (or memtable) flushes, index page evictions and checkpoints happen all the time, so
a SIGKILL lands in any of them.
"""

import hashlib
import os
import random
import sys
import threading

from bkfast.bookie.bookie import Bookie
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.conf import ServerConfiguration

LEDGERS = 20
PASSWORD = b"crash-test"
MAX_IN_FLIGHT = 256


STORAGE_CLASSES = {
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
}


def crash_conf(data_dir: str, storage: str = "db") -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": [os.path.join(data_dir, "journal")],
        "ledgerDirectories": [os.path.join(data_dir, "ledgers")],
        "ledgerStorageClass": STORAGE_CLASSES[storage],
        "flushInterval": 100,
        "journalMaxSizeMB": 1,
        "journalPreAllocSizeMB": 1,
        "dbStorage_writeCacheMaxSizeMb": 4,
        "dbStorage_readAheadCacheMaxSizeMb": 4,
        # File-based index: a 1 MiB memtable, 64-entry pages and a 16-page pool (evictions all the time).
        "skipListSizeLimit": 1 << 20,
        "pageSize": 512,
        "pageLimit": 16,
        "logSizeLimit": 4 << 20,
    })


def main() -> None:
    data_dir, seed, first_ledger = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    storage = sys.argv[4] if len(sys.argv) > 4 else "db"
    rng = random.Random(seed)
    out_lock = threading.Lock()
    in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    key = master_key(PASSWORD)
    bookie = Bookie(crash_conf(data_dir, storage))
    bookie.start()
    print("S", flush=True)

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    next_entry = dict.fromkeys(range(first_ledger, first_ledger + LEDGERS), 0)
    lengths = dict.fromkeys(next_entry, 0)
    fenced_ledger = first_ledger + rng.randrange(LEDGERS)
    fence_after = rng.randrange(50, 400)
    adds = 0
    while True:
        ledger = rng.choice(list(next_entry))
        if ledger == fenced_ledger and adds >= fence_after:
            bookie.fence_sync(ledger, key)
            say(f"F {ledger}")
            del next_entry[ledger]
            continue
        entry_id = next_entry[ledger]
        next_entry[ledger] += 1
        size = int(2 ** rng.uniform(0, 16))
        lengths[ledger] += size
        entry = encode_entry(ledger, entry_id, entry_id - 1, lengths[ledger], rng.randbytes(size),
                             DigestType.CRC32C)
        digest = hashlib.sha256(entry).hexdigest()
        in_flight.acquire()

        def done(error, ledger=ledger, entry_id=entry_id, digest=digest):
            in_flight.release()
            if error is None:
                say(f"A {ledger} {entry_id} {digest}")
            else:
                say(f"E {ledger} {entry_id} {error!r}")

        bookie.add_entry(entry, key, done)
        adds += 1


if __name__ == "__main__":
    main()
