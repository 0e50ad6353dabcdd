"""The reactor's add fast path (bkfast.bookie._addrun, bkfast.bookie.fast_adds, bkfast.net.add_runs,
FrameSplitter.feed's sink): a socket read's plain v2 ADDs and v3 ADD_ENTRYs to ledgers the general path
admitted are stored and journaled with no frame made of them, and everything the general path would
refuse still goes to it, in stream order. Real write-cache halves, a real Bookie on DbLedgerStorage with
its journal, and the server's protocol objects."""

import random
import struct
import threading

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from bkfast import _codec, _refcodec
from bkfast._writecache import SegmentPool, WriteCacheHalf
from bkfast.bookie._addrun import TABLE_SLOTS, AddRun
from bkfast.bookie.bookie import Bookie
from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_RECOVERY_ADD,
    DigestType,
    encode_add_request,
    encode_read_request,
    master_key,
)
from bkfast.errors import V2Rc
from bkfast.net.server import BookieServerFactory, ServerSettings
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.stats import StatsRegistry
from tests.bookie.test_add_batch import _conf, _Dispatcher, _responses

KEY = master_key(b"pw")
OTHER = master_key(b"other")
TAKEN = struct.Struct("=qqq")


def _add(ledger, entry_id, key=KEY, payload=b"x", flags=0):
    return encode_add_request(key, ledger, entry_id, entry_id - 1, entry_id + 1, payload, DigestType.CRC32C,
                              flags=flags)


def _run(journals=1, directories=1, limit=1 << 20, rooms=None, half_limit=1 << 30):
    run = AddRun(journals, directories)
    halves = [WriteCacheHalf(SegmentPool()) for _ in range(directories)]
    return run, halves, lambda: run.open(halves, [half_limit] * directories, rooms or [1 << 20] * journals, limit)


def _body(frame: bytes) -> tuple[bytes, bytes]:
    """(master key, entry) of an encoded v2 ADD frame (length prefix included)."""
    return frame[8:28], frame[28:]


# --- AddRun ----------------------------------------------------------------------------------------------

def test_add_run_takes_only_admitted_ledgers_with_their_key_and_stores_them():
    run, halves, start = _run(journals=2, directories=2)
    run.admit(10, KEY, 0, 1)
    run.admit(11, KEY, 1, 0)
    start()
    key, entry = _body(_add(10, 0))
    assert run.take(10, 0, 2, key, entry)
    assert not run.take(10, 1, 2, OTHER, _body(_add(10, 1, OTHER))[1]), "another key takes the general path"
    assert not run.take(12, 0, 2, *_body(_add(12, 0))), "a ledger never admitted takes the general path"
    assert not run.take(10, -1, 2, key, entry), "negative ids take the general path (it refuses them)"
    assert run.take(11, 0, 1, *_body(_add(11, 0)))
    assert run.take(10, 1, 2, *_body(_add(10, 1)))
    shares, stored, lacs = run.close()
    assert stored == [1, 2] and lacs == [], "no ledger is watched: no LAC reported"
    assert [(j, sum(p.count for p in pieces), nbytes) for j, pieces, _, nbytes in shares] == \
        [(0, 2, 2 * len(entry)), (1, 1, len(entry))]
    assert list(TAKEN.iter_unpack(shares[0][2])) == [(10, 0, 2), (10, 1, 2)]
    assert list(TAKEN.iter_unpack(shares[1][2])) == [(11, 0, 1)]
    (piece,) = shares[0][1]
    assert piece.records() == [entry, _body(_add(10, 1))[1]], "the journal records are the entries as received"
    assert bytes(memoryview(piece)) == b"".join(len(r).to_bytes(4, "big") + r for r in piece.records()), \
        "framed as a journal batch holds them"
    assert halves[1].get(10, 0) == entry and halves[0].get(11, 0) == _body(_add(11, 0))[1]
    assert run.count == 3 and run.taken_bytes == 3 * len(entry)


