"""OpenSSL (pyOpenSSL) TLS contexts built from BookKeeper's TLS keys (spec §8.3), and their refresh.

Owns: reading the key store (PEM: PKCS#8 key in `tlsKeyStore` + chain in `tlsCertificatePath`, the key's
password as read from `tlsKeyStorePasswordPath`; PKCS12: one file, password trimmed), the trust store
(PEM or PKCS12), client authentication, `tlsEnabledCipherSuites` (Java/IANA or OpenSSL names) and
`tlsEnabledProtocols` (unset: what a Java bookie or client enables, `JAVA_DEFAULT_CIPHER_SUITES` and
`JAVA_DEFAULT_PROTOCOLS`; docs/tls.md), no session cache (Java: size 0), and
`tlsCertFilesRefreshDurationSeconds`: once that long has passed since the last build, the next new
connection checks the files' modification times and rebuilds the context if one changed (existing
connections keep theirs; a failed rebuild is logged and the old context stays). A configuration mistake
is a one-line ConfigurationError at start.

`ServerTLS` makes server-side connections for Twisted's `startTLS`; `ClientTLS` client-side ones, with
hostname verification (service_identity, Java's "HTTPS" endpoint identification) when asked.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from OpenSSL import SSL, crypto
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IOpenSSLServerConnectionCreator
from zope.interface import implementer

from bkfast.errors import ConfigurationError

log = logging.getLogger(__name__)

__all__ = ["JAVA_DEFAULT_CIPHER_SUITES", "JAVA_DEFAULT_PROTOCOLS", "TLS_FACTORY_CLASS", "ClientTLS", "ServerTLS",
           "TLSSettings", "openssl_cipher_names", "tls_enabled", "verify_peer_callback", "verify_peer_name"]

TLS_FACTORY_CLASS = "org.apache.bookkeeper.tls.TLSContextFactory"
# With the keys unset, Java's TLSContextFactory builds its SslContext with ciphers(null): Netty's default list
# (SslUtils.DEFAULT_CIPHER_SUITES, in its order) kept to what the JDK supports, and the JDK's default
# protocols (jdk.tls.disabledAlgorithms removes TLSv1 and TLSv1.1). The JDK's own default list is longer
# (CBC-SHA256/384, DHE, CHACHA20 suites): a Java bookie refuses those all the same. Printed by JDK 17.0.15
# with Netty 4.2.13 (SslContextBuilder ... sslProvider(JDK) ... newEngine().getEnabledCipherSuites()).
JAVA_DEFAULT_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA", "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
)
JAVA_DEFAULT_PROTOCOLS = ("TLSv1.3", "TLSv1.2")
_PROTOCOLS = {
    "TLSv1": SSL.TLS1_VERSION, "TLSv1.1": SSL.TLS1_1_VERSION, "TLSv1.2": SSL.TLS1_2_VERSION,
    "TLSv1.3": SSL.TLS1_3_VERSION,
}


def tls_enabled(conf) -> bool:
    """True when `tlsProviderFactoryClass` names Java's TLSContextFactory; another value is an error."""
    name = conf.get("tlsProviderFactoryClass")
    if not name:
        return False
    if name.rsplit(".", 1)[-1] != "TLSContextFactory":
        raise ConfigurationError(f"tlsProviderFactoryClass: only {TLS_FACTORY_CLASS} is supported, got {name!r}")
    return True


def openssl_cipher_names(names: list[str]) -> tuple[list[str], list[str]]:
    """(TLS 1.2 OpenSSL cipher names, TLS 1.3 suite names) for Java/IANA or OpenSSL names."""
    v12, v13 = [], []
    for name in names:
        if name.startswith(("TLS_AES_", "TLS_CHACHA20_")):
            v13.append(name)
        elif name.startswith(("TLS_", "SSL_")) and "_WITH_" in name:
            kx, cipher = name[4:].split("_WITH_", 1)
            parts = [] if kx == "RSA" else [kx.replace("_", "-")]
            c = cipher.replace("AES_128_", "AES128-").replace("AES_256_", "AES256-").replace("_", "-")
            c = c.replace("CBC-", "").replace("CHACHA20-POLY1305-SHA256", "CHACHA20-POLY1305")
            parts.append(c)
            v12.append("-".join(parts))
        else:
            v12.append(name)
    return v12, v13


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ConfigurationError(f"{what}: cannot read {path}: {err.strerror}") from None


