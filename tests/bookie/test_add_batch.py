"""The batch add path: codec.decode_v2_adds, Journal.log_records, Bookie.add_entries and the server's
per-read ADD batches, on real files (DbLedgerStorage, real journal) and real Twisted protocol objects."""

import os
import random
import threading

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from bkfast import _codec, _refcodec
from bkfast.bookie import journal as journal_mod
from bkfast.bookie.bookie import Bookie
from bkfast.codec import (
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    DigestType,
    decode_request,
    decode_response,
    encode_add_request,
    encode_add_request_for_entry,
    encode_entry,
    encode_read_request,
    master_key,
)
from bkfast.conf import ServerConfiguration
from bkfast.errors import (
    BKLedgerFencedException,
    BKUnauthorizedAccessException,
    BKWriteOnReadOnlyBookieException,
)
from bkfast.net.server import BookieServerFactory, ServerSettings

KEY = master_key(b"pw")
OTHER = master_key(b"other")


def _conf(tmp_path, **extra):
    return ServerConfiguration({
        "journalDirectories": [str(tmp_path / "journal")],
        "ledgerDirectories": [str(tmp_path / "ledgers")],
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
        # These servers run on a fake clock, which cannot take the add worker's hand-backs: adds are taken
        # on the (fake) reactor. tests/server/test_add_worker.py serves through the worker.
        "numAddWorkerThreads": 0,
        **extra,
    })


def _entry(ledger, entry_id, payload=b"payload", scope_id=0):
    return encode_entry(ledger, entry_id, entry_id - 1, len(payload) * (entry_id + 1), payload,
                        DigestType.CRC32C, scope_id=scope_id)


# --- codec ------------------------------------------------------------------------------------------------

def _random_frames(rng: random.Random, n: int) -> list:
    frames = []
    for _ in range(n):
        kind = rng.random()
        ledger, eid = rng.randrange(1, 5), rng.randrange(0, 1000)
        key = rng.choice([KEY, OTHER])
        if kind < 0.6:
            flags = rng.choice([0, FLAG_RECOVERY_ADD, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY])
            frames.append(encode_add_request(key, ledger, eid, eid - 1, eid + 1, os.urandom(rng.randrange(0, 200)),
                                             DigestType.CRC32C, b"", flags, rng.choice([0, 1, 2]))[4:])
        elif kind < 0.7:    # scoped entry: left to decode_request (EBADREQ on v2)
            frames.append(encode_add_request_for_entry(key, _entry(ledger, eid, scope_id=7))[4:])
        elif kind < 0.8:    # a version the bookie answers EBADVERSION
            frames.append(encode_add_request(key, ledger, eid, eid - 1, 1, b"x", DigestType.CRC32C, b"", 0, 3)[4:])
        elif kind < 0.9:
            frames.append(encode_read_request(ledger, eid)[4:])
        else:               # truncated ADD
            frames.append(encode_add_request(key, ledger, eid, eid - 1, 1, b"", DigestType.CRC32C)[4:30])
    return frames


def test_decode_v2_adds_agrees_with_reference_and_decode_request():
    rng = random.Random(4)
    frames = _random_frames(rng, 3000)
    i = checked = 0
    while i < len(frames):
        got = _codec.decode_v2_adds(frames, i)
        assert got == _refcodec.decode_v2_adds(frames, i)
        adds, ids, end = got
        assert end >= i and len(adds) == len(ids) == end - i
        for frame, (entry, key, recovery, high), (ledger_id, entry_id, version) in zip(
                frames[i:end], adds, ids, strict=True):
            r = decode_request(frame)
            assert (bytes(r.entry), r.master_key) == (entry, key)
            assert (r.ledger_id, r.entry_id, r.version) == (ledger_id, entry_id, version)
            assert recovery == bool(r.flags & FLAG_RECOVERY_ADD)
            assert high == bool(r.flags & (FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY))
            checked += 1
        if end < len(frames):   # the frame it stopped at is not a plain v2 ADD
            frame = frames[end]
            try:
                r = decode_request(frame)
            except Exception:
                pass
            else:
                assert r.opcode != 1 or r.version > 2 or r.entry_format == 2
        i = end + 1
    assert checked > 1000


