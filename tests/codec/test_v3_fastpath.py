"""The bookie's v3 fast path (decode_v3_adds, serve_v3_reads, serve_v2_reads, FrameBuilder's v3 responses)
against protobuf itself: what the fast path takes, it reads exactly as protobuf does; what it builds is
byte-identical to pb.Response.SerializeToString(); what it does not take is left to the protobuf path.
Both codec implementations (Cython and the pure-Python twin)."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.codec_impls import IMPLEMENTATIONS

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U64 = st.integers(0, (1 << 64) - 1)
STATUS = st.sampled_from([0, 402, 403, 404, 501, 502, 503, 504, 505, 506, 507])


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _add_request(ledger, entry, txn, key, body, scope=0, flag=None, write_flags=None, priority=None, version=3):
    r = pb.Request()
    r.header.version = version
    r.header.operation = pb.ADD_ENTRY
    r.header.txnId = txn
    if priority is not None:
        r.header.priority = priority
    a = r.addRequest
    a.ledgerId, a.entryId, a.masterKey, a.body = ledger, entry, key, body
    if scope:
        a.ledgerScopeId = _signed(scope)
    if flag is not None:
        a.flag = flag
    if write_flags is not None:
        a.writeFlags = write_flags
    return r.SerializeToString()


def _read_request(ledger, entry, txn, scope=0, **extra):
    r = pb.Request()
    r.header.version = 3
    r.header.operation = pb.READ_ENTRY
    r.header.txnId = txn
    rr = r.readRequest
    rr.ledgerId, rr.entryId = ledger, entry
    if scope:
        rr.ledgerScopeId = _signed(scope)
    for k, v in extra.items():
        setattr(rr, k, v)
    return r.SerializeToString()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(status=STATUS, ledger=I64, entry=I64, txn=U64, scope=st.one_of(st.just(0), U64))
def test_v3_add_response_is_protobufs_serialization(impl, status, ledger, entry, txn, scope):
    b = impl.FrameBuilder()
    b.add_v3_add_response(status, ledger, entry, txn, scope)
    got = b.take()
    expected = pb.Response(status=status)
    expected.header.version, expected.header.operation, expected.header.txnId = 3, pb.ADD_ENTRY, txn
    a = expected.addResponse
    a.status, a.ledgerId, a.entryId = status, ledger, entry
    if scope:
        a.ledgerScopeId = _signed(scope)
    body = expected.SerializeToString()
    assert got == len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(status=STATUS, ledger=I64, entry=I64, txn=U64, scope=st.one_of(st.just(0), U64),
       data=st.one_of(st.none(), st.binary(max_size=300)), max_lac=st.one_of(st.none(), I64),
       ts=st.one_of(st.none(), I64))
def test_v3_read_response_is_protobufs_serialization(impl, status, ledger, entry, txn, scope, data, max_lac, ts):
    b = impl.FrameBuilder()
    b.add_v3_read_response(status, ledger, entry, txn, data, max_lac is not None, max_lac or 0,
                           ts is not None, ts or 0, scope)
    got = b.take()
    expected = pb.Response(status=status)
    expected.header.version, expected.header.operation, expected.header.txnId = 3, pb.READ_ENTRY, txn
    r = expected.readResponse
    r.status, r.ledgerId, r.entryId = status, ledger, entry
    if data is not None:
        r.body = data
    if max_lac is not None:
        r.maxLAC = max_lac
    if ts is not None:
        r.lacUpdateTimestamp = ts
    if scope:
        r.ledgerScopeId = _signed(scope)
    body = expected.SerializeToString()
    assert got == len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(ledger=I64, entry=I64, txn=U64, key=st.binary(max_size=40), body=st.binary(max_size=200),
       scope=st.one_of(st.just(0), U64), recovery=st.booleans(), priority=st.one_of(st.none(), st.integers(0, 9)))
def test_decode_v3_adds_reads_what_protobuf_reads(impl, ledger, entry, txn, key, body, scope, recovery, priority):
    frame = _add_request(ledger, entry, txn, key, body, scope, flag=1 if recovery else None, priority=priority)
    adds, ids, end = impl.decode_v3_adds([frame, frame], 0)
    assert end == 2
    assert adds[0] == (body, key, recovery, recovery or bool(priority))
    assert ids[0] == (ledger, entry, txn, scope)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_decode_v3_adds_leaves_what_it_does_not_take_to_the_protobuf_path(impl):
    good = _add_request(1, 2, 3, b"k" * 20, b"e")
    not_taken = [
        _add_request(1, 2, 3, b"k" * 20, b"e", write_flags=1),            # DEFERRED_SYNC
        _add_request(1, 2, 3, b"k" * 20, b"e", version=2),                # EBADVERSION answered by protobuf path
        _read_request(1, 2, 3),                                          # another operation
        good[:-1],                                                       # truncated
        good + good[:2],                                                 # repeated header (merged by protobuf)
        b"\x00\x00\x00\x01garbage",
        b"",
    ]
    for frame in not_taken:
        adds, ids, end = impl.decode_v3_adds([good, frame, good], 0)
        assert (len(adds), end) == (1, 1), frame


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_fast_path_never_takes_a_frame_protobuf_refuses(impl):
    """Random mutations of a valid ADD: if the fast path takes it, protobuf parses it to the same fields."""
    rnd = random.Random(12)
    base = _add_request(77, 5, 1234, b"m" * 20, b"payload" * 3, scope=9)
    for _ in range(3000):
        frame = bytearray(base)
        for _ in range(rnd.randint(1, 3)):
            op = rnd.random()
            pos = rnd.randrange(len(frame))
            if op < 0.5:
                frame[pos] = rnd.randrange(256)
            elif op < 0.75:
                del frame[pos]
            else:
                frame.insert(pos, rnd.randrange(256))
        frame = bytes(frame)
        adds, ids, end = impl.decode_v3_adds([frame], 0)
        if not end:
            continue
        request = pb.Request()
        request.ParseFromString(frame)          # must not raise
        assert request.IsInitialized()
        a = request.addRequest
        assert request.header.operation == pb.ADD_ENTRY and request.header.version == 3
        assert ids[0] == (a.ledgerId, a.entryId, request.header.txnId, a.ledgerScopeId & ((1 << 64) - 1))
        assert adds[0][:2] == (a.body, a.masterKey)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_serve_v3_reads_answers_hits_keeps_ledger_order_behind_misses_and_stops_at_the_output_bound(impl):
    store = {(7, 0): b"zero", (7, 2): b"two", (8, 0): b"other"}
    frames = [_read_request(7, 0, 10), _read_request(7, 1, 11), _read_request(7, 2, 12),
              _read_request(8, 0, 13), _read_request(7, 0, 14, previousLAC=0), _read_request(7, 0, 15)]
    out = impl.FrameBuilder()
    busy: dict = {}
    end, misses = impl.serve_v3_reads(frames, 0, out, lambda led, e, s: store.get((led, e)), lambda s, led: 5, busy)
    # stops at the long-poll read (protobuf path); entry 2 of ledger 7 queues behind the miss of entry 1
    assert end == 4
    assert misses == [(7, 1, 11, 0), (7, 2, 12, 0)]
    assert busy == {7: 0}
    answers = []
    view = out.take()
    while view:
        n = int.from_bytes(view[:4], "big")
        answers.append(pb.Response.FromString(view[4:4 + n]))
        view = view[4 + n:]
    assert [(a.header.txnId, a.readResponse.body, a.readResponse.maxLAC) for a in answers] == [
        (10, b"zero", 5), (13, b"other", 5)]
    limited = impl.FrameBuilder()
    end, misses = impl.serve_v3_reads([_read_request(8, 0, 1)] * 10, 0, limited, lambda led, e, s: b"x" * 100,
                                      lambda s, led: 0, {}, 300)
    assert end == 3 and not misses


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_serve_v2_reads_takes_plain_reads_only(impl):
    store = {(3, 0): b"a", (3, 1): b"b"}
    frames = [impl.encode_read_request(3, 0), impl.encode_read_request(3, 5), impl.encode_read_request(4, 1),
              impl.encode_read_request(3, 1, flags=impl.FLAG_DO_FENCING, master_key=b"k" * 20)]
    frames = [f[4:] for f in frames]
    out = impl.FrameBuilder()
    end, misses = impl.serve_v2_reads(frames, 0, out, lambda led, e, s: store.get((led, e)), {})
    assert end == 3 and misses == [(3, 5, 2), (4, 1, 2)]
    r = impl.decode_response(out.take()[4:])
    assert (r.rc, r.ledger_id, r.entry_id, bytes(r.data)) == (0, 3, 0, b"a")


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_serve_reads_stop_at_the_misses_the_connection_may_still_queue(impl):
    # A run of reads ends once it has max_misses misses (the connection's room on the read pool); hits
    # do not count, and the frame that would be one miss too many is left for later.
    store = {(4, 1): b"hit"}
    v2 = [impl.encode_read_request(led, e)[4:] for led, e in ((3, 0), (4, 1), (5, 2), (6, 3))]
    out = impl.FrameBuilder()
    end, misses = impl.serve_v2_reads(v2, 0, out, lambda led, e, s: store.get((led, e)), {}, -1, 2)
    assert end == 3 and misses == [(3, 0, 2), (5, 2, 2)]
    assert bytes(impl.decode_response(out.take()[4:]).data) == b"hit"
    end, misses = impl.serve_v2_reads(v2, 0, impl.FrameBuilder(), lambda led, e, s: None, {}, -1, 2)
    assert end == 2 and misses == [(3, 0, 2), (4, 1, 2)]
    v3 = [_read_request(9, e, 20 + e) for e in range(4)]
    end, misses = impl.serve_v3_reads(v3, 0, impl.FrameBuilder(), lambda led, e, s: None, lambda s, led: 0, {},
                                      -1, 3)
    assert end == 3 and misses == [(9, 0, 20, 0), (9, 1, 21, 0), (9, 2, 22, 0)]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=100, deadline=None)
@given(ledger=st.integers(0, (1 << 63) - 1), entry=I64, lac=I64, txn=U64, payload=st.binary(max_size=100),
       digest=st.sampled_from([1, 3, 4]))
def test_v3_add_request_is_protobufs_serialization_and_decode_v3_answer_reads_responses(
        impl, ledger, entry, lac, txn, payload, digest):
    key = b"K" * 20
    b = impl.FrameBuilder()
    b.add_v3_add_request(key, ledger, entry, lac, 77, payload, digest, b"", txn)
    got = b.take()
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = 3, pb.ADD_ENTRY, txn
    a = r.addRequest
    a.ledgerId, a.entryId, a.masterKey = ledger, entry, key
    a.body = impl.encode_entry(ledger, entry, lac, 77, payload, digest)
    body = r.SerializeToString()
    assert got == len(body).to_bytes(4, "big") + body
    out = impl.FrameBuilder()
    out.add_v3_add_response(503, ledger, entry, txn)
    assert impl.decode_v3_answer(out.take()[4:]) == (txn, pb.ADD_ENTRY, 503)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_decode_v3_answer_refuses_what_is_not_a_response(impl):
    from bkfast.errors import MalformedFrameError

    for junk in (b"", b"\x0a\x05\x08\x03", b"\xff" * 12, _read_request(1, 2, 3)):
        with pytest.raises(MalformedFrameError):
            impl.decode_v3_answer(junk)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_add_responses_in_one_call_are_the_single_responses_in_order(impl):
    ids = [(3, 0, 2), (3, 1, 1), (4, 7, 0), ((1 << 63) - 1, 2, 2)]
    one, each = impl.FrameBuilder(), impl.FrameBuilder()
    one.add_add_responses(-101, ids)
    for ledger_id, entry_id, version in ids:
        if version == 0:    # legacy: the bare opcode as header
            each.add_frame(struct.pack(">Iiqq", impl.OP_ADD, -101, ledger_id, entry_id))
        else:
            each.add_add_response(-101, ledger_id, entry_id, version)
    assert bytes(one.take()) == bytes(each.take())
    v3_ids = [(3, 0, 10, 0), (3, 1, 11, 7), (9, 2, 1 << 40, 0)]
    one, each = impl.FrameBuilder(), impl.FrameBuilder()
    one.add_v3_add_responses(0, v3_ids)
    for ledger_id, entry_id, txn, scope in v3_ids:
        each.add_v3_add_response(0, ledger_id, entry_id, txn, scope)
    assert bytes(one.take()) == bytes(each.take())
