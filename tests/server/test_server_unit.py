"""In-process tests of the server protocol with a fake Bookie: coalesced writes and backpressure."""

from __future__ import annotations

from twisted.internet import task
from twisted.internet.testing import StringTransport

from bkfast.codec import DigestType, decode_response, encode_add_request, master_key
from bkfast.conf import ServerConfiguration
from bkfast.errors import BKLedgerFencedException
from bkfast.net.server import CONNECTION_MAX_INFLIGHT_ADDS, BookieServerFactory, ServerSettings
from tests.server_bookie_double import HeldAddsBookie

KEY = master_key("k")


FakeBookie = HeldAddsBookie


class CountingTransport(StringTransport):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, data):
        self.writes += 1
        super().write(data)


def _connect(max_pending=0):
    clock = task.Clock()
    conf = ServerConfiguration({"maxPendingAddRequestsPerThread": max_pending})
    bookie = FakeBookie()
    factory = BookieServerFactory(bookie, ServerSettings.from_conf(conf), reactor=clock)
    proto = factory.buildProtocol(None)
    transport = CountingTransport()
    proto.makeConnection(transport)
    return clock, bookie, factory, proto, transport


def _frames(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def test_one_write_per_batch_per_connection():
    clock, bookie, factory, proto, transport = _connect()
    proto.dataReceived(b"".join(encode_add_request(KEY, 1, e, e - 1, e + 1, b"x", DigestType.CRC32)
                                for e in range(100)))
    assert len(bookie.pending) == 100 and transport.value() == b""
    bookie.complete()                      # one journal batch
    clock.advance(0)                       # the coalesced flush
    assert transport.writes == 1
    responses = [decode_response(f) for f in _frames(transport.value())]
    assert [(r.rc, r.entry_id) for r in responses] == [(0, e) for e in range(100)]


def test_errors_use_v2_codes():
    clock, bookie, factory, proto, transport = _connect()
    proto.dataReceived(encode_add_request(KEY, 1, 0, -1, 1, b"x", DigestType.CRC32))
    bookie.complete(error=BKLedgerFencedException("fenced"))
    clock.advance(0)
    assert decode_response(_frames(transport.value())[0]).rc == 104


def test_pause_reading_above_bound_and_resume_below_half():
    clock, bookie, factory, proto, transport = _connect()
    n = CONNECTION_MAX_INFLIGHT_ADDS + 1
    proto.dataReceived(b"".join(encode_add_request(KEY, 2, e, e - 1, e + 1, b"", DigestType.CRC32)
                                for e in range(n)))
    assert transport.producerState == "paused"
    bookie.complete(n - CONNECTION_MAX_INFLIGHT_ADDS // 2)     # still at half: stays paused
    assert transport.producerState == "paused"
    bookie.complete(1)
    assert transport.producerState == "producing"
    assert factory.pending_adds == CONNECTION_MAX_INFLIGHT_ADDS // 2 - 1


def test_bookie_wide_pending_bound_gives_too_many_requests():
    clock, bookie, factory, proto, transport = _connect(max_pending=2)
    proto.dataReceived(b"".join(encode_add_request(KEY, 3, e, e - 1, e + 1, b"", DigestType.CRC32)
                                for e in range(3)))
    clock.advance(0)
    [r] = [decode_response(f) for f in _frames(transport.value())]
    assert (r.rc, r.entry_id) == (106, 2)


def test_bad_length_prefix_processes_earlier_frames_then_closes():
    clock, bookie, factory, proto, transport = _connect()
    good = encode_add_request(KEY, 4, 0, -1, 1, b"x", DigestType.CRC32)
    proto.dataReceived(good + b"\xff\xff\xff\xff" + b"junk")
    assert len(bookie.pending) == 1
    assert transport.disconnecting
