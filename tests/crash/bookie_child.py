"""Crash-test child: runs a Bookie and adds entries until it is killed.

    python -m tests.crash.bookie_child DATA_DIR SEED FIRST_LEDGER [STORAGE [JOURNALS]]

STORAGE is "db" (DbLedgerStorage, the default), "sorted" (SortedLedgerStorage) or "interleaved"
(InterleavedLedgerStorage). JOURNALS (default 1) is the number of journal directories; with more than
one, the ledgers (consecutive ids) spread over all of them, and half of the adds go in batches through
Bookie.add_entries (the server's path, split over the journals) instead of one by one. With
DbLedgerStorage, some adds come as a server's socket read of v2 ADD frames: the add fast path
(bkfast.bookie.fast_adds) takes what it may, add_entries the rest.

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
import struct
import sys
import threading

from bkfast.bookie.bookie import Bookie
from bkfast.codec import (
    DigestType,
    FrameSplitter,
    decode_v2_adds,
    encode_add_request_for_entry,
    encode_entry,
    master_key,
)
from bkfast.conf import ServerConfiguration

LEDGERS = 20
PASSWORD = b"crash-test"
MAX_IN_FLIGHT = 256
TAKEN_ADD = struct.Struct("=qqq")       # bkfast/_addsink.pxd's TakenAdd: the ids of a fast add's answer


STORAGE_CLASSES = {
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
}


def journal_dirs(data_dir: str, journals: int = 1) -> list[str]:
    if journals == 1:
        return [os.path.join(data_dir, "journal")]
    return [os.path.join(data_dir, f"journal{i}") for i in range(journals)]


def crash_conf(data_dir: str, storage: str = "db", journals: int = 1) -> ServerConfiguration:
    return ServerConfiguration({
        "journalDirectories": journal_dirs(data_dir, journals),
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
    journals = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    rng = random.Random(seed)
    out_lock = threading.Lock()
    in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    key = master_key(PASSWORD)
    bookie = Bookie(crash_conf(data_dir, storage, journals))
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

    def make_entry(ledger):
        entry_id = next_entry[ledger]
        next_entry[ledger] += 1
        size = int(2 ** rng.uniform(0, 16))
        lengths[ledger] += size
        entry = encode_entry(ledger, entry_id, entry_id - 1, lengths[ledger], rng.randbytes(size),
                             DigestType.CRC32C)
        return entry_id, entry, hashlib.sha256(entry).hexdigest()

    # DbLedgerStorage: some adds arrive as a server's socket read of v2 ADD frames, through the add fast
    # path (bkfast.bookie.fast_adds) as far as it takes them, the rest through add_entries.
    fast = bookie.add_runs()
    splitter = FrameSplitter(1 << 20)
    digests: dict = {}

    def fast_done(error, taken, n):
        for ledger, entry_id, _ in TAKEN_ADD.iter_unpack(taken):
            digest = digests.pop((ledger, entry_id))
            say(f"A {ledger} {entry_id} {digest}" if error is None else f"E {ledger} {entry_id} {error!r}")
            in_flight.release()

    def listed_done(batch, accepted, error):
        for lg, entry_id in (batch if accepted is None else [batch[i] for i in accepted]):
            digest = digests.pop((lg, entry_id))
            say(f"A {lg} {entry_id} {digest}" if error is None else f"E {lg} {entry_id} {error!r}")
            in_flight.release()

    def socket_read(ledgers: list) -> int:
        frames = []
        for lg in ledgers:
            entry_id, entry, digest = make_entry(lg)
            digests[(lg, entry_id)] = digest
            frames.append(encode_add_request_for_entry(key, entry))
            in_flight.acquire()
        run = fast.open(1 << 20)
        try:
            listed = splitter.feed(b"".join(frames), run)
        finally:
            _, refused = fast.close(run, fast_done)
        for error, taken, n in refused:
            fast_done(error, taken, n)
        if listed:
            adds, ids, _ = decode_v2_adds(listed)
            batch = [(lg, entry_id) for lg, entry_id, _ in ids]
            for i, error in bookie.add_entries(adds, lambda accepted, error: listed_done(batch, accepted, error)):
                digests.pop(batch[i])
                say(f"E {batch[i][0]} {batch[i][1]} {error!r}")
                in_flight.release()
        return len(frames)

    while True:
        ledger = rng.choice(list(next_entry))
        if ledger == fenced_ledger and adds >= fence_after:
            bookie.fence_sync(ledger, key)
            say(f"F {ledger}")
            del next_entry[ledger]
            continue
        if fast is not None and rng.random() < 0.3:
            adds += socket_read(rng.choices(list(next_entry), k=rng.randrange(2, 9)))
            continue
        if journals > 1 and rng.random() < 0.5:
            # One network read's worth of adds over several ledgers (and so several journals).
            batch = [(lg, *make_entry(lg)) for lg in rng.choices(list(next_entry), k=rng.randrange(2, 9))]
            for _ in batch:
                in_flight.acquire()

            def batch_done(accepted, error, batch=batch):
                done_ones = batch if accepted is None else [batch[i] for i in accepted]
                for lg, entry_id, _, digest in done_ones:
                    say(f"A {lg} {entry_id} {digest}" if error is None else f"E {lg} {entry_id} {error!r}")
                for _ in done_ones:
                    in_flight.release()

            refused = bookie.add_entries([(entry, key, False, False) for _, _, entry, _ in batch], batch_done)
            for i, error in refused:
                say(f"E {batch[i][0]} {batch[i][1]} {error!r}")
                in_flight.release()
            adds += len(batch)
            continue
        entry_id, entry, digest = make_entry(ledger)
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
