"""`bkfast bench ...`: benchmarks an operator runs on the target machine.

Owns: `bkfast bench journal`, BookKeeper's `bkperf journal append` for bkfast's journal. One producer
thread appends entries as fast as the journal takes them (journalQueueSize bounds what is in flight);
the journal's completion sink only records (time, first token, count), so the measurement costs the
journal thread nothing per record. With several `--dir`s there is one journal per dir, as in a bookie
with several journalDirectories, and the producer sends each entry to the journal of its ledger
(ledger mod number of dirs, the bookie's rule); the figures are over all journals. Reports records/s,
MB/s (entry bytes) and add latency (enqueue -> completion) percentiles every few seconds and at the end.
`--baseline` (one dir) then writes the same bytes with the same batching and fdatasync from plain Python
(os.writev + os.fdatasync) in this process and prints journal/baseline.

Must never: write outside its own temporary directory under --dir (removed at the end), or change
interpreter-wide settings unless asked (--switch-interval-ms).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from array import array

import click

from bkfast import _journal
from bkfast.attributes import Summed
from bkfast.bookie.journal import CACHE_DROP_LAG_BYTES, Journal
from bkfast.bookie.journal_files import HEADER_SIZE, MAGIC
from bkfast.conf import ServerConfiguration
from bkfast.loadgen import percentiles_ms
from bkfast.threads import NamedThread

_MiB = 1024 * 1024
_MAX_SAMPLES = 2_000_000      # percentiles use every record up to this many, an even sample above
_IOV_MAX = 1024


@click.group()
def bench() -> None:
    """Benchmarks (run them on the machine and disk you care about)."""


def _records(entry_size: int, ledgers: int) -> list[bytes]:
    """A pool of entries, round-robin over ledgers: 32-byte v1 header then random payload."""
    pool_size = max(ledgers, min(1024, max(1, 64 * _MiB // entry_size)))
    payload = os.urandom(max(0, entry_size - 32))
    out = []
    for i in range(pool_size):
        ledger, entry = i % ledgers, i // ledgers
        header = struct.pack(">qqqq", ledger, entry, entry - 1, (entry + 1) * len(payload))
        out.append((header + payload)[:entry_size])
    return out


def _latencies(batches: list, enqueued: array, limit: int) -> list[float]:
    """Completion time - enqueue time of the records of `batches`, every k-th one above `limit`."""
    total = sum(count for _, _, count in batches)
    stride = max(1, -(-total // limit))
    out: list[float] = []
    for done, first, count in batches:
        start = first + (-first) % stride
        out.extend([done - enqueued[i] for i in range(start, first + count, stride)])
    return out


class _Run:
    """One run over one or more journals: producer thread, completion bookkeeping, periodic reports.

    Each journal has its own token sequence (0, 1, 2, ...) and enqueue-time array, so that each of its
    batches is a contiguous run of its tokens.
    """

    def __init__(self, work_dirs: list[str], conf: ServerConfiguration, pool: list[bytes], ledgers: int):
        self.pool = pool
        n = len(work_dirs)
        # Journal of each pool record: the pool is round robin over the ledgers (record i: ledger i % ledgers).
        self.route = [(i % ledgers) % n for i in range(len(pool))]
        self.enqueued = [array("d") for _ in work_dirs]
        # per journal: (completion time, first token, count)
        self.batches: list[list[tuple[float, int, int]]] = [[] for _ in work_dirs]
        self.errors: list[BaseException] = []
        self.stop_producing = threading.Event()
        self.journals = [Journal(d, conf, self._sink(j), self._failed) for j, d in enumerate(work_dirs)]

    def _sink(self, j: int):
        batches = self.batches[j]

        def done(tokens: list) -> None:
            # Tokens are this journal's sequence numbers, each batch a contiguous run of them: O(1).
            batches.append((time.perf_counter(), tokens[0], len(tokens)))
        return done

    @property
    def all_batches(self) -> list[tuple[float, int, int]]:
        return [b for batches in self.batches for b in batches]

    sync_count = Summed("journals")

    def _failed(self, tokens: list, exc: BaseException) -> None:
        self.errors.append(exc)
        self.stop_producing.set()

    def produce(self) -> None:
        pool, n_pool, route = self.pool, len(self.pool), self.route
        now = time.perf_counter
        logs = [j.log_record for j in self.journals]
        stamps = [e.append for e in self.enqueued]
        tokens = [0] * len(logs)
        seq = 0
        try:
            while not self.stop_producing.is_set():
                for _ in range(256):
                    i = seq % n_pool
                    j = route[i]
                    stamps[j](now())
                    logs[j](pool[i], tokens[j])
                    tokens[j] += 1
                    seq += 1
        except Exception as exc:  # e.g. the journal failed: the run reports it
            self.errors.append(exc)
            for j, enqueued in enumerate(self.enqueued):
                del enqueued[tokens[j]:]

    def latencies(self, fresh: list[list], limit: int) -> list[float]:
        out: list[float] = []
        for j, batches in enumerate(fresh):
            out.extend(_latencies(batches, self.enqueued[j], max(1, limit // len(fresh))))
        return out

    def run(self, duration: float, report_every: float, report) -> float:
        for journal in self.journals:
            journal.start()
        producer = NamedThread(self.produce, "bench-producer")
        start = time.perf_counter()
        producer.start()
        seen, last_t = [0] * len(self.journals), start
        while True:
            left = start + duration - time.perf_counter()
            if left <= 0 or self.stop_producing.wait(min(report_every, left)):
                break
            now = time.perf_counter()
            fresh = [batches[seen[j]:] for j, batches in enumerate(self.batches)]
            seen = [seen[j] + len(f) for j, f in enumerate(fresh)]
            if report is not None:
                count = sum(c for f in fresh for _, _, c in f)
                stats = percentiles_ms(sorted(self.latencies(fresh, 20_000)))
                report(now - start, count / (now - last_t), sum(seen), self.sync_count, stats)
            last_t = now
        self.stop_producing.set()
        producer.join()
        for journal in self.journals:
            journal.stop()
        return start


def _baseline(path: str, pool: list[bytes], batch_sizes: list[int], align: int, prealloc_step: int,
              drop_cache_lag: int) -> dict:
    """The journal's bytes and batches, written from plain Python with os.writev + os.fdatasync.

    Same syscalls as the journal: the pre-allocation block, the writes, fdatasync, and the page-cache
    drop behind the sync (journalRemoveFromPageCache), which changes ext4's speed a lot on its own.
    """
    headers = [struct.pack(">i", len(r)) for r in pool]
    n_pool = len(pool)
    zeros = bytes(align)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (MAGIC + struct.pack(">i", 6)).ljust(HEADER_SIZE, b"\0"))
        pos, next_prealloc, seq, io_s, dropped = HEADER_SIZE, 0, 0, 0.0, 0
        start = time.perf_counter()
        for count in batch_sizes:
            iov: list[bytes] = []
            size = 0
            for _ in range(count):
                i = seq % n_pool
                iov.append(headers[i])
                iov.append(pool[i])
                size += 4 + len(pool[i])
                seq += 1
            pad = _journal.padding_record_size(pos + size, align)
            if pad:
                iov.append(struct.pack(">ii", _journal.PADDING_MASK, pad - 8) + bytes(pad - 8))
            end = pos + size + pad
            t = time.perf_counter()
            if end > next_prealloc:
                next_prealloc = -(-end // prealloc_step) * prealloc_step
                os.pwrite(fd, zeros, next_prealloc - align)
            for k in range(0, len(iov), _IOV_MAX):
                os.writev(fd, iov[k:k + _IOV_MAX])
            os.fdatasync(fd)
            pos = end
            if drop_cache_lag >= 0 and (pos - drop_cache_lag) // 4096 * 4096 > dropped:
                upto = (pos - drop_cache_lag) // 4096 * 4096
                os.posix_fadvise(fd, dropped, upto - dropped, os.POSIX_FADV_DONTNEED)
                dropped = upto
            io_s += time.perf_counter() - t
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return {"records": seq, "elapsed_s": elapsed, "io_s": io_s}


def run_journal_bench(directory: str | list[str], entry_size: int = 1024, ledgers: int = 10,
                      duration: float = 10.0, group_wait_ms: int = 2, group_bytes: int = 524288, sync: bool = True,
                      baseline: bool = False, report_every: float = 2.0, report=None) -> dict:
    """Run the benchmark; return the summary dict (see `bkfast bench journal --help`).

    `directory`: one dir, or a list of them (one journal each, ledgers spread over them as in a bookie).
    """
    directories = [directory] if isinstance(directory, str) else list(directory)
    _check_journal_dirs(directories, ledgers, baseline, sync)
    conf = ServerConfiguration({"journalMaxGroupWaitMSec": group_wait_ms,
                                "journalBufferedWritesThreshold": group_bytes,
                                "journalSyncData": sync})
    works = []
    try:
        for d in directories:
            os.makedirs(d, exist_ok=True)
            works.append(tempfile.mkdtemp(prefix="bkfast-bench-journal-", dir=d))
        pool = _records(entry_size, ledgers)
        run = _Run(works, conf, pool, ledgers)
        start = run.run(duration, report_every, report)
        if run.errors:
            raise click.ClickException(f"journal failed during the run: {run.errors[0]}")
        result = _summary(run, start, {
            "entry_size": entry_size, "ledgers": ledgers, "journal_dirs": len(directories), "sync": sync,
            "group_wait_ms": group_wait_ms, "group_bytes": group_bytes})
        if baseline and result["records"]:
            result.update(_against_baseline(result, works[0], pool, [c for _, _, c in run.all_batches], conf))
        return result
    finally:
        for w in works:
            shutil.rmtree(w, ignore_errors=True)


def _check_journal_dirs(directories: list[str], ledgers: int, baseline: bool, sync: bool) -> None:
    if baseline and not sync:
        raise click.ClickException("--baseline compares fdatasync'ed batches; drop --no-sync")
    if baseline and len(directories) > 1:
        raise click.ClickException("--baseline compares one journal with plain Python; give one --dir")
    if len(set(directories)) != len(directories):
        raise click.ClickException(f"--dir given twice: {', '.join(directories)}")
    if ledgers < len(directories):
        raise click.ClickException(f"--ledgers {ledgers} leaves journals idle: give at least one per --dir")


def _summary(run: _Run, start: float, settings: dict) -> dict:
    """The run's figures after its `settings` (entry_size, ledgers, ...): records, batches, syncs,
    rates and latency percentiles."""
    batches = run.all_batches
    records = sum(c for _, _, c in batches)
    elapsed = (max(t for t, _, _ in batches) if batches else time.perf_counter()) - start
    return {
        **settings, "duration_s": round(elapsed, 3),
        "records": records, "batches": sum(j.batch_count for j in run.journals),
        "syncs": run.sync_count,
        "records_per_s": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_s": round(records * settings["entry_size"] / elapsed / 1e6, 2) if elapsed > 0 else 0.0,
        **percentiles_ms(sorted(run.latencies(run.batches, _MAX_SAMPLES))),
        "baseline_ratio": None,
    }


def _against_baseline(result: dict, work: str, pool: list, sizes: list[int], conf) -> dict:
    """The same batches written by plain Python in `work` (emptied first): its rates and the ratios."""
    shutil.rmtree(work)
    os.makedirs(work)
    step = max(conf.journal_alignment_size, conf.journal_pre_alloc_size_mb * _MiB)
    lag = CACHE_DROP_LAG_BYTES if conf.journal_remove_from_page_cache else -1
    base = _baseline(os.path.join(work, "baseline.bin"), pool, sizes, conf.journal_alignment_size, step, lag)
    base_rps = base["records"] / base["elapsed_s"]
    return {
        "baseline_records_per_s": round(base_rps, 1),
        "baseline_mb_per_s": round(base["records"] * result["entry_size"] / base["elapsed_s"] / 1e6, 2),
        "baseline_ratio": round(result["records_per_s"] / base_rps, 3),
        # The same ratio against the syscall time alone (no Python at all): the disk's ceiling.
        "baseline_io_ratio": round(result["records_per_s"] / (base["records"] / base["io_s"]), 3),
    }


@bench.command("journal")
@click.option("--dir", "directories", multiple=True, default=[tempfile.gettempdir()], show_default=True,
              help="Directory on the disk to test (a temporary subdirectory is used and removed). Repeat it "
                   "for one journal per dir, as a bookie with several journalDirectories.")
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(1, 64 * _MiB),
              help="Bytes per entry.")
@click.option("--ledgers", default=10, show_default=True, type=click.IntRange(1),
              help="Ledgers the entries are spread over (round robin).")
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds to append for.")
@click.option("--group-wait-ms", default=2, show_default=True, type=int, help="journalMaxGroupWaitMSec.")
@click.option("--group-bytes", default=524288, show_default=True, type=click.IntRange(0),
              help="journalBufferedWritesThreshold.")
@click.option("--no-sync", is_flag=True, help="journalSyncData=false (ack after write, no fdatasync).")
@click.option("--baseline", is_flag=True,
              help="Also write the same batches from plain Python (os.writev + os.fdatasync) and compare.")
@click.option("--report-every", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between progress lines.")
@click.option("--switch-interval-ms", type=click.FloatRange(0.01), default=None,
              help="Set sys.setswitchinterval for the run (default: leave the interpreter's).")
@click.option("--json", "as_json", is_flag=True, help="Print only the summary, as one JSON object.")
def journal(directories, entry_size, ledgers, duration, group_wait_ms, group_bytes, no_sync, baseline,
            report_every, switch_interval_ms, as_json) -> None:
    """Append entries to a journal as fast as it takes them (like `bkperf journal append`)."""
    def report(t, rps, batches, syncs, stats):
        p = {k: ("-" if v is None else f"{v:.2f}") for k, v in stats.items()}
        click.echo(f"[{t:6.1f}s] {rps:>12,.0f} rec/s {rps * entry_size / 1e6:>9.1f} MB/s  "
                   f"p50 {p['p50_ms']} p95 {p['p95_ms']} p99 {p['p99_ms']} p99.9 {p['p999_ms']} ms  "
                   f"batches {batches} syncs {syncs}")

    old_interval = sys.getswitchinterval()
    if switch_interval_ms is not None:
        sys.setswitchinterval(switch_interval_ms / 1000.0)
    try:
        result = run_journal_bench(list(directories), entry_size, ledgers, duration, group_wait_ms, group_bytes,
                                   not no_sync, baseline, report_every, None if as_json else report)
    finally:
        sys.setswitchinterval(old_interval)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    click.echo(f"summary: {result['records']:,} records in {result['duration_s']:.2f} s over "
               f"{result['journal_dirs']} journal{'s' if result['journal_dirs'] > 1 else ''}, "
               f"{result['batches']:,} batches, {result['syncs']:,} syncs")
    click.echo(f"  {result['records_per_s']:,.0f} rec/s  {result['mb_per_s']:.1f} MB/s  "
               f"p50 {result['p50_ms']} p95 {result['p95_ms']} p99 {result['p99_ms']} "
               f"p99.9 {result['p999_ms']} ms")
    if result["baseline_ratio"] is not None:
        click.echo(f"  baseline (plain Python writev+fdatasync, same batches): "
                   f"{result['baseline_records_per_s']:,.0f} rec/s  {result['baseline_mb_per_s']:.1f} MB/s")
        click.echo(f"  journal/baseline = {result['baseline_ratio']:.3f}   "
                   f"(against the baseline's syscall time alone: {result['baseline_io_ratio']:.3f})")


from bkfast.cli.bench_bookie import bookie_bench  # noqa: E402 - `bkfast bench bookie`

bench.add_command(bookie_bench)

from bkfast.cli.bench_ledger import ledger as ledger_bench  # noqa: E402 - `bkfast bench ledger`

bench.add_command(ledger_bench)
