"""TLS defaults next to a Java bookie (docs/tls.md): with tlsEnabledCipherSuites / tlsEnabledProtocols unset,
a bkfast bookie and client enable what Java 4.16.7 enables (Netty's default suites kept to the JDK's, TLSv1.3
and TLSv1.2), an explicit list still wins, and a client without a certificate gets the alert documented there.

The far side of every handshake is Python's own `ssl` (an independent TLS stack), against a real `bkfast
bookie` process or a bkfast context over a socket pair; certificates come from a CA made here.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa as rsa_keys
from cryptography.x509.oid import NameOID
from OpenSSL import SSL

from bkfast.conf import ClientConfiguration, ServerConfiguration
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.tls.certs import CertificateAuthority, Issued
from bkfast.tls.context import (
    JAVA_DEFAULT_CIPHER_SUITES,
    JAVA_DEFAULT_PROTOCOLS,
    ClientTLS,
    ServerTLS,
    openssl_cipher_names,
)
from tests import REPO
from tests.server_support import BookieProcess
from tests.tls_support import TLS_FACTORY, make_pki, start_tls

DOC = REPO / "docs" / "tls.md"
GET_BOOKIE_INFO = bytes.fromhex("0000000d0a06080310081832ca06020803")


def _documented():
    """(rows of the defaults table as (java, openssl, protocol), the documented protocols)."""
    text = DOC.read_text()
    table = text.split("<!-- java-default-suites")[1].split("<!-- end java-default-suites")[0]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| `([A-Z0-9_-]+)` \| (TLS 1\.[23]) \|$", table, re.M)
    protocols = re.search(r"^Protocols: (.*?) \(", text, re.M).group(1)
    return rows, re.findall(r"`(TLSv[0-9.]+)`", protocols)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def rsa(tmp_path_factory):
    """A CA and an RSA bookie certificate (the ECDHE_RSA suites need an RSA key): (ca file, key, cert)."""
    d = tmp_path_factory.mktemp("rsa")
    ca = CertificateAuthority("rsa CA")
    key = rsa_keys.generate_private_key(65537, 2048)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca.key, hashes.SHA256()))
    key_file, cert_file = Issued(key, cert, []).write_pem(d, "bookie")
    return ca.write_pem(d / "ca.pem"), key_file, cert_file


def _rsa_conf(rsa, **extra) -> dict:
    _, key, cert = rsa
    return {"tlsProviderFactoryClass": TLS_FACTORY, "tlsKeyStoreType": "PEM", "tlsKeyStore": str(key),
            "tlsCertificatePath": str(cert), **extra}


@pytest.fixture(scope="module")
def rsa_bookie(tmp_path_factory, rsa):
    b = BookieProcess(tmp_path_factory.mktemp("rsa-bookie"))
    b.extra_conf.update(_rsa_conf(rsa))
    b.start()
    yield b
    assert b.stop() == 0, b.log()


@pytest.fixture(scope="module")
def auth_bookie(tmp_path_factory, pki):
    b = BookieProcess(tmp_path_factory.mktemp("auth-bookie"))
    b.extra_conf.update(pki.bookie_conf(client_auth=True))
    b.start()
    yield b
    assert b.stop() == 0, b.log()


def _python_client(ca: Path, version=None, ciphers: str | None = None, cert=None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(ca))
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    if cert is not None:
        ctx.load_cert_chain(str(cert[1]), str(cert[0]))
    return ctx


def _bookie_answers(bookie, ctx: ssl.SSLContext):
    """(TLS version, cipher) after START_TLS and one request, or the SSLError's reason."""
    c = bookie.connect()
    try:
        start_tls(c, ctx)
        c.send_raw(GET_BOOKIE_INFO)
        assert pb.Response.FromString(c.recv_body()).status == pb.EOK
        return c.sock.version(), c.sock.cipher()[0]
    except ssl.SSLError as err:
        return err.reason
    finally:
        c.close()


def _against_python(ours: SSL.Context, theirs: ssl.SSLContext, ours_is_server: bool):
    """A bkfast context against Python's ssl over a socket pair: (version, cipher), or None if it failed."""
    a, b = socket.socketpair()          # `a` stays blocking: pyOpenSSL on a socket with a timeout raises WantRead
    b.settimeout(10)
    result = {}

    def python_side():
        try:
            s = theirs.wrap_socket(b, server_side=not ours_is_server,
                                   server_hostname=None if not ours_is_server else "127.0.0.1")
            s.sendall(b"ping")
            s.recv(4)
        except (ssl.SSLError, OSError):
            b.close()

    t = threading.Thread(target=python_side)
    t.start()
    conn = SSL.Connection(ours, a)
    if ours_is_server:
        conn.set_accept_state()
    else:
        conn.set_connect_state()
    try:
        conn.do_handshake()
        conn.recv(4)
        conn.sendall(b"pong")
        result["ok"] = (conn.get_protocol_version_name(), conn.get_cipher_name())
    except (SSL.Error, OSError):
        pass
    finally:
        a.close()
        t.join(10)
    return result.get("ok")


