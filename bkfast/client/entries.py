"""What a ledger reader gets back (LedgerEntry) and the per-ledger digest context that checks it."""

from __future__ import annotations

from bkfast import codec
from bkfast._clientpath import LedgerEntry  # a Cython class: the read path makes one per entry
from bkfast.digests import DigestType, mac_key, master_key

__all__ = ["LedgerEntry", "DigestContext"]


class DigestContext:
    """Keys and digest of one ledger: encodes entries for adds and verifies entries and LAC buffers read back."""

    __slots__ = ("digest_type", "master_key", "mac_key", "scope_id", "ledger_id")

    def __init__(self, digest_type: DigestType, password: bytes, scope_id: int, ledger_id: int):
        self.digest_type = DigestType.parse(digest_type)
        self.master_key = master_key(password)
        self.mac_key = mac_key(password) if self.digest_type == DigestType.MAC else b""
        self.scope_id = scope_id
        self.ledger_id = ledger_id

    def encode(self, entry_id: int, last_add_confirmed: int, length: int, payload) -> bytes:
        return codec.encode_entry(self.ledger_id, entry_id, last_add_confirmed, length, payload,
                                  self.digest_type, self.mac_key, self.scope_id)

    def decode(self, data, entry_id: int | None):
        """The verified codec Entry; raises a BKDigestMatchException subclass on any mismatch."""
        return codec.decode_entry(data, self.digest_type, self.mac_key, expected_ledger_id=self.ledger_id,
                                  expected_entry_id=entry_id, expected_scope_id=self.scope_id)

    def to_ledger_entry(self, data, entry_id: int) -> LedgerEntry:
        return self.verify(data, entry_id)[0]

    def verify(self, data, entry_id: int) -> tuple[LedgerEntry, int]:
        """(LedgerEntry, the LAC the writer piggybacked on it)."""
        entry = self.decode(data, entry_id)
        return (LedgerEntry(self.scope_id, self.ledger_id, entry.entry_id, entry.length, bytes(entry.payload)),
                entry.last_add_confirmed)

    def encode_lac(self, lac: int) -> bytes:
        return codec.encode_lac(self.ledger_id, lac, self.digest_type, self.mac_key, self.scope_id)

    def decode_lac(self, data) -> int:
        return codec.decode_lac(data, self.digest_type, self.mac_key, expected_ledger_id=self.ledger_id,
                                expected_scope_id=self.scope_id)[2]
