"""The largest entry one ADD request can carry, and the refusal every writer makes before sending more.

A bookie closes a connection whose frame is longer than its `nettyMaxFrameSizeBytes` (Netty's rule:
the 4-byte length prefix included) and answers nothing. A client that sent such an add would see a lost
connection, replace the bookie, re-send, lose that connection too, and so on: the refusal is
deterministic and no ensemble change, new ledger or retry can get past it. So the client refuses the
entry first, against its own `nettyMaxFrameSizeBytes` (BookKeeper's client key of that name, default
5 MiB; it is also the largest frame the client reads back): an entry whose payload is longer than that
less ADD_FRAMING_BYTES fails at once with EntryTooLargeError (code IllegalOpException, Java's
"Invalid operation"), nothing is sent and the handle stays writable. Java's client has no such check
(it loops as described); the bound is bkfast's.

ADD_FRAMING_BYTES is the most framing any add of bkfast's client wraps around a payload, whatever the
protocol (v2 or v3), digest, scope, flags and id values: the same limit holds for every ledger, so a
stream or a Spark task can size its batches before it has a ledger. It is also enough for the answer
that reads the entry back (a v3 READ_ENTRY response adds at most 163 bytes, a v2 one 89).
"""

from __future__ import annotations

from bkfast.errors import EntryTooLargeError

__all__ = ["ADD_FRAMING_BYTES", "max_entry_size", "too_large"]

_VARINT64 = 10                      # a negative int64 or a uint64 near 2**64
_VARINT32 = 5                       # a uint32, or a length below 2**35

# The stored entry: the scoped (v2) entry header, flag byte + scope + ledger + entry + LAC + length,
# and the longest digest, HMAC-SHA1 (CRC32 takes 8, CRC32C 4, DUMMY 0).
_ENTRY_HEADER = 1 + 8 + 8 + 8 + 8 + 8
_DIGEST = 20
# v2 ADD: length prefix, packet header (version, opcode, flags), master key.
_V2_ADD = 4 + 4 + 20
# v3 ADD_ENTRY: length prefix; Request.header (tag, length, version, operation, txnId, priority);
# Request.addRequest (2-byte tag, length); AddRequest's flag (2-byte tag), ledgerId, entryId,
# masterKey (tag, length, 20 bytes), body (tag, length), writeFlags, ledgerScopeId (2-byte tag).
_V3_ADD = (4 + (2 + 2 + 2 + 1 + _VARINT64 + 1 + _VARINT32) + (2 + _VARINT32)
           + (2 + 1) + (1 + _VARINT64) * 2 + (2 + 20) + (1 + _VARINT32) + (1 + _VARINT64) + (2 + _VARINT64))

ADD_FRAMING_BYTES = max(_V2_ADD, _V3_ADD) + _ENTRY_HEADER + _DIGEST


def max_entry_size(max_frame_size: int) -> int:
    """The longest payload an add can carry when frames are at most `max_frame_size` bytes."""
    return int(max_frame_size) - ADD_FRAMING_BYTES


def too_large(what: str, size: int, max_frame_size: int, more_framing: int = 0,
              framing_of: str = "") -> EntryTooLargeError | None:
    """The error for `what` of `size` payload bytes, None when it fits. `more_framing` is what a caller
    adds around its own data inside the entry (e.g. a stream's record batch), named by `framing_of`."""
    framing = ADD_FRAMING_BYTES + more_framing
    if size <= int(max_frame_size) - framing:
        return None
    parts = f" ({ADD_FRAMING_BYTES} for the add request, {more_framing} for {framing_of})" if more_framing else ""
    return EntryTooLargeError(
        f"{what} of {size} bytes exceeds the largest entry a bookie accepts: nettyMaxFrameSizeBytes="
        f"{int(max_frame_size)} less {framing} bytes of framing{parts}; split it, or raise "
        "nettyMaxFrameSizeBytes on every bookie and in the client")
