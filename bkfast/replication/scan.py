"""Reading every ledger's metadata fast, for the auditor (Java's BookieLedgerIndexer) and `listunderreplicated`.

Owns the walk of the ledger tree (hierarchical short and long paths, flat, and every scope under
`<root>/scoped`) and the metadata reads, pipelined with a bounded number in flight (`window`) on one kazoo
session instead of one ledger at a time. Blocking: auditor thread or shell only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from kazoo.exceptions import NoNodeError

from bkfast.ids import LedgerId
from bkfast.meta import ledger_paths as lp
from bkfast.meta.ledger_metadata import LedgerMetadata, LedgerMetadataFormatError, parse_metadata

__all__ = ["list_ledger_ids", "iter_metadata", "bookie_ledger_index", "DEFAULT_WINDOW"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 1000
_TIMEOUT_S = 60.0


def _children(zk, paths: list[str], window: int = DEFAULT_WINDOW) -> list[tuple[str, list[str]]]:
    out = []
    for start in range(0, len(paths), window):
        pending = [(p, zk.get_children_async(p)) for p in paths[start:start + window]]
        for path, ar in pending:
            try:
                out.append((path, ar.get(timeout=_TIMEOUT_S)))
            except NoNodeError:
                out.append((path, []))
    return out


def _walk(zk, base: str, tops: list[str], depth: int) -> list[list[str]]:
    level = [[t] for t in tops]
    for _ in range(depth - 1):
        kids = _children(zk, ["/".join([base, *c]) for c in level])
        level = [[*comps, k] for comps, (_p, names) in zip(level, kids, strict=True) for k in names if lp.is_middle(k)]
    kids = _children(zk, ["/".join([base, *c]) for c in level])
    return [[*comps, k] for comps, (_p, names) in zip(level, kids, strict=True) for k in names]


def list_ledger_ids(zk, root: str, layout: str = "hierarchical") -> list[LedgerId]:
    """Every ledger with metadata under `root` (all scopes)."""
    root = root.rstrip("/")
    tops = [c for c in zk.get_children(root) if not lp.is_reserved(c)]
    out: list[LedgerId] = []
    if layout == "flat":
        out += [LedgerId(0, i) for i in map(lp.id_from_flat, tops) if i is not None]
    else:
        out += [LedgerId(0, i) for i in (lp.id_from_short(*c) for c in _walk(zk, root, [t for t in tops
                                                                                       if lp.is_short_top(t)], 2))
                if i is not None]
        out += [LedgerId(0, i) for i in (lp.id_from_long(*c) for c in _walk(zk, root, [t for t in tops
                                                                                      if lp.is_long_top(t)], 4))
                if i is not None]
    scoped = f"{root}/{lp.SCOPED}"
    try:
        scopes = zk.get_children(scoped)
    except NoNodeError:
        scopes = []
    for name in scopes:
        try:
            scope = int(name, 16)
        except ValueError:
            continue
        base = lp.scope_root(root, scope)
        found = _walk(zk, base, [t for t in zk.get_children(base) if lp.is_long_top(t)], 4)
        out += [LedgerId(scope, i) for i in (lp.id_from_long(*c) for c in found) if i is not None]
    return out


def iter_metadata(zk, root: str, ledgers: list[LedgerId], layout: str = "hierarchical",
                  window: int = DEFAULT_WINDOW) -> Iterator[tuple[LedgerId, LedgerMetadata]]:
    """(ledger, metadata) for every ledger that still exists, `window` reads in flight at a time."""
    for start in range(0, len(ledgers), window):
        chunk = ledgers[start:start + window]
        pending = [(lid, zk.get_async(lp.ledger_path(root, lid, layout))) for lid in chunk]
        for lid, ar in pending:
            try:
                data, _stat = ar.get(timeout=_TIMEOUT_S)
            except NoNodeError:
                continue
            try:
                yield lid, parse_metadata(data)
            except LedgerMetadataFormatError as err:
                log.warning("ledger %s: unreadable metadata skipped: %s", lid, err)


def bookie_ledger_index(zk, root: str, layout: str = "hierarchical", window: int = DEFAULT_WINDOW,
                        sizes: dict[LedgerId, int] | None = None) -> tuple[dict[str, set[LedgerId]], int]:
    """(bookie id -> ledgers with a segment on it, number of ledgers read); each ledger's length goes into
    `sizes` when given."""
    index: dict[str, set[LedgerId]] = {}
    count = 0
    for lid, md in iter_metadata(zk, root, list_ledger_ids(zk, root, layout), layout, window):
        count += 1
        if sizes is not None:
            sizes[lid] = md.length
        for bookie in md.all_bookies:
            index.setdefault(bookie, set()).add(lid)
    return index, count