@dataclass(frozen=True)
class TLSSettings:
    """The TLS keys of one side, resolved (client deprecated overrides included)."""

    server: bool
    client_auth: bool
    key_type: str | None
    key_store: str | None
    key_password_path: str | None
    cert_path: str | None
    trust_type: str | None
    trust_store: str | None
    trust_password_path: str | None
    ciphers: list[str]
    protocols: list[str]
    refresh_s: int
    verify_hostname: bool

    @classmethod
    def from_conf(cls, conf, server: bool) -> TLSSettings:
        def pick(new: str, old: str):
            value = None if server else conf.get(old)
            return value if value else conf.get(new)

        return cls(server=server, client_auth=conf.get("tlsClientAuthentication"),
                   key_type=pick("tlsKeyStoreType", "clientKeyStoreType"),
                   key_store=pick("tlsKeyStore", "clientKeyStore"),
                   key_password_path=pick("tlsKeyStorePasswordPath", "clientKeyStorePasswordPath"),
                   cert_path=conf.get("tlsCertificatePath"),
                   trust_type=pick("tlsTrustStoreType", "clientTrustStoreType"),
                   trust_store=pick("tlsTrustStore", "clientTrustStore"),
                   trust_password_path=pick("tlsTrustStorePasswordPath", "clientTrustStorePasswordPath"),
                   ciphers=conf.get("tlsEnabledCipherSuites") or list(JAVA_DEFAULT_CIPHER_SUITES),
                   protocols=conf.get("tlsEnabledProtocols") or list(JAVA_DEFAULT_PROTOCOLS),
                   refresh_s=conf.get("tlsCertFilesRefreshDurationSeconds"),
                   verify_hostname=(not server) and bool(conf.get("tlsHostnameVerificationEnabled")))

    def files(self) -> list[str]:
        return [p for p in (self.key_store, self.key_password_path, self.cert_path, self.trust_store,
                            self.trust_password_path) if p]


def _password(path: str | None, trim: bool, what: str) -> bytes | None:
    if not path:
        return None
    data = _read(path, what)
    return data.strip() if trim else data


def _load_pkcs12(path: str, password: bytes | None, what: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(_read(path, what), password)
    except ValueError as err:
        raise ConfigurationError(f"{what}: cannot open PKCS12 store {path}: {err}") from None


def _check_type(kind: str, key: str) -> None:
    if kind == "JKS":
        raise ConfigurationError(f"{key}=JKS is not supported by bkfast: use PEM or PKCS12 "
                                 "(keytool -importkeystore -deststoretype PKCS12 converts a JKS store)")


def load_key_store(ctx: SSL.Context, s: TLSSettings) -> None:
    """Put the key and its certificate chain into ctx."""
    _check_type(s.key_type, "tlsKeyStoreType")
    if s.key_type == "PKCS12":
        store = _load_pkcs12(s.key_store, _password(s.key_password_path, True, "tlsKeyStorePasswordPath"),
                             "tlsKeyStore")
        if store.key is None or store.cert is None:
            raise ConfigurationError(f"tlsKeyStore: {s.key_store} holds no key and certificate")
        ctx.use_privatekey(store.key)
        ctx.use_certificate(store.cert.certificate)
        for extra in store.additional_certs:
            ctx.add_extra_chain_cert(extra.certificate)
    else:
        if not s.cert_path:
            raise ConfigurationError("tlsCertificatePath: a PEM key store needs its certificate chain file")
        password = _password(s.key_password_path, False, "tlsKeyStorePasswordPath")
        try:
            ctx.use_certificate_chain_file(s.cert_path)
        except SSL.Error as err:
            raise ConfigurationError(f"tlsCertificatePath: {s.cert_path} is not a PEM certificate chain: "
                                     f"{_why(err)}") from None
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            key = load_pem_private_key(_read(s.key_store, "tlsKeyStore"), password or None)
        except (ValueError, TypeError) as err:
            raise ConfigurationError(f"tlsKeyStore: cannot read the PEM key {s.key_store} "
                                     f"(wrong or missing password?): {err}") from None
        ctx.use_privatekey(key)
    try:
        ctx.check_privatekey()
    except SSL.Error:
        raise ConfigurationError(f"tlsKeyStore: the key in {s.key_store} does not match its certificate") from None


def load_trust_store(ctx: SSL.Context, s: TLSSettings) -> None:
    _check_type(s.trust_type, "tlsTrustStoreType")
    if s.trust_type == "PKCS12":
        store = _load_pkcs12(s.trust_store, _password(s.trust_password_path, True, "tlsTrustStorePasswordPath"),
                             "tlsTrustStore")
        certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
        if not certs:
            raise ConfigurationError(f"tlsTrustStore: {s.trust_store} holds no certificate")
        x509_store = ctx.get_cert_store()
        for c in certs:
            x509_store.add_cert(crypto.X509.from_cryptography(c.certificate))
    else:
        _read(s.trust_store, "tlsTrustStore")
        try:
            ctx.load_verify_locations(s.trust_store)
        except SSL.Error as err:
            raise ConfigurationError(f"tlsTrustStore: {s.trust_store} is not a PEM certificate file: "
                                     f"{_why(err)}") from None


def _why(err: Exception) -> str:
    args = err.args[0] if err.args else None
    if isinstance(args, list) and args and isinstance(args[0], tuple):
        return args[0][-1]
    return str(err) or type(err).__name__


def verify_peer_callback(conn, cert, errno, depth, ok):
    """OpenSSL's verdict as it is: the callback only stops pyOpenSSL from asking Python for one."""
    return bool(ok)


def build_context(s: TLSSettings) -> SSL.Context:
    """A fresh OpenSSL context for one side; raises ConfigurationError on any bad setting or file."""
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD if s.server else SSL.TLS_CLIENT_METHOD)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    if s.server:
        if not s.key_store:
            raise ConfigurationError("tlsKeyStore: a TLS bookie needs its key (and tlsCertificatePath)")
        load_key_store(ctx, s)
        if s.client_auth:
            if not s.trust_store:
                raise ConfigurationError("tlsTrustStore: tlsClientAuthentication=true needs a trust store")
            load_trust_store(ctx, s)
            # A client without a certificate gets certificate_required (TLS 1.3) or handshake_failure (1.2),
            # where Java sends bad_certificate: OpenSSL picks that alert without calling back into us.
            ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, verify_peer_callback)
        elif s.trust_store:
            load_trust_store(ctx, s)
    else:
        if not s.trust_store:
            raise ConfigurationError("tlsTrustStore: a TLS client needs a trust store (the bookies' CA)")
        load_trust_store(ctx, s)
        ctx.set_verify(SSL.VERIFY_PEER, verify_peer_callback)
        if s.client_auth:
            if not s.key_store:
                raise ConfigurationError("tlsKeyStore: tlsClientAuthentication=true needs the client's key")
            load_key_store(ctx, s)
    unknown = [p for p in s.protocols if p not in _PROTOCOLS]
    if unknown:
        raise ConfigurationError(f"tlsEnabledProtocols: unknown {', '.join(unknown)} "
                                 f"(expected some of {', '.join(_PROTOCOLS)})")
    versions = [_PROTOCOLS[p] for p in s.protocols]
    ctx.set_min_proto_version(min(versions))
    ctx.set_max_proto_version(max(versions))
    _set_ciphers(ctx, s.ciphers)
    return ctx


