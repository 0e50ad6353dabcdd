"""The codec bkfast uses: entries, digests, LAC buffers, v2 frames, frame splitting and building.

Re-exports the Cython implementation (`bkfast._codec`). `BKFAST_PURE_CODEC=1` in the environment
selects the pure-Python reference (`bkfast._refcodec`) instead, for debugging; the two give the same
answers for every input (the test suite checks this against Java-made vectors and random data).
"""

from __future__ import annotations

import os

from bkfast.digests import (  # noqa: F401 - re-exported: one import gives the whole codec API
    DIGEST_LENGTH,
    EMPTY_PASSWORD_MASTER_KEY,
    MASTER_KEY_LENGTH,
    DigestType,
    mac_key,
    master_key,
)

if os.environ.get("BKFAST_PURE_CODEC") == "1":
    from bkfast import _refcodec as _impl
else:
    from bkfast import _codec as _impl

IMPLEMENTATION = "python" if _impl.__name__.endswith("_refcodec") else "cython"

# Wire constants (BookieProtocol's names).
OP_ADD = _impl.OP_ADD
OP_READ = _impl.OP_READ
OP_AUTH = _impl.OP_AUTH
OP_READ_LAC = _impl.OP_READ_LAC
OP_WRITE_LAC = _impl.OP_WRITE_LAC
OP_GET_BOOKIE_INFO = _impl.OP_GET_BOOKIE_INFO
OP_BATCH_READ = _impl.OP_BATCH_READ
FLAG_NONE = _impl.FLAG_NONE
FLAG_DO_FENCING = _impl.FLAG_DO_FENCING
FLAG_RECOVERY_ADD = _impl.FLAG_RECOVERY_ADD
FLAG_HIGH_PRIORITY = _impl.FLAG_HIGH_PRIORITY
CURRENT_PROTOCOL_VERSION = _impl.CURRENT_PROTOCOL_VERSION
DEFAULT_MAX_FRAME_SIZE = _impl.DEFAULT_MAX_FRAME_SIZE
CRC32C_HARDWARE = _impl.CRC32C_HARDWARE

digest_size = _impl.digest_size
encode_entry = _impl.encode_entry
decode_entry = _impl.decode_entry
verify_entry_at = _impl.verify_entry_at
peek_entry_ids = _impl.peek_entry_ids
encode_lac = _impl.encode_lac
decode_lac = _impl.decode_lac
encode_packet_header = _impl.encode_packet_header
decode_packet_header = _impl.decode_packet_header
encode_add_request = _impl.encode_add_request
encode_add_request_for_entry = _impl.encode_add_request_for_entry
encode_read_request = _impl.encode_read_request
encode_batch_read_request = _impl.encode_batch_read_request
encode_auth = _impl.encode_auth
encode_add_response = _impl.encode_add_response
encode_read_response = _impl.encode_read_response
encode_batch_read_response = _impl.encode_batch_read_response
decode_request = _impl.decode_request
decode_v2_adds = _impl.decode_v2_adds
decode_v3_adds = _impl.decode_v3_adds
decode_v3_answer = _impl.decode_v3_answer
serve_v2_reads = _impl.serve_v2_reads
serve_v3_reads = _impl.serve_v3_reads
decode_response = _impl.decode_response
FrameSplitter = _impl.FrameSplitter
FrameBuilder = _impl.FrameBuilder

