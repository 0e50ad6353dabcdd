# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Entry format, digests and the v2 wire protocol of BookKeeper, in Cython (the hot path).

Owns: packing and verifying entries (format v1 for scope 0, v2 for scoped 128-bit ids) with CRC32,
CRC32C, HMAC-SHA1 or no digest; explicit-LAC buffers; encoding and decoding every v2 request and
response; the streaming frame splitter (max frame size enforced before a body is buffered) and the frame
builder that coalesces many responses into one buffer.

Must never: touch sockets or files, import bkfast modules other than the leaf `bkfast.errors`, or accept
a malformed buffer silently. `bkfast._refcodec` is the pure-Python twin of this module: same functions,
same answers, used as a test oracle and as the benchmark baseline.

Digest types are plain ints in LedgerMetadataFormat's numbering (see bkfast.digests.DigestType).
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, int32_t
from libc.string cimport memcmp, memcpy, memmove

from bkfast._bigendian cimport get_i32, get_i64, get_u32, get_u64, put_u32, put_u64
from bkfast._entryheader cimport peek_ids
from bkfast._addsink cimport AddSink, TakenAdd
from bkfast._entrysource cimport EntrySource
from bkfast._protowire cimport pw_put_varint, pw_varint_size

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

cdef extern from "_crc.h":
    void bk_crc_init()
    uint32_t bk_crc32c(uint32_t crc, const uint8_t *p, size_t n) nogil
    uint32_t bk_crc32(uint32_t crc, const uint8_t *p, size_t n) nogil
    int bk_crc32c_is_hardware()

bk_crc_init()

# --- constants (BookKeeper's names) -----------------------------------------------------------------
cdef enum:
    DIGEST_CRC32 = 1
    DIGEST_MAC = 2
    DIGEST_CRC32C = 3
    DIGEST_DUMMY = 4
    METADATA_LENGTH = 32          # v1 entry header: ledger, entry, lac, length
    SCOPED_METADATA_LENGTH = 41   # v2 entry header: flags, scope, ledger, entry, lac, length
    LAC_METADATA_LENGTH = 16
    SCOPED_LAC_METADATA_LENGTH = 25
    MASTER_KEY_LENGTH = 20
    RESPONSE_HEADERS_SIZE = 24
    HMAC_TEMPLATE_CACHE = 4096
    ZLIB_CRC32_MIN_BYTES = 512
    CRC32C_LIBRARY_MIN_BYTES = 8192
    C_OP_ADD = 1                  # OP_ADD for C comparisons (a module constant is a Python lookup)

OP_ADD = 1
OP_READ = 2
OP_AUTH = 3
OP_READ_LAC = 4
OP_WRITE_LAC = 5
OP_GET_BOOKIE_INFO = 6
OP_BATCH_READ = 7

FLAG_NONE = 0
FLAG_DO_FENCING = 1
FLAG_RECOVERY_ADD = 2
FLAG_HIGH_PRIORITY = 4

CURRENT_PROTOCOL_VERSION = 2
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024

CRC32C_HARDWARE = bool(bk_crc32c_is_hardware())

cdef inline int digest_length(int digest_type) except -1:
    if digest_type == DIGEST_CRC32C:
        return 4
    if digest_type == DIGEST_CRC32:
        return 8
    if digest_type == DIGEST_MAC:
        return 20
    if digest_type == DIGEST_DUMMY:
        return 0
    raise ValueError(f"unknown digest type {digest_type}; expected 1 (CRC32), 2 (MAC), 3 (CRC32C), 4 (DUMMY)")


def digest_size(int digest_type):
    """Bytes the digest of this type takes in an entry."""
    return digest_length(digest_type)


# --- HMAC-SHA1 ------------------------------------------------------------------------------------
# OpenSSL's HMAC through hashlib: the keyed template is built once per MAC key and copied per entry.
try:
    from _hashlib import hmac_new as _hmac_new

    def _new_hmac(key):
        return _hmac_new(key, digestmod="sha1")
except ImportError:  # an interpreter built without OpenSSL
    import hmac as _hmac_mod

    def _new_hmac(key):
        return _hmac_mod.new(key, digestmod="sha1")

cdef dict _hmac_templates = {}


cdef object _hmac_template(object key):
    t = _hmac_templates.get(key)
    if t is None:
        if len(_hmac_templates) >= HMAC_TEMPLATE_CACHE:
            _hmac_templates.clear()
        t = _new_hmac(bytes(key))
        _hmac_templates[bytes(key)] = t
    return t


cdef bytes _hmac_sha1(object key, const uint8_t *header, Py_ssize_t header_len, object payload):
    h = _hmac_template(key).copy()
    h.update(PyBytes_FromStringAndSize(<const char*>header, header_len))
    if payload is not None:
        h.update(payload)
    return h.digest()


# --- digest computation ----------------------------------------------------------------------------
from zlib import crc32 as _zlib_crc32

from crc32c import crc32c as _crc32c_lib


cdef inline uint32_t crc32_payload(uint32_t crc, const uint8_t *payload, Py_ssize_t payload_len,
                                   object payload_obj) except? 0:
    # zlib's CRC-32 is about twice as fast as our table once a payload is a few hundred bytes, and it
    # releases the GIL on big inputs; the 32-40 byte header stays in C.
    if payload_len >= ZLIB_CRC32_MIN_BYTES and payload_obj is not None:
        return <uint32_t>_zlib_crc32(payload_obj, crc)
    return bk_crc32(crc, payload, payload_len)


cdef inline uint32_t crc32c_payload(uint32_t crc, const uint8_t *payload, Py_ssize_t payload_len,
                                    object payload_obj) except? 0:
    # Our SSE4.2 loop is one dependency chain (~8 GB/s); the crc32c package interleaves three (~25 GB/s)
    # and releases the GIL past 32 KiB, which pays for its call overhead on big payloads.
    if payload_len >= CRC32C_LIBRARY_MIN_BYTES and payload_obj is not None:
        return <uint32_t>_crc32c_lib(payload_obj, crc)
    return bk_crc32c(crc, payload, payload_len)


cdef int write_digest(int digest_type, object mac_key, uint8_t *out, Py_ssize_t header_len,
                      const uint8_t *payload, Py_ssize_t payload_len, object payload_obj) except -1:
    """Compute the digest over out[0:header_len] || payload and write it at out + header_len."""
    cdef uint32_t crc
    cdef bytes mac
    if digest_type == DIGEST_CRC32C:
        put_u32(out + header_len, crc32c_payload(bk_crc32c(0, out, header_len), payload, payload_len,
                                                 payload_obj))
    elif digest_type == DIGEST_CRC32:
        crc = crc32_payload(bk_crc32(0, out, header_len), payload, payload_len, payload_obj)
        put_u32(out + header_len, 0)
        put_u32(out + header_len + 4, crc)
    elif digest_type == DIGEST_MAC:
        mac = _hmac_sha1(mac_key, out, header_len, payload_obj if payload_len else None)
        memcpy(out + header_len, PyBytes_AS_STRING(mac), 20)
    elif digest_type != DIGEST_DUMMY:
        digest_length(digest_type)
    return 0


cdef bint digest_matches(int digest_type, object mac_key, const uint8_t *data, Py_ssize_t header_len,
                         const uint8_t *payload, Py_ssize_t payload_len, object payload_obj) except -1:
    """True when the digest stored at data + header_len is right for data[0:header_len] || payload."""
    cdef uint32_t crc
    cdef bytes mac
    cdef const uint8_t *stored = data + header_len
    if digest_type == DIGEST_CRC32C:
        return get_u32(stored) == crc32c_payload(bk_crc32c(0, data, header_len), payload, payload_len,
                                                  payload_obj)
    if digest_type == DIGEST_CRC32:
        crc = crc32_payload(bk_crc32(0, data, header_len), payload, payload_len, payload_obj)
        # Java writes the CRC as a long; its upper four bytes are always zero.
        return get_u32(stored) == 0 and get_u32(stored + 4) == crc
    if digest_type == DIGEST_MAC:
        mac = _hmac_sha1(mac_key, data, header_len, payload_obj if payload_len else None)
        return memcmp(PyBytes_AS_STRING(mac), stored, 20) == 0
    if digest_type == DIGEST_DUMMY:
        return True
    digest_length(digest_type)
    return False


