"""Certificates for the TLS tests (a real CA made with `cryptography`) and a raw TLS-capable client."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from bkfast.tls.certs import CertificateAuthority
from tests.server_support import Client

START_TLS = bytes.fromhex("0000000b0a06080310091801d20600")
START_TLS_EOK = bytes.fromhex("0000000d0a060803100918011000d20600")
TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
AUTHZ_FACTORY = "org.apache.bookkeeper.tls.BookieAuthZFactory"


@dataclass
class Pki:
    """Files of one test PKI: a CA, a bookie certificate, client certificates."""

    dir: Path
    ca: Path
    bookie_key: Path
    bookie_cert: Path
    clients: dict            # name -> (key, cert)
    authority: CertificateAuthority | None = None     # the CA itself, for tests that issue more certificates

    def bookie_conf(self, *, client_auth: bool = False, authz: bool = False) -> dict[str, str]:
        conf = {"tlsProviderFactoryClass": TLS_FACTORY, "tlsKeyStoreType": "PEM",
                "tlsKeyStore": str(self.bookie_key), "tlsCertificatePath": str(self.bookie_cert)}
        if client_auth or authz:
            conf.update(tlsClientAuthentication="true", tlsTrustStoreType="PEM", tlsTrustStore=str(self.ca))
        if authz:
            conf.update(bookieAuthProviderFactoryClass=AUTHZ_FACTORY, authorizedRoles="bkclient")
        return conf

    def client_conf(self, client: str | None = None) -> dict:
        conf = {"tlsProviderFactoryClass": TLS_FACTORY, "tlsTrustStoreType": "PEM", "tlsTrustStore": str(self.ca)}
        if client is not None:
            key, cert = self.clients[client]
            conf.update(tlsClientAuthentication=True, tlsKeyStoreType="PEM", tlsKeyStore=str(key),
                        tlsCertificatePath=str(cert))
        return conf

    def ssl_context(self, client: str | None = None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(str(self.ca))
        if client is not None:
            key, cert = self.clients[client]
            ctx.load_cert_chain(str(cert), str(key))
        return ctx


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("bkfast test CA")
    other = CertificateAuthority("another CA")
    bookie_key, bookie_cert = ca.issue("127.0.0.1", hosts=("127.0.0.1", "localhost")).write_pem(directory, "bookie")
    clients = {
        "good": ca.issue("client", ou="0:bkclient;1:cluster1").write_pem(directory, "good"),
        "intruder": ca.issue("intruder", ou="0:intruder;1:cluster1").write_pem(directory, "intruder"),
        "noou": ca.issue("noou").write_pem(directory, "noou"),
        "expired": ca.issue("old", ou="0:bkclient;1:cluster1", expired=True).write_pem(directory, "expired"),
        "otherca": other.issue("stranger", ou="0:bkclient;1:cluster1").write_pem(directory, "otherca"),
    }
    return Pki(directory, ca.write_pem(directory / "ca.pem"), bookie_key, bookie_cert, clients, ca)


def start_tls(client: Client, ctx: ssl.SSLContext) -> Client:
    """START_TLS on a raw client, checked byte for byte, then the TLS handshake; the client speaks TLS."""
    client.send_raw(START_TLS)
    assert client.recv_frame() == START_TLS_EOK
    assert client.buf == b""
    client.sock = ctx.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client
