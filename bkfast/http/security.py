"""HTTPS and authentication of the bookie's admin HTTP API.

Owns: the HTTPS context (`httpServerTlsEnable`, `httpServerKeystorePath`/`Password`: a PKCS12 store or
a PEM file holding the key and its chain; `httpServerTrustStorePath`/`Password`: CA certificates whose
client certificates are trusted; a client certificate is asked for but not demanded, so read-only
endpoints stay usable without one), and the check in front of every request: a mutating request (any
method but GET/HEAD/OPTIONS), and a read-only one when `httpServerReadOnlyOpen=false`, needs
`Authorization: Bearer <token of httpServerAuthTokenFile>` or a client certificate the trust store
verified; otherwise 401 and nothing runs. `httpServerAuthRequired` (default: on as soon as a token file or
a trust store is configured) turns the check on.
"""

from __future__ import annotations

import hmac
import json
import logging

from twisted.web import resource, server

from bkfast.errors import ConfigurationError

log = logging.getLogger(__name__)

__all__ = ["GuardedSite", "HttpSecurity", "https_context_factory"]

_READ_ONLY_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})


class HttpSecurity:
    """Who may call which admin endpoint."""

    def __init__(self, required: bool, token: bytes | None, client_certs: bool, read_only_open: bool):
        self.required = required
        self.token = token
        self.client_certs = client_certs
        self.read_only_open = read_only_open

    @classmethod
    def from_conf(cls, conf) -> HttpSecurity:
        token = None
        path = conf.get("httpServerAuthTokenFile")
        if path:
            try:
                with open(path, "rb") as f:
                    token = f.read().strip()
            except OSError as err:
                raise ConfigurationError(f"httpServerAuthTokenFile: cannot read {path}: {err.strerror}") from None
            if not token:
                raise ConfigurationError(f"httpServerAuthTokenFile: {path} is empty")
        client_certs = bool(conf.get("httpServerTlsEnable") and conf.get("httpServerTrustStorePath"))
        required = conf.get("httpServerAuthRequired")
        if required and token is None and not client_certs:
            raise ConfigurationError("httpServerAuthRequired: set httpServerAuthTokenFile, or "
                                     "httpServerTlsEnable with httpServerTrustStorePath (client certificates)")
        return cls(required, token, client_certs, conf.get("httpServerReadOnlyOpen"))

    def allows(self, request) -> bool:
        if not self.required:
            return True
        if self.read_only_open and request.method in _READ_ONLY_METHODS:
            return True
        if self.token is not None:
            header = request.getHeader(b"authorization") or b""
            if isinstance(header, str):
                header = header.encode()
            scheme, _, given = header.partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
                return True
        if self.client_certs:
            get_cert = getattr(request.transport, "getPeerCertificate", None)
            if get_cert is not None and get_cert() is not None:
                return True       # verified against httpServerTrustStorePath during the handshake
        return False


class _Unauthorized(resource.Resource):
    isLeaf = True

    def render(self, request):
        request.setResponseCode(401)
        request.setHeader(b"Content-Type", b"application/json")
        request.setHeader(b"WWW-Authenticate", b'Bearer realm="bkfast admin"')
        return (json.dumps({"error": "authentication required: Authorization: Bearer <token> "
                                     "or a trusted client certificate"}) + "\n").encode()


class GuardedSite(server.Site):
    """A Site whose every request passes `HttpSecurity.allows` before any resource sees it."""

    def __init__(self, root, security: HttpSecurity, **kwargs):
        super().__init__(root, **kwargs)
        self.security = security

    def getResourceFor(self, request):
        if not self.security.allows(request):
            log.warning("admin API: refused unauthenticated %s %s from %s", request.method.decode("ascii", "replace"),
                        request.uri.decode("ascii", "replace"), request.getClientAddress())
            return _Unauthorized()
        return super().getResourceFor(request)


def https_context_factory(conf):
    """The HTTPS server's context factory (`getContext()`), from the httpServer* keys."""
    from OpenSSL import SSL, crypto

    from bkfast.tls.context import _verify_cb

    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_options(SSL.OP_NO_COMPRESSION)
    path = conf.get("httpServerKeystorePath")
    if not path:
        raise ConfigurationError("httpServerKeystorePath: httpServerTlsEnable=true needs the server's key store")
    password = (conf.get("httpServerKeystorePassword") or "").encode() or None
    key, certs = _load(path, password, "httpServerKeystorePath")
    if key is None or not certs:
        raise ConfigurationError(f"httpServerKeystorePath: {path} must hold a private key and its certificate")
    ctx.use_privatekey(key)
    ctx.use_certificate(certs[0])
    for extra in certs[1:]:
        ctx.add_extra_chain_cert(extra)
    try:
        ctx.check_privatekey()
    except SSL.Error:
        raise ConfigurationError(f"httpServerKeystorePath: the key in {path} does not match its certificate") from None
    trust = conf.get("httpServerTrustStorePath")
    if trust:
        _, cas = _load(trust, (conf.get("httpServerTrustStorePassword") or "").encode() or None,
                       "httpServerTrustStorePath")
        if not cas:
            raise ConfigurationError(f"httpServerTrustStorePath: {trust} holds no certificate")
        store = ctx.get_cert_store()
        for ca in cas:
            store.add_cert(crypto.X509.from_cryptography(ca))
        ctx.set_verify(SSL.VERIFY_PEER, _verify_cb)     # asked for, not demanded (read-only endpoints)

    class _Factory:
        def getContext(self):
            return ctx

    return _Factory()


def _load(path: str, password: bytes | None, key_name: str):
    """(private key or None, [certificates]) from a PEM or PKCS12 file."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise ConfigurationError(f"{key_name}: cannot read {path}: {err.strerror}") from None
    try:
        if b"-----BEGIN" in data:
            certs = x509.load_pem_x509_certificates(data) if b"CERTIFICATE-----" in data else []
            key = load_pem_private_key(data, password) if b"PRIVATE KEY-----" in data else None
            return key, certs
        store = pkcs12.load_pkcs12(data, password)
    except (ValueError, TypeError) as err:
        raise ConfigurationError(f"{key_name}: cannot read {path} (wrong password?): {err}") from None
    certs = [store.cert.certificate] if store.cert is not None else []
    certs += [c.certificate for c in store.additional_certs]
    return store.key, certs
