"""Fuzz a `bkfast bookie` process with 100,000 random and mutated frames over many connections.

Checks: the process never dies; it never acknowledges an add that was not sent as a well-formed add
on that connection (bookies store entries verbatim and never verify digests, so a mutated entry
inside a well-formed frame may be stored; "corrupted" means a malformed frame); and a well-formed
client on its own connection keeps working throughout.
"""

from __future__ import annotations

import json
import random
import selectors
import socket
import struct
import threading
import time

import pytest

from bkfast.codec import (
    DigestType,
    decode_request,
    decode_response,
    encode_add_request,
    encode_entry,
    encode_read_request,
    master_key,
)
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests import VECTORS_DIR
from tests.server_support import BookieProcess

TOTAL_FRAMES = 100_000
FRAMES_PER_CONNECTION = 50
CONNECTIONS_PER_ROUND = 50
QUIET_S = 0.25

VECTORS = json.loads((VECTORS_DIR / "protocol.json").read_text())


def _corpus() -> dict[str, list[bytes]]:
    """Request frames by protocol: a connection is v3 or v2 for good (spec §2.1), so one connection
    mostly carries one protocol for its frames to reach the handlers."""
    frames: dict[str, list[bytes]] = {"v2": [], "v3": []}
    for i in VECTORS["encoded"]:
        if i["kind"] == "request" and "hex" in i:
            frames[i["protocol"]].append(bytes.fromhex(i["hex"]))
    for session in ("v2_session", "v3_session"):
        for i in VECTORS["captured"][session]:
            if i["direction"] == "client->bookie":
                frames[i["protocol"]].append(bytes.fromhex(i["hex"]))
    return frames


def _fresh_adds(rng: random.Random, proto: str, n: int = 40) -> list[bytes]:
    """Well-formed adds to new ledgers (the vectors' ledgers soon get fenced by their fencing reads)."""
    key = master_key("fuzz")
    ledger = rng.randrange(1 << 20, 1 << 40)
    frames = []
    for entry in range(n):
        if proto == "v2":
            frames.append(encode_add_request(key, ledger, entry, entry - 1, entry + 1, rng.randbytes(20),
                                             DigestType.CRC32))
        else:
            request = pb.Request()
            request.header.version = pb.VERSION_THREE
            request.header.operation = pb.ADD_ENTRY
            request.header.txnId = entry
            request.addRequest.ledgerId = ledger
            request.addRequest.entryId = entry
            request.addRequest.masterKey = key
            request.addRequest.body = encode_entry(ledger, entry, entry - 1, entry + 1, rng.randbytes(20),
                                                   DigestType.CRC32)
            body = request.SerializeToString()
            frames.append(struct.pack(">I", len(body)) + body)
    return frames


def _mutate(rng: random.Random, corpus: list[bytes], rate: float) -> bytes:
    frame = bytearray(rng.choice(corpus))
    if rng.random() >= rate:                        # the frame unchanged: keeps connections alive
        return bytes(frame)
    kind = rng.randrange(6)
    if kind == 0:                                   # flip a few bytes
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(frame))
            frame[i] ^= 1 << rng.randrange(8)
    elif kind == 1:                                 # truncate the body, keep the length honest
        body = frame[4:4 + rng.randrange(len(frame) - 3)]
        frame = bytearray(struct.pack(">I", len(body)) + body)
    elif kind == 2:                                 # lie in the length prefix
        choice = rng.choice([0, 1, 3, len(frame) - 5, len(frame) + 100, 0x7FFFFFFF, 0xFFFFFFFF, 6_000_000])
        frame[0:4] = struct.pack(">I", max(0, choice) & 0xFFFFFFFF)
    elif kind == 3 and len(frame) > 6:              # random opcode / version in a v2 header
        frame[4 + rng.randrange(2)] = rng.randrange(256)
    elif kind == 4:                                 # pure garbage body
        body = rng.randbytes(rng.randrange(64))
        frame = bytearray(struct.pack(">I", len(body)) + body)
    elif kind == 5 and len(frame) > 8:              # overwrite a run of bytes with random ones
        i = rng.randrange(4, len(frame))
        n = rng.randint(1, 16)
        frame[i:i + n] = rng.randbytes(min(n, len(frame) - i))
    return bytes(frame)


def _well_formed_adds(data: bytes) -> tuple[dict, set]:
    """v2: (ledger, entry) -> entry bytes sent in well-formed ADD frames; v3: (ledger, entry) of
    well-formed AddRequests, in `data`."""
    v2, v3 = {}, set()
    i = 0
    while i + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, i)
        body = data[i + 4:i + 4 + n]
        if len(body) < n:
            break
        i += 4 + n
        try:
            r = decode_request(body)
            if r.opcode == 1:
                v2.setdefault((r.ledger_id, r.entry_id), set()).add(bytes(r.entry))
        except Exception:
            pass
        try:
            req = pb.Request.FromString(body)
            if req.HasField("addRequest"):
                v3.add((req.addRequest.ledgerId, req.addRequest.entryId))
        except Exception:
            pass
    return v2, v3