def test_a_journals_records_are_framed_in_segments_and_each_run_gets_its_own_pieces():
    """Records fill a journal's 256 KiB segment across runs; a run whose records pass the end of one goes on
    in a new segment (two pieces); an entry larger than a segment gets one of its own size."""
    run, halves, start = _run(half_limit=1 << 40)
    run.admit(10, KEY, 0, 0)
    payload = b"y" * 60_000
    frames = [_body(_add(10, e, payload=payload)) for e in range(9)]
    start()
    for e in range(3):
        assert run.take(10, e, 2, *frames[e])
    (first,) = run.close()[0][0][1]
    start()
    for e in range(3, 9):
        assert run.take(10, e, 2, *frames[e])
    pieces = run.close()[0][0][1]
    assert [p.count for p in pieces] == [1, 4, 1], "4 of these records fit a segment: the first had room for one"
    assert pieces[0].owner is first.owner and pieces[0].offset == first.nbytes, "the next run goes on after it"
    assert pieces[1].owner is not pieces[0].owner and pieces[2].owner is not pieces[1].owner
    assert [r for p in pieces for r in p.records()] == [f[1] for f in frames[3:]]
    start()
    big = _body(_add(10, 9, payload=b"z" * 300_000))
    assert run.take(10, 9, 2, *big)
    (piece,) = run.close()[0][0][1]
    assert piece.records() == [big[1]] and len(piece.owner) == 4 + len(big[1])


def test_add_run_forgets_fenced_ledgers_and_keeps_within_its_limits():
    run, halves, start = _run(limit=3, rooms=[2])
    run.admit(10, KEY, 0, 0)
    run.forget(10)
    assert not run.knows(10)
    start()
    assert not run.take(10, 0, 2, *_body(_add(10, 0)))
    run.close()
    run.admit(10, KEY, 0, 0)
    run.admit(10 + TABLE_SLOTS * 7, KEY, 0, 0)      # whatever it collides with, 10 may be replaced: no error
    run.admit(10, KEY, 0, 0)
    start()
    assert [run.take(10, e, 2, *_body(_add(10, e))) for e in range(3)] == [True, True, False], "journal room 2"
    run.close()
    run, halves, start = _run(half_limit=1500)
    run.admit(10, KEY, 0, 0)
    start()
    big = _body(_add(10, 0, payload=b"y" * 1000))
    assert run.take(10, 0, 2, *big)
    assert not run.take(10, 1, 2, *_body(_add(10, 1, payload=b"y" * 1000))), "a full half takes the general path"
    assert run.close()[1] == [1]


def test_add_run_reports_the_highest_lac_taken_of_each_watched_ledger():
    run, halves, start = _run()
    run.admit(10, KEY, 0, 0, watched=True)
    run.admit(11, KEY, 0, 0)
    run.admit(12, KEY, 0, 0)
    run.watch(12, True)
    run.watch(13, True)                             # not admitted: nothing to watch
    assert run.watches(10) and not run.watches(11) and run.watches(12) and not run.watches(13)
    start()
    with pytest.raises(RuntimeError):
        run.watch(11, True)
    for e in (4, 9, 7):                             # _add's piggy-backed LAC is entry - 1
        assert run.take(10, e, 2, *_body(_add(10, e)))
    assert run.take(11, 0, 2, *_body(_add(11, 0)))
    assert run.take(12, 3, 2, *_body(_add(12, 3)))
    short = (KEY, _body(_add(12, 4))[1][:20])
    assert not run.take(12, 4, 2, *short), "a watched ledger's entry with no LAC in it: the general path"
    assert run.take(11, 1, 2, *short), "an unwatched ledger's LAC is not read"
    assert sorted(run.close()[2]) == [(10, 8), (12, 2)]
    start()
    assert run.take(10, 10, 2, *_body(_add(10, 10)))
    assert run.close()[2] == [(10, 9)], "each run reports its own LACs"
    run.watch(10, False)
    start()
    assert run.take(10, 11, 2, *_body(_add(10, 11)))
    assert run.close()[2] == []