def test_decode_v2_adds_shares_equal_master_keys():
    frames = [encode_add_request(KEY, 1, e, e - 1, 1, b"x", DigestType.CRC32C)[4:] for e in range(3)]
    frames.append(encode_add_request(OTHER, 1, 3, 2, 1, b"x", DigestType.CRC32C)[4:])
    adds, _, end = _codec.decode_v2_adds(frames)
    assert end == 4
    assert adds[0][1] is adds[1][1] is adds[2][1] and adds[3][1] == OTHER


# --- journal ----------------------------------------------------------------------------------------------

def test_log_records_completes_one_token_after_all_records_are_durable(tmp_path):
    conf = _conf(tmp_path)
    batches = []
    done = threading.Event()

    def sink(tokens):
        batches.append(list(tokens))
        if "tok" in tokens:
            done.set()

    j = journal_mod.Journal(str(tmp_path / "journal"), conf, sink)
    j.start()
    try:
        records = [b"r%d" % i * 10 for i in range(50)]
        j.log_records(records, "tok")
        assert done.wait(10)
        with pytest.raises(ValueError):
            j.log_records([b"x", b""], "bad")
    finally:
        j.stop()
    tokens = [t for b in batches for t in b]
    assert tokens == [None] * 49 + ["tok"]
    read = [rec for _, rec in journal_mod.scan_journal(str(tmp_path / "journal"), j.current_journal_id)]
    assert read == records
    assert j.last_log_mark.offset > 0


# --- bookie -----------------------------------------------------------------------------------------------

class _Waiter:
    def __init__(self):
        self.event = threading.Event()
        self.calls = []

    def __call__(self, accepted, error):
        self.calls.append((accepted, error))
        self.event.set()

    def wait(self):
        assert self.event.wait(10), "batch never completed"
        return self.calls[0]


def test_add_entries_checks_each_add_like_add_entry(tmp_path):
    with Bookie(_conf(tmp_path)) as bookie:
        w = _Waiter()
        adds = [(_entry(1, e), KEY, False, False) for e in range(5)]
        assert bookie.add_entries(adds, w) == []
        assert w.wait() == (None, None)
        assert bookie.read_entry(1, 4) == _entry(1, 4)

        # wrong key in the middle, negative ids: refused at once, the rest accepted
        w = _Waiter()
        adds = [(_entry(1, 5), KEY, False, False), (_entry(1, 6), OTHER, False, False),
                (_entry(1, 7), KEY, False, False)]
        failures = bookie.add_entries(adds, w)
        assert [i for i, _ in failures] == [1]
        assert isinstance(failures[0][1], BKUnauthorizedAccessException)
        assert w.wait() == ([0, 2], None)

        # fenced: normal adds refused, recovery adds accepted
        bookie.fence_sync(1, KEY)
        w = _Waiter()
        failures = bookie.add_entries([(_entry(1, 8), KEY, False, False), (_entry(1, 9), KEY, True, True)], w)
        assert [(i, type(e)) for i, e in failures] == [(0, BKLedgerFencedException)]
        assert w.wait() == ([1], None)
        assert bookie.read_entry(1, 9) == _entry(1, 9)

        # read-only: only high-priority adds pass; a batch with nothing accepted never calls back
        bookie.read_only = True
        w = _Waiter()
        failures = bookie.add_entries([(_entry(2, 0), KEY, False, False)], w)
        assert [type(e) for _, e in failures] == [BKWriteOnReadOnlyBookieException]
        assert bookie.add_entries([(_entry(2, 1), KEY, False, True)], w) == []
        assert w.wait() == (None, None) and len(w.calls) == 1
        bookie.read_only = False

    # the journal has every accepted entry after its ledger's key: a restart replays them
    with Bookie(_conf(tmp_path)) as bookie:
        assert bookie.read_entry(1, 7) == _entry(1, 7)
        assert bookie.read_entry(2, 1) == _entry(2, 1)
        assert bookie.storage.get_master_key(2, 0) == KEY


