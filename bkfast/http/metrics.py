"""The bookie's Prometheus metrics (prometheus_client), one CollectorRegistry per bookie.

Hot-path cost is kept small: nothing is recorded per add. The server counts the adds it answers per
batch (`adds_answered`: the adds of one socket read share their acceptance and their journal completion,
so one counter inc and one histogram call cover them all); reads answered from memory are one call per
batch too (`reads_from_memory`). Label children are created once and cached (`ok` children, and one per
error type the first time it is seen); the latency histograms take a batch in one locked call
(`_BatchHistogram`, read at scrape time), and the journal thread observes ONE sync latency per batch.
Gauges and the journal counters are read at scrape time (Gauge.set_function / a custom collector), so
they cost nothing between scrapes. The Bookie has no per-add hook: every add it takes or refuses is
answered, and counted, by the server.

bkfast's own metrics, named `bkfast_*` so that none clashes with a Java name (Java's are bkfast.stats'):
  bkfast_add_entry_total{status}            adds answered, by status (OK or the v2 rc name, e.g. EREADONLY)
  bkfast_add_entry_latency_seconds          add: bookie accepted the decoded request -> ack handed to the writer
  bkfast_read_entry_total{status}           entry reads, by status
  bkfast_read_entry_latency_seconds         successful entry reads
  bkfast_journal_queue_size                 records queued for the journal thread
  bkfast_journal_batch_total, bkfast_journal_sync_total, bkfast_journal_records_total,
  bkfast_journal_bytes_total                from the Journal's own counters, at scrape time
  bkfast_journal_sync_latency_seconds       write + fdatasync of one synced journal batch
  bkfast_write_cache_size_bytes             bytes in the DbLedgerStorage write caches
  bkfast_read_only                          1 when the bookie refuses normal adds
  bkfast_connections                        open client connections
  bkfast_pending_adds                       adds accepted and not yet answered
  bkfast_gc_*_total, bkfast_gc_last_run_timestamp_seconds, bkfast_{minor,major}_compaction_last_timestamp_seconds,
  bkfast_entry_log_{live,total}_bytes       garbage collection and compaction, from the collector's state
"""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from bkfast.errors import v2_rc_for
from bkfast.stats import Counter as StatCounter

__all__ = ["BookieMetrics", "LATENCY_BUCKETS", "SYNC_BUCKETS"]

LATENCY_BUCKETS = (.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1.0, 2.5)
SYNC_BUCKETS = (.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1.0)


def _status_name(error: BaseException) -> str:
    try:
        return v2_rc_for(error).name
    except Exception:
        return "EIO"


class _BatchHistogram:
    """A Prometheus histogram that takes n observations of one value in one call (a batch of requests
    that share their latency), from any thread: its buckets and sum are bkfast.stats Counters (one C call
    each, atomic under the GIL, no lock); exposed at scrape time (_bucket, _count, _sum)."""

    def __init__(self, name: str, documentation: str, buckets, registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(float(b) for b in buckets)
        self._buckets = [StatCounter() for _ in range(len(self.bounds) + 1)]   # the last: above every bound
        self._sum_ns = StatCounter()
        registry.register(self)

    def observe(self, seconds: float, n: int = 1) -> None:
        self._buckets[bisect_left(self.bounds, seconds)].add(n)      # the first bucket with value <= bound
        self._sum_ns.add(int(seconds * 1e9) * n)

    def describe(self):
        return []

    def collect(self):
        buckets, seen = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self._buckets, strict=True):
            seen += count.value
            buckets.append((floatToGoString(bound), seen))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets,
                                    sum_value=self._sum_ns.value / 1e9)


class _StatusCounter:
    """`<name>_total{status}`: a bkfast.stats Counter per status (one C call per record, any thread),
    exposed at scrape time."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self._by_status: dict[str, StatCounter] = {}
        registry.register(self)

    def child(self, status: str) -> StatCounter:
        counter = self._by_status.get(status)
        if counter is None:
            counter = self._by_status.setdefault(status, StatCounter())
        return counter

    def describe(self):
        return []

    def collect(self):
        family = CounterMetricFamily(self.name, self.documentation, labels=["status"])
        for status, counter in sorted(tuple(self._by_status.items())):
            family.add_metric([status], float(counter.value))
        yield family


class _BookieStateCollector:
    """A collector that reads the bookie's state when scraped (nothing to describe before that)."""

    def __init__(self, bookie):
        self.bookie = bookie

    def describe(self):
        return []


class _JournalCollector(_BookieStateCollector):
    """Journal counters exposed as Prometheus counters, read from the Journal at scrape time."""

    def collect(self):
        journal = self.bookie.journal
        values = (
            ("bkfast_journal_batch", "Journal batches written (one write call each)", "batch_count"),
            ("bkfast_journal_sync", "Journal batch fdatasyncs", "sync_count"),
            ("bkfast_journal_records", "Journal records written", "records_written"),
            ("bkfast_journal_bytes", "Journal bytes written (records, lengths, padding)", "bytes_written"),
        )
        for name, doc, attr in values:
            family = CounterMetricFamily(name, doc)
            family.add_metric([], float(getattr(journal, attr, 0) if journal is not None else 0))
            yield family