def test_add_run_checks_its_arguments():
    with pytest.raises(ValueError):
        AddRun(0, 1)
    run, halves, start = _run()
    with pytest.raises(ValueError):
        run.admit(1, b"short", 0, 0)
    with pytest.raises(ValueError):
        run.admit(1, KEY, 1, 0)
    assert run.close() is None, "closing a run that never opened only disarms it"
    start()
    with pytest.raises(RuntimeError):
        start()


# --- the splitter's sink ---------------------------------------------------------------------------------

@pytest.mark.parametrize("splitter_class", [_codec.FrameSplitter, _refcodec.FrameSplitter])
def test_splitter_offers_plain_adds_until_one_is_refused_and_keeps_stream_order(splitter_class):
    """Per feed, the adds the sink took come first in the stream, then every frame it listed: taking them
    first, then handling the list (as the server does), is the stream's order, whatever the chunking."""
    rng = random.Random(7)
    total_taken = total_listed = 0
    for _ in range(60):
        run, halves, start = _run()
        run.admit(10, KEY, 0, 0)
        # each stopper ends the sink's turn in its feed: the general path gets it and all after it
        stoppers = [_add(11, 0), _add(10, 99, OTHER), _add(10, 98, flags=FLAG_RECOVERY_ADD),
                    encode_read_request(10, 0)]
        frames_sent = [_add(10, e) if rng.random() < 0.7 else rng.choice(stoppers) for e in range(12)]
        stream = b"".join(frames_sent)
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randrange(0, 5)))
        splitter = splitter_class(1 << 20)
        seen = []
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            start()
            listed = splitter.feed(stream[a:b], run)
            shares = run.close()[0]
            taken = [(ledger, entry) for _, _, ids, _ in shares for ledger, entry, _ in TAKEN.iter_unpack(ids)]
            seen += [_add(ledger, entry)[4:] for ledger, entry in taken] + listed
            for ledger, entry in taken:
                assert halves[0].get(ledger, entry) == _add(ledger, entry)[28:]
            total_taken += len(taken)
            total_listed += len(listed)
        assert seen == [f[4:] for f in frames_sent]
    assert total_taken > 100 and total_listed > 100


def test_a_feed_releases_the_half_it_put_into():
    run, halves, start = _run()
    run.admit(10, KEY, 0, 0)
    start()
    assert _codec.FrameSplitter(1 << 20).feed(_add(10, 0) + _add(10, 1)[:10], run) == []
    # the half's mutex is free again before the run closes: another thread can use the half
    other = threading.Thread(target=lambda: halves[0].put(10, 5, b"z" * 32))
    other.start()
    other.join(5)
    assert not other.is_alive(), "the half stayed locked after the feed"
    run.close()


# --- through a Bookie and the server ---------------------------------------------------------------------

class _Server:
    def __init__(self, bookie, conf, dispatcher):
        self.clock = task.Clock()
        self.factory = BookieServerFactory(bookie, ServerSettings.from_conf(conf), reactor=self.clock)
        self.proto = self.factory.buildProtocol(None)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.dispatcher = dispatcher

    def send(self, data: bytes) -> list:
        """Deliver one socket read; the answers once every add of it completed."""
        self.proto.dataReceived(data)
        self.clock.advance(0)
        self.dispatcher.drain(lambda: self.factory.pending_adds == 0)
        self.clock.advance(0)
        out = _responses(self.transport.value())
        self.transport.clear()
        return out