def test_the_defaults_are_the_documented_java_list_and_are_what_the_contexts_enable(pki):
    rows, protocols = _documented()
    assert [java for java, _, _ in rows] == list(JAVA_DEFAULT_CIPHER_SUITES)
    assert protocols == list(JAVA_DEFAULT_PROTOCOLS) == ["TLSv1.3", "TLSv1.2"]
    v12 = [o for _, o, p in rows if p == "TLS 1.2"]
    v13 = [o for _, o, p in rows if p == "TLS 1.3"]
    assert openssl_cipher_names([java for java, _, _ in rows]) == (v12, v13)
    for ctx in (ServerTLS(ServerConfiguration(pki.bookie_conf())).current(),
                ClientTLS(ClientConfiguration(pki.client_conf())).current()):
        assert SSL.Connection(ctx).get_cipher_list() == v13 + v12      # OpenSSL lists TLS 1.3 first


def test_a_default_bookie_refuses_cbc_sha256_and_accepts_java_default_suites(rsa_bookie, rsa):
    ca = rsa[0]
    tls12 = ssl.TLSVersion.TLSv1_2
    # Java 4.16.7 refuses this one (not in Netty's list although the JDK enables it)
    assert _bookie_answers(rsa_bookie, _python_client(ca, tls12, "ECDHE-RSA-AES128-SHA256")) == (
        "SSLV3_ALERT_HANDSHAKE_FAILURE")
    assert _bookie_answers(rsa_bookie, _python_client(ca, tls12, "ECDHE-RSA-AES256-SHA384:DHE-RSA-AES128-GCM-SHA256:"
                                                      "ECDHE-RSA-CHACHA20-POLY1305")) == (
        "SSLV3_ALERT_HANDSHAKE_FAILURE")
    for suite in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA",
                  "AES256-SHA"):
        assert _bookie_answers(rsa_bookie, _python_client(ca, tls12, suite)) == ("TLSv1.2", suite)
    assert _bookie_answers(rsa_bookie, _python_client(ca)) == ("TLSv1.3", "TLS_AES_128_GCM_SHA256")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_default_protocols_are_tls13_and_tls12_on_both_sides(pki):
    server = ServerTLS(ServerConfiguration(pki.bookie_conf())).current()
    client = ClientTLS(ClientConfiguration(pki.client_conf())).current()
    python_server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    python_server.load_cert_chain(str(pki.bookie_cert), str(pki.bookie_key))
    for version, accepted in ((ssl.TLSVersion.TLSv1_1, False), (ssl.TLSVersion.TLSv1_2, True),
                              (ssl.TLSVersion.TLSv1_3, True)):
        old = "DEFAULT:@SECLEVEL=0" if version == ssl.TLSVersion.TLSv1_1 else None
        got = _against_python(server, _python_client(pki.ca, version, old), ours_is_server=True)
        assert (got is not None) == accepted, (version, got)
        python_server.minimum_version = python_server.maximum_version = version
        if old:
            python_server.set_ciphers(old)
        got = _against_python(client, python_server, ours_is_server=False)
        assert (got is not None) == accepted, (version, got)


def test_a_default_client_refuses_what_a_java_client_refuses(pki):
    client = ClientTLS(ClientConfiguration(pki.client_conf())).current()

    def python_server(suites: str) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki.bookie_cert), str(pki.bookie_key))
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(suites)
        return ctx

    assert _against_python(client, python_server("ECDHE-ECDSA-AES128-SHA256"), ours_is_server=False) is None
    assert _against_python(client, python_server("ECDHE-ECDSA-CHACHA20-POLY1305"), ours_is_server=False) is None
    assert _against_python(client, python_server("ECDHE-ECDSA-AES128-GCM-SHA256"), ours_is_server=False) == (
        "TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")


def test_an_explicit_list_still_wins(rsa, pki):
    ca = rsa[0]
    server = ServerTLS(ServerConfiguration(_rsa_conf(
        rsa, tlsEnabledCipherSuites="TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", tlsEnabledProtocols="TLSv1.2"))).current()
    assert _against_python(server, _python_client(ca, ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES128-SHA256"),
                           ours_is_server=True) == ("TLSv1.2", "ECDHE-RSA-AES128-SHA256")
    assert _against_python(server, _python_client(ca, ssl.TLSVersion.TLSv1_3), ours_is_server=True) is None
    client = ClientTLS(ClientConfiguration({**pki.client_conf(), "tlsEnabledProtocols": "TLSv1.3",
                                            "tlsEnabledCipherSuites": "TLS_CHACHA20_POLY1305_SHA256"})).current()
    python_server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    python_server.load_cert_chain(str(pki.bookie_cert), str(pki.bookie_key))
    assert _against_python(client, python_server, ours_is_server=False) == (
        "TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256")


def test_a_client_without_a_certificate_gets_certificate_required_on_tls13_and_handshake_failure_on_tls12(
        auth_bookie, pki):
    # Java sends bad_certificate (42) for both; OpenSSL picks these alerts itself (docs/tls.md)
    assert _bookie_answers(auth_bookie, _python_client(pki.ca, ssl.TLSVersion.TLSv1_3)) == (
        "TLSV13_ALERT_CERTIFICATE_REQUIRED")
    assert _bookie_answers(auth_bookie, _python_client(pki.ca, ssl.TLSVersion.TLSv1_2)) == (
        "SSLV3_ALERT_HANDSHAKE_FAILURE")
    assert _bookie_answers(auth_bookie, _python_client(pki.ca, cert=pki.clients["good"]))[0] == "TLSv1.3"
