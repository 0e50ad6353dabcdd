"""Ledger metadata (Java `LedgerMetadata`) and its serialization (`LedgerMetadataSerDe`, spec §5.4).

Owns the LedgerMetadata value and its znode bytes: format 3 (binary protobuf, written by default and
byte-identical to Java), 2 (protobuf text) and 1 (4.0 text), all three read and written. It never talks
to a store: the drivers (zk_driver, embedded) call serialize/parse.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import random
from dataclasses import dataclass, field
from typing import cast

from google.protobuf import text_format
from google.protobuf.message import DecodeError, EncodeError

from bkfast.digests import DigestType
from bkfast.errors import BKMetaStoreException
from bkfast.proto import LedgerMetadataFormat

__all__ = ["LedgerState", "LedgerMetadata", "serialize_metadata", "parse_metadata", "CURRENT_METADATA_FORMAT_VERSION",
           "LedgerMetadataFormatError", "validate_metadata", "new_ctoken"]

CURRENT_METADATA_FORMAT_VERSION = 3


class LedgerState(enum.IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True)
class LedgerMetadata:
    """Immutable; derive changed copies with `replace(...)` / the `with_*` helpers."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    # (first entry id, bookie ids), ascending by first entry id; the first starts at 0.
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime: int | None = None              # ms since epoch; written only when set
    custom_metadata: dict[str, bytes] = field(default_factory=dict)
    c_token: int = 0
    metadata_format_version: int = CURRENT_METADATA_FORMAT_VERSION

    # --- queries ------------------------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    @property
    def stores_password(self) -> bool:
        """False for format-1 metadata, which records neither password nor digest type: a client opening
        such a ledger must supply both (password is then b"" and digest_type the default here)."""
        return self.metadata_format_version >= 2

    @property
    def is_in_recovery(self) -> bool:
        return self.state == LedgerState.IN_RECOVERY

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble that covers `entry_id` (greatest first entry id <= entry_id)."""
        firsts = [first for first, _ in self.ensembles]
        index = bisect.bisect_right(firsts, max(entry_id, 0)) - 1
        return self.ensembles[max(index, 0)][1]

    @property
    def last_ensemble(self) -> tuple[int, tuple[str, ...]]:
        return self.ensembles[-1]

    @property
    def all_bookies(self) -> set[str]:
        return {bookie for _, members in self.ensembles for bookie in members}

    # --- derivation ---------------------------------------------------------------------------------
    def replace(self, **changes) -> LedgerMetadata:
        return dataclasses.replace(self, **changes)

    def with_ensemble(self, first_entry_id: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """Add (or replace, when `first_entry_id` equals the last segment's start) the last segment."""
        segments = [seg for seg in self.ensembles if seg[0] < first_entry_id]
        segments.append((first_entry_id, tuple(bookies)))
        return self.replace(ensembles=tuple(segments))

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return self.replace(state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)


# --- serialization (Java `LedgerMetadataSerDe`, spec §5.4) ------------------------------------------

class LedgerMetadataFormatError(BKMetaStoreException):
    """Stored ledger metadata could not be parsed (or metadata cannot be serialized): the bytes are not any
    of the formats 1-3, or they break a LedgerMetadata invariant. A BKMetaStoreException (client code -18)."""


_HEADER_KEY = b"BookieMetadataFormatVersion\t"
_MAX_VERSION_DIGITS = 10
_V1_CLOSED_TAG = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID = -102
_MAX_VARINT32 = 2**31 - 1


def _header(version: int) -> bytes:
    return _HEADER_KEY + str(version).encode("ascii") + b"\n"


def validate_metadata(md: LedgerMetadata) -> None:
    """The invariants Java's LedgerMetadataImpl enforces; LedgerMetadataFormatError naming the broken one."""
    if not 1 <= md.ack_quorum_size <= md.write_quorum_size <= md.ensemble_size:
        raise LedgerMetadataFormatError(
            f"invalid quorums: need 1 <= ackQuorum ({md.ack_quorum_size}) <= writeQuorum ({md.write_quorum_size})"
            f" <= ensembleSize ({md.ensemble_size})")
    if not md.ensembles:
        raise LedgerMetadataFormatError("there must be at least one ensemble in the ledger")
    previous = None
    for first, members in md.ensembles:
        if previous is not None and first <= previous:
            raise LedgerMetadataFormatError(
                f"ensembles must be in ascending first-entry order, got {first} after {previous}")
        if len(members) != md.ensemble_size:
            raise LedgerMetadataFormatError(
                f"ensemble starting at entry {first} has {len(members)} bookies, ensembleSize is {md.ensemble_size}")
        previous = first
    if not isinstance(md.state, LedgerState):
        raise LedgerMetadataFormatError(f"unknown ledger state {md.state!r}")


def _to_format(md: LedgerMetadata, include_ctoken: bool) -> LedgerMetadataFormat:
    """Java's buildLedgerMetadataFormat: lastEntryId and password always set, ctime only when stored."""
    fmt = LedgerMetadataFormat()
    fmt.quorumSize = md.write_quorum_size
    fmt.ackQuorumSize = md.ack_quorum_size
    fmt.ensembleSize = md.ensemble_size
    fmt.length = md.length
    fmt.lastEntryId = md.last_entry_id
    fmt.state = cast("LedgerMetadataFormat.State", int(md.state))   # the proto enum's value
    if md.ctime is not None:
        fmt.ctime = md.ctime
    # MAC is stored as HMAC (= 2)
    fmt.digestType = cast("LedgerMetadataFormat.DigestType", int(DigestType.parse(md.digest_type)))
    fmt.password = bytes(md.password or b"")
    for key, value in md.custom_metadata.items():
        entry = fmt.customMetadata.add()
        entry.key = key
        entry.value = bytes(value)
    for first, members in md.ensembles:
        seg = fmt.segment.add()
        seg.firstEntryId = first
        seg.ensembleMember.extend(members)
    if include_ctoken:
        fmt.cToken = md.c_token
    return fmt


def _varint32(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _v1_text(md: LedgerMetadata) -> bytes:
    lines = [str(md.write_quorum_size), str(md.ensemble_size), str(md.length)]
    lines += ["\t".join([str(first), *members]) for first, members in md.ensembles]
    text = "\n".join(lines) + "\n"
    if md.state == LedgerState.IN_RECOVERY:
        text += f"{_V1_IN_RECOVERY_ENTRY_ID}\t{_V1_CLOSED_TAG}"
    elif md.state == LedgerState.CLOSED:
        text += f"{md.last_entry_id}\t{_V1_CLOSED_TAG}"
    return text.encode("utf-8")


def serialize_metadata(metadata: LedgerMetadata, version: int = CURRENT_METADATA_FORMAT_VERSION) -> bytes:
    """The znode bytes of `metadata` in format `version` (3 = binary, Java's default; 2 = protobuf text
    without cToken; 1 = the 4.0 text format, which stores no digest type, password, ctime or custom metadata)."""
    validate_metadata(metadata)
    try:
        if version == 3:
            body = _to_format(metadata, include_ctoken=True).SerializeToString()
            return _header(3) + _varint32(len(body)) + body
        if version == 2:
            text = text_format.MessageToString(_to_format(metadata, include_ctoken=False))
            return _header(2) + text.encode("utf-8")
    except (ValueError, TypeError, EncodeError) as e:
        raise LedgerMetadataFormatError(f"cannot serialize ledger metadata {metadata!r}: {e}") from None
    if version == 1:
        return _header(1) + _v1_text(metadata)
    raise LedgerMetadataFormatError(f"invalid ledger metadata format version {version}; expected 1, 2 or 3")


def _read_header(data: bytes) -> tuple[int, int]:
    """(format version, offset of the body)."""
    if not data.startswith(_HEADER_KEY):
        for i, byte in enumerate(_HEADER_KEY):
            if i >= len(data) or data[i] != byte:
                raise LedgerMetadataFormatError(
                    f"ledger metadata header corrupt at index {i}: expected {_HEADER_KEY!r}, got {data[:40]!r}")
    start = len(_HEADER_KEY)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    if end < 0:
        raise LedgerMetadataFormatError(
            f"unable to find end of version number in ledger metadata header {data[:start + 12]!r}")
    digits = data[start:end]
    try:
        return int(digits.decode("ascii")), end + 1
    except (UnicodeDecodeError, ValueError):
        raise LedgerMetadataFormatError(f"unable to parse metadata format version from {digits!r}") from None


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 32:
        if pos >= len(data):
            raise LedgerMetadataFormatError("ledger metadata v3: unexpected end of data in the length varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result > _MAX_VARINT32:
                raise LedgerMetadataFormatError(f"ledger metadata v3: length {result} does not fit an int32")
            return result, pos
        shift += 7
    raise LedgerMetadataFormatError("ledger metadata v3: malformed length varint32")


def _from_format(fmt: LedgerMetadataFormat, version: int) -> LedgerMetadata:
    """Java's decodeFormat (+ the ctime rule of parseVersion{2,3}Config)."""
    if not fmt.IsInitialized():
        missing = ", ".join(fmt.FindInitializationErrors())
        raise LedgerMetadataFormatError(f"ledger metadata v{version} lacks required fields: {missing}")
    state = LedgerState(fmt.state)
    closed = state == LedgerState.CLOSED
    try:
        digest = DigestType(fmt.digestType)
    except ValueError:
        raise LedgerMetadataFormatError(f"ledger metadata v{version}: unknown digest type {fmt.digestType}") from None
    md = LedgerMetadata(
        ensemble_size=fmt.ensembleSize,
        write_quorum_size=fmt.quorumSize,
        ack_quorum_size=fmt.ackQuorumSize if fmt.HasField("ackQuorumSize") else fmt.quorumSize,
        ensembles=tuple((seg.firstEntryId, tuple(seg.ensembleMember)) for seg in fmt.segment),
        digest_type=digest,
        password=fmt.password if fmt.HasField("password") else b"",
        state=state,
        last_entry_id=fmt.lastEntryId if closed else -1,
        length=fmt.length if closed else 0,
        ctime=fmt.ctime if fmt.HasField("ctime") else None,
        custom_metadata={entry.key: entry.value for entry in fmt.customMetadata},
        c_token=fmt.cToken if fmt.HasField("cToken") else 0,
        metadata_format_version=version,
    )
    validate_metadata(md)
    return md


def _parse_v1(body: bytes) -> LedgerMetadata:
    try:
        lines = body.decode("utf-8").splitlines()
        write_quorum, ensemble_size, length = int(lines[0]), int(lines[1]), int(lines[2])
        ensembles = []
        state, last_entry_id = LedgerState.OPEN, -1
        for line in lines[3:]:
            parts = line.split("\t")
            if parts[1] == _V1_CLOSED_TAG:
                entry = int(parts[0])
                if entry == _V1_IN_RECOVERY_ENTRY_ID:
                    state = LedgerState.IN_RECOVERY
                else:
                    state, last_entry_id = LedgerState.CLOSED, entry
                break
            ensembles.append((int(parts[0]), tuple(parts[1:])))
    except (UnicodeDecodeError, ValueError, IndexError) as e:
        raise LedgerMetadataFormatError(f"ledger metadata v1 text is corrupt ({e}): {body[:80]!r}") from None
    md = LedgerMetadata(
        ensemble_size=ensemble_size, write_quorum_size=write_quorum, ack_quorum_size=write_quorum,
        ensembles=tuple(ensembles), state=state, last_entry_id=last_entry_id,
        length=length if state == LedgerState.CLOSED else 0, metadata_format_version=1)
    validate_metadata(md)
    return md


def parse_metadata(data: bytes) -> LedgerMetadata:
    """Parse znode bytes in any format 1-3; LedgerMetadataFormatError (a BKMetaStoreException) on garbage."""
    data = bytes(data)
    version, pos = _read_header(data)
    if version == 3:
        size, pos = _read_varint32(data, pos)
        if pos + size != len(data):
            raise LedgerMetadataFormatError(
                f"ledger metadata v3: length prefix says {size} bytes, {len(data) - pos} follow the header")
        fmt = LedgerMetadataFormat()
        try:
            fmt.ParseFromString(data[pos:])
        except DecodeError as e:
            raise LedgerMetadataFormatError(f"ledger metadata v3: protobuf does not parse: {e}") from None
        return _from_format(fmt, 3)
    if version == 2:
        try:
            fmt = text_format.Parse(data[pos:].decode("utf-8"), LedgerMetadataFormat())
        except (UnicodeDecodeError, text_format.ParseError) as e:
            raise LedgerMetadataFormatError(f"ledger metadata v2: protobuf text does not parse: {e}") from None
        return _from_format(fmt, 2)
    if version == 1:
        return _parse_v1(data[pos:])
    raise LedgerMetadataFormatError(
        f"ledger metadata format version {version} not supported: expected 1 to {CURRENT_METADATA_FORMAT_VERSION}")


def new_ctoken() -> int:
    """A random, non-zero signed 64-bit creator token (Java: a random long)."""
    while True:
        token = random.getrandbits(64) - 2**63
        if token:
            return token
