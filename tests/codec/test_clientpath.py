"""AddTracker and ReadBatchCore (bkfast/_clientpath.pyx): quorum counting, in-order completion, positions
replaced by an ensemble change, and the read batch's replica order, driven directly through their
callbacks (the cluster tests drive them over real connections)."""

from __future__ import annotations

from twisted.internet import defer

from bkfast._clientpath import AddTracker, ChannelCore, PendingAdd, ReadBatchCore


class Recorder:
    def __init__(self):
        self.sent: list[tuple[int, int]] = []        # (entry id, position) sent on the general path
        self.errors: list[tuple[int, int, object]] = []
        self.drained = 0

    def tracker(self, e=3, wq=2, aq=2, sorted_insert=False):
        return AddTracker(e, wq, aq, -1, 0, False, sorted_insert, 0.0, lambda pos: None,
                          lambda p, pos: self.sent.append((p.entry_id, pos)), lambda entry: b"",
                          lambda pos, entry_id, err: self.errors.append((pos, entry_id, err)), self.note_drained)

    def note_drained(self):
        self.drained += 1


def _push(tracker, entry_id, results):
    d = defer.Deferred()
    d.addCallback(results.append)
    tracker.push(PendingAdd(entry_id, b"entry-%d" % entry_id, entry_id + 1, d))
    return d


def test_adds_complete_in_entry_order_once_ack_quorum_positions_answered():
    rec = Recorder()
    t = rec.tracker()
    done: list[int] = []
    for e in range(4):
        _push(t, e, done)
    # round-robin write sets over E=3, WQ=2: entry e goes to positions e%3 and (e+1)%3
    assert rec.sent == [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 0), (3, 0), (3, 1)]
    t.on_ack(1, 1, 0)
    t.on_ack(2, 1, 0)           # entry 1 has its quorum, but entry 0 has not: nothing completes
    assert done == [] and t.lac == -1
    t.on_ack(0, 0, 0)
    t.on_ack(0, 0, 0)           # the same position twice is still one ack
    assert done == []
    t.on_ack(2, 0, 0)           # position 2 is not in entry 0's write set: ignored
    assert done == []
    t.on_ack(1, 0, 0)
    assert done == [0, 1] and t.lac == 1 and t.confirmed_length == 2
    t.on_ack(2, 2, 0)
    t.on_ack(0, 2, 0)
    t.on_ack(0, 3, 0)
    t.on_ack(1, 3, 0)
    assert done == [0, 1, 2, 3] and rec.drained == 1 and not t.pending


def test_error_answer_is_reported_with_its_position_and_does_not_count():
    rec = Recorder()
    t = rec.tracker()
    done: list[int] = []
    _push(t, 0, done)
    t.on_ack(0, 0, 0)
    t.on_ack(1, 0, 101)         # v2 rc EUA-style error from position 1
    assert rec.errors == [(1, 0, 101)] and done == []


def test_replaced_positions_lose_their_acks_and_are_resent():
    rec = Recorder()
    t = rec.tracker(e=3, wq=3, aq=2)
    done: list[int] = []
    _push(t, 0, done)
    t.holding = True            # an ensemble change holds completions back
    t.on_ack(0, 0, 0)
    t.on_ack(2, 0, 0)
    assert done == []
    t.release_positions(1 << 2)   # position 2 was replaced: its ack no longer counts
    rec.sent.clear()
    t.send(t.pending[0], 1 << 2)
    assert rec.sent == [(0, 2)]
    t.holding = False
    t.drain()
    assert done == []
    t.on_ack(1, 0, 0)
    assert done == [0]


def test_adv_entries_are_kept_in_entry_order():
    rec = Recorder()
    t = rec.tracker(e=1, wq=1, aq=1, sorted_insert=True)
    done: list[int] = []
    for e in (2, 0, 1):
        _push(t, e, done)
    assert [p.entry_id for p in t.pending] == [0, 1, 2]
    t.on_ack(0, 2, 0)
    t.on_ack(0, 1, 0)
    assert done == []
    t.on_ack(0, 0, 0)
    assert done == [0, 1, 2]


