"""BookKeeper's stats model (scopes, counters, gauges, OpStats) and the text Java's Prometheus provider
writes. The recording primitives are the Cython bkfast._stats."""

from bkfast._stats import QUANTILES, Counter, OpStats, now_ns
from bkfast.stats.provider import NULL_PROVIDER, PROMETHEUS_PROVIDER, StatsProvider
from bkfast.stats.registry import COUNTER, GAUGE, SUMMARY, Family, StatsLogger, StatsRegistry, metric_name
from bkfast.stats.text_format import CONTENT_TYPE, process_registry, process_text, write_java_text

__all__ = [
    "QUANTILES", "Counter", "OpStats", "now_ns", "COUNTER", "GAUGE", "SUMMARY", "Family", "StatsLogger",
    "StatsRegistry", "metric_name", "StatsProvider", "PROMETHEUS_PROVIDER", "NULL_PROVIDER", "CONTENT_TYPE",
    "process_registry", "process_text", "write_java_text",
]