def _acked_adds(data: bytes) -> list[tuple[str, int, int]]:
    """Successful add acknowledgements in a response stream (v2 or v3 frames)."""
    acks = []
    i = 0
    while i + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, i)
        body = data[i + 4:i + 4 + n]
        if len(body) < n:
            break
        i += 4 + n
        if body[:1] == b"\x0a":
            # v3 (or a v2 EBADVERSION answer echoing version 10, which is not an ack)
            try:
                response = pb.Response.FromString(body)
            except Exception:
                response = None
            if response is not None:
                if response.HasField("addResponse") and response.status == pb.EOK:
                    acks.append(("v3", response.addResponse.ledgerId, response.addResponse.entryId))
                continue
        if True:
            r = decode_response(body)
            if r.opcode == 1 and r.rc == 0:
                acks.append(("v2", r.ledger_id, r.entry_id))
    return acks


class GoodClient(threading.Thread):
    """Adds and reads on ledger 1 over its own connection while the fuzzing goes on."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.stop_event = threading.Event()
        self.ok = 0
        self.errors: list[str] = []

    def run(self):
        key = master_key("good")
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            entry = 0
            while not self.stop_event.is_set():
                sock.sendall(encode_add_request(key, 1, entry, entry - 1, entry + 1, b"good-%d" % entry,
                                                DigestType.CRC32C))
                r = decode_response(_recv_body(sock))
                if r.rc != 0 or r.entry_id != entry:
                    self.errors.append(f"add {entry}: rc {r.rc}")
                sock.sendall(encode_read_request(1, entry))
                r = decode_response(_recv_body(sock))
                if r.rc != 0 or not bytes(r.data).endswith(b"good-%d" % entry):
                    self.errors.append(f"read {entry}: rc {r.rc}")
                self.ok += 1
                entry += 1
                time.sleep(0.005)
            sock.close()
        except Exception as err:  # noqa: BLE001 - any failure of the good client fails the test
            self.errors.append(repr(err))


def _recv_body(sock) -> bytes:
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    (n,) = struct.unpack(">I", exact(4))
    return exact(n)


@pytest.fixture
def bookie(tmp_path):
    b = BookieProcess(tmp_path).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.log()


def test_fuzz_frames(bookie):
    rng = random.Random(20261123)
    corpus = _corpus()
    good = GoodClient(bookie.port)
    good.start()
    sent = 0
    acked_total = 0
    stored: dict = {}
    try:
        while sent < TOTAL_FRAMES:
            sel = selectors.DefaultSelector()
            conns = {}
            for _ in range(CONNECTIONS_PER_ROUND):
                proto = rng.choice(("v2", "v3"))
                frames = corpus[proto] + _fresh_adds(rng, proto)
                if rng.random() < 0.1:                  # now and then: both protocols on one connection
                    frames = corpus["v2"] + corpus["v3"]
                # most connections die at their first malformed frame (as with Java), and the acks of
                # adds still in the journal are lost with them: vary the mutation rate
                rate = rng.choice((0.01, 0.05, 0.2, 0.6))
                data = b"".join(_mutate(rng, frames, rate) for _ in range(FRAMES_PER_CONNECTION))
                sent += FRAMES_PER_CONNECTION
                sock = socket.create_connection(("127.0.0.1", bookie.port), timeout=10)
                try:
                    sock.sendall(data)
                except OSError:
                    pass                            # the bookie closed on an early bad frame
                sock.setblocking(False)
                conns[sock] = [data, bytearray()]
                sel.register(sock, selectors.EVENT_READ)
            last_data = time.monotonic()
            while conns and time.monotonic() - last_data < QUIET_S:
                for key, _ in sel.select(QUIET_S / 5):
                    sock = key.fileobj
                    try:
                        chunk = sock.recv(1 << 16)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        chunk = b""
                    if chunk:
                        conns[sock][1] += chunk
                        last_data = time.monotonic()
                    else:
                        sel.unregister(sock)
                        sock.close()
                        acked_total += _check(*conns.pop(sock), stored)
            for sock, (data, received) in conns.items():
                sel.unregister(sock)
                sock.close()
                acked_total += _check(data, received, stored)
            sel.close()
            assert bookie.alive(), bookie.log()
    finally:
        good.stop_event.set()
        good.join(15)
    assert bookie.alive(), bookie.log()
    assert not good.errors, good.errors[:5]
    assert good.ok > 10
    print(f"fuzz: {sent} frames, {acked_total} acks, {len(stored)} fresh acked v2 adds, {good.ok} good-client rounds")
    assert acked_total > 500                       # many fuzzed frames were well-formed adds
    # acknowledged adds are stored verbatim (mutated payloads included: bookies do not verify digests)
    assert len(stored) > 100
    sock = socket.create_connection(("127.0.0.1", bookie.port), timeout=10)
    try:
        for (ledger, entry), candidates in rng.sample(sorted(stored.items()), min(300, len(stored))):
            sock.sendall(encode_read_request(ledger, entry))
            r = decode_response(_recv_body(sock))
            assert r.rc == 0 and bytes(r.data) in candidates, (ledger, entry, r.rc)
    finally:
        sock.close()
    # no request crashed a handler (those are logged with a traceback and close the connection)
    full = bookie.log(tail=None)
    crashes = [line for line in full.splitlines() if "request failed" in line or "Traceback" in line]
    assert not crashes, "\n".join(full.splitlines()[:200])


def _check(data: bytes, received: bytes, stored: dict) -> int:
    v2, v3 = _well_formed_adds(data)
    acks = _acked_adds(bytes(received))
    for proto, ledger, entry in acks:
        assert (ledger, entry) in (v2 if proto == "v2" else v3), (proto, ledger, entry)
        if proto == "v2" and ledger >= 1 << 20:           # fresh ledgers: one connection each
            stored[(ledger, entry)] = v2[(ledger, entry)]
    return len(acks)
