"""Malformed input gets a specific error from the codec, never a crash or a silent wrong answer."""

import pytest

from bkfast.digests import DigestType, mac_key, master_key
from bkfast.errors import (
    DigestMismatchError,
    EntryFormatError,
    EntryIdMismatchError,
    FrameTooLargeError,
    LedgerIdMismatchError,
    MalformedFrameError,
    NegativeFrameLengthError,
    TruncatedEntryError,
    UnknownOpcodeError,
    V2Rc,
    v2_rc_for,
)
from tests.codec_impls import IMPLEMENTATIONS

KEY = master_key(b"secret")
MAC = mac_key(b"secret")


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request):
    return request.param


def test_wrong_ledger_id_is_reported_after_the_digest_check(impl):
    entry = impl.encode_entry(7, 3, 2, 10, b"0123456789", DigestType.CRC32C)
    with pytest.raises(LedgerIdMismatchError, match="ledger 7, expected ledger 8"):
        impl.decode_entry(entry, DigestType.CRC32C, b"", 8, 3)


def test_wrong_entry_id_is_reported(impl):
    entry = impl.encode_entry(7, 3, 2, 10, b"0123456789", DigestType.CRC32)
    with pytest.raises(EntryIdMismatchError, match="got entry 3, expected entry 4"):
        impl.decode_entry(entry, DigestType.CRC32, b"", 7, 4)


def test_entry_id_check_is_skipped_when_reading_the_last_entry(impl):
    entry = impl.encode_entry(7, 3, 2, 10, b"0123456789", DigestType.CRC32)
    assert impl.decode_entry(entry, DigestType.CRC32, b"", 7, None).entry_id == 3


def test_digest_of_another_password_is_a_mismatch(impl):
    entry = impl.encode_entry(7, 3, 2, 10, b"payload", DigestType.MAC, MAC)
    with pytest.raises(DigestMismatchError):
        impl.decode_entry(entry, DigestType.MAC, mac_key(b"other"), 7, 3)


def test_entry_read_with_the_wrong_digest_type_is_a_mismatch(impl):
    entry = impl.encode_entry(7, 3, 2, 10, b"payload", DigestType.CRC32C)
    with pytest.raises((DigestMismatchError, TruncatedEntryError)):
        impl.decode_entry(entry, DigestType.CRC32, b"", 7, 3)


@pytest.mark.parametrize("digest", list(DigestType))
@pytest.mark.parametrize("scope", [0, 5])
def test_short_buffers_raise_truncated_entry(impl, digest, scope):
    entry = impl.encode_entry(7, 3, 2, 0, b"", digest, MAC, scope)
    for cut in range(1 if scope else 0, len(entry)):
        with pytest.raises((TruncatedEntryError, EntryFormatError)):
            impl.decode_entry(entry[:cut], digest, MAC)


def test_scoped_entry_names_its_digest_type_and_a_mismatch_is_refused(impl):
    entry = impl.encode_entry(7, 3, 2, 1, b"x", DigestType.CRC32C, b"", scope_id=99)
    assert entry[0] == 0x80 | DigestType.CRC32C
    with pytest.raises(EntryFormatError, match="digest type 3"):
        impl.decode_entry(entry, DigestType.CRC32, b"")
    revised = bytes([entry[0] | 0x10]) + entry[1:]
    with pytest.raises(EntryFormatError, match="revision 1"):
        impl.decode_entry(revised, DigestType.CRC32C, b"")


def test_scoped_entry_from_another_scope_is_refused(impl):
    entry = impl.encode_entry(7, 3, 2, 1, b"x", DigestType.CRC32C, b"", scope_id=99)
    with pytest.raises(LedgerIdMismatchError, match="scope 99"):
        impl.decode_entry(entry, DigestType.CRC32C, b"", 7, 3, expected_scope_id=98)


def test_scoped_entry_layout_is_41_byte_header_then_digest(impl):
    entry = impl.encode_entry(0x1234, 5, 4, 3, b"abc", DigestType.CRC32C, b"", scope_id=0xABCD)
    assert entry[:41].hex() == ("83" + "000000000000abcd" + "0000000000001234" + "0000000000000005"
                                + "0000000000000004" + "0000000000000003")
    assert len(entry) == 41 + 4 + 3


