"""Small disks for the tests that fill them: a tmpfs mounted by the test (root only), unmounted after."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _unmount(path: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return
        subprocess.run(["sync"], check=False)
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int):
    """Mount a `size_mb` MiB tmpfs at `path` for the duration; skip the test when mounting is impossible."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (CI runs the tests as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        _unmount(path)


def fill(path: Path, leave_bytes: int = 0) -> Path:
    """Fill the file system of `path` with one file, up to `leave_bytes` free; return the file."""
    ballast = path / "ballast"
    st = os.statvfs(path)
    room = st.f_bavail * st.f_frsize - leave_bytes
    with open(ballast, "ab") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while room > 0:
                n = f.write(chunk[:min(room, len(chunk))])
                room -= n
            f.flush()
        except OSError:
            pass
    return ballast
