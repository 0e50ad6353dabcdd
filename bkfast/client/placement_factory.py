"""The placement policy a configuration names: `ensemblePlacementPolicy` (Java class names) with the bookie
topology of `reppDnsResolverClass` (bkfast.client.topology).

Known names: org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy (Java's default),
RegionAwareEnsemblePlacementPolicy, ZoneawareEnsemblePlacementPolicy and DefaultEnsemblePlacementPolicy.
Pulsar's org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy is the rack-aware policy
plus bookie isolation groups, which bkfast does not have: it is taken as rack-aware, with a warning. Any other
name is a ConfigurationError naming the known ones. Must never: start I/O (the client starts the topology).
"""

from __future__ import annotations

import logging
import random

from bkfast.errors import ConfigurationError

from .placement import DEFAULT_POLICY, DefaultEnsemblePlacementPolicy, PlacementPolicy
from .placement_rack import RACKAWARE_POLICY, RackawareEnsemblePlacementPolicy
from .placement_region import REGIONAWARE_POLICY, RegionAwareEnsemblePlacementPolicy
from .placement_settings import PlacementSettings
from .placement_zone import ZONEAWARE_POLICY, ZoneawareEnsemblePlacementPolicy
from .topology import Topology, mapping_from_conf

__all__ = ["POLICIES", "policy_class", "policy_from_conf", "PULSAR_ISOLATED_POLICY"]

log = logging.getLogger(__name__)

POLICIES: dict[str, type[PlacementPolicy]] = {
    RACKAWARE_POLICY: RackawareEnsemblePlacementPolicy,
    REGIONAWARE_POLICY: RegionAwareEnsemblePlacementPolicy,
    ZONEAWARE_POLICY: ZoneawareEnsemblePlacementPolicy,
    DEFAULT_POLICY: DefaultEnsemblePlacementPolicy,
}
PULSAR_ISOLATED_POLICY = "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy"


def policy_class(name: str | None) -> type[PlacementPolicy]:
    """The policy class of a Java class name (see the module docstring)."""
    name = (name or RACKAWARE_POLICY).strip()
    if name in POLICIES:
        return POLICIES[name]
    if name == PULSAR_ISOLATED_POLICY:
        log.warning("ensemblePlacementPolicy %s: bookie isolation groups are not supported; placing ledgers with "
                    "the rack-aware policy", name)
        return RackawareEnsemblePlacementPolicy
    raise ConfigurationError(f"ensemblePlacementPolicy {name!r} is not a placement policy bkfast has; use one of "
                             + ", ".join(POLICIES))


def policy_from_conf(conf, mapping=None, rng: random.Random | None = None) -> PlacementPolicy:
    """The policy of `conf` over a topology from `mapping` (default: the one of reppDnsResolverClass); its
    locations are resolved later, by the client (AsyncBookKeeper) or by the caller."""
    cls = policy_class(conf.get("ensemblePlacementPolicy"))
    topology = Topology(mapping if mapping is not None else mapping_from_conf(conf), cls.default_location,
                        cls.valid_location)
    return cls(PlacementSettings.from_conf(conf), topology, rng)