cdef inline void check_mac_key(int digest_type, object mac_key) except *:
    if digest_type == DIGEST_MAC and (mac_key is None or len(mac_key) == 0):
        raise ValueError("a MAC digest needs the ledger's MAC key (bkfast.digests.mac_key(password))")


# --- entries ---------------------------------------------------------------------------------------
cdef Py_ssize_t write_entry_header(uint8_t *out, uint64_t scope_id, int digest_type, int64_t ledger_id,
                                   int64_t entry_id, int64_t lac, int64_t length) noexcept:
    """Write the v1 (scope 0) or v2 (scoped) entry header; return its length."""
    if scope_id == 0:
        put_u64(out, <uint64_t>ledger_id)
        put_u64(out + 8, <uint64_t>entry_id)
        put_u64(out + 16, <uint64_t>lac)
        put_u64(out + 24, <uint64_t>length)
        return METADATA_LENGTH
    out[0] = <uint8_t>(0x80 | digest_type)
    put_u64(out + 1, scope_id)
    put_u64(out + 9, <uint64_t>ledger_id)
    put_u64(out + 17, <uint64_t>entry_id)
    put_u64(out + 25, <uint64_t>lac)
    put_u64(out + 33, <uint64_t>length)
    return SCOPED_METADATA_LENGTH


cdef inline int check_entry_args(int digest_type, object mac_key, int64_t ledger_id) except -1:
    check_mac_key(digest_type, mac_key)
    if ledger_id < 0:
        raise ValueError(f"ledger id {ledger_id} is negative")
    return 0


cdef int put_entry(uint8_t *out, uint64_t scope_id, int digest_type, object mac_key, int64_t ledger_id,
                   int64_t entry_id, int64_t lac, int64_t length, Py_buffer *view, object payload) except -1:
    """An entry (header, digest, payload) at `out`, which has room for it; `view` is `payload`'s buffer.
    Every packaging of a new entry (alone, in a v2 or in a v3 ADD frame) writes it here."""
    cdef Py_ssize_t hlen = write_entry_header(out, scope_id, digest_type, ledger_id, entry_id, lac, length)
    if view.len:
        memcpy(out + hlen + digest_length(digest_type), view.buf, view.len)
    write_digest(digest_type, mac_key, out, hlen, <const uint8_t*>view.buf, view.len, payload)
    return 0


cdef bytes build_entry(Py_ssize_t prefix_len, int64_t ledger_id, int64_t entry_id, int64_t lac,
                       int64_t length, object payload, int digest_type, object mac_key, uint64_t scope_id):
    """One allocation: prefix_len bytes left for the caller, then header, digest and payload."""
    cdef Py_buffer view
    cdef int dlen = digest_length(digest_type)
    cdef Py_ssize_t hlen = SCOPED_METADATA_LENGTH if scope_id else METADATA_LENGTH
    cdef bytes out
    cdef uint8_t *p
    check_entry_args(digest_type, mac_key, ledger_id)
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        out = PyBytes_FromStringAndSize(NULL, prefix_len + hlen + dlen + view.len)
        p = <uint8_t*>PyBytes_AS_STRING(out) + prefix_len
        put_entry(p, scope_id, digest_type, mac_key, ledger_id, entry_id, lac, length, &view, payload)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_entry(int64_t ledger_id, int64_t entry_id, int64_t last_add_confirmed, int64_t length,
                 payload, int digest_type, mac_key=b"", uint64_t scope_id=0):
    """Package an entry as a client sends it: header, digest, payload (one buffer).

    `length` is the ledger length including this entry's payload; `mac_key` is needed only for MAC.
    Scope 0 gives the v1 format (32-byte header), any other scope the v2 format (41-byte header).
    """
    return build_entry(0, ledger_id, entry_id, last_add_confirmed, length, payload, digest_type,
                       mac_key, scope_id)


def encode_add_request(master_key, int64_t ledger_id, int64_t entry_id, int64_t last_add_confirmed,
                       int64_t length, payload, int digest_type, mac_key=b"", int flags=0,
                       int version=CURRENT_PROTOCOL_VERSION):
    """A complete v2 ADD frame (length prefix included) for a new entry, built in one buffer."""
    cdef bytes out
    cdef uint8_t *p
    master_key = _master_key_bytes(master_key)
    out = build_entry(8 + MASTER_KEY_LENGTH, ledger_id, entry_id, last_add_confirmed, length, payload,
                      digest_type, mac_key, 0)
    p = <uint8_t*>PyBytes_AS_STRING(out)
    put_u32(p, <uint32_t>(len(out) - 4))
    put_u32(p + 4, packet_header(version, OP_ADD, flags))
    memcpy(p + 8, <const char*>master_key, MASTER_KEY_LENGTH)
    return out


cdef class Entry:
    """A verified entry. `payload` is a zero-copy view into the decoded buffer."""

    cdef readonly int format_version
    cdef readonly object scope_id
    cdef readonly int64_t ledger_id
    cdef readonly int64_t entry_id
    cdef readonly int64_t last_add_confirmed
    cdef readonly int64_t length
    cdef readonly bytes digest
    cdef readonly object payload

    def __repr__(self):
        return (f"Entry(scope_id={self.scope_id}, ledger_id={self.ledger_id}, entry_id={self.entry_id}, "
                f"last_add_confirmed={self.last_add_confirmed}, length={self.length}, "
                f"payload=<{len(self.payload)} bytes>)")


cdef inline Py_ssize_t entry_header_length(const uint8_t *p, Py_ssize_t n, int digest_type) except -1:
    """Header length of the entry at p, after checking its format byte against the digest type."""
    cdef int rev
    if n >= 1 and (p[0] & 0x80):
        rev = (p[0] >> 4) & 0x07
        if rev != 0:
            raise EntryFormatError(f"entry format v2 revision {rev} is not supported (only 0)")
        if (p[0] & 0x0F) != digest_type:
            raise EntryFormatError(
                f"entry says digest type {p[0] & 0x0F}, the ledger uses digest type {digest_type}")
        return SCOPED_METADATA_LENGTH
    return METADATA_LENGTH


