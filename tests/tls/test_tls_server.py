"""A bookie with TLS and authorization answers as Java 4.16.7 does (spec §8, tests/vectors/tls_handshake.json).

Real `bkfast bookie` processes with certificates made here by a real CA; the client is a raw socket
that sends the Java-captured frames and switches to TLS with Python's own `ssl` (an independent TLS stack).
"""

from __future__ import annotations

import json
import socket
import ssl
import struct

import pytest

from bkfast.meta.registration import bookie_service_info
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.proto.DataFormats_pb2 import BookieServiceInfoFormat
from tests import VECTORS_DIR
from tests.server_support import BookieProcess
from tests.tls_support import START_TLS, START_TLS_EOK, make_pki, start_tls

VECTORS = json.loads((VECTORS_DIR / "tls_handshake.json").read_text())
SESSIONS = {s["name"]: s for s in VECTORS["sessions"]}
RAW = {r["name"]: r for r in VECTORS["raw_experiments"]}


def _frames(session, direction):
    return [bytes.fromhex(f["hex"]) for f in session["plaintext"] if f.get("direction") == direction and "hex" in f]


def _sent(raw):
    return [bytes.fromhex(f["hex"]) for f in raw["sent"] if "hex" in f]


def _received(raw):
    return [bytes.fromhex(f["hex"]) for step in raw["received"] for f in step["frames"]]


def _zero_disk(frame: bytes) -> bytes:
    r = pb.Response.FromString(frame[4:])
    r.getBookieInfoResponse.totalDiskCapacity = 0
    r.getBookieInfoResponse.freeDiskSpace = 0
    return r.SerializeToString()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _bookie(tmp_path_factory, name, conf):
    b = BookieProcess(tmp_path_factory.mktemp(name))
    b.extra_conf.update(conf)
    return b.start()


@pytest.fixture(scope="module")
def tls_bookie(tmp_path_factory, pki):
    b = _bookie(tmp_path_factory, "tlsA", pki.bookie_conf())
    yield b
    assert b.stop() == 0, b.log()


@pytest.fixture(scope="module")
def authz_bookie(tmp_path_factory, pki):
    b = _bookie(tmp_path_factory, "authzC", pki.bookie_conf(authz=True))
    yield b
    assert b.stop() == 0, b.log()


def _v2_add_ok(add_frame: bytes) -> bytes:
    ledger, entry = struct.unpack_from(">qq", add_frame, 4 + 4 + 20)
    return struct.pack(">IIiqq", 24, 0x02010000, 0, ledger, entry)


def test_v3_client_over_tls_adds_and_reads_as_java(tls_bookie, pki):
    java = SESSIONS["v3_tls_ok"]
    assert _frames(java, "client->bookie")[0] == START_TLS
    assert _frames(java, "bookie->client")[0] == START_TLS_EOK
    plain = SESSIONS["v3_notls_client_to_tls_bookie"]       # the same ADD/READ, answers byte for byte
    with start_tls(tls_bookie.connect(), pki.ssl_context()) as c:
        assert c.sock.version() in ("TLSv1.3", "TLSv1.2")
        for request, answer in zip(_frames(plain, "client->bookie"), _frames(plain, "bookie->client"), strict=True):
            c.send_raw(request)
            assert c.recv_frame() == answer


def test_v2_client_over_tls(tls_bookie, pki):
    add = _frames(SESSIONS["v2_authz_notls_client"], "client->bookie")[0]
    with start_tls(tls_bookie.connect(), pki.ssl_context()) as c:
        c.send_raw(add)
        assert c.recv_frame() == _v2_add_ok(add)
        ledger, entry = struct.unpack_from(">qq", add, 28)
        c.send_raw(struct.pack(">IIqq", 20, 0x02020000, ledger, entry))
        answer = c.recv_frame()
        assert struct.unpack_from(">Iiqq", answer, 4) == (0x02020000, 0, ledger, entry)
        assert answer[4 + 24:] == add[4 + 4 + 20:]


def test_plaintext_still_served_without_an_auth_provider(tls_bookie):
    for name in ("plaintext_request_on_tls_bookie_no_start_tls", "v2_plaintext_read_on_tls_bookie"):
        raw = RAW[name]
        with tls_bookie.connect() as c:
            c.send_raw(_sent(raw)[0])
            got, want = c.recv_frame(), _received(raw)[0]
            if name.startswith("plaintext_request"):
                assert _zero_disk(got) == _zero_disk(want)
            else:
                assert got == want


@pytest.mark.parametrize("name", ["start_tls_then_plaintext_request", "start_tls_twice_without_handshake"])
def test_plaintext_after_start_tls_closes_only_that_connection(tls_bookie, name):
    raw = RAW[name]
    first, second = _sent(raw)
    with tls_bookie.connect() as other, tls_bookie.connect() as c:
        c.send_raw(first)
        assert c.recv_frame() == _received(raw)[0]
        c.send_raw(second)
        assert c.closed_by_peer()
        assert c.buf == b""
        raw_info = RAW["plaintext_request_on_tls_bookie_no_start_tls"]
        other.send_raw(_sent(raw_info)[0])
        assert _zero_disk(other.recv_frame()) == _zero_disk(_received(raw_info)[0])


