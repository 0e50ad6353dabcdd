"""CPU per operation by bookie thread, from several load generators, and the scaling model it implies.

    .venv/bin/python bench/thread_cpu_scaling.py [--generators 2] [--adds 100000] [--size 1024]
        [--protocols v2,v3] [--outstanding 1000] [--reads 100000] [--read-passes 3] [--warmup-adds N]
        [--tail-poll-ms MS] [--gil] [--dir DIR] [--cores 4,8,16] [--json]

One fresh bookie (DbLedgerStorage, journal sync on, 64 MiB write and read caches; `-D key=value` adds
keys) serves, per protocol: `--generators` processes of `bkfast bench bookie` (throughput phase, each on
its own ledgers, `--outstanding` adds in flight each), then warm sequential reads of entries just written
(one closed-loop reader per generator, bench/read_load.py, 256 in flight; after a warming pass,
`--read-passes` measured passes, their rates averaged). Each thread's CPU is read from
/proc/<pid>/task/*/schedstat before and after each phase (bkfast.stats.thread_cpu); the bookie names its
threads (`bookie-io`, `journal-N`, `flush-N`, `read-N`, ...), so the figures say which thread pays.
Before the measured phases, an unmeasured warm-up phase of `--warmup-adds` adds per generator (default:
as many as `--adds`; 0: none) with the first protocol, on ledgers of its own: the first phase of a fresh
bookie otherwise pays first-touch page faults of the write cache's arena and pools (measured: ~0.25 us
more reactor CPU per add than the same phase run second), which a running bookie has paid long ago.
`--tail-poll-ms MS`: during each measured add phase, a slow tailing reader in this process long-polls
every ledger the generators write once per MS (bench/read_load.py tail_lacs), so the bookie tracks their
LACs and wakes the polls from its adds, as it does for a consumer tailing its ledgers.

`--gil`: during each measured phase, py-spy samples which thread holds the GIL (bkfast.stats.gil_share, the
`bench` extra): GIL-held microseconds per op by thread and in total.

Printed per protocol and phase: ops/s (sum over generators), the worst generator's p99, and CPU
microseconds per op by thread and in total (and GIL-held microseconds with --gil). Then the scaling model
(docs/threads.md): a bookie's adds/s on a host with C cores is bounded by its serial stages, by the GIL
and by its total CPU,

    adds/s(C) = min(1e6 / reactor_us, 1e6 / worker_us, journals * 1e6 / journal_us, 1e6 / gil_us,
                    C * 1e6 / total_us)

where reactor_us is the reactor thread's CPU per add (it runs on one core whatever C is), worker_us the
add worker's (`add-worker-0`, with numAddWorkerThreads=1: one thread, whose runs hold the ledger lock), journal_us
one journal thread's (one per journal directory; as many journals as cores given to journals, here
assumed min(C / 4, 4)), gil_us the GIL-held time per add summed over the threads (with --gil; one lock
for the whole process whatever C is), and total_us every thread's. Assumptions: the disks keep up (the journal's
fdatasync is not the limit), load generators are on other hosts, and per-op costs do not grow with C
(no lock contention beyond what was measured). Every process is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from read_load import read_range, tail_lacs  # noqa: E402

from bkfast.cli.local_cluster import LocalBookie  # noqa: E402
from bkfast.stats.gil_share import GilSampler  # noqa: E402
from bkfast.stats.thread_cpu import ThreadCpuMeter  # noqa: E402

BKFAST = [sys.executable, "-m", "bkfast.cli.main"]
BOOKIE_CONF = {"journalSyncData": "true"}
WARMUP_LEDGERS_FROM = 500           # the warm-up's ledgers: past every measured phase's
READ_WINDOW = 256


def _generator(port: int, protocol: str, first_ledger: int, adds: int, size: int, outstanding: int,
               ledgers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [*BKFAST, "bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--protocol", protocol, "--json",
         "--latency-count", "0", "--warmup-count", "0", "--throughput-count", str(adds), "--size", str(size),
         "--outstanding", str(outstanding), "--ledgers", str(ledgers), "--first-ledger-id", str(first_ledger)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_generators(procs: list[subprocess.Popen]) -> list[dict]:
    docs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"bench bookie failed ({proc.returncode}): {err[-2000:]}")
            docs.append(json.loads(out.strip().splitlines()[-1])["throughput"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return docs


def run_adds(bookie: LocalBookie, protocol: str, first_ledger: int, args) -> dict:
    meter = ThreadCpuMeter(bookie.pid)
    meter.start()
    gil = _start_gil(bookie, args)
    start = time.perf_counter()
    procs = [_generator(bookie.port, protocol, first_ledger + g * args.ledgers, args.adds, args.size,
                        args.outstanding, args.ledgers) for g in range(args.generators)]
    tail = _start_tail(bookie, first_ledger, args)
    try:
        docs = _wait_generators(procs)
    finally:
        tailed = tail() if tail is not None else None
    wall = time.perf_counter() - start
    ops = sum(d["adds"] for d in docs)
    result = {"ops": ops, "ops_per_s": round(sum(d["adds_per_s"] for d in docs)),
              "p99_ms": max(d["p99_ms"] for d in docs), "wall_s": round(wall, 2),
              "errors": sum(d["errors"] for d in docs), "cpu_us_per_op": meter.stop(ops)}
    if gil is not None:
        result["gil_us_per_op"] = gil.stop(ops)
    if tailed is not None:
        result["tail_polls"] = tailed["polls"]
    return result


def _start_gil(bookie: LocalBookie, args) -> GilSampler | None:
    if not args.gil:
        return None
    sampler = GilSampler(bookie.pid)
    sampler.start()
    return sampler


def _start_tail(bookie: LocalBookie, first_ledger: int, args):
    """The tailing reader of --tail-poll-ms in a thread; returns its stop-and-report, or None."""
    if not args.tail_poll_ms:
        return None
    ledgers = list(range(first_ledger, first_ledger + args.generators * args.ledgers))
    stop, report = threading.Event(), {}
    thread = threading.Thread(target=lambda: report.update(
        tail_lacs("127.0.0.1", bookie.port, ledgers, args.tail_poll_ms / 1000, stop)), daemon=True)
    thread.start()

    def finish() -> dict:
        stop.set()
        thread.join(30)
        if "polls" not in report:
            raise RuntimeError("the tailing reader failed (see its traceback above)")
        return report

    return finish


def _read_one(job: tuple) -> dict:
    port, protocol, ledger, last = job
    return read_range("127.0.0.1", port, ledger, 0, last, protocol=protocol, window=READ_WINDOW)


def run_reads(bookie: LocalBookie, protocol: str, first_ledger: int, args) -> dict:
    """Warm reads: each reader reads the first ledger its generator wrote, entries 0..last."""
    per_ledger = args.adds // args.ledgers
    last = min(per_ledger, max(1, args.reads // args.generators)) - 1
    jobs = [(bookie.port, protocol, first_ledger + g * args.ledgers, last) for g in range(args.generators)]
    with multiprocessing.get_context("spawn").Pool(args.generators) as pool:
        pool.map(_read_one, jobs)                      # a first pass, so the measured ones are warm
        meter = ThreadCpuMeter(bookie.pid)
        meter.start()
        gil = _start_gil(bookie, args)
        passes = [pool.map(_read_one, jobs) for _ in range(max(1, args.read_passes))]
        results = [r for one_pass in passes for r in one_pass]
        ops = sum(r["entries"] for r in results)
        spent = meter.stop(ops)
        gil_us = gil.stop(ops) if gil is not None else None
    # the readers of a pass run side by side: a pass's rate is the sum of theirs; passes are averaged
    rate = sum(r["entries"] / r["seconds"] for r in results) / len(passes)
    result = {"ops": ops, "ops_per_s": round(rate), "errors": sum(r["errors"] for r in results),
              "cpu_us_per_op": spent}
    if gil_us is not None:
        result["gil_us_per_op"] = gil_us
    return result


def scaling_model(cpu_us: dict, cores: list[int], gil_us: float = 0.0) -> dict:
    """adds/s bounds for each core count from the per-thread CPU per add and, when measured, the GIL-held
    time per add over all threads (see the module's docstring)."""
    reactor_us = cpu_us.get("bookie-io", 0.0)
    worker_us = cpu_us.get("add-worker-0", 0.0)
    journal_us = max((v for k, v in cpu_us.items() if k.startswith("journal-")), default=0.0)
    total_us = cpu_us["total"]
    model = {}
    for c in cores:
        journals = max(1, min(c // 4, 4))
        bounds = {"reactor": 1e6 / reactor_us if reactor_us else float("inf"),
                  "add worker": 1e6 / worker_us if worker_us else float("inf"),
                  "journals": journals * 1e6 / journal_us if journal_us else float("inf"),
                  "gil": 1e6 / gil_us if gil_us else float("inf"),
                  "cpu": c * 1e6 / total_us}
        limit = min(bounds, key=bounds.__getitem__)
        model[c] = {"adds_per_s": round(bounds[limit]), "limited_by": limit, "journals": journals}
    return model


def _print_phase(protocol: str, phase: str, r: dict) -> None:
    extra = f" p99 {r['p99_ms']:.2f} ms" if "p99_ms" in r else ""
    if "tail_polls" in r:
        extra += f" tail polls {r['tail_polls']}"
    print(f"{protocol} {phase:<5} {r['ops']:>9,} ops {r['ops_per_s']:>9,} ops/s{extra} errors {r['errors']}")
    print("    CPU us/op: " + "  ".join(f"{k} {v:.2f}" for k, v in r["cpu_us_per_op"].items()))
    if "gil_us_per_op" in r:
        gil = r["gil_us_per_op"]
        print("    GIL held us/op: " + "  ".join(f"{k} {v:.2f}" for k, v in gil.items()
                                                if k not in ("held_share", "samples", "errors"))
              + f"  (held {gil['held_share']:.0%} of the time; {gil['samples']} samples, {gil['errors']} errors)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generators", type=int, default=2)
    ap.add_argument("--adds", type=int, default=100000, help="adds per generator")
    ap.add_argument("--ledgers", type=int, default=4, help="ledgers per generator")
    ap.add_argument("--reads", type=int, default=100000, help="warm reads in all (0: no read phase)")
    ap.add_argument("--read-passes", type=int, default=3, help="measured warm passes over those entries")
    ap.add_argument("--warmup-adds", type=int, default=-1,
                    help="unmeasured adds per generator before the phases (default: --adds; 0: none)")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--outstanding", type=int, default=1000)
    ap.add_argument("--protocols", default="v2,v3")
    ap.add_argument("--cores", default="4,8,16")
    ap.add_argument("--tail-poll-ms", type=float, default=0,
                    help="a tailing reader long-polls every generator ledger this often (0: none)")
    ap.add_argument("--gil", action="store_true", help="sample the GIL's holder with py-spy (the bench extra)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("-D", dest="conf", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    conf = {**BOOKIE_CONF, **dict(kv.split("=", 1) for kv in args.conf)}
    data_dir = Path(tempfile.mkdtemp(prefix="bkfast-thread-cpu-", dir=args.dir))
    bookie = LocalBookie(data_dir, 0, extra_conf=conf).start()
    report: dict = {"generators": args.generators, "size": args.size, "protocols": {}}
    try:
        first = int(time.time() * 1000) * 1000
        warmup = args.adds if args.warmup_adds < 0 else args.warmup_adds
        if warmup:
            run_adds(bookie, args.protocols.split(",")[0], first + WARMUP_LEDGERS_FROM,
                     argparse.Namespace(**{**vars(args), "adds": warmup}))
        for n, protocol in enumerate(args.protocols.split(",")):
            first_ledger = first + n * args.generators * args.ledgers
            adds = run_adds(bookie, protocol, first_ledger, args)
            gil_us = adds.get("gil_us_per_op", {}).get("total", 0.0)
            result = {"adds": adds, "model": scaling_model(adds["cpu_us_per_op"],
                                                           [int(c) for c in args.cores.split(",")], gil_us)}
            if args.reads:
                result["reads"] = run_reads(bookie, protocol, first_ledger, args)
            report["protocols"][protocol] = result
            if not args.json:
                _print_phase(protocol, "adds", adds)
                if "reads" in result:
                    _print_phase(protocol, "reads", result["reads"])
                print("    model: " + "  ".join(f"{c} cores {m['adds_per_s']:,} adds/s ({m['limited_by']})"
                                                for c, m in result["model"].items()))
    finally:
        bookie.stop(60)
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
