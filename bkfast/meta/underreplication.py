"""AutoRecovery's metadata as interfaces a metadata driver serves: the under-replication manager (Java's
LedgerUnderreplicationManager) and the auditor election (Java's LedgerAuditorManager).

Owns the contract, not a store: marks per ledger with the missing replicas and a version for CAS, per-ledger
locks held by the driver's session (a second holder is refused; a released lock, or a holder whose session
ended, frees it), the enable/disable switch, lostBookieRecoveryDelay, the periodic checks' last run times,
and one election whose lowest living candidate is the auditor. Implementations: `bkfast.meta.zk_underreplication`
and `bkfast.meta.zk_election` (Java's znodes), `bkfast.meta.embedded_replication` (one process). Reached through
`MetadataDriver.under_replication()` and `MetadataDriver.auditor_election()`.

Every method blocks: callers are the auditor's, the worker's and the election's threads and the shell, never
the reactor thread. A watch is a callable of no argument, called once (in some other thread) the next time
what it watches changes. Must never name a store's paths, versions' encodings or client types.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bkfast.errors import ReplicationUnavailableError  # noqa: F401  (re-exported: part of this interface)

__all__ = ["UnderReplicationManager", "AuditorElection", "MarkInfo", "Watch", "ReplicationUnavailableError",
           "CHECK_ALL_LEDGERS_CTIME", "PLACEMENT_POLICY_CHECK_CTIME", "REPLICAS_CHECK_CTIME", "CTIME_NAMES",
           "MAX_RECOVERY_DELAY_S", "check_recovery_delay"]

Watch = Callable[[], None]

# The auditor's periodic checks whose last run time is kept (Java's checkAllLedgers, placementPolicyCheck and
# replicasCheck ctimes): names for `get_ctime` / `set_ctime`.
CHECK_ALL_LEDGERS_CTIME = "checkAllLedgers"
PLACEMENT_POLICY_CHECK_CTIME = "placementPolicyCheck"
REPLICAS_CHECK_CTIME = "replicasCheck"
CTIME_NAMES = (CHECK_ALL_LEDGERS_CTIME, PLACEMENT_POLICY_CHECK_CTIME, REPLICAS_CHECK_CTIME)

# Java's auditor reads the delay with Integer.parseInt: anything beyond an int stops it.
MAX_RECOVERY_DELAY_S = 2**31 - 1


@dataclass(frozen=True)
class MarkInfo:
    """One mark: the ledger, its missing replicas, ctime (-1 when not stored) and the store's version of it."""

    ledger_id: int
    replicas: tuple[str, ...]
    ctime: int
    version: int


def check_recovery_delay(seconds: int) -> str:
    """The delay as the decimal text every store keeps; ValueError outside 0 .. 2^31-1."""
    if not 0 <= int(seconds) <= MAX_RECOVERY_DELAY_S:
        raise ValueError(f"lostBookieRecoveryDelay {seconds}: expected 0 to {MAX_RECOVERY_DELAY_S} seconds")
    return str(int(seconds))


