"""Java's stats model: a StatsLogger is a scope (names joined with `_`) plus scope labels, and hands out
counters, gauges and OpStats registered under the scoped name. The registry holds every stat of a process
and is what the exposition (bkfast.stats.text_format) walks.

Names and labels are made the way Java's Prometheus provider makes them: scopes joined with `_`, every
character outside `[a-zA-Z0-9_:]` turned into `_` (`bookie` + `ledger_dir_/data/ledgers_usage` ->
`bookie_ledger_dir__data_ledgers_usage`). Asking twice for the same name and labels returns the same
object, as Java's provider does, so two parts that record the same stat add up.

A registry made with `enabled=False` (statsProviderClass unset, or prometheusStatsHttpEnable=false) hands
out stats that record nothing and are never listed: the hot paths keep their calls and pay only the call.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from bkfast._stats import Counter, OpStats

__all__ = ["StatsRegistry", "StatsLogger", "Family", "COUNTER", "GAUGE", "SUMMARY", "metric_name"]

COUNTER = "counter"
GAUGE = "gauge"
SUMMARY = "summary"

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")

Labels = tuple[tuple[str, str], ...]


def metric_name(*scopes: str) -> str:
    """Java's name of a stat: the non-empty scopes joined with `_`, invalid characters as `_`."""
    return _INVALID.sub("_", "_".join(s for s in scopes if s))


@dataclass
class Family:
    """Every series of one name: its kind and, per label set, a Counter, an OpStats or a gauge supplier."""
    name: str
    kind: str
    series: dict[Labels, object] = field(default_factory=dict)


class StatsRegistry:
    """The stats of one process (a bookie, or a stand-alone AutoRecovery)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._families: dict[str, Family] = {}
        self._lock = threading.Lock()

    def logger(self, scope: str = "") -> StatsLogger:
        return StatsLogger(self, scope, ())

    def families(self) -> list[Family]:
        """A snapshot of the families, sorted by name (the exposition's order)."""
        with self._lock:
            return [Family(f.name, f.kind, dict(f.series)) for f in sorted(self._families.values(),
                                                                            key=lambda f: f.name)]

    def family(self, name: str) -> Family | None:
        with self._lock:
            return self._families.get(name)

    def _family(self, name: str, kind: str) -> Family:
        """The family `name`, made on first use; ValueError when it is of another kind. Under the lock."""
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, kind)
        elif family.kind != kind:
            raise ValueError(f"stat {name} is a {family.kind}, asked for as a {kind}")
        return family

    def _get(self, name: str, kind: str, labels: Labels, make: Callable[[], object]):
        with self._lock:
            family = self._family(name, kind)
            stat = family.series.get(labels)
            if stat is None:
                stat = family.series[labels] = make()
            return stat

    def counter(self, name: str, labels: Labels) -> Counter:
        if not self.enabled:
            return Counter(False)
        return self._get(name, COUNTER, labels, Counter)

    def op_stats(self, name: str, labels: Labels) -> OpStats:
        if not self.enabled:
            return OpStats(False)
        return self._get(name, SUMMARY, labels, OpStats)

    def gauge(self, name: str, labels: Labels, supplier: Callable[[], float]) -> None:
        """A gauge read at scrape time; registering the same name and labels again replaces the supplier."""
        if not self.enabled:
            return
        with self._lock:
            self._family(name, GAUGE).series[labels] = supplier

    def remove_gauge(self, name: str, labels: Labels) -> None:
        with self._lock:
            family = self._families.get(name)
            if family is not None and family.kind == GAUGE:
                family.series.pop(labels, None)

    def rollover(self) -> None:
        """Publish every OpStats' quantiles of the window that ends now (prometheusStatsLatencyRolloverSeconds)."""
        for family in self.families():
            if family.kind == SUMMARY:
                for stat in family.series.values():
                    cast(OpStats, stat).rollover()     # a summary family's series are OpStats


class StatsLogger:
    """A scope of a registry: Java's StatsLogger (`scope`, `scopeLabel`, `getCounter`, `getOpStatsLogger`,
    `registerGauge`, `getThreadScopedStatsLogger`)."""

    __slots__ = ("registry", "prefix", "labels")

    def __init__(self, registry: StatsRegistry, prefix: str, labels: Labels):
        self.registry = registry
        self.prefix = prefix
        self.labels = labels

    @property
    def enabled(self) -> bool:
        return self.registry.enabled

    def scope(self, name: str) -> StatsLogger:
        return StatsLogger(self.registry, metric_name(self.prefix, name), self.labels)

    def scope_label(self, key: str, value: object) -> StatsLogger:
        labels = tuple((k, v) for k, v in self.labels if k != key) + ((key, str(value)),)
        return StatsLogger(self.registry, self.prefix, labels)

    def thread_scoped(self, thread_pool: str, thread: object) -> StatsLogger:
        """Java's thread-scoped logger: the labels `thread` (the index in its pool) and `threadPool`."""
        return self.scope_label("thread", thread).scope_label("threadPool", thread_pool)

    def counter(self, name: str) -> Counter:
        return self.registry.counter(metric_name(self.prefix, name), self.labels)

    def op_stats(self, name: str) -> OpStats:
        return self.registry.op_stats(metric_name(self.prefix, name), self.labels)

    def gauge(self, name: str, supplier: Callable[[], float]) -> None:
        self.registry.gauge(metric_name(self.prefix, name), self.labels, supplier)

    def remove_gauge(self, name: str) -> None:
        self.registry.remove_gauge(metric_name(self.prefix, name), self.labels)
