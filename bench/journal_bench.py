"""Journal append benchmark (BookKeeper's `bkperf journal append`), as a script.

    .venv/bin/python bench/journal_bench.py --dir /tmp --entry-size 1024 --duration 10 [--baseline] [--json]

The same command as `bkfast bench journal` (see bkfast/cli/bench.py for what is measured): records/s,
MB/s and add latency percentiles every few seconds and at the end; `--baseline` also writes the same
batches from plain Python (os.writev + os.fdatasync) and prints journal/baseline.
"""

from bkfast.cli.bench import journal

if __name__ == "__main__":
    journal(prog_name="journal_bench.py")
