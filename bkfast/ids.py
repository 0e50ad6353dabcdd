"""Identities: ledger ids (the (scope_id, ledger_id) pair of bkfast's 128-bit ids), entry id checks, the
v3 wire forms of scope ids, and a bookie's address and id.

This module owns the one definition of what a valid ledger id, scope id and entry id is, the textual
and UUID forms of a ledger id (see spec/scope-ids.md), the int64 two's complement a scope id travels as
in v3's `ledgerScopeId`, the v3 `writeFlags` bit of DEFERRED_SYNC, splitting a "host:port" bookie id,
and how a bookie's configuration (listeningInterface, advertisedAddress, useHostNameAsBookieID,
useShortHostName, bookieId) turns into the address it binds, the address it advertises and its bookie
id (Java's BookieImpl.getBookieAddress). Scope 0 is Apache BookKeeper's classic 64-bit id space;
everything else is bkfast's extension. It is a leaf: it imports only the stdlib and bkfast.errors.
"""

from __future__ import annotations

import fcntl
import ipaddress
import re
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bkfast.errors import ConfigurationError, InvalidBookieIdError, InvalidLedgerIdError

MAX_LEDGER_ID = 2**63 - 1
"""Largest ledger id: Java's Long.MAX_VALUE (ids are non-negative signed longs)."""

MAX_SCOPE_ID = 2**64 - 1
"""Largest scope id: the high 64 bits of a 128-bit id, unsigned."""

MAX_ENTRY_ID = 2**63 - 1
LAST_ADD_CONFIRMED = -1
"""Entry id -1 in a read request means "the last add confirmed" (and is the LAC of an empty ledger)."""

DEFERRED_SYNC = 1
"""`AddRequest.writeFlags` bit of BookKeeper's WriteFlag.DEFERRED_SYNC (v3 only)."""

_LOW_63_BITS = (1 << 63) - 1
_U64 = (1 << 64) - 1
_QUALIFIED_NAME = re.compile(r"(?:0[xX])?([0-9a-fA-F]{32})")


def _check_int(field: str, value: object, low: int, high: int) -> int:
    # bool is an int subclass; True as a ledger id is always a bug at the call site.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLedgerIdError(f"{field} must be an integer, got {value!r} ({type(value).__name__})")
    if not low <= value <= high:
        raise InvalidLedgerIdError(f"{field} must be in [{low}, {high}], got {value}")
    return value


@dataclass(frozen=True, order=True, slots=True)
class LedgerId:
    """A ledger's full identity. Ordered by scope first, then ledger id (the order of the qualified name)."""

    scope_id: int
    ledger_id: int

    def __post_init__(self) -> None:
        _check_int("scope_id", self.scope_id, 0, MAX_SCOPE_ID)
        _check_int("ledger_id", self.ledger_id, 0, MAX_LEDGER_ID)

    @classmethod
    def classic(cls, ledger_id: int) -> LedgerId:
        """A scope-0 id, i.e. a plain Apache BookKeeper ledger id."""
        return cls(0, ledger_id)

    @property
    def is_scoped(self) -> bool:
        """True for bkfast's extended ids (scope != 0), which need the v3 protocol and a bkfast bookie."""
        return self.scope_id != 0

    @property
    def qualified_name(self) -> str:
        """32 lower-case hex digits, scope first."""
        return f"{self.scope_id:016x}{self.ledger_id:016x}"

    @classmethod
    def parse_qualified_name(cls, text: str) -> LedgerId:
        """Inverse of `qualified_name`; accepts upper case and an optional 0x prefix, nothing else."""
        if not isinstance(text, str):
            raise InvalidLedgerIdError(f"qualified name must be a string, got {text!r}")
        match = _QUALIFIED_NAME.fullmatch(text)
        if match is None:
            raise InvalidLedgerIdError(
                f"qualified name must be exactly 32 hex digits (optionally prefixed by 0x), got {text!r}"
            )
        digits = match.group(1)
        # The scope half may use all 64 bits, the ledger half may not: reject rather than silently mask.
        return cls(int(digits[:16], 16), int(digits[16:], 16))

    @classmethod
    def from_uuid(cls, value: uuid.UUID) -> LedgerId:
        """Map a UUID to an id: scope = high 64 bits, ledger = low 64 bits with the top bit cleared."""
        if not isinstance(value, uuid.UUID):
            raise InvalidLedgerIdError(f"expected a uuid.UUID, got {value!r}")
        return cls(value.int >> 64, value.int & _LOW_63_BITS)

    def to_uuid(self) -> uuid.UUID:
        """The UUID with this id's bits; bit 63 is always 0.

        `from_uuid` clears bit 63 of the UUID, so this is its inverse only for UUIDs whose bit 63 was
        already 0 — a random (version 4) UUID has the RFC 4122 variant bits there and does not round-trip.
        """
        return uuid.UUID(int=(self.scope_id << 64) | self.ledger_id)

    def __str__(self) -> str:
        # Scope-0 ids print as Java prints them, so logs and tools stay comparable with BookKeeper's.
        return str(self.ledger_id) if self.scope_id == 0 else self.qualified_name

    def __repr__(self) -> str:
        return f"LedgerId(scope_id={self.scope_id:#x}, ledger_id={self.ledger_id})"


def validate_ledger_id(ledger_id: object) -> int:
    """Check a plain (scope-less) ledger id and return it."""
    return _check_int("ledger_id", ledger_id, 0, MAX_LEDGER_ID)


def validate_scope_id(scope_id: object) -> int:
    """Check a scope id and return it."""
    return _check_int("scope_id", scope_id, 0, MAX_SCOPE_ID)


