"""Pure-Python reference implementation of bkfast._codec: same functions, same answers.

Written for clarity rather than speed, straight from the byte layouts of BookKeeper's entry format and
v2 protocol. Only the standard library is used (CRC-32C is computed here, byte by byte), so the oracle
shares no checksum code with the Cython module. Tests run every vector through both implementations
and compare them; the benchmarks measure the Cython speedup against this module. It is not a runtime
fallback (set BKFAST_PURE_CODEC=1 to make `bkfast.codec` use it anyway, e.g. to debug).
"""

from __future__ import annotations

import hmac
import struct
import zlib
from dataclasses import dataclass

from bkfast import _refcodec_v3 as _v3
from bkfast._entrysource import EntrySource
from bkfast.errors import (
    DigestMismatchError,
    EntryFormatError,
    EntryIdMismatchError,
    FrameError,
    FrameTooLargeError,
    LedgerIdMismatchError,
    MalformedFrameError,
    NegativeFrameLengthError,
    TruncatedEntryError,
    UnknownOpcodeError,
)

DIGEST_CRC32, DIGEST_MAC, DIGEST_CRC32C, DIGEST_DUMMY = 1, 2, 3, 4
_DIGEST_LENGTH = {DIGEST_CRC32: 8, DIGEST_MAC: 20, DIGEST_CRC32C: 4, DIGEST_DUMMY: 0}

METADATA_LENGTH = 32
SCOPED_METADATA_LENGTH = 41
LAC_METADATA_LENGTH = 16
SCOPED_LAC_METADATA_LENGTH = 25
MASTER_KEY_LENGTH = 20
RESPONSE_HEADERS_SIZE = 24