def decode_entry(data, int digest_type, mac_key=b"", expected_ledger_id=None, expected_entry_id=None,
                 expected_scope_id=None):
    """Verify an entry and return its fields; the payload is a view into `data` (no copy).

    Verification order is BookKeeper's: the digest first, then the ledger id, then the entry id (pass
    None to skip an id check, as a read of the last entry does). Raises TruncatedEntryError,
    EntryFormatError, DigestMismatchError, LedgerIdMismatchError or EntryIdMismatchError.
    """
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, hlen, dlen
    cdef Entry e
    cdef object mv
    check_mac_key(digest_type, mac_key)
    dlen = digest_length(digest_type)
    mv = memoryview(data)
    PyObject_GetBuffer(mv, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        hlen = entry_header_length(p, n, digest_type)
        if n < hlen + dlen:
            raise TruncatedEntryError(
                f"entry of {n} bytes is shorter than its {hlen}-byte header and {dlen}-byte digest")
        payload = mv[hlen + dlen:]
        if not digest_matches(digest_type, mac_key, p, hlen, p + hlen + dlen, n - hlen - dlen, payload):
            raise DigestMismatchError(
                f"digest mismatch for ledger {get_i64(p + hlen - 32)} entry {get_i64(p + hlen - 24)}")
        e = Entry.__new__(Entry)
        if hlen == SCOPED_METADATA_LENGTH:
            e.format_version = 2
            e.scope_id = get_u64(p + 1)
        else:
            e.format_version = 1
            e.scope_id = 0
        e.ledger_id = get_i64(p + hlen - 32)
        e.entry_id = get_i64(p + hlen - 24)
        e.last_add_confirmed = get_i64(p + hlen - 16)
        e.length = get_i64(p + hlen - 8)
        e.digest = PyBytes_FromStringAndSize(<const char*>p + hlen, dlen)
        e.payload = payload
    finally:
        PyBuffer_Release(&view)
    if expected_scope_id is not None and e.scope_id != expected_scope_id:
        raise LedgerIdMismatchError(
            f"entry belongs to scope {e.scope_id}, expected scope {expected_scope_id}")
    if expected_ledger_id is not None and e.ledger_id != expected_ledger_id:
        raise LedgerIdMismatchError(f"entry belongs to ledger {e.ledger_id}, expected ledger {expected_ledger_id}")
    if expected_entry_id is not None and e.entry_id != expected_entry_id:
        raise EntryIdMismatchError(
            f"ledger {e.ledger_id}: got entry {e.entry_id}, expected entry {expected_entry_id}")
    return e


def verify_entry_at(data, Py_ssize_t offset, int digest_type, mac_key, int64_t ledger_id, int64_t entry_id,
                    scope_id=0):
    """decode_entry of data[offset:] with every id checked (scope, ledger, entry), as a reader needs it:
    returns (payload as its own bytes, length, last_add_confirmed), copying the payload once and making
    no other object (the client's read path; `data` is e.g. a whole v2 READ response frame)."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, hlen, dlen
    cdef uint64_t got_scope
    cdef int64_t got_ledger, got_entry, lac, length
    cdef bytes payload
    check_mac_key(digest_type, mac_key)
    dlen = digest_length(digest_type)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset > view.len:
            raise TruncatedEntryError(f"entry offset {offset} is outside a buffer of {view.len} bytes")
        p = <const uint8_t*>view.buf + offset
        n = view.len - offset
        hlen = entry_header_length(p, n, digest_type)
        if n < hlen + dlen:
            raise TruncatedEntryError(
                f"entry of {n} bytes is shorter than its {hlen}-byte header and {dlen}-byte digest")
        payload = PyBytes_FromStringAndSize(<const char*>p + hlen + dlen, n - hlen - dlen)
        if not digest_matches(digest_type, mac_key, p, hlen, <const uint8_t*>PyBytes_AS_STRING(payload),
                              n - hlen - dlen, payload):
            raise DigestMismatchError(
                f"digest mismatch for ledger {get_i64(p + hlen - 32)} entry {get_i64(p + hlen - 24)}")
        got_scope = get_u64(p + 1) if hlen == SCOPED_METADATA_LENGTH else 0
        got_ledger = get_i64(p + hlen - 32)
        got_entry = get_i64(p + hlen - 24)
        lac = get_i64(p + hlen - 16)
        length = get_i64(p + hlen - 8)
    finally:
        PyBuffer_Release(&view)
    if got_scope != scope_id:
        raise LedgerIdMismatchError(f"entry belongs to scope {got_scope}, expected scope {scope_id}")
    if got_ledger != ledger_id:
        raise LedgerIdMismatchError(f"entry belongs to ledger {got_ledger}, expected ledger {ledger_id}")
    if got_entry != entry_id:
        raise EntryIdMismatchError(f"ledger {got_ledger}: got entry {got_entry}, expected entry {entry_id}")
    return payload, length, lac


def peek_entry_ids(data):
    """(format version, scope id, ledger id, entry id) of a stored entry, without verifying anything.

    A bookie does this on every add: it stores entries verbatim and never knows the digest type.
    """
    cdef Py_buffer view
    cdef uint64_t scope_id
    cdef int64_t ledger_id, entry_id
    cdef int version
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        version = peek_ids(<const uint8_t*>view.buf, view.len, &scope_id, &ledger_id, &entry_id)
        if version < 0:
            scoped = view.len >= 1 and ((<const uint8_t*>view.buf)[0] & 0x80)
            raise TruncatedEntryError(f"{'scoped entry' if scoped else 'entry'} of {view.len} bytes is too "
                                      "short for its ids")
        return version, scope_id, ledger_id, entry_id
    finally:
        PyBuffer_Release(&view)


# --- explicit LAC buffers ---------------------------------------------------------------------------
def encode_lac(int64_t ledger_id, int64_t last_add_confirmed, int digest_type, mac_key=b"",
               uint64_t scope_id=0):
    """The explicit-LAC buffer: ledger id, LAC and a digest over them (scoped layout for scope != 0)."""
    cdef int dlen = digest_length(digest_type)
    cdef Py_ssize_t hlen
    cdef bytes out
    cdef uint8_t *p
    check_mac_key(digest_type, mac_key)
    hlen = SCOPED_LAC_METADATA_LENGTH if scope_id else LAC_METADATA_LENGTH
    out = PyBytes_FromStringAndSize(NULL, hlen + dlen)
    p = <uint8_t*>PyBytes_AS_STRING(out)
    if scope_id:
        p[0] = <uint8_t>(0x80 | digest_type)
        put_u64(p + 1, scope_id)
        put_u64(p + 9, <uint64_t>ledger_id)
        put_u64(p + 17, <uint64_t>last_add_confirmed)
    else:
        put_u64(p, <uint64_t>ledger_id)
        put_u64(p + 8, <uint64_t>last_add_confirmed)
    write_digest(digest_type, mac_key, p, hlen, NULL, 0, None)
    return out


def decode_lac(data, int digest_type, mac_key=b"", expected_ledger_id=None, expected_scope_id=None):
    """Verify an explicit-LAC buffer; return (scope_id, ledger_id, last_add_confirmed)."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t hlen
    cdef int dlen = digest_length(digest_type)
    check_mac_key(digest_type, mac_key)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        if view.len >= 1 and (p[0] & 0x80):
            if ((p[0] >> 4) & 0x07) != 0 or (p[0] & 0x0F) != digest_type:
                raise EntryFormatError(f"LAC buffer format byte {p[0]:#04x} does not match digest type {digest_type}")
            hlen = SCOPED_LAC_METADATA_LENGTH
        else:
            hlen = LAC_METADATA_LENGTH
        if view.len < hlen + dlen:
            raise TruncatedEntryError(f"LAC buffer of {view.len} bytes is shorter than {hlen + dlen}")
        if not digest_matches(digest_type, mac_key, p, hlen, NULL, 0, None):
            raise DigestMismatchError(f"LAC digest mismatch for ledger {get_i64(p + hlen - 16)}")
        scope = get_u64(p + 1) if hlen == SCOPED_LAC_METADATA_LENGTH else 0
        ledger_id = get_i64(p + hlen - 16)
        lac = get_i64(p + hlen - 8)
    finally:
        PyBuffer_Release(&view)
    if expected_scope_id is not None and scope != expected_scope_id:
        raise LedgerIdMismatchError(f"LAC buffer belongs to scope {scope}, expected {expected_scope_id}")
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise LedgerIdMismatchError(f"LAC buffer belongs to ledger {ledger_id}, expected {expected_ledger_id}")
    return scope, ledger_id, lac


# --- v2 wire protocol ------------------------------------------------------------------------------
cdef bytes _master_key_bytes(object master_key):
    cdef bytes key = master_key if type(master_key) is bytes else bytes(master_key)
    if len(key) != MASTER_KEY_LENGTH:
        raise ValueError(f"master key must be {MASTER_KEY_LENGTH} bytes, got {len(key)}")
    return key


cdef inline uint32_t packet_header(int version, int opcode, int flags) noexcept:
    return ((<uint32_t>version & 0xFF) << 24) | ((<uint32_t>opcode & 0xFF) << 16) | (<uint32_t>flags & 0xFFFF)


def encode_packet_header(int version, int opcode, int flags):
    return packet_header(version, opcode, flags)


cdef inline void split_header(uint32_t header, int *version, int *opcode, int *flags) noexcept nogil:
    version[0] = <int>(header >> 24)
    if version[0] == 0:
        # Legacy form: the whole int is the opcode and there are no flags.
        opcode[0] = <int>(header & 0xFF)
        flags[0] = 0
    else:
        opcode[0] = <int>((header >> 16) & 0xFF)
        flags[0] = <int>(header & 0xFFFF)


def decode_packet_header(uint32_t header):
    """(version, opcode, flags) of a v2 packet header int."""
    cdef int version, opcode, flags
    split_header(header, &version, &opcode, &flags)
    return version, opcode, flags


cdef bytes read_frame(Py_ssize_t fixed_len, int version, int opcode, int flags, object master_key,
                      int64_t ledger_id, int64_t entry_id):
    """A READ or BATCH_READ frame: `fixed_len` body bytes, then the master key when it fences (v2 and up).
    Both start with the header, the ledger and the (first) entry, written here; the caller writes the rest."""
    cdef bint with_key = (flags & FLAG_DO_FENCING) and version >= 2
    cdef Py_ssize_t body = fixed_len + (MASTER_KEY_LENGTH if with_key else 0)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4 + body)
    cdef uint8_t *p = <uint8_t*>PyBytes_AS_STRING(out)
    put_u32(p, <uint32_t>body)
    if with_key:
        if master_key is None:
            raise ValueError(f"a fencing request needs a {MASTER_KEY_LENGTH}-byte master key")
        master_key = _master_key_bytes(master_key)
        memcpy(p + 4 + fixed_len, <const char*>master_key, MASTER_KEY_LENGTH)
    put_u32(p + 4, packet_header(version, opcode, flags))
    put_u64(p + 8, <uint64_t>ledger_id)
    put_u64(p + 16, <uint64_t>entry_id)
    return out


