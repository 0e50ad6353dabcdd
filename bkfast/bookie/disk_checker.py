"""Disk checker (Java's LedgerDirsMonitor + DiskChecker): full disks make the bookie read-only.

Owns the check thread (every `diskCheckInterval` ms) over the filesystems of the ledger, index and journal
directories: usage = 1 - available/total (what Java's DiskChecker computes from usable space). Above
`diskUsageWarnThreshold` it logs a warning; above `diskUsageThreshold` the disks are full; once full they
are writable again only when every directory is below `diskUsageLwmThreshold` (hysteresis). The verdict
goes to `on_change(full: bool, detail: str)` on every transition; the Bookie turns read-only (or, with
`readOnlyModeEnabled=false`, shuts down, as Java does).

Also owns `is_no_space(error)`: whether an exception (or any exception it was raised from) is ENOSPC /
EDQUOT, the write-path signal that turns the bookie read-only at once, without waiting for a check.

Must never: change the bookie itself (it reports; the Bookie decides), or stop on an error (a directory
that cannot be stat'ed is logged and counted as full: a disk we cannot see is not one to write to).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from bkfast.bookie.settings import DiskCheckerSettings
from bkfast.threads import DISK_CHECK, NamedThread

__all__ = ["DiskChecker", "disk_usage", "is_no_space"]

log = logging.getLogger(__name__)

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def disk_usage(path: str | os.PathLike[str]) -> float:
    """Used fraction of the filesystem holding `path` (1 - space available to us / total space)."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return 0.0
    return 1.0 - (st.f_bavail * st.f_frsize) / total


def is_no_space(error: BaseException | None) -> bool:
    """True when the error, or one it was raised from, is ENOSPC or EDQUOT."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


class DiskChecker:
    """Periodic usage check of a bookie's directories; see the module docstring."""

    def __init__(self, dirs: Iterable[str | os.PathLike[str]], settings: DiskCheckerSettings,
                 on_change: Callable[[bool, str], None]):
        self.dirs = list(dict.fromkeys(Path(d) for d in dirs))
        self.threshold = settings.threshold
        self.warn_threshold = settings.warn_threshold
        self.lwm_threshold = settings.lwm_threshold
        self.interval_s = settings.interval_s
        self._on_change = on_change
        self.full = False
        self.usages: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()

    def start(self) -> None:
        self._thread = NamedThread(self._loop, DISK_CHECK)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the checker keeps running
                log.exception("disk check failed")

    def check(self) -> bool:
        """Measure every directory now; report a transition; return whether the disks are full."""
        usages: dict[str, float] = {}
        for d in self.dirs:
            try:
                usages[str(d)] = disk_usage(d)
            except OSError as e:
                log.error("disk check of %s failed: %s; counting it as full", d, e)
                usages[str(d)] = 1.0
        self.usages = usages
        for path, used in usages.items():
            if used > self.warn_threshold and path not in self._warned:
                self._warned.add(path)
                log.warning("disk of %s is %.1f%% used (warn threshold %.1f%%)", path, 100 * used,
                            100 * self.warn_threshold)
            elif used <= self.warn_threshold:
                self._warned.discard(path)
        worst_path, worst = max(usages.items(), key=lambda kv: kv[1]) if usages else ("", 0.0)
        if not self.full and worst > self.threshold:
            self.full = True
            detail = f"disk of {worst_path} is {100 * worst:.1f}% used, above diskUsageThreshold {self.threshold}"
            log.error("%s", detail)
            self._on_change(True, detail)
        elif self.full and worst < self.lwm_threshold:
            self.full = False
            detail = (f"every disk is below diskUsageLwmThreshold {self.lwm_threshold} "
                      f"(highest {worst_path} at {100 * worst:.1f}%)")
            log.info("%s", detail)
            self._on_change(False, detail)
        return self.full
