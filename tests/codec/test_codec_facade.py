"""`bkfast.codec` is the implementation the environment asks for, and the client's hot path is not.

The Makefile runs the codec and in-process client/server tests a second time with BKFAST_PURE_CODEC=1;
these checks make that second run fail if it did not really run on the pure twin, and make both runs
fail if the Cython client path followed the facade to the twin.
"""

import os

from bkfast import _clientpath, _codec, _refcodec, codec


def test_the_facade_is_the_implementation_the_environment_selects():
    pure = os.environ.get("BKFAST_PURE_CODEC") == "1"
    assert codec.IMPLEMENTATION == ("python" if pure else "cython")
    assert codec.verify_entry_at is (_refcodec if pure else _codec).verify_entry_at


def test_the_client_path_verifies_with_the_cython_codec_in_both_modes():
    assert _clientpath.verify_entry_at is _codec.verify_entry_at
