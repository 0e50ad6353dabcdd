"""The Prometheus text that Java's PrometheusMetricsProvider writes (4.16.7's PrometheusTextFormat):

    # TYPE bookie_WRITE_BYTES counter               counters carry no `_total`
    bookie_WRITE_BYTES 13724771
    # TYPE bookie_journal_JOURNAL_SYNC summary      an OpStats: per outcome, 7 quantiles (ms), _count, _sum
    bookie_journal_JOURNAL_SYNC{success="false",quantile="0.5", journalIndex="0"} NaN
    ...
    bookie_journal_JOURNAL_SYNC_count{success="true", journalIndex="0"} 325
    bookie_journal_JOURNAL_SYNC_sum{success="true", journalIndex="0"} 259.031

Label values are escaped as the text format requires (Java writes them raw; a path with a quote would
break its output, not ours). `_sum` is the exact sum in the stat's unit (milliseconds for latencies);
Java adds each latency truncated to whole milliseconds, which loses every sub-millisecond event.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from bkfast._stats import QUANTILES, Counter
from bkfast.stats.registry import COUNTER, GAUGE, SUMMARY, Family, StatsRegistry

__all__ = ["write_java_text", "process_registry", "process_text", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_QUANTILE_TEXT = tuple(repr(float(q)) for q in QUANTILES)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels)


def _number(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _write_summary(out: list[str], name: str, labels, stat) -> None:
    extra = _labels(labels)
    extra = ", " + extra if extra else ""
    for success in (False, True):
        outcome = "true" if success else "false"
        for quantile, value in zip(_QUANTILE_TEXT, stat.quantiles(success), strict=True):
            out.append(f'{name}{{success="{outcome}",quantile="{quantile}"{extra}}} {_number(value)}\n')
        out.append(f'{name}_count{{success="{outcome}"{extra}}} {stat.count(success)}\n')
        out.append(f'{name}_sum{{success="{outcome}"{extra}}} {_number(float(stat.total(success)))}\n')


def _write_family(out: list[str], family: Family) -> None:
    if not family.series:
        return
    out.append(f"# TYPE {family.name} {family.kind}\n")
    for labels, stat in family.series.items():
        if family.kind == SUMMARY:
            _write_summary(out, family.name, labels, stat)
            continue
        value: float
        if family.kind == COUNTER:
            value = cast(Counter, stat).value       # a family's kind says what its series are
        else:
            assert family.kind == GAUGE
            try:
                value = cast(Callable[[], float], stat)()
            except Exception:   # a gauge whose part is gone (a closed storage) says so, not the scrape
                value = float("nan")
        text = _labels(labels)
        out.append(f"{family.name}{{{text}}} {_number(value)}\n" if text else f"{family.name} {_number(value)}\n")


def write_java_text(registry: StatsRegistry) -> str:
    out: list[str] = []
    for family in registry.families():
        _write_family(out, family)
    return "".join(out)


def process_registry() -> CollectorRegistry:
    """What stands in for the JVM's default collectors: process_* (CPU, RSS, fds, start time) and the
    Python runtime's python_info and python_gc_* gauges."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def process_text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()
