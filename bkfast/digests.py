"""Digest types of BookKeeper entries and the keys derived from a ledger password.

Owns: the DigestType numbering (LedgerMetadataFormat's: CRC32=1, HMAC=2, CRC32C=3, DUMMY=4, which is
also the digest nibble of a v2 scoped entry), digest sizes, and key derivation (master key sent to
bookies, MAC key for HMAC-SHA1 digests). A leaf: it imports nothing from bkfast. The Cython codec uses
the same numbers as plain ints.
"""

from __future__ import annotations

import enum
import hashlib


class DigestType(enum.IntEnum):
    CRC32 = 1
    MAC = 2  # stored as HMAC in ledger metadata
    CRC32C = 3
    DUMMY = 4

    @classmethod
    def parse(cls, value: "str | int | DigestType") -> "DigestType":
        """Accept an enum, its number, or a name as BookKeeper spells it (MAC and HMAC are one type)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                raise ValueError(f"unknown digest type number {value}; expected 1..4") from None
        if isinstance(value, str):
            name = value.strip().upper()
            if name == "HMAC":
                name = "MAC"
            try:
                return cls[name]
            except KeyError:
                pass
        raise ValueError(f"unknown digest type {value!r}; expected one of CRC32, MAC, CRC32C, DUMMY")


DIGEST_LENGTH = {DigestType.CRC32: 8, DigestType.MAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}

MASTER_KEY_LENGTH = 20

# Java's DigestManager computes SHA1(UTF8(pad) || password).
_MASTER_KEY_PAD = b"ledger"
_MAC_KEY_PAD = b"mac"


def _password_bytes(password: "bytes | str") -> bytes:
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


def master_key(password: "bytes | str") -> bytes:
    """The 20-byte key a client sends to bookies: SHA1("ledger" + password)."""
    return hashlib.sha1(_MASTER_KEY_PAD + _password_bytes(password)).digest()


def mac_key(password: "bytes | str") -> bytes:
    """The HMAC-SHA1 key of a MAC-digest ledger: SHA1("mac" + password)."""
    return hashlib.sha1(_MAC_KEY_PAD + _password_bytes(password)).digest()


EMPTY_PASSWORD_MASTER_KEY = master_key(b"")
