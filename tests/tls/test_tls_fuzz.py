"""A TLS bookie under hostile or broken peers, and while its certificate files change (a real `bkfast
bookie` process; certificates from a real CA made here). Garbage and truncated TLS records, plaintext
after START_TLS and a handshake that never completes close only that connection; a client that never
reads its answers cannot grow the bookie through TLS either; replaced certificate files serve new
connections after tlsCertFilesRefreshDurationSeconds while the old connections carry on."""

from __future__ import annotations

import os
import random
import shutil
import socket
import ssl
import struct
import time

import pytest

from bkfast.codec import DigestType, decode_response, encode_add_request, encode_read_request, master_key
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.tls.certs import CertificateAuthority
from tests.server.test_reactor_never_waits import _rss_bytes
from tests.server_support import BookieProcess, Client
from tests.tls_support import START_TLS, START_TLS_EOK, make_pki, start_tls

KEY = master_key("secret")
CRC = DigestType.CRC32C
INFO = bytes.fromhex("0000000d0a06080310081832ca06020803")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def bookie(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("fuzz")
    # the bookie's own copies of its key and certificate: the refresh test replaces them
    shutil.copy(pki.bookie_key, d / "bookie.key")
    shutil.copy(pki.bookie_cert, d / "bookie.pem")
    b = BookieProcess(d / "bookie")
    b.extra_conf.update({**pki.bookie_conf(), "tlsKeyStore": str(d / "bookie.key"),
                         "tlsCertificatePath": str(d / "bookie.pem"), "tlsHandshakeTimeoutMs": "800",
                         "tlsCertFilesRefreshDurationSeconds": "1", "waitTimeoutOnResponseBackpressureMs": "4000"})
    b.start()
    b.files = d
    yield b
    assert b.stop() == 0, b.log()


def _serves(bookie, pki) -> None:
    with start_tls(bookie.connect(), pki.ssl_context()) as c:
        c.send_raw(INFO)
        assert pb.Response.FromString(c.recv_body()).status == pb.EOK


def _after_start_tls(bookie) -> Client:
    c = bookie.connect()
    c.send_raw(START_TLS)
    assert c.recv_frame() == START_TLS_EOK
    return c


def _record(content_type: int, body: bytes) -> bytes:
    return struct.pack(">BHH", content_type, 0x0303, len(body)) + body


@pytest.mark.parametrize("case", ["garbage", "random_records", "oversized_record", "bad_client_hello",
                                  "truncated_then_close", "truncated_then_silence"])
def test_broken_tls_input_closes_only_that_connection(bookie, pki, case):
    rng = random.Random(case)
    with _after_start_tls(bookie) as c, start_tls(bookie.connect(), pki.ssl_context()) as good:
        if case == "garbage":
            c.send_raw(rng.randbytes(4096))
        elif case == "random_records":
            c.send_raw(b"".join(_record(rng.choice([20, 21, 22, 23]), rng.randbytes(rng.randrange(1, 300)))
                                for _ in range(20)))
        elif case == "oversized_record":
            c.send_raw(struct.pack(">BHH", 22, 0x0303, 0xFFFF) + rng.randbytes(0xFFFF))
        elif case == "bad_client_hello":
            c.send_raw(_record(22, b"\x01\x00\x01\x00" + rng.randbytes(256)))
        else:
            c.send_raw(_record(22, b"\x01\x00\x01\x00" + rng.randbytes(40))[:30])   # a record cut short
            if case == "truncated_then_close":
                c.sock.shutdown(socket.SHUT_WR)
        assert c.closed_by_peer(5.0)                # truncated_then_silence: the handshake timeout
        good.send_raw(INFO)                          # an established TLS connection carries on
        assert pb.Response.FromString(good.recv_body()).status == pb.EOK
    _serves(bookie, pki)


def test_handshake_that_never_completes_times_out(bookie, pki):
    with _after_start_tls(bookie) as c:
        t0 = time.monotonic()
        assert c.closed_by_peer(5.0)
        assert 0.6 <= time.monotonic() - t0 < 4.0
    assert "TLS handshake not done" in bookie.log(None)
    _serves(bookie, pki)


def test_client_that_never_reads_cannot_grow_the_bookie_through_tls(bookie, pki):
    with bookie.connect() as c:
        c.send_raw(encode_add_request(KEY, 5, 0, -1, 1 << 20, b"m" * (1 << 20), CRC))
        assert decode_response(c.recv_body()).rc == 0
    rss_before = _rss_bytes(bookie.pid)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((bookie.host, bookie.port))
    attacker = Client.__new__(Client)
    attacker.sock, attacker.buf, attacker.txn = raw, b"", 0
    start_tls(attacker, pki.ssl_context())
    attacker.sock.settimeout(2.0)
    try:
        attacker.sock.sendall(encode_read_request(5, 0) * 1000)     # 1 GB of answers, never read
    except (TimeoutError, ssl.SSLError, OSError):
        pass                                                         # the bookie stopped reading: fine
    peak = rss_before
    with start_tls(bookie.connect(), pki.ssl_context()) as c:
        stop_at = time.monotonic() + 3.0
        e = 0
        while time.monotonic() < stop_at:
            c.send_raw(encode_add_request(KEY, 6, e, e - 1, e + 1, b"n" * 100, CRC))
            assert decode_response(c.recv_body()).rc == 0
            peak = max(peak, _rss_bytes(bookie.pid))
            e += 1
    assert peak - rss_before < 200 * 1024 * 1024, (rss_before, peak)
    deadline = time.monotonic() + 10
    while "has not read its answers" not in bookie.log(None) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "has not read its answers" in bookie.log(None)
    attacker.close()
    _serves(bookie, pki)


def test_replaced_certificate_files_are_picked_up_without_dropping_connections(bookie, pki, tmp_path):
    old = start_tls(bookie.connect(), pki.ssl_context())
    try:
        first_issuer = old.sock.getpeercert()["issuer"]
        new_ca = CertificateAuthority("rotated CA")
        issued = new_ca.issue("127.0.0.1", hosts=("127.0.0.1",))
        key, cert = issued.write_pem(tmp_path, "new")
        os.replace(cert, bookie.files / "bookie.pem")
        os.replace(key, bookie.files / "bookie.key")
        ca_file = new_ca.write_pem(tmp_path / "newca.pem")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(str(ca_file))
        deadline = time.monotonic() + 10
        while True:                                # within the refresh interval (1 s) new connections switch
            try:
                with start_tls(bookie.connect(), ctx) as fresh:
                    assert fresh.sock.getpeercert()["issuer"] != first_issuer
                    fresh.send_raw(INFO)
                    assert pb.Response.FromString(fresh.recv_body()).status == pb.EOK
                    break
            except ssl.SSLError:
                assert time.monotonic() < deadline, "the bookie never served the new certificate"
                time.sleep(0.3)
        old.send_raw(INFO)                          # the connection made before the change carries on
        assert pb.Response.FromString(old.recv_body()).status == pb.EOK
    finally:
        old.close()
