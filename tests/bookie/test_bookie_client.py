"""BookieClient (bkfast.net.bookie_client) against real `bkfast bookie` processes, over v2 and v3."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from bkfast.codec import (
    DigestType,
    encode_add_request,
    encode_entry,
    encode_lac,
    encode_read_request,
    encode_read_response,
    mac_key,
    master_key,
)
from bkfast.conf import ClientConfiguration
from bkfast.errors import (
    BKBookieHandleNotAvailableException,
    BKClientClosedException,
    BKLedgerFencedException,
    BKNoSuchEntryException,
    BKNoSuchLedgerExistsException,
    BKTimeoutException,
    BKUnauthorizedAccessException,
    BKWriteOnReadOnlyBookieException,
)
from bkfast.net.bookie_channel import K_ADD, K_READ, BookieChannel, PendingRequest
from bkfast.net.bookie_client import BookieClient, LongPollResult, ReadLacResult
from tests.reactor_thread import call, reactor
from tests.server_support import BookieProcess

CRC = DigestType.CRC32C
KEY = master_key(b"secret")
WRONG = master_key(b"wrong")
MAC = mac_key(b"secret")
PROTOCOLS = ["v2", "v3"]


def entry(ledger, e, payload=None, scope_id=0):
    payload = payload if payload is not None else b"payload-%d-%d" % (ledger, e)
    return encode_entry(ledger, e, e - 1, (e + 1) * len(payload), payload, CRC, MAC, scope_id)


def bid(b: BookieProcess) -> str:
    return f"{b.host}:{b.port}"


def sleep(seconds):
    return task.deferLater(reactor, seconds, lambda: None)


async def failure(d, exc_type):
    """Await `d`, which must fail with `exc_type`; return the exception."""
    try:
        result = await d
    except exc_type as err:
        return err
    raise AssertionError(f"expected {exc_type.__name__}, got result {result!r}")


def make_client(**overrides) -> BookieClient:
    return BookieClient(reactor, ClientConfiguration(overrides) if overrides else None)


@pytest.fixture(scope="module")
def bookie(tmp_path_factory):
    b = BookieProcess(tmp_path_factory.mktemp("bookie")).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


@pytest.fixture
def client():
    c = make_client(numChannelsPerBookie=2)
    try:
        yield c
    finally:
        call(c.close)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_pipelined_adds_read_back_and_read_of_minus_one_returns_the_last_entry(bookie, client, proto):
    ledger = 10 if proto == "v2" else 11
    b = bid(bookie)

    async def scenario():
        entries = [entry(ledger, e) for e in range(20)]
        results = await defer.gatherResults(
            [client.add_entry(b, ledger, e, data, KEY, protocol=proto) for e, data in enumerate(entries)])
        assert results == [None] * 20
        reads = [client.read_entry(b, ledger, e, protocol=proto) for e in (3, -1, 19, -1, 0)]
        got = await defer.gatherResults(reads)
        assert got == [entries[3], entries[19], entries[19], entries[19], entries[0]]

    call(scenario)


class _SocketPairTransport(StringTransport):
    """A transport whose handle is one end of a real socketpair with small buffers (the channel sends on
    it, as on a TCP transport's socket); startWriting only counts (the test plays the writable event)."""

    def __init__(self, buffer_bytes: int):
        super().__init__()
        self.sock, self.peer = socket.socketpair()
        for s, opt in ((self.sock, socket.SO_SNDBUF), (self.peer, socket.SO_RCVBUF)):
            s.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
            s.setblocking(False)
        self.write_requests = 0

    def getHandle(self):
        return self.sock

    def startWriting(self):
        self.write_requests += 1

    def drain(self) -> bytes:
        out = b""
        while True:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                return out
            out += chunk


def test_frames_the_socket_does_not_take_wait_for_writable_and_keep_their_order():
    clock = task.Clock()
    ch = BookieChannel(clock, "127.0.0.1:1", False, 0, 1 << 20)
    tr = _SocketPairTransport(64 * 1024)
    try:
        ch.makeConnection(tr)
        assert tr.producer is ch and not tr.streaming
        frames = []
        for e in range(120):               # 2 MB of 16 KiB adds against 64 KiB socket buffers
            frame = encode_add_request(master_key(KEY), 5, e, e - 1, (e + 1) * 16384, bytes([e]) * 16384,
                                       DigestType.CRC32C, mac_key(KEY))
            req = PendingRequest(K_ADD, 5, e, time.monotonic(), time.monotonic() + 5, e + 1)
            ch.send_v2(frame, req)
            frames.append(frame)
        clock.advance(0)                   # the reactor turn's flush
        assert ch.unsent and tr.write_requests == 1
        received, rounds = tr.drain(), 0
        while ch.unsent:
            ch.resumeProducing()           # what Twisted calls once the socket is writable
            received += tr.drain()
            rounds += 1
            assert rounds < 10_000
        assert received == b"".join(frames)
        assert tr.write_requests > 1 and ch.pending_count == 120
    finally:
        tr.sock.close()
        tr.peer.close()


def test_v2_answer_with_the_real_entry_id_goes_to_the_earliest_matching_read():
    # Java bookies echo -1, bkfast's too; a bookie that names the real entry must not confuse matching.
    ch = BookieChannel(reactor, "127.0.0.1:1", False, 5.0, 1 << 20)
    ds = []
    for seq, e in enumerate((-1, 3, -1), start=1):
        req = PendingRequest(K_READ, 9, e, time.monotonic(), time.monotonic() + 5, seq)
        ch.send_v2(encode_read_request(9, e), req)
        ds.append(req)
    ch.handle_frames([encode_read_response(0, 9, 3, b"A")[4:],      # real id 3: the first read of -1
                      encode_read_response(0, 9, 3, b"B")[4:],      # the explicit read of 3 (issued before)
                      encode_read_response(0, 9, -1, b"C")[4:]])    # the second read of -1
    assert [d.result if d.called else None for d in ds] == [b"A", b"B", b"C"]
    assert ch.reads == {} and ch.inflight == 0


def test_v2_reads_of_minus_one_mixed_with_explicit_reads_are_matched_by_issue_order(bookie, client):
    b = bid(bookie)

    async def scenario():
        entries = [entry(12, e) for e in range(4)]
        await defer.gatherResults([client.add_entry(b, 12, e, data, KEY) for e, data in enumerate(entries)])
        ds = [client.read_entry(b, 12, e) for e in (-1, 3, -1, 2, 3, -1)]
        got = await defer.gatherResults(ds)
        assert got == [entries[3], entries[3], entries[3], entries[2], entries[3], entries[3]]

    call(scenario)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_missing_entry_missing_ledger_and_wrong_key_are_bk_errors_naming_bookie_ledger_entry(
        bookie, client, proto):
    b = bid(bookie)
    ledger = 20 if proto == "v2" else 21

    async def scenario():
        await client.add_entry(b, ledger, 0, entry(ledger, 0), KEY, protocol=proto)
        err = await failure(client.read_entry(b, ledger, 7, protocol=proto), BKNoSuchEntryException)
        assert b in str(err) and f"ledger {ledger}" in str(err) and "entry 7" in str(err)
        err = await failure(client.read_entry(b, 7777, 0, protocol=proto), BKNoSuchLedgerExistsException)
        assert "ledger 7777" in str(err)
        err = await failure(client.add_entry(b, ledger, 1, entry(ledger, 1), WRONG, protocol=proto),
                            BKUnauthorizedAccessException)
        assert b in str(err) and "entry 1" in str(err)

    call(scenario)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_fenced_ledger_rejects_normal_add_but_accepts_recovery_add(bookie, client, proto):
    b = bid(bookie)
    ledger = 30 if proto == "v2" else 31

    async def scenario():
        entries = [entry(ledger, e) for e in range(3)]
        for e, data in enumerate(entries):
            await client.add_entry(b, ledger, e, data, KEY, protocol=proto)
        await failure(client.read_entry(b, ledger, -1, fence=True, master_key=WRONG, protocol=proto),
                      BKUnauthorizedAccessException)
        last = await client.read_entry(b, ledger, -1, fence=True, master_key=KEY, high_priority=True,
                                       protocol=proto)
        assert last == entries[2]
        err = await failure(client.add_entry(b, ledger, 3, entry(ledger, 3), KEY, protocol=proto),
                            BKLedgerFencedException)
        assert f"ledger {ledger}" in str(err) and "entry 3" in str(err)
        await client.add_entry(b, ledger, 3, entry(ledger, 3), KEY, recovery=True, protocol=proto)
        assert await client.read_entry(b, ledger, 3, protocol=proto) == entry(ledger, 3)
        # a fencing read needs the master key: EUA (the bookie's answer over v3)
        await failure(client.read_entry(b, ledger, -1, fence=True, protocol=proto), BKUnauthorizedAccessException)

    call(scenario)


def test_read_only_bookie_refuses_adds_except_recovery_adds(tmp_path):
    ro = BookieProcess(tmp_path, "--read-only").start()
    c = make_client()
    try:
        async def scenario():
            for proto, ledger in (("v2", 1), ("v3", 2)):
                err = await failure(c.add_entry(bid(ro), ledger, 0, entry(ledger, 0), KEY, protocol=proto),
                                    BKWriteOnReadOnlyBookieException)
                assert bid(ro) in str(err)
                await c.add_entry(bid(ro), ledger, 0, entry(ledger, 0), KEY, recovery=True, protocol=proto)
                assert await c.read_entry(bid(ro), ledger, 0, protocol=proto) == entry(ledger, 0)

        call(scenario)
    finally:
        call(c.close)
        assert ro.stop() == 0, ro.log()


def test_explicit_lac_write_and_read(bookie, client):
    b = bid(bookie)

    async def scenario():
        entries = [entry(40, e) for e in range(3)]
        for e, data in enumerate(entries):
            await client.add_entry(b, 40, e, data, KEY)
        lac_buffer = encode_lac(40, 1, CRC, MAC)
        assert await client.write_lac(b, 40, KEY, 1, lac_buffer) is None
        result = await client.read_lac(b, 40)
        assert isinstance(result, ReadLacResult)
        assert result.lac_buffer == lac_buffer and result.last_entry == entries[2]
        await failure(client.read_lac(b, 4040), BKNoSuchEntryException)
        await failure(client.write_lac(b, 40, WRONG, 1, lac_buffer), BKUnauthorizedAccessException)

    call(scenario)


def test_long_poll_times_out_without_new_entry_and_returns_when_one_arrives(bookie, client):
    b = bid(bookie)

    async def scenario():
        await client.add_entry(b, 50, 0, entry(50, 0), KEY)
        await client.add_entry(b, 50, 1, entry(50, 1), KEY)          # its LAC field is 0
        start = time.monotonic()
        result = await client.read_entry_long_poll(b, 50, -1, 0, 300)
        assert result == LongPollResult(None, 0) and time.monotonic() - start >= 0.25
        start = time.monotonic()
        poll = client.read_entry_long_poll(b, 50, -1, 0, 10000)
        await sleep(0.3)
        assert not poll.called
        await client.add_entry(b, 50, 2, entry(50, 2), KEY)          # LAC field 1 > previous LAC 0
        result = await poll
        assert time.monotonic() - start < 5
        assert result.entry == entry(50, 1) and result.lac == 1
        await failure(client.read_entry_long_poll(b, 5050, -1, 0, 5000), BKNoSuchLedgerExistsException)

    call(scenario)


def test_scoped_ledgers_go_over_v3_even_when_v2_is_asked_for(bookie, client):
    b = bid(bookie)

    async def scenario():
        scope = (1 << 63) + 5                 # top bit set: travels as a negative int64
        scoped = entry(60, 0, b"scoped", scope_id=scope)
        await client.add_entry(b, 60, 0, entry(60, 0, b"plain"), KEY, protocol="v2")
        await client.add_entry(b, 60, 0, scoped, WRONG, scope_id=scope, protocol="v2")
        assert await client.read_entry(b, 60, 0, scope_id=scope, protocol="v2") == scoped
        assert await client.read_entry(b, 60, 0, protocol="v2") == entry(60, 0, b"plain")
        lac_buffer = encode_lac(60, 0, CRC, MAC, scope)
        await client.write_lac(b, 60, WRONG, 0, lac_buffer, scope_id=scope)
        result = await client.read_lac(b, 60, scope_id=scope)
        assert result == (lac_buffer, scoped)
        await client.force_ledger(b, 60, scope_id=scope)
        await failure(client.read_entry(b, 61, 0, scope_id=scope), BKNoSuchLedgerExistsException)

    call(scenario)


def test_deferred_sync_adds_then_force_ledger_and_bookie_info(bookie, client):
    b = bid(bookie)

    async def scenario():
        entries = [entry(70, e) for e in range(5)]
        await defer.gatherResults([client.add_entry(b, 70, e, data, KEY, deferred_sync=True)
                                   for e, data in enumerate(entries)])
        assert await client.force_ledger(b, 70) is None
        assert await client.read_entry(b, 70, 4, protocol="v3") == entries[4]
        free, total = await client.get_bookie_info(b)
        assert 0 < free <= total

    call(scenario)


def test_connection_refused_fails_fast_naming_the_bookie():
    port = free_port()
    c = make_client()
    b = f"127.0.0.1:{port}"

    async def scenario():
        for proto in PROTOCOLS:
            start = time.monotonic()
            err = await failure(c.add_entry(b, 1, 0, entry(1, 0), KEY, protocol=proto),
                                BKBookieHandleNotAvailableException)
            assert time.monotonic() - start < 2.0
            assert b in str(err) and "ledger 1" in str(err) and "entry 0" in str(err)
        await failure(c.read_entry("no-port-here", 1, 0), BKBookieHandleNotAvailableException)

    try:
        call(scenario)
    finally:
        call(c.close)


def test_silent_socket_gives_timeout_naming_bookie_ledger_entry():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)                     # the kernel accepts; nobody ever reads or answers
    b = f"127.0.0.1:{listener.getsockname()[1]}"
    c = make_client(readTimeout=1)

    async def scenario():
        start = time.monotonic()
        errors = await defer.gatherResults([
            defer.ensureDeferred(failure(c.add_entry(b, 3, 4, entry(3, 4), KEY), BKTimeoutException)),
            defer.ensureDeferred(failure(c.read_entry(b, 3, 5, protocol="v3"), BKTimeoutException)),
        ])
        elapsed = time.monotonic() - start
        assert 0.9 <= elapsed < 3.0, elapsed
        assert b in str(errors[0]) and "ledger 3" in str(errors[0]) and "entry 4" in str(errors[0])
        assert "entry 5" in str(errors[1])

    try:
        call(scenario)
    finally:
        call(c.close)
        listener.close()


