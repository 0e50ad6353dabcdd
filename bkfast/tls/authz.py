"""Java's `BookieAuthZFactory`: a connection may use the bookie only if its client certificate names an
authorized role (spec §8.2).

Owns: `bookieAuthProviderFactoryClass` / `authorizedRoles` checking, and reading the role from the
certificate subject's OU in Java's `0:<roles>;1:<cluster>` form (`;`-separated `code:value` pairs, code 0
= a comma list of roles, ONLY the first of which is compared), with every quirk of Java's parsing (spec
§8.2). The verdict is made once, when the TLS handshake of the connection ends (`onProtocolUpgrade`).
"""

from __future__ import annotations

import re

from bkfast.errors import ConfigurationError

__all__ = ["AUTHZ_FACTORY_CLASS", "RoleAuthorizer", "authorizer_from_conf", "roles_of"]

AUTHZ_FACTORY_CLASS = "org.apache.bookkeeper.tls.BookieAuthZFactory"
_DISABLED = ("org.apache.bookkeeper.auth.AuthProviderFactoryFactory$AuthDisabledPlugin", "AuthDisabledPlugin")


# Java's "." stops at any line terminator, not only at "\n" as Python's does.
_OU_PART = re.compile("([0-9]+):([^\n\r\u0085\u2028\u2029]*)")
_JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))     # String.trim(): every char up to U+0020


def roles_of(cert) -> list[str]:
    """The roles (code 0) of a cryptography certificate's subject, parsed exactly as Java 4.16.7's CertUtils
    does (spec §8.2), since a bookie of either kind must give the same verdict on the same certificate:
    only the first OU RDN in the subject's encoded order counts; it is split on ";" without trimming; a
    part counts only if the whole of it is `<digits>:<value>` (so " 0:x" does not); code and value are
    trimmed; a later part with the same code replaces an earlier one; the code-0 value is split on ","
    (Java's String.split: trailing empty pieces dropped) and each piece trimmed, empty ones kept."""
    from cryptography.x509.oid import NameOID

    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    if not units:
        return []
    fields: dict[str, str] = {}
    for part in str(units[0].value).split(";"):
        match = _OU_PART.fullmatch(part)
        if match:
            fields[match.group(1)] = match.group(2).strip(_JAVA_TRIMMED)
    if "0" not in fields:
        return []
    return [role.strip(_JAVA_TRIMMED) for role in _java_split(fields["0"], ",")]


def _java_split(text: str, separator: str) -> list[str]:
    pieces = text.split(separator)
    if len(pieces) == 1:
        return pieces               # no separator: the text itself, even when empty
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


class RoleAuthorizer:
    """Lets in a certificate whose first role is one of `roles` (exactly: case and spaces count)."""

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