def test_server_takes_adds_of_admitted_ledgers_and_the_general_path_keeps_every_verdict(tmp_path):
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher, stats=StatsRegistry(enabled=True).logger()) as bookie:
        server = _Server(bookie, conf, dispatcher)
        run = bookie.fast_adds.run
        # The first read: the connection's protocol is not known yet, and ledger 9 is new: general path.
        assert [(r.rc, r.entry_id) for r in server.send(b"".join(_add(9, e) for e in range(3)))] == \
            [(V2Rc.EOK, e) for e in range(3)]
        assert run.knows(9)
        records_before = bookie.journals.records_written
        adds_before = bookie.stats.add_entry.count(True)
        answers = server.send(b"".join(_add(9, e) for e in range(3, 40)))
        assert run.count == 37, "the whole read went through the fast path"
        assert [(r.opcode, r.rc, r.entry_id) for r in answers] == [(1, V2Rc.EOK, e) for e in range(3, 40)]
        assert bookie.journals.records_written == records_before + 37, "one journal record per add"
        assert bookie.stats.add_entry.count(True) == adds_before + 37, "BOOKIE_ADD_ENTRY counts taken adds"
        assert server.factory.pending_adds == 0 and server.proto.inflight_adds == 0
        for e in range(40):
            assert bookie.read_entry(9, e) == _add(9, e)[28:]
        # A wrong key after taken adds: refused by the general path (EUA), the adds before it stored.
        answers = server.send(_add(9, 40) + _add(9, 41, OTHER) + _add(9, 42))
        assert sorted((r.rc, r.entry_id) for r in answers) == [(V2Rc.EOK, 40), (V2Rc.EOK, 42), (V2Rc.EUA, 41)]
        # A fence: the ledger leaves the table and its next adds are refused.
        fenced = []
        bookie.fence(9, KEY, fenced.append)
        dispatcher.drain(lambda: fenced)
        assert fenced == [None] and not run.knows(9)
        answers = server.send(b"".join(_add(9, e) for e in range(43, 46)))
        assert [(r.rc, r.entry_id) for r in answers] == [(V2Rc.EFENCED, e) for e in range(43, 46)]
        # A deleted ledger is forgotten as well.
        server.send(_add(12, 0) + _add(12, 1))
        assert run.knows(12)
        bookie.delete_ledger(12)
        assert not run.knows(12)


def test_a_fencing_read_on_another_connection_splits_a_writers_stream_exactly(tmp_path):
    """Fence vs in-flight adds: a writer's reads go through runs while a recovering client's fencing read
    arrives on its own connection between two of them. Every add before the fence is acknowledged and
    readable, every add after it is refused EFENCED (none stored), and the fence is answered durable."""
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path, numReadWorkerThreads=0)     # the fencing read's entry read inline: no thread
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        writer = _Server(bookie, conf, dispatcher)
        recovery = writer.factory.buildProtocol(None)
        recovery_out = StringTransport()
        recovery.makeConnection(recovery_out)
        acked, refused = [], []
        entry = 0
        rng = random.Random(3)
        fence_at = rng.randrange(5, 15)
        for read in range(30):
            batch = [_add(21, entry + k) for k in range(rng.randrange(1, 40))]
            entry += len(batch)
            writer.proto.dataReceived(b"".join(batch))
            if read == fence_at:
                assert bookie.fast_adds.run.knows(21), "the writer's adds were going through runs"
                recovery.dataReceived(encode_read_request(21, 0, flags=FLAG_DO_FENCING, master_key=KEY))
                assert not bookie.fast_adds.run.knows(21)
        def answered():
            writer.clock.advance(0)             # the answers are written from the reactor's next turn
            return writer.factory.pending_adds == 0 and recovery_out.value()

        dispatcher.drain(answered)
        for r in _responses(writer.transport.value()):
            (acked if r.rc == V2Rc.EOK else refused).append((r.rc, r.entry_id))
        fence_answer = _responses(recovery_out.value())
        assert [(r.opcode, r.rc) for r in fence_answer] == [(2, V2Rc.EOK)]
        assert acked and refused and len(acked) + len(refused) == entry
        assert {rc for rc, _ in refused} == {V2Rc.EFENCED}
        last_acked = max(e for _, e in acked)
        assert sorted(e for _, e in acked) == list(range(last_acked + 1)), "no gap before the fence"
        assert min(e for _, e in refused) == last_acked + 1, "everything after the fence refused"
        for e in range(last_acked + 1):
            assert bookie.read_entry(21, e) == _add(21, e)[28:]
        assert bookie.storage.get_last_entry_id(21) == last_acked
        assert bookie.is_fenced(21)


