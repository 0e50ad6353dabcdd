"""The client's v3 answer dispatch (`ChannelCore.dispatch_v3`, bkfast/_clientpath.pyx) and the codec's
`decode_v3_answer` (the load generator's, both implementations) read a v3 Response with one reader; fed
the same edge cases they reach the same verdict, and whenever they take an answer its status is the one
the client's protobuf path (bkfast.net.bookie_channel) would take from the parsed Response."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from twisted.internet import defer

from bkfast import _codec, _refcodec
from bkfast._clientpath import AckPort, AddTracker, ChannelCore, PendingAdd
from bkfast.proto import BookkeeperProtocol_pb2 as pb

ADD = pb.ADD_ENTRY
TXN = 1 << 62            # the client's first tracked txnId


def _response(*, status=pb.EOK, operation=ADD, txn=TXN, add=None, read=None, other=None):
    """A Response built by protobuf itself; add/read/other are the statuses of addResponse, readResponse
    and writeLacResponse (None: absent)."""
    r = pb.Response()
    r.header.version = pb.VERSION_THREE
    r.header.operation = operation
    if txn is not None:
        r.header.txnId = txn
    if status is not None:
        r.status = status
    for sub, code in ((r.addResponse, add), (r.readResponse, read)):
        if code is not None:
            sub.status, sub.ledgerId, sub.entryId = code, 9, 0
    if other is not None:
        r.writeLacResponse.status, r.writeLacResponse.ledgerId = other, 9
    return r.SerializePartialToString()


def _add_response_without_status() -> bytes:
    r = pb.Response()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, ADD, TXN
    r.status = pb.EOK
    r.addResponse.ledgerId, r.addResponse.entryId = 9, 0
    return r.SerializePartialToString()


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out) + bytes([v])


def _field(number: int, message: bytes) -> bytes:
    """A length-delimited field appended to a message: protobuf merges it into one already there."""
    return _varint((number << 3) | 2) + _varint(len(message)) + message


EDGE_CASES = {
    "add ok": _response(add=pb.EOK),
    "add fenced inside, ok outside": _response(add=pb.EFENCED),
    "no addResponse: the top-level status": _response(status=pb.EBADVERSION),
    "a readResponse does not answer an add": _response(status=pb.EFENCED, read=pb.EOK),
    "a writeLacResponse does not answer an add": _response(status=pb.EIO, other=pb.EOK),
    "repeated addResponse: the last status": _response(add=pb.EIO) + _field(101, pb.AddResponse(
        status=pb.EOK, ledgerId=9, entryId=0).SerializeToString()),
    "addResponse without its status": _add_response_without_status(),
    "unknown field skipped": _response(add=pb.EOK) + _varint(50 << 3) + _varint(7),
    "no txnId": _response(txn=None, add=pb.EOK),
    "no top-level status": _response(status=None, add=pb.EOK),
    "a group field": _response(add=pb.EOK) + _varint((50 << 3) | 3),
    "truncated": _response(add=pb.EOK)[:-1],
    "garbage": b"\xff\xff garbage",
    "empty": b"",
}


def _protobuf_verdict(frame: bytes):
    """What bookie_channel's protobuf path makes of the answer: ("status", code) or ("refused",)."""
    try:
        r = pb.Response.FromString(frame)
    except DecodeError:
        return ("refused",)
    field = {pb.ADD_ENTRY: "addResponse", pb.READ_ENTRY: "readResponse"}[r.header.operation]
    return ("status", getattr(r, field).status if r.HasField(field) else r.status)


def _client_verdict(frame: bytes):
    """Dispatches `frame` to a channel with one tracked add at TXN: ("status", code) if the fast path
    took it, ("refused",) if it went to the protobuf path."""
    slow: list[bytes] = []
    acked: list[int] = []
    failed: list[int] = []
    tracker = AddTracker(1, 1, 1, -1, 0, False, False, 0.0, lambda pos: None, lambda p, pos: None,
                         lambda entry: b"", lambda pos, entry_id, status: failed.append(status), lambda: None)
    core = ChannelCore(lambda: None, lambda: None, slow.append, 1 << 20, lambda status: status)
    core.connected = True
    port = core.ports[9] = AckPort(tracker, 0)
    tracker.channels[0] = core
    done = defer.Deferred()
    done.addCallback(lambda entry_id: acked.append(pb.EOK))
    tracker.push(PendingAdd(0, b"entry", 1, done))
    core.write_v3_add(port, 0, b"")
    assert pb.Request.FromString(b"".join(core.take())[4:]).header.txnId == TXN
    core.dispatch_v3([frame])
    if slow:
        return ("refused",)
    return ("status", (acked + failed)[0])


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_client_dispatch_and_decode_v3_answer_reach_the_same_verdict(name):
    frame = EDGE_CASES[name]
    client = _client_verdict(frame)
    for impl in (_codec, _refcodec):
        try:
            txn, operation, status = impl.decode_v3_answer(frame)
        except _codec.MalformedFrameError:
            codec = ("refused",)
        else:
            assert (txn, operation) == (TXN, ADD)
            codec = ("status", status)
        assert codec == client, (impl.__name__, name)
    if client != ("refused",):
        assert client == _protobuf_verdict(frame), name


def test_the_edge_cases_cover_both_verdicts_and_the_sub_response_rule():
    verdicts = {name: _client_verdict(frame) for name, frame in EDGE_CASES.items()}
    assert verdicts["add fenced inside, ok outside"] == ("status", pb.EFENCED)
    assert verdicts["a readResponse does not answer an add"] == ("status", pb.EFENCED)
    assert verdicts["a writeLacResponse does not answer an add"] == ("status", pb.EIO)
    assert verdicts["repeated addResponse: the last status"] == ("status", pb.EOK)
    assert verdicts["addResponse without its status"] == ("refused",)
    assert verdicts["truncated"] == ("refused",)
