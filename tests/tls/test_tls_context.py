"""TLS contexts from BookKeeper's keys (bkfast.tls.context): real handshakes between the bookie's and the
client's OpenSSL contexts over a socket pair, with certificates from a real CA made here."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from OpenSSL import SSL

from bkfast.conf import ClientConfiguration, ServerConfiguration
from bkfast.errors import ConfigurationError
from bkfast.tls.authz import RoleAuthorizer, authorizer_from_conf, roles_of
from bkfast.tls.certs import CertificateAuthority
from bkfast.tls.context import ClientTLS, ServerTLS, openssl_cipher_names, verify_peer_name
from tests.tls_support import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _handshake(server_ctx, client_ctx):
    """(server connection, client connection, server error, client error) after both handshakes."""
    a, b = socket.socketpair()
    server, client = SSL.Connection(server_ctx, a), SSL.Connection(client_ctx, b)
    server.set_accept_state()
    client.set_connect_state()
    errors = {}

    def run(name, conn):
        try:
            conn.do_handshake()
            if name == "client":          # TLS 1.3: a refused client certificate shows on the first read
                conn.sendall(b"ping")
                conn.recv(4)
            else:
                conn.recv(4)
                conn.sendall(b"pong")
        except (SSL.Error, OSError) as err:
            errors[name] = err
            with_shutdown = conn.get_socket() if hasattr(conn, "get_socket") else None
            if with_shutdown is not None:
                with_shutdown.shutdown(socket.SHUT_RDWR)

    threads = [threading.Thread(target=run, args=("server", server)),
               threading.Thread(target=run, args=("client", client))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return server, client, errors.get("server"), errors.get("client")


def _server(pki, **conf):
    return ServerTLS(ServerConfiguration({**pki.bookie_conf(), **conf}))


def _client(pki, who=None, **conf):
    return ClientTLS(ClientConfiguration({**pki.client_conf(who), **conf}))


def test_pem_handshake_and_peer_name(pki):
    server, client, s_err, c_err = _handshake(_server(pki).current(), _client(pki).current())
    assert s_err is None and c_err is None
    assert verify_peer_name(client, "127.0.0.1") is None
    assert verify_peer_name(client, "localhost") is None
    assert "does not name" in verify_peer_name(client, "10.1.2.3")
    assert "does not name" in verify_peer_name(client, "bookie.example.com")


def test_mutual_tls_client_certificate_and_roles(pki):
    server_tls = _server(pki, tlsClientAuthentication="true", tlsTrustStoreType="PEM", tlsTrustStore=str(pki.ca))
    server, client, s_err, c_err = _handshake(server_tls.current(), _client(pki, "good").current())
    assert s_err is None and c_err is None
    cert = server.get_peer_certificate().to_cryptography()
    assert roles_of(cert) == ["bkclient"]
    assert RoleAuthorizer(["bkclient"]).check(cert) is None
    assert RoleAuthorizer(["bkclient"]).check(_peer(server_tls, pki, "intruder")) == (
        "role 'intruder' is not in authorizedRoles")
    assert RoleAuthorizer(["bkclient"]).check(_peer(server_tls, pki, "noou")) == "No cert role in OU field"
    assert RoleAuthorizer(["bkclient"]).check(None) == "Certificate missing"
    for who in ("otherca", "expired"):
        _, _, s_err, c_err = _handshake(server_tls.current(), _client(pki, who).current())
        assert s_err is not None
    _, _, s_err, _ = _handshake(server_tls.current(), _client(pki).current())
    assert s_err is not None                                   # no certificate at all


def _peer(server_tls, pki, who):
    server, _, s_err, _ = _handshake(server_tls.current(), _client(pki, who).current())
    assert s_err is None
    return server.get_peer_certificate().to_cryptography()


def test_pkcs12_key_and_trust_stores_with_password_files(pki, tmp_path):
    ca = CertificateAuthority("p12 CA")
    (tmp_path / "key.pass").write_text("s3cret\n")            # PKCS12 passwords are trimmed (Java)
    ks = ca.issue("127.0.0.1", hosts=("127.0.0.1",)).write_pkcs12(tmp_path / "bookie.p12", b"s3cret")
    ts = ca.write_pkcs12_trust(tmp_path / "trust.p12", b"s3cret")
    server = ServerTLS(ServerConfiguration({"tlsProviderFactoryClass": "x.TLSContextFactory",
                                            "tlsKeyStoreType": "PKCS12", "tlsKeyStore": str(ks),
                                            "tlsKeyStorePasswordPath": str(tmp_path / "key.pass")}))
    client = ClientTLS(ClientConfiguration({"tlsTrustStoreType": "PKCS12", "tlsTrustStore": str(ts),
                                            "tlsTrustStorePasswordPath": str(tmp_path / "key.pass")}))
    _, _, s_err, c_err = _handshake(server.current(), client.current())
    assert s_err is None and c_err is None
    # the same client does not trust the PEM PKI's bookie
    _, _, _, c_err = _handshake(_server(pki).current(), client.current())
    assert c_err is not None


def test_encrypted_pem_key_with_its_password_file(pki, tmp_path):
    ca = CertificateAuthority()
    key, cert = ca.issue("127.0.0.1").write_pem(tmp_path, "enc", password=b"pw")
    (tmp_path / "pw").write_bytes(b"pw")
    conf = {"tlsKeyStoreType": "PEM", "tlsKeyStore": str(key), "tlsCertificatePath": str(cert)}
    ServerTLS(ServerConfiguration({**conf, "tlsKeyStorePasswordPath": str(tmp_path / "pw")}))
    with pytest.raises(ConfigurationError, match="tlsKeyStore: cannot read the PEM key"):
        ServerTLS(ServerConfiguration(conf))


@pytest.mark.parametrize("conf, message", [
    ({"tlsKeyStoreType": "JKS"}, "JKS is not supported"),
    ({"tlsKeyStore": "/nonexistent/key.pem"}, "tlsKeyStore: cannot read /nonexistent/key.pem"),
    ({"tlsEnabledProtocols": "TLSv9"}, "tlsEnabledProtocols: unknown TLSv9"),
    ({"tlsEnabledCipherSuites": "TLS_NOPE_WITH_NOTHING"}, "tlsEnabledCipherSuites"),
    ({"tlsClientAuthentication": "true"}, "needs a trust store"),
])
def test_configuration_mistakes_are_one_line_errors(pki, conf, message):
    with pytest.raises(ConfigurationError, match=message) as info:
        _server(pki, **conf)
    assert "\n" not in str(info.value)


def test_protocols_and_cipher_suites_are_applied(pki):
    server = _server(pki, tlsEnabledProtocols="TLSv1.2",
                     tlsEnabledCipherSuites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
    s, c, s_err, c_err = _handshake(server.current(), _client(pki).current())
    assert s_err is None and c_err is None
    assert c.get_protocol_version_name() == "TLSv1.2"
    assert c.get_cipher_name() == "ECDHE-ECDSA-AES256-GCM-SHA384"
    # CHACHA20 is not in Java's default list (bkfast's either): the client has to name it too
    s, c, _, _ = _handshake(_server(pki, tlsEnabledCipherSuites="TLS_CHACHA20_POLY1305_SHA256").current(),
                            _client(pki, tlsEnabledCipherSuites="TLS_CHACHA20_POLY1305_SHA256").current())
    assert c.get_protocol_version_name() == "TLSv1.3" and c.get_cipher_name() == "TLS_CHACHA20_POLY1305_SHA256"
    _, _, _, c_err = _handshake(server.current(), _client(pki, tlsEnabledProtocols="TLSv1.3").current())
    assert c_err is not None


def test_java_cipher_names():
    assert openssl_cipher_names(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_256_CBC_SHA",
                                 "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256",
                                 "ECDHE-RSA-AES128-SHA"]) == (
        ["ECDHE-RSA-AES128-GCM-SHA256", "AES256-SHA", "ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-RSA-AES128-SHA"],
        ["TLS_AES_128_GCM_SHA256"])


def test_changed_certificate_files_are_used_after_the_refresh_interval(pki, tmp_path):
    now = [0.0]
    ca = CertificateAuthority("first")
    key, cert = ca.issue("127.0.0.1").write_pem(tmp_path, "bookie")
    conf = ServerConfiguration({"tlsKeyStoreType": "PEM", "tlsKeyStore": str(key), "tlsCertificatePath": str(cert),
                                "tlsCertFilesRefreshDurationSeconds": "5"})
    server = ServerTLS(conf, clock=lambda: now[0])
    first = server.current()
    second_ca = CertificateAuthority("second")
    second_ca.issue("127.0.0.1").write_pem(tmp_path, "bookie")
    os.utime(key, ns=(time.time_ns() + 10**9,) * 2)
    now[0] = 4.0
    assert server.current() is first                  # not yet
    now[0] = 5.0
    assert server.current() is not first
    (tmp_path / "bookie.pem").write_text("garbage")   # a broken file is logged, the context stays
    os.utime(tmp_path / "bookie.pem", ns=(time.time_ns() + 2 * 10**9,) * 2)
    kept = server.current()
    now[0] = 11.0
    assert server.current() is kept


def test_authorizer_from_conf():
    assert authorizer_from_conf(ServerConfiguration()) is None
    with pytest.raises(ConfigurationError, match="authorizedRoles"):
        authorizer_from_conf(ServerConfiguration({"bookieAuthProviderFactoryClass":
                                                  "org.apache.bookkeeper.tls.BookieAuthZFactory"}))
    with pytest.raises(ConfigurationError, match="only org.apache.bookkeeper.tls.BookieAuthZFactory"):
        authorizer_from_conf(ServerConfiguration({"bookieAuthProviderFactoryClass": "com.example.Sasl",
                                                  "authorizedRoles": "a"}))