def test_a_bad_length_prefix_after_taken_adds_closes_the_connection_and_keeps_the_adds_before_it(tmp_path):
    """Bad input mid-read: the adds before a negative length prefix are stored and journaled (the run is
    closed in the splitter's `finally`), nothing after it is, the connection is closed, the bookie serves on."""
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        server = _Server(bookie, conf, dispatcher)
        server.send(_add(31, 0))                                  # admits ledger 31
        before = b"".join(_add(31, e) for e in range(1, 20))
        after = b"".join(_add(31, e) for e in range(20, 25))
        server.proto.dataReceived(before + (-5).to_bytes(4, "big", signed=True) + after)
        assert bookie.fast_adds.run.count == 19, "the adds before the bad prefix went through the run"
        assert not server.proto.connected
        assert server.transport.disconnecting
        dispatcher.drain(lambda: server.factory.pending_adds == 0)
        for e in range(20):
            assert bookie.read_entry(31, e) == _add(31, e)[28:]
        assert bookie.storage.get_last_entry_id(31) == 19
        other = _Server(bookie, conf, dispatcher)
        assert [(r.rc, r.entry_id) for r in other.send(_add(31, 20))] == [(V2Rc.EOK, 20)]


def test_a_run_opens_only_at_its_first_add_and_not_while_read_only(tmp_path):
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        fast = bookie.fast_adds
        fast.note_admitted(9, KEY)
        splitter = _codec.FrameSplitter(1 << 20)
        answered = []

        def feed(data):
            run = fast.open(100)
            try:
                listed = splitter.feed(data, run)
                opened = run.is_open
            finally:
                taken, _ = fast.close(run, lambda error, ids, n: answered.append((error, n)))
            return opened, taken, listed

        # no add in the read: the run never opens (no lock taken), and the ledger lock is free after
        assert feed(encode_read_request(9, 0)) == (False, 0, [encode_read_request(9, 0)[4:]])
        assert bookie._ledger_lock.acquire(blocking=False)
        bookie._ledger_lock.release()
        bookie.set_read_only_reason("test", True, "forced by the test")
        opened, taken, listed = feed(_add(9, 0))
        assert (opened, taken, len(listed)) == (False, 0, 1), "read-only: the general path refuses it"
        bookie.set_read_only_reason("test", False, "")
        assert feed(_add(9, 0))[:2] == (True, 1)
        assert fast.open(0) is None
        dispatcher.drain(lambda: answered)
        assert answered == [(None, 1)]


def test_adds_of_a_ledger_whose_lac_a_reader_tracks_go_through_runs_and_wake_its_long_poll(tmp_path):
    """A tailing reader tracks ledger 9's LAC and long-polls it: the writer's adds still go through runs
    (other ledgers' too), each run advances the LAC the Bookie knows, and the waiter fires once it passes
    the LAC it waits on. The tracker's idle sweep and a delete stop the watch."""
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher, stats=StatsRegistry(enabled=True).logger()) as bookie:
        server = _Server(bookie, conf, dispatcher)
        run = bookie.fast_adds.run
        server.send(_add(9, 0) + _add(9, 1) + _add(14, 0))        # the general path admits both ledgers
        assert run.knows(9) and not run.watches(9)
        assert bookie.known_lac(0, 9) == 0, "the LAC piggy-backed on entry 1, loaded from storage"
        assert run.watches(9) and not run.watches(14), "tracking a LAC watches that ledger only"
        woken = []
        bookie.watch_lac(0, 9, 4, lambda: woken.append(bookie.known_lac(0, 9)))
        answers = server.send(b"".join(_add(9, e) for e in range(2, 5)) + _add(14, 1))
        assert run.count == 4, "tracked or not, the read went through the run"
        assert [r.rc for r in answers] == [V2Rc.EOK] * 4
        assert bookie.known_lac(0, 9) == 3 and woken == [], "LAC 3 does not pass the 4 the reader waits on"
        server.send(_add(9, 5) + _add(9, 6))
        assert run.count == 2
        assert woken == [5], "the run's close advanced the LAC to 5 and woke the long poll"
        assert bookie.known_lac(0, 14) == 0
        bookie.lac._sweep(bookie.lac._clock() + 2 * bookie.lac.idle_timeout_s)
        assert not run.watches(9) and run.knows(9), "idle: no longer tracked, still admitted"
        server.send(_add(9, 7))
        assert run.count == 1
        assert bookie.known_lac(0, 9) == 6
        bookie.delete_ledger(9)
        assert not run.knows(9) and (0, 9) not in bookie.lac


