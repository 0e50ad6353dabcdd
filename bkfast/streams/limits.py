"""What one stream entry can hold, and the record check every stream writer makes before sending.

A record batch travels as one ledger entry, so it must fit in the largest entry a bookie accepts
(`bkfast.client.entry_size`: the client's nettyMaxFrameSizeBytes less the add request's framing), its
own framing (`batch.encoded_size`) included. The stream writer seals a batch before it would outgrow
that and refuses, at once and before anything is sent, a record that cannot fit even alone; `bkfast
stream append` checks its records before it opens a writer; the Spark sink cuts its entries to fit.
"""

from __future__ import annotations

from bkfast.client.entry_size import max_entry_size, too_large
from bkfast.errors import EntryTooLargeError

from .batch import encoded_size

__all__ = ["max_batch_payload", "record_error", "check_records"]


def max_batch_payload(max_frame_size: int) -> int:
    """The longest record batch (entry payload) frames of `max_frame_size` bytes can carry."""
    return max_entry_size(max_frame_size)


def record_error(value_bytes: int, key_bytes: int | None, max_frame_size: int,
                 what: str = "record") -> EntryTooLargeError | None:
    """The error for a record of `value_bytes` (and `key_bytes`, None: no key) that no entry can hold
    even alone; None when it fits."""
    keyed = key_bytes is not None
    size = value_bytes + (key_bytes or 0)
    framing = encoded_size(1, value_bytes, key_bytes or 0, keyed) - size
    return too_large(what, size, max_frame_size, framing, "the record batch")


def check_records(max_frame_size: int, values, keys=None) -> None:
    """Raise EntryTooLargeError for the first of `values` (with `keys`) no entry can hold."""
    limit = max_entry_size(max_frame_size)
    n = len(values)
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        key_bytes = len(key) if key is not None else None
        if encoded_size(1, len(value), key_bytes or 0, key is not None) > limit:
            error = record_error(len(value), key_bytes, max_frame_size,
                                 "record" if n == 1 else f"record {i} (of {n})")
            assert error is not None, "the record does not fit: record_error says so"
            raise error
