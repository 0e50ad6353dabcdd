"""Java's `BookieAuthZFactory`: a connection may use the bookie only if its client certificate names an
authorized role (spec §8.2).

Owns: `bookieAuthProviderFactoryClass` / `authorizedRoles` checking, and reading the role from the
certificate subject's OU in Java's `0:<roles>;1:<cluster>` form (`;`-separated `code:value` pairs, code 0
= a comma list of roles, ONLY the first of which is compared). The verdict is made once, when the TLS
handshake of the connection ends (`onProtocolUpgrade`).
"""

from __future__ import annotations

from bkfast.errors import ConfigurationError

__all__ = ["AUTHZ_FACTORY_CLASS", "RoleAuthorizer", "authorizer_from_conf", "roles_of"]

AUTHZ_FACTORY_CLASS = "org.apache.bookkeeper.tls.BookieAuthZFactory"
_DISABLED = ("org.apache.bookkeeper.auth.AuthProviderFactoryFactory$AuthDisabledPlugin", "AuthDisabledPlugin")


def roles_of(cert) -> list[str]:
    """The roles (code 0) of a cryptography certificate's subject OU values, in order."""
    from cryptography.x509.oid import NameOID

    roles: list[str] = []
    for attr in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME):
        for pair in str(attr.value).split(";"):
            code, sep, value = pair.partition(":")
            if sep and code.strip() == "0":
                roles += [r.strip() for r in value.split(",") if r.strip()]
    return roles


class RoleAuthorizer:
    """Lets in a certificate whose first role is one of `roles`."""

    def __init__(self, roles: list[str]):
        self.roles = frozenset(roles)

    def check(self, cert) -> str | None:
        """None if authorized, else why not (for the log). `cert`: a cryptography certificate or None."""
        if cert is None:
            return "Certificate missing"
        roles = roles_of(cert)
        if not roles:
            return "No cert role in OU field"
        if roles[0] not in self.roles:
            return f"role {roles[0]!r} is not in authorizedRoles"
        return None


def authorizer_from_conf(conf) -> RoleAuthorizer | None:
    """The bookie's authorizer, or None when every connection is authenticated at once (no provider)."""
    name = conf.get("bookieAuthProviderFactoryClass")
    if not name or name in _DISABLED:
        return None
    if name.rsplit(".", 1)[-1] != "BookieAuthZFactory":
        raise ConfigurationError(f"bookieAuthProviderFactoryClass: only {AUTHZ_FACTORY_CLASS} is supported, "
                                 f"got {name!r}")
    roles = conf.get("authorizedRoles")
    if not roles:
        raise ConfigurationError("authorizedRoles: BookieAuthZFactory needs at least one role")
    return RoleAuthorizer(roles)