def test_channel_core_routes_add_answers_to_the_registered_port():
    from bkfast._clientpath import AckPort
    from bkfast.codec import encode_add_response, encode_read_response

    rec = Recorder()
    t = rec.tracker(e=1, wq=1, aq=1)
    slow: list[bytes] = []
    core = ChannelCore(lambda: None, lambda: None, slow.append, 1 << 20)
    core.ports[7] = AckPort(t, 0)
    t.channels[0] = core
    done: list[int] = []
    _push(t, 0, done)
    add_ok = encode_add_response(0, 7, 0)[4:]
    other_ledger = encode_add_response(0, 8, 0)[4:]
    read = encode_read_response(0, 7, 0, b"x")[4:]
    core.dispatch_v2([other_ledger, add_ok, read], {}, {})
    assert done == [0]
    assert slow == [other_ledger, read]


def _stored(ledger_id, entry_id, payload, lac=None, scope_id=0):
    from bkfast.codec import encode_entry
    from bkfast.digests import DigestType

    return encode_entry(ledger_id, entry_id, entry_id - 1 if lac is None else lac, 100 + entry_id, payload,
                        DigestType.CRC32C, b"", scope_id)


def test_read_batch_asks_replicas_in_write_set_order_and_orders_results():
    from bkfast.digests import DigestType
    from bkfast.errors import DigestMismatchError, EntryIdMismatchError

    sent: list[tuple[int, str]] = []
    failures: list = []
    finished: list[bool] = []
    core = ReadBatchCore(5, 0, 2, 10, [(0, ["a", "b", "c"])], 3, 2, False, lambda b: None,
                         lambda read, bookie: sent.append((read.entry_id, bookie)), (int(DigestType.CRC32C), b"", 0),
                         lambda read, err: failures.append((read.entry_id, err)), lambda: finished.append(True),
                         lambda ledger, entry: b"")
    core.fill()
    assert sent == [(0, "a"), (1, "b"), (2, "c")]
    core.on_result("b", 2, _stored(5, 2, b"e2"), None)      # not asked yet: ignored
    core.on_result("c", 2, _stored(5, 2, b"e2"), None)
    corrupt = bytearray(_stored(5, 0, b"e0"))
    corrupt[-1] ^= 1
    core.on_result("a", 0, bytes(corrupt), None)            # fails its digest: reported, not taken
    assert [e for e, _ in failures] == [0] and isinstance(failures[0][1], DigestMismatchError)
    assert core.send_next(core.in_flight[0]) and sent[-1] == (0, "b")
    core.on_result("b", 0, b"\0" * 24 + _stored(5, 0, b"e0"), None, 24)   # an entry inside a frame
    core.on_result("b", 1, _stored(5, 7, b"e1"), None)      # the wrong entry id: refused
    assert isinstance(failures[-1][1], EntryIdMismatchError)
    core.send_next(core.in_flight[1])
    core.on_result("c", 1, _stored(5, 1, b"e1"), None)
    assert finished == [True] and [e.data for e in core.results] == [b"e0", b"e1", b"e2"]
    assert [(e.entry_id, e.length) for e in core.results] == [(0, 100), (1, 101), (2, 102)]
    assert core.max_lac == 1

def test_a_raising_add_callback_is_logged_and_later_adds_still_complete(caplog):
    rec = Recorder()
    t = rec.tracker(e=1, wq=1, aq=1)
    seen: list[tuple] = []

    def callback(error, entry_id, ctx):
        seen.append((error, entry_id, ctx))
        if entry_id == 0:
            raise RuntimeError("user bug")

    for e in range(2):
        t.push(PendingAdd(e, b"x", e + 1, None, callback, f"ctx-{e}"))
    with caplog.at_level("ERROR"):
        t.on_ack(0, 0, 0)
        t.on_ack(0, 1, 0)
    assert seen == [(None, 0, "ctx-0"), (None, 1, "ctx-1")]
    assert "add callback of entry 0 raised" in caplog.text