# --- v3 --------------------------------------------------------------------------------------------------

def _v3_add(ledger, entry_id, txn, key=KEY, body=None, **fields):
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.ADD_ENTRY, txn
    r.addRequest.ledgerId, r.addRequest.entryId, r.addRequest.masterKey = ledger, entry_id, key
    r.addRequest.body = body if body is not None else _add(ledger, entry_id)[28:]
    for name, value in fields.items():
        setattr(r.addRequest, name, value)
    data = r.SerializeToString()
    return len(data).to_bytes(4, "big") + data


def _v3_answers(data: bytes) -> list:
    out = []
    while data:
        n = int.from_bytes(data[:4], "big")
        out.append(pb.Response.FromString(data[4:4 + n]))
        data = data[4 + n:]
    return out


@pytest.mark.parametrize("splitter_class", [_codec.FrameSplitter, _refcodec.FrameSplitter])
def test_v3_splitter_offers_plain_add_entries_with_their_txn_and_lists_the_rest(splitter_class):
    run, halves, start = _run()
    run.admit(10, KEY, 0, 0)
    plain = [_v3_add(10, e, 500 + e) for e in range(3)]
    # each is not plain: recovery, another entry's body than the request names, no entry header at all
    odd = [_v3_add(10, 3, 503, flag=pb.AddRequest.RECOVERY_ADD), _v3_add(10, 4, 504, body=_add(10, 9)[28:]),
           _v3_add(10, 5, 505, body=b"short")]
    for other in odd:
        start()
        listed = splitter_class(1 << 20).feed(b"".join([*plain, other, plain[0]]), run, True)
        shares = run.close()[0]
        assert list(TAKEN.iter_unpack(shares[0][2])) == [(10, e, 500 + e) for e in range(3)], "tag: the txn id"
        assert listed == [other[4:], plain[0][4:]]
    start()
    assert splitter_class(1 << 20).feed(plain[0], run, False) == [plain[0][4:]], "a v3 frame is no v2 ADD"
    run.close()


def test_server_takes_v3_adds_of_admitted_ledgers_and_answers_each_txn(tmp_path):
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        server = _Server(bookie, conf, dispatcher)
        run = bookie.fast_adds.run
        server.proto.dataReceived(b"".join(_v3_add(4, e, e) for e in range(3)))   # ledger 4 admitted here
        server.dispatcher.drain(lambda: server.factory.pending_adds == 0)
        server.clock.advance(0)
        server.transport.clear()
        assert run.knows(4)
        server.proto.dataReceived(b"".join(_v3_add(4, e, 1000 + e) for e in range(3, 30)) + _v3_add(4, 30, 2000, OTHER))
        assert run.count == 27
        server.dispatcher.drain(lambda: server.factory.pending_adds == 0)
        server.clock.advance(0)
        answers = _v3_answers(server.transport.value())
        assert sorted((a.header.txnId, a.status, a.addResponse.entryId) for a in answers) == \
            [(1000 + e, pb.EOK, e) for e in range(3, 30)] + [(2000, pb.EUA, 30)]
        assert all(a.header.operation == pb.ADD_ENTRY and a.addResponse.ledgerId == 4 for a in answers)
        for e in range(30):
            assert bookie.read_entry(4, e) == _add(4, e)[28:]
        server.factory.stopFactory()


