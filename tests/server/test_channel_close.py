"""How the client's channels end a connection (docs/tls.md, "Closing a connection"): TLS close_notify, then
FIN, a reset only after a bounded wait for a peer that does not close its side, and a reset at once on errors.

The peers are raw sockets in the test thread (a plain TCP listener, or Python's `ssl` speaking the START_TLS
exchange with a certificate from a CA made here), so what reached them is seen as the kernel reports it:
recv() returning b'' is a FIN, ConnectionResetError (or the TCP state CLOSE) an RST. With real bookies as
peers, a client's close() is prompt.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time

import pytest
from twisted.internet import defer
from twisted.python import log as twisted_log

from bkfast.codec import DigestType, encode_entry, mac_key, master_key
from bkfast.conf import ClientConfiguration
from bkfast.errors import BKError
from bkfast.net.bookie_channel import CLOSE_WAIT_S
from bkfast.net.bookie_client import BookieClient
from tests.reactor_thread import call, reactor
from tests.server_support import BookieProcess
from tests.tls_support import START_TLS, START_TLS_EOK, make_pki
from tests.waiting import wait_until

KEY = master_key(b"secret")
MAC = mac_key(b"secret")


def entry(ledger, e, payload=b"close"):
    return encode_entry(ledger, e, e - 1, (e + 1) * len(payload), payload, DigestType.CRC32C, MAC, 0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def reactor_errors():
    """No exception reaches the reactor while a channel closes (Twisted logs it as an error and goes on)."""
    errors = []

    def observe(event):
        if event.get("isError"):
            errors.append(twisted_log.textFromEventDict(event))

    twisted_log.addObserver(observe)
    yield errors
    twisted_log.removeObserver(observe)
    assert errors == []


class Listener:
    """A listening socket standing in for a bookie."""

    def __init__(self, rcvbuf: int | None = None):
        self.sock = socket.socket()
        if rcvbuf is not None:          # inherited by accepted sockets; set before listen() to bound the window
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(10)
        self.bookie_id = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.peers: list[socket.socket] = []

    def accept(self) -> socket.socket:
        peer, _ = self.sock.accept()
        peer.settimeout(10)
        self.peers.append(peer)
        return peer

    def close(self) -> None:
        for p in self.peers:
            p.close()
        self.sock.close()


def _recv_exact(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "peer closed mid-frame"
        out += chunk
    return out


def _answer_v2_add(sock) -> None:
    """Read one v2 ADD request and answer EOK (as a bookie would)."""
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    body = _recv_exact(sock, n)
    ledger, e = struct.unpack_from(">qq", body, 4 + 20)
    sock.sendall(struct.pack(">IIiqq", 24, 0x02010000, 0, ledger, e))


_TCP_CLOSE_WAIT, _TCP_CLOSE = 8, 7


def _tcp_state(sock) -> int:
    """The kernel's TCP state of `sock` (struct tcp_info's first byte): CLOSE_WAIT once the peer's FIN came,
    CLOSE once its RST came."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def _until_end(sock) -> str:
    """Read until the connection ends: 'fin' (recv returned b'') or 'rst' (ECONNRESET)."""
    try:
        while sock.recv(1 << 16):
            pass
        return "fin"
    except ConnectionResetError:
        return "rst"


def _client(conf: dict | None = None) -> BookieClient:
    return BookieClient(reactor, ClientConfiguration({"addEntryTimeoutSec": "60", **(conf or {})}))


def _add(client, bookie_id, ledger=7, e=0, payload=b"close"):
    """Issue one v2 add in the reactor. Returns [its Deferred], and its error is appended when it fails."""
    box = []

    def issue():
        d = client.add_entry(bookie_id, ledger, e, entry(ledger, e, payload), KEY, protocol="v2")
        box.append(d)
        d.addErrback(lambda f: box.append(f.value))

    call(issue)
    return box


class Closing:
    """client.close() started in the reactor; `done` is when its Deferred fired (None until then)."""

    def __init__(self, client):
        self.started = time.monotonic()
        self.done = None

        def start():
            client.close().addCallback(lambda _: setattr(self, "done", time.monotonic()))

        call(start)

    def wait(self, limit: float) -> float:
        deadline = time.monotonic() + limit
        while self.done is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.done is not None, f"close() not done within {limit} s"
        return self.done - self.started


def _tls_accept(listener: Listener, pki, **wrap) -> ssl.SSLSocket:
    """Accept a client, answer its START_TLS as a bookie does, and switch to TLS (Python's ssl, server side)."""
    raw = listener.accept()
    assert _recv_exact(raw, len(START_TLS)) == START_TLS
    raw.sendall(START_TLS_EOK)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.bookie_cert), str(pki.bookie_key))
    return ctx.wrap_socket(raw, server_side=True, **wrap)


def test_closing_an_idle_plaintext_channel_sends_fin_and_waits_for_the_bookie_to_close():
    listener = Listener()
    client = _client()
    try:
        box = _add(client, listener.bookie_id)
        peer = listener.accept()
        _answer_v2_add(peer)
        while not box[0].called:
            time.sleep(0.01)
        closing = Closing(client)
        assert peer.recv(16) == b""                 # FIN, not ECONNRESET
        time.sleep(0.2)
        assert closing.done is None                 # the socket stays until the bookie closes its side
        peer.close()
        assert closing.wait(2) < CLOSE_WAIT_S
    finally:
        listener.close()


def _fin_arrived(sock, timeout: float = 5.0) -> bool:
    """True once the kernel has the peer's FIN for `sock` and nothing before it (peeked: nothing is read)."""
    probe = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        probe.settimeout(timeout)
        return probe.recv(1, socket.MSG_PEEK) == b""
    finally:
        probe.close()


