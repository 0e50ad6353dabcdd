"""Properties of the codec that must hold for all inputs, checked with hypothesis on both implementations."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkfast import _codec, _refcodec
from bkfast.digests import DigestType, mac_key
from bkfast.errors import BKError, EntryVerificationError, FrameError
from tests.codec_impls import IMPLEMENTATIONS, entry_fields

DIGESTS = list(DigestType)
CHECKED_DIGESTS = [d for d in DigestType if d != DigestType.DUMMY]
ids = st.integers(0, 2**63 - 1)
signed_longs = st.integers(-(2**63), 2**63 - 1)
scopes = st.one_of(st.just(0), st.integers(1, 2**64 - 1))


@st.composite
def payloads(draw):
    """Mostly small payloads, sometimes big ones up to 1 MiB (drawn as a seed, not byte by byte)."""
    if draw(st.integers(0, 9)) < 8:
        return draw(st.binary(max_size=2048))
    size = draw(st.integers(0, 1 << 20))
    return random.Random(draw(st.integers(0, 2**32))).randbytes(size)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(digest=st.sampled_from(DIGESTS), scope=scopes, ledger=ids, entry=signed_longs, lac=signed_longs,
       length=signed_longs, payload=payloads(), password=st.binary(max_size=16))
def test_encode_decode_round_trip(impl, digest, scope, ledger, entry, lac, length, payload, password):
    key = mac_key(password)
    data = impl.encode_entry(ledger, entry, lac, length, payload, digest, key, scope)
    e = impl.decode_entry(data, digest, key, ledger, entry, scope)
    assert entry_fields(e)[1:6] == (scope, ledger, entry, lac, length)
    assert e.format_version == (2 if scope else 1)
    assert bytes(e.payload) == payload
    assert impl.peek_entry_ids(data) == (e.format_version, scope, ledger, entry)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(digest=st.sampled_from(DIGESTS), scope=scopes, ledger=ids, entry=signed_longs, lac=signed_longs,
       length=signed_longs, payload=payloads(), password=st.binary(max_size=16))
def test_cython_and_reference_produce_identical_bytes(digest, scope, ledger, entry, lac, length, payload,
                                                      password):
    key = mac_key(password)
    fast = _codec.encode_entry(ledger, entry, lac, length, payload, digest, key, scope)
    assert fast == _refcodec.encode_entry(ledger, entry, lac, length, payload, digest, key, scope)
    assert entry_fields(_codec.decode_entry(fast, digest, key)) == entry_fields(
        _refcodec.decode_entry(fast, digest, key))
    assert _codec.encode_lac(ledger, lac, digest, key, scope) == _refcodec.encode_lac(ledger, lac, digest, key, scope)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=300, deadline=None)
@given(digest=st.sampled_from(CHECKED_DIGESTS), scope=scopes, ledger=ids, entry=ids,
       payload=st.binary(max_size=512), data=st.data())
def test_any_single_flipped_byte_is_detected(impl, digest, scope, ledger, entry, payload, data):
    key = mac_key(b"pw")
    good = impl.encode_entry(ledger, entry, entry - 1, len(payload), payload, digest, key, scope)
    position = data.draw(st.integers(0, len(good) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    bad = bytearray(good)
    bad[position] ^= flip
    with pytest.raises(EntryVerificationError):
        impl.decode_entry(bytes(bad), digest, key, ledger, entry, scope)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(digest=st.sampled_from(CHECKED_DIGESTS), scope=scopes, ledger=ids, lac=signed_longs, data=st.data())
def test_any_single_flipped_byte_in_a_lac_buffer_is_detected(impl, digest, scope, ledger, lac, data):
    key = mac_key(b"pw")
    good = impl.encode_lac(ledger, lac, digest, key, scope)
    bad = bytearray(good)
    bad[data.draw(st.integers(0, len(good) - 1))] ^= data.draw(st.integers(1, 255))
    with pytest.raises(EntryVerificationError):
        impl.decode_lac(bytes(bad), digest, key, ledger, scope)


frame_bodies = st.lists(st.binary(max_size=300), max_size=30)


def _stream(bodies):
    return b"".join(len(b).to_bytes(4, "big") + b for b in bodies)


def _split_points(data, size):
    return sorted(set(data.draw(st.lists(st.integers(0, size), max_size=40), label="cuts")))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(bodies=frame_bodies, data=st.data())
def test_splitter_gives_the_same_frames_for_every_chunking(impl, bodies, data):
    stream = _stream(bodies)
    cuts = [0] + _split_points(data, len(stream)) + [len(stream)]
    splitter = impl.FrameSplitter(max_frame_size=1024)
    frames = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        frames += splitter.feed(stream[a:b])
    assert frames == bodies
    assert splitter.buffered_bytes == 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_splitter_one_byte_at_a_time_and_ten_megabytes_at_once(impl):
    rng = random.Random(7)
    bodies = []
    while sum(len(b) + 4 for b in bodies) < 10_000_000:
        bodies.append(rng.randbytes(rng.choice([0, 1, 100, 1024, 70000, 1_000_000])))
    stream = _stream(bodies)
    splitter = impl.FrameSplitter()
    assert splitter.feed(stream + stream[:10]) == bodies
    assert splitter.buffered_bytes == 10
    small = _stream(bodies[:40])
    splitter = impl.FrameSplitter()
    frames = []
    for i in range(len(small)):
        frames += splitter.feed(small[i:i + 1])
    assert frames == bodies[:40]


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=2000), data=st.data())
def test_garbage_never_crashes_the_splitter_and_both_implementations_agree(garbage, data):
    cuts = [0] + _split_points(data, len(garbage)) + [len(garbage)]
    outcomes = []
    for impl in (_codec, _refcodec):
        splitter = impl.FrameSplitter(max_frame_size=512)
        frames, error = [], None
        for a, b in zip(cuts, cuts[1:], strict=False):
            try:
                frames += splitter.feed(garbage[a:b])
            except FrameError as e:
                frames += e.frames
                error = type(e)
                break
        outcomes.append((frames, error))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=200))
def test_garbage_bodies_decode_or_raise_a_bookkeeper_error_identically(body):
    for decode in ("decode_request", "decode_response"):
        results = []
        for impl in (_codec, _refcodec):
            try:
                r = getattr(impl, decode)(body)
                results.append((r.version, r.opcode, r.flags if decode == "decode_request" else r.rc,
                                r.ledger_id, r.entry_id))
            except BKError as e:
                results.append(type(e))
        assert results[0] == results[1]
    for digest in DIGESTS:
        results = []
        for impl in (_codec, _refcodec):
            try:
                results.append(entry_fields(impl.decode_entry(body, digest, b"k" * 20)))
            except BKError as e:
                results.append(type(e))
        assert results[0] == results[1]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=100, deadline=None)
@given(responses=st.lists(st.tuples(st.sampled_from(["add", "read"]), st.integers(0, 107), ids, signed_longs,
                                    st.binary(max_size=100)), max_size=20))
def test_frame_builder_output_is_the_concatenation_of_single_frames(impl, responses):
    builder = impl.FrameBuilder()
    expected = b""
    for kind, rc, ledger, entry, data in responses:
        if kind == "add":
            builder.add_add_response(rc, ledger, entry)
            expected += impl.encode_add_response(rc, ledger, entry)
        else:
            builder.add_read_response(rc, ledger, entry, data)
            expected += impl.encode_read_response(rc, ledger, entry, data)
    assert builder.frame_count == len(responses)
    assert len(builder) == len(expected)
    assert builder.take() == expected
    assert len(builder) == 0 and builder.take() == b""


def test_crc32c_check_values_from_bookkeeper_tests():
    assert _refcodec.crc32c(b"123456789") == 0xE3069283
    assert _refcodec.crc32c(b"Some String") == 0x2445290F


@settings(max_examples=200, deadline=None)
@given(digest=st.sampled_from([DigestType.CRC32C, DigestType.CRC32]), scope=scopes, payload=payloads())
def test_crc_digests_agree_with_the_crc32c_package_and_zlib(digest, scope, payload):
    """A third, independent checksum implementation: the C libraries behind crc32c and zlib."""
    import zlib

    import crc32c

    entry = _codec.encode_entry(3, 4, 2, len(payload), payload, digest, b"", scope)
    header_len = 41 if scope else 32
    header, stored = entry[:header_len], entry[header_len:header_len + (4 if digest == DigestType.CRC32C else 8)]
    if digest == DigestType.CRC32C:
        assert int.from_bytes(stored, "big") == crc32c.crc32c(header + payload)
    else:
        assert int.from_bytes(stored, "big") == zlib.crc32(header + payload)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(adds=st.lists(st.tuples(ids, ids, st.sampled_from([1, 2, 3, 4]), st.binary(max_size=3000)), min_size=1,
                     max_size=12),
       cuts=st.lists(st.integers(0, 5000), max_size=8))
def test_frame_builder_as_a_send_buffer_gives_the_frames_in_order(impl, adds, cuts):
    """add_add_request appends what encode_add_request returns; pending/consume hand the bytes out in
    pieces (a partial send each), interleaved with more appends, with nothing lost or repeated."""
    master_key, mac_key = b"m" * 20, b"k" * 20
    builder, expected, sent = impl.FrameBuilder(64), b"", b""
    for i, (ledger, entry, digest, payload) in enumerate(adds):
        builder.add_add_request(master_key, ledger, entry, entry - 1, len(payload), payload, digest, mac_key)
        expected += impl.encode_add_request(master_key, ledger, entry, entry - 1, len(payload), payload, digest,
                                            mac_key)
        if i < len(cuts):
            with builder.pending() as view:
                n = min(cuts[i], len(view))
                sent += bytes(view[:n])
            builder.consume(n)
    assert len(builder) == len(expected) - len(sent)
    with pytest.raises(ValueError):
        builder.consume(len(builder) + 1)
    view = builder.pending()
    with pytest.raises(BufferError):      # the buffer must not move under a live view
        builder.add_add_request(master_key, 1, 1, 0, 70000, bytes(70000), 3, mac_key)
    rest = bytes(view)
    view.release()
    builder.consume(len(rest))
    assert sent + rest == expected and len(builder) == 0 and builder.take() == b""
