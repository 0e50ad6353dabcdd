"""The v3 protobuf layer (bkfast/proto) against the golden vectors from BookKeeper 4.16.7.

* every ``encoded`` item with protocol "v3" in tests/vectors/protocol.json is rebuilt from its
  ``fields`` with the generated classes and must serialize (with its 4-byte length prefix) to exactly
  the recorded frame; the recorded frame must parse back to the same fields;
* every frame of ``captured.v3_session`` must parse as Request/Response, agree with the text the
  real protobuf classes printed for it, and re-serialize byte-identically;
* the ``availability_*`` blobs (and the availability bytes inside v3 frames) are decoded with the
  AvailabilityOfEntriesOfLedger layout and re-encoded;
* bkfast's ``ledgerScopeId = 1000`` extension: round trip, wire bytes, absence == upstream bytes;
* LedgerMetadataFormat against tests/vectors/ledger_metadata.json (format 3 binary, format 2 text).
"""

from __future__ import annotations

import base64
import json
import struct

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal import decoder as pb_decoder
from google.protobuf.internal import encoder as pb_encoder

from bkfast.net.v3_handler import encode_availability  # 4.16.7 groups runs, never periodic
from bkfast.proto import BookkeeperProtocol_pb2 as bkp
from bkfast.proto import DataFormats_pb2 as df
from bkfast.proto import DbLedgerStorageDataFormats_pb2 as ldb
from tests import VECTORS_DIR

VECTORS = VECTORS_DIR
PROTOCOL = json.loads((VECTORS / "protocol.json").read_text())
LEDGER_METADATA = json.loads((VECTORS / "ledger_metadata.json").read_text())

V3_ITEMS = [item for item in PROTOCOL["encoded"] if item["protocol"] == "v3"]
V3_SESSION = PROTOCOL["captured"]["v3_session"]
AVAILABILITY_BLOBS = [item for item in PROTOCOL["encoded"] if item["name"].startswith("availability_")]

# operation -> (field of Request/Response holding the body, vector keys that are fields of that body)
REQUEST_BODY = {
    "ADD_ENTRY": ("addRequest", ("ledgerId", "entryId", "masterKey", "body", "flag", "writeFlags")),
    "READ_ENTRY": ("readRequest", ("ledgerId", "entryId", "masterKey", "previousLAC", "timeOut", "flag")),
    "WRITE_LAC": ("writeLacRequest", ("ledgerId", "lac", "masterKey", "body")),
    "READ_LAC": ("readLacRequest", ("ledgerId",)),
    "FORCE_LEDGER": ("forceLedgerRequest", ("ledgerId",)),
    "GET_BOOKIE_INFO": ("getBookieInfoRequest", ("requested",)),
    "GET_LIST_OF_ENTRIES_OF_LEDGER": ("getListOfEntriesOfLedgerRequest", ("ledgerId",)),
    "AUTH": ("authRequest", ("authPluginName", "payload")),
}
RESPONSE_BODY = {
    "ADD_ENTRY": ("addResponse", ("status", "ledgerId", "entryId")),
    "READ_ENTRY": ("readResponse", ("status", "ledgerId", "entryId", "body", "maxLAC", "lacUpdateTimestamp")),
    "WRITE_LAC": ("writeLacResponse", ("status", "ledgerId")),
    "READ_LAC": ("readLacResponse", ("status", "ledgerId", "lacBody", "lastEntryBody")),
    "FORCE_LEDGER": ("forceLedgerResponse", ("status", "ledgerId")),
    "GET_BOOKIE_INFO": ("getBookieInfoResponse", ("status", "totalDiskCapacity", "freeDiskSpace")),
    "GET_LIST_OF_ENTRIES_OF_LEDGER": (
        "getListOfEntriesOfLedgerResponse",
        ("status", "ledgerId", "availabilityOfEntriesOfLedger"),
    ),
    # AuthMessage has no status field; the status only goes into the outer Response.
    "AUTH": ("authResponse", ("authPluginName", "payload")),
}