def _v3_long_poll(ledger, previous_lac, timeout_ms, txn):
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    q = r.readRequest
    q.ledgerId, q.entryId, q.flag = ledger, -1, pb.ReadRequest.ENTRY_PIGGYBACK
    q.previousLAC, q.timeOut = previous_lac, timeout_ms
    data = r.SerializeToString()
    return len(data).to_bytes(4, "big") + data


def test_a_v3_long_poll_is_answered_by_adds_a_run_takes_on_another_connection(tmp_path):
    """A tailing reader's long poll (ENTRY_PIGGYBACK, previousLAC 2) waits on its connection; the writer's
    v2 adds go through runs on another connection; the poll is answered with maxLAC and the entry after
    previousLAC as soon as a run's adds carry a LAC past 2, not before."""
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path, numReadWorkerThreads=0)     # the woken poll's entry read inline: no thread
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        writer = _Server(bookie, conf, dispatcher)
        writer.send(_add(41, 0) + _add(41, 1))                     # admits ledger 41 (LAC 0)
        reader = writer.factory.buildProtocol(None)
        reader_out = StringTransport()
        reader.makeConnection(reader_out)
        reader.dataReceived(_v3_long_poll(41, 2, 60_000, txn=77))
        writer.clock.advance(0)
        assert reader_out.value() == b"", "LAC 0 does not pass 2: the poll waits"
        assert bookie.fast_adds.run.watches(41)
        writer.send(_add(41, 2) + _add(41, 3))                     # LAC 2: still waiting
        assert bookie.fast_adds.run.count == 2
        writer.clock.advance(0)
        assert reader_out.value() == b""
        writer.send(b"".join(_add(41, e) for e in range(4, 9)))     # LAC 7
        assert bookie.fast_adds.run.count == 5, "the adds that wake the poll went through the run"
        writer.clock.advance(0)
        (answer,) = _v3_answers(reader_out.value())
        assert answer.header.txnId == 77 and answer.status == pb.EOK
        assert answer.readResponse.maxLAC == 7
        assert answer.readResponse.entryId == 3 and answer.readResponse.body == _add(41, 3)[28:]


class _HoldingDispatcher(_Dispatcher):
    """A _Dispatcher that keeps one journal thread's completion batches back until released."""

    def __init__(self, held_thread: str):
        super().__init__()
        self.held_thread = held_thread
        self.holding = False
        self.held: list = []

    def __call__(self, run, batch):
        if self.holding and threading.current_thread().name == self.held_thread:
            with self.lock:
                self.held.append((run, batch))
            return
        super().__call__(run, batch)

    def release(self):
        with self.lock:
            self.holding = False
            self.batches.extend(self.held)
            self.held = []
        self.event.set()


def test_with_two_journals_a_general_batch_is_answered_share_by_share_and_runs_go_on_meanwhile(tmp_path):
    """A general-path batch spanning both journals is answered journal share by journal share, each when its
    own journal is durable; meanwhile the connection's next read goes through a run. With journal 1's
    completions held back, journal 0's ledgers (the batch's and the run's) are answered, in entry order, and
    journal 1's only once it completes: no ledger's answer overtakes an earlier entry of it."""
    dispatcher = _HoldingDispatcher("journal-1")
    conf = _conf(tmp_path, journalDirectories=[str(tmp_path / "j0"), str(tmp_path / "j1")])
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        server = _Server(bookie, conf, dispatcher)
        run = bookie.fast_adds.run
        server.send(_add(2, 0) + _add(3, 0))                        # admits 2 (journal 0) and 3 (journal 1)
        dispatcher.holding = True
        server.proto.dataReceived(_add(4, 0) + _add(5, 0))         # new ledgers: a general batch on both
        server.proto.dataReceived(b"".join(_add(2, e) + _add(3, e) for e in range(1, 6)))
        assert run.count == 10, "the batch is unanswered, and the read's adds went through a run"
        dispatcher.drain(lambda: server.factory.pending_adds == 6)  # journal 0's shares: ledger 4's and 2's
        server.clock.advance(0)
        first = _responses(server.transport.value())
        server.transport.clear()
        assert [(r.ledger_id, r.entry_id) for r in first if r.ledger_id == 4] == [(4, 0)]
        assert [r.entry_id for r in first if r.ledger_id == 2] == [1, 2, 3, 4, 5]
        assert not [r for r in first if r.ledger_id in (3, 5)], "journal 1 is not durable yet"
        dispatcher.release()
        dispatcher.drain(lambda: server.factory.pending_adds == 0)
        server.clock.advance(0)
        second = _responses(server.transport.value())
        assert all(r.rc == V2Rc.EOK for r in first + second)
        assert [r.entry_id for r in second if r.ledger_id == 5] == [0]
        assert [r.entry_id for r in second if r.ledger_id == 3] == [1, 2, 3, 4, 5]
        assert second.index(next(r for r in second if r.ledger_id == 5)) < second.index(
            next(r for r in second if r.ledger_id == 3)), "journal 1 answers the batch's share first"


