"""Codec microbenchmarks (pytest-benchmark): Cython against the pure-Python reference.

Run: make bench   (or .venv/bin/pytest bench/test_codec.py --benchmark-only)
bench/codec_report.py prints the same measurements as a table with the speedup first.
"""

import os

import pytest

from bkfast import _codec, _refcodec
from bkfast.digests import DigestType, mac_key

IMPLS = {"cython": _codec, "reference": _refcodec}
SIZES = [100, 1024, 65536]
MAC_KEY = mac_key(b"bench")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("digest", list(DigestType), ids=lambda d: d.name)
@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_encode(benchmark, impl_name, digest, size):
    impl = IMPLS[impl_name]
    payload = os.urandom(size)
    benchmark.group = f"encode-{digest.name}-{size}"
    benchmark.extra_info["bytes"] = size
    out = benchmark(impl.encode_entry, 1, 2, 1, size, payload, digest, MAC_KEY)
    assert len(out) > size


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("digest", list(DigestType), ids=lambda d: d.name)
@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_decode(benchmark, impl_name, digest, size):
    impl = IMPLS[impl_name]
    data = _codec.encode_entry(1, 2, 1, size, os.urandom(size), digest, MAC_KEY)
    benchmark.group = f"decode-{digest.name}-{size}"
    benchmark.extra_info["bytes"] = size
    entry = benchmark(impl.decode_entry, data, digest, MAC_KEY, 1, 2)
    assert len(entry.payload) == size


FRAME_STREAM = b"".join((1024).to_bytes(4, "big") + os.urandom(1024) for _ in range(1024)) * 100  # ~100 MB
CHUNK = 65536  # what a socket read typically hands Twisted


@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_split_100mb_of_1kib_frames(benchmark, impl_name):
    impl = IMPLS[impl_name]
    chunks = [FRAME_STREAM[i:i + CHUNK] for i in range(0, len(FRAME_STREAM), CHUNK)]

    def split():
        splitter = impl.FrameSplitter()
        count = 0
        for chunk in chunks:
            count += len(splitter.feed(chunk))
        return count

    benchmark.group = "split-100MB-1KiB-frames"
    benchmark.extra_info["bytes"] = len(FRAME_STREAM)
    assert benchmark.pedantic(split, rounds=3, iterations=1) == 102400


def _v3_frames(impl, build, count=1000):
    """`count` v3 frames built by `build(FrameBuilder, i)`, split back into frame bodies."""
    out = impl.FrameBuilder()
    for i in range(count):
        build(out, i)
    return impl.FrameSplitter().feed(out.take())


@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_decode_v3_adds_1000_of_1kib(benchmark, impl_name):
    impl = IMPLS[impl_name]
    payload = os.urandom(1024)
    frames = _v3_frames(_codec, lambda b, i: b.add_v3_add_request(
        MAC_KEY, 7, i, i - 1, 1024 * (i + 1), payload, int(DigestType.CRC32C), b"", i))
    benchmark.group = "decode-v3-adds-1000x1KiB"
    adds, ids, end = benchmark(impl.decode_v3_adds, frames)
    assert end == len(frames) == 1000


@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_decode_v3_answer_1000(benchmark, impl_name):
    impl = IMPLS[impl_name]
    frames = _v3_frames(_codec, lambda b, i: b.add_v3_add_response(0, 7, i, i))
    decode = impl.decode_v3_answer

    def answers():
        return [decode(f) for f in frames]

    benchmark.group = "decode-v3-answer-1000"
    assert benchmark(answers)[-1] == (999, 2, 0)