class _GcCollector(_BookieStateCollector):
    """Garbage collection and compaction state, read from the bookie's collector at scrape time."""

    def collect(self):
        gc = getattr(self.bookie, "gc", None)
        if gc is None:
            return
        state = gc.state()
        for name, doc, key in (
            ("bkfast_gc_cycles", "Garbage collection cycles run", "cycles"),
            ("bkfast_gc_ledgers_deleted", "Ledgers dropped because their metadata is gone", "ledgers_deleted"),
            ("bkfast_gc_entry_logs_deleted", "Entry logs deleted (no live data, or compacted)", "logs_deleted"),
            ("bkfast_gc_entry_logs_compacted", "Entry logs compacted", "logs_compacted"),
            ("bkfast_gc_entries_copied", "Live entries copied by compaction", "entries_copied"),
            ("bkfast_gc_bytes_reclaimed", "Entry log bytes reclaimed", "bytes_reclaimed"),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], float(state.get(key) or 0))
            yield family
        for name, doc, key in (
            ("bkfast_gc_last_run_timestamp_seconds", "When the last GC cycle ended (0: never)", "last_gc_time"),
            ("bkfast_minor_compaction_last_timestamp_seconds", "Last minor compaction (0: never)",
             "last_minor_compaction_time"),
            ("bkfast_major_compaction_last_timestamp_seconds", "Last major compaction (0: never)",
             "last_major_compaction_time"),
        ):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], float(state.get(key) or 0))
            yield family
        logs = state.get("logs") or []
        live = GaugeMetricFamily("bkfast_entry_log_live_bytes", "Live bytes in entry logs (as of the last GC)")
        live.add_metric([], float(sum(entry["live_bytes"] for entry in logs)))
        yield live
        total = GaugeMetricFamily("bkfast_entry_log_total_bytes", "Bytes in entry logs (as of the last GC)")
        total.add_metric([], float(sum(entry["total_bytes"] for entry in logs)))
        yield total


class BookieMetrics:
    """Every metric of one bookie, on its own registry (`self.registry`)."""

    def __init__(self, bookie, factory=None, registry: CollectorRegistry | None = None):
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self.bookie = bookie
        self.factory = factory
        self.add_total = _StatusCounter("bkfast_add_entry", "addEntry requests answered, by status", registry)
        self.read_total = _StatusCounter("bkfast_read_entry", "Entry reads, by status", registry)
        self.add_latency = _BatchHistogram("bkfast_add_entry_latency_seconds",
                                           "Successful adds: request accepted to acknowledgement",
                                           LATENCY_BUCKETS, registry)
        self.read_latency = _BatchHistogram("bkfast_read_entry_latency_seconds", "Successful entry reads",
                                            LATENCY_BUCKETS, registry)
        self.journal_sync_latency = Histogram("bkfast_journal_sync_latency_seconds",
                                              "Write + fdatasync of one synced journal batch",
                                              buckets=SYNC_BUCKETS, registry=registry)
        # Cached children: the hot paths never look a status up.
        self._add_ok = self.add_total.child("OK")
        self._read_ok = self.read_total.child("OK")
        self._add_failed: dict[type, StatCounter] = {}
        self._read_failed: dict[type, StatCounter] = {}
        self._add_latency_observe = self.add_latency.observe
        self._read_latency_observe = self.read_latency.observe
        self.journal_sync_observe = self.journal_sync_latency.observe

        Gauge("bkfast_journal_queue_size", "Records queued for the journal thread",
              registry=registry).set_function(self._journal_queue)
        Gauge("bkfast_write_cache_size_bytes", "Bytes held in the write caches",
              registry=registry).set_function(self._write_cache_size)
        Gauge("bkfast_read_only", "1 when the bookie is read-only",
              registry=registry).set_function(lambda: 1.0 if self.bookie.read_only else 0.0)
        Gauge("bkfast_connections", "Open client connections",
              registry=registry).set_function(lambda: len(self.factory.connections) if self.factory else 0)
        Gauge("bkfast_pending_adds", "Adds accepted and not yet answered",
              registry=registry).set_function(lambda: self.factory.pending_adds if self.factory else 0)
        registry.register(_JournalCollector(bookie))
        registry.register(_GcCollector(bookie))

    # --- scrape-time values -----------------------------------------------------------------------
    def _journal_queue(self) -> float:
        journal = self.bookie.journal
        return journal.queue_length if journal is not None else 0

    def _write_cache_size(self) -> float:
        try:
            return sum(d.write_cache_size for d in self.bookie.storage.directories)
        except Exception:
            return 0

    # --- hot paths ---------------------------------------------------------------------------------
    def adds_answered(self, n: int, error: BaseException | None, seconds: float) -> None:
        """The server answered n adds of one batch (error None: EOK) `seconds` after they were accepted."""
        if error is None:
            self._add_ok.add(n)
            self._add_latency_observe(seconds, n)
            return
        child = self._add_failed.get(type(error))
        if child is None:
            child = self._add_failed[type(error)] = self.add_total.child(_status_name(error))
        child.add(n)

    def read_failed(self, error: BaseException) -> None:
        child = self._read_failed.get(type(error))
        if child is None:
            child = self._read_failed[type(error)] = self.read_total.child(_status_name(error))
        child.inc()

    def reads_from_memory(self, n: int, seconds: float) -> None:
        """n reads answered from the write or read-ahead cache in one batch that took `seconds`: each is
        observed at the batch's mean latency (one call)."""
        if n <= 0:
            return
        self._read_ok.add(n)
        self._read_latency_observe(seconds / n, n)

    def read_ok(self, seconds: float) -> None:
        self._read_latency_observe(seconds)
        self._read_ok.inc()