def _closing_after_one_tls_add(listener, pki):
    """A client that added one entry to `listener` over TLS and is now closing: (the peer's TLS socket,
    its Closing). A ragged EOF (FIN without close_notify) raises SSLEOFError there instead of b''."""
    client = _client(pki.client_conf())
    box = _add(client, listener.bookie_id)
    peer = _tls_accept(listener, pki, suppress_ragged_eofs=False)
    _answer_v2_add(peer)
    while not box[0].called:
        time.sleep(0.01)
    return peer, Closing(client)


def test_closing_an_idle_tls_channel_sends_close_notify_then_fin(pki):
    listener = Listener()
    try:
        peer, closing = _closing_after_one_tls_add(listener, pki)
        assert peer.recv(16) == b""                 # close_notify
        assert _fin_arrived(peer)                   # then FIN, without waiting for our close_notify
        raw = peer.unwrap()                         # our close_notify now reaches a half-closed client
        assert raw.recv(16) == b""
        raw.close()
        assert closing.wait(2) < CLOSE_WAIT_S
        time.sleep(0.1)                             # for a late error of the TLS layer (reactor_errors)
    finally:
        listener.close()


def test_a_tls_peer_that_never_answers_close_notify_is_reset_after_the_bounded_wait(pki):
    listener = Listener()
    try:
        peer, closing = _closing_after_one_tls_add(listener, pki)
        assert peer.recv(16) == b""                 # close_notify arrives, and is never answered
        raw = socket.socket(fileno=peer.detach())
        raw.settimeout(10)
        assert raw.recv(16) == b""                  # FIN follows
        assert _tcp_state(raw) == _TCP_CLOSE_WAIT
        elapsed = closing.wait(CLOSE_WAIT_S + 3)
        assert CLOSE_WAIT_S - 0.2 <= elapsed < CLOSE_WAIT_S + 2
        wait_until("the reset, once the wait was over", lambda: _tcp_state(raw) == _TCP_CLOSE, 2)
        raw.close()
    finally:
        listener.close()


def test_a_peer_that_never_reads_is_reset_after_the_bounded_wait():
    listener = Listener(rcvbuf=4096)
    client = _client()
    try:
        boxes = [_add(client, listener.bookie_id, 9, e, b"x" * (1 << 20))     # far more than socket buffers hold
                 for e in range(16)]
        peer = listener.accept()
        time.sleep(0.5)
        closing = Closing(client)
        elapsed = closing.wait(CLOSE_WAIT_S + 3)
        assert CLOSE_WAIT_S - 0.2 <= elapsed < CLOSE_WAIT_S + 2
        assert _until_end(peer) == "rst"             # the FIN never got through the full window
        assert all(isinstance(box[-1], BKError) and "closed" in str(box[-1]) for box in boxes)
    finally:
        listener.close()


def test_closing_many_channels_to_peers_that_never_close_is_bounded():
    listeners = [Listener() for _ in range(3)]
    client = _client({"numChannelsPerBookie": "8"})
    try:
        for listener in listeners:
            for ledger in range(8):                 # one add per channel; nobody answers
                _add(client, listener.bookie_id, ledger)
        peers = [listener.accept() for listener in listeners for _ in range(8)]
        time.sleep(0.3)
        closing = Closing(client)
        ends = [_until_end(p) for p in peers]       # every peer sees the FIN at once
        assert ends == ["fin"] * 24
        assert closing.done is None
        elapsed = closing.wait(CLOSE_WAIT_S + 3)    # all 24 in parallel, not one after another
        assert elapsed < CLOSE_WAIT_S + 2
        wait_until("every peer reset", lambda: [_tcp_state(p) for p in peers] == [_TCP_CLOSE] * 24, 2)
    finally:
        for listener in listeners:
            listener.close()


def test_an_undecodable_answer_resets_the_connection_at_once():
    listener = Listener()
    client = _client({"nettyMaxFrameSizeBytes": "1024"})
    try:
        box = _add(client, listener.bookie_id)
        peer = listener.accept()
        (n,) = struct.unpack(">I", _recv_exact(peer, 4))
        _recv_exact(peer, n)
        t0 = time.monotonic()
        peer.sendall(struct.pack(">I", 1 << 20) + b"\0" * 64)   # a frame past nettyMaxFrameSizeBytes
        assert _until_end(peer) == "rst"
        assert time.monotonic() - t0 < CLOSE_WAIT_S / 2
        deadline = time.monotonic() + 5
        while len(box) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(box[1], BKError) and "bad frame" in str(box[1])
    finally:
        call(client.close)
        listener.close()


@pytest.mark.parametrize("tls", [False, True])
def test_closing_a_client_of_real_bookies_is_prompt(tmp_path, pki, tls):
    bookies = []
    for i in range(2):
        b = BookieProcess(tmp_path / f"b{i}")
        if tls:
            b.extra_conf.update(pki.bookie_conf())
        bookies.append(b.start())
    client = _client({**(pki.client_conf() if tls else {}), "numChannelsPerBookie": "3"})
    try:
        async def scenario():
            ds = []
            for b in bookies:
                for ledger in range(3):
                    for proto in ("v2", "v3"):
                        ds.append(client.add_entry(b.bookie_id, 100 + ledger, 0, entry(100 + ledger, 0), KEY,
                                                   protocol=proto))
            await defer.gatherResults(ds)
            return len(client.channels)

        assert call(lambda: defer.Deferred.fromCoroutine(scenario())) == 12
        assert Closing(client).wait(CLOSE_WAIT_S) < 1.0
        time.sleep(0.2)                             # for a late error of the TLS layer (reactor_errors)
    finally:
        for b in bookies:
            assert b.stop() == 0, b.log()
