"""The record batch: how many stream records are packed into one ledger entry (format version 1).

A record is `value` bytes, an optional `key` and a timestamp (ms since the epoch). The writer packs
records into one entry in a columnar layout whose arrays are Arrow's own (int32 offsets, LSB validity
bitmap, int64 timestamps), so a reader can hand them to Arrow without touching records one by one.
All integers little endian; every section starts at a multiple of 8 bytes from the start of the entry
payload (zero padding in between):

    off  size        field
    0    4           magic b"BKSR"
    4    1           format version (1)
    5    1           flags: bit 0 = the batch has keys; bit 1 = control entry (see below)
    6    2           zero
    8    4           count n (>= 1)
    12   4           value data length V
    16   8           base index: records of this segment before this entry
    24   8n          timestamps, int64 ms
    ..   4(n+1)      value offsets, int32, 0 .. V
    [if keys:  ceil(n/8) validity bitmap (bit i set = record i has a key),
               4(n+1) key offsets, int32, 0 .. K]
    ..   V           value data
    [if keys:  K key data]

A control entry has count 0 and nothing after the header. The writer adds one when its pipeline runs
empty: its add carries the LAC that makes the entries before it visible to tailing readers (a ledger's
LAC reaches the bookies only with the next add). Readers skip it; its base index is still exact.

Integrity: the batch carries no checksum of its own; the ledger entry's digest (CRC32C / CRC32 / MAC,
the ledger's `digestType`) covers the whole payload and is verified by the client on every read. The
decoder still checks the structure (magic, version, sizes, offsets at both ends) and raises
StreamError on a payload that is not a batch.
"""

from __future__ import annotations

import struct
from array import array
from itertools import accumulate, islice

from bkfast.errors import StreamError

__all__ = ["encode_batch", "encode_control", "decode_batch", "DecodedBatch", "batch_header", "BATCH_OVERHEAD",
           "FORMAT_VERSION", "encoded_size"]

MAGIC = b"BKSR"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBHIIQ")
HEADER_SIZE = _HEADER.size          # 24
BATCH_OVERHEAD = 12                 # bytes per record besides value/key (timestamp + offset)
_FLAG_KEYS = 1
_FLAG_CONTROL = 2


def _pad(n: int) -> int:
    return -n & 7


def encoded_size(n: int, value_bytes: int, key_bytes: int = 0, has_keys: bool = False) -> int:
    """The exact length of the payload `encode_sections` makes for `n` records holding `value_bytes` of
    values and, `has_keys`, `key_bytes` of keys."""
    offsets = 4 * (n + 1)
    size = HEADER_SIZE + 8 * n + offsets + _pad(offsets)
    if not has_keys:
        return size + value_bytes
    bitmap = (n + 7) >> 3
    return size + bitmap + _pad(bitmap) + offsets + _pad(offsets) + value_bytes + _pad(value_bytes) + key_bytes


def encode_batch(values: list, keys: list | None, timestamps: list[int], base_index: int) -> bytes:
    """One entry payload for `values` (bytes-like), their `keys` (None, or a list with None for "no
    key") and `timestamps`; `base_index` is the number of records before it in its segment."""
    n = len(values)
    if n == 0:
        raise StreamError("a record batch needs at least one record")
    voff = array("i", accumulate(map(len, values), initial=0))
    key_parts = None
    if keys is not None and any(k is not None for k in keys):
        bits = bytearray((n + 7) >> 3)
        for i, k in enumerate(keys):
            if k is not None:
                bits[i >> 3] |= 1 << (i & 7)
        klist = [b"" if k is None else k for k in keys]
        key_parts = (bytes(bits), array("i", accumulate(map(len, klist), initial=0)).tobytes(), b"".join(klist))
    return encode_sections(n, array("q", timestamps).tobytes(), voff.tobytes(), b"".join(values), key_parts,
                           base_index)


def encode_sections(n: int, timestamps: bytes, value_offsets: bytes, value_data, key_parts, base_index: int) -> bytes:
    """A batch from its sections already in their final form (the Arrow writer path): `timestamps`
    n int64, `value_offsets` n+1 int32 starting at 0, `key_parts` None or (bitmap, key offsets, key data)."""
    vlen = len(value_data)
    pad4 = b"\0\0\0\0" if (n + 1) & 1 else b""
    parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, _FLAG_KEYS if key_parts else 0, 0, n, vlen, base_index),
             timestamps, value_offsets, pad4]
    if key_parts:
        bitmap, koffs, kdata = key_parts
        parts += [bitmap, b"\0" * _pad(len(bitmap)), koffs, pad4, value_data, b"\0" * _pad(vlen), kdata]
    else:
        parts.append(value_data)
    return b"".join(parts)


def encode_control(base_index: int) -> bytes:
    """A control entry (no records) for a segment holding `base_index` records before it."""
    return _HEADER.pack(MAGIC, FORMAT_VERSION, _FLAG_CONTROL, 0, 0, 0, base_index)


