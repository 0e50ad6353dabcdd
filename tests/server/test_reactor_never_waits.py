"""The bookie's reactor keeps answering while the disk is slow, the write cache is full, a storage sync is
slow, or a client does not read its answers (issue 12 point 3, issue 18 point 1, issue 26). Real `bkfast
bookie` processes; the slow disk is made with the bookie's test hooks (testEntryLogReadDelayMs,
testWriteCacheFlushDelayMs), which delay the real entry-log read and the real flush.

The slow syncs (issue 26) need the bookie in this process: a real Bookie and BookieServerFactory on the
tests' reactor thread, over real ledger storage (DbLedgerStorage, SortedLedgerStorage, InterleavedLedgerStorage,
whose adds write the entry log and index on the reactor) whose every sync —
RocksDB write-ahead-log syncs of the index stores, index-file and entry-log fdatasyncs — first sleeps
SYNC_DELAY_S. Checkpoints run back to back meanwhile (flushInterval 100 ms), so some sync is always in
progress on the bookie's background threads while the requests come in. A full journal queue behind a
slow journal sync (issue 26's last wait) is made the same way, around the journal thread's commit."""

from __future__ import annotations

import socket
import statistics
import time

import pytest
from twisted.python.threadable import isInIOThread

from bkfast.bookie import journal as journal_mod
from bkfast.bookie.bookie import Bookie
from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    DigestType,
    decode_response,
    encode_add_request,
    encode_auth,
    encode_batch_read_request,
    encode_entry,
    encode_lac,
    encode_read_request,
    master_key,
)
from bkfast.conf import ServerConfiguration
from bkfast.dbstorage.index import RocksStore
from bkfast.ids import DEFERRED_SYNC
from bkfast.indexstorage.file_info import FileInfo
from bkfast.net.server import BookieServerFactory, ServerSettings, make_dispatcher
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.storage.entrylogger import EntryLogger
from tests.reactor_thread import call, reactor
from tests.server_support import BookieProcess, Client

KEY = master_key("secret")
CRC = DigestType.CRC32C
PROBES = 10
FAST_S = 0.05


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _probe_reads(c: Client, ledger: int, entry: int) -> list[float]:
    """Latency of PROBES reads of one cached entry, 100 ms apart."""
    latencies = []
    for _ in range(PROBES):
        t0 = time.perf_counter()
        c.send_raw(encode_read_request(ledger, entry))
        r = decode_response(c.recv_body())
        latencies.append(time.perf_counter() - t0)
        assert r.rc == 0 and r.entry_id == entry
        time.sleep(0.1)
    return latencies


def _assert_responsive(latencies: list[float]) -> None:
    # Before this change every probe waited seconds behind the blocked reactor.
    fast = sum(1 for x in latencies if x <= FAST_S)
    assert fast >= PROBES - 2 and max(latencies) < 1.0, [round(x * 1000, 1) for x in latencies]


def test_reactor_answers_cached_reads_while_a_disk_read_is_slow(tmp_path):
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1", "-D", "testEntryLogReadDelayMs=3000").start()
    try:
        with b.connect() as writer:
            n = 700  # > half the 1 MiB write cache: the first ~480 entries are flushed to the entry log
            writer.send_raw(b"".join(encode_add_request(KEY, 1, e, e - 1, e + 1, b"x" * 1024, CRC)
                                     for e in range(n)))
            assert all(decode_response(writer.recv_body()).rc == 0 for _ in range(n))
        time.sleep(1.0)  # the flush of the first half completes
        with b.connect() as slow, b.connect() as probe:
            t0 = time.perf_counter()
            slow.send_raw(encode_read_request(1, 0))        # from the entry log: 3 s
            latencies = _probe_reads(probe, 1, n - 1)       # still in the write cache
            r = decode_response(slow.recv_body())
            assert r.rc == 0 and r.entry_id == 0
            assert time.perf_counter() - t0 >= 2.5           # the slow read really was slow
        _assert_responsive(latencies)
    finally:
        b.stop()


