"""The codec reproduces, byte for byte, what Java BookKeeper 4.16.7 produced (tests/vectors)."""

import hashlib
import json

import pytest

from bkfast.digests import EMPTY_PASSWORD_MASTER_KEY, DigestType, mac_key, master_key
from tests import VECTORS_DIR
from tests.codec_impls import IMPLEMENTATIONS

VECTORS = VECTORS_DIR
DIGESTS = json.loads((VECTORS / "digests.json").read_text())
PROTOCOL = json.loads((VECTORS / "protocol.json").read_text())


def _payload(item):
    if "payload" in item and item["payload"] is not None:
        return bytes.fromhex(item["payload"])
    # The vectors give big payloads as a generator expression over range(); nothing else is evaluated.
    rule = item["payload_rule"]
    assert rule.startswith("bytes(") and "import" not in rule and "__" not in rule
    payload = eval(rule, {"__builtins__": {"bytes": bytes, "range": range}})
    assert hashlib.sha256(payload).hexdigest() == item["payload_sha256"]
    return payload


def _check_bytes(actual: bytes, expected: dict, key: str):
    """Compare with `key` (full hex) or with its `_prefix`/`_len`/`_sha256` digest form."""
    if key in expected:
        assert actual.hex() == expected[key]
        return
    assert len(actual) == expected[f"{key}_len"]
    assert actual.hex().startswith(expected[f"{key}_prefix"]) if f"{key}_prefix" in expected else True
    assert hashlib.sha256(actual).hexdigest() == expected[f"{key}_sha256"]


TUPLE_CASES = [
    pytest.param(i, name, id=f"tuple{i}-{name}")
    for i, t in enumerate(DIGESTS["tuples"]) for name in t["digests"]
]


def test_master_and_mac_keys_match_java():
    assert EMPTY_PASSWORD_MASTER_KEY.hex() == DIGESTS["masterKey_empty_password"]
    for t in DIGESTS["tuples"]:
        password = bytes.fromhex(t["password_hex"])
        assert master_key(password).hex() == t["masterKey"]
        assert mac_key(password).hex() == t["macKey"]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("index,digest_name", TUPLE_CASES)
def test_entry_digest_lac_and_add_frame_match_java(impl, index, digest_name):
    t = DIGESTS["tuples"][index]
    expected = t["digests"][digest_name]
    digest_type = DigestType[digest_name]
    password = bytes.fromhex(t["password_hex"])
    payload = _payload(t)
    args = (t["ledgerId"], t["entryId"], t["lastAddConfirmed"], t["length"], payload, digest_type,
            mac_key(password))

    entry = impl.encode_entry(*args)
    assert len(entry) == expected["header_len"] + len(payload)
    assert entry[32:expected["header_len"]].hex() == expected["digest"]
    if "entry" in expected:
        assert entry.hex() == expected["entry"]
    else:
        assert entry[:expected["header_len"]].hex() == expected["entry_header"][: 2 * expected["header_len"]]
        _check_bytes(entry, expected, "entry")

    frame = impl.encode_add_request(master_key(password), *args)
    _check_bytes(frame, expected, "v2_add_frame")
    assert impl.encode_add_request_for_entry(master_key(password), entry) == frame

    assert impl.encode_lac(t["ledgerId"], t["lastAddConfirmed"], digest_type,
                           mac_key(password)).hex() == expected["lac_buffer"]

    decoded = impl.decode_entry(entry, digest_type, mac_key(password), t["ledgerId"], t["entryId"])
    assert (decoded.format_version, decoded.scope_id, decoded.ledger_id, decoded.entry_id,
            decoded.last_add_confirmed, decoded.length) == (1, 0, t["ledgerId"], t["entryId"],
                                                            t["lastAddConfirmed"], t["length"])
    assert bytes(decoded.payload) == payload
    assert decoded.digest.hex() == expected["digest"]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("digest_name", sorted(DIGESTS["lac_only"]))
def test_lac_only_buffers_match_java(impl, digest_name):
    item = DIGESTS["lac_only"][digest_name]
    key = mac_key(item["password_utf8"])
    for lac in (-1, 0, 1000000):
        expected = item[f"lac_{lac}"]
        buf = impl.encode_lac(item["ledgerId"], lac, DigestType[digest_name], key)
        assert buf.hex() == expected
        assert impl.decode_lac(buf, DigestType[digest_name], key, item["ledgerId"]) == (0, item["ledgerId"], lac)


V2_ENCODED = [pytest.param(e, id=e["name"]) for e in PROTOCOL["encoded"] if e["protocol"] == "v2"]


