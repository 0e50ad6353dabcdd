"""HTTPS and authentication of the bookie's admin HTTP API.

Owns: the HTTPS context (`httpServerTlsEnable`, `httpServerKeystorePath`/`Password`: a PKCS12 store or
a PEM file holding the key and its chain; `httpServerTrustStorePath`/`Password`: CA certificates whose
client certificates are trusted; a client certificate is asked for but not demanded, so read-only
endpoints stay usable without one), and the check in front of every request: a mutating request (any
method but GET/HEAD/OPTIONS), and a read-only one when `httpServerReadOnlyOpen=false`, needs
`Authorization: Bearer <token of httpServerAuthTokenFile>` or a client certificate the trust store
verified; otherwise 401 and nothing runs. So does bookie/sanity, a GET that writes a ledger (admin_api).
With `bookieAuthProviderFactoryClass=...BookieAuthZFactory`, a client certificate must also name one of
`authorizedRoles` (the bookie port's rule, bkfast.tls.authz). `httpServerAuthRequired` (default: on as
soon as a token file or a trust store is configured) turns the check on. The check reads headers only:
bkfast.http.limits applies it before a request body is read.
"""

from __future__ import annotations

import hmac
import json
import logging

from twisted.web import resource

from bkfast.errors import ConfigurationError

log = logging.getLogger(__name__)

__all__ = ["HttpSecurity", "https_context_from_conf", "unauthorized_resource"]

_READ_ONLY_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})


class HttpSecurity:
    """Who may call which admin endpoint. With `authorizer` (bookieAuthProviderFactoryClass =
    BookieAuthZFactory and authorizedRoles), a client certificate admits a request only if it names an
    authorized role, as on the bookie's own port (spec §8.2)."""

    def __init__(self, required: bool, token: bytes | None, client_certs: bool, read_only_open: bool,
                 authorizer=None):
        self.required = required
        self.token = token
        self.client_certs = client_certs
        self.read_only_open = read_only_open
        self.authorizer = authorizer

    @classmethod
    def from_conf(cls, conf) -> HttpSecurity:
        from bkfast.tls.authz import authorizer_from_conf

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
        authorizer = authorizer_from_conf(conf) if client_certs else None
        return cls(required, token, client_certs, conf.get("httpServerReadOnlyOpen"), authorizer)

    def allows(self, request) -> bool:
        """Whether `request` may be served by its method: reads are open with httpServerReadOnlyOpen."""
        if not self.required:
            return True
        if self.read_only_open and request.method in _READ_ONLY_METHODS:
            return True
        return self.has_credentials(request.requestHeaders, request.transport)

    def allows_mutation(self, request) -> bool:
        """Whether `request` carries what a mutating request needs, whatever its method (a GET that
        changes state, such as bookie/sanity)."""
        return not self.required or self.has_credentials(request.requestHeaders, request.transport)

    def has_credentials(self, headers, transport) -> bool:
        """The bearer token, or a client certificate the trust store verified (with an authorized role when
        authorization is configured). Decided on the headers alone, so before any body is read."""
        if self.token is not None:
            values = headers.getRawHeaders(b"authorization") or [b""]
            scheme, _, given = values[-1].partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
                return True
        if self.client_certs:
            get_cert = getattr(transport, "getPeerCertificate", None)
            peer = get_cert() if get_cert is not None else None
            if peer is not None:        # verified against httpServerTrustStorePath during the handshake
                if self.authorizer is None:
                    return True
                why_not = self.authorizer.check(peer.to_cryptography())
                if why_not is None:
                    return True
                log.warning("admin API: client certificate %s refused: %s", peer.get_subject().CN, why_not)
        return False


class _Unauthorized(resource.Resource):
    isLeaf = True

    def render(self, request):
        request.setResponseCode(401)
        request.setHeader(b"Content-Type", b"application/json")
        request.setHeader(b"WWW-Authenticate", b'Bearer realm="bkfast admin"')
        return (json.dumps({"error": "authentication required: Authorization: Bearer <token> "
                                     "or a trusted client certificate"}) + "\n").encode()


def unauthorized_resource() -> resource.Resource:
    """The 401 answer, for a request refused after its body (if any) was read."""
    return _Unauthorized()


def https_context_from_conf(conf):
    """The HTTPS server's context factory (`getContext()`), from the httpServer* keys."""
    from OpenSSL import SSL, crypto

    from bkfast.tls.context import verify_peer_callback

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
        ctx.set_verify(SSL.VERIFY_PEER, verify_peer_callback)     # asked for, not demanded (read-only endpoints)

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