def test_add_entries_checks_the_key_of_every_add_even_in_a_run_of_one_ledger(tmp_path):
    """Admission skips the lookup for a run of adds to the ledger it admitted last: the key, the scope and
    the fence must still be each add's own."""
    with Bookie(_conf(tmp_path)) as bookie:
        bookie.fence_sync(3, KEY, scope_id=0)                    # ledger 3 of scope 0 fenced; scope 9's is not
        w = _Waiter()
        adds = [(_entry(1, 0), KEY, False, False), (_entry(1, 1), OTHER, False, False),
                (_entry(1, 2), KEY, False, False), (_entry(2, 0), KEY, False, False),
                (_entry(1, 3), KEY, False, False), (_entry(3, 0, scope_id=9), KEY, False, False),
                (_entry(3, 0), KEY, False, False), (_entry(3, 1, scope_id=9), OTHER, False, False),
                (_entry(3, 2, scope_id=9), KEY, False, False)]
        failures = bookie.add_entries(adds, w)
        assert [(i, type(e)) for i, e in failures] == [(1, BKUnauthorizedAccessException),
                                                       (6, BKLedgerFencedException),
                                                       (7, BKUnauthorizedAccessException)]
        assert w.wait() == ([0, 2, 3, 4, 5, 8], None)
        assert bookie.read_entry(3, 2, scope_id=9) == _entry(3, 2, scope_id=9)
        assert bookie.entries_of_ledger(1) == [0, 2, 3]


def test_add_entries_checks_every_add_of_writers_taking_turns_over_more_ledgers_than_it_remembers(tmp_path):
    """Admission remembers the last few ledgers it admitted (writers round-robin over ledgers); with adds
    taking turns over 10 ledgers, more than it remembers, a wrong key and a fenced ledger are still refused
    wherever they come, and every other add is stored."""
    with Bookie(_conf(tmp_path)) as bookie:
        bookie.fence_sync(107, KEY, scope_id=0)
        w = _Waiter()
        adds, refused = [], {}
        for round_ in range(6):
            for ledger in range(100, 110):
                key = OTHER if (ledger, round_) in ((103, 4), (109, 1)) else KEY
                if key is OTHER:
                    refused[len(adds)] = BKUnauthorizedAccessException
                elif ledger == 107:
                    refused[len(adds)] = BKLedgerFencedException
                adds.append((_entry(ledger, round_), key, False, False))
        failures = bookie.add_entries(adds, w)
        assert {i: type(e) for i, e in failures} == refused
        assert w.wait() == ([i for i in range(len(adds)) if i not in refused], None)
        assert bookie.entries_of_ledger(103) == [0, 1, 2, 3, 5]
        assert bookie.entries_of_ledger(109) == [0, 2, 3, 4, 5]
        assert bookie.entries_of_ledger(100) == list(range(6))


# --- server -----------------------------------------------------------------------------------------------