def test_late_answers_after_a_timeout_are_ignored_and_the_connection_keeps_working(tmp_path):
    bk = BookieProcess(tmp_path).start()
    c = make_client(readTimeout=1)
    b = bid(bk)

    async def scenario():
        for proto in PROTOCOLS:                 # connect first, so the stop below hits live connections
            await c.add_entry(b, 80, 0 if proto == "v2" else 1, entry(80, 0 if proto == "v2" else 1), KEY,
                              protocol=proto)
        os.kill(bk.proc.pid, signal.SIGSTOP)
        try:
            stale_add = c.add_entry(b, 80, 2, entry(80, 2), WRONG)                # late answer: EUA
            stale_read = c.read_entry(b, 80, 7, protocol="v3")                   # late answer: ENOENTRY
            err = await failure(stale_add, BKTimeoutException)
            assert b in str(err) and "ledger 80" in str(err) and "entry 2" in str(err)
            await failure(stale_read, BKTimeoutException)
            # the same v2 key again, queued behind the stale one: must get its own answer, not the EUA
            fresh_add = c.add_entry(b, 80, 2, entry(80, 2), KEY)
            fresh_v3 = c.add_entry(b, 80, 7, entry(80, 7), KEY, protocol="v3")
        finally:
            os.kill(bk.proc.pid, signal.SIGCONT)
        assert await fresh_add is None and await fresh_v3 is None
        got = await defer.gatherResults([c.read_entry(b, 80, 2), c.read_entry(b, 80, 7, protocol="v3")])
        assert got == [entry(80, 2), entry(80, 7)]

    try:
        call(scenario)
    finally:
        call(c.close)
        if bk.alive():
            os.kill(bk.proc.pid, signal.SIGCONT)
        assert bk.stop() == 0, bk.log()