def encode_read_request(int64_t ledger_id, int64_t entry_id, int flags=0, master_key=None,
                        int version=CURRENT_PROTOCOL_VERSION):
    """v2 READ frame; entry -1 asks for the last entry; DO_FENCING carries the master key."""
    return read_frame(20, version, OP_READ, flags, master_key, ledger_id, entry_id)


def encode_batch_read_request(int64_t ledger_id, int64_t start_entry_id, int64_t request_id,
                              int32_t max_count, int64_t max_size, int flags=0, master_key=None,
                              int version=CURRENT_PROTOCOL_VERSION):
    """v2 BATCH_READ frame (BookKeeper 4.17+)."""
    cdef bytes out = read_frame(40, version, OP_BATCH_READ, flags, master_key, ledger_id, start_entry_id)
    cdef uint8_t *p = <uint8_t*>PyBytes_AS_STRING(out)
    put_u64(p + 24, <uint64_t>request_id)
    put_u32(p + 32, <uint32_t>max_count)
    put_u64(p + 36, <uint64_t>max_size)
    return out


def encode_add_request_for_entry(master_key, entry, int flags=0, int version=CURRENT_PROTOCOL_VERSION):
    """v2 ADD frame around an already packaged entry (as a recovery add or a replication worker sends)."""
    cdef Py_buffer view
    cdef bytes out
    cdef uint8_t *p
    master_key = _master_key_bytes(master_key)
    PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE)
    try:
        out = PyBytes_FromStringAndSize(NULL, 8 + MASTER_KEY_LENGTH + view.len)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        put_u32(p, <uint32_t>(4 + MASTER_KEY_LENGTH + view.len))
        put_u32(p + 4, packet_header(version, OP_ADD, flags))
        memcpy(p + 8, <const char*>master_key, MASTER_KEY_LENGTH)
        memcpy(p + 8 + MASTER_KEY_LENGTH, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_auth(auth_message, int version=CURRENT_PROTOCOL_VERSION):
    """v2 AUTH frame (request or response: both are header + serialized AuthMessage)."""
    cdef Py_buffer view
    cdef bytes out
    cdef uint8_t *p
    PyObject_GetBuffer(auth_message, &view, PyBUF_SIMPLE)
    try:
        out = PyBytes_FromStringAndSize(NULL, 8 + view.len)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        put_u32(p, <uint32_t>(4 + view.len))
        put_u32(p + 4, packet_header(version, OP_AUTH, 0))
        memcpy(p + 8, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_add_response(int rc, int64_t ledger_id, int64_t entry_id, int version=CURRENT_PROTOCOL_VERSION):
    """v2 ADD response: always a 24-byte body."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4 + RESPONSE_HEADERS_SIZE)
    write_response_header(<uint8_t*>PyBytes_AS_STRING(out), RESPONSE_HEADERS_SIZE, version, OP_ADD, rc,
                          ledger_id, entry_id)
    return out


def encode_read_response(int rc, int64_t ledger_id, int64_t entry_id, data=b"",
                         int version=CURRENT_PROTOCOL_VERSION):
    """v2 READ response: 24-byte header, then the stored entry (EOK) or nothing (errors)."""
    cdef Py_buffer view
    cdef bytes out
    cdef uint8_t *p
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        out = PyBytes_FromStringAndSize(NULL, 4 + RESPONSE_HEADERS_SIZE + view.len)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        write_response_header(p, RESPONSE_HEADERS_SIZE + view.len, version, OP_READ, rc, ledger_id, entry_id)
        memcpy(p + 4 + RESPONSE_HEADERS_SIZE, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def encode_batch_read_response(int rc, int64_t ledger_id, int64_t start_entry_id, int64_t request_id,
                               entries=(), int version=CURRENT_PROTOCOL_VERSION):
    """v2 BATCH_READ response: header, rc, ids, request id, then (int length, entry) per entry."""
    cdef FrameBuilder b = FrameBuilder()
    b.add_batch_read_response(rc, ledger_id, start_entry_id, request_id, entries, version)
    return b.take()


cdef inline void write_response_header(uint8_t *p, Py_ssize_t body_len, int version, int opcode, int rc,
                                       int64_t ledger_id, int64_t entry_id) noexcept:
    put_u32(p, <uint32_t>body_len)
    put_u32(p + 4, packet_header(version, opcode, 0))
    put_u32(p + 8, <uint32_t>rc)
    put_u64(p + 12, <uint64_t>ledger_id)
    put_u64(p + 20, <uint64_t>entry_id)


cdef class V2Request:
    """A decoded v2 request. `entry` (ADD) is a view into the frame: the stored entry, verbatim."""

    cdef readonly int version
    cdef readonly int opcode
    cdef readonly int flags
    cdef readonly int64_t ledger_id
    cdef readonly int64_t entry_id
    cdef readonly object scope_id
    cdef readonly int entry_format
    cdef readonly object master_key
    cdef readonly object entry
    cdef readonly int64_t request_id
    cdef readonly int32_t max_count
    cdef readonly int64_t max_size
    cdef readonly object auth_message

    def __repr__(self):
        return (f"V2Request(version={self.version}, opcode={self.opcode}, flags={self.flags}, "
                f"ledger_id={self.ledger_id}, entry_id={self.entry_id})")


cdef inline int need(Py_ssize_t n, Py_ssize_t wanted, str what) except -1:
    if n < wanted:
        raise MalformedFrameError(f"{what} frame body of {n} bytes is shorter than {wanted}")
    return 0


cdef int read_read_request(V2Request r, const uint8_t *p, Py_ssize_t n, Py_ssize_t fixed_len,
                           str what) except -1:
    """What READ and BATCH_READ share (read_frame writes it): the ledger and the (first) entry after the
    header and, when the request fences (v2 and up), the master key after its `fixed_len` bytes."""
    need(n, fixed_len, what)
    r.ledger_id = get_i64(p + 4)
    r.entry_id = get_i64(p + 12)
    if (r.flags & FLAG_DO_FENCING) and r.version >= 2:
        need(n, fixed_len + MASTER_KEY_LENGTH, f"fencing {what}")
        r.master_key = PyBytes_FromStringAndSize(<const char*>p + fixed_len, MASTER_KEY_LENGTH)
    return 0


cdef int read_add_request(V2Request r, object mv, const uint8_t *p, Py_ssize_t n) except -1:
    """An ADD request's master key and entry, and its ids from the entry's header (format v1 or v2)."""
    need(n, 4 + MASTER_KEY_LENGTH + 16, "ADD")
    r.master_key = PyBytes_FromStringAndSize(<const char*>p + 4, MASTER_KEY_LENGTH)
    r.entry = mv[4 + MASTER_KEY_LENGTH:]
    p += 4 + MASTER_KEY_LENGTH
    if p[0] & 0x80:
        need(n, 4 + MASTER_KEY_LENGTH + 25, "ADD")
        r.entry_format = 2
        r.scope_id = get_u64(p + 1)
        r.ledger_id = get_i64(p + 9)
        r.entry_id = get_i64(p + 17)
    else:
        r.ledger_id = get_i64(p)
        r.entry_id = get_i64(p + 8)
    return 0


def decode_request(frame):
    """Decode a v2 request body (the bytes after the length prefix).

    Raises UnknownOpcodeError for opcodes the v2 protocol does not carry (a bookie closes the
    connection, as Java does) and MalformedFrameError for bodies too short for their opcode. The
    protocol version is returned, not checked: the bookie answers EBADVERSION itself.
    """
    return _decode_v2(frame, True)


cdef object _decode_v2(object frame, bint request):
    """The frame's buffer, borrowed while the decoder of its kind (request or response) reads the body
    after the header both kinds start with."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n
    cdef int version, opcode, flags
    mv = memoryview(frame)
    PyObject_GetBuffer(mv, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        need(n, 4, "v2 request" if request else "v2 response")
        split_header(get_u32(p), &version, &opcode, &flags)
        if request:
            return _request_body(mv, p, n, version, opcode, flags)
        return _response_body(mv, p, n, version, opcode)
    finally:
        PyBuffer_Release(&view)


cdef V2Request _request_body(object mv, const uint8_t *p, Py_ssize_t n, int version, int opcode, int flags):
    cdef V2Request r = V2Request.__new__(V2Request)
    r.version = version
    r.opcode = opcode
    r.flags = flags
    r.scope_id = 0
    r.entry_format = 1
    if opcode == OP_ADD:
        read_add_request(r, mv, p, n)
    elif opcode == OP_READ:
        read_read_request(r, p, n, 20, "READ")
    elif opcode == OP_BATCH_READ:
        read_read_request(r, p, n, 40, "BATCH_READ")
        r.request_id = get_i64(p + 20)
        r.max_count = get_i32(p + 28)
        r.max_size = get_i64(p + 32)
    elif opcode == OP_AUTH:
        r.auth_message = bytes(mv[4:])
    else:
        raise UnknownOpcodeError(f"v2 opcode {opcode} is not accepted by a bookie (only 1, 2, 3, 7)")
    return r


def decode_v2_adds(list frames, Py_ssize_t start=0):
    """Decode the run of plain v2 ADD requests that starts at frames[start] (a server's batch path).

    Returns (adds, ids, end): for each decoded frame, adds gets (entry bytes, master key bytes,
    recovery, high_priority) and ids gets (ledger_id, entry_id, version); `end` is the index of the
    first frame not decoded: one that is not bytes, not an ADD, of version > 2, with a scoped entry, or
    too short. The caller hands that frame to decode_request, which gives the exact error. Frames that
    carry the same master key as the previous one share its bytes object.
    """
    cdef Py_ssize_t i = start, n = len(frames), flen
    cdef list adds = [], ids = []
    cdef bytes frame
    cdef object key = None
    cdef const uint8_t *p
    cdef int version, opcode, flags
    while i < n:
        obj = frames[i]
        if type(obj) is not bytes:
            break
        frame = <bytes>obj
        flen = PyBytes_GET_SIZE(frame)
        if flen < 4 + MASTER_KEY_LENGTH + 16:
            break
        p = <const uint8_t*>PyBytes_AS_STRING(frame)
        split_header(get_u32(p), &version, &opcode, &flags)
        if opcode != OP_ADD or version < 0 or version > 2 or (p[4 + MASTER_KEY_LENGTH] & 0x80):
            break
        if key is None or memcmp(PyBytes_AS_STRING(key), p + 4, MASTER_KEY_LENGTH) != 0:
            key = PyBytes_FromStringAndSize(<const char*>p + 4, MASTER_KEY_LENGTH)
        adds.append((PyBytes_FromStringAndSize(<const char*>p + 4 + MASTER_KEY_LENGTH,
                                               flen - 4 - MASTER_KEY_LENGTH),
                     key, (flags & FLAG_RECOVERY_ADD) != 0,
                     (flags & (FLAG_HIGH_PRIORITY | FLAG_RECOVERY_ADD)) != 0))
        ids.append((get_i64(p + 4 + MASTER_KEY_LENGTH), get_i64(p + 12 + MASTER_KEY_LENGTH), version))
        i += 1
    return adds, ids, i


cdef class V2Response:
    """A decoded v2 response. `data` (READ) is a view into the frame: the stored entry."""

    cdef readonly int version
    cdef readonly int opcode
    cdef readonly int32_t rc
    cdef readonly int64_t ledger_id
    cdef readonly int64_t entry_id
    cdef readonly object data
    cdef readonly int64_t request_id
    cdef readonly list entries
    cdef readonly object auth_message

    def __repr__(self):
        return (f"V2Response(opcode={self.opcode}, rc={self.rc}, ledger_id={self.ledger_id}, "
                f"entry_id={self.entry_id})")


def decode_response(frame):
    """Decode a v2 response body (the bytes after the length prefix)."""
    return _decode_v2(frame, False)


cdef V2Response _response_body(object mv, const uint8_t *p, Py_ssize_t n, int version, int opcode):
    cdef Py_ssize_t off
    cdef int32_t elen
    cdef V2Response r = V2Response.__new__(V2Response)
    r.version = version
    r.opcode = opcode
    if opcode == OP_AUTH:
        r.auth_message = bytes(mv[4:])
        return r
    if opcode != OP_ADD and opcode != OP_READ and opcode != OP_BATCH_READ:
        raise UnknownOpcodeError(f"v2 response opcode {opcode} is not one a bookie sends (1, 2, 3, 7)")
    need(n, RESPONSE_HEADERS_SIZE, "response")
    r.rc = get_i32(p + 4)
    r.ledger_id = get_i64(p + 8)
    r.entry_id = get_i64(p + 16)
    if opcode == OP_READ:
        r.data = mv[RESPONSE_HEADERS_SIZE:]
    elif opcode == OP_BATCH_READ:
        need(n, RESPONSE_HEADERS_SIZE + 8, "BATCH_READ response")
        r.request_id = get_i64(p + 24)
        r.entries = []
        off = RESPONSE_HEADERS_SIZE + 8
        while off < n:
            need(n - off, 4, "BATCH_READ response entry")
            elen = get_i32(p + off)
            off += 4
            if elen < 0 or elen > n - off:
                raise MalformedFrameError(
                    f"BATCH_READ response entry length {elen} overruns the frame ({n - off} bytes left)")
            r.entries.append(mv[off:off + elen])
            off += elen
    elif n != RESPONSE_HEADERS_SIZE:
        raise MalformedFrameError(f"ADD response body must be {RESPONSE_HEADERS_SIZE} bytes, got {n}")
    return r


cdef inline Py_ssize_t _put_v3_header(uint8_t *p, Py_ssize_t header_len, int operation,
                                      uint64_t txn) noexcept nogil:
    """Field 1, the BKPacketHeader (version 3, `operation`, txnId `txn`; `header_len` = 5 + the txn's
    varint size), at p; returns the bytes written. Requests and responses start the same way."""
    cdef Py_ssize_t at = 1
    p[0] = 0x0A
    at += pw_put_varint(p + at, header_len)
    p[at] = 0x08; p[at + 1] = 3; p[at + 2] = 0x10; p[at + 3] = <uint8_t>operation; p[at + 4] = 0x18
    at += 5
    return at + pw_put_varint(p + at, txn)


cdef inline Py_ssize_t _v3_ids_size(int status, int64_t ledger_id, int64_t entry_id) noexcept nogil:
    """Bytes of an inner v3 response's status (1), ledgerId (2) and entryId (3) fields."""
    return (3 + pw_varint_size(<uint64_t><int64_t>status) + pw_varint_size(<uint64_t>ledger_id)
            + pw_varint_size(<uint64_t>entry_id))


cdef inline Py_ssize_t _put_v3_ids(uint8_t *p, int status, int64_t ledger_id, int64_t entry_id) noexcept nogil:
    """Write those three fields at p; returns their size."""
    cdef Py_ssize_t at
    p[0] = 0x08
    at = 1 + pw_put_varint(p + 1, <uint64_t><int64_t>status)
    p[at] = 0x10
    at += 1 + pw_put_varint(p + at + 1, <uint64_t>ledger_id)
    p[at] = 0x18
    at += 1 + pw_put_varint(p + at + 1, <uint64_t>entry_id)
    return at


cdef inline Py_ssize_t _put_v3_scope(uint8_t *p, uint64_t scope_id) noexcept nogil:
    """ledgerScopeId (field 1000, bkfast's extension) at p; returns its size."""
    p[0] = 0xC0
    p[1] = 0x3E
    return 2 + pw_put_varint(p + 2, scope_id)


# --- frame builder: many frames in one buffer ---------------------------------------------------------
cdef class FrameBuilder:
    """Appends complete frames (length prefix included) to one growable buffer.

    The server writes all responses of a journal group commit for one connection with a single
    transport.write(builder.take()). A sender can also use it as its send buffer, with no copy out:
    `pending()` is a view of the bytes not yet consumed, `consume(n)` drops the first n of them (after a
    partial socket send), and the space is reused, so a steady sender allocates nothing.
    """

    cdef uint8_t *buf
    cdef Py_ssize_t start        # bytes before this were consumed
    cdef Py_ssize_t length
    cdef Py_ssize_t capacity
    cdef Py_ssize_t exports      # live buffer views: the buffer must not move while one exists
    cdef readonly Py_ssize_t frame_count

    def __cinit__(self, Py_ssize_t initial_capacity=4096):
        self.capacity = initial_capacity if initial_capacity > 64 else 64
        self.buf = <uint8_t*>PyMem_Malloc(self.capacity)
        if self.buf == NULL:
            raise MemoryError()
        self.length = 0
        self.frame_count = 0

    def __dealloc__(self):
        if self.buf != NULL:
            PyMem_Free(self.buf)

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t want
        cdef Py_ssize_t cap = self.capacity
        cdef uint8_t *nb
        if self.start and self.length + extra > cap:
            if self.exports:
                raise BufferError("FrameBuilder: a pending() view is still alive")
            memmove(self.buf, self.buf + self.start, self.length - self.start)
            self.length -= self.start
            self.start = 0
        want = self.length + extra
        if want <= cap:
            return 0
        if self.exports:
            raise BufferError("FrameBuilder: a pending() view is still alive")
        while cap < want:
            cap *= 2
        nb = <uint8_t*>PyMem_Realloc(self.buf, cap)
        if nb == NULL:
            raise MemoryError()
        self.buf = nb
        self.capacity = cap
        return 0

    def __len__(self):
        return self.length - self.start

    def __getbuffer__(self, Py_buffer *view, int flags):
        view.buf = self.buf + self.start
        view.obj = self
        view.len = self.length - self.start
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = &view.len
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def pending(self):
        """A read-only view of the bytes not consumed yet; release it before appending more."""
        return memoryview(self)

    def consume(self, Py_ssize_t n):
        """Drop the first `n` pending bytes (they were sent)."""
        if n < 0 or n > self.length - self.start:
            raise ValueError(f"cannot consume {n} of {self.length - self.start} pending bytes")
        self.start += n
        if self.start == self.length and not self.exports:
            self.start = self.length = 0
            self.frame_count = 0

    cpdef add_add_request(self, master_key, int64_t ledger_id, int64_t entry_id, int64_t last_add_confirmed,
                          int64_t length, payload, int digest_type, mac_key=b"", int flags=0,
                          int version=CURRENT_PROTOCOL_VERSION):
        """Append the frame encode_add_request would return, built in place (no per-frame object)."""
        cdef Py_buffer view
        cdef int dlen = digest_length(digest_type)
        cdef Py_ssize_t total
        cdef uint8_t *p
        master_key = _master_key_bytes(master_key)
        check_entry_args(digest_type, mac_key, ledger_id)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            total = 8 + MASTER_KEY_LENGTH + METADATA_LENGTH + dlen + view.len
            self.reserve(total)
            p = self.buf + self.length
            put_u32(p, <uint32_t>(total - 4))
            put_u32(p + 4, packet_header(version, OP_ADD, flags))
            memcpy(p + 8, <const char*>master_key, MASTER_KEY_LENGTH)
            put_entry(p + 8 + MASTER_KEY_LENGTH, 0, digest_type, mac_key, ledger_id, entry_id, last_add_confirmed,
                      length, &view, payload)
            self.length += total
        finally:
            PyBuffer_Release(&view)
        self.frame_count += 1

    cpdef add_add_response(self, int rc, int64_t ledger_id, int64_t entry_id,
                           int version=CURRENT_PROTOCOL_VERSION):
        self.reserve(4 + RESPONSE_HEADERS_SIZE)
        write_response_header(self.buf + self.length, RESPONSE_HEADERS_SIZE, version, OP_ADD, rc,
                              ledger_id, entry_id)
        self.length += 4 + RESPONSE_HEADERS_SIZE
        self.frame_count += 1

    def add_add_responses(self, int rc, list ids):
        """add_add_response(rc, ...) for each (ledger_id, entry_id, version) of `ids`, in one call; a
        version-0 (legacy) request gets the bare opcode as its header, as Java answers it."""
        cdef Py_ssize_t i, n = len(ids)
        cdef tuple add
        cdef int version
        cdef uint8_t *p
        self.reserve(n * (4 + RESPONSE_HEADERS_SIZE))
        for i in range(n):
            add = <tuple>ids[i]
            version = add[2]
            p = self.buf + self.length
            write_response_header(p, RESPONSE_HEADERS_SIZE, version, OP_ADD, rc, add[0], add[1])
            if version == 0:
                put_u32(p + 4, OP_ADD)
            self.length += 4 + RESPONSE_HEADERS_SIZE
        self.frame_count += n

    def add_taken_add_responses(self, int rc, bytes taken):
        """add_add_response(rc, ...) for each add an AddSink took (`taken`: its packed TakenAdd list)."""
        cdef const TakenAdd *add = <const TakenAdd *>PyBytes_AS_STRING(taken)
        cdef Py_ssize_t i, n = PyBytes_GET_SIZE(taken) // sizeof(TakenAdd)
        self.reserve(n * (4 + RESPONSE_HEADERS_SIZE))
        for i in range(n):
            write_response_header(self.buf + self.length, RESPONSE_HEADERS_SIZE, <int>add[i].tag, C_OP_ADD, rc,
                                  add[i].ledger_id, add[i].entry_id)
            self.length += 4 + RESPONSE_HEADERS_SIZE
        self.frame_count += n

    def add_v3_taken_add_responses(self, int status, bytes taken):
        """add_v3_add_response(status, ...) for each v3 add an AddSink took (unscoped; tag: its txn id)."""
        cdef const TakenAdd *add = <const TakenAdd *>PyBytes_AS_STRING(taken)
        cdef Py_ssize_t i
        for i in range(PyBytes_GET_SIZE(taken) // sizeof(TakenAdd)):
            self.add_v3_add_response(status, add[i].ledger_id, add[i].entry_id, add[i].tag, 0)

    def add_v3_add_responses(self, int status, list ids):
        """add_v3_add_response(status, ...) for each (ledger_id, entry_id, txn, scope_id) of `ids`."""
        cdef tuple add
        for item in ids:
            add = <tuple>item
            self.add_v3_add_response(status, add[0], add[1], add[2], add[3])

    cpdef add_read_response(self, int rc, int64_t ledger_id, int64_t entry_id, data=b"",
                            int version=CURRENT_PROTOCOL_VERSION):
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self._read_response(rc, ledger_id, entry_id, <const uint8_t *>view.buf, view.len, version)
        finally:
            PyBuffer_Release(&view)

    cdef int _read_response(self, int rc, int64_t ledger_id, int64_t entry_id, const uint8_t *data,
                            Py_ssize_t data_len, int version) except -1:
        self.reserve(4 + RESPONSE_HEADERS_SIZE + data_len)
        write_response_header(self.buf + self.length, RESPONSE_HEADERS_SIZE + data_len, version,
                              OP_READ, rc, ledger_id, entry_id)
        memcpy(self.buf + self.length + 4 + RESPONSE_HEADERS_SIZE, data, data_len)
        self.length += 4 + RESPONSE_HEADERS_SIZE + data_len
        self.frame_count += 1
        return 0

    cpdef add_batch_read_response(self, int rc, int64_t ledger_id, int64_t start_entry_id,
                                  int64_t request_id, entries=(), int version=CURRENT_PROTOCOL_VERSION):
        cdef Py_ssize_t start = self.length
        cdef uint8_t *p
        self.reserve(4 + RESPONSE_HEADERS_SIZE + 8)
        self.length += 4 + RESPONSE_HEADERS_SIZE + 8
        for entry in entries:
            self._put_sized(entry)
        p = self.buf + start
        write_response_header(p, self.length - start - 4, version, OP_BATCH_READ, rc, ledger_id,
                              start_entry_id)
        put_u64(p + 4 + RESPONSE_HEADERS_SIZE, <uint64_t>request_id)
        self.frame_count += 1

    cpdef add_frame(self, body):
        """Append one frame: a 4-byte length, then `body` (e.g. a serialized v3 Response)."""
        self._put_sized(body)
        self.frame_count += 1

    cdef int _put_sized(self, object data) except -1:
        """Append a 4-byte length, then `data`: a whole frame, or one entry of a BATCH_READ response."""
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self.reserve(4 + view.len)
            put_u32(self.buf + self.length, <uint32_t>view.len)
            memcpy(self.buf + self.length + 4, view.buf, view.len)
            self.length += 4 + view.len
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef Py_ssize_t _v3_response_start(self, Py_ssize_t body_len, int operation, uint64_t txn, int status,
                                       int sub_field, Py_ssize_t sub_len) except -1:
        """Reserve and write a v3 Response frame up to the start of its inner response (field
        `sub_field`, `sub_len` bytes long); returns the offset where the inner bytes go. Field order and
        encodings are protobuf's (serializing pb.Response gives the same bytes)."""
        cdef Py_ssize_t header_len = 5 + pw_varint_size(txn)
        cdef Py_ssize_t total = (1 + pw_varint_size(header_len) + header_len
                                 + 1 + pw_varint_size(<uint64_t><int64_t>status)
                                 + 2 + pw_varint_size(sub_len) + sub_len)
        cdef uint8_t *p
        cdef Py_ssize_t at
        self.reserve(4 + total)
        p = self.buf + self.length
        put_u32(p, <uint32_t>total)
        at = 4 + _put_v3_header(p + 4, header_len, operation, txn)
        p[at] = 0x10
        at += 1
        at += pw_put_varint(p + at, <uint64_t><int64_t>status)
        at += pw_put_varint(p + at, <uint64_t>((sub_field << 3) | 2))
        at += pw_put_varint(p + at, sub_len)
        return at

    cpdef add_v3_add_request(self, master_key, int64_t ledger_id, int64_t entry_id, int64_t last_add_confirmed,
                             int64_t length, payload, int digest_type, mac_key, uint64_t txn):
        """Append a v3 ADD_ENTRY Request frame (header version 3 with `txn`; addRequest with the ids, the
        master key and the entry built in place as encode_entry would) -- the bytes protobuf would
        serialize for the same message. For load generators: no per-add protobuf object."""
        cdef Py_buffer view
        cdef int dlen = digest_length(digest_type)
        cdef Py_ssize_t header_len = 5 + pw_varint_size(txn)
        cdef Py_ssize_t entry_len, sub, total, at
        cdef uint8_t *p
        master_key = _master_key_bytes(master_key)
        check_entry_args(digest_type, mac_key, ledger_id)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            entry_len = METADATA_LENGTH + dlen + view.len
            sub = (1 + pw_varint_size(<uint64_t>ledger_id) + 1 + pw_varint_size(<uint64_t>entry_id)
                   + 2 + MASTER_KEY_LENGTH + 1 + pw_varint_size(<uint64_t>entry_len) + entry_len)
            total = 1 + pw_varint_size(header_len) + header_len + 2 + pw_varint_size(sub) + sub
            self.reserve(4 + total)
            p = self.buf + self.length
            put_u32(p, <uint32_t>total)
            at = 4 + _put_v3_header(p + 4, header_len, 2, txn)   # ADD_ENTRY
            p[at] = 0xAA; p[at + 1] = 0x06
            at += 2
            at += pw_put_varint(p + at, sub)
            p[at] = 0x08
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>ledger_id)
            p[at] = 0x10
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>entry_id)
            p[at] = 0x1A; p[at + 1] = MASTER_KEY_LENGTH
            memcpy(p + at + 2, <const char*>master_key, MASTER_KEY_LENGTH)
            at += 2 + MASTER_KEY_LENGTH
            p[at] = 0x22
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>entry_len)
            put_entry(p + at, 0, digest_type, mac_key, ledger_id, entry_id, last_add_confirmed, length, &view, payload)
            at += entry_len
            self.length += at
        finally:
            PyBuffer_Release(&view)
        self.frame_count += 1

    cpdef add_v3_add_response(self, int status, int64_t ledger_id, int64_t entry_id, uint64_t txn,
                              uint64_t scope_id=0):
        """Append the v3 ADD_ENTRY Response (header with `txn`, status, addResponse with the ids and,
        when not 0, ledgerScopeId)."""
        cdef Py_ssize_t at = self._v3_start_with_ids(2, 101, txn, status, ledger_id, entry_id, 0, scope_id)
        if scope_id:                                                # ADD_ENTRY, addResponse
            at += _put_v3_scope(self.buf + self.length + at, scope_id)
        self.length += at
        self.frame_count += 1

    cdef Py_ssize_t _v3_start_with_ids(self, int operation, int field, uint64_t txn, int status, int64_t ledger_id,
                                       int64_t entry_id, Py_ssize_t more, uint64_t scope_id) except -1:
        """Reserve and write a v3 Response up to the ids of its inner response (field `field`), which holds
        `more` bytes after the ids and then ledgerScopeId when scope_id is not 0; the offset after the ids."""
        cdef Py_ssize_t sub = _v3_ids_size(status, ledger_id, entry_id) + more
        cdef Py_ssize_t at
        if scope_id:
            sub += 2 + pw_varint_size(scope_id)
        at = self._v3_response_start(0, operation, txn, status, field, sub)
        return at + _put_v3_ids(self.buf + self.length + at, status, ledger_id, entry_id)

    cpdef add_v3_read_response(self, int status, int64_t ledger_id, int64_t entry_id, uint64_t txn, data,
                               bint has_max_lac, int64_t max_lac, bint has_timestamp, int64_t timestamp,
                               uint64_t scope_id=0):
        """Append the v3 READ_ENTRY Response: readResponse with status, ids, `data` as body unless None,
        maxLAC and lacUpdateTimestamp when given, ledgerScopeId when not 0."""
        cdef Py_buffer view
        if data is None:
            self._v3_read_response(status, ledger_id, entry_id, txn, NULL, -1, has_max_lac, max_lac,
                                   has_timestamp, timestamp, scope_id)
            return
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self._v3_read_response(status, ledger_id, entry_id, txn, <const uint8_t *>view.buf, view.len,
                                   has_max_lac, max_lac, has_timestamp, timestamp, scope_id)
        finally:
            PyBuffer_Release(&view)

    cdef int _v3_read_response(self, int status, int64_t ledger_id, int64_t entry_id, uint64_t txn,
                               const uint8_t *body, Py_ssize_t body_len, bint has_max_lac, int64_t max_lac,
                               bint has_timestamp, int64_t timestamp, uint64_t scope_id) except -1:
        """add_v3_read_response with the body as bytes at `body` (body_len < 0: no body)."""
        cdef bint has_body = body_len >= 0
        cdef Py_ssize_t more = 0
        cdef Py_ssize_t at
        cdef uint8_t *p
        if has_body:
            more += 1 + pw_varint_size(<uint64_t>body_len) + body_len
        if has_max_lac:
            more += 1 + pw_varint_size(<uint64_t>max_lac)
        if has_timestamp:
            more += 1 + pw_varint_size(<uint64_t>timestamp)
        at = self._v3_start_with_ids(1, 100, txn, status, ledger_id, entry_id, more, scope_id)  # READ_ENTRY
        p = self.buf + self.length
        if has_body:
            p[at] = 0x22
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>body_len)
            if body_len:
                memcpy(p + at, body, body_len)
            at += body_len
        if has_max_lac:
            p[at] = 0x28
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>max_lac)
        if has_timestamp:
            p[at] = 0x30
            at += 1 + pw_put_varint(p + at + 1, <uint64_t>timestamp)
        if scope_id:
            at += _put_v3_scope(p + at, scope_id)
        self.length += at
        self.frame_count += 1
        return 0

    cpdef bytes take(self):
        """Everything appended (and not consumed) so far, as one bytes object; the builder is empty afterwards."""
        if self.exports:
            raise BufferError("FrameBuilder: a pending() view is still alive")
        cdef bytes out = PyBytes_FromStringAndSize(<const char*>self.buf + self.start, self.length - self.start)
        self.start = self.length = 0
        self.frame_count = 0
        return out


