"""LedgerHandle: the read side of an open ledger (Java's ReadOnlyLedgerHandle); the write side builds on it.

A handle holds the ledger's metadata and version (for CAS), its digest context and what it knows of the
last add confirmed (LAC). Reads never go beyond the LAC unless asked to (`read_unconfirmed_entries`).
All methods return Deferreds and must be called in the reactor thread.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from bkfast.errors import BKIncorrectParameterException, BKReadException
from bkfast.ids import LedgerId
from bkfast.meta.driver import Versioned

from . import reads
from .entries import DigestContext
from .stats import stats_of

__all__ = ["LedgerHandle"]

log = logging.getLogger(__name__)


class LedgerHandle:
    """An opened ledger for reading (also the base of the writable handle)."""

    def __init__(self, bk, ledger: LedgerId, versioned: Versioned, password: bytes):
        self.bk = bk
        self.reactor = bk.reactor
        self.settings = bk.settings
        self.bookie_client = bk.bookie_client
        self._stats = stats_of(bk)
        self.ledger = ledger
        self.scope_id = ledger.scope_id
        self.ledger_id = ledger.ledger_id
        self.metadata = versioned.metadata
        self.metadata_version = versioned.version
        self.digest = DigestContext(self.metadata.digest_type, password, self.scope_id, self.ledger_id)
        if self.metadata.is_closed:
            self._start_at(self.metadata.last_entry_id, self.metadata.length)
        else:
            self._start_at(-1, 0)
        self._tail_cache: dict[int, object] = {}
        self._handle_closed = False

    # --- identity -----------------------------------------------------------------------------------
    @property
    def id(self) -> int:
        return self.ledger_id

    @property
    def qualified_name(self) -> str:
        return self.ledger.qualified_name

    @property
    def is_closed(self) -> bool:
        """True once the ledger is closed in the metadata (as this handle last saw it)."""
        return self.metadata.is_closed

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.ledger} LAC={self.last_add_confirmed} {self.metadata.state.name}>"

    # --- LAC bookkeeping ----------------------------------------------------------------------------
    def _start_at(self, lac: int, length: int) -> None:
        """The ledger's LAC and length when the handle is opened (the write handle keeps them in its add
        tracker, which it builds here)."""
        self.last_add_confirmed = lac
        self.length = length

    def _observe_lac(self, lac: int) -> None:
        if lac > self.last_add_confirmed:
            self.last_add_confirmed = lac

    def _cache_tail_entry(self, entry) -> None:
        if len(self._tail_cache) > 1024:
            self._tail_cache.clear()
        self._tail_cache[entry.entry_id] = entry

    # --- reads --------------------------------------------------------------------------------------
    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise BKIncorrectParameterException(
                f"ledger {self.ledger_id}: invalid entry range [{first}, {last}]")

    def read_entries(self, first: int, last: int) -> defer.Deferred:
        """Entries [first, last] (a list of LedgerEntry), digest-verified; `last` must be <= the LAC."""
        try:
            self._check_range(first, last)
        except BKIncorrectParameterException as exc:
            return defer.fail(exc)
        if last > self.last_add_confirmed:
            return defer.fail(BKReadException(
                f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed "
                f"{self.last_add_confirmed} (use read_unconfirmed_entries to read past it)"))
        return self._read(first, last)

    def read_unconfirmed_entries(self, first: int, last: int) -> defer.Deferred:
        """Like read_entries, without the LAC bound (entries may later be lost by recovery)."""
        try:
            self._check_range(first, last)
        except BKIncorrectParameterException as exc:
            return defer.fail(exc)
        return self._read(first, last)

    def _read(self, first: int, last: int) -> defer.Deferred:
        if first == last and first in self._tail_cache:
            return defer.succeed([self._tail_cache.pop(first)])
        return self._stats.time("read", reads.read_entries(self, first, last))

    def read_entry(self, entry_id: int) -> defer.Deferred:
        return self.read_entries(entry_id, entry_id).addCallback(lambda entries: entries[0])

    def read_last_add_confirmed(self) -> defer.Deferred:
        """Ask the bookies (a quorum-covered READ of entry -1, no fencing); fires with the new LAC."""
        if self.metadata.is_closed:
            return defer.succeed(self.last_add_confirmed)

        def got(result):
            self._observe_lac(result[0])
            return self.last_add_confirmed

        return reads.read_last_confirmed(self, fence=False).addCallback(got)

    def read_explicit_lac(self) -> defer.Deferred:
        """The LAC from the bookies' explicit-LAC records (v3 READ_LAC); fires with the new LAC."""

        def got(lac):
            self._observe_lac(lac)
            return self.last_add_confirmed

        return self._stats.time("read_lac", reads.read_explicit_lac(self)).addCallback(got)

    def read_lac_long_poll(self, previous_lac: int | None = None, timeout_ms: int = 10000) -> defer.Deferred:
        """Wait (up to `timeout_ms`) until a bookie knows a LAC beyond `previous_lac` (default: the
        handle's); fires with the LAC then known (unchanged on timeout)."""
        if previous_lac is None:
            previous_lac = self.last_add_confirmed
        if self.metadata.is_closed:
            return defer.succeed(self.last_add_confirmed)
        d = self._stats.time("read_lac_and_entry", reads.read_lac_long_poll(self, previous_lac, timeout_ms))
        if self._stats.enabled:
            def count(lac):     # Java's LAC_UPDATE_HITS / _MISSES: did the poll learn a newer LAC?
                (self._stats.lac_update_hits if lac > previous_lac else self._stats.lac_update_misses).inc()
                return lac
            d.addCallback(count)
        return d

    @defer.inlineCallbacks
    def refresh_metadata(self):
        """Re-read the ledger's metadata (e.g. to learn that a tailed ledger was closed)."""
        versioned = yield self.bk.driver.read_ledger_metadata(self.ledger)
        if versioned.version != self.metadata_version:
            self.metadata, self.metadata_version = versioned.metadata, versioned.version
            if self.metadata.is_closed:
                self.last_add_confirmed = self.metadata.last_entry_id
                self.length = self.metadata.length
        return self.metadata

    # --- lifecycle ----------------------------------------------------------------------------------
    def close(self) -> defer.Deferred:
        """A read handle owns nothing on the bookies; closing it only forgets its cache."""
        self._handle_closed = True
        self._tail_cache.clear()
        return defer.succeed(None)