def _set_ciphers(ctx: SSL.Context, names: list[str]) -> None:
    from cryptography.hazmat.bindings.openssl.binding import Binding

    v12, v13 = openssl_cipher_names(names)
    try:
        # An empty TLS 1.2 list is legal only together with TLS 1.3 suites.
        ctx.set_cipher_list(":".join(v12).encode() if v12 else b"")
    except SSL.Error:
        if v12:
            raise ConfigurationError(f"tlsEnabledCipherSuites: no usable cipher in {', '.join(names)}") from None
    # pyOpenSSL has no call for TLS 1.3 suites; OpenSSL's own takes them (their names are the IANA ones).
    lib = Binding().lib
    if lib.SSL_CTX_set_ciphersuites(ctx._context, ":".join(v13).encode()) != 1 and v13:
        raise ConfigurationError(f"tlsEnabledCipherSuites: unknown TLS 1.3 suite in {', '.join(v13)}")
    if not v12 and not v13:
        raise ConfigurationError("tlsEnabledCipherSuites: empty")


class _Refreshing:
    """A context rebuilt when its files change (checked at most every refresh_s, on a new connection)."""

    def __init__(self, settings: TLSSettings, clock=time.monotonic):
        self.settings = settings
        self.clock = clock
        self.context = build_context(settings)
        self.built_at = clock()
        self.stamps = self._stamps()

    def _stamps(self):
        out = []
        for p in self.settings.files():
            try:
                st = os.stat(p)
                out.append((p, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((p, None, None))
        return out

    def current(self) -> SSL.Context:
        refresh = self.settings.refresh_s
        if refresh > 0 and self.clock() - self.built_at >= refresh:
            self.built_at = self.clock()
            stamps = self._stamps()
            if stamps != self.stamps:
                try:
                    self.context = build_context(self.settings)
                    self.stamps = stamps
                    log.info("TLS certificate files changed: new connections use the new ones")
                except Exception as err:
                    log.error("TLS certificate files changed but cannot be loaded (keeping the old ones): %s", err)
        return self.context


@implementer(IOpenSSLServerConnectionCreator)
class ServerTLS(_Refreshing):
    """The bookie's side: `startTLS(ServerTLS(...))` on a START_TLS request."""

    def __init__(self, conf, clock=time.monotonic):
        super().__init__(TLSSettings.from_conf(conf, server=True), clock)

    def serverConnectionForTLS(self, tls_protocol):
        return SSL.Connection(self.current(), None)


@implementer(IOpenSSLClientConnectionCreator)
class ClientTLS(_Refreshing):
    """A client's side; `for_host(host)` gives the creator for one connection."""

    def __init__(self, conf, clock=time.monotonic):
        super().__init__(TLSSettings.from_conf(conf, server=False), clock)

    def clientConnectionForTLS(self, tls_protocol):
        conn = SSL.Connection(self.current(), None)
        conn.set_connect_state()
        return conn


def verify_peer_name(ssl_connection, host: str) -> str | None:
    """None when the peer's certificate names `host` (an IP address or a DNS name), else why not."""
    import ipaddress

    from service_identity import VerificationError
    from service_identity.exceptions import CertificateError
    from service_identity.pyopenssl import verify_hostname, verify_ip_address

    try:
        try:
            ipaddress.ip_address(host)
            verify_ip_address(ssl_connection, host)
        except ValueError:
            verify_hostname(ssl_connection, host)
    except (VerificationError, CertificateError) as err:
        return f"the bookie's certificate does not name {host}: {err}"
    return None