def test_mac_without_a_key_and_unknown_digest_types_are_refused(impl):
    with pytest.raises(ValueError, match="MAC key"):
        impl.encode_entry(1, 0, -1, 1, b"x", DigestType.MAC)
    with pytest.raises(ValueError, match="unknown digest type 9"):
        impl.encode_entry(1, 0, -1, 1, b"x", 9)
    with pytest.raises(ValueError, match="negative"):
        impl.encode_entry(-1, 0, -1, 1, b"x", DigestType.DUMMY)


@pytest.mark.parametrize("opcode", [0, 4, 5, 6, 8, 100, 255])
def test_opcodes_the_v2_protocol_does_not_carry_are_refused(impl, opcode):
    body = bytes([2, opcode, 0, 0]) + bytes(40)
    with pytest.raises(UnknownOpcodeError, match=f"opcode {opcode}"):
        impl.decode_request(body)
    assert v2_rc_for(UnknownOpcodeError) == V2Rc.EBADREQ


@pytest.mark.parametrize("body,what", [
    (b"", "v2 request"),
    (b"\x02\x01", "v2 request"),
    (bytes([2, 1, 0, 0]) + bytes(35), "ADD"),
    (bytes([2, 2, 0, 0]) + bytes(15), "READ"),
    (bytes([2, 2, 0, 1]) + bytes(16), "fencing READ"),
    (bytes([2, 7, 0, 0]) + bytes(30), "BATCH_READ"),
    (bytes([2, 7, 0, 1]) + bytes(36), "fencing BATCH_READ"),
])
def test_bodies_too_short_for_their_opcode_are_malformed(impl, body, what):
    with pytest.raises(MalformedFrameError, match=what):
        impl.decode_request(body)


def test_fencing_read_without_key_in_legacy_version_decodes_without_key(impl):
    # Before version 2 a fencing read carried no key; the bookie answers such a read with EUA.
    r = impl.decode_request(bytes([1, 2, 0, 1]) + (5).to_bytes(8, "big") + (0).to_bytes(8, "big"))
    assert (r.version, r.flags, r.master_key) == (1, impl.FLAG_DO_FENCING, None)


def test_legacy_version_zero_header_is_just_the_opcode(impl):
    r = impl.decode_request((2).to_bytes(4, "big") + (5).to_bytes(8, "big") + (6).to_bytes(8, "big"))
    assert (r.version, r.opcode, r.flags, r.ledger_id, r.entry_id) == (0, 2, 0, 5, 6)


def test_a_version_above_two_is_decoded_for_the_bookie_to_answer_ebadversion(impl):
    r = impl.decode_request(bytes([3, 2, 0, 0]) + bytes(16))
    assert r.version == 3


def test_v2_add_of_a_scoped_entry_is_recognised(impl):
    frame = impl.encode_add_request_for_entry(
        KEY, impl.encode_entry(11, 12, 10, 1, b"x", DigestType.CRC32C, b"", scope_id=77))
    r = impl.decode_request(frame[4:])
    assert (r.entry_format, r.scope_id, r.ledger_id, r.entry_id) == (2, 77, 11, 12)


def test_master_keys_must_be_twenty_bytes(impl):
    with pytest.raises(ValueError, match="20 bytes"):
        impl.encode_add_request(b"short", 1, 0, -1, 1, b"x", DigestType.DUMMY)
    with pytest.raises(ValueError, match="master key"):
        impl.encode_read_request(1, -1, impl.FLAG_DO_FENCING, None)