def test_killed_bookie_fails_pending_requests_and_next_request_after_restart_works(tmp_path):
    bk = BookieProcess(tmp_path).start()
    c = make_client()
    b = bid(bk)

    async def scenario():
        await c.add_entry(b, 90, 0, entry(90, 0), KEY)
        await c.add_entry(b, 90, 1, entry(90, 1), KEY, protocol="v3")
        os.kill(bk.proc.pid, signal.SIGSTOP)    # nothing is answered from here on
        pending = [c.add_entry(b, 90, e, entry(90, e), KEY, protocol=p)
                   for e, p in ((2, "v2"), (3, "v2"), (4, "v3"))]
        pending.append(c.read_entry_long_poll(b, 90, -1, 5, 60000))
        await sleep(0.2)
        assert not any(d.called for d in pending)
        bk.kill()                               # SIGKILL
        start = time.monotonic()
        for d in pending:
            err = await failure(d, BKBookieHandleNotAvailableException)
            assert b in str(err) and "ledger 90" in str(err)
        assert time.monotonic() - start < 2.0

    try:
        call(scenario)
        bk.start()                              # same data dir, same port
        assert bid(bk) == b

        async def after_restart():
            for proto in PROTOCOLS:
                assert await c.read_entry(b, 90, 0, protocol=proto) == entry(90, 0)
            await c.add_entry(b, 90, 2, entry(90, 2), KEY)
            assert await c.read_entry(b, 90, -1) == entry(90, 2)

        call(after_restart)
    finally:
        call(c.close)
        assert bk.stop() == 0, bk.log()


