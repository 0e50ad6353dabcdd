"""Round-robin striping of entries over an ensemble, ack sets and quorum coverage (spec §6.2, §6.4).

Pure functions of (ensemble size E, write quorum WQ, ack quorum AQ); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["write_set", "has_entry", "quorum_covered", "check_quorums"]


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    from bkfast.errors import BKIncorrectParameterException

    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise BKIncorrectParameterException(
            f"quorums must satisfy ensemble >= write quorum >= ack quorum >= 1, got E={ensemble_size} "
            f"WQ={write_quorum} AQ={ack_quorum}")


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Bookie indexes (into the ensemble covering `entry_id`) that store the entry, in send order."""
    base = entry_id % ensemble_size
    return [(base + w) % ensemble_size for w in range(write_quorum)]


def has_entry(entry_id: int, bookie_index: int, ensemble_size: int, write_quorum: int) -> bool:
    return (bookie_index - entry_id) % ensemble_size < write_quorum


def quorum_covered(ensemble_size: int, write_quorum: int, ack_quorum: int, unknown: Iterable[int]) -> bool:
    """Java's RRQuorumCoverageSet.checkCovered: every write-quorum window of the ensemble has fewer than
    AQ bookies whose answer is unknown (no reply, or a reply other than OK / no such entry / no such ledger)."""
    unknown = set(unknown)
    for start in range(ensemble_size):
        missing = sum(1 for w in range(write_quorum) if (start + w) % ensemble_size in unknown)
        if missing >= ack_quorum:
            return False
    return True