class _Dispatcher:
    """Collects the Bookie's completion batches; the test runs them on its own thread ('reactor')."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches = []
        self.event = threading.Event()

    def __call__(self, run, batch):
        with self.lock:
            self.batches.append((run, batch))
        self.event.set()

    def drain(self, until, timeout=10.0):
        import time
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "completions did not arrive"
            self.event.wait(0.05)
            self.event.clear()
            with self.lock:
                batches, self.batches = self.batches, []
            for run, batch in batches:
                run(batch)


def _responses(data: bytes):
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(decode_response(data[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def test_server_batches_adds_keeps_order_and_bounds(tmp_path):
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path, maxPendingAddRequestsPerThread=6)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        clock = task.Clock()
        factory = BookieServerFactory(bookie, ServerSettings.from_conf(conf), reactor=clock)
        proto = factory.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        adds = [encode_add_request(KEY, 9, e, e - 1, e + 1, b"x", DigestType.CRC32C) for e in range(4)]
        read = encode_read_request(9, 0)
        more = [encode_add_request(KEY, 9, e, e - 1, e + 1, b"x", DigestType.CRC32C) for e in range(4, 8)]
        bad_key = encode_add_request(OTHER, 9, 8, 7, 9, b"x", DigestType.CRC32C)
        proto.dataReceived(b"".join(adds) + read + bad_key + b"".join(more))
        clock.advance(0)
        # the read ran after the 4 adds before it reached the Bookie (write cache): served inline;
        # of the next batch (bad key, 4..7) only 2 fit maxPendingAddRequestsPerThread=6: 5..7 get
        # ETOOMANYREQUESTS at once; the wrong key is refused (EUA) without a journal record.
        first = _responses(transport.value())
        assert (first[0].opcode, first[0].rc, first[0].entry_id) == (2, 0, 0)
        assert sorted((r.rc, r.entry_id) for r in first[1:]) == [(102, 8), (106, 5), (106, 6), (106, 7)]
        transport.clear()
        dispatcher.drain(lambda: factory.pending_adds == 0)
        clock.advance(0)
        acks = _responses(transport.value())
        assert [(r.opcode, r.rc, r.entry_id) for r in acks] == [(1, 0, e) for e in range(5)]
        assert proto.inflight_adds == 0
        assert bookie.known_lac(0, 9) == 3   # entry 4 piggy-backs LAC 3


def test_v3_adds_of_one_read_are_one_bookie_batch_and_cached_v3_reads_skip_the_storage_read(tmp_path):
    """The server's v3 fast path is really taken: one add_entries call for a read's ADD_ENTRYs, and
    plain READ_ENTRYs of cached entries answered without Bookie.read_entry (the pool/disk path)."""
    from bkfast.proto import BookkeeperProtocol_pb2 as pb

    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        calls = {"add_entries": 0, "read_entry": 0}
        add_entries, read_entry = bookie.add_entries, bookie.read_entry

        def counting_add_entries(*a, **k):
            calls["add_entries"] += 1
            return add_entries(*a, **k)

        def counting_read_entry(*a, **k):
            calls["read_entry"] += 1
            return read_entry(*a, **k)

        bookie.add_entries, bookie.read_entry = counting_add_entries, counting_read_entry
        clock = task.Clock()
        factory = BookieServerFactory(bookie, ServerSettings.from_conf(conf), reactor=clock)
        proto = factory.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)

        def request(op, txn, **fields):
            r = pb.Request()
            r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, op, txn
            sub = r.addRequest if op == pb.ADD_ENTRY else r.readRequest
            for k, v in fields.items():
                setattr(sub, k, v)
            body = r.SerializeToString()
            return len(body).to_bytes(4, "big") + body

        adds = b"".join(request(pb.ADD_ENTRY, e, ledgerId=4, entryId=e, masterKey=KEY,
                                body=_entry(4, e)) for e in range(50))
        proto.dataReceived(adds)
        dispatcher.drain(lambda: factory.pending_adds == 0)
        clock.advance(0)
        assert calls["add_entries"] == 1
        transport.clear()
        proto.dataReceived(b"".join(request(pb.READ_ENTRY, 100 + e, ledgerId=4, entryId=e) for e in range(50)))
        clock.advance(0)
        assert calls["read_entry"] == 0
        data = transport.value()
        answers = []
        while data:
            n = int.from_bytes(data[:4], "big")
            answers.append(pb.Response.FromString(data[4:4 + n]))
            data = data[4 + n:]
        assert [(a.header.txnId, a.status, a.readResponse.body) for a in answers] == [
            (100 + e, pb.EOK, _entry(4, e)) for e in range(50)]
        assert all(a.readResponse.maxLAC == 48 for a in answers)   # entry 49 piggy-backs LAC 48
        factory.stopFactory()
