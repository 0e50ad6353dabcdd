"""DLSN: the position of one record in a log stream, and the symbolic start points of a reader.

As in DistributedLog, a DLSN is (log segment sequence number, entry id, slot id): the segment's `seq`
in the stream's metadata, the ledger entry holding the record's batch, and the record's index in that
batch. DLSNs order records of a stream totally (tuple order). The printed form is ``seq:entry:slot``
(e.g. ``3:120:7``); `DLSN.parse` reads it back. A reader's `position` is the DLSN of the next record it
will return, so saving it and opening a reader there resumes without loss or repetition.
"""

from __future__ import annotations

from typing import NamedTuple

from bkfast.errors import StreamError

__all__ = ["DLSN", "EARLIEST", "LATEST"]

EARLIEST = "earliest"
LATEST = "latest"


class DLSN(NamedTuple):
    segment: int
    entry: int
    slot: int

    def __str__(self) -> str:
        return f"{self.segment}:{self.entry}:{self.slot}"

    @classmethod
    def parse(cls, text) -> DLSN:
        """A DLSN from ``seq:entry:slot`` (or a DLSN / 3-sequence); StreamError if malformed."""
        if isinstance(text, DLSN):
            return text
        try:
            if isinstance(text, str):
                parts = [int(p) for p in text.strip().split(":")]
            else:
                parts = [int(p) for p in text]
            if len(parts) != 3 or min(parts) < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise StreamError(f"not a stream position: {text!r} (expected segment:entry:slot, e.g. 1:0:0)") from None
        return cls(*parts)

    def next_after(self, count: int) -> DLSN:
        """The position after this record, in a batch of `count` records."""
        if self.slot + 1 < count:
            return DLSN(self.segment, self.entry, self.slot + 1)
        return DLSN(self.segment, self.entry + 1, 0)