def test_a_feed_takes_adds_with_the_gil_released_and_leaves_allocations_to_take_c():
    """Once the run is open, a read's adds are taken by the splitter's GIL-free stretch; the adds that need
    an allocation there (the share's id array full at 256, a journal segment full) go to take_c with the
    GIL, and the stretch goes on after them: every add taken, ids and records in stream order, no half
    left locked."""
    run, halves, start = _run(half_limit=1 << 40)
    run.admit(10, KEY, 0, 0)
    splitter = _codec.FrameSplitter(1 << 24)
    frames = [_add(10, e, payload=(b"p" * 900 if e % 100 else b"q" * 70_000)) for e in range(700)]
    start()
    assert splitter.feed(b"".join(frames), run) == []
    assert run.count == 700
    # take_c: the first add (it opens the run), the ids' array growing at 256 and 512, and the adds
    # that found their segment full (after each 70 KB one, ~every 4th: 256 KiB segments)
    assert 600 < run.taken_without_gil < 699, run.taken_without_gil
    shares, stored, _ = run.close()
    ((journal, pieces, taken, nbytes),) = shares
    assert [e for _, e, _ in TAKEN.iter_unpack(taken)] == list(range(700))
    assert [r for p in pieces for r in p.records()] == [f[28:] for f in frames]
    assert len(pieces) > 1 and stored == [700]
    locker = threading.Thread(target=lambda: (halves[0].put(99, 0, b"x")))
    locker.start()
    locker.join(5)
    assert not locker.is_alive(), "the half stayed locked after the feed"


def test_the_gc_forgets_a_deleted_ledger_only_between_runs(tmp_path):
    """The GC thread's forget waits for the ledger lock a run holds: the table never changes under a run
    reading it with the GIL released."""
    dispatcher = _Dispatcher()
    conf = _conf(tmp_path)
    with Bookie(conf, dispatcher=dispatcher) as bookie:
        fast = bookie.fast_adds
        fast.note_admitted(9, KEY)
        done = threading.Event()
        bookie._ledger_lock.acquire()                  # as an open run holds it
        try:
            gc_thread = threading.Thread(target=lambda: (fast.forget_deleted(9), done.set()))
            gc_thread.start()
            assert not done.wait(0.3) and fast.run.knows(9), "the forget waits for the run"
        finally:
            bookie._ledger_lock.release()
        gc_thread.join(5)
        assert done.is_set() and not fast.run.knows(9)
        assert bookie.gc.on_ledger_deleted == fast.forget_deleted


def test_an_open_run_is_not_armed_again_nor_watched():
    """One run at a time: arming an open run (a second thread's feed) raises instead of resetting what it
    took, and a LAC watch waits for its close (FastAdds takes the ledger lock for it)."""
    run, halves, start = _run()
    run.admit(10, KEY, 0, 0)
    start()
    assert run.take(10, 0, 1, *_body(_add(10, 0)))
    with pytest.raises(RuntimeError, match="armed again"):
        run.arm(lambda limit: True, 5)
    with pytest.raises(RuntimeError):
        run.watch(10, True)
    assert run.count == 1
    shares, stored, _ = run.close()
    assert stored == [1] and len(shares) == 1