# The messages that carry bkfast's ledgerScopeId extension.
SCOPED_MESSAGES = [
    "AddRequest",
    "ReadRequest",
    "WriteLacRequest",
    "ReadLacRequest",
    "ForceLedgerRequest",
    "GetListOfEntriesOfLedgerRequest",
    "AddResponse",
    "ReadResponse",
    "WriteLacResponse",
    "ReadLacResponse",
    "ForceLedgerResponse",
    "GetListOfEntriesOfLedgerResponse",
]
UNSCOPED_MESSAGES = [
    "BKPacketHeader",
    "ContextPair",
    "Request",
    "Response",
    "AuthMessage",
    "StartTLSRequest",
    "StartTLSResponse",
    "GetBookieInfoRequest",
    "GetBookieInfoResponse",
]
SCOPE_FIELD = 1000


# --------------------------------------------------------------------------------------------------
# helpers


def frame(message) -> bytes:
    payload = message.SerializeToString()
    return struct.pack(">I", len(payload)) + payload


def unframe(data: bytes) -> bytes:
    (length,) = struct.unpack(">I", data[:4])
    assert length == len(data) - 4, "frame length prefix does not match the frame"
    return data[4:]


def to_proto_value(field: FieldDescriptor, value):
    """A vector value (hex for bytes, names for enums) as the value to assign to ``field``."""
    if field.type == FieldDescriptor.TYPE_BYTES:
        return bytes.fromhex(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_name[value].number
    return value


def fill(message, fields: dict, keys) -> None:
    for key in keys:
        if key in fields:
            field = message.DESCRIPTOR.fields_by_name[key]
            setattr(message, key, to_proto_value(field, fields[key]))


def check_fields(message, fields: dict, keys) -> None:
    """Every vector key present is set to that value; every other field of the body is unset."""
    for key in keys:
        field = message.DESCRIPTOR.fields_by_name[key]
        if key in fields:
            assert message.HasField(key), key
            assert getattr(message, key) == to_proto_value(field, fields[key]), key
    set_names = {f.name for f, _ in message.ListFields()}
    assert set_names == {k for k in keys if k in fields}


def header_for(item) -> bkp.BKPacketHeader:
    fields = item["fields"]
    header = bkp.BKPacketHeader(
        version=bkp.VERSION_THREE,
        operation=bkp.OperationType.Value(item["op"]),
        txnId=fields["txnId"],
    )
    if "priority" in fields:
        header.priority = fields["priority"]
    return header


def build(item):
    fields = item["fields"]
    if item["kind"] == "request":
        msg = bkp.Request(header=header_for(item))
        body_name, keys = REQUEST_BODY[item["op"]]
    else:
        msg = bkp.Response(header=header_for(item), status=bkp.StatusCode.Value(fields["status"]))
        body_name, keys = RESPONSE_BODY[item["op"]]
    body = getattr(msg, body_name)
    body.SetInParent()  # bodies whose fields are all absent still have to be present
    fill(body, fields, keys)
    return msg


def varint(value: int) -> bytes:
    out = []
    pb_encoder._VarintEncoder()(out.append, value)  # noqa: SLF001 - protobuf's own varint writer
    return b"".join(out)


def signed_varint(value: int) -> bytes:
    out = []
    pb_encoder._SignedVarintEncoder()(out.append, value)  # noqa: SLF001
    return b"".join(out)


def decode_availability(blob: bytes) -> list[int]:
    """AvailabilityOfEntriesOfLedger.serializeStateOfEntriesOfLedger() back to the entry ids.

    Layout (big-endian): a 64-byte header (int version = 0, int number of sequence groups, zeros),
    then 24 bytes per group: long firstSequenceStart, long lastSequenceStart, int sequenceSize,
    int sequencePeriod. A group holds the runs of ``sequenceSize`` consecutive entries starting at
    firstSequenceStart, firstSequenceStart + period, ..., lastSequenceStart.
    """
    version, count = struct.unpack_from(">ii", blob, 0)
    assert version == 0
    assert blob[8:64] == bytes(56)
    assert len(blob) == 64 + 24 * count
    entries: list[int] = []
    for i in range(count):
        first, last, size, period = struct.unpack_from(">qqii", blob, 64 + 24 * i)
        starts = [first] if last == first else range(first, last + 1, period)
        for start in starts:
            entries.extend(range(start, start + size))
    return entries


def upstream_message_class(name: str):
    """``name`` from a copy of BookkeeperProtocol.proto without the ledgerScopeId fields.

    This is the schema a Java client or bookie has; it is built in a private descriptor pool.
    """
    fdp = descriptor_pb2.FileDescriptorProto.FromString(bkp.DESCRIPTOR.serialized_pb)
    for message_type in fdp.message_type:
        kept = [f for f in message_type.field if f.number != SCOPE_FIELD]
        del message_type.field[:]
        message_type.field.extend(kept)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def item_by_name(name: str):
    return next(item for item in PROTOCOL["encoded"] if item["name"] == name)


# a vector frame whose body is each scoped message
SCOPED_SAMPLE = {
    "AddRequest": ("v3_add_req_CRC32", "addRequest"),
    "ReadRequest": ("v3_read_req_fence", "readRequest"),
    "WriteLacRequest": ("v3_writelac_req", "writeLacRequest"),
    "ReadLacRequest": ("v3_readlac_req", "readLacRequest"),
    "ForceLedgerRequest": ("v3_forceledger_req", "forceLedgerRequest"),
    "GetListOfEntriesOfLedgerRequest": ("v3_getlistofentries_req", "getListOfEntriesOfLedgerRequest"),
    "AddResponse": ("v3_add_resp_EOK", "addResponse"),
    "ReadResponse": ("v3_read_resp_eok", "readResponse"),
    "WriteLacResponse": ("v3_writelac_resp", "writeLacResponse"),
    "ReadLacResponse": ("v3_readlac_resp", "readLacResponse"),
    "ForceLedgerResponse": ("v3_forceledger_resp", "forceLedgerResponse"),
    "GetListOfEntriesOfLedgerResponse": ("v3_getlistofentries_resp", "getListOfEntriesOfLedgerResponse"),
}


def parse_vector(item):
    cls = bkp.Request if item["kind"] == "request" else bkp.Response
    return cls.FromString(unframe(bytes.fromhex(item["hex"])))


# --------------------------------------------------------------------------------------------------
# schema facts


def test_vector_inventory():
    ops = {item["op"] for item in V3_ITEMS}
    assert ops == set(REQUEST_BODY) == set(RESPONSE_BODY)
    assert all("hex" in item for item in V3_ITEMS)
    assert len(V3_SESSION) % 2 == 0


def test_enum_numbers():
    assert [bkp.ProtocolVersion.Value(n) for n in ("VERSION_ONE", "VERSION_TWO", "VERSION_THREE")] == [1, 2, 3]
    assert dict(bkp.StatusCode.items()) == {
        "EOK": 0,
        "ENOLEDGER": 402,
        "ENOENTRY": 403,
        "EBADREQ": 404,
        "EIO": 501,
        "EUA": 502,
        "EBADVERSION": 503,
        "EFENCED": 504,
        "EREADONLY": 505,
        "ETOOMANYREQUESTS": 506,
        "EUNKNOWNLEDGERSTATE": 507,
    }
    assert dict(bkp.OperationType.items()) == {
        "READ_ENTRY": 1,
        "ADD_ENTRY": 2,
        "RANGE_READ_ENTRY": 3,
        "RANGE_ADD_ENTRY": 4,
        "AUTH": 5,
        "WRITE_LAC": 6,
        "READ_LAC": 7,
        "GET_BOOKIE_INFO": 8,
        "START_TLS": 9,
        "FORCE_LEDGER": 10,
        "GET_LIST_OF_ENTRIES_OF_LEDGER": 11,
        "BATCH_READ_ENTRY": 12,
    }
    assert dict(bkp.ReadRequest.Flag.items()) == {"FENCE_LEDGER": 1, "ENTRY_PIGGYBACK": 2}
    assert dict(bkp.AddRequest.Flag.items()) == {"RECOVERY_ADD": 1}
    assert dict(bkp.GetBookieInfoRequest.Flags.items()) == {"TOTAL_DISK_CAPACITY": 1, "FREE_DISK_SPACE": 2}
    assert bkp.BKPacketHeader().priority == 0


def test_full_names_match_upstream():
    # upstream declares no package: the wire/full names are the bare message names
    assert bkp.DESCRIPTOR.package == ""
    assert bkp.Request.DESCRIPTOR.full_name == "Request"
    assert df.LedgerMetadataFormat.Segment.DESCRIPTOR.full_name == "LedgerMetadataFormat.Segment"
    assert ldb.LedgerData.DESCRIPTOR.full_name == "LedgerData"
    assert bkp.DESCRIPTOR.GetOptions().java_package == "org.apache.bookkeeper.proto"
    assert df.DESCRIPTOR.GetOptions().java_package == "org.apache.bookkeeper.proto"
    assert ldb.DESCRIPTOR.GetOptions().java_package == "org.apache.bookkeeper.bookie.storage.ldb"


def test_scope_field_declared_exactly_where_specified():
    # read the schema as declared (FieldDescriptorProto), independent of the runtime's descriptor API
    fdp = descriptor_pb2.FileDescriptorProto.FromString(bkp.DESCRIPTOR.serialized_pb)
    declared = {m.name: {f.number: f for f in m.field} for m in fdp.message_type}
    for name in SCOPED_MESSAGES:
        field = declared[name][SCOPE_FIELD]
        assert field.name == "ledgerScopeId"
        assert field.type == descriptor_pb2.FieldDescriptorProto.TYPE_INT64
        assert field.label == descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        assert not field.HasField("default_value")
    for name in UNSCOPED_MESSAGES:
        assert SCOPE_FIELD not in bkp.DESCRIPTOR.message_types_by_name[name].fields_by_number
    assert set(SCOPED_MESSAGES) | set(UNSCOPED_MESSAGES) == set(bkp.DESCRIPTOR.message_types_by_name)


# --------------------------------------------------------------------------------------------------
# encoded vectors


@pytest.mark.parametrize("item", V3_ITEMS, ids=[item["name"] for item in V3_ITEMS])
def test_encoded_vector_serializes_byte_identical(item):
    msg = build(item)
    assert msg.IsInitialized(), msg.FindInitializationErrors()
    assert frame(msg).hex() == item["hex"]


@pytest.mark.parametrize("item", V3_ITEMS, ids=[item["name"] for item in V3_ITEMS])
def test_encoded_vector_parses_back(item):
    fields = item["fields"]
    msg = parse_vector(item)
    assert msg.IsInitialized()
    assert msg.header.version == bkp.VERSION_THREE
    assert msg.header.operation == bkp.OperationType.Value(item["op"])
    assert msg.header.txnId == fields["txnId"]
    assert msg.header.HasField("priority") == ("priority" in fields)
    assert msg.header.priority == fields.get("priority", 0)
    if item["kind"] == "request":
        body_name, keys = REQUEST_BODY[item["op"]]
    else:
        body_name, keys = RESPONSE_BODY[item["op"]]
        assert msg.status == bkp.StatusCode.Value(fields["status"])
        if "statusNumber" in fields:
            assert msg.status == fields["statusNumber"]
    # exactly the header (+ status) and one body are present
    present = {f.name for f, _ in msg.ListFields()}
    assert present == {"header", body_name} | ({"status"} if item["kind"] == "response" else set())
    body = getattr(msg, body_name)
    check_fields(body, fields, keys)
    if "ledgerScopeId" in body.DESCRIPTOR.fields_by_name:
        assert not body.HasField("ledgerScopeId")
    assert msg.SerializeToString() == unframe(bytes.fromhex(item["hex"]))


def test_request_and_response_are_told_apart_by_first_byte():
    # spec 2.1: a v3 frame starts with 0x0A (header, field 1, length-delimited)
    for item in V3_ITEMS:
        assert unframe(bytes.fromhex(item["hex"]))[0] == 0x0A


# --------------------------------------------------------------------------------------------------
# captured session


@pytest.mark.parametrize(
    "frame_item",
    V3_SESSION,
    ids=[f"{i:02d}-{f['direction'].replace('->', '_to_')}-{f['step'][:40]}" for i, f in enumerate(V3_SESSION)],
)
def test_captured_v3_frame_round_trips(frame_item):
    assert frame_item["protocol"] == "v3"
    cls = {"client->bookie": bkp.Request, "bookie->client": bkp.Response}[frame_item["direction"]]
    raw = unframe(bytes.fromhex(frame_item["hex"]))
    msg = cls.FromString(raw)
    assert msg.IsInitialized()
    assert msg.header.version == bkp.VERSION_THREE
    assert msg.SerializeToString() == raw
    # no field unknown to our schema arrived from the Java side
    known_only = cls()
    known_only.CopyFrom(msg)
    known_only.DiscardUnknownFields()
    assert known_only.SerializeToString() == raw
    # the Java protobuf classes printed the same message (field names are upstream's)
    assert text_format.Parse(frame_item["decoded_protobuf_text"], cls()) == msg


def test_captured_responses_answer_their_requests():
    for request_item, response_item in zip(V3_SESSION[0::2], V3_SESSION[1::2], strict=True):
        assert (request_item["direction"], response_item["direction"]) == ("client->bookie", "bookie->client")
        request = bkp.Request.FromString(unframe(bytes.fromhex(request_item["hex"])))
        response = bkp.Response.FromString(unframe(bytes.fromhex(response_item["hex"])))
        assert response.header.operation == request.header.operation
        assert response.header.txnId == request.header.txnId
        assert not response.header.HasField("priority")


# --------------------------------------------------------------------------------------------------
# AvailabilityOfEntriesOfLedger


@pytest.mark.parametrize("item", AVAILABILITY_BLOBS, ids=[item["name"] for item in AVAILABILITY_BLOBS])
def test_availability_blob(item):
    blob = bytes.fromhex(item["hex"])
    assert decode_availability(blob) == item["fields"]["entries"]
    assert encode_availability(item["fields"]["entries"]) == blob


def test_availability_in_get_list_of_entries_response():
    item = item_by_name("v3_getlistofentries_resp")
    body = parse_vector(item).getListOfEntriesOfLedgerResponse
    assert decode_availability(body.availabilityOfEntriesOfLedger) == item["fields"]["entries"]
    assert encode_availability(item["fields"]["entries"]) == body.availabilityOfEntriesOfLedger


def test_availability_in_captured_session():
    # entries the bookie acknowledged for each ledger before the GetListOfEntriesOfLedger request
    acked: dict[int, list[int]] = {}
    checked = 0
    for request_item, response_item in zip(V3_SESSION[0::2], V3_SESSION[1::2], strict=True):
        request = bkp.Request.FromString(unframe(bytes.fromhex(request_item["hex"])))
        response = bkp.Response.FromString(unframe(bytes.fromhex(response_item["hex"])))
        if response.HasField("addResponse") and response.addResponse.status == bkp.EOK:
            acked.setdefault(response.addResponse.ledgerId, []).append(response.addResponse.entryId)
        if request.HasField("getListOfEntriesOfLedgerRequest"):
            body = response.getListOfEntriesOfLedgerResponse
            expected = sorted(acked[request.getListOfEntriesOfLedgerRequest.ledgerId])
            assert decode_availability(body.availabilityOfEntriesOfLedger) == expected
            assert encode_availability(expected) == body.availabilityOfEntriesOfLedger
            checked += 1
    assert checked == 1


# --------------------------------------------------------------------------------------------------
# bkfast's ledgerScopeId extension (field 1000)

SCOPE_VALUES = [1, 0x0123456789ABCDEF, 2**63 - 1, -1, -(2**63)]  # int64 two's complement of unsigned ids


def scoped_sample(name: str):
    vector_name, body_name = SCOPED_SAMPLE[name]
    item = item_by_name(vector_name)
    return item, getattr(parse_vector(item), body_name)


@pytest.mark.parametrize("name", SCOPED_MESSAGES)
@pytest.mark.parametrize("scope", SCOPE_VALUES, ids=hex)
def test_scope_field_round_trip_and_wire_bytes(name, scope):
    _, body = scoped_sample(name)
    upstream_bytes = body.SerializeToString()
    scoped = type(body)()
    scoped.CopyFrom(body)
    scoped.ledgerScopeId = scope
    data = scoped.SerializeToString()
    # field 1000, wire type 0: tag varint 8000 = c0 3e, appended after the upstream fields
    assert data == upstream_bytes + b"\xc0\x3e" + signed_varint(scope)
    again = type(body).FromString(data)
    assert again.HasField("ledgerScopeId")
    assert again.ledgerScopeId == scope
    assert again == scoped
    assert again.SerializeToString() == data


@pytest.mark.parametrize("name", SCOPED_MESSAGES)
def test_scope_absent_keeps_upstream_bytes(name):
    item, body = scoped_sample(name)
    assert not body.HasField("ledgerScopeId")
    assert body.ledgerScopeId == 0  # absent means scope 0
    # set and cleared again: the frame is the upstream frame
    msg = parse_vector(item)
    inner = getattr(msg, SCOPED_SAMPLE[name][1])
    inner.ledgerScopeId = 42
    assert frame(msg).hex() != item["hex"]
    inner.ClearField("ledgerScopeId")
    assert frame(msg).hex() == item["hex"]


def test_scope_explicit_zero_is_written():
    # proto2 presence: an explicit 0 is put on the wire, so writers must leave the field unset for
    # scope 0 to stay byte-identical with Java.
    msg = bkp.ReadLacRequest(ledgerId=1, ledgerScopeId=0)
    assert msg.HasField("ledgerScopeId")
    assert msg.SerializeToString() == b"\x08\x01\xc0\x3e\x00"
    assert bkp.ReadLacRequest(ledgerId=1).SerializeToString() == b"\x08\x01"


@pytest.mark.parametrize("item", V3_ITEMS, ids=[item["name"] for item in V3_ITEMS])
def test_upstream_frames_report_no_scope(item):
    msg = parse_vector(item)
    for field, value in msg.ListFields():
        if field.message_type is not None and SCOPE_FIELD in field.message_type.fields_by_number:
            assert not value.HasField("ledgerScopeId")
            assert value.ledgerScopeId == 0


@pytest.mark.parametrize("name", SCOPED_MESSAGES)
def test_upstream_schema_ignores_and_keeps_scope(name):
    """A peer with upstream's schema parses a scoped message; field 1000 is just an unknown field."""
    item, body = scoped_sample(name)
    outer_cls_name = "Request" if item["kind"] == "request" else "Response"
    upstream_outer = upstream_message_class(outer_cls_name)
    msg = parse_vector(item)
    getattr(msg, SCOPED_SAMPLE[name][1]).ledgerScopeId = 7
    data = msg.SerializeToString()

    seen_upstream = upstream_outer.FromString(data)
    assert seen_upstream.IsInitialized()
    seen_body = getattr(seen_upstream, SCOPED_SAMPLE[name][1])
    assert "ledgerScopeId" not in seen_body.DESCRIPTOR.fields_by_name
    # the known fields are what the vector holds
    assert seen_body.SerializeToString().startswith(body.SerializeToString())
    # unknown fields are kept, so a re-serialization by the upstream schema loses nothing
    assert seen_upstream.SerializeToString() == data
    # and a message written with upstream's schema is read by ours as scope 0
    plain = upstream_outer.FromString(unframe(bytes.fromhex(item["hex"])))
    ours = type(msg).FromString(plain.SerializeToString())
    assert not getattr(ours, SCOPED_SAMPLE[name][1]).HasField("ledgerScopeId")


# --------------------------------------------------------------------------------------------------
# DataFormats / DbLedgerStorageDataFormats

METADATA_HEADER_V3 = b"BookieMetadataFormatVersion\t3\n"
METADATA_HEADER_V2 = b"BookieMetadataFormatVersion\t2\n"
DIGEST_NAME = {"CRC32": "CRC32", "CRC32C": "CRC32C", "MAC": "HMAC", "DUMMY": "DUMMY"}

METADATA_ITEMS = [
    item
    for item in LEDGER_METADATA["upstream_test_vectors"] + LEDGER_METADATA["generated"]
    if item["decoded"]["metadataFormatVersion"] in (2, 3)
]


def parse_metadata_v3(blob: bytes) -> tuple[df.LedgerMetadataFormat, int]:
    assert blob.startswith(METADATA_HEADER_V3)
    length, pos = pb_decoder._DecodeVarint32(blob, len(METADATA_HEADER_V3))  # noqa: SLF001
    assert pos + length == len(blob)
    return df.LedgerMetadataFormat.FromString(blob[pos:]), length


def check_decoded_metadata(msg: df.LedgerMetadataFormat, decoded: dict) -> None:
    assert msg.IsInitialized()
    assert msg.ensembleSize == decoded["ensembleSize"]
    assert msg.quorumSize == decoded["writeQuorumSize"]
    assert (msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize) == decoded["ackQuorumSize"]
    assert msg.lastEntryId == decoded["lastEntryId"]
    assert msg.length == decoded["length"]
    assert df.LedgerMetadataFormat.State.Name(msg.state) == decoded["state"]
    assert (msg.state == df.LedgerMetadataFormat.CLOSED) == decoded["closed"]
    if decoded["digestType"] is not None:
        assert df.LedgerMetadataFormat.DigestType.Name(msg.digestType) == DIGEST_NAME[decoded["digestType"]]
    assert msg.HasField("password") == decoded["hasPassword"]
    if decoded["hasPassword"]:
        assert msg.password.hex() == decoded["password_hex"]
    assert (msg.ctime if msg.HasField("ctime") else -1) == decoded["ctime"]
    assert msg.cToken == decoded["cToken"]
    assert {str(s.firstEntryId): list(s.ensembleMember) for s in msg.segment} == decoded["ensembles"]
    assert {e.key: e.value.hex() for e in msg.customMetadata} == decoded["customMetadata_hex"]


def test_ledger_metadata_upstream_v3_vector():
    (item,) = [i for i in LEDGER_METADATA["upstream_test_vectors"] if i["decoded"]["metadataFormatVersion"] == 3]
    blob = base64.b64decode(item["base64"])
    msg, length = parse_metadata_v3(blob)
    assert length == 0x60
    check_decoded_metadata(msg, item["decoded"])
    # fields stored explicitly in this vector (spec 5.4)
    assert msg.HasField("ctime") and msg.ctime == -1
    assert msg.HasField("cToken") and msg.cToken == 0
    assert msg.ackQuorumSize == 1
    body = msg.SerializeToString()
    assert METADATA_HEADER_V3 + varint(len(body)) + body == blob


@pytest.mark.parametrize("item", METADATA_ITEMS, ids=[item["name"] for item in METADATA_ITEMS])
def test_ledger_metadata_vectors_round_trip(item):
    blob = base64.b64decode(item["base64"])
    if item["decoded"]["metadataFormatVersion"] == 3:
        msg, _ = parse_metadata_v3(blob)
        body = msg.SerializeToString()
        assert METADATA_HEADER_V3 + varint(len(body)) + body == blob
    else:
        assert blob.startswith(METADATA_HEADER_V2)
        text = blob[len(METADATA_HEADER_V2) :].decode()
        msg = text_format.Parse(text, df.LedgerMetadataFormat())
        assert text_format.MessageToString(msg) == text
    check_decoded_metadata(msg, item["decoded"])


def test_data_formats_field_numbers():
    def numbers(cls):
        return {f.name: f.number for f in cls.DESCRIPTOR.fields}

    assert numbers(df.LedgerMetadataFormat) == {
        "quorumSize": 1,
        "ensembleSize": 2,
        "length": 3,
        "lastEntryId": 4,
        "state": 5,
        "segment": 6,
        "digestType": 7,
        "password": 8,
        "ackQuorumSize": 9,
        "ctime": 10,
        "customMetadata": 11,
        "cToken": 12,
    }
    assert dict(df.LedgerMetadataFormat.DigestType.items()) == {"CRC32": 1, "HMAC": 2, "CRC32C": 3, "DUMMY": 4}
    assert dict(df.LedgerMetadataFormat.State.items()) == {"OPEN": 1, "IN_RECOVERY": 2, "CLOSED": 3}
    assert numbers(df.CookieFormat) == {
        "bookieHost": 1,
        "journalDir": 2,
        "ledgerDirs": 3,
        "instanceId": 4,
        "indexDirs": 5,
    }
    assert numbers(df.UnderreplicatedLedgerFormat) == {"replica": 1, "ctime": 2}
    assert numbers(df.LedgerRereplicationLayoutFormat) == {"type": 1, "version": 2}
    assert numbers(df.BookieServiceInfoFormat) == {"endpoints": 6, "properties": 7}
    assert numbers(df.BookieServiceInfoFormat.Endpoint) == {
        "id": 1,
        "port": 2,
        "host": 3,
        "protocol": 4,
        "auth": 5,
        "extensions": 6,
    }
    assert numbers(ldb.LedgerData) == {"exists": 1, "fenced": 2, "masterKey": 3, "explicitLac": 4, "limbo": 5}


def test_bookie_service_info_round_trip():
    info = df.BookieServiceInfoFormat()
    info.endpoints.add(id="bookie", port=3181, host="127.0.0.1", protocol="bookie-rpc")
    info.properties["bkfast.scopeIds"] = "1"
    again = df.BookieServiceInfoFormat.FromString(info.SerializeToString())
    assert again == info
    assert dict(again.properties) == {"bkfast.scopeIds": "1"}
