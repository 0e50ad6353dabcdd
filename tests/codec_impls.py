"""The two codec implementations every codec test runs against (Cython and the pure-Python oracle)."""

import pytest

from bkfast import _codec, _refcodec

IMPLEMENTATIONS = [pytest.param(_codec, id="cython"), pytest.param(_refcodec, id="reference")]


def entry_fields(entry):
    return (entry.format_version, entry.scope_id, entry.ledger_id, entry.entry_id,
            entry.last_add_confirmed, entry.length, bytes(entry.digest), bytes(entry.payload))