def test_batch_read_request_and_response_round_trip(impl):
    frame = impl.encode_batch_read_request(9, 100, 4242, 50, 1 << 20, impl.FLAG_DO_FENCING, KEY)
    r = impl.decode_request(frame[4:])
    assert (r.opcode, r.ledger_id, r.entry_id, r.request_id, r.max_count, r.max_size, r.master_key) == (
        impl.OP_BATCH_READ, 9, 100, 4242, 50, 1 << 20, KEY)
    entries = [b"a" * 40, b"", b"c" * 7]
    resp = impl.encode_batch_read_response(0, 9, 100, 4242, entries)
    assert len(resp) == 4 + 24 + 8 + sum(4 + len(e) for e in entries)
    d = impl.decode_response(resp[4:])
    assert (d.opcode, d.rc, d.ledger_id, d.entry_id, d.request_id) == (impl.OP_BATCH_READ, 0, 9, 100, 4242)
    assert [bytes(e) for e in d.entries] == entries


def test_batch_read_response_with_an_overrunning_entry_length_is_malformed(impl):
    resp = bytearray(impl.encode_batch_read_response(0, 9, 100, 1, [b"abc"]))
    resp[-7:-3] = (1000).to_bytes(4, "big")
    with pytest.raises(MalformedFrameError, match="overruns"):
        impl.decode_response(bytes(resp[4:]))


def test_add_response_of_the_wrong_size_is_malformed(impl):
    with pytest.raises(MalformedFrameError):
        impl.decode_response(impl.encode_add_response(0, 1, 2)[4:] + b"x")


def test_oversized_frame_is_refused_before_its_body_is_buffered(impl):
    splitter = impl.FrameSplitter()
    with pytest.raises(FrameTooLargeError, match="exceeds the maximum frame size 5242880") as err:
        splitter.feed((5_242_877).to_bytes(4, "big") + b"x" * 1000)
    assert err.value.frames == []
    assert splitter.buffered_bytes < 1000
    assert splitter.failed
    with pytest.raises(FrameTooLargeError):
        splitter.feed(b"more")


def test_largest_frame_netty_accepts_is_accepted(impl):
    body = bytes(5_242_876)
    assert impl.FrameSplitter().feed(len(body).to_bytes(4, "big") + body) == [body]


def test_negative_length_is_refused_and_earlier_frames_are_handed_back(impl):
    splitter = impl.FrameSplitter()
    with pytest.raises(NegativeFrameLengthError, match="-1") as err:
        splitter.feed(b"\x00\x00\x00\x02ok" + b"\xff\xff\xff\xff")
    assert err.value.frames == [b"ok"]


def test_header_split_across_chunks_is_still_checked(impl):
    splitter = impl.FrameSplitter(max_frame_size=100)
    assert splitter.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLargeError):
        splitter.feed(b"\x01\x00")


@pytest.mark.parametrize("digest", list(DigestType))
@pytest.mark.parametrize("scope", [0, 5, (1 << 64) - 1])
def test_verify_entry_at_agrees_with_decode_entry(impl, digest, scope):
    """The read path's verify_entry_at(data, offset, ...) gives decode_entry's payload, length and LAC,
    and refuses exactly what decode_entry refuses, with the same error types."""
    mac = mac_key(b"pw") if digest == DigestType.MAC else b""
    entry = impl.encode_entry(9, 4, 3, 1234, b"payload" * 50, digest, mac, scope)
    frame = b"x" * 24 + entry
    assert impl.verify_entry_at(frame, 24, digest, mac, 9, 4, scope) == (b"payload" * 50, 1234, 3)
    assert impl.verify_entry_at(entry, 0, digest, mac, 9, 4, scope)[0] == b"payload" * 50
    for ledger_id, entry_id, scope_id in ((8, 4, scope), (9, 5, scope), (9, 4, scope + 1)):
        with pytest.raises(Exception) as verify_error:
            impl.verify_entry_at(entry, 0, digest, mac, ledger_id, entry_id, scope_id)
        with pytest.raises(Exception) as decode_error:
            impl.decode_entry(entry, digest, mac, ledger_id, entry_id, scope_id)
        assert type(verify_error.value) is type(decode_error.value)
    if digest != DigestType.DUMMY:
        bad = bytearray(frame)
        bad[-1] ^= 1
        with pytest.raises(DigestMismatchError):
            impl.verify_entry_at(bytes(bad), 24, digest, mac, 9, 4, scope)
    with pytest.raises(TruncatedEntryError):
        impl.verify_entry_at(frame[:40], 24, digest, mac, 9, 4, scope)
