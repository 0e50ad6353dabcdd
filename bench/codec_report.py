"""Print codec throughput, Cython against the pure-Python reference, speedup first.

    .venv/bin/python bench/codec_report.py [--seconds 0.3]

Each figure is the best of 5 timed runs of a loop over the same input, on one core.
"""

import argparse
import os
import time

from bkfast import _codec, _refcodec
from bkfast.digests import DigestType, mac_key

MAC_KEY = mac_key(b"bench")


def rate(fn, seconds):
    """Calls per second of fn(), best of 5 runs of about `seconds` each."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > seconds / 5:
            break
        n *= 2
    best = elapsed
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.3)
    args = parser.parse_args()
    print(f"CRC32C in hardware: {_codec.CRC32C_HARDWARE}")
    print(f"{'op':7} {'digest':7} {'size':>6} {'speedup':>8} {'cython/s':>12} {'reference/s':>12} {'cython MB/s':>12}")
    for op in ("encode", "decode"):
        for digest in DigestType:
            for size in (100, 1024, 65536):
                payload = os.urandom(size)
                data = _codec.encode_entry(1, 2, 1, size, payload, digest, MAC_KEY)
                rates = []
                for impl in (_codec, _refcodec):
                    if op == "encode":
                        def call(impl=impl, size=size, payload=payload, digest=digest):
                            return impl.encode_entry(1, 2, 1, size, payload, digest, MAC_KEY)
                        rates.append(rate(call, args.seconds))
                    else:
                        def call(impl=impl, data=data, digest=digest):
                            return impl.decode_entry(data, digest, MAC_KEY, 1, 2)
                        rates.append(rate(call, args.seconds))
                print(f"{op:7} {digest.name:7} {size:>6} {rates[0] / rates[1]:>7.1f}x {rates[0]:>12,.0f} "
                      f"{rates[1]:>12,.0f} {rates[0] * size / 1e6:>12,.0f}")
    stream = b"".join((1024).to_bytes(4, "big") + os.urandom(1024) for _ in range(1024)) * 100
    chunks = [stream[i:i + 65536] for i in range(0, len(stream), 65536)]
    results = []
    for impl in (_codec, _refcodec):
        start = time.perf_counter()
        splitter = impl.FrameSplitter()
        frames = sum(len(splitter.feed(c)) for c in chunks)
        results.append((frames, time.perf_counter() - start))
    (frames, fast), (_, slow) = results
    print(f"split {len(stream) / 1e6:.0f} MB of 1 KiB frames in 64 KiB chunks: speedup {slow / fast:.1f}x, "
          f"cython {frames / fast:,.0f} frames/s ({len(stream) / fast / 1e6:,.0f} MB/s), "
          f"reference {frames / slow:,.0f} frames/s")


if __name__ == "__main__":
    main()
