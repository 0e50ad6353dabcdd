"""A bookie's read-only state: why it is read-only, who hears of a change, and what a full disk does.

Owns: the set of reasons that hold a bookie read-only — "forced" (forceReadOnlyBookie), "admin" (the
operator's switch), "disk-full" (the disk checker), "enospc" (a write failed for lack of space),
"journal-enospc" (a journal stopped: until the disk checker sees room and every stopped journal goes on in
a new file), "storage-full" (the ledger disk was full at start: bkfast.bookie.storage_full), "shutdown" —
the listeners told of every writable <-> read-only transition (the server moves the registration between
available/ and available/readonly/), and the self-shutdown when disks fill with readOnlyModeEnabled=false.
A read-only bookie refuses adds with EREADONLY unless they are high priority (recovery), as Java does.

Used as a base of bkfast.bookie.bookie.Bookie: it reads the Bookie's settings, journals, storage_full,
disk_checker and stop().
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from bkfast.bookie.disk_checker import DiskChecker, is_no_space
from bkfast.threads import start_thread

if TYPE_CHECKING:
    from bkfast.bookie.journals import JournalSet
    from bkfast.bookie.settings import BookieSettings
    from bkfast.bookie.storage_full import StorageFullState

log = logging.getLogger(__name__)


class ReadOnlyState:
    """The read-only half of a Bookie (see the module docstring)."""

    # What it reads of the Bookie it is a base of.
    settings: BookieSettings
    journals: JournalSet
    disk_checker: DiskChecker
    storage_full: StorageFullState

    def _init_read_only_state(self, force_read_only: bool) -> None:
        self._state_lock = threading.Lock()
        self._read_only_reasons: set[str] = {"forced"} if force_read_only else set()
        self._state_listeners: list[Callable[[bool], None]] = []
        self._shutdown_listeners: list[Callable[[str], None]] = []
        self.shutdown_reason: str | None = None

    @property
    def read_only(self) -> bool:
        return bool(self._read_only_reasons)

    @read_only.setter
    def read_only(self, value: bool) -> None:
        """Operator switch (admin API, --read-only). False clears the operator reasons only: a full
        disk keeps the bookie read-only until the disk checker sees room again."""
        if value:
            self.set_read_only_reason("admin", True, "set by the operator")
        else:
            self.set_read_only_reason("forced", False, "cleared by the operator")
            self.set_read_only_reason("admin", False, "cleared by the operator")

    @property
    def read_only_reasons(self) -> list[str]:
        return sorted(self._read_only_reasons)

    def add_state_listener(self, listener: Callable[[bool], None]) -> None:
        """listener(read_only) on every writable <-> read-only transition (from the thread causing it:
        disk checker, journal, flush or GC thread). The server uses it to move the bookie's registration
        between available/ and available/readonly/ in ZooKeeper."""
        self._state_listeners.append(listener)

    def add_shutdown_listener(self, listener: Callable[[str], None]) -> None:
        """listener(reason) when the bookie shuts itself down (disks full and readOnlyModeEnabled=false)."""
        self._shutdown_listeners.append(listener)

    def set_read_only_reason(self, reason: str, on: bool, detail: str) -> None:
        """Hold (`on`) or release one reason; listeners hear of a writable <-> read-only transition."""
        with self._state_lock:
            before = bool(self._read_only_reasons)
            if on:
                self._read_only_reasons.add(reason)
            else:
                self._read_only_reasons.discard(reason)
            after = bool(self._read_only_reasons)
        if before == after:
            return
        log.warning("bookie is now %s (%s: %s)", "read-only" if after else "writable", reason, detail)
        for listener in list(self._state_listeners):
            try:
                listener(after)
            except Exception:  # noqa: BLE001 - one listener must not block the others
                log.exception("bookie state listener failed")

    def _on_disk_state(self, full: bool, detail: str) -> None:
        if not full:
            if not self.storage_full.recover(detail) or not self._recover_journal(detail):
                return                   # still cannot write: the checker reports again at its next check
            self.set_read_only_reason("enospc", False, detail)
            self.set_read_only_reason("disk-full", False, detail)
            return
        if self.settings.read_only_mode_enabled:
            self.set_read_only_reason("disk-full", True, detail)
            return
        self._shutdown(f"disks full and readOnlyModeEnabled=false: {detail}")

    def _recover_journal(self, detail: str) -> bool:
        """The disks have room: every journal stopped by ENOSPC continues in a new file. False: one still
        fails (those recovered stay recovered; the next disk check retries the rest)."""
        if "journal-enospc" not in self._read_only_reasons:
            return True
        try:
            self.journals.recover()
        except Exception as error:  # noqa: BLE001 - still no room: read-only until the next disk check
            log.warning("the journal disk has room (%s) but a journal cannot start a new file: %s", detail, error)
            self.disk_checker.full = True
            return False
        self.set_read_only_reason("journal-enospc", False, detail)
        return True

    def _note_io_error(self, error: BaseException) -> None:
        """A write failed: on ENOSPC/EDQUOT turn read-only now; the disk checker turns writable again
        once every disk is below diskUsageLwmThreshold."""
        if not is_no_space(error):
            return
        self.disk_checker.full = True  # writable again only through the checker's low-water mark
        if self.settings.read_only_mode_enabled:
            self.set_read_only_reason("enospc", True, f"write failed: {error}")
        else:
            self._shutdown(f"no space left and readOnlyModeEnabled=false: {error}")

    def _shutdown(self, reason: str) -> None:
        if self.shutdown_reason is not None:
            return
        self.shutdown_reason = reason
        log.error("bookie shutting down: %s", reason)
        self.set_read_only_reason("shutdown", True, reason)

        def run():
            try:
                self.stop()
            except Exception:  # noqa: BLE001 - stopping a bookie whose disks are full may fail
                log.exception("bookie shutdown failed")
            for listener in list(self._shutdown_listeners):
                try:
                    listener(reason)
                except Exception:  # noqa: BLE001
                    log.exception("bookie shutdown listener failed")

        start_thread(run, "bookie-shutdown")
