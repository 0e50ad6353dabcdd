"""Reading every ledger's metadata fast, for the auditor (Java's BookieLedgerIndexer) and the placement check.

Owns the listing of every ledger of every scope and the metadata reads in windows (`window` ledgers per
`MetadataDriver.read_many_ledger_metadata`, which a driver pipelines), through the metadata driver only.
Blocking: auditor thread or shell only; `call` runs a driver operation on the reactor and waits for it
(bkfast.reactor.call).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from bkfast.errors import BKNoSuchLedgerExistsException
from bkfast.ids import LedgerId
from bkfast.meta.ledger_metadata import LedgerMetadata, LedgerMetadataFormatError

__all__ = ["list_ledger_ids", "iter_metadata", "bookie_ledger_index", "DEFAULT_WINDOW"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 1000
_TIMEOUT_S = 60.0


def list_ledger_ids(driver, call: Callable) -> list[LedgerId]:
    """Every ledger with metadata (all scopes)."""
    out = [LedgerId(0, i) for i in call(driver.list_ledgers, 0, timeout=_TIMEOUT_S)]
    for scope in call(driver.list_scopes, timeout=_TIMEOUT_S):
        out += [LedgerId(scope, i) for i in call(driver.list_ledgers, scope, timeout=_TIMEOUT_S)]
    return out


def _read_window(driver, call: Callable, chunk: list[LedgerId]) -> dict:
    """ledger -> Versioned for the chunk; when one ledger's metadata does not parse, the others are read one
    by one so that only the unreadable one is skipped."""
    try:
        return call(driver.read_many_ledger_metadata, chunk, timeout=_TIMEOUT_S)
    except LedgerMetadataFormatError:
        pass
    found = {}
    for lid in chunk:
        try:
            found[lid] = call(driver.read_ledger_metadata, lid, timeout=_TIMEOUT_S)
        except BKNoSuchLedgerExistsException:
            continue
        except LedgerMetadataFormatError as err:
            log.warning("ledger %s: unreadable metadata skipped: %s", lid, err)
    return found


def iter_metadata(driver, call: Callable, ledgers: list[LedgerId],
                  window: int = DEFAULT_WINDOW) -> Iterator[tuple[LedgerId, LedgerMetadata]]:
    """(ledger, metadata) for every ledger that still exists, `window` reads in flight at a time."""
    for start in range(0, len(ledgers), window):
        chunk = ledgers[start:start + window]
        found = _read_window(driver, call, chunk)
        for lid in chunk:
            if lid in found:
                yield lid, found[lid].metadata


def bookie_ledger_index(driver, call: Callable, window: int = DEFAULT_WINDOW,
                        sizes: dict[LedgerId, int] | None = None) -> tuple[dict[str, set[LedgerId]], int]:
    """(bookie id -> ledgers with a segment on it, number of ledgers read); each ledger's length goes into
    `sizes` when given."""
    index: dict[str, set[LedgerId]] = {}
    count = 0
    for lid, md in iter_metadata(driver, call, list_ledger_ids(driver, call), window):
        count += 1
        if sizes is not None:
            sizes[lid] = md.length
        for bookie in md.all_bookies:
            index.setdefault(bookie, set()).add(lid)
    return index, count
