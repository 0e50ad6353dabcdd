"""write_now: a connection's answers go out in one send when Twisted holds nothing unsent for it, and
otherwise queue behind what it holds (order kept); TLS connections always go through Twisted."""

from __future__ import annotations

import socket

import pytest
from twisted.internet import reactor, tcp

from bkfast.net.write_now import write_now


@pytest.fixture
def pair():
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.settimeout(5)
    conn = tcp.Connection(ours, None, reactor)
    conn.connected = True                      # as tcp.Server sets it for an accepted connection
    yield conn, peer
    conn.stopWriting()
    ours.close()
    peer.close()


def _queued(conn) -> int:
    return conn._tempDataLen + len(conn.dataBuffer) - conn.offset


def test_sends_at_once_when_nothing_is_queued(pair):
    conn, peer = pair
    write_now(conn, b"answers")
    assert peer.recv(100) == b"answers"
    assert _queued(conn) == 0 and conn not in reactor.getWriters()


def test_queues_behind_what_twisted_holds_and_keeps_the_order(pair):
    conn, peer = pair
    conn.write(b"first ")                      # held by Twisted until the reactor writes it
    write_now(conn, b"second")
    assert _queued(conn) == len(b"first second")
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)                         # nothing went ahead of "first "
    conn.doWrite()
    peer.setblocking(True)
    assert peer.recv(100) == b"first second"


def test_what_the_socket_does_not_take_is_queued(pair):
    conn, peer = pair
    data = bytes(range(256)) * (64 * 1024)     # 16 MiB: more than a socket buffer
    write_now(conn, data)
    queued = _queued(conn)
    assert 0 < queued < len(data)
    received = bytearray()
    while len(received) < len(data) - queued:
        received += peer.recv(1 << 20)
    assert bytes(received) == data[:len(data) - queued]


def test_a_tls_connection_always_goes_through_twisted(pair):
    conn, peer = pair
    conn.TLS = True                            # what startTLS sets: bytes must pass the TLS layer,
    conn.protocol = tls_layer = _Recorder()    # which startTLS makes the connection's protocol
    write_now(conn, b"secret")
    assert tls_layer.written == [b"secret"]
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)


class _Recorder:
    def __init__(self):
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)
