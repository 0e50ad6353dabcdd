"""Ensemble placement: which bookies a new ledger or a replaced bookie goes to.

BookKeeper's default (DefaultEnsemblePlacementPolicy): random among the writable bookies that are not
already in the ensemble and not known to be failing. Read-only bookies are never chosen. A ledger with
scope != 0 only goes to bookies that advertise `bkfast.scopeIds` (scope-ids.md).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

from bkfast.errors import BKNotEnoughBookiesException
from bkfast.meta.driver import BookieInfo

__all__ = ["choose_ensemble", "choose_replacements"]


def _candidates(writable: Mapping[str, BookieInfo], excluded: Collection[str], scope_id: int) -> list[str]:
    return sorted(bid for bid, info in writable.items()
                  if bid not in excluded and not info.read_only and (scope_id == 0 or info.supports_scope_ids))


def choose_ensemble(writable: Mapping[str, BookieInfo], ensemble_size: int, scope_id: int = 0,
                    excluded: Collection[str] = (), rng: random.Random | None = None) -> tuple[str, ...]:
    candidates = _candidates(writable, excluded, scope_id)
    if len(candidates) < ensemble_size:
        what = "writable bookies supporting scope ids" if scope_id else "writable bookies"
        raise BKNotEnoughBookiesException(
            f"need {ensemble_size} {what}, have {len(candidates)}: {', '.join(candidates) or 'none'}")
    return tuple((rng or random).sample(candidates, ensemble_size))


def choose_replacements(writable: Mapping[str, BookieInfo], ensemble: tuple[str, ...], failed: Collection[str],
                        scope_id: int = 0, rng: random.Random | None = None) -> tuple[str, ...]:
    """A copy of `ensemble` with every bookie in `failed` replaced by a distinct new one."""
    to_replace = [i for i, bid in enumerate(ensemble) if bid in failed]
    new = choose_ensemble(writable, len(to_replace), scope_id, excluded=set(ensemble) | set(failed), rng=rng) \
        if to_replace else ()
    members = list(ensemble)
    for index, replacement in zip(to_replace, new, strict=True):
        members[index] = replacement
    return tuple(members)