def test_v3_add_requests_parse_as_protobuf_and_answers_route_by_txn_id():
    import struct

    from bkfast._clientpath import AckPort
    from bkfast.errors import BKLedgerFencedException, error_for_v3_status
    from bkfast.proto import BookkeeperProtocol_pb2 as pb

    rec = Recorder()
    tracker = rec.tracker(e=1, wq=1, aq=1)
    slow: list[bytes] = []
    core = ChannelCore(lambda: None, lambda: None, slow.append, 1 << 20, error_for_v3_status)
    core.connected = True
    port = core.ports[9] = AckPort(tracker, 0)
    add = pb.Request()
    add.addRequest.ledgerId = 9
    add.addRequest.entryId = 0
    add.addRequest.masterKey = b"k" * 20
    add.addRequest.body = b"packaged entry"
    add_field = add.SerializePartialToString()
    done: list[int] = []
    for e in (0, 1):
        _push(tracker, e, done)
        core.write_v3_add(port, e, add_field)
    frames = core.take()
    assert len(frames) == 4 and frames[1] is add_field          # the shared field is not copied
    txns = []
    for prefix in (frames[0], frames[2]):
        wire = prefix + add_field
        (length,) = struct.unpack(">I", wire[:4])
        assert length == len(wire) - 4
        request = pb.Request.FromString(wire[4:])
        assert request.header.version == pb.VERSION_THREE and request.header.operation == pb.ADD_ENTRY
        assert request.addRequest == add.addRequest
        txns.append(request.header.txnId)
    assert txns[1] == txns[0] + 1 and txns[0] >= 1 << 62

    def answer(txn, status, operation=pb.ADD_ENTRY):
        r = pb.Response()
        r.header.version = pb.VERSION_THREE
        r.header.operation = operation
        r.header.txnId = txn
        r.status = status
        if operation == pb.ADD_ENTRY:
            r.addResponse.status = status
            r.addResponse.ledgerId = 9
            r.addResponse.entryId = 0
        return r.SerializeToString()

    unknown = answer(12345, pb.EOK)
    read_answer = answer(txns[1], pb.EOK, pb.READ_ENTRY)
    core.dispatch_v3([unknown, answer(txns[0], pb.EOK), read_answer, b"\xff\xff garbage"])
    assert done == [0]
    assert slow == [unknown, read_answer, b"\xff\xff garbage"]
    core.dispatch_v3([answer(txns[1], pb.EFENCED)])
    assert done == [0] and len(rec.errors) == 1
    position, entry_id, error = rec.errors[0]
    assert (position, entry_id) == (0, 1) and isinstance(error, BKLedgerFencedException)


def test_v3_read_requests_parse_as_protobuf_and_answers_reach_the_batch():
    import struct

    from bkfast._clientpath import ReadPort
    from bkfast.errors import BKNoSuchEntryException, error_for_v3_status
    from bkfast.proto import BookkeeperProtocol_pb2 as pb

    results: dict[int, tuple] = {}
    core = ChannelCore(lambda: None, lambda: None, lambda f: None, 1 << 20, error_for_v3_status)
    core.connected = True
    from bkfast.digests import DigestType

    scope = (1 << 64) - 2                                  # ledgerScopeId -2 on the wire
    batch = ReadBatchCore(77, 0, 1, 10, [(0, ["b"])], 1, 1, True, lambda b: core, None,
                          (int(DigestType.CRC32C), b"", scope),
                          lambda read, err: results.setdefault(read.entry_id, err), lambda: None, None, True, -2)
    core.read_ports[77] = [ReadPort(batch, "b")]
    batch.channels["b"] = core
    batch.fill()
    frames = core.take()
    requests = []
    for wire in frames:
        assert struct.unpack(">I", wire[:4])[0] == len(wire) - 4
        requests.append(pb.Request.FromString(wire[4:]))
    assert [(r.header.operation, r.readRequest.ledgerId, r.readRequest.entryId, r.readRequest.ledgerScopeId)
            for r in requests] == [(pb.READ_ENTRY, 77, 0, -2), (pb.READ_ENTRY, 77, 1, -2)]

    def answer(request, status, body=None):
        r = pb.Response()
        r.header.version = pb.VERSION_THREE
        r.header.operation = pb.READ_ENTRY
        r.header.txnId = request.header.txnId
        r.status = status
        r.readResponse.status = status
        r.readResponse.ledgerId = 77
        r.readResponse.entryId = request.readRequest.entryId
        if body is not None:
            r.readResponse.body = body
        return r.SerializeToString()

    stored = _stored(77, 0, b"entry zero", scope_id=scope)
    core.dispatch_v3([answer(requests[1], pb.ENOENTRY), answer(requests[0], pb.EOK, stored)])
    assert isinstance(results[1], BKNoSuchEntryException)
    assert batch.results[0].data == b"entry zero" and batch.results[0].scope_id == scope and batch.max_lac == -1
