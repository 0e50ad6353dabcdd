"""Where a ledger's metadata lives in ZooKeeper, per ledger layout (spec §5.3, scope-ids.md "Metadata").

Owns the id -> znode path mapping of each layout and its inverse (used when listing), and the names
reserved under the ledgers root. Pure functions: never talks to ZooKeeper.

- hierarchical (Java's default): short 2-4-4 path (``00/0000/L0001``) for ids < 2^31-1, long
  3-4-4-4-4 path (``000/0000/0021/4748/L3647``) otherwise;
- longhierarchical: always the long path;
- flat (legacy): ``L%010d`` directly under the root;
- scope != 0 (bkfast's extension, any layout): ``scoped/<scope as 16 hex>/`` + the long path.
"""

from __future__ import annotations

import re

from bkfast.errors import MetadataError
from bkfast.ids import LedgerId

from .zk_layout import zk_path

__all__ = [
    "LAYOUTS", "RESERVED_NAMES", "SCOPED", "SHORT_ID_LIMIT", "is_reserved", "short_path", "long_path",
    "ledger_relative_path", "ledger_path", "scope_root", "id_from_short", "id_from_long", "id_from_flat",
]

LAYOUTS = ("hierarchical", "longhierarchical", "flat")
SHORT_ID_LIMIT = 2**31 - 1
"""Java's Integer.MAX_VALUE: hierarchical uses the short path strictly below it."""

SCOPED = "scoped"
RESERVED_NAMES = frozenset({
    "available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long", SCOPED,
})

_SHORT_TOP = re.compile(r"\d{2}")
_LONG_TOP = re.compile(r"\d{3}")
_MIDDLE = re.compile(r"\d{4}")
_LEAF = re.compile(r"L(\d{4})")
_FLAT_LEAF = re.compile(r"L(\d{10,})")


def is_reserved(name: str) -> bool:
    """A child of the ledgers root (or of a ledger directory) that is not ledger metadata."""
    return name in RESERVED_NAMES or name.startswith("ID-")


def short_path(ledger_id: int) -> str:
    """``%010d`` split 2-4-4 with ``L`` before the last group: 12345 -> ``00/0001/L2345``."""
    s = f"{ledger_id:010d}"
    return f"{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def long_path(ledger_id: int) -> str:
    """``%019d`` split 3-4-4-4-4: 2147483647 -> ``000/0000/0021/4748/L3647``."""
    s = f"{ledger_id:019d}"
    return f"{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise MetadataError(f"ledger layout {layout!r} not supported by bkfast; expected one of {', '.join(LAYOUTS)}")
    return layout


def scope_root(root: str, scope_id: int) -> str:
    """``<root>/scoped/<scope 16 hex>``: the directory of one scope's ledgers."""
    return zk_path(root, SCOPED, f"{scope_id:016x}")


def ledger_relative_path(ledger: LedgerId, layout: str = "hierarchical") -> str:
    """The path of `ledger` below the ledgers root (no leading slash)."""
    _check_layout(layout)
    if ledger.scope_id != 0:
        return f"{SCOPED}/{ledger.scope_id:016x}/{long_path(ledger.ledger_id)}"
    lid = ledger.ledger_id
    if layout == "flat":
        return f"L{lid:010d}"
    if layout == "hierarchical" and lid < SHORT_ID_LIMIT:
        return short_path(lid)
    return long_path(lid)


def ledger_path(root: str, ledger: LedgerId, layout: str = "hierarchical") -> str:
    return zk_path(root, *ledger_relative_path(ledger, layout).split("/"))


# --- inverse: path components -> id (listing) -------------------------------------------------------

def id_from_short(top: str, middle: str, leaf: str) -> int | None:
    """Components of a short path (``00``, ``0001``, ``L2345``) -> 12345; None if not a ledger path."""
    m = _LEAF.fullmatch(leaf)
    if not (m and _SHORT_TOP.fullmatch(top) and _MIDDLE.fullmatch(middle)):
        return None
    return int(top + middle + m.group(1))


def id_from_long(a: str, b: str, c: str, d: str, leaf: str) -> int | None:
    """Components of a long path -> id; None if not a ledger path."""
    m = _LEAF.fullmatch(leaf)
    if not (m and _LONG_TOP.fullmatch(a) and all(_MIDDLE.fullmatch(x) for x in (b, c, d))):
        return None
    return int(a + b + c + d + m.group(1))


def id_from_flat(name: str) -> int | None:
    m = _FLAT_LEAF.fullmatch(name)
    return int(m.group(1)) if m else None


def is_short_top(name: str) -> bool:
    return bool(_SHORT_TOP.fullmatch(name))


def is_long_top(name: str) -> bool:
    return bool(_LONG_TOP.fullmatch(name))


def is_middle(name: str) -> bool:
    return bool(_MIDDLE.fullmatch(name))
