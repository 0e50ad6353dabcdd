"""The bookie's garbage collector (Java's GarbageCollectorThread): deleted ledgers out, dead entry logs gone.

Owns the GC thread (one cycle every `gcWaitTime` ms, or on trigger()), and per cycle:

1. ask the metadata source which of the storage's ledgers still exist (batches of LedgerId through
   `ledgers_exist`, the MetadataDriver method; a failed or timed-out answer means "keep everything")
   and delete the others from ledger storage (`storage.delete_ledger`);
2. compute the usage of every finished entry log: bytes per (scope, ledger) from its ledgers map
   (scanned when it has none, or when it holds scoped entries the Java map cannot list), cached per
   log since finished logs never change; live bytes = bytes of ledgers the storage still has;
3. delete entry logs with no live data;
4. minor / major compaction when due (`minor/majorCompactionInterval` s, `minor/majorCompactionThreshold`
   live fraction; either <= 0 disables that kind; major runs take precedence and reset the minor clock),
   compacting logs under the threshold, emptiest first (bkfast.bookie.compaction).

Which logs are "finished": before a cycle the collector notes each entry logger's current log id and
then calls `storage.flush()`, which waits for any flush in progress. Every log with a smaller id was
rotated before that note, so every entry in it was appended by a flush that has since committed (or
failed and will re-append elsewhere); its usage is final. The current log and newer ones are never
collected or compacted.

Storage contract used (DbLedgerStorage and the file-based index storage): entry_loggers(), all_ledgers(),
delete_ledger(), flush(), entry_location(), update_entry_locations().

Must never: delete a ledger whose metadata read failed, delete or compact the log being written, or let an
exception end the GC thread (a failed cycle is logged and retried at the next one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from bkfast._stats import now_ns
from bkfast.bookie.compaction import CompactionStats, Compactor, log_size
from bkfast.bookie.gc_stats import gc_stats_for
from bkfast.bookie.settings import GcSettings
from bkfast.errors import ReactorTimeoutError
from bkfast.ids import LedgerId
from bkfast.reactor import call as reactor_call
from bkfast.storage.entrylogger import LOGFILE_HEADER_SIZE, EntryLogger
from bkfast.threads import GC as GC_THREAD
from bkfast.threads import NamedThread

__all__ = ["GarbageCollector", "LogUsage"]

log = logging.getLogger(__name__)

EXISTS_BATCH = 10_000
SOURCE_TIMEOUT_S = 60.0


class LogUsage:
    """Bytes per (scope, ledger) of one finished entry log, and its live part."""

    __slots__ = ("logger_index", "log_id", "ledgers", "total", "live")

    def __init__(self, logger_index: int, log_id: int, ledgers: dict[tuple[int, int], int]):
        self.logger_index = logger_index
        self.log_id = log_id
        self.ledgers = ledgers
        self.total = sum(ledgers.values())
        self.live = self.total

    def update(self, live_ledgers: set[tuple[int, int]]) -> None:
        self.live = sum(n for key, n in self.ledgers.items() if key in live_ledgers)

    @property
    def ratio(self) -> float:
        return self.live / self.total if self.total else 0.0


def log_usage(logger: EntryLogger, logger_index: int, log_id: int) -> LogUsage:
    """Usage of a finished log: its ledgers map, plus a scan only if the map does not cover the file."""
    offset = 0
    try:
        _, offset, _ = logger.read_header(log_id)
    except Exception as e:  # noqa: BLE001 - a bad header is scanned like a log without a map
        log.warning("entry log %x: %s; scanning it", log_id, e)
    ledgers: dict[tuple[int, int], int] = {}
    if offset:
        plain = logger.ledgers_map(log_id)
        ledgers = {(0, lid): n for lid, n in plain.items()}
        if sum(plain.values()) == offset - LOGFILE_HEADER_SIZE:
            return LogUsage(logger_index, log_id, ledgers)  # only scope-0 entries: the map is complete
    ledgers = {}
    for r in logger.scan_records(log_id, with_data=False):
        key = (r.scope_id, r.ledger_id)
        ledgers[key] = ledgers.get(key, 0) + r.size + 4
    return LogUsage(logger_index, log_id, ledgers)


def _ask_source(source, ledgers: list[LedgerId], timeout: float) -> set[tuple[int, int]]:
    """The (scope, ledger) pairs of `ledgers` that the metadata source says exist.

    A MetadataDriver returns a Deferred and must be called in the reactor thread: when a reactor runs
    in another thread the call is made there and waited for. A plain object may answer directly.
    """
    try:
        result = reactor_call(source.ledgers_exist, ledgers, timeout=timeout)
    except ReactorTimeoutError as err:
        raise ReactorTimeoutError(f"metadata source did not answer ledgers_exist for {len(ledgers)} ledgers: "
                                  f"{err}") from None
    return {(x.scope_id, x.ledger_id) if isinstance(x, LedgerId) else (0, int(x)) for x in result}


class GarbageCollector:
    """GC + compaction of one ledger storage; see the module docstring."""

    def __init__(self, storage, settings: GcSettings, ledger_exists_source=None):
        self.storage = storage
        self.settings = settings
        self.source = ledger_exists_source
        # Told (ledger_id, scope_id) before a ledger is deleted (the Bookie: its add fast path forgets it).
        self.on_ledger_deleted: Callable[[int, int], object] | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._run_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._forced = {"major": False, "minor": False}
        # Java's suspendMajorGC / suspendMinorGC (the admin API's gc/suspend_compaction): a suspended kind
        # does not run, even when forced; garbage collection of deleted ledgers goes on.
        self.suspended = {"major": False, "minor": False}
        self.compactor = Compactor(storage, settings.compaction, self._stop)
        # Java's GarbageCollectorStats, one set per entry logger (bkfast.bookie.gc_stats).
        self.gc_stats = gc_stats_for(storage)
        self._usage: dict[tuple[int, int], LogUsage] = {}
        now = time.monotonic()
        self._last_minor = now
        self._last_major = now
        # Exposed through gc_state() (wall-clock times, None = never).
        self.last_gc_time: float | None = None
        self.last_minor_compaction_time: float | None = None
        self.last_major_compaction_time: float | None = None
        self.bytes_reclaimed = 0
        self.logs_deleted = 0
        self.logs_compacted = 0
        self.ledgers_deleted = 0
        self.entries_copied = 0
        self.cycles = 0
        self.last_error: str | None = None

    # -- thread --------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = NamedThread(self._loop, GC_THREAD)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; a compaction in progress stops at its next entry (its log is kept)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def trigger(self, force_major: bool = False, force_minor: bool = False) -> None:
        """Run a cycle now on the GC thread (with a compaction of the forced kind)."""
        self._forced["major"] |= force_major
        self._forced["minor"] |= force_minor
        self._wake.set()

    def suspend(self, major: bool = False, minor: bool = False) -> None:
        """Stop starting major and/or minor compactions until `resume` (a running one finishes)."""
        self.suspended["major"] |= major
        self.suspended["minor"] |= minor

    def resume(self, major: bool = False, minor: bool = False) -> None:
        if major:
            self.suspended["major"] = False
        if minor:
            self.suspended["minor"] = False

    def _loop(self) -> None:
        interval_s = self.settings.wait_s
        while not self._stop.is_set():
            self._wake.wait(interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            major, minor = self._forced["major"], self._forced["minor"]
            self._forced["major"] = self._forced["minor"] = False
            try:
                self.run_once(force_major=major, force_minor=minor)
            except Exception as e:  # noqa: BLE001 - the next cycle retries
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("garbage collection cycle failed; retrying in %.1f s", interval_s)

    # -- one cycle -----------------------------------------------------------------------------------

    def run_once(self, force_major: bool = False, force_minor: bool = False) -> CompactionStats | None:
        """One GC cycle (see the module docstring); the compaction stats when a compaction ran. Its time
        is every collector stats set's THREAD_RUNTIME (a failure if it raised)."""
        with self._run_lock:
            t0 = now_ns()
            try:
                stats = self._cycle(force_major, force_minor)
            except BaseException:
                for gc_stats in self.gc_stats:
                    gc_stats.runtime.fail_since(t0)
                raise
            for gc_stats in self.gc_stats:
                gc_stats.runtime.ok_since(t0)
            return stats

    def _cycle(self, force_major: bool, force_minor: bool) -> CompactionStats | None:
        loggers = self.storage.entry_loggers()
        limits = [_first_unfinished(lg) for lg in loggers]
        try:
            self.storage.flush()
        except Exception as e:  # noqa: BLE001 - e.g. ENOSPC: collecting must still go on, to free space
            log.warning("gc: ledger storage flush failed (%s); collecting finished logs anyway", e)
        self._delete_gone_ledgers()
        live = set(self.storage.all_ledgers())
        usages = self._refresh_usage(loggers, limits, live)
        for usage in usages:
            if usage.live == 0:
                self._remove_log(loggers[usage.logger_index], usage)
        self._note_active([u for u in usages if u.live > 0], live)
        stats = self._maybe_compact(loggers, [u for u in usages if u.live > 0], force_major, force_minor, live)
        self.last_gc_time = time.time()
        self.cycles += 1
        self.last_error = None
        return stats

    def _delete_gone_ledgers(self) -> None:
        if self.source is None:
            return
        snapshot = self.storage.all_ledgers()
        existing: set[tuple[int, int]] = set()
        try:
            for start in range(0, len(snapshot), EXISTS_BATCH):
                batch = [LedgerId(scope, ledger) for scope, ledger in snapshot[start:start + EXISTS_BATCH]]
                existing |= _ask_source(self.source, batch, SOURCE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - never delete on a failed read
            log.warning("gc: metadata read for %d ledgers failed, deleting none this cycle: %s", len(snapshot), e)
            return
        for scope_id, ledger_id in snapshot:
            if (scope_id, ledger_id) in existing:
                continue
            if self.on_ledger_deleted is not None:
                self.on_ledger_deleted(ledger_id, scope_id)
            self.storage.delete_ledger(ledger_id, scope_id)
            self.ledgers_deleted += 1
            self._stats_of(ledger_id, scope_id).deleted_ledgers.inc()
            log.info("gc: deleted ledger %d%s: it has no metadata any more", ledger_id,
                     f" scope {scope_id}" if scope_id else "")

    def _refresh_usage(self, loggers: list[EntryLogger], limits: list[int],
                       live: set[tuple[int, int]]) -> list[LogUsage]:
        seen = set()
        out = []
        for i, logger in enumerate(loggers):
            for log_id in logger.log_ids():
                if log_id >= limits[i]:
                    continue
                key = (i, log_id)
                usage = self._usage.get(key)
                if usage is None:
                    usage = log_usage(logger, i, log_id)
                    with self._state_lock:
                        self._usage[key] = usage
                usage.update(live)
                seen.add(key)
                out.append(usage)
        with self._state_lock:
            for key in [k for k in self._usage if k not in seen]:
                del self._usage[key]
        return out

    def _remove_log(self, logger: EntryLogger, usage: LogUsage) -> None:
        size = log_size(logger, usage.log_id)
        if logger.remove_log(usage.log_id):
            self.bytes_reclaimed += size
            self.gc_stats[usage.logger_index].reclaimed_by_deletion.add(size)
            self.logs_deleted += 1
            log.info("gc: removed entry log %x (%d bytes): none of its %d ledgers is live",
                     usage.log_id, size, len(usage.ledgers))
        with self._state_lock:
            self._usage.pop((usage.logger_index, usage.log_id), None)

    def _stats_of(self, ledger_id: int, scope_id: int):
        if len(self.gc_stats) == 1:
            return self.gc_stats[0]
        return self.gc_stats[self.storage.ledger_stats_index(ledger_id, scope_id)]

    def _note_active(self, usages: list[LogUsage], live: set[tuple[int, int]]) -> None:
        """The ACTIVE_* gauges: finished logs with live data and their live bytes, ledgers, per logger."""
        logs = [0] * len(self.gc_stats)
        live_bytes = [0] * len(self.gc_stats)
        for usage in usages:
            logs[usage.logger_index] += 1
            live_bytes[usage.logger_index] += usage.live
        ledgers = [0] * len(self.gc_stats)
        if len(ledgers) == 1:
            ledgers[0] = len(live)
        else:
            for scope_id, ledger_id in live:
                ledgers[self.storage.ledger_stats_index(ledger_id, scope_id)] += 1
        for gc_stats, n_logs, n_bytes, n_ledgers in zip(self.gc_stats, logs, live_bytes, ledgers, strict=True):
            gc_stats.active_logs, gc_stats.active_log_bytes, gc_stats.active_ledgers = n_logs, n_bytes, n_ledgers

    # -- compaction ----------------------------------------------------------------------------------

    def _maybe_compact(self, loggers, usages: list[LogUsage], force_major: bool, force_minor: bool,
                       live: set[tuple[int, int]]) -> CompactionStats | None:
        major, minor = self.settings.compaction.major, self.settings.compaction.minor
        now = time.monotonic()
        major_on, minor_on = major.enabled, minor.enabled
        if self.suspended["major"]:
            major_on = force_major = False
        if self.suspended["minor"]:
            minor_on = force_minor = False
        if force_major or (major_on and now - self._last_major >= major.interval_s):
            kind, chosen = "major", major
        elif force_minor or (minor_on and now - self._last_minor >= minor.interval_s):
            kind, chosen = "minor", minor
        else:
            return None
        threshold = chosen.threshold
        max_ms = chosen.max_time_ms
        deadline = time.monotonic() + max_ms / 1000.0 if max_ms > 0 else None
        stats = CompactionStats()
        started = time.monotonic()
        throttle = self.compactor.throttle()
        for usage in sorted((u for u in usages if u.ratio < threshold), key=lambda u: u.ratio):
            if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                break
            logger = loggers[usage.logger_index]
            log.info("gc: %s compaction of entry log %x (live %.1f%% of %d bytes)", kind, usage.log_id,
                     100.0 * usage.ratio, usage.total)
            reclaimed = stats.bytes_reclaimed
            if self.compactor.compact_log(logger, usage.log_id, throttle, deadline, stats, live):
                with self._state_lock:
                    self._usage.pop((usage.logger_index, usage.log_id), None)
            self.gc_stats[usage.logger_index].reclaimed_by_compaction.add(stats.bytes_reclaimed - reclaimed)
        stats.seconds = time.monotonic() - started
        self.bytes_reclaimed += stats.bytes_reclaimed
        self.logs_compacted += stats.logs_compacted
        self.entries_copied += stats.entries_copied
        now = time.monotonic()
        for gc_stats in self.gc_stats:
            (gc_stats.major_compactions if kind == "major" else gc_stats.minor_compactions).inc()
        if kind == "major":
            self._last_major = self._last_minor = now
            self.last_major_compaction_time = time.time()
        else:
            self._last_minor = now
            self.last_minor_compaction_time = time.time()
        log.info("gc: %s compaction done: %d logs, %d entries (%d bytes) copied, %d bytes reclaimed in %.2f s",
                 kind, stats.logs_compacted, stats.entries_copied, stats.bytes_copied, stats.bytes_reclaimed,
                 stats.seconds)
        return stats

    # -- state ---------------------------------------------------------------------------------------

    def state(self) -> dict:
        """Per-log live ratio, last GC / compaction times (epoch s) and totals, for the admin API."""
        with self._state_lock:
            logs = [{"dir": u.logger_index, "log_id": u.log_id, "live_bytes": u.live, "total_bytes": u.total,
                     "live_ratio": round(u.ratio, 6)} for u in sorted(self._usage.values(),
                                                                      key=lambda u: (u.logger_index, u.log_id))]
        return {
            "logs": logs,
            "last_gc_time": self.last_gc_time,
            "last_minor_compaction_time": self.last_minor_compaction_time,
            "last_major_compaction_time": self.last_major_compaction_time,
            "bytes_reclaimed": self.bytes_reclaimed,
            "logs_deleted": self.logs_deleted,
            "logs_compacted": self.logs_compacted,
            "ledgers_deleted": self.ledgers_deleted,
            "entries_copied": self.entries_copied,
            "cycles": self.cycles,
            "last_error": self.last_error,
        }


def _first_unfinished(logger: EntryLogger) -> int:
    """The smallest log id that may still receive entries (the current log, else the next one)."""
    current = logger.current_log_id
    return current if current is not None else logger.last_log_id + 1

