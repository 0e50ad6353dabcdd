"""`python -m tests.faults --minutes N [--seed S]`: a long fault campaign; ends with one JSON line.

Runs campaigns of at most --campaign-minutes each (a fresh cluster per campaign, seeds S, S+1, ...,
random faults) until N minutes are used, then prints the totals on stdout: operations, faults (count per
type), acked_checked, violations, and the seeds. Progress and any violation's history slice go to
stderr; the histories of a campaign with violations are kept under --keep (default: a temp dir).
The bookies run AutoRecovery and a stream writer and reader join the workload, so the line also has
stream_records_checked (acknowledged stream records verified), stream_records_read (by the tailing
reader), stream_indeterminate(_present) (appends with an unknown outcome, and how many of them are in
the stream), underreplicated_left (marks still there after the settle wait), rereplicated_segments
(segments AutoRecovery copied to a new bookie) and replica_entries_missing_at_write (entries a failed
bookie missed after AQ others acknowledged them, which BookKeeper leaves as they are).
Needs root (network namespaces) and Debian's iproute2, nftables and zookeeper (`make system-deps`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .campaign import run_campaign
from .nemesis import FAULTS
from .netns import netns_available

SUMMED = ("stream_records_checked", "stream_records_read", "stream_indeterminate", "stream_indeterminate_present",
          "underreplicated_left", "underreplicated_unhealable", "replica_entries_missing_at_write",
          "rereplicated_segments")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="total running time")
    parser.add_argument("--seed", type=int, default=None, help="first campaign's seed (default: from the clock)")
    parser.add_argument("--campaign-minutes", type=float, default=5.0, help="length of one campaign")
    parser.add_argument("--overlap", type=float, default=0.3, help="chance that two faults run at once")
    parser.add_argument("--keep", type=Path, default=None, help="keep every campaign's histories here")
    args = parser.parse_args(argv)
    problem = netns_available()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.minutes <= 0 or args.campaign_minutes <= 0:
        print("error: --minutes and --campaign-minutes must be positive", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so the running campaign still tears down its namespaces and processes
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"fault campaigns: first seed {seed} (rerun with --seed {seed})", file=sys.stderr, flush=True)
    deadline = time.monotonic() + args.minutes * 60
    totals = {"operations": 0, "faults": {f: 0 for f in FAULTS}, "acked_checked": 0, "violations": 0,
              "campaigns": 0, "seeds": [], "ledgers": 0, "unrecovered_ledgers": 0, "violation_kinds": {},
              **{key: 0 for key in SUMMED}}
    while True:
        left = deadline - time.monotonic()
        if left < 30 and totals["campaigns"]:
            break
        seconds = max(20.0, min(args.campaign_minutes * 60, left - 15))
        root = args.keep or Path(tempfile.mkdtemp(prefix="bkfast-faults-"))
        work = root / f"seed-{seed}"
        work.mkdir(parents=True, exist_ok=True)
        summary, report, _history = run_campaign(seed, seconds, work, prefix=f"bkf{os.getpid()}",
                                                 overlap=args.overlap)
        totals["campaigns"] += 1
        totals["seeds"].append(seed)
        for key in ("operations", "acked_checked", "violations", "ledgers", "unrecovered_ledgers", *SUMMED):
            totals[key] += summary.get(key) or 0
        for kind, n in summary["violation_kinds"].items():
            totals["violation_kinds"][kind] = totals["violation_kinds"].get(kind, 0) + n
        for kind, n in summary["faults"].items():
            totals["faults"][kind] += n
        if report.violations:
            print(f"violations: histories kept in {work}", file=sys.stderr)
        elif args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        seed += 1
    print(json.dumps(totals), flush=True)
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
