"""The README's Python examples run as written, against a `bkfast sandbox --zk` started here.

Every ```python block of README.md runs in its own interpreter (a subprocess, as a reader would paste
it into a file). A block that talks to a cluster must use the README's example URI; the sandbox's
metadata URI replaces it, nothing else is changed. The sandbox is a subprocess stopped by pid (SIGTERM;
SIGKILL for it and the pids its sandbox.json names if it does not stop).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.server_support import REPO, pid_alive

EXAMPLE_URI = "zk+hierarchical://127.0.0.1:2181/ledgers"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def readme_blocks() -> list[str]:
    return PYTHON_BLOCK.findall((REPO / "README.md").read_text())


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """`bkfast sandbox --zk` with 3 bookies; yields its sandbox.json."""
    data_dir = tmp_path_factory.mktemp("readme") / "sb"
    proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "sandbox", "--zk", "--bookies", "3",
                             "--data-dir", str(data_dir)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    info: dict = {}
    try:
        deadline = time.monotonic() + 120
        while not (data_dir / "sandbox.json").exists():
            assert proc.poll() is None, f"sandbox exited {proc.returncode}: {proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "sandbox.json never appeared"
            time.sleep(0.2)
        info = json.loads((data_dir / "sandbox.json").read_text())
        yield info
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in [*info.get("pids", {}).values(), info.get("zookeeper_pid")]:
            if pid and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.stdout.close()


def test_the_readme_has_the_examples_this_test_runs():
    blocks = readme_blocks()
    assert len(blocks) >= 3, "the README lost its Python examples"
    assert any("encode_entry" in b for b in blocks), "the codec example"
    assert any("AsyncBookKeeper" in b for b in blocks), "the async client example"
    for block in blocks:
        if "BookKeeper" in block:
            # the reader's URI, replaced by the sandbox's below; an embedded:// URI serves one process only
            assert EXAMPLE_URI in block and "embedded://" not in block, block


def _ledgers(metadata_uri: str) -> set[int]:
    listed = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "shell", "listledgers", "--metadata-uri",
                             metadata_uri, "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return {item["ledgerId"] for item in json.loads(listed.stdout)}


@pytest.mark.zookeeper
@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_example_runs_as_written(sandbox, index, tmp_path):
    block = readme_blocks()[index]
    uses_cluster = EXAMPLE_URI in block
    before = _ledgers(sandbox["metadata_uri"]) if uses_cluster else set()
    script = tmp_path / f"readme_example_{index}.py"
    script.write_text(block.replace(EXAMPLE_URI, sandbox["metadata_uri"]))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, f"README example {index} failed:\n{block}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    if uses_cluster:
        assert proc.stdout.strip(), "a client example prints what it wrote or read"
        # it wrote to the sandbox's cluster: a ledger that was not there before
        assert _ledgers(sandbox["metadata_uri"]) - before, "the example created no ledger in the sandbox"