def test_reactor_answers_reads_while_the_write_cache_is_full_and_no_add_is_lost(tmp_path):
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1",
                      "-D", "testWriteCacheFlushDelayMs=2000").start()
    try:
        with b.connect() as writer, b.connect() as probe:
            n = 1200  # ~2.4 write-cache halves: adds wait for two slow flushes
            writer.send_raw(b"".join(encode_add_request(KEY, 2, e, e - 1, e + 1, b"w" * 1024, CRC)
                                     for e in range(n)))
            time.sleep(0.3)
            latencies = _probe_reads(probe, 2, 0)
            acked = [decode_response(writer.recv_body()) for _ in range(n)]
            assert sorted(r.entry_id for r in acked) == list(range(n))
            assert all(r.rc == 0 for r in acked)
            for e in (0, n // 2, n - 1):
                probe.send_raw(encode_read_request(2, e))
                assert decode_response(probe.recv_body()).rc == 0
        _assert_responsive(latencies)
    finally:
        b.stop()


def _v3_read(txn: int, ledger: int, entry: int, **fields) -> bytes:
    """One framed v3 READ_ENTRY request (fields: more ReadRequest fields, e.g. a long poll's)."""
    request = pb.Request()
    request.header.version, request.header.operation, request.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    request.readRequest.ledgerId, request.readRequest.entryId = ledger, entry
    for k, v in fields.items():
        setattr(request.readRequest, k, v)
    body = request.SerializeToString()
    return len(body).to_bytes(4, "big") + body


# What the attacker sends, never reading an answer: 2,000 reads of ledger 5's 1 MiB entry 0 (2 GB of
# answers) over v2 or v3, or 2,000 v3 long polls for it (previousLAC 0, answered with the entry once the
# probe's adds to ledger 5 move its LAC past 0, and at once after that).
ATTACKS = {
    "v2": lambda: encode_read_request(5, 0) * 2000,
    "v3": lambda: b"".join(_v3_read(t, 5, 0) for t in range(2000)),
    "v3-long-poll": lambda: b"".join(_v3_read(t, 5, 0, previousLAC=0, timeOut=60_000) for t in range(2000)),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_client_that_never_reads_answers_cannot_grow_the_bookie_or_slow_others(tmp_path, attack):
    b = BookieProcess(tmp_path, "-D", "waitTimeoutOnResponseBackpressureMs=4000").start()
    try:
        with b.connect() as c:
            c.send_raw(encode_add_request(KEY, 5, 0, -1, 1 << 20, b"m" * (1 << 20), CRC))
            assert decode_response(c.recv_body()).rc == 0
        rss_before = _rss_bytes(b.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect((b.host, b.port))
        attacker.sendall(ATTACKS[attack]())
        peak = rss_before
        latencies = []
        with b.connect() as c:
            stop_at = time.monotonic() + 3.0
            e = 1
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                c.send_raw(encode_add_request(KEY, 5, e, e - 1, e + 1, b"n" * 100, CRC))
                assert decode_response(c.recv_body()).rc == 0
                latencies.append(time.perf_counter() - t0)
                peak = max(peak, _rss_bytes(b.pid))
                e += 1
        # Before: RSS grew by gigabytes in these seconds and each add took seconds.
        assert peak - rss_before < 200 * 1024 * 1024, (rss_before, peak)
        assert statistics.median(latencies) < 0.1, statistics.median(latencies)
        # The attacker did not drain within waitTimeoutOnResponseBackpressureMs: disconnected.
        time.sleep(2.0)
        attacker.settimeout(10)
        closed = False
        try:
            while True:
                if not attacker.recv(1 << 20):
                    closed = True
                    break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        assert closed
        attacker.close()
        assert "has not read its answers" in b.log(tail=None)
        with b.connect() as c:  # the bookie serves on
            c.send_raw(encode_read_request(5, e - 1))
            assert decode_response(c.recv_body()).rc == 0
    finally:
        b.stop()


def test_adds_waiting_for_room_past_the_throttle_time_are_refused_and_later_requests_go_on(tmp_path):
    """A flush that takes longer than dbStorage_maxThrottleTimeMs: the held adds get ETOOMANYREQUESTS at
    the deadline (not when room finally comes) and the read behind them on the same connection is answered."""
    b = BookieProcess(tmp_path, "-D", "dbStorage_writeCacheMaxSizeMb=1", "-D", "testWriteCacheFlushDelayMs=8000",
                      "-D", "dbStorage_maxThrottleTimeMs=1000").start()
    try:
        with b.connect() as c:
            n = 1200
            t0 = time.perf_counter()
            c.send_raw(b"".join(encode_add_request(KEY, 3, e, e - 1, e + 1, b"t" * 1024, CRC) for e in range(n))
                       + encode_read_request(3, 0))
            answers = [decode_response(c.recv_body()) for _ in range(n + 1)]
            elapsed = time.perf_counter() - t0
        adds = [r for r in answers if r.opcode == 1]
        reads = [r for r in answers if r.opcode == 2]
        assert len(reads) == 1 and reads[0].rc == 0
        assert {r.rc for r in adds} <= {0, 106} and any(r.rc == 106 for r in adds)
        # Before: the connection waited for the 8 s flush; now the deadline (1 s) answers.
        assert elapsed < 6.0, elapsed
    finally:
        b.stop()


def test_long_polls_woken_together_are_all_answered_as_the_client_reads(tmp_path):
    """The other side of the long-poll bound: answers held until the peer drains its output all come."""
    b = BookieProcess(tmp_path).start()
    try:
        with b.connect() as writer, b.connect() as poller:
            writer.send_raw(encode_add_request(KEY, 7, 0, -1, 1 << 20, b"L" * (1 << 20), CRC))
            assert decode_response(writer.recv_body()).rc == 0
            n = 40                                    # 40 MiB of answers: 40 times the output limit
            poller.send_raw(b"".join(_v3_read(t, 7, 0, previousLAC=0, timeOut=30_000) for t in range(n)))
            time.sleep(0.5)                           # all waiting: the LAC is -1 (0 after entry 1)
            for e in (1, 2):                          # entry 2 carries LAC 1: every poll wakes at once
                writer.send_raw(encode_add_request(KEY, 7, e, e - 1, e + 1, b"s", CRC))
                assert decode_response(writer.recv_body()).rc == 0
            answers = [pb.Response.FromString(poller.recv_body()) for _ in range(n)]
        assert sorted(a.header.txnId for a in answers) == list(range(n))
        assert all(a.status == pb.EOK and a.readResponse.body[-(1 << 20):] == b"L" * (1 << 20) for a in answers)
    finally:
        b.stop()


def test_client_that_never_reads_answers_of_entries_not_in_memory_cannot_grow_the_bookie(tmp_path):
    """Reads that memory cannot answer go to the read pool, where each brings back a whole entry: a
    connection may have at most 4x its output limit of them in flight (at least 8 reads). Before, one
    socket read's 2,000 READs of 1 MiB entries were all put on the pool at once: 2 GB of answers."""
    entries = 48
    args = ("-D", "waitTimeoutOnResponseBackpressureMs=4000", "-D", "dbStorage_readAheadCacheMaxSizeMb=1",
            "-D", "dbStorage_readAheadCacheBatchSize=1")
    b = BookieProcess(tmp_path, *args).start()
    try:
        with b.connect() as c:
            for e in range(entries):
                c.send_raw(encode_add_request(KEY, 6, e, e - 1, (e + 1) << 20, bytes([e]) * (1 << 20), CRC))
            for _ in range(entries):
                assert decode_response(c.recv_body()).rc == 0
    finally:
        assert b.stop() == 0
    b = BookieProcess(tmp_path, *args).start()   # nothing of ledger 6 in memory any more
    try:
        rss_before = _rss_bytes(b.pid)
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.connect((b.host, b.port))
        attacker.sendall(b"".join(encode_read_request(6, i % entries) for i in range(2000)))
        peak = rss_before
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            peak = max(peak, _rss_bytes(b.pid))
            time.sleep(0.02)
        assert peak - rss_before < 200 * 1024 * 1024, (rss_before, peak)
        log_text = b.log(tail=None)     # no read failed on the pool, nor any thread died
        assert "Exception in thread" not in log_text and "read failed" not in log_text
        with b.connect() as c:  # other connections are served, from the disk too
            c.send_raw(encode_read_request(6, entries - 1))
            r = decode_response(c.recv_body())
            assert r.rc == 0 and bytes(r.data[-1:]) == bytes([entries - 1])
        attacker.close()
    finally:
        b.stop()


# --- a storage sync is slow (issue 26) ---------------------------------------------------------------

SYNC_DELAY_S = 1.0
STALL_S = 0.5              # a probe slower than this waited behind a sync (SYNC_DELAY_S) on the reactor
STORAGES = ["DbLedgerStorage", "SortedLedgerStorage", "InterleavedLedgerStorage"]
PROBE_LEDGER = 900
EFENCED = 104


class SlowSyncs:
    """While entered, every sync of ledger storage in this process sleeps SYNC_DELAY_S before the real
    sync runs. `on_reactor`: the syncs the reactor thread made (it must make none); `busy_during` tells
    how long syncs were in progress in a time window (so a test knows its requests met slow syncs)."""

    TARGETS = ((RocksStore, "sync"), (RocksStore, "record_checkpoint"), (FileInfo, "sync"), (EntryLogger, "flush"))

    def __init__(self):
        self.on_reactor: list[str] = []
        self.spans: list[list[float]] = []          # [start, end] of each slow sync (end inf: running)
        self._real: dict = {}

    def __enter__(self) -> SlowSyncs:
        for cls, name in self.TARGETS:
            real = self._real[(cls, name)] = cls.__dict__[name]
            setattr(cls, name, self._slow(real))
        return self

    def __exit__(self, *exc) -> None:
        for (cls, name), real in self._real.items():
            setattr(cls, name, real)

    def _slow(self, real):
        def slow(this, *args, **kwargs):
            span = [time.monotonic(), float("inf")]
            self.spans.append(span)
            if isInIOThread():
                self.on_reactor.append(real.__qualname__)
            try:
                time.sleep(SYNC_DELAY_S)
                return real(this, *args, **kwargs)
            finally:
                span[1] = time.monotonic()
        return slow

    def busy_during(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] during which at least one slow sync was in progress."""
        covered, last = 0.0, t0
        for start, end in sorted(list(self.spans)):
            start, end = max(start, last), min(end, t1)
            if end > start:
                covered += end - start
                last = end
        return covered


class GoneLedgers:
    """The garbage collector's metadata source: every ledger exists, but those in `gone`."""

    def __init__(self):
        self.gone: set[int] = set()

    def ledgers_exist(self, ledgers):
        return [x for x in ledgers if x.ledger_id not in self.gone]


class InProcessBookie:
    """A Bookie and its server on the tests' reactor thread, on 127.0.0.1 (checkpoints every 100 ms, the
    garbage collector only when triggered)."""

    def __init__(self, data_dir, storage_class: str, **overrides: str):
        self.metadata = GoneLedgers()
        conf = ServerConfiguration.load(None, {
            "journalDirectory": str(data_dir / "journal"), "ledgerDirectories": str(data_dir / "ledgers"),
            "ledgerStorageClass": storage_class, "flushInterval": "100", "gcWaitTime": "3600000",
            "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16", **overrides})
        self.bookie = Bookie(conf, dispatcher=make_dispatcher(reactor), ledger_exists_source=self.metadata)
        self.bookie.start()
        self.factory = call(BookieServerFactory, self.bookie, ServerSettings.from_conf(conf), reactor)
        self.listener = call(reactor.listenTCP, 0, self.factory, interface="127.0.0.1")
        self.port = self.listener.getHost().port
        self._next_ledger = 1

    def connect(self) -> Client:
        return Client("127.0.0.1", self.port)

    def ledgers(self, n: int) -> list[int]:
        """n new ledgers, each with entries 0..2 (LAC 1)."""
        ledgers = list(range(self._next_ledger, self._next_ledger + n))
        self._next_ledger += n
        with self.connect() as c:
            c.send_raw(b"".join(encode_add_request(KEY, ledger, e, e - 1, e + 1, b"e", CRC)
                                for ledger in ledgers for e in range(3)))
            assert all(decode_response(c.recv_body()).rc == 0 for _ in range(3 * n))
        return ledgers

    def stop(self) -> None:
        call(self.listener.stopListening)
        call(lambda: [conn.transport.loseConnection() for conn in list(self.factory.connections)])
        self.bookie.stop()


class Prober:
    """Another connection's adds (acknowledged once durable) and reads of them, timed round trip by round
    trip; one round every 30 ms."""

    def __init__(self, b: InProcessBookie):
        # A long timeout: a stall shows as the latency it caused, not as a timeout.
        self.client = Client("127.0.0.1", b.port, timeout=120)
        self.entry = 0

    def rounds(self, n: int = 4) -> list[float]:
        latencies = []
        c = self.client
        for _ in range(n):
            e = self.entry
            self.entry += 1
            t0 = time.perf_counter()
            c.send_raw(encode_add_request(KEY, PROBE_LEDGER, e, e - 1, e + 1, b"p", CRC))
            assert decode_response(c.recv_body()).rc == 0
            c.send_raw(encode_read_request(PROBE_LEDGER, e))
            assert decode_response(c.recv_body()).rc == 0
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.03)
        return latencies


@pytest.fixture(params=STORAGES)
def in_process_bookie(request, tmp_path):
    b = InProcessBookie(tmp_path, request.param)
    try:
        yield b
    finally:
        b.stop()


def _v3_send(c: Client, operation: int, **sub) -> int:
    """Send one v3 request without waiting; its txnId."""
    c.txn += 1
    request = pb.Request()
    request.header.version, request.header.operation, request.header.txnId = pb.VERSION_THREE, operation, c.txn
    for field, values in sub.items():
        msg = getattr(request, field)
        msg.SetInParent()
        for k, v in values.items():
            setattr(msg, k, v)
    c.send_body(request.SerializeToString())
    return c.txn


def _v3_answer(c: Client, txn: int, status: int = pb.EOK) -> pb.Response:
    r = pb.Response.FromString(c.recv_body())
    assert r.header.txnId == txn and r.status == status, r
    return r


def _v2_answer(c: Client, rc: int = 0):
    r = decode_response(c.recv_body())
    assert r.rc == rc, r
    return r


def _v2_fencing_read(c: Client, ledger: int):
    """A fencing read with a normal add of the same ledger right behind it on the connection: the add is
    refused (EFENCED) before the fence is answered, i.e. before its record is durable."""
    c.send_raw(encode_read_request(ledger, -1, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, KEY)
               + encode_add_request(KEY, ledger, 3, 2, 4, b"late", CRC))

    def check():
        late = _v2_answer(c, EFENCED)
        assert late.opcode == 1 and late.entry_id == 3
        assert _v2_answer(c).entry_id == -1
    return check


def _v3_fencing_read(c: Client, ledger: int):
    txn = _v3_send(c, pb.READ_ENTRY, readRequest=dict(ledgerId=ledger, entryId=-1, masterKey=KEY,
                                                      flag=pb.ReadRequest.FENCE_LEDGER))
    late = _v3_send(c, pb.ADD_ENTRY, addRequest=dict(ledgerId=ledger, entryId=3, masterKey=KEY,
                                                     body=encode_entry(ledger, 3, 2, 4, b"late", CRC)))

    def check():
        _v3_answer(c, late, pb.EFENCED)
        assert _v3_answer(c, txn).readResponse.body[8:16] == (2).to_bytes(8, "big")
    return check


def _v2_request(frame_of, rc: int = 0):
    """A v2 request kind: frame_of(ledger) sent, answered with rc."""
    def send(c: Client, ledger: int):
        c.send_raw(frame_of(ledger))
        return lambda: _v2_answer(c, rc)
    return send


def _v3_request(operation: int, status: int = pb.EOK, **sub_of):
    """A v3 request kind: sub_of maps each request field to a function of the ledger giving its values."""
    def send(c: Client, ledger: int):
        txn = _v3_send(c, operation, **{field: of(ledger) for field, of in sub_of.items()})
        return lambda: _v3_answer(c, txn, status)
    return send


def _v2_auth(c: Client, ledger: int):
    c.send_raw(encode_auth(b""))
    return lambda: c.recv_body()


def _v3_entry(ledger: int, **extra) -> dict:
    return dict(ledgerId=ledger, entryId=3, masterKey=KEY, body=encode_entry(ledger, 3, 2, 4, b"v3", CRC), **extra)


# Every kind of request the server takes (v2: the opcodes decode_request accepts, with their flags;
# v3: every operation of BookkeeperProtocol.proto), each sent to a ledger holding entries 0..2.
REQUEST_KINDS = {
    "v2 add": _v2_request(lambda ledger: encode_add_request(KEY, ledger, 3, 2, 4, b"a", CRC)),
    "v2 recovery add": _v2_request(lambda ledger: encode_add_request(
        KEY, ledger, 3, 2, 4, b"r", CRC, flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY)),
    "v2 read": _v2_request(lambda ledger: encode_read_request(ledger, 1)),
    "v2 fencing read": _v2_fencing_read,
    "v2 batch read": _v2_request(lambda ledger: encode_batch_read_request(ledger, 0, 7, 3, 1 << 20)),
    "v2 fencing batch read": _v2_request(lambda ledger: encode_batch_read_request(
        ledger, 0, 8, 3, 1 << 20, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, KEY)),
    "v2 auth": _v2_auth,
    "v3 add": _v3_request(pb.ADD_ENTRY, addRequest=_v3_entry),
    "v3 recovery add": _v3_request(pb.ADD_ENTRY, addRequest=lambda ledger: _v3_entry(
        ledger, flag=pb.AddRequest.RECOVERY_ADD)),
    "v3 deferred-sync add": _v3_request(pb.ADD_ENTRY, addRequest=lambda ledger: _v3_entry(
        ledger, writeFlags=DEFERRED_SYNC)),
    "v3 read": _v3_request(pb.READ_ENTRY, readRequest=lambda ledger: dict(ledgerId=ledger, entryId=1)),
    "v3 fencing read": _v3_fencing_read,
    "v3 long poll": _v3_request(pb.READ_ENTRY, readRequest=lambda ledger: dict(
        ledgerId=ledger, entryId=2, previousLAC=1, timeOut=200)),
    "v3 long poll with piggyback": _v3_request(pb.READ_ENTRY, pb.ENOENTRY, readRequest=lambda ledger: dict(
        ledgerId=ledger, entryId=-1, previousLAC=1, timeOut=200, flag=pb.ReadRequest.ENTRY_PIGGYBACK)),
    "v3 write LAC": _v3_request(pb.WRITE_LAC, writeLacRequest=lambda ledger: dict(
        ledgerId=ledger, lac=1, masterKey=KEY, body=encode_lac(ledger, 1, CRC))),
    "v3 read LAC": _v3_request(pb.READ_LAC, readLacRequest=lambda ledger: dict(ledgerId=ledger)),
    "v3 force ledger": _v3_request(pb.FORCE_LEDGER, forceLedgerRequest=lambda ledger: dict(ledgerId=ledger)),
    "v3 bookie info": _v3_request(pb.GET_BOOKIE_INFO, getBookieInfoRequest=lambda ledger: dict(requested=3)),
    "v3 list of entries": _v3_request(pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
                                      getListOfEntriesOfLedgerRequest=lambda ledger: dict(ledgerId=ledger)),
    "v3 auth": _v3_request(pb.AUTH, authRequest=lambda ledger: dict(authPluginName="AuthDisabledPlugin",
                                                                    payload=b"")),
    "v3 start TLS (no TLS configured)": _v3_request(pb.START_TLS, pb.EBADREQ,
                                                    startTLSRequest=lambda ledger: {}),
}


def _stalls(latencies: list[float]) -> list[float]:
    return [round(x, 3) for x in latencies if x > STALL_S]


def test_fences_of_many_ledgers_at_once_never_stall_other_connections_while_syncs_are_slow(in_process_bookie):
    """A recovery storm: 12 ledgers fenced at once (v2 and v3 fencing reads, one connection each) while
    every storage sync takes SYNC_DELAY_S (1 s). Each fence is answered, the add behind it refused (EFENCED) before,
    and another connection's adds and reads are answered promptly all along. Before issue 26 the
    fenced flag was written with a synced RocksDB write on the reactor: a whole sync of silence per fence."""
    b = in_process_bookie
    ledgers = b.ledgers(12)
    prober = Prober(b)
    with SlowSyncs() as slow:
        time.sleep(0.3)                                   # a checkpoint is in its slow syncs
        t0 = time.monotonic()
        conns = [b.connect() for _ in ledgers]
        try:
            checks = [(_v2_fencing_read if i % 2 else _v3_fencing_read)(c, ledger)
                      for i, (c, ledger) in enumerate(zip(conns, ledgers, strict=True))]
            latencies = prober.rounds(8)
            for check in checks:
                check()
        finally:
            for c in conns:
                c.close()
        t1 = time.monotonic()
        assert slow.busy_during(t0, t1) > 0.8 * (t1 - t0)     # the fences really met slow syncs
    prober.client.close()
    assert not slow.on_reactor, slow.on_reactor
    assert not _stalls(latencies), [round(x, 3) for x in latencies]
    assert all(b.bookie.is_fenced(ledger) for ledger in ledgers)


def test_every_request_kind_and_ledger_deletes_leave_the_reactor_answering_while_syncs_are_slow(
        in_process_bookie):
    """Each request kind in turn, on its own connection, while every storage sync takes SYNC_DELAY_S; then the
    garbage collector deletes a ledger. Meanwhile another connection's adds and reads are answered
    promptly, the reactor thread never enters a sync, and every request gets its normal answer."""
    b = in_process_bookie
    ledgers = dict(zip(REQUEST_KINDS, b.ledgers(len(REQUEST_KINDS) + 1), strict=False))
    doomed = b._next_ledger - 1
    prober = Prober(b)
    stalled = {}
    with SlowSyncs() as slow:
        time.sleep(0.3)
        idle = {}
        for kind, send in REQUEST_KINDS.items():
            t0 = time.monotonic()
            with b.connect() as c:
                check = send(c, ledgers[kind])
                latencies = prober.rounds()
                check()
            if _stalls(latencies):
                stalled[kind] = _stalls(latencies)
            if slow.busy_during(t0, time.monotonic()) < 0.3 * (time.monotonic() - t0):
                idle[kind] = round(slow.busy_during(t0, time.monotonic()), 3)
        b.metadata.gone.add(doomed)
        deletes_before = b.bookie.gc.ledgers_deleted
        b.bookie.gc.trigger()
        latencies = []
        deadline = time.monotonic() + 60
        while b.bookie.gc.ledgers_deleted == deletes_before and time.monotonic() < deadline:
            latencies += prober.rounds(2)
        assert b.bookie.gc.ledgers_deleted > deletes_before, "the garbage collector deleted nothing"
        if _stalls(latencies):
            stalled["ledger delete (garbage collector)"] = _stalls(latencies)
    prober.client.close()
    assert not b.bookie.ledger_exists(doomed)
    assert not stalled, stalled
    assert not slow.on_reactor, slow.on_reactor
    assert not idle, f"these kinds met no slow sync, s of syncs in their time: {idle}"


# --- the journal queue is full behind a slow journal sync (issue 26's last wait) ---------------------

QUEUE_SIZE = 16
FLOOD_LEDGER = 800


class SlowJournal:
    """While entered, the journal thread sleeps SYNC_DELAY_S before writing and syncing each batch, so
    its queue fills behind it. `durable[(kind, ledger)]`: when the first batch holding that fence or
    explicit-LAC record was synced (taken in Journal._synced, which runs before the batch is answered)."""

    def __init__(self):
        self.durable: dict[tuple[str, int], float] = {}
        self._in_batch: list = []
        self._real_commit = journal_mod.Journal.__dict__["_commit"]
        self._real_synced = journal_mod.Journal.__dict__["_synced"]

    def __enter__(self) -> SlowJournal:
        real_commit, real_synced = self._real_commit, self._real_synced

        def commit(this, batch):
            time.sleep(SYNC_DELAY_S)
            self._in_batch = [r for r in batch.recs if r is not None]
            return real_commit(this, batch)

        def synced(this):
            real_synced(this)
            now = time.monotonic()
            for record in self._in_batch:
                r = journal_mod.parse_record(record)
                if r.kind in (journal_mod.RecordKind.FENCE, journal_mod.RecordKind.EXPLICIT_LAC):
                    self.durable.setdefault((r.kind.name, r.ledger_id), now)
            self._in_batch = []

        journal_mod.Journal._commit = commit
        journal_mod.Journal._synced = synced
        return self

    def __exit__(self, *exc) -> None:
        journal_mod.Journal._commit = self._real_commit
        journal_mod.Journal._synced = self._real_synced


def _flood(c: Client, first: int, n: int) -> None:
    c.send_raw(b"".join(encode_add_request(KEY, FLOOD_LEDGER, e, e - 1, e + 1, b"f", CRC)
                        for e in range(first, first + n)))


def _probe_read_latencies(c: Client, ledger: int, seconds: float) -> list[float]:
    """Plain reads of an entry of `ledger`, timed one by one, for `seconds`."""
    latencies = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        t0 = time.perf_counter()
        c.send_raw(encode_read_request(ledger, 1))
        assert decode_response(c.recv_body()).rc == 0
        latencies.append(time.perf_counter() - t0)
        time.sleep(0.03)
    return latencies


def test_fences_and_lac_writes_never_wait_for_a_full_journal_queue_and_are_answered_once_durable(tmp_path):
    """journalQueueSize 16 and a journal whose every batch takes SYNC_DELAY_S: one flood of adds keeps the journal
    thread in its sync while a second fills the queue. Fencing reads (v2, v3) and explicit-LAC writes then
    arrive. Another connection's reads are answered promptly all along (before, the reactor waited in
    Journal.log_record for queue room, up to SYNC_DELAY_S per record), and each fence and LAC write is answered
    only after the batch holding its record was synced."""
    b = InProcessBookie(tmp_path, "DbLedgerStorage", journalQueueSize=str(QUEUE_SIZE))
    try:
        ledgers = b.ledgers(9)
        fence_ledgers, lac_ledgers, probe_ledger = ledgers[:6], ledgers[6:8], ledgers[8]
        probe = Client("127.0.0.1", b.port, timeout=120)
        flooder = Client("127.0.0.1", b.port, timeout=120)
        conns = [Client("127.0.0.1", b.port, timeout=120) for _ in range(len(fence_ledgers) + len(lac_ledgers))]
        try:
            with SlowJournal() as slow:
                _flood(flooder, 0, 4 * QUEUE_SIZE)        # taken by the journal thread: SYNC_DELAY_S in its sync
                time.sleep(0.3)
                _flood(flooder, 4 * QUEUE_SIZE, 4 * QUEUE_SIZE)     # the queue: full
                time.sleep(0.1)
                assert b.bookie.journal.queue_length >= QUEUE_SIZE
                sent = []
                for i, (c, ledger) in enumerate(zip(conns, fence_ledgers, strict=False)):
                    sent.append(("FENCE", ledger, c, (_v2_fencing_read if i % 2 else _v3_fencing_read)(c, ledger)))
                for c, ledger in zip(conns[len(fence_ledgers):], lac_ledgers, strict=True):
                    send = _v3_request(pb.WRITE_LAC, writeLacRequest=lambda lg: dict(
                        ledgerId=lg, lac=1, masterKey=KEY, body=encode_lac(lg, 1, CRC)))
                    sent.append(("EXPLICIT_LAC", ledger, c, send(c, ledger)))
                latencies = _probe_read_latencies(probe, probe_ledger, 1.5)
                answered = {}
                for kind, ledger, _, check in sent:
                    check()
                    answered[(kind, ledger)] = time.monotonic()
                for _ in range(8 * QUEUE_SIZE):
                    assert decode_response(flooder.recv_body()).rc == 0
        finally:
            for c in (probe, flooder, *conns):
                c.close()
        assert not _stalls(latencies), [round(x, 3) for x in latencies]
        for key, t in answered.items():
            assert key in slow.durable and slow.durable[key] <= t, (key, slow.durable.get(key), t)
        assert all(b.bookie.is_fenced(ledger) for ledger in fence_ledgers)
    finally:
        b.stop()
