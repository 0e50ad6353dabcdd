"""Ledger metadata serde (LedgerMetadataSerDe): every Java vector byte for byte, formats 1-3, round trips,
and clear errors on garbage."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkfast.digests import DigestType
from bkfast.errors import BKMetaStoreException
from bkfast.meta.ledger_metadata import (
    LedgerMetadata,
    LedgerMetadataFormatError,
    LedgerState,
    parse_metadata,
    serialize_metadata,
)
from bkfast.proto import LedgerMetadataFormat
from tests import VECTORS_DIR

VECTORS = json.loads((VECTORS_DIR / "ledger_metadata.json").read_text())
ALL = VECTORS["generated"] + VECTORS["upstream_test_vectors"]
V3 = [v for v in ALL if v["decoded"]["metadataFormatVersion"] == 3]
HEADER3 = b"BookieMetadataFormatVersion\t3\n"

# Custom metadata is written in the map's iteration order (Java: the builder's map). The generator of the
# `custom_metadata` vector inserted these keys in this order; the JSON "decoded" view sorts them.
CUSTOM_ORDER = {"custom_metadata": ["application", "component", "bin"]}


def _raw(vector) -> bytes:
    return base64.b64decode(vector["base64"])


def _from_decoded(vector) -> LedgerMetadata:
    """Build the LedgerMetadata the Java generator built, from the decoded fields only."""
    d = vector["decoded"]
    custom = d["customMetadata_hex"]
    order = CUSTOM_ORDER.get(vector["name"], sorted(custom))
    return LedgerMetadata(
        ensemble_size=d["ensembleSize"], write_quorum_size=d["writeQuorumSize"], ack_quorum_size=d["ackQuorumSize"],
        ensembles=tuple((int(first), tuple(members)) for first, members in
                        sorted(d["ensembles"].items(), key=lambda kv: int(kv[0]))),
        digest_type=DigestType[d["digestType"]] if d["digestType"] else DigestType.CRC32C,
        password=bytes.fromhex(d["password_hex"] or ""),
        state=LedgerState[d["state"]], last_entry_id=d["lastEntryId"], length=d["length"],
        ctime=None if d["ctime"] == -1 else d["ctime"],
        custom_metadata={k: bytes.fromhex(custom[k]) for k in order},
        c_token=d["cToken"], metadata_format_version=d["metadataFormatVersion"])


@pytest.mark.parametrize("vector", ALL, ids=lambda v: v["name"])
def test_every_vector_parses_to_the_java_fields(vector):
    d = vector["decoded"]
    md = parse_metadata(_raw(vector))
    assert md.metadata_format_version == d["metadataFormatVersion"]
    assert (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size) == (
        d["ensembleSize"], d["writeQuorumSize"], d["ackQuorumSize"])
    assert (md.last_entry_id, md.length, md.state.name, md.is_closed) == (
        d["lastEntryId"], d["length"], d["state"], d["closed"])
    assert {str(first): list(members) for first, members in md.ensembles} == d["ensembles"]
    assert (md.ctime if md.ctime is not None else -1) == d["ctime"]
    assert md.c_token == d["cToken"]
    assert {k: v.hex() for k, v in md.custom_metadata.items()} == d["customMetadata_hex"]
    assert md.stores_password == d["hasPassword"]
    if d["hasPassword"]:
        assert md.password.hex() == d["password_hex"]
        assert md.digest_type == DigestType[d["digestType"]]
    else:                                          # format 1 stores neither password nor digest type
        assert md.metadata_format_version == 1 and md.password == b""


@pytest.mark.parametrize("vector", ALL, ids=lambda v: v["name"])
def test_every_vector_reserializes_byte_for_byte_in_its_own_format(vector):
    md = parse_metadata(_raw(vector))
    assert serialize_metadata(md, md.metadata_format_version) == _raw(vector)


@pytest.mark.parametrize("vector", V3, ids=lambda v: v["name"])
def test_v3_vectors_are_reproduced_from_their_fields(vector):
    md = _from_decoded(vector)
    if vector["name"] == "test_version3":
        md = md.replace(ctime=-1)                  # upstream's vector stores ctime = -1 explicitly
    assert serialize_metadata(md) == _raw(vector)


def test_spec_decoding_of_the_upstream_v3_vector():
    raw = _raw(next(v for v in ALL if v["name"] == "test_version3"))
    assert raw.startswith(HEADER3) and raw[len(HEADER3)] == 0x60 == len(raw) - len(HEADER3) - 1
    body = raw[len(HEADER3) + 1:]
    assert body.startswith(bytes.fromhex("0802" "1003" "1800" "20ffffffffffffffffff01" "2801"))
    tail = bytes.fromhex("3803" "4206") + b"foobar" + bytes.fromhex("4801" "50ffffffffffffffffff01" "6000")
    assert body.endswith(tail)


def test_v3_field_rules_last_entry_password_ack_ctime_ctoken_always_or_only_when_set():
    md = LedgerMetadata(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, ensembles=((0, ("b:1",)),))
    fmt = LedgerMetadataFormat.FromString(serialize_metadata(md)[len(HEADER3) + 1:])
    assert fmt.HasField("lastEntryId") and fmt.lastEntryId == -1
    assert fmt.HasField("password") and fmt.password == b""
    assert fmt.HasField("ackQuorumSize") and fmt.HasField("cToken")
    assert not fmt.HasField("ctime")
    assert fmt.digestType == LedgerMetadataFormat.CRC32C
    mac = LedgerMetadataFormat.FromString(
        serialize_metadata(md.replace(digest_type=DigestType.MAC, ctime=5))[len(HEADER3) + 1:])
    assert mac.digestType == LedgerMetadataFormat.HMAC == 2 and mac.ctime == 5


def test_v2_omits_ctoken_and_v1_keeps_only_its_fields():
    md = LedgerMetadata(ensemble_size=2, write_quorum_size=2, ack_quorum_size=1, ensembles=((0, ("a:1", "b:2")),),
                        password=b"pw", c_token=99, custom_metadata={"k": b"v"}, ctime=7)
    v2 = serialize_metadata(md, 2)
    assert b"cToken" not in v2 and parse_metadata(v2) == md.replace(c_token=0, metadata_format_version=2)
    v1 = serialize_metadata(md.closed(5, 50), 1)
    assert v1 == b"BookieMetadataFormatVersion\t1\n2\n2\n50\n0\ta:1\tb:2\n5\tCLOSED"
    back = parse_metadata(v1)
    assert (back.ack_quorum_size, back.last_entry_id, back.length, back.password) == (2, 5, 50, b"")


def test_v2_accepts_missing_ack_quorum_as_write_quorum():
    text = (b"BookieMetadataFormatVersion\t2\nquorumSize: 2\nensembleSize: 2\nlength: 0\nstate: OPEN\n"
            b'segment {\n  ensembleMember: "a:1"\n  ensembleMember: "b:1"\n  firstEntryId: 0\n}\n')
    md = parse_metadata(text)
    assert md.ack_quorum_size == 2 and md.last_entry_id == -1 and md.password == b""


GARBAGE = [
    (b"", "header corrupt at index 0"),
    (b"BookieMetadataFormatVersion 3\n", "header corrupt at index 27"),
    (b"BookieMetadataFormatVersion\t12345678901\n", "end of version number"),
    (b"BookieMetadataFormatVersion\tx\n", "parse metadata format version"),
    (b"BookieMetadataFormatVersion\t4\n", "version 4 not supported"),
    (HEADER3, "end of data in the length varint"),
    (HEADER3 + b"\xff\xff\xff\xff\xff\x01", "length varint32"),
    (HEADER3 + b"\x05\x08\x01", "length prefix says 5 bytes, 2 follow"),
    (HEADER3 + b"\x02\x08\x01", "lacks required fields"),
    (HEADER3 + b"\x03\x08\x01\xff", "protobuf does not parse"),
    (b"BookieMetadataFormatVersion\t2\nquorumSize: banana\n", "protobuf text does not parse"),
    (b"BookieMetadataFormatVersion\t1\n2\nthree\n0\n", "v1 text is corrupt"),
    (b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\n", "v1 text is corrupt"),
    (b"BookieMetadataFormatVersion\t1\n2\n3\n0\n", "at least one ensemble"),
]


@pytest.mark.parametrize("data, message", GARBAGE)
def test_garbage_is_rejected_with_a_clear_metastore_error(data, message):
    with pytest.raises(LedgerMetadataFormatError, match=message) as info:
        parse_metadata(data)
    assert isinstance(info.value, BKMetaStoreException) and info.value.code == -18


def test_invariants_are_checked_both_ways():
    good = LedgerMetadata(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                          ensembles=((0, ("a:1", "b:1", "c:1")),))
    with pytest.raises(LedgerMetadataFormatError, match="ackQuorum"):
        serialize_metadata(good.replace(ack_quorum_size=3))
    with pytest.raises(LedgerMetadataFormatError, match="has 2 bookies"):
        serialize_metadata(good.replace(ensembles=((0, ("a:1", "b:1")),)))
    with pytest.raises(LedgerMetadataFormatError, match="ascending"):
        serialize_metadata(good.replace(ensembles=((5, ("a:1", "b:1", "c:1")), (5, ("a:1", "b:1", "d:1")))))
    with pytest.raises(LedgerMetadataFormatError, match="format version 7"):
        serialize_metadata(good, 7)
    bad_quorum = serialize_metadata(good).replace(b"\x08\x02\x10\x03", b"\x08\x04\x10\x03")
    with pytest.raises(LedgerMetadataFormatError, match="writeQuorum"):
        parse_metadata(bad_quorum)


# --- property-based round trips ---------------------------------------------------------------------

_bookie = st.from_regex(r"[a-z0-9.\-]{1,20}:[0-9]{1,5}", fullmatch=True)
_int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def metadata(draw, version=3):
    ensemble = draw(st.integers(1, 6))
    write = draw(st.integers(1, ensemble))
    ack = draw(st.integers(1, write))
    firsts = sorted(draw(st.sets(st.integers(1, 2**62), max_size=3)))
    ensembles = tuple((first, tuple(draw(st.lists(_bookie, min_size=ensemble, max_size=ensemble))))
                      for first in [0, *firsts])
    state = draw(st.sampled_from(list(LedgerState)))
    closed = state == LedgerState.CLOSED
    md = LedgerMetadata(
        ensemble_size=ensemble, write_quorum_size=write, ack_quorum_size=ack, ensembles=ensembles,
        state=state, last_entry_id=draw(st.integers(-1, 2**62)) if closed else -1,
        length=draw(st.integers(0, 2**62)) if closed else 0, metadata_format_version=version)
    if version >= 2:
        md = md.replace(
            digest_type=draw(st.sampled_from(list(DigestType))), password=draw(st.binary(max_size=40)),
            ctime=draw(st.none() | _int64),
            custom_metadata=draw(st.dictionaries(st.text(max_size=12), st.binary(max_size=20), max_size=4)))
    if version == 3:
        md = md.replace(c_token=draw(_int64))
    return md


@settings(max_examples=200, deadline=None)
@given(metadata(3))
def test_v3_round_trip(md):
    data = serialize_metadata(md)
    assert data.startswith(HEADER3)
    assert parse_metadata(data) == md
    assert serialize_metadata(parse_metadata(data)) == data


@settings(max_examples=100, deadline=None)
@given(metadata(2))
def test_v2_round_trip(md):
    assert parse_metadata(serialize_metadata(md, 2)) == md


@settings(max_examples=100, deadline=None)
@given(metadata(1).filter(lambda md: md.ack_quorum_size == md.write_quorum_size))
def test_v1_round_trip(md):
    assert parse_metadata(serialize_metadata(md, 1)) == md


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_a_v3_header_parse_or_fail_cleanly(tail):
    try:
        parse_metadata(HEADER3 + tail)
    except LedgerMetadataFormatError:
        pass
