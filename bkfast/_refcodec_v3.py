"""Pure-Python twin of _codec's v3 fast path (_codec_v3.pxi and FrameBuilder's v3 responses).

Same rules, same answers: a v3 Request is taken only if it is an ADD_ENTRY (no DEFERRED_SYNC, flag
absent or RECOVERY_ADD) or a plain READ_ENTRY (no flag, no previousLAC) with header version 3, every
required field, and no repeated header or sub-message; anything else is left to the protobuf path.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct(">I")
_MASK64 = (1 << 64) - 1
READ_ENTRY = 1    # OperationType
ADD_ENTRY = 2


def _varint(b: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 70:
        byte = b[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & _MASK64, pos
        shift += 7
    raise ValueError("bad varint")


def _skip(b: bytes, pos: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(b, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 2:
        length, pos = _varint(b, pos, end)
        if length > end - pos:
            raise ValueError("overrun")
        pos += length
    else:
        raise ValueError("wire type")
    if pos > end:
        raise ValueError("overrun")
    return pos


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def fields(b: bytes, pos: int, end: int):
    """(field, wire, value or (start, end) for length-delimited); raises ValueError on bad bytes."""
    while pos < end:
        key, pos = _varint(b, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(b, pos, end)
            yield field, wire, value
        elif wire == 2:
            length, pos = _varint(b, pos, end)
            if length > end - pos:
                raise ValueError("overrun")
            yield field, wire, (pos, pos + length)
            pos += length
        else:
            pos = _skip(b, pos, end, wire)
            yield field, wire, None


def parse_v3_request(b: bytes) -> dict | None:
    """The fields of a fast-path request, or None."""
    try:
        header = sub = None
        sub_field = 0
        for field, wire, value in fields(b, 0, len(b)):
            if wire == 2 and field in (1, 100, 101):
                if field == 1:
                    if header is not None:
                        return None
                    header = value
                else:
                    if sub is not None:
                        return None
                    sub, sub_field = value, field
        if header is None or sub is None:
            return None
        r = {"priority": 0, "scope_id": 0, "recovery": False}
        seen = set()
        for field, wire, value in fields(b, *header):
            if wire == 0 and 1 <= field <= 4:
                if field == 1 and value != 3:
                    return None
                r[{1: "version", 2: "operation", 3: "txn", 4: "priority"}[field]] = value
                seen.add(field)
        if not {1, 2, 3} <= seen:
            return None
        if r["operation"] >= 1000:
            r["operation"] = -1
        if r["operation"] == ADD_ENTRY and sub_field == 101:
            return _add(b, sub, r)
        if r["operation"] == READ_ENTRY and sub_field == 100:
            return _read(b, sub, r)
    except ValueError:
        return None
    return None


def _add(b: bytes, sub, r: dict) -> dict | None:
    seen = set()
    for field, wire, value in fields(b, *sub):
        if wire == 0 and field in (1, 2, 5, 100, 1000):
            if field == 5 and value & 1:
                return None
            if field == 100:
                if value != 1:
                    return None
                r["recovery"] = True
            elif field == 1000:
                r["scope_id"] = value
            elif field in (1, 2):
                r["ledger_id" if field == 1 else "entry_id"] = _signed(value)
            seen.add(field)
        elif wire == 2 and field in (3, 4):
            r["key" if field == 3 else "body"] = b[value[0]:value[1]]
            seen.add(field)
    return r if {1, 2, 3, 4} <= seen else None


def _read(b: bytes, sub, r: dict) -> dict | None:
    seen = set()
    for field, wire, value in fields(b, *sub):
        if field in (100, 4):
            return None
        if wire == 0 and field in (1, 2, 1000):
            if field == 1000:
                r["scope_id"] = value
            else:
                r["ledger_id" if field == 1 else "entry_id"] = _signed(value)
            seen.add(field)
    return r if {1, 2} <= seen else None


def decode_v3_adds(frames: list, start: int = 0) -> tuple[list, list, int]:
    adds: list = []
    ids: list = []
    key = None
    i = start
    while i < len(frames):
        frame = frames[i]
        if type(frame) is not bytes:
            break
        r = parse_v3_request(frame)
        if r is None or r["operation"] != ADD_ENTRY:
            break
        if key is None or key != r["key"]:
            key = r["key"]
        adds.append((r["body"], key, r["recovery"], r["recovery"] or r["priority"] > 0))
        ids.append((r["ledger_id"], r["entry_id"], r["txn"], r["scope_id"]))
        i += 1
    return adds, ids, i


def serve_v3_reads(frames: list, start: int, out, lookup, lac_of, busy: dict, out_limit: int = -1,
                   max_misses: int = -1, entry_bytes=None, read_bytes=None) -> tuple[int, list]:
    misses: list = []
    total = 0
    i = start
    cached_lac = None
    while i < len(frames):
        if out_limit >= 0 and len(out) >= out_limit:
            break
        if 0 <= max_misses <= len(misses):
            break
        frame = frames[i]
        if type(frame) is not bytes:
            break
        r = parse_v3_request(frame)
        if r is None or r["operation"] != READ_ENTRY:
            break
        ledger_id, entry_id, scope_id = r["ledger_id"], r["entry_id"], r["scope_id"]
        data = None if ledger_id in busy else lookup(ledger_id, entry_id, scope_id)
        if data is None:
            busy.setdefault(ledger_id, 0)
            misses.append((ledger_id, entry_id, r["txn"], scope_id))
        else:
            if cached_lac is None or cached_lac[0] != (scope_id, ledger_id):
                cached_lac = ((scope_id, ledger_id), lac_of(scope_id, ledger_id))
            out.add_v3_read_response(0, ledger_id, entry_id, r["txn"], data, True, cached_lac[1], False, 0,
                                     scope_id)
            total += len(data)
            if entry_bytes is not None:
                entry_bytes.ok_value(len(data))
        i += 1
    if read_bytes is not None and total:
        read_bytes.add(total)
    return i, misses


def _put_varint(v: int) -> bytes:
    v &= _MASK64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _response(operation: int, txn: int, status: int, sub_field: int, sub: bytes) -> bytes:
    header = b"\x08\x03\x10" + bytes([operation]) + b"\x18" + _put_varint(txn)
    body = (b"\x0a" + _put_varint(len(header)) + header + b"\x10" + _put_varint(status)
            + _put_varint((sub_field << 3) | 2) + _put_varint(len(sub)) + sub)
    return _U32.pack(len(body)) + body


def v3_add_response(status: int, ledger_id: int, entry_id: int, txn: int, scope_id: int = 0) -> bytes:
    sub = b"\x08" + _put_varint(status) + b"\x10" + _put_varint(ledger_id) + b"\x18" + _put_varint(entry_id)
    if scope_id:
        sub += b"\xc0\x3e" + _put_varint(scope_id)
    return _response(ADD_ENTRY, txn, status, 101, sub)


def v3_read_response(status, ledger_id, entry_id, txn, data, has_max_lac, max_lac, has_timestamp, timestamp,
                     scope_id=0) -> bytes:
    sub = b"\x08" + _put_varint(status) + b"\x10" + _put_varint(ledger_id) + b"\x18" + _put_varint(entry_id)
    if data is not None:
        data = bytes(data)
        sub += b"\x22" + _put_varint(len(data)) + data
    if has_max_lac:
        sub += b"\x28" + _put_varint(max_lac)
    if has_timestamp:
        sub += b"\x30" + _put_varint(timestamp)
    if scope_id:
        sub += b"\xc0\x3e" + _put_varint(scope_id)
    return _response(READ_ENTRY, txn, status, 100, sub)


def v3_add_request(master_key, ledger_id, entry_id, txn, entry: bytes) -> bytes:
    """The v3 ADD_ENTRY Request frame around an encoded entry (length prefix included)."""
    header = b"\x08\x03\x10" + bytes([ADD_ENTRY]) + b"\x18" + _put_varint(txn)
    sub = (b"\x08" + _put_varint(ledger_id) + b"\x10" + _put_varint(entry_id) + b"\x1a" + _put_varint(len(master_key))
           + bytes(master_key) + b"\x22" + _put_varint(len(entry)) + bytes(entry))
    body = b"\x0a" + _put_varint(len(header)) + header + b"\xaa\x06" + _put_varint(len(sub)) + sub
    return _U32.pack(len(body)) + body

