"""Where an entry's piggy-backed LAC sits in its header: the one place every storage and the bookie read it.

An entry is stored exactly as the client packaged it (spec §3.3): v1 layout `ledgerId, entryId, lastAddConfirmed,
...` (8 bytes each, big-endian), the scoped v2 layout (top bit of the first byte set) `version/digest byte,
scopeId, ledgerId, entryId, lastAddConfirmed, ...`. Must never verify or rewrite the entry.
"""

from __future__ import annotations

import struct

__all__ = ["LAC_OFFSET_V1", "LAC_OFFSET_SCOPED", "entry_lac"]

# v1: after ledgerId (8) and entryId (8); scoped: after the version byte, scopeId, ledgerId and entryId.
LAC_OFFSET_V1 = 16
LAC_OFFSET_SCOPED = 25
_SCOPED_LAYOUT_BIT = 0x80
_LONG = struct.Struct(">q")


def entry_lac(entry: bytes | bytearray | memoryview) -> int:
    """The last-add-confirmed a writer piggy-backed on an entry (its header, v1 or scoped layout)."""
    return _LONG.unpack_from(entry, LAC_OFFSET_SCOPED if entry[0] & _SCOPED_LAYOUT_BIT else LAC_OFFSET_V1)[0]
