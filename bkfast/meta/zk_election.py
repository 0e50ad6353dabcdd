"""The auditor election of Java's AuditorElector / ZkLedgerAuditorManager (spec §5.6, §7.1-7.2): the
ZooKeeper implementation of `bkfast.meta.underreplication.AuditorElection`.

Owns the votes `<root>/underreplication/auditorelection/V_%010d` (EPHEMERAL_SEQUENTIAL, text
AuditorVoteFormat `bookieId: "<id>"\\n`). The lowest sequence number is the auditor; it writes its vote text
into `auditorelection` itself. The others watch the vote just before theirs and run the election again when
it goes. `run_once()` does one round and returns whether this instance won; the daemon thread calls it
again whenever `wait_for_change` returns. Blocking kazoo: never called in the reactor thread.
"""

from __future__ import annotations

import logging
import threading

from kazoo.exceptions import NodeExistsError, NoNodeError

from .underreplication import AuditorElection
from .zk_underreplication import BASE, encode_vote, parse_vote

__all__ = ["ZkAuditorElection", "ELECTION"]

log = logging.getLogger(__name__)

ELECTION = "auditorelection"
_PREFIX = "V_"


def _election_path(root: str) -> str:
    return f"{root.rstrip('/')}/{BASE}/{ELECTION}"


def _sorted_votes(children: list[str]) -> list[str]:
    votes = [c for c in children if c.startswith(_PREFIX) and c[len(_PREFIX):].isdigit()]
    return sorted(votes, key=lambda c: int(c[len(_PREFIX):]))


class ZkAuditorElection(AuditorElection):
    """One candidate (`bookie_id`) in the election, or an observer (None); `wake` is set when a watched vote
    changes."""

    def __init__(self, zk, root: str, bookie_id: str | None = None):
        self.zk = zk
        self.root = root
        self.bookie_id = bookie_id
        self.path = _election_path(root)
        self.vote: str | None = None          # our vote's name (V_0000000003)
        self.wake = threading.Event()
        self.is_auditor = False

    def current_auditor(self) -> str | None:
        """The bookie id in the lowest vote (Java's getCurrentAuditor), or None when nobody is elected."""
        try:
            votes = _sorted_votes(self.zk.get_children(self.path))
        except NoNodeError:
            return None
        for vote in votes:
            try:
                data, _ = self.zk.get(f"{self.path}/{vote}")
            except NoNodeError:
                continue
            return parse_vote(data)
        return None

    def _ensure_vote(self) -> None:
        if self.bookie_id is None:
            raise ValueError("an observer of the auditor election (no bookie id) cannot vote")
        if self.vote is not None and self.zk.exists(f"{self.path}/{self.vote}") is not None:
            return
        self.zk.ensure_path(f"{self.root.rstrip('/')}/{BASE}")
        try:
            self.zk.create(self.path, b"")
        except NodeExistsError:
            pass
        created = self.zk.create(f"{self.path}/{_PREFIX}", encode_vote(self.bookie_id), ephemeral=True,
                                 sequence=True)
        self.vote = created.rsplit("/", 1)[1]
        log.info("auditor election: %s voted %s", self.bookie_id, self.vote)

    def run_once(self) -> bool:
        """One round: (re)vote if needed; True if this candidate is now the auditor, else watch the
        predecessor (its deletion sets `wake`)."""
        self.wake.clear()
        self._ensure_vote()
        votes = _sorted_votes(self.zk.get_children(self.path))
        if self.vote not in votes:
            self.vote = None
            self.wake.set()
            return False
        index = votes.index(self.vote)
        if index == 0:
            if not self.is_auditor:
                assert self.bookie_id is not None, "_ensure_vote raised for an observer"
                self.zk.set(self.path, encode_vote(self.bookie_id))
                log.info("auditor election: %s is the auditor (vote %s)", self.bookie_id, self.vote)
            self.is_auditor = True
            # Watch our own vote: a session loss deletes it and we must stand again.
            if self.zk.exists(f"{self.path}/{self.vote}", watch=lambda _e: self.wake.set()) is None:
                self.wake.set()
            return True
        self.is_auditor = False
        predecessor = f"{self.path}/{votes[index - 1]}"
        if self.zk.exists(predecessor, watch=lambda _e: self.wake.set()) is None:
            self.wake.set()
        return False

    def withdraw(self) -> None:
        """Delete our vote (a clean shutdown)."""
        if self.vote is not None:
            try:
                self.zk.delete(f"{self.path}/{self.vote}")
            except NoNodeError:
                pass
        self.vote = None
        self.is_auditor = False