class UnderReplicationManager(abc.ABC):
    """See the module docstring. `lock_holder` is the text a lock records about its holder (Java: host name)."""

    lock_holder: str

    @abc.abstractmethod
    def ensure_layout(self) -> None:
        """Create the store's under-replication records if absent; ReplicationUnavailableError when the store
        holds a format this manager does not know."""

    # --- marks ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        """Create the mark, or add the replicas it does not list yet (and refresh ctime). Whether it wrote."""

    @abc.abstractmethod
    def mark_many(self, ledger_ids: Iterable[int], replicas: Iterable[str]) -> int:
        """`mark(id, replicas)` for many ledgers, as fast as the store allows. Returns the marks written."""

    @abc.abstractmethod
    def get_mark(self, ledger_id: int) -> MarkInfo | None:
        """The mark of one ledger, or None."""

    @abc.abstractmethod
    def list_marked(self) -> list[int]:
        """Every marked ledger id."""

    @abc.abstractmethod
    def list_marks(self) -> dict[int, MarkInfo]:
        """ledger id -> MarkInfo for every mark."""

    @abc.abstractmethod
    def mark_replicated(self, ledger_id: int, version: int) -> bool:
        """Delete the mark if it is still at `version` (a newer one was marked again and stays), and release
        the lock. True if the mark is gone."""

    def unmark(self, ledger_id: int) -> None:
        """Delete a mark whatever its version (a ledger whose metadata is gone), and release the lock."""
        info = self.get_mark(ledger_id)
        if info is not None:
            self.mark_replicated(ledger_id, info.version)
        else:
            self.release_lock(ledger_id)

    # --- locks ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def try_lock(self, ledger_id: int) -> bool:
        """Take the ledger's lock for this driver's session; False if anyone holds it."""

    @abc.abstractmethod
    def release_lock(self, ledger_id: int) -> None:
        """Release the lock (nothing if not held)."""

    @abc.abstractmethod
    def lock_holder_of(self, ledger_id: int) -> str | None:
        """The holder text of the ledger's lock, or None when it is free."""

    @abc.abstractmethod
    def locked(self) -> set[int]:
        """The ledger ids whose lock is held."""

    # --- enable / disable -----------------------------------------------------------------------------
    @abc.abstractmethod
    def is_enabled(self, watch: Watch | None = None) -> bool:
        """Whether re-replication is enabled; `watch` is called once when the switch next changes."""

    @abc.abstractmethod
    def disable(self) -> None:
        """ReplicationUnavailableError if already disabled."""

    @abc.abstractmethod
    def enable(self) -> None:
        """ReplicationUnavailableError if already enabled."""

    # --- lostBookieRecoveryDelay ----------------------------------------------------------------------
    @abc.abstractmethod
    def init_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Store the delay unless one is stored already (the auditor does this at start)."""

    @abc.abstractmethod
    def get_lost_bookie_recovery_delay(self, watch: Watch | None = None) -> int | None:
        """The stored delay in seconds (None when absent); `watch` is called once when it is next written."""

    @abc.abstractmethod
    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Write the delay (ValueError outside 0 .. 2^31-1); a rewrite of the same value still fires watches."""

    def trigger_audit(self, default_delay: int = 0) -> None:
        """Java's triggerAudit: rewrite lostBookieRecoveryDelay with its own value; the auditor audits now."""
        value = self.get_lost_bookie_recovery_delay()
        self.set_lost_bookie_recovery_delay(value if value is not None else default_delay)

    # --- the periodic checks' last run ----------------------------------------------------------------
    @abc.abstractmethod
    def get_ctime(self, name: str) -> int:
        """Epoch ms of the last run of check `name` (one of CTIME_NAMES); -1 when never recorded."""

    @abc.abstractmethod
    def set_ctime(self, name: str, epoch_ms: int) -> None:
        """Record the last run of check `name`."""


class AuditorElection(abc.ABC):
    """One candidate (`bookie_id`) in the auditor election, or an observer (bookie_id None: current_auditor
    only). Votes live as long as the driver's session; the earliest living vote is the auditor."""

    bookie_id: str | None
    is_auditor: bool
    wake: threading.Event     # set when the outcome may have changed (a watch, a vote going, interrupt())

    @abc.abstractmethod
    def run_once(self) -> bool:
        """One round: vote if this candidate has no living vote; True if it is now the auditor. Either way
        a change that may alter the outcome (a vote ahead of ours, or our own, going) ends `wait_for_change`."""

    def wait_for_change(self, timeout: float) -> bool:
        """Block until the outcome may have changed, `interrupt()` is called, or `timeout` s pass; True unless
        it timed out. Each return consumes the change."""
        changed = self.wake.wait(timeout)
        self.wake.clear()
        return changed

    def interrupt(self) -> None:
        """End a `wait_for_change` now (shutdown, or a failed round to be run again)."""
        self.wake.set()

    @abc.abstractmethod
    def withdraw(self) -> None:
        """Delete this candidate's vote (a clean shutdown: another candidate takes over)."""

    @abc.abstractmethod
    def current_auditor(self) -> str | None:
        """The bookie id of the elected auditor, or None when nobody is."""