def validate_entry_id(entry_id: object, allow_last: bool = False) -> int:
    """Check an entry id (0 .. 2**63-1) and return it; -1 ("last add confirmed") only if `allow_last`."""
    low = LAST_ADD_CONFIRMED if allow_last else 0
    return _check_int("entry_id", entry_id, low, MAX_ENTRY_ID)


def scope_field(scope_id: int) -> int:
    """The v3 `ledgerScopeId` (an int64 on the wire) for a scope id: the unsigned scope's two's complement."""
    if not 0 <= scope_id <= MAX_SCOPE_ID:
        raise InvalidLedgerIdError(f"scope id {scope_id} is outside 0..2^64-1")
    return scope_id if scope_id <= _LOW_63_BITS else scope_id - (1 << 64)


def scope_from_field(field: int) -> int:
    """The scope id a v3 `ledgerScopeId` (int64, two's complement) stands for."""
    return field & _U64


def split_bookie_id(bookie_id: str) -> tuple[str, int]:
    """ "host:port" (IPv6 hosts may be bracketed) -> (host, port); InvalidBookieIdError otherwise."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidBookieIdError(f"bookie id {bookie_id!r} is not host:port")
    return host.strip("[]"), int(port)


# --- bookie address ----------------------------------------------------------------------------------

_SIOCGIFADDR = 0x8915          # linux/sockios.h: get an interface's (first) IPv4 address
_IFNAMSIZ = 16


def interface_names() -> list[str]:
    """The names of this host's network interfaces (`lo`, `eth0`, ...)."""
    return [name for _, name in socket.if_nameindex()]


def interface_ipv4(name: str) -> str:
    """The IPv4 address of network interface `name`, asked of the kernel (SIOCGIFADDR).

    ConfigurationError naming listeningInterface when there is no such interface or it has no IPv4
    address.
    """
    names = interface_names()
    if name not in names:
        raise ConfigurationError(f"listeningInterface: no network interface named {name!r} on this host "
                                 f"(it has {', '.join(names) or 'none'})")
    request = struct.pack("256s", name.encode()[:_IFNAMSIZ - 1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            answer = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, request)
        except OSError:
            raise ConfigurationError(f"listeningInterface: interface {name!r} has no IPv4 address; "
                                     "configure one or set advertisedAddress") from None
    return socket.inet_ntoa(answer[20:24])      # struct ifreq: name[16], sockaddr_in (family, port, addr)


def _default_host_address() -> str:
    # Java: the local host's canonical name, resolved (InetAddress.getLocalHost()).
    fqdn = socket.getfqdn()
    try:
        return socket.gethostbyname(fqdn)
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _canonical_host_name(address: str) -> str:
    try:
        return socket.gethostbyaddr(address)[0]
    except OSError:
        return address            # Java's getCanonicalHostName also falls back to the address text


@dataclass(frozen=True)
class BookieAddress:
    """Where a bookie listens (`bind_host`, "0.0.0.0" = every interface) and what it tells the world."""

    bind_host: str
    host: str
    port: int
    bookie_id: str


@dataclass(frozen=True)
class AddressSettings:
    """The configuration keys a bookie's address comes from (BookKeeper's names in `from_conf`)."""

    bookie_port: int
    listening_interface: str = ""
    advertised_address: str = ""
    use_host_name_as_bookie_id: bool = False
    use_short_host_name: bool = False
    bookie_id: str = ""

    @classmethod
    def from_conf(cls, conf) -> AddressSettings:
        """From anything with `get(key)` (a ServerConfiguration)."""
        return cls(int(conf.get("bookiePort")), (conf.get("listeningInterface") or "").strip(),
                   (conf.get("advertisedAddress") or "").strip(), bool(conf.get("useHostNameAsBookieID")),
                   bool(conf.get("useShortHostName")), (conf.get("bookieId") or "").strip())


def bookie_address(conf) -> BookieAddress:
    """`resolve_bookie_address` of a configuration's AddressSettings."""
    return resolve_bookie_address(AddressSettings.from_conf(conf))


def resolve_bookie_address(settings: AddressSettings, *, interface_address: Callable[[str], str] = interface_ipv4,
                           default_address: Callable[[], str] = _default_host_address,
                           canonical_name: Callable[[str], str] = _canonical_host_name) -> BookieAddress:
    """A bookie's bind address, advertised host and id, as Java's BookieImpl.

    * listeningInterface names a network interface (`lo`, `eth0`): the bookie binds to that interface's
      IPv4 address; unset, it binds every interface. bkfast also accepts an IP address there (bind it).
    * The advertised host is advertisedAddress when set; else the interface's address (or, without an
      interface, the local host's address), or its canonical host name with useHostNameAsBookieID
      (cut at the first dot with useShortHostName).
    * The bookie id is bookieId when set, else `<advertised host>:<bookiePort>`.

    The three callables are how the host is asked (tests replace none of them for `lo`).
    """
    port = settings.bookie_port
    interface = settings.listening_interface
    iface_address = None
    if interface:
        try:
            literal = ipaddress.ip_address(interface)
        except ValueError:
            literal = None
        iface_address = str(literal) if literal is not None else interface_address(interface)
        bind_host = iface_address
        if literal is not None and literal.is_unspecified:
            iface_address = None
    else:
        bind_host = "0.0.0.0"
    if settings.advertised_address:
        host = settings.advertised_address
    else:
        address = iface_address or default_address()
        if settings.use_host_name_as_bookie_id:
            host = canonical_name(address)
            if settings.use_short_host_name:
                host = host.split(".", 1)[0]
        else:
            host = address
    return BookieAddress(bind_host, host, port, settings.bookie_id or f"{host}:{port}")