def test_close_bookie_fails_pending_at_once_and_close_refuses_new_requests(bookie):
    c = make_client()
    b = bid(bookie)

    async def scenario():
        await c.add_entry(b, 100, 0, entry(100, 0), KEY)
        poll = c.read_entry_long_poll(b, 100, -1, 5, 60000)
        await sleep(0.1)
        assert not poll.called
        c.close_bookie(b)
        assert poll.called
        await failure(poll, BKBookieHandleNotAvailableException)
        assert await c.read_entry(b, 100, 0) == entry(100, 0)       # reconnects
        await c.close()
        await failure(c.read_entry(b, 100, 0), BKClientClosedException)

    call(scenario)


def test_requests_issued_while_connecting_are_flushed_in_one_write(bookie):
    c = make_client()
    b = bid(bookie)
    writes = []

    async def scenario():
        ds = [c.add_entry(b, 110, e, entry(110, e), KEY) for e in range(50)]
        (ch,) = c.channels
        assert ch.state == "connecting" and len(ch.core.out) == 50

        def connection_made():
            real_socket = ch.transport.getHandle()

            class CountingSocket:            # counts the sends the channel makes on its socket
                def sendmsg(self, buffers):
                    writes.append(sum(len(b) for b in buffers))
                    return real_socket.sendmsg(buffers)

            counting = CountingSocket()
            ch.transport.getHandle = lambda: counting
            type(ch).connectionMade(ch)

        ch.connectionMade = connection_made
        await defer.gatherResults(ds)
        assert writes == [sum(len(entry(110, e)) + 28 for e in range(50))]       # v2 ADD: 8 + 20 + entry
        # later requests of one reactor turn are coalesced the same way
        await defer.gatherResults([c.add_entry(b, 110, e, entry(110, e), KEY) for e in range(50, 100)])
        assert writes[1:] == [sum(len(entry(110, e)) + 28 for e in range(50, 100))]

    try:
        call(scenario)
    finally:
        call(c.close)