OP_ADD, OP_READ, OP_AUTH, OP_READ_LAC, OP_WRITE_LAC, OP_GET_BOOKIE_INFO, OP_BATCH_READ = 1, 2, 3, 4, 5, 6, 7
FLAG_NONE, FLAG_DO_FENCING, FLAG_RECOVERY_ADD, FLAG_HIGH_PRIORITY = 0, 1, 2, 4
CURRENT_PROTOCOL_VERSION = 2
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024
CRC32C_HARDWARE = False


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), one byte at a time; zlib-style chaining (crc32c(b, crc32c(a)) == crc32c(a+b))."""
    table = _CRC32C_TABLE
    crc ^= 0xFFFFFFFF
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF

_V1_HEADER = struct.Struct(">qqqq")
_V2_HEADER = struct.Struct(">BQqqqq")
_V1_LAC = struct.Struct(">qq")
_V2_LAC = struct.Struct(">BQqq")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAKEN_ADD = struct.Struct("=qqQ")  # _addsink.pxd's TakenAdd
_ADD_IDS = struct.Struct(">qq")      # a v2 ADD's ledger and entry ids, after its master key
_RESPONSE = struct.Struct(">Iiqq")


def digest_size(digest_type: int) -> int:
    try:
        return _DIGEST_LENGTH[digest_type]
    except KeyError:
        raise ValueError(
            f"unknown digest type {digest_type}; expected 1 (CRC32), 2 (MAC), 3 (CRC32C), 4 (DUMMY)"
        ) from None


def _digest(digest_type: int, mac_key: bytes, header: bytes, payload) -> bytes:
    if digest_type == DIGEST_CRC32C:
        return _U32.pack(crc32c(payload, crc32c(header)))
    if digest_type == DIGEST_CRC32:
        return b"\0\0\0\0" + _U32.pack(zlib.crc32(payload, zlib.crc32(header)))
    if digest_type == DIGEST_MAC:
        h = hmac.new(bytes(mac_key), header, "sha1")
        h.update(payload)
        return h.digest()
    digest_size(digest_type)
    return b""


def _check_mac_key(digest_type: int, mac_key) -> None:
    if digest_type == DIGEST_MAC and not mac_key:
        raise ValueError("a MAC digest needs the ledger's MAC key (bkfast.digests.mac_key(password))")


def _entry_header(scope_id, digest_type, ledger_id, entry_id, lac, length) -> bytes:
    if scope_id == 0:
        return _V1_HEADER.pack(ledger_id, entry_id, lac, length)
    return _V2_HEADER.pack(0x80 | digest_type, scope_id, ledger_id, entry_id, lac, length)


def encode_entry(ledger_id, entry_id, last_add_confirmed, length, payload, digest_type, mac_key=b"",
                 scope_id=0) -> bytes:
    _check_mac_key(digest_type, mac_key)
    digest_size(digest_type)
    if ledger_id < 0:
        raise ValueError(f"ledger id {ledger_id} is negative")
    header = _entry_header(scope_id, digest_type, ledger_id, entry_id, last_add_confirmed, length)
    return header + _digest(digest_type, mac_key, header, payload) + bytes(payload)


def _master_key_bytes(master_key) -> bytes:
    key = bytes(master_key)
    if len(key) != MASTER_KEY_LENGTH:
        raise ValueError(f"master key must be {MASTER_KEY_LENGTH} bytes, got {len(key)}")
    return key


def encode_packet_header(version: int, opcode: int, flags: int) -> int:
    return ((version & 0xFF) << 24) | ((opcode & 0xFF) << 16) | (flags & 0xFFFF)


def decode_packet_header(header: int) -> tuple[int, int, int]:
    version = header >> 24
    if version == 0:
        return 0, header & 0xFF, 0
    return version, (header >> 16) & 0xFF, header & 0xFFFF


def encode_add_request_for_entry(master_key, entry, flags=0, version=CURRENT_PROTOCOL_VERSION) -> bytes:
    body = _U32.pack(encode_packet_header(version, OP_ADD, flags)) + _master_key_bytes(master_key) + bytes(entry)
    return _U32.pack(len(body)) + body


def encode_add_request(master_key, ledger_id, entry_id, last_add_confirmed, length, payload, digest_type,
                       mac_key=b"", flags=0, version=CURRENT_PROTOCOL_VERSION) -> bytes:
    key = _master_key_bytes(master_key)
    entry = encode_entry(ledger_id, entry_id, last_add_confirmed, length, payload, digest_type, mac_key)
    return encode_add_request_for_entry(key, entry, flags, version)


@dataclass
class Entry:
    format_version: int
    scope_id: int
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    digest: bytes
    payload: memoryview


def _entry_header_length(data: memoryview, digest_type: int) -> int:
    if len(data) >= 1 and data[0] & 0x80:
        revision = (data[0] >> 4) & 0x07
        if revision != 0:
            raise EntryFormatError(f"entry format v2 revision {revision} is not supported (only 0)")
        if data[0] & 0x0F != digest_type:
            raise EntryFormatError(
                f"entry says digest type {data[0] & 0x0F}, the ledger uses digest type {digest_type}")
        return SCOPED_METADATA_LENGTH
    return METADATA_LENGTH


def decode_entry(data, digest_type, mac_key=b"", expected_ledger_id=None, expected_entry_id=None,
                 expected_scope_id=None) -> Entry:
    _check_mac_key(digest_type, mac_key)
    dlen = digest_size(digest_type)
    mv = memoryview(data).cast("B")
    hlen = _entry_header_length(mv, digest_type)
    if len(mv) < hlen + dlen:
        raise TruncatedEntryError(
            f"entry of {len(mv)} bytes is shorter than its {hlen}-byte header and {dlen}-byte digest")
    header, stored, payload = mv[:hlen], bytes(mv[hlen:hlen + dlen]), mv[hlen + dlen:]
    if hlen == SCOPED_METADATA_LENGTH:
        _, scope_id, ledger_id, entry_id, lac, length = _V2_HEADER.unpack(header)
        version = 2
    else:
        ledger_id, entry_id, lac, length = _V1_HEADER.unpack(header)
        scope_id, version = 0, 1
    if not hmac.compare_digest(_digest(digest_type, mac_key, bytes(header), payload), stored):
        raise DigestMismatchError(f"digest mismatch for ledger {ledger_id} entry {entry_id}")
    if expected_scope_id is not None and scope_id != expected_scope_id:
        raise LedgerIdMismatchError(f"entry belongs to scope {scope_id}, expected scope {expected_scope_id}")
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise LedgerIdMismatchError(f"entry belongs to ledger {ledger_id}, expected ledger {expected_ledger_id}")
    if expected_entry_id is not None and entry_id != expected_entry_id:
        raise EntryIdMismatchError(
            f"ledger {ledger_id}: got entry {entry_id}, expected entry {expected_entry_id}")
    return Entry(version, scope_id, ledger_id, entry_id, lac, length, stored, payload)


def verify_entry_at(data, offset, digest_type, mac_key, ledger_id, entry_id, scope_id=0):
    mv = memoryview(data).cast("B")
    if offset < 0 or offset > len(mv):
        raise TruncatedEntryError(f"entry offset {offset} is outside a buffer of {len(mv)} bytes")
    e = decode_entry(mv[offset:], digest_type, mac_key, ledger_id, entry_id, scope_id)
    return bytes(e.payload), e.length, e.last_add_confirmed


def peek_entry_ids(data) -> tuple[int, int, int, int]:
    mv = memoryview(data).cast("B")
    if len(mv) >= 1 and mv[0] & 0x80:
        if len(mv) < 25:
            raise TruncatedEntryError(f"scoped entry of {len(mv)} bytes is too short for its ids")
        _, scope_id, ledger_id, entry_id = struct.unpack_from(">BQqq", mv)
        return 2, scope_id, ledger_id, entry_id
    if len(mv) < 16:
        raise TruncatedEntryError(f"entry of {len(mv)} bytes is too short for its ids")
    ledger_id, entry_id = struct.unpack_from(">qq", mv)
    return 1, 0, ledger_id, entry_id


def encode_lac(ledger_id, last_add_confirmed, digest_type, mac_key=b"", scope_id=0) -> bytes:
    _check_mac_key(digest_type, mac_key)
    digest_size(digest_type)
    if scope_id:
        header = _V2_LAC.pack(0x80 | digest_type, scope_id, ledger_id, last_add_confirmed)
    else:
        header = _V1_LAC.pack(ledger_id, last_add_confirmed)
    return header + _digest(digest_type, mac_key, header, b"")


def decode_lac(data, digest_type, mac_key=b"", expected_ledger_id=None, expected_scope_id=None):
    _check_mac_key(digest_type, mac_key)
    dlen = digest_size(digest_type)
    buf = bytes(data)
    if buf and buf[0] & 0x80:
        if (buf[0] >> 4) & 0x07 or buf[0] & 0x0F != digest_type:
            raise EntryFormatError(f"LAC buffer format byte {buf[0]:#04x} does not match digest type {digest_type}")
        hlen = SCOPED_LAC_METADATA_LENGTH
    else:
        hlen = LAC_METADATA_LENGTH
    if len(buf) < hlen + dlen:
        raise TruncatedEntryError(f"LAC buffer of {len(buf)} bytes is shorter than {hlen + dlen}")
    if hlen == SCOPED_LAC_METADATA_LENGTH:
        _, scope_id, ledger_id, lac = _V2_LAC.unpack_from(buf)
    else:
        ledger_id, lac = _V1_LAC.unpack_from(buf)
        scope_id = 0
    if not hmac.compare_digest(_digest(digest_type, mac_key, buf[:hlen], b""), buf[hlen:hlen + dlen]):
        raise DigestMismatchError(f"LAC digest mismatch for ledger {ledger_id}")
    if expected_scope_id is not None and scope_id != expected_scope_id:
        raise LedgerIdMismatchError(f"LAC buffer belongs to scope {scope_id}, expected {expected_scope_id}")
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise LedgerIdMismatchError(f"LAC buffer belongs to ledger {ledger_id}, expected {expected_ledger_id}")
    return scope_id, ledger_id, lac


def _with_key(body: bytes, flags: int, version: int, master_key) -> bytes:
    if flags & FLAG_DO_FENCING and version >= 2:
        if master_key is None:
            raise ValueError(f"a fencing request needs a {MASTER_KEY_LENGTH}-byte master key")
        body += _master_key_bytes(master_key)
    return _U32.pack(len(body)) + body


def encode_read_request(ledger_id, entry_id, flags=0, master_key=None, version=CURRENT_PROTOCOL_VERSION):
    body = struct.pack(">Iqq", encode_packet_header(version, OP_READ, flags), ledger_id, entry_id)
    return _with_key(body, flags, version, master_key)


def encode_batch_read_request(ledger_id, start_entry_id, request_id, max_count, max_size, flags=0,
                              master_key=None, version=CURRENT_PROTOCOL_VERSION):
    body = struct.pack(">Iqqqiq", encode_packet_header(version, OP_BATCH_READ, flags), ledger_id,
                       start_entry_id, request_id, max_count, max_size)
    return _with_key(body, flags, version, master_key)


def encode_auth(auth_message, version=CURRENT_PROTOCOL_VERSION) -> bytes:
    body = _U32.pack(encode_packet_header(version, OP_AUTH, 0)) + bytes(auth_message)
    return _U32.pack(len(body)) + body


def _response(version, opcode, rc, ledger_id, entry_id, rest: bytes = b"") -> bytes:
    body = _RESPONSE.pack(encode_packet_header(version, opcode, 0), rc, ledger_id, entry_id) + rest
    return _U32.pack(len(body)) + body


def encode_add_response(rc, ledger_id, entry_id, version=CURRENT_PROTOCOL_VERSION) -> bytes:
    return _response(version, OP_ADD, rc, ledger_id, entry_id)


def encode_read_response(rc, ledger_id, entry_id, data=b"", version=CURRENT_PROTOCOL_VERSION) -> bytes:
    return _response(version, OP_READ, rc, ledger_id, entry_id, bytes(data))


def encode_batch_read_response(rc, ledger_id, start_entry_id, request_id, entries=(),
                               version=CURRENT_PROTOCOL_VERSION) -> bytes:
    rest = _I64.pack(request_id) + b"".join(_U32.pack(len(e)) + bytes(e) for e in entries)
    return _response(version, OP_BATCH_READ, rc, ledger_id, start_entry_id, rest)


@dataclass
class V2Request:
    version: int
    opcode: int
    flags: int
    ledger_id: int = 0
    entry_id: int = 0
    scope_id: int = 0
    entry_format: int = 1
    master_key: bytes | None = None
    entry: memoryview | None = None
    request_id: int = 0
    max_count: int = 0
    max_size: int = 0
    auth_message: bytes | None = None


def _need(n: int, wanted: int, what: str) -> None:
    if n < wanted:
        raise MalformedFrameError(f"{what} frame body of {n} bytes is shorter than {wanted}")


def decode_request(frame) -> V2Request:
    mv = memoryview(frame).cast("B")
    _need(len(mv), 4, "v2 request")
    version, opcode, flags = decode_packet_header(_U32.unpack_from(mv)[0])
    r = V2Request(version, opcode, flags)
    if opcode == OP_ADD:
        _need(len(mv), 4 + MASTER_KEY_LENGTH + 16, "ADD")
        r.master_key = bytes(mv[4:24])
        r.entry = mv[24:]
        if r.entry[0] & 0x80:
            _need(len(mv), 4 + MASTER_KEY_LENGTH + 25, "ADD")
            r.entry_format = 2
            _, r.scope_id, r.ledger_id, r.entry_id = struct.unpack_from(">BQqq", r.entry)
        else:
            r.ledger_id, r.entry_id = struct.unpack_from(">qq", r.entry)
    elif opcode == OP_READ:
        _need(len(mv), 20, "READ")
        r.ledger_id, r.entry_id = struct.unpack_from(">qq", mv, 4)
        if flags & FLAG_DO_FENCING and version >= 2:
            _need(len(mv), 40, "fencing READ")
            r.master_key = bytes(mv[20:40])
    elif opcode == OP_BATCH_READ:
        _need(len(mv), 40, "BATCH_READ")
        r.ledger_id, r.entry_id, r.request_id, r.max_count, r.max_size = struct.unpack_from(">qqqiq", mv, 4)
        if flags & FLAG_DO_FENCING and version >= 2:
            _need(len(mv), 60, "fencing BATCH_READ")
            r.master_key = bytes(mv[40:60])
    elif opcode == OP_AUTH:
        r.auth_message = bytes(mv[4:])
    else:
        raise UnknownOpcodeError(f"v2 opcode {opcode} is not accepted by a bookie (only 1, 2, 3, 7)")
    return r


def decode_v2_adds(frames: list, start: int = 0) -> tuple[list, list, int]:
    """Twin of _codec.decode_v2_adds: the run of plain v2 ADDs at frames[start:]."""
    adds: list = []
    ids: list = []
    key = None
    i = start
    while i < len(frames):
        frame = frames[i]
        if type(frame) is not bytes or len(frame) < 4 + MASTER_KEY_LENGTH + 16:
            break
        version, opcode, flags = decode_packet_header(_U32.unpack_from(frame)[0])
        if opcode != OP_ADD or not 0 <= version <= 2 or frame[4 + MASTER_KEY_LENGTH] & 0x80:
            break
        if key is None or key != frame[4:4 + MASTER_KEY_LENGTH]:
            key = frame[4:4 + MASTER_KEY_LENGTH]
        adds.append((frame[4 + MASTER_KEY_LENGTH:], key, bool(flags & FLAG_RECOVERY_ADD),
                     bool(flags & (FLAG_HIGH_PRIORITY | FLAG_RECOVERY_ADD))))
        ids.append((*struct.unpack_from(">qq", frame, 4 + MASTER_KEY_LENGTH), version))
        i += 1
    return adds, ids, i


def serve_v2_reads(frames: list, start: int, out, lookup, busy: dict, out_limit: int = -1,
                   max_misses: int = -1, entry_bytes=None, read_bytes=None) -> tuple[int, list]:
    """Twin of _codec.serve_v2_reads: answer the run of plain v2 READs at frames[start:] from memory
    (each hit's size into the OpStats `entry_bytes`, their sum into the Counter `read_bytes`)."""
    if isinstance(lookup, EntrySource):     # its get() is the lookup
        lookup = lookup.get
    misses: list = []
    total = 0
    i = start
    while i < len(frames):
        if out_limit >= 0 and len(out) >= out_limit:
            break
        if 0 <= max_misses <= len(misses):
            break
        frame = frames[i]
        if type(frame) is not bytes or len(frame) < 20:
            break
        version, opcode, flags = decode_packet_header(_U32.unpack_from(frame)[0])
        if opcode != OP_READ or not 1 <= version <= 2 or flags & FLAG_DO_FENCING:
            break
        ledger_id, entry_id = struct.unpack_from(">qq", frame, 4)
        data = None if ledger_id in busy else lookup(ledger_id, entry_id, 0)
        if data is None:
            busy.setdefault(ledger_id, 0)
            misses.append((ledger_id, entry_id, version))
        else:
            out.add_read_response(0, ledger_id, entry_id, data, version)
            total += len(data)
            if entry_bytes is not None:
                entry_bytes.ok_value(len(data))
        i += 1
    if read_bytes is not None and total:
        read_bytes.add(total)
    return i, misses


decode_v3_adds = _v3.decode_v3_adds


def decode_v3_answer(frame) -> tuple[int, int, int]:
    """Twin of _codec.decode_v3_answer: (txn_id, operation, status)."""
    b = bytes(frame)
    txn = operation = top = None
    subs: dict[int, int | None] = {}        # readResponse / addResponse seen -> its status
    try:
        for field, wire, value in _v3.fields(b, 0, len(b)):
            if wire == 2 and field in (1, 100, 101):
                if field != 1:
                    subs.setdefault(field, None)
                for f2, w2, v2 in _v3.fields(b, *value):
                    if w2 != 0:
                        continue
                    if field == 1 and f2 == 2:
                        operation = v2
                    elif field == 1 and f2 == 3:
                        txn = v2
                    elif field != 1 and f2 == 1:
                        subs[field] = v2
            elif field == 2 and wire == 0:
                top = value
    except ValueError as err:
        raise MalformedFrameError("not a well-formed v3 Response") from err
    own = _V3_ANSWER_FIELD.get(operation)
    if txn is None or operation is None or top is None or (own in subs and subs[own] is None):
        raise MalformedFrameError("not a well-formed v3 Response")
    return txn, operation, subs[own] if own in subs else top


# OperationType -> the Response field of its sub-response, whose status is the answer's
_V3_ANSWER_FIELD = {1: 100, 2: 101}


def serve_v3_reads(frames: list, start: int, out, lookup, lac_of, busy: dict, out_limit: int = -1,
                   max_misses: int = -1, entry_bytes=None, read_bytes=None) -> tuple[int, list]:
    """Twin of _codec.serve_v3_reads (the loop is _refcodec_v3's, which takes a callable lookup)."""
    if isinstance(lookup, EntrySource):     # its get() is the lookup
        lookup = lookup.get
    return _v3.serve_v3_reads(frames, start, out, lookup, lac_of, busy, out_limit, max_misses, entry_bytes,
                              read_bytes)


@dataclass
class V2Response:
    version: int
    opcode: int
    rc: int = 0
    ledger_id: int = 0
    entry_id: int = 0
    data: memoryview | None = None
    request_id: int = 0
    entries: list | None = None
    auth_message: bytes | None = None


def decode_response(frame) -> V2Response:
    mv = memoryview(frame).cast("B")
    n = len(mv)
    _need(n, 4, "v2 response")
    version, opcode, _ = decode_packet_header(_U32.unpack_from(mv)[0])
    r = V2Response(version, opcode)
    if opcode == OP_AUTH:
        r.auth_message = bytes(mv[4:])
        return r
    if opcode not in (OP_ADD, OP_READ, OP_BATCH_READ):
        raise UnknownOpcodeError(f"v2 response opcode {opcode} is not one a bookie sends (1, 2, 3, 7)")
    _need(n, RESPONSE_HEADERS_SIZE, "response")
    _, r.rc, r.ledger_id, r.entry_id = _RESPONSE.unpack_from(mv)
    if opcode == OP_READ:
        r.data = mv[RESPONSE_HEADERS_SIZE:]
    elif opcode == OP_BATCH_READ:
        _need(n, RESPONSE_HEADERS_SIZE + 8, "BATCH_READ response")
        (r.request_id,) = _I64.unpack_from(mv, RESPONSE_HEADERS_SIZE)
        r.entries = []
        off = RESPONSE_HEADERS_SIZE + 8
        while off < n:
            _need(n - off, 4, "BATCH_READ response entry")
            (elen,) = _I32.unpack_from(mv, off)
            off += 4
            if elen < 0 or elen > n - off:
                raise MalformedFrameError(
                    f"BATCH_READ response entry length {elen} overruns the frame ({n - off} bytes left)")
            r.entries.append(mv[off:off + elen])
            off += elen
    elif n != RESPONSE_HEADERS_SIZE:
        raise MalformedFrameError(f"ADD response body must be {RESPONSE_HEADERS_SIZE} bytes, got {n}")
    return r


class FrameBuilder:
    """Collects complete frames in one buffer: handed out whole (`take`) or sent in pieces (`pending`,
    `consume`)."""

    def __init__(self, initial_capacity: int = 4096):
        self._buf = bytearray()
        self._start = 0
        self.frame_count = 0

    def __len__(self) -> int:
        return len(self._buf) - self._start

    def _append(self, frame: bytes) -> None:
        if self._start and len(self._buf) == self._start:
            del self._buf[:]        # raises BufferError while a pending() view is alive, as _codec's does
            self._start = 0
        self._buf += frame
        self.frame_count += 1

    def add_add_response(self, rc, ledger_id, entry_id, version=CURRENT_PROTOCOL_VERSION):
        self._append(encode_add_response(rc, ledger_id, entry_id, version))

    def add_add_responses(self, rc, ids):
        for ledger_id, entry_id, version in ids:
            if version == 0:     # legacy: the bare opcode as header, as Java answers it
                self._append(_U32.pack(24) + struct.pack(">Iiqq", OP_ADD, rc, ledger_id, entry_id))
            else:
                self.add_add_response(rc, ledger_id, entry_id, version)

    def add_taken_add_responses(self, rc, taken):
        """For each add an AddSink took: `taken` packs (ledger, entry, tag: the version) natively."""
        for ledger_id, entry_id, version in _TAKEN_ADD.iter_unpack(taken):
            self.add_add_response(rc, ledger_id, entry_id, version)

    def add_v3_taken_add_responses(self, status, taken):
        for ledger_id, entry_id, txn in _TAKEN_ADD.iter_unpack(taken):
            self.add_v3_add_response(status, ledger_id, entry_id, txn, 0)

    def add_v3_add_responses(self, status, ids):
        for ledger_id, entry_id, txn, scope_id in ids:
            self.add_v3_add_response(status, ledger_id, entry_id, txn, scope_id)

    def add_read_response(self, rc, ledger_id, entry_id, data=b"", version=CURRENT_PROTOCOL_VERSION):
        self._append(encode_read_response(rc, ledger_id, entry_id, data, version))

    def add_batch_read_response(self, rc, ledger_id, start_entry_id, request_id, entries=(),
                                version=CURRENT_PROTOCOL_VERSION):
        self._append(encode_batch_read_response(rc, ledger_id, start_entry_id, request_id, entries, version))

    def add_v3_add_request(self, master_key, ledger_id, entry_id, last_add_confirmed, length, payload, digest_type,
                           mac_key, txn):
        entry = encode_entry(ledger_id, entry_id, last_add_confirmed, length, payload, digest_type, mac_key)
        self._append(_v3.v3_add_request(_master_key_bytes(master_key), ledger_id, entry_id, txn, entry))

    def add_v3_add_response(self, status, ledger_id, entry_id, txn, scope_id=0):
        self._append(_v3.v3_add_response(status, ledger_id, entry_id, txn, scope_id))

    def add_v3_read_response(self, status, ledger_id, entry_id, txn, data, has_max_lac, max_lac, has_timestamp,
                             timestamp, scope_id=0):
        self._append(_v3.v3_read_response(status, ledger_id, entry_id, txn, data, has_max_lac, max_lac,
                                          has_timestamp, timestamp, scope_id))

    def add_frame(self, body):
        self._append(_U32.pack(len(body)) + bytes(body))

    def add_add_request(self, master_key, ledger_id, entry_id, last_add_confirmed, length, payload, digest_type,
                        mac_key=b"", flags=0, version=CURRENT_PROTOCOL_VERSION):
        self._append(encode_add_request(master_key, ledger_id, entry_id, last_add_confirmed, length, payload,
                                        digest_type, mac_key, flags, version))

    def pending(self) -> memoryview:
        return memoryview(self._buf)[self._start:].toreadonly()

    def consume(self, n: int) -> None:
        if n < 0 or n > len(self):
            raise ValueError(f"cannot consume {n} of {len(self)} pending bytes")
        self._start += n
        if self._start == len(self._buf):
            self.frame_count = 0

    def take(self) -> bytes:
        out = bytes(self._buf[self._start:])
        del self._buf[:]
        self._start = 0
        self.frame_count = 0
        return out


def _offer_add(sink, frame: bytes) -> bool:
    """Offer `frame` to the AddSink if it is a plain v2 ADD (version 1-2, no flags, unscoped, with ids)."""
    if len(frame) < 4 + MASTER_KEY_LENGTH + 16:
        return False
    version, opcode, flags = decode_packet_header(_U32.unpack_from(frame)[0])
    if opcode != OP_ADD or not 1 <= version <= 2 or flags or frame[4 + MASTER_KEY_LENGTH] & 0x80:
        return False
    ledger_id, entry_id = _ADD_IDS.unpack_from(frame, 4 + MASTER_KEY_LENGTH)
    return sink.take(ledger_id, entry_id, version, frame[4:4 + MASTER_KEY_LENGTH], frame[4 + MASTER_KEY_LENGTH:])


def _offer_v3_add(sink, frame: bytes) -> bool:
    """Offer `frame` to the AddSink if it is a plain v3 ADD_ENTRY (no recovery, priority or scope, a
    20-byte key)."""
    r = _v3.parse_v3_request(frame)
    if (r is None or r["operation"] != _v3.ADD_ENTRY or r["recovery"] or r["priority"] or r["scope_id"]
            or len(r["key"]) != MASTER_KEY_LENGTH or len(r["body"]) < 16 or r["body"][0] & 0x80
            or _ADD_IDS.unpack_from(r["body"]) != (r["ledger_id"], r["entry_id"])):
        return False
    return sink.take(r["ledger_id"], r["entry_id"], r["txn"], bytes(r["key"]), bytes(r["body"]))


class FrameSplitter:
    """Cuts a byte stream into frame bodies; the length is checked before the body is buffered."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        if max_frame_size < 4:
            raise ValueError(f"max_frame_size must be at least 4, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._failure: Exception | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def pending_head(self, n: int) -> bytes:
        """As the Cython splitter: the first (at most) n bytes of the frame received in part."""
        return bytes(self._buf[:max(0, n)])

    def _check_length(self, length: int) -> None:
        if length < 0:
            self._failure = (NegativeFrameLengthError, f"frame length {length} is negative")
        elif length + 4 > self.max_frame_size:
            self._failure = (FrameTooLargeError,
                             f"frame length {length} (+4) exceeds the maximum frame size "
                             f"{self.max_frame_size} (nettyMaxFrameSizeBytes)")
        else:
            return
        raise self._failure[0](self._failure[1])

    def feed(self, data, sink=None, v3: bool = False) -> list[bytes]:
        """As the Cython splitter: plain v2 ADDs (v3 ADD_ENTRYs when `v3`) are offered to `sink` (an
        AddSink) until it refuses one."""
        if self._failure is not None:
            err = self._failure[0](self._failure[1])
            err.frames = []
            raise err
        buf = self._buf
        buf += data
        frames = []
        off = 0
        try:
            while len(buf) - off >= 4:
                (length,) = _I32.unpack_from(buf, off)
                self._check_length(length)
                if len(buf) - off - 4 < length:
                    break
                frame = bytes(buf[off + 4:off + 4 + length])
                if sink is None or not (_offer_v3_add(sink, frame) if v3 else _offer_add(sink, frame)):
                    sink = None
                    frames.append(frame)
                off += 4 + length
        except FrameError as err:
            err.frames = frames
            buf.clear()  # the stream is dead: keep none of the refused frame
            raise
        del buf[:off]
        return frames