# --- streaming frame splitter ---------------------------------------------------------------------
cdef inline int plain_add_version(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """The protocol version (1 or 2) of a frame that is a plain v2 ADD (no flags, an unscoped entry with its
    ids), 0 for any other frame. Its ledger id is at p + 24, its entry id at p + 32, its master key at
    p + 4, its entry at p + 24 (to the end)."""
    cdef int version, opcode, flags
    if n < 4 + MASTER_KEY_LENGTH + 16:
        return 0
    split_header(get_u32(p), &version, &opcode, &flags)
    if opcode != C_OP_ADD or version < 1 or version > 2 or flags != 0 or (p[4 + MASTER_KEY_LENGTH] & 0x80):
        return 0
    return version


cdef inline int offer_add(AddSink sink, const uint8_t *p, Py_ssize_t n) except -1:
    """Offer a frame to `sink` if it is a plain v2 ADD: 1 when the sink took it."""
    cdef int version = plain_add_version(p, n)
    if not version:
        return 0
    return sink.take_c(get_i64(p + 4 + MASTER_KEY_LENGTH), get_i64(p + 12 + MASTER_KEY_LENGTH), version, p + 4,
                       p + 4 + MASTER_KEY_LENGTH, n - 4 - MASTER_KEY_LENGTH)


cdef inline int offer_add_nogil(AddSink sink, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """offer_add to the sink's GIL-free side: 1 when it took the frame."""
    cdef int version = plain_add_version(p, n)
    if not version:
        return 0
    return sink.take_nogil(get_i64(p + 4 + MASTER_KEY_LENGTH), get_i64(p + 12 + MASTER_KEY_LENGTH), version,
                           p + 4, p + 4 + MASTER_KEY_LENGTH, n - 4 - MASTER_KEY_LENGTH)


cdef Py_ssize_t take_stretch(AddSink sink, const uint8_t *p, Py_ssize_t n, Py_ssize_t i, bint v3,
                             Py_ssize_t max_frame_size) noexcept nogil:
    """Offer the whole frames from p[i:] to the sink's GIL-free side while it takes them; where the first
    one it does not take (or a partial frame, or a length prefix the splitter must refuse) begins."""
    cdef int32_t length
    cdef int taken
    while n - i >= 4:
        length = get_i32(p + i)
        if length < 0 or <Py_ssize_t>length + 4 > max_frame_size or n - i - 4 < length:
            break
        taken = offer_v3_add_nogil(sink, p + i + 4, length) if v3 else offer_add_nogil(sink, p + i + 4, length)
        if taken != 1:
            break
        i += 4 + length
    sink.stretch_done_nogil()
    return i


cdef inline AddSink complete(const uint8_t *p, Py_ssize_t length, list frames, AddSink sink, bint v3, object body):
    """A frame is complete: offered to `sink` (which stays the sink if it took it), else listed (`body`:
    its bytes when the splitter has them already); listing ends the sink's turn for this feed."""
    if sink is not None and (offer_v3_add(sink, p, length) if v3 else offer_add(sink, p, length)):
        return sink
    frames.append(body if body is not None else PyBytes_FromStringAndSize(<const char*>p, length))
    return None


cdef class FrameSplitter:
    """Cuts a byte stream into frame bodies (length prefixes stripped), whatever the chunking.

    The length prefix is checked against the maximum frame size before any of the body is buffered:
    a negative length or `length + 4 > max_frame_size` (Netty's rule) raises a FrameError, and the
    splitter stays failed so the caller closes the connection. A body that arrives in pieces is copied
    once into a buffer of its final size, so big frames cost no re-copying.
    """

    cdef readonly Py_ssize_t max_frame_size
    cdef uint8_t header[4]
    cdef Py_ssize_t header_have
    cdef bytes body
    cdef Py_ssize_t body_have
    cdef Py_ssize_t body_len
    cdef object failure

    def __cinit__(self, Py_ssize_t max_frame_size=DEFAULT_MAX_FRAME_SIZE):
        if max_frame_size < 4:
            raise ValueError(f"max_frame_size must be at least 4, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self.header_have = 0
        self.body = None
        self.body_have = 0
        self.body_len = 0
        self.failure = None

    @property
    def buffered_bytes(self):
        """Bytes received that do not yet form a whole frame."""
        return self.header_have + (self.body_have + 4 if self.body is not None else 0)

    @property
    def failed(self):
        """True once a bad length prefix was seen: the stream cannot be resynchronised."""
        return self.failure is not None

    def pending_head(self, Py_ssize_t n):
        """The first (at most) n bytes of the frame received in part, as the stream had them (its length
        prefix first); b"" when no frame is in part."""
        cdef uint8_t prefix[4]
        if n <= 0:
            return b""
        if self.body is None:
            return PyBytes_FromStringAndSize(<const char *>self.header, min(n, self.header_have))
        put_u32(prefix, <uint32_t>self.body_len)
        return (PyBytes_FromStringAndSize(<const char *>prefix, min(n, 4))
                + PyBytes_FromStringAndSize(PyBytes_AS_STRING(self.body), max(0, min(n - 4, self.body_have))))

    cdef Py_ssize_t check_length(self, const uint8_t *h) except -1:
        cdef int32_t length = get_i32(h)
        if length < 0:
            self.failure = (NegativeFrameLengthError, f"frame length {length} is negative")
        elif <Py_ssize_t>length + 4 > self.max_frame_size:
            self.failure = (FrameTooLargeError,
                            f"frame length {length} (+4) exceeds the maximum frame size "
                            f"{self.max_frame_size} (nettyMaxFrameSizeBytes)")
        else:
            return length
        raise self.failure[0](self.failure[1])

    def feed(self, data, AddSink sink=None, bint v3=False):
        """Take the next chunk of the stream; return the list of frame bodies it completed.

        `sink`: each completed plain v2 ADD (v3 ADD_ENTRY when `v3`) is offered to it first
        (_addsink.pxd), and one it takes makes no frame; from the first one it does not take (or the
        first other frame) on, every frame of this chunk is listed, so the list is the stream's order
        after what the sink took.

        On a bad length prefix the FrameError raised carries `.frames`: the whole frames that came
        before it in this chunk, which the caller may still process before closing the connection.
        """
        cdef Py_buffer view
        cdef list frames = []
        if self.failure is not None:
            err = self.failure[0](self.failure[1])
            err.frames = []
            raise err
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self.split(<const uint8_t*>view.buf, view.len, frames, sink, v3)
        except FrameError as err:
            err.frames = frames
            raise
        finally:
            PyBuffer_Release(&view)
            if sink is not None:
                sink.feed_done_c()
        return frames

    cdef int split(self, const uint8_t *p, Py_ssize_t n, list frames, AddSink sink, bint v3) except -1:
        cdef Py_ssize_t i = 0, take, length
        while i < n:
            if self.body is not None:
                take = self.body_len - self.body_have
                if take > n - i:
                    take = n - i
                memcpy(PyBytes_AS_STRING(self.body) + self.body_have, p + i, take)
                self.body_have += take
                i += take
                if self.body_have == self.body_len:
                    sink = complete(<const uint8_t*>PyBytes_AS_STRING(self.body), self.body_len, frames, sink, v3,
                                    self.body)
                    self.body = None
                continue
            if sink is not None and self.header_have == 0 and sink.ready_nogil():
                # The run is open: its adds are taken with the GIL released, up to the first frame its
                # GIL-free side does not take, which goes on below as any frame.
                with nogil:
                    i = take_stretch(sink, p, n, i, v3, self.max_frame_size)
                if i >= n:
                    break
            length = self.next_length(p, n, &i)
            if length < 0:
                break
            if n - i >= length:
                sink = complete(p + i, length, frames, sink, v3, None)
                i += length
            else:
                # The body's size is known and bounded: allocate it once, fill it as data comes.
                self.body = PyBytes_FromStringAndSize(NULL, length)
                self.body_len = length
                self.body_have = n - i
                memcpy(PyBytes_AS_STRING(self.body), p + i, n - i)
                i = n
        return 0

    cdef Py_ssize_t next_length(self, const uint8_t *p, Py_ssize_t n, Py_ssize_t *at) except -2:
        """The next frame's (checked) length from p[at:], moving `at` past its prefix; -1 when the chunk
        ends inside the prefix (kept for the next chunk)."""
        cdef Py_ssize_t i = at[0], take
        if self.header_have == 0 and n - i >= 4:
            at[0] = i + 4
            return self.check_length(p + i)
        take = 4 - self.header_have
        if take > n - i:
            take = n - i
        memcpy(self.header + self.header_have, p + i, take)
        self.header_have += take
        at[0] = i + take
        if self.header_have < 4:
            return -1
        self.header_have = 0
        return self.check_length(self.header)


include "_codec_v3.pxi"
