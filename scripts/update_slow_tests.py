"""Rewrites tests/slow_tests.txt, the tests `make test-fast` leaves out, from a timed run of the whole suite.

    .venv/bin/python -m pytest --durations=0 -q > /tmp/durations.txt
    .venv/bin/python scripts/update_slow_tests.py /tmp/durations.txt

A test is slow when its setup, call and teardown together took at least --threshold seconds (default 0.8) on
the machine that ran it; the fast tier is everything else (tests/conftest.py marks the listed ones `slow`).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# tests/conftest.py marks these folders slow as a whole
ALWAYS_SLOW = ("tests/crash/", "tests/faults/", "tests/spark/")
LIST = Path(__file__).resolve().parent.parent / "tests" / "slow_tests.txt"
HEADER = """\
# The tests `make test-fast` leaves out (tests/conftest.py marks them `slow`): each took at least {threshold:g} s
# (setup + call + teardown) in a timed run of the whole suite on a 2-core machine. Made by
# scripts/update_slow_tests.py from `pytest --durations=0`; tests/crash/, tests/faults/ and tests/spark/ are slow
# whatever this list says. A test missing here runs in the fast tier; a line naming no test stops the session.
"""


def durations(report: str) -> Counter:
    seconds: Counter = Counter()
    for line in report.splitlines():
        m = re.match(r"([\d.]+)s (?:setup|call|teardown)\s+(.+?)\s*$", line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="output of pytest --durations=0")
    parser.add_argument("--threshold", type=float, default=0.8)
    args = parser.parse_args()
    seconds = durations(args.report.read_text())
    slow = sorted((node, s) for node, s in seconds.items()
                  if s >= args.threshold and not node.startswith(ALWAYS_SLOW))
    lines = [f"{node}  # {s:.1f} s" for node, s in slow]
    LIST.write_text(HEADER.format(threshold=args.threshold) + "\n".join(lines) + "\n")
    print(f"{len(slow)} slow tests written to {LIST}")


if __name__ == "__main__":
    main()