def batch_header(payload) -> tuple[int, int, int]:
    """(count, base index, first timestamp) of a batch without decoding it."""
    magic, version, _flags, _z, n, _vlen, base = _HEADER.unpack_from(payload)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise StreamError(f"entry is not a bkfast record batch (magic {magic!r}, version {version})")
    return n, base, struct.unpack_from("<q", payload, HEADER_SIZE)[0] if n else 0


class DecodedBatch:
    """The sections of one batch, as zero-copy views of the payload; `values()` etc. materialize."""

    __slots__ = ("payload", "count", "base_index", "ts_at", "voff_at", "vdata_at", "vlen", "bitmap_at", "koff_at",
                 "kdata_at", "klen")

    def __init__(self, payload: bytes):
        if len(payload) < HEADER_SIZE:
            raise StreamError(f"entry of {len(payload)} bytes is too short to be a record batch")
        magic, version, flags, _z, n, vlen, base = _HEADER.unpack_from(payload)
        if magic != MAGIC or version != FORMAT_VERSION or (n == 0) != bool(flags & _FLAG_CONTROL):
            raise StreamError(f"entry is not a bkfast record batch v1 (magic {magic!r}, version {version}, "
                              f"count {n})")
        self.payload = payload
        self.count = n
        self.base_index = base
        self.vlen = vlen
        self.ts_at = HEADER_SIZE
        if n == 0:                                  # a control entry
            if len(payload) != HEADER_SIZE:
                raise StreamError(f"control entry of {len(payload)} bytes is malformed")
            self.voff_at = self.vdata_at = HEADER_SIZE
            self.bitmap_at = self.koff_at = -1
            self.kdata_at = self.klen = 0
            return
        off = HEADER_SIZE + 8 * n
        self.voff_at = off
        off += 4 * (n + 1)
        off += _pad(off)
        if flags & _FLAG_KEYS:
            self.bitmap_at = off
            off += (n + 7) >> 3
            off += _pad(off)
            self.koff_at = off
            off += 4 * (n + 1)
            off += _pad(off)
            self.vdata_at = off
            off += vlen
            off += _pad(off)
            self.kdata_at = off
            self.klen = struct.unpack_from("<i", payload, self.koff_at + 4 * n)[0]
            end = off + self.klen
        else:
            self.bitmap_at = self.koff_at = -1
            self.kdata_at = self.klen = 0
            self.vdata_at = off
            end = off + vlen
        last_voff = struct.unpack_from("<i", payload, self.voff_at + 4 * n)[0]
        if end != len(payload) or last_voff != vlen:
            raise StreamError(f"record batch of {n} records is malformed: {len(payload)} bytes, expected {end}")

    @property
    def has_keys(self) -> bool:
        return self.koff_at >= 0

    def timestamps(self) -> memoryview:
        return memoryview(self.payload)[self.ts_at:self.ts_at + 8 * self.count].cast("q")

    def value_offsets(self) -> memoryview:
        return memoryview(self.payload)[self.voff_at:self.voff_at + 4 * (self.count + 1)].cast("i")

    def value_data(self) -> memoryview:
        return memoryview(self.payload)[self.vdata_at:self.vdata_at + self.vlen]

    def key_bitmap(self) -> memoryview | None:
        if not self.has_keys:
            return None
        return memoryview(self.payload)[self.bitmap_at:self.bitmap_at + ((self.count + 7) >> 3)]

    def key_offsets(self) -> memoryview | None:
        if not self.has_keys:
            return None
        return memoryview(self.payload)[self.koff_at:self.koff_at + 4 * (self.count + 1)].cast("i")

    def key_data(self) -> memoryview | None:
        if not self.has_keys:
            return None
        return memoryview(self.payload)[self.kdata_at:self.kdata_at + self.klen]

    def values(self, first: int = 0) -> list[bytes]:
        offs = self.value_offsets()
        data = self.payload[self.vdata_at:self.vdata_at + self.vlen]
        return [data[a:b] for a, b in zip(islice(offs, first, None), islice(offs, first + 1, None), strict=False)]

    def keys(self, first: int = 0) -> list:
        if not self.has_keys:
            return [None] * (self.count - first)
        offs = self.key_offsets()
        bits = self.key_bitmap()
        assert offs is not None and bits is not None, "has_keys"
        data = self.payload[self.kdata_at:self.kdata_at + self.klen]
        present = [(bits[i >> 3] >> (i & 7)) & 1 for i in range(first, self.count)]
        out = [data[a:b] for a, b in zip(islice(offs, first, None), islice(offs, first + 1, None), strict=False)]
        if all(present):
            return out
        return [k if p else None for k, p in zip(out, present, strict=False)]

    def first_index_at_or_after(self, ts: int) -> int:
        """The slot of the first record with timestamp >= ts (count if none)."""
        for i, t in enumerate(self.timestamps()):
            if t >= ts:
                return i
        return self.count


def decode_batch(payload) -> DecodedBatch:
    return DecodedBatch(bytes(payload) if not isinstance(payload, bytes) else payload)

