"""A `bkfast bookie` process answers the Java-made protocol vectors as a Java 4.16.7 bookie does.

* captured sessions (tests/vectors/protocol.json `captured`): every client->bookie frame is replayed in
  order on one connection and the bookie's answer is compared with the recorded bookie->client frame,
  byte for byte (v3: after zeroing the disk sizes of GET_BOOKIE_INFO, which depend on the machine).
* encoded request vectors: each is sent to a bookie; the answer is checked against the matching
  response vector where one exists (same txnId), otherwise against the response Java would send.
"""

from __future__ import annotations

import json
import struct

import pytest

from bkfast.codec import encode_add_response, encode_read_response
from bkfast.net.v3_handler import encode_availability
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests import VECTORS_DIR
from tests.server_support import BookieProcess

VECTORS = json.loads((VECTORS_DIR / "protocol.json").read_text())
ENCODED = {item["name"]: item for item in VECTORS["encoded"]}


def _frame(item) -> bytes:
    return bytes.fromhex(item["hex"])


@pytest.fixture
def bookie(tmp_path):
    b = BookieProcess(tmp_path).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def _normalise_v3(frame: bytes) -> bytes:
    response = pb.Response.FromString(frame[4:])
    if response.HasField("getBookieInfoResponse"):
        response.getBookieInfoResponse.totalDiskCapacity = 0
        response.getBookieInfoResponse.freeDiskSpace = 0
    if response.HasField("readResponse") and response.readResponse.HasField("lacUpdateTimestamp"):
        response.readResponse.lacUpdateTimestamp = 0
    return response.SerializeToString()


@pytest.mark.parametrize("session", ["v2_session", "v3_session"])
def test_captured_session_replay(bookie, session):
    items = VECTORS["captured"][session]
    assert len(items) % 2 == 0
    with bookie.connect() as client:
        for request, expected in zip(items[0::2], items[1::2], strict=True):
            assert request["direction"] == "client->bookie"
            assert expected["direction"] == "bookie->client"
            client.send_raw(_frame(request))
            got = client.recv_frame()
            want = _frame(expected)
            if session == "v2_session":
                assert got.hex() == want.hex(), request["step"]
            elif got != want:
                assert _normalise_v3(got) == _normalise_v3(want), request["step"]
                assert pb.Response.FromString(want[4:]).HasField("getBookieInfoResponse"), request["step"]
    assert bookie.alive()


def _v2_entry(item) -> bytes:
    return _frame(item)[4 + 4 + 20:]


def test_encoded_v2_requests(bookie):
    adds = [n for n in ENCODED if n.startswith("v2_add_req_") and "hex" in ENCODED[n]]
    assert len(adds) == 9
    with bookie.connect() as client:
        for name in adds:
            f = ENCODED[name]["fields"]
            client.send_raw(_frame(ENCODED[name]))
            assert client.recv_frame() == encode_add_response(0, f["ledgerId"], f["entryId"]), name
        stored_7 = _v2_entry(ENCODED["v2_add_req_CRC32"])
        for name in ("v2_read_req", "v2_read_req_highprio"):
            client.send_raw(_frame(ENCODED[name]))
            assert client.recv_frame() == encode_read_response(0, 4660, 7, stored_7), name
        # fencing read of entry -1: the highest stored entry of 4660 (14), id echoed as -1
        client.send_raw(_frame(ENCODED["v2_read_req_fence_lac"]))
        last = _v2_entry(ENCODED["v2_add_req_DUMMY_recovery"])
        assert client.recv_frame() == encode_read_response(0, 4660, -1, last)
        # after the fence a normal add is refused, a recovery add accepted (Java's EFENCED vector)
        client.send_raw(_frame(ENCODED["v2_add_req_CRC32"]))
        assert client.recv_frame() == _frame(ENCODED["v2_add_resp_rc104"])
        client.send_raw(_frame(ENCODED["v2_add_req_CRC32_recovery"]))
        assert client.recv_frame() == encode_add_response(0, 4660, 8)
        # AUTH with authentication disabled: AuthDisabledPlugin, empty payload
        client.send_raw(_frame(ENCODED["v2_auth_req"]))
        body = client.recv_body()
        assert body[:4] == bytes([2, 3, 0, 0])
        message = pb.AuthMessage.FromString(body[4:])
        assert message.authPluginName == "AuthDisabledPlugin" and message.payload == b""
        # the connection is still usable after AUTH
        client.send_raw(_frame(ENCODED["v2_read_req"]))
        assert client.recv_frame() == encode_read_response(0, 4660, 7, stored_7)


def _send_v3(client, name) -> pb.Response:
    client.send_raw(_frame(ENCODED[name]))
    response = pb.Response.FromString(client.recv_body())
    request = pb.Request.FromString(_frame(ENCODED[name])[4:])
    assert response.header.version == pb.VERSION_THREE
    assert response.header.operation == request.header.operation
    assert response.header.txnId == request.header.txnId
    assert not response.header.HasField("priority")
    return response


