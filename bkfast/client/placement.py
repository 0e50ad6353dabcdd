"""Ensemble placement: which bookies a new ledger, an ensemble change or AutoRecovery's replacement goes to.

Owns the interface every policy has (Java's EnsemblePlacementPolicy: `new_ensemble`, `replace_bookies`,
`adherence`, `replace_to_adhere`, `reorder_read_sequence`, `fault_domains`), the index of the bookies a
policy may choose (`CandidateIndex`: writable, not read-only, advertising `bkfast.scopeIds` for a ledger
with scope != 0 (scope-ids.md), by location, with free-disk weights when diskWeightBasedPlacementEnabled),
and BookKeeper's DefaultEnsemblePlacementPolicy: random among those. The topology-aware policies are in
placement_rack, placement_region and placement_zone; placement_factory builds the one a configuration names.

Every method runs in the caller's thread and never blocks: locations come from the policy's `Topology`
(resolved beforehand). A write quorum is a run of W consecutive ensemble positions, wrapping around (the
round-robin striping of spec §6.2): E of them for E > W, one for E = W.
"""

from __future__ import annotations

import abc
import bisect
import enum
import logging
import random
from collections.abc import Callable, Collection, Mapping

from bkfast.errors import BKNotEnoughBookiesException
from bkfast.meta.driver import BookieInfo

from .placement_settings import PlacementSettings
from .topology import DEFAULT_RACK, DefaultMapping, Topology

__all__ = ["Adherence", "CandidateIndex", "PlacementPolicy", "DefaultEnsemblePlacementPolicy", "write_quorums",
           "disk_weights", "random_pick", "random_replacements", "choose_ensemble", "choose_replacements",
           "DEFAULT_POLICY"]

log = logging.getLogger(__name__)

DEFAULT_POLICY = "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy"


class Adherence(enum.IntEnum):
    """Java's PlacementPolicyAdherence, worst first."""

    FAIL = 1
    MEETS_SOFT = 3
    MEETS_STRICT = 5