def test_start_tls_on_a_bookie_without_tls_is_ebadreq(tmp_path):
    raw = RAW["start_tls_on_plain_bookie_raw"]
    b = BookieProcess(tmp_path).start()
    try:
        with b.connect() as c:
            c.send_raw(_sent(raw)[0])
            assert c.recv_frame() == _received(raw)[0]
            assert not c.closed_by_peer(0.3)
    finally:
        assert b.stop() == 0, b.log()


@pytest.mark.parametrize("name", ["authz_v3_plaintext_request", "authz_v2_plaintext_read"])
def test_authz_bookie_answers_plaintext_with_eua(authz_bookie, name):
    raw = RAW[name]
    with authz_bookie.connect() as c:
        c.send_raw(_sent(raw)[0])
        assert c.recv_frame() == _received(raw)[0]
        assert not c.closed_by_peer(0.3)


def test_authorized_role_adds_and_reads(authz_bookie, pki):
    plain = SESSIONS["v3_notls_client_to_tls_bookie"]
    with start_tls(authz_bookie.connect(), pki.ssl_context("good")) as c:
        for request, answer in zip(_frames(plain, "client->bookie"), _frames(plain, "bookie->client"), strict=True):
            c.send_raw(request)
            assert c.recv_frame() == answer


@pytest.mark.parametrize("client", ["intruder", "noou"])
def test_unauthorized_role_gets_eua_and_writes_nothing(authz_bookie, pki, client):
    add = _frames(SESSIONS["v2_authz_notls_client"], "client->bookie")[0]
    eua = _frames(SESSIONS["v2_authz_notls_client"], "bookie->client")[0]
    ledger, entry = struct.unpack_from(">qq", add, 28)
    with start_tls(authz_bookie.connect(), pki.ssl_context(client)) as c:
        # Java's verdict: an EIO START_TLS reply, now inside TLS, then EUA for everything.
        verdict = pb.Response.FromString(c.recv_body())
        assert verdict.header.operation == pb.START_TLS and verdict.status == pb.EIO
        c.send_raw(add)
        assert c.recv_frame() == eua
    with start_tls(authz_bookie.connect(), pki.ssl_context(client)) as c:
        assert pb.Response.FromString(c.recv_body()).status == pb.EIO
        v3_add = _frames(SESSIONS["v3_authz_notls_client"], "client->bookie")[0]
        c.send_raw(v3_add)
        assert c.recv_frame() == _frames(SESSIONS["v3_authz_notls_client"], "bookie->client")[0]
    with start_tls(authz_bookie.connect(), pki.ssl_context("good")) as c:
        c.send_raw(struct.pack(">IIqq", 20, 0x02020000, ledger, entry))
        rc = struct.unpack_from(">i", c.recv_frame(), 8)[0]
        assert rc in (1, 2)          # ENOLEDGER / ENOENTRY: nothing was written
    assert authz_bookie.log(None).count(f"OU=0:{client}" if client == "intruder" else "CN=noou") == 1


def _rejected(bookie, ctx) -> bool:
    c = bookie.connect()
    try:
        start_tls(c, ctx)
        c.send_raw(RAW_INFO)
        c.recv_frame()
        return False
    except (ssl.SSLError, ConnectionError, socket.timeout, OSError):
        return True
    finally:
        c.close()


RAW_INFO = bytes.fromhex("0000000d0a06080310081832ca06020803")


@pytest.mark.parametrize("client", [None, "otherca", "expired"])
def test_mutual_tls_rejects_missing_foreign_and_expired_certificates(authz_bookie, pki, client):
    assert _rejected(authz_bookie, pki.ssl_context(client))
    with start_tls(authz_bookie.connect(), pki.ssl_context("good")) as c:   # the bookie serves on
        c.send_raw(RAW_INFO)
        assert pb.Response.FromString(c.recv_body()).status == pb.EOK


def test_registration_advertises_tls_as_java():
    for reg in VECTORS["registration"]:
        java = bytes.fromhex(reg["dataHex"])
        ep = BookieServiceInfoFormat.FromString(java).endpoints[0]
        ours = bookie_service_info(ep.host, ep.port, scope_ids=False, extensions=tuple(ep.extensions))
        assert ours == java
        assert ("tls" in ep.extensions) == (reg["bookie_mode"] != "plainB")


def test_client_without_tls_refused_by_authz_bookie_but_others_served(authz_bookie, pki):
    with authz_bookie.connect() as plain, start_tls(authz_bookie.connect(), pki.ssl_context("good")) as good:
        plain.send_raw(RAW_INFO)
        assert pb.Response.FromString(plain.recv_body()).status == pb.EUA
        good.send_raw(RAW_INFO)
        assert pb.Response.FromString(good.recv_body()).status == pb.EOK


def test_bkfast_clients_send_java_start_tls_bytes():
    from bkfast import loadgen
    from bkfast.net import client_tls

    for session in SESSIONS.values():
        if session["client"]["tls"]:
            assert _frames(session, "client->bookie")[0] == client_tls.START_TLS_REQUEST == loadgen._START_TLS
