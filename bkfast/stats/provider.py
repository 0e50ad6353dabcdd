"""The stats provider of a process, chosen as Java chooses it: `statsProviderClass` (Java's class names)
with `enableStatistics`. The Prometheus provider records into a live StatsRegistry and its text is served
on prometheusStatsHttpPort; any other provider leaves a registry that records nothing.

`text()` is the whole scrape: Java's stats in Java's text, then bkfast's own metrics (prometheus_client
registries handed in with `add_extra`, named `bkfast_*` so none clashes with a Java name), then process_*
and python_* gauges (what the JVM's default collectors are in Java's place).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, disable_created_metrics

from bkfast.stats.registry import StatsLogger, StatsRegistry
from bkfast.stats.text_format import process_registry, process_text, write_java_text

__all__ = ["StatsProvider", "PROMETHEUS_PROVIDER", "NULL_PROVIDER"]

log = logging.getLogger(__name__)

# `_created` series (a timestamp per counter and histogram) double the scrape and no dashboard reads them.
disable_created_metrics()

PROMETHEUS_PROVIDER = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
NULL_PROVIDER = "org.apache.bookkeeper.stats.NullStatsProvider"


class StatsProvider:
    def __init__(self, enabled: bool, rollover_seconds: int = 60):
        self.enabled = enabled
        self.rollover_seconds = rollover_seconds
        self.registry = StatsRegistry(enabled=enabled)
        self._extras: list[CollectorRegistry] = []
        self._process = process_registry()

    @classmethod
    def from_conf(cls, conf) -> StatsProvider:
        provider = conf.get("statsProviderClass") or NULL_PROVIDER
        enabled = bool(conf.get("enableStatistics")) and provider == PROMETHEUS_PROVIDER
        if conf.get("enableStatistics") and provider not in (PROMETHEUS_PROVIDER, NULL_PROVIDER):
            log.warning("statsProviderClass %s is not available in bkfast; stats are off (use %s)",
                        provider, PROMETHEUS_PROVIDER)
        return cls(enabled, conf.get("prometheusStatsLatencyRolloverSeconds"))

    @property
    def serves_http(self) -> bool:
        return self.enabled

    def logger(self, scope: str = "") -> StatsLogger:
        return self.registry.logger(scope)

    def add_extra(self, registry: CollectorRegistry) -> None:
        self._extras.append(registry)

    def rollover(self) -> None:
        self.registry.rollover()

    def text(self) -> str:
        from prometheus_client import generate_latest

        parts = [write_java_text(self.registry)]
        parts.extend(generate_latest(extra).decode() for extra in self._extras)
        parts.append(process_text(self._process))
        return "".join(parts)
