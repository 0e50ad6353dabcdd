"""bkfast.stats.gil_share: py-spy's raw --gil --threads output read as GIL-held time per thread and op."""

import pytest

from bkfast.stats import gil_share
from bkfast.stats.gil_share import GilSampler, held_by_thread

RAW = """\
thread (28134): flush-0;Thread._bootstrap (threading.py:1002);SliceWriter.write (bkfast/dbstorage/flush_writer.py:63) 30
thread (28134): flush-0;Thread._bootstrap (threading.py:1002);RocksStore.write (bkfast/dbstorage/index.py:289) 10
thread (0x7f3a): bookie-io;<module> (bkfast/cli/main.py:9);run (twisted/internet/base.py:1318) 20
thread (28140): journal-0;Journal._run (bkfast/bookie/journal.py:500) 5

not a sample line
"""


def test_samples_are_counted_per_thread_name():
    assert held_by_thread(RAW.splitlines()) == {"flush-0": 40, "bookie-io": 20, "journal-0": 5}


class _EndedPySpy:
    """What GilSampler.stop talks to: a py-spy process that has already written its samples and log."""

    def __init__(self, log: str, returncode: int):
        self.log, self.returncode = log, returncode

    def send_signal(self, _sig):
        pass

    def communicate(self, timeout):
        return self.log, None

    def poll(self):
        return self.returncode


def test_stop_turns_samples_into_gil_held_microseconds_per_op(tmp_path, monkeypatch):
    """100 ticks/s over 2 s = 200 ticks; 65 samples of some holder: held 32.5% of the time. 2 s of wall time
    over 1,000 ops is 2,000 us per op, so flush-0's 40 of 200 ticks are 400 us per op."""
    out = tmp_path / "raw.txt"
    out.write_text(RAW)

    sampler = GilSampler(pid=1, rate=100)
    sampler._proc = _EndedPySpy("py-spy> Wrote raw flamegraph data to 'x'. Samples: 65 Errors: 3\n", 0)
    sampler._out = str(out)
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(gil_share.time, "monotonic", lambda: next(clock))
    sampler._started = gil_share.time.monotonic()
    result = sampler.stop(1000)
    assert result["flush-0"] == pytest.approx(400.0)
    assert result["bookie-io"] == pytest.approx(200.0) and result["journal-0"] == pytest.approx(50.0)
    assert result["total"] == pytest.approx(650.0)
    assert result["held_share"] == pytest.approx(0.325)
    assert (result["samples"], result["errors"]) == (65, 3)
    assert not out.exists(), "the sample file is removed"


def test_a_run_with_no_sample_is_an_error_not_a_zero(tmp_path):
    out = tmp_path / "raw.txt"
    out.write_text("")

    sampler = GilSampler(pid=1)
    sampler._proc, sampler._out = _EndedPySpy("Error: failed to open process\n", 1), str(out)
    with pytest.raises(RuntimeError, match="no GIL sample"):
        sampler.stop(10)