def test_encoded_v3_requests(bookie):
    ledger = 78187493530
    with bookie.connect() as client:
        bodies_3 = set()
        for name in ("v3_add_req_CRC32", "v3_add_req_CRC32C", "v3_add_req_MAC", "v3_add_req_DUMMY"):
            r = _send_v3(client, name)
            assert (r.status, r.addResponse.status) == (pb.EOK, pb.EOK), name
            assert (r.addResponse.ledgerId, r.addResponse.entryId) == (ledger, 3)
            assert not r.addResponse.HasField("ledgerScopeId")
            bodies_3.add(pb.Request.FromString(_frame(ENCODED[name])[4:]).addRequest.body)
        # txnId 1 and EOK: byte-identical to Java's response vector
        client.send_raw(_frame(ENCODED["v3_add_req_CRC32"]))
        assert client.recv_frame() == _frame(ENCODED["v3_add_resp_EOK"])
        r = _send_v3(client, "v3_add_req_recovery_deferredsync_prio")
        assert r.status == pb.EOK and r.addResponse.entryId == 4
        body_4 = pb.Request.FromString(_frame(ENCODED["v3_add_req_recovery_deferredsync_prio"])[4:]).addRequest.body

        r = _send_v3(client, "v3_read_req")
        assert r.status == pb.EOK and r.readResponse.body in bodies_3
        r = _send_v3(client, "v3_read_req_prio")
        assert r.status == pb.ENOENTRY and r.readResponse.status == pb.ENOENTRY

        # WRITE_LAC (lac 41) and FORCE_LEDGER: byte-identical to Java's responses
        client.send_raw(_frame(ENCODED["v3_writelac_req"]))
        assert client.recv_frame() == _frame(ENCODED["v3_writelac_resp"])
        client.send_raw(_frame(ENCODED["v3_forceledger_req"]))
        assert client.recv_frame() == _frame(ENCODED["v3_forceledger_resp"])
        r = _send_v3(client, "v3_readlac_req")
        lac_body = pb.Request.FromString(_frame(ENCODED["v3_writelac_req"])[4:]).writeLacRequest.body
        assert r.status == pb.EOK
        assert r.readLacResponse.lacBody == lac_body and r.readLacResponse.lastEntryBody == body_4

        # long poll with previousLAC 4 < LAC 41: answered at once; entry 5 is not stored
        r = _send_v3(client, "v3_read_req_longpoll")
        assert r.status == pb.ENOENTRY and r.readResponse.entryId == 5
        # ENTRY_PIGGYBACK for an entry other than -1 is a client bug: EBADREQ (as the captured session)
        r = _send_v3(client, "v3_read_req_longpoll_piggyback")
        assert r.status == pb.EBADREQ

        r = _send_v3(client, "v3_getbookieinfo_req")
        assert r.status == pb.EOK
        info = r.getBookieInfoResponse
        assert info.totalDiskCapacity > 0 and 0 < info.freeDiskSpace <= info.totalDiskCapacity

        r = _send_v3(client, "v3_getlistofentries_req")
        assert r.status == pb.EOK
        assert r.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger == encode_availability([3, 4])

        r = _send_v3(client, "v3_auth_req")
        assert r.status == pb.EOK
        assert r.authResponse.authPluginName == "AuthDisabledPlugin" and r.authResponse.payload == b""

        r = _send_v3(client, "v3_read_req_fence")
        assert r.status == pb.EOK and r.readResponse.entryId == -1 and r.readResponse.body == body_4
        client.send_raw(_frame(ENCODED["v3_add_req_CRC32"]))
        assert client.recv_frame() == _frame(ENCODED["v3_add_resp_EFENCED"])


def test_availability_vectors_match_encoder():
    for name in ("availability_single_entry", "availability_empty"):
        assert encode_availability(ENCODED[name]["fields"]["entries"]) == bytes.fromhex(ENCODED[name]["hex"])
    response = pb.Response.FromString(_frame(ENCODED["v3_getlistofentries_resp"])[4:])
    assert encode_availability(ENCODED["v3_getlistofentries_resp"]["fields"]["entries"]) == \
        response.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger


def test_v2_bad_version_and_unknown_opcode(bookie):
    with bookie.connect() as client:
        # version 3 ADD: EBADVERSION, echoing version and ids
        frame = bytearray(_frame(ENCODED["v2_add_req_CRC32"]))
        frame[4] = 3
        client.send_raw(bytes(frame))
        assert client.recv_frame() == encode_add_response(103, 4660, 7, 3)
        # unknown opcode closes the connection (as Java's decoder does)
        client.send_body(struct.pack(">I", (2 << 24) | (9 << 16)) + bytes(16))
        assert client.closed_by_peer()
    with bookie.connect() as client:
        # v3 header with a wrong version: EBADVERSION
        request = pb.Request.FromString(_frame(ENCODED["v3_forceledger_req"])[4:])
        request.header.version = pb.VERSION_TWO
        client.send_body(request.SerializeToString())
        r = pb.Response.FromString(client.recv_body())
        assert r.status == pb.EBADVERSION and r.forceLedgerResponse.status == pb.EBADVERSION
        # an operation the bookie does not serve (START_TLS without TLS): EBADREQ
        request = pb.Request()
        request.header.version = pb.VERSION_THREE
        request.header.operation = pb.START_TLS
        request.header.txnId = 99
        client.send_body(request.SerializeToString())
        r = pb.Response.FromString(client.recv_body())
        assert r.status == pb.EBADREQ and r.header.txnId == 99