def write_quorums(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The positions of every write quorum: [start, ..., start + W - 1] mod E, one per start (one if W = E)."""
    starts = 1 if write_quorum >= ensemble_size else ensemble_size
    return [[(s + j) % ensemble_size for j in range(write_quorum)] for s in range(starts)]


def disk_weights(free: Mapping[str, int], max_multiple: int) -> dict[str, float]:
    """Java's WeightedRandomSelectionImpl: each bookie's share of the free space, a bookie with none at the
    smallest share, and (max_multiple > 0) no share above max_multiple times the median share."""
    if not free:
        return {}
    values = sorted(free.values())
    total = sum(values)
    if total <= 0:
        return {b: 1.0 / len(free) for b in free}
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    smallest = min((v for v in values if v > 0), default=1)
    cap = max_multiple * median / total if max_multiple > 0 else None
    out = {}
    for bookie, value in free.items():
        share = value / total if value > 0 else smallest / total
        out[bookie] = min(share, cap) if cap is not None and cap > 0 else share
    return out


class CandidateIndex:
    """The bookies a policy may choose from now: `ids` (sorted), `loc[id]`, `by_loc[location]`, and with
    weights the cumulative weights for weighted picks (Java's weighted random selection)."""

    def __init__(self, ids: list[str], topology: Topology, weights: Mapping[str, float] | None):
        self.ids = ids
        self.loc = {b: topology.location(b) for b in ids}
        self.by_loc: dict[str, list[str]] = {}
        for b in ids:
            self.by_loc.setdefault(self.loc[b], []).append(b)
        self.weights = None
        self.cum: list[float] | None = None
        if weights:
            floor = min((w for w in weights.values() if w > 0), default=1.0)
            self.weights = {b: weights.get(b) or floor for b in ids}
            total, self.cum = 0.0, []
            for b in ids:
                total += self.weights[b]
                self.cum.append(total)

    def __len__(self) -> int:
        return len(self.ids)

    def sample(self, rng: random.Random) -> str:
        """One bookie at random (by weight when weighted)."""
        if self.cum is None:
            return self.ids[int(rng.random() * len(self.ids))]
        return self.ids[min(bisect.bisect_right(self.cum, rng.random() * self.cum[-1]), len(self.ids) - 1)]

    def pick(self, bookies: list[str], rng: random.Random, used: Collection[str]) -> str | None:
        """One of `bookies` not in `used`, at random (by weight when weighted); None if none is left."""
        free = [b for b in bookies if b not in used]
        if not free:
            return None
        if self.weights is None:
            return free[int(rng.random() * len(free))]
        return rng.choices(free, weights=[self.weights[b] for b in free])[0]


class PlacementPolicy(abc.ABC):
    """The interface (see the module docstring) and what every policy shares. Subclasses set `name`,
    `default_location` and `valid_location`, and implement the hooks."""

    name = DEFAULT_POLICY
    default_location = DEFAULT_RACK

    def __init__(self, settings: PlacementSettings | None = None, topology: Topology | None = None,
                 rng: random.Random | None = None):
        self.settings = settings if settings is not None else PlacementSettings.defaults()
        self.rng = rng or random.Random()
        self.topology = topology or Topology(DefaultMapping(), self.default_location, self.valid_location)
        self.weights: dict[str, float] | None = None
        self.weights_version = 0
        self._indexes: dict[tuple, tuple[Mapping, CandidateIndex]] = {}
        self._warned: set[str] = set()
        self.fallbacks = 0                 # ensembles placed below the policy's rule (not enforced)

    @staticmethod
    def valid_location(location: str) -> bool:
        return True

    # --- the bookies to choose from -------------------------------------------------------------------
    def candidates(self, writable: Mapping[str, BookieInfo], scope_id: int = 0,
                   keep: Callable[[str], bool] | None = None) -> CandidateIndex:
        """The index of `writable` for a ledger of `scope_id` (cached until the bookies, their locations or
        the weights change); `keep(location)` filters by location (a cache key of its own: pass a bound
        method or a module function, not a new lambda each call)."""
        key = (id(writable), bool(scope_id), self.topology.version, self.weights_version, keep)
        hit = self._indexes.get(key)
        if hit is not None and hit[0] is writable:
            return hit[1]
        ids = sorted(b for b, info in writable.items()
                     if not info.read_only and (not scope_id or info.supports_scope_ids)
                     and (keep is None or keep(self.topology.location(b))))
        index = CandidateIndex(ids, self.topology, self.weights)
        if len(self._indexes) > 16:
            self._indexes.clear()
        self._indexes[key] = (writable, index)
        return index

    def set_free_disk_space(self, free: Mapping[str, int]) -> None:
        """Weights from each bookie's free disk space (diskWeightBasedPlacementEnabled)."""
        self.weights = disk_weights(free, self.settings.max_weight_multiple)
        self.weights_version += 1

    def warn_once(self, key: str, message: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    @staticmethod
    def not_enough(need: int, index: CandidateIndex, scope_id: int, excluded: Collection[str] = ()):
        what = "writable bookies supporting scope ids" if scope_id else "writable bookies"
        have = [b for b in index.ids if b not in excluded]
        return BKNotEnoughBookiesException(f"need {need} {what}, have {len(have)}: {', '.join(have) or 'none'}")

    def unusable(self, index: CandidateIndex, ensemble_size: int, scope_id: int,
                 excluded: Collection[str]) -> set[str]:
        """The bookies a new ensemble may not take (`excluded`), once `index` is known to hold `ensemble_size`
        others (else BKNotEnoughBookiesException)."""
        used = set(excluded)
        if len(index) - sum(1 for b in used if b in index.loc) < ensemble_size:
            raise self.not_enough(ensemble_size, index, scope_id, used)
        return used

    def replacement_slots(self, ensemble: tuple[str, ...], failed: set[str], excluded: Collection[str]):
        """What a search for replacements starts from: the ensemble with the failed bookies' positions open
        (members), their locations, the failed bookies' locations (preferred, by position) and the
        bookies no position may take."""
        members = [None if b in failed else b for b in ensemble]
        locations = [None if b is None else self.topology.location(b) for b in members]
        prefer = {i: self.topology.location(b) for i, b in enumerate(ensemble) if b in failed}
        return members, locations, prefer, set(ensemble) | failed | set(excluded)

    # --- the interface ------------------------------------------------------------------------------
    def new_ensemble(self, writable: Mapping[str, BookieInfo], ensemble_size: int, write_quorum: int,
                     ack_quorum: int, scope_id: int = 0, excluded: Collection[str] = ()) -> tuple[str, ...]:
        """E bookies for a new ledger; BKNotEnoughBookiesException (PlacementPolicyError when the policy
        is enforced and cannot be met)."""
        self.check_quorums(ensemble_size, write_quorum, ack_quorum)
        index = self.placement_index(writable, scope_id)
        used = self.unusable(index, ensemble_size, scope_id, excluded)
        return self.place_new(index, ensemble_size, write_quorum, ack_quorum, used)

    def replace_bookies(self, writable: Mapping[str, BookieInfo], ensemble: tuple[str, ...], write_quorum: int,
                        ack_quorum: int, failed: Collection[str], scope_id: int = 0,
                        excluded: Collection[str] = ()) -> tuple[str, ...]:
        """A copy of `ensemble` with every bookie of `failed` replaced by a distinct new one (never one of
        the ensemble, `failed` or `excluded`)."""
        failed = set(failed)
        if not failed & set(ensemble):
            return tuple(ensemble)
        index = self.placement_index(writable, scope_id)
        return self.place_replacements(index, ensemble, write_quorum, ack_quorum, failed, excluded, scope_id)

    # --- what each policy supplies ------------------------------------------------------------------
    def check_quorums(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        """BKIncorrectParameterException for quorums the policy can never meet (any quorums, by default)."""
        return None

    def placement_index(self, writable: Mapping[str, BookieInfo], scope_id: int) -> CandidateIndex:
        """The candidates this policy places on (a policy that leaves some locations out filters here)."""
        return self.candidates(writable, scope_id)

    @abc.abstractmethod
    def place_new(self, index: CandidateIndex, ensemble_size: int, write_quorum: int, ack_quorum: int,
                  used: set[str]) -> tuple[str, ...]:
        """A new ensemble from `index`, none of it in `used`."""

    @abc.abstractmethod
    def place_replacements(self, index: CandidateIndex, ensemble: tuple[str, ...], write_quorum: int,
                           ack_quorum: int, failed: set[str], excluded: Collection[str],
                           scope_id: int) -> tuple[str, ...]:
        """`ensemble` with its members in `failed` (at least one) replaced from `index`."""

    def adherence(self, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int) -> Adherence:
        """How `ensemble` meets the policy (Java's isEnsembleAdheringToPlacementPolicy)."""
        return Adherence.MEETS_STRICT

    def replace_to_adhere(self, writable: Mapping[str, BookieInfo], ensemble: tuple[str, ...], write_quorum: int,
                          ack_quorum: int, scope_id: int = 0, excluded: Collection[str] = ()) -> tuple[str, ...] | None:
        """An ensemble that meets the policy and keeps as many of `ensemble`'s positions as it can, or None."""
        return None

    def fault_domains(self, ensemble: tuple[str, ...], write_quorum: int) -> tuple[list[int], int] | None:
        """For enforceMinNumFaultDomainsForWrite: (domain number of each position, domains an add's
        acknowledgements must come from), or None when the policy sets no such rule."""
        needed = self.fault_domains_needed(write_quorum) if self.settings.enforce_min_fault_domains else None
        if needed is None:
            return None
        numbers: dict[str, int] = {}
        domains = [numbers.setdefault(self.fault_domain(self.topology.location(b)), len(numbers)) for b in ensemble]
        return domains, needed

    def fault_domains_needed(self, write_quorum: int) -> int | None:
        """How many fault domains an add's acknowledgements must come from; None: the policy sets no rule."""
        return None

    def fault_domain(self, location: str) -> str:
        """The fault domain of a bookie at `location`: its whole location unless the policy says otherwise."""
        return location

    def local_key(self, location: str) -> str:
        """The part of a location that makes a bookie "local" to the client for reads."""
        return location

    def reorder_read_sequence(self, ensemble: tuple[str, ...], write_set: list[int], writable: Mapping[str, object],
                              read_only: Mapping[str, object], slow: Collection[str]) -> list[int]:
        """The positions of `write_set` in the order to read them: writable bookies of the client's own
        rack/region first, then other writable ones, read-only ones, slow (recently failed) ones, and last
        those not registered at all (Java's reorderReadSequence). Stable within each class."""
        local = self.topology.local_location
        local_key = self.local_key(local) if local else None

        def rank(position: int) -> int:
            bookie = ensemble[position]
            if bookie not in writable and bookie not in read_only:
                return 4
            if bookie in slow:
                return 3
            if bookie in read_only:
                return 2
            if local_key is not None and self.local_key(self.topology.location(bookie)) == local_key:
                return 0
            return 1

        return sorted(write_set, key=rank)


def random_pick(index: CandidateIndex, count: int, used: set[str], rng: random.Random) -> list[str]:
    """`count` distinct candidates not in `used` (which they join), at random (by weight when weighted);
    BKNotEnoughBookiesException when there are fewer."""
    if len(index) - sum(1 for b in used if b in index.loc) < count:
        raise PlacementPolicy.not_enough(count, index, 0, used)
    out: list[str] = []
    if index.weights is None and count * 4 < len(index):
        while len(out) < count:            # few picks among many: rejection beats building a list
            b = index.sample(rng)
            if b not in used:
                used.add(b)
                out.append(b)
        return out
    for _ in range(count):
        picked = index.pick(index.ids, rng, used)
        assert picked is not None, "checked above: at least `count` bookies of the index are not used"
        used.add(picked)
        out.append(picked)
    return out


def random_replacements(index: CandidateIndex, ensemble: tuple[str, ...], failed: Collection[str],
                        excluded: Collection[str], rng: random.Random) -> tuple[str, ...]:
    """`ensemble` with each bookie of `failed` replaced by a random candidate (see random_pick)."""
    to_replace = [i for i, b in enumerate(ensemble) if b in failed]
    new = random_pick(index, len(to_replace), set(ensemble) | set(failed) | set(excluded), rng) \
        if to_replace else []
    members = list(ensemble)
    for position, bookie in zip(to_replace, new, strict=True):
        members[position] = bookie
    return tuple(members)


class DefaultEnsemblePlacementPolicy(PlacementPolicy):
    """Java's DefaultEnsemblePlacementPolicy: random among the candidates (by free disk when weighted)."""

    name = DEFAULT_POLICY

    def place_new(self, index, ensemble_size, write_quorum, ack_quorum, used):
        return tuple(random_pick(index, ensemble_size, used, self.rng))

    def place_replacements(self, index, ensemble, write_quorum, ack_quorum, failed, excluded, scope_id):
        return random_replacements(index, ensemble, failed, excluded, self.rng)


_DEFAULT = None


def _default_policy() -> DefaultEnsemblePlacementPolicy:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = DefaultEnsemblePlacementPolicy()
    return _DEFAULT


def choose_ensemble(writable: Mapping[str, BookieInfo], ensemble_size: int, scope_id: int = 0,
                    excluded: Collection[str] = (), rng: random.Random | None = None) -> tuple[str, ...]:
    """Random placement without a client (the default policy)."""
    policy = _default_policy()
    if rng is not None:
        policy = DefaultEnsemblePlacementPolicy(policy.settings, rng=rng)
    return policy.new_ensemble(writable, ensemble_size, ensemble_size, ensemble_size, scope_id, excluded)


def choose_replacements(writable: Mapping[str, BookieInfo], ensemble: tuple[str, ...], failed: Collection[str],
                        scope_id: int = 0, rng: random.Random | None = None) -> tuple[str, ...]:
    """A copy of `ensemble` with every bookie in `failed` replaced by a distinct new one (random)."""
    policy = _default_policy()
    if rng is not None:
        policy = DefaultEnsemblePlacementPolicy(policy.settings, rng=rng)
    return policy.replace_bookies(writable, ensemble, len(ensemble), 1, failed, scope_id)