def _auth_message(plugin: str, payload: bytes) -> bytes:
    # AuthMessage{authPluginName=1 string, payload=2 bytes}; both short enough for one-byte lengths.
    name = plugin.encode()
    return bytes([0x0A, len(name)]) + name + bytes([0x12, len(payload)]) + payload


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("item", V2_ENCODED)
def test_v2_encoded_frames_match_java(impl, item):
    f = item["fields"]
    kind, op = item["kind"], item["op"]
    if op == "ADD_ENTRY" and kind == "request":
        payload = _payload(f)
        frame = impl.encode_add_request(bytes.fromhex(f["masterKey"]), f["ledgerId"], f["entryId"],
                                        f["lastAddConfirmed"], f["length"], payload,
                                        DigestType[f["digestType"]], mac_key(f["password_utf8"]),
                                        flags=f["flags"], version=f["version"])
    elif op == "ADD_ENTRY":
        frame = impl.encode_add_response(f["errorCode"], f["ledgerId"], f["entryId"], version=f["version"])
    elif op == "READ_ENTRY" and kind == "request":
        key = bytes.fromhex(f["masterKey"]) if "masterKey" in f else None
        frame = impl.encode_read_request(f["ledgerId"], f["entryId"], flags=f["flags"], master_key=key,
                                         version=f["version"])
    elif op == "READ_ENTRY":
        data = bytes.fromhex(f.get("data", ""))
        frame = impl.encode_read_response(f["errorCode"], f["ledgerId"], f["entryId"], data,
                                          version=f["version"])
    else:
        assert op == "AUTH"
        frame = impl.encode_auth(_auth_message(f["authPluginName"], bytes.fromhex(f["payload"])),
                                 version=f["version"])
    if "hex" in item:
        assert frame.hex() == item["hex"]
    else:
        # Despite its name, hex_len is the frame's length in bytes (0x4e5c + 4 = 20064 for 20000 B).
        assert len(frame) == item["hex_len"]
        assert frame.hex().startswith(item["hex_prefix"])
        assert hashlib.sha256(frame).hexdigest() == item["sha256"]

    body = frame[4:]
    if kind == "request":
        r = impl.decode_request(body)
        assert (r.version, r.flags) == (f["version"], f.get("flags", 0))
        if op == "AUTH":
            assert r.opcode == impl.OP_AUTH
            assert r.auth_message == _auth_message(f["authPluginName"], bytes.fromhex(f["payload"]))
            return
        assert (r.ledger_id, r.entry_id) == (f["ledgerId"], f["entryId"])
        if "masterKey" in f:
            assert r.master_key.hex() == f["masterKey"]
        if op == "ADD_ENTRY":
            assert r.opcode == impl.OP_ADD
            entry = impl.decode_entry(r.entry, DigestType[f["digestType"]], mac_key(f["password_utf8"]),
                                      f["ledgerId"], f["entryId"])
            assert bytes(entry.payload) == _payload(f)
            assert (entry.last_add_confirmed, entry.length) == (f["lastAddConfirmed"], f["length"])
    else:
        r = impl.decode_response(body)
        assert r.version == f["version"]
        if op == "AUTH":
            assert r.auth_message == _auth_message(f["authPluginName"], bytes.fromhex(f["payload"]))
            return
        assert (r.rc, r.ledger_id, r.entry_id) == (f["errorCode"], f["ledgerId"], f["entryId"])
        if op == "READ_ENTRY" and f["errorCode"] == 0:
            assert bytes(r.data).hex() == f["data"]
            entry = impl.decode_entry(r.data, DigestType[f["digestType"]], b"", f["ledgerId"], f["entryId"])
            assert (entry.last_add_confirmed, entry.length) == (f["lastAddConfirmed"], f["length"])
            assert bytes(entry.payload).hex() == f["payload"]


V2_SESSION = [pytest.param(x, id=f"{i:02d}-{x['direction']}-{x['step']}")
              for i, x in enumerate(PROTOCOL["captured"]["v2_session"])]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("captured", V2_SESSION)
def test_captured_v2_session_decodes_and_reencodes_identically(impl, captured):
    frame = bytes.fromhex(captured["hex"])
    f = captured["fields"]
    splitter = impl.FrameSplitter()
    [body] = splitter.feed(frame)
    if captured["direction"] == "client->bookie":
        r = impl.decode_request(body)
        assert (r.version, r.opcode, r.flags, r.ledger_id, r.entry_id) == (
            f["version"], f["opCode"], f["flags"], f["ledgerId"], f["entryId"])
        if r.opcode == impl.OP_ADD:
            assert r.master_key.hex() == f["masterKey"]
            assert bytes(r.entry).hex() == f["packagedEntry"]
            assert impl.peek_entry_ids(r.entry) == (1, 0, f["ledgerId"], f["entryId"])
            again = impl.encode_add_request_for_entry(r.master_key, r.entry, r.flags, r.version)
        else:
            assert r.master_key == (bytes.fromhex(f["masterKey"]) if "masterKey" in f else None)
            again = impl.encode_read_request(r.ledger_id, r.entry_id, r.flags, r.master_key, r.version)
    else:
        r = impl.decode_response(body)
        assert (r.version, r.opcode, r.rc, r.ledger_id, r.entry_id) == (
            f["version"], f["opCode"], f["errorCode"], f["ledgerId"], f["entryId"])
        if r.opcode == impl.OP_ADD:
            again = impl.encode_add_response(r.rc, r.ledger_id, r.entry_id, r.version)
        else:
            assert bytes(r.data).hex() == f.get("data", "")
            again = impl.encode_read_response(r.rc, r.ledger_id, r.entry_id, r.data, r.version)
    assert again == frame