def test_connect_timeout_fails_queued_requests_with_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(3):                      # fill the accept queue: further SYNs are dropped
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(listener.getsockname())
        fillers.append(s)
    time.sleep(0.2)
    b = f"127.0.0.1:{listener.getsockname()[1]}"
    c = make_client(clientConnectTimeoutMillis=500)

    async def scenario():
        start = time.monotonic()
        ds = [c.add_entry(b, 5, e, entry(5, e), KEY) for e in range(3)]
        for e, d in enumerate(ds):
            err = await failure(d, BKTimeoutException)
            assert b in str(err) and "ledger 5" in str(err) and f"entry {e}" in str(err)
        assert 0.4 <= time.monotonic() - start < 3.0

    try:
        call(scenario)
    finally:
        call(c.close)
        for s in fillers:
            s.close()
        listener.close()


def test_channels_per_bookie_are_chosen_by_ledger_id_and_use_tcp_nodelay(bookie, client):
    b = bid(bookie)

    async def scenario():
        for ledger in (120, 121, 122):
            await client.add_entry(b, ledger, 0, entry(ledger, 0), KEY)
        v2 = [ch for ch in client.channels if not ch.v3]
        assert len(v2) == 2
        for ch in v2:
            sock = ch.transport.getHandle()
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert client._channel(b, False, 120) is client._channel(b, False, 122)
        assert client._channel(b, False, 120) is not client._channel(b, False, 121)

    call(scenario)
