"""AutoRecovery's metadata on a real etcd (bkfast.meta.etcd_underreplication): the keys and values it writes,
marks compared on mod revisions (and merged again after a concurrent writer), locks on the session's lease
(freed by a closed session and by a replaced lease), one-shot watches that lose nothing between the read and
the watch, and the auditor election across a closed session, a replaced lease and a withdrawal.

Each test has its own random scope on the session's etcd; each "driver" is an EtcdKV and an EtcdSession."""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid

import pytest

from bkfast.meta.etcd_kv import EtcdKV, range_end_of_prefix
from bkfast.meta.etcd_layout import EtcdKeys
from bkfast.meta.etcd_session import EtcdSession
from bkfast.meta.etcd_underreplication import EtcdAuditorElection, EtcdUnderReplicationManager
from bkfast.meta.underreplication import CHECK_ALL_LEDGERS_CTIME, ReplicationUnavailableError
from bkfast.meta.zk_underreplication import LAYOUT_DATA, parse_lock, parse_mark, parse_vote
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(shutil.which("etcd") is None and not os.path.exists("/usr/bin/etcd"),
                       reason="no etcd binary (scripts/install-system-deps.sh installs it)"),
]

TTL_S = 2
QUIET_S = 0.3          # how long a watch that must not fire again is given to misbehave


class Counter:
    """A watch that counts its calls."""

    def __init__(self):
        self.calls = 0
        self.event = threading.Event()

    def __call__(self):
        self.calls += 1
        self.event.set()


class Scope:
    """A fresh scope on the shared etcd; `driver()` opens a client and a session (closed at the end)."""

    def __init__(self, endpoint: str):
        host, _, port = endpoint.rpartition(":")
        self.endpoint = (host, int(port))
        self.name = f"/t{uuid.uuid4().hex}"
        self.keys = EtcdKeys(self.name)
        self.kv = EtcdKV([self.endpoint], timeout_s=5)
        self._opened: list = []

    def driver(self) -> tuple[EtcdKV, EtcdSession]:
        kv = EtcdKV([self.endpoint], timeout_s=5)
        session = EtcdSession(kv, TTL_S)
        self._opened.append(session)
        return kv, session

    def manager(self, session_of=None, **kwargs) -> EtcdUnderReplicationManager:
        kv, session = session_of if session_of is not None else self.driver()
        urm = EtcdUnderReplicationManager(kv, self.keys, session, **kwargs)
        self._opened.insert(0, urm)
        return urm

    def election(self, bookie_id: str | None, session_of=None) -> EtcdAuditorElection:
        kv, session = session_of if session_of is not None else self.driver()
        election = EtcdAuditorElection(kv, self.keys, session, bookie_id)
        self._opened.insert(0, election)
        return election

    def raw(self, *parts: str) -> bytes | None:
        found = self.kv.get(self.keys.ur(*parts))
        return None if found is None else found.value

    def close(self) -> None:
        for opened in self._opened:
            opened.close()
        self.kv.delete(self.keys.root, range_end_of_prefix(self.keys.root))


@pytest.fixture
def scope(etcd_server):
    opened = Scope(etcd_server.endpoint)
    try:
        yield opened
    finally:
        opened.close()


def replaced(session: EtcdSession, kv: EtcdKV) -> None:
    """Revoke the session's lease behind its back (as an expiry would) and wait for its replacement."""
    generation = session.generation
    kv.lease_revoke(session.lease)
    wait_until("the session to replace its lease", lambda: session.generation > generation, 10.0, 0.01)


# --- layout ---------------------------------------------------------------------------------------------------

def test_the_layout_is_created_once_and_a_foreign_one_refused(scope):
    urm = scope.manager()
    urm.ensure_layout()
    scope.manager().ensure_layout()                       # present and ours: accepted
    assert scope.raw("layout") == LAYOUT_DATA
    scope.kv.put(scope.keys.ur("layout"), b'type: "FANCY"\nversion: 2\n')
    with pytest.raises(ReplicationUnavailableError, match="only BASIC version 1"):
        scope.manager().ensure_layout()
    scope.kv.put(scope.keys.ur("layout"), b"\xff not text")
    with pytest.raises(ReplicationUnavailableError, match="unreadable"):
        scope.manager().ensure_layout()


# --- marks ----------------------------------------------------------------------------------------------------

def test_marks_accumulate_replicas_under_decimal_keys_versioned_by_mod_revision(scope):
    urm = scope.manager()
    assert urm.get_mark(5) is None and urm.list_marked() == [] and urm.list_marks() == {}
    assert urm.mark(5, ["a:1", "a:1"]) is True
    assert urm.mark(5, ["a:1"]) is False                  # nothing new: nothing written
    assert urm.mark(5, ["b:1", "a:1"]) is True
    raw = scope.kv.get(scope.keys.ur("ledgers", "00000000000000000005"))
    assert parse_mark(raw.value)[0] == ["a:1", "b:1"]
    info = urm.get_mark(5)
    assert info.replicas == ("a:1", "b:1") and info.ctime > 0 and info.version == raw.mod_revision
    urm.mark(2**63 - 1, ["c:1"])
    assert urm.list_marked() == [5, 2**63 - 1]
    assert urm.list_marks()[2**63 - 1].replicas == ("c:1",)
    scope.kv.put(scope.keys.ur("ledgers", "not-a-ledger"), b"")
    assert urm.list_marked() == [5, 2**63 - 1]            # a stray key is no mark


def test_a_mark_without_ctime_reports_minus_one(scope):
    urm = scope.manager(store_ctime=False)
    urm.mark(7, ["a:1"])
    assert urm.get_mark(7).ctime == -1
    assert parse_mark(scope.raw("ledgers", "%020d" % 7)) == (["a:1"], -1)


def test_mark_merges_a_mark_written_concurrently(scope, monkeypatch):
    urm, other = scope.manager(), scope.manager()
    real_txn, raced = urm.kv.txn, []

    def racing_txn(compare, success, failure=None, what="transaction"):
        if what.startswith("mark ledger") and not raced:
            raced.append(what)
            other.mark(5, ["x:1"])                        # lands between our read and our write
        return real_txn(compare, success, failure, what)

    monkeypatch.setattr(urm.kv, "txn", racing_txn)
    assert urm.mark(5, ["a:1"]) is True
    assert raced and urm.get_mark(5).replicas == ("x:1", "a:1")


def test_mark_many_writes_in_batches_and_counts_what_it_wrote(scope):
    urm = scope.manager()
    assert urm.mark_many([], ["a:1"]) == 0
    urm.mark_many(range(10), ["a:1"])                     # already listing a:1: not rewritten
    urm.mark_many(range(10, 20), ["z:1"])                 # lacking a:1: appended
    assert urm.mark_many([*range(300), 5, 5], ["a:1"]) == 290
    assert urm.list_marked() == list(range(300))
    marks = urm.list_marks()
    assert marks[15].replicas == ("z:1", "a:1") and marks[299].replicas == ("a:1",)


def test_mark_many_falls_back_to_one_by_one_after_a_concurrent_writer(scope, monkeypatch):
    urm, other = scope.manager(), scope.manager()
    real_txn = urm.kv.txn

    def racing_txn(compare, success, failure=None, what="transaction"):
        if what.startswith("mark 3 ledgers"):
            other.mark(2, ["x:1"])
        return real_txn(compare, success, failure, what)

    monkeypatch.setattr(urm.kv, "txn", racing_txn)
    assert urm.mark_many([1, 2, 3], ["c:1"]) == 3
    assert urm.get_mark(2).replicas == ("x:1", "c:1") and urm.list_marked() == [1, 2, 3]


def test_mark_replicated_deletes_only_at_the_version_seen_and_releases_the_lock(scope):
    urm = scope.manager()
    urm.mark(5, ["a:1"])
    seen = urm.get_mark(5)
    urm.mark(5, ["b:1"])
    assert urm.try_lock(5)
    assert urm.mark_replicated(5, seen.version) is False  # marked again since: the mark stays
    assert urm.get_mark(5) is not None and urm.locked() == set()
    assert urm.mark_replicated(5, urm.get_mark(5).version) is True
    assert urm.get_mark(5) is None
    assert urm.mark_replicated(5, 12345) is True          # already gone
    urm.mark(6, ["a:1"])
    assert urm.try_lock(6) and urm.try_lock(8)
    urm.unmark(6)
    urm.unmark(8)                                         # no mark: the lock is released all the same
    assert urm.list_marked() == [] and urm.locked() == set()


# --- locks ----------------------------------------------------------------------------------------------------

def test_a_lock_is_held_on_the_session_lease_until_released_or_the_session_closes(scope):
    mine, theirs = scope.manager(lock_holder="w1"), scope.manager(lock_holder="w2")
    assert mine.lock_holder_of(9) is None and mine.locked() == set()
    assert mine.try_lock(9) is True
    assert theirs.try_lock(9) is False
    assert mine.try_lock(9) is False                      # not re-entrant
    raw = scope.kv.get(scope.keys.ur("locks", "%020d" % 9))
    assert parse_lock(raw.value) == "w1" and raw.lease == mine.session.lease
    assert theirs.lock_holder_of(9) == "w1" and theirs.locked() == {9}
    theirs.release_lock(9)                                # not theirs: it stays
    assert mine.lock_holder_of(9) == "w1"
    mine.release_lock(9)
    mine.release_lock(9)                                  # not held: nothing
    assert theirs.lock_holder_of(9) is None
    assert theirs.try_lock(9) is True
    theirs.session.close()                                # the holder's session ends: its lease is revoked
    wait_until("the lock of a closed session to go", lambda: mine.lock_holder_of(9) is None, 10.0, 0.01)
    assert mine.try_lock(9) is True and mine.locked() == {9}


def test_a_replaced_lease_takes_the_locks_with_it(scope):
    mine, theirs = scope.manager(lock_holder="w1"), scope.manager(lock_holder="w2")
    assert mine.try_lock(4) and mine.try_lock(5)
    old_lease = mine.session.lease
    replaced(mine.session, scope.kv)
    assert mine.locked() == set()                         # gone, like a ZooKeeper session expiry
    assert theirs.try_lock(4) is True
    mine.release_lock(4)                                  # ours went with the old lease: theirs stays
    assert mine.lock_holder_of(4) == "w2"
    assert mine.try_lock(5) is True
    lease = scope.kv.get(scope.keys.ur("locks", "%020d" % 5)).lease
    assert lease == mine.session.lease != old_lease


# --- the switch -----------------------------------------------------------------------------------------------

def test_the_switch_refuses_repeats_and_its_watch_fires_once(scope):
    urm, other = scope.manager(), scope.manager()
    watch = Counter()
    assert urm.is_enabled(watch=watch) is True
    other.disable()
    assert watch.event.wait(5)
    assert scope.raw("disable") == b"" and scope.raw("layout") == LAYOUT_DATA
    other.enable()                                        # a second change: the watch is spent
    time.sleep(QUIET_S)
    assert watch.calls == 1
    other.disable()
    with pytest.raises(ReplicationUnavailableError, match="already disabled"):
        urm.disable()
    again = Counter()
    assert urm.is_enabled(watch=again) is False
    urm.enable()
    assert again.event.wait(5) and urm.is_enabled()
    with pytest.raises(ReplicationUnavailableError, match="already enabled"):
        urm.enable()


def test_one_watch_per_callable_and_nothing_lost_between_the_read_and_the_watch(scope, monkeypatch):
    urm, other = scope.manager(), scope.manager()
    same, different = Counter(), Counter()
    for _ in range(5):                                    # the worker's poll: one etcd watch, not five
        assert urm.is_enabled(watch=same)
    urm.is_enabled(watch=different)
    assert len(urm._watches._pending) == 2
    real_watch = urm.kv.watch

    def late_watch(*args, **kwargs):
        other.disable()
        return real_watch(*args, **kwargs)

    monkeypatch.setattr(urm.kv, "watch", late_watch)
    late = Counter()
    assert urm.is_enabled(watch=late) is True             # read enabled; disabled before the watch starts
    assert late.event.wait(5) and same.event.wait(5) and different.event.wait(5)
    time.sleep(QUIET_S)
    assert (same.calls, different.calls, late.calls) == (1, 1, 1)
    assert urm._watches._pending == {}


def test_close_cancels_the_watches_not_fired_yet(scope):
    urm, other = scope.manager(), scope.manager()
    watch = Counter()
    urm.is_enabled(watch=watch)
    urm.get_lost_bookie_recovery_delay(watch=watch)
    urm.close()
    urm.is_enabled(watch=watch)                           # closed: not registered
    other.disable()
    other.set_lost_bookie_recovery_delay(3)
    time.sleep(QUIET_S)
    assert watch.calls == 0


# --- lostBookieRecoveryDelay, ctimes ----------------------------------------------------------------------

def test_the_delay_is_initialised_once_and_a_rewrite_of_the_same_value_fires_the_watch_once(scope):
    urm, admin = scope.manager(), scope.manager()
    assert urm.get_lost_bookie_recovery_delay() is None
    with pytest.raises(ValueError):
        urm.init_lost_bookie_recovery_delay(-1)
    urm.init_lost_bookie_recovery_delay(15)
    urm.init_lost_bookie_recovery_delay(99)               # present: left alone
    assert scope.raw("lostBookieRecoveryDelay") == b"15"
    watch = Counter()
    assert urm.get_lost_bookie_recovery_delay(watch=watch) == 15
    admin.trigger_audit()                                 # the same value, written again
    assert watch.event.wait(5)
    admin.set_lost_bookie_recovery_delay(30)
    time.sleep(QUIET_S)
    assert watch.calls == 1
    again = Counter()
    assert urm.get_lost_bookie_recovery_delay(watch=again) == 30
    admin.set_lost_bookie_recovery_delay(0)
    assert again.event.wait(5) and urm.get_lost_bookie_recovery_delay() == 0
    with pytest.raises(ValueError):
        admin.set_lost_bookie_recovery_delay(2**31)


def test_check_ctimes_live_under_their_lowercase_keys_and_an_unknown_check_is_refused(scope):
    """(Absent until recorded, then read back: the driver contract suite, for etcd too.)"""
    urm = scope.manager()
    assert scope.raw("checkallledgersctime") is None
    urm.set_ctime(CHECK_ALL_LEDGERS_CTIME, 1700000000000)
    assert scope.raw("checkallledgersctime") is not None
    with pytest.raises(KeyError):
        urm.get_ctime("noSuchCheck")


# --- the election ---------------------------------------------------------------------------------------------

def test_each_candidate_votes_under_auditorelection_and_an_observer_cannot_run(scope):
    """(Who wins and how the role moves on a session's end or a step down: the driver contract suite, for
    etcd too.) Here: the votes' keys and values, and the observer's refusal."""
    first, second = scope.election("b1:3181", scope.driver()), scope.election("b2:3181", scope.driver())
    observer = scope.election(None)
    assert observer.current_auditor() is None
    with pytest.raises(ValueError, match="observer"):
        observer.run_once()
    assert first.run_once() is True and second.run_once() is False
    votes, _ = scope.kv.range(*EtcdKeys.children(scope.keys.ur("auditorelection")))
    assert sorted(parse_vote(v.value) for v in votes) == ["b1:3181", "b2:3181"]
    assert observer.current_auditor() == "b1:3181"


def test_a_candidate_whose_lease_was_replaced_votes_again_behind_the_others(scope):
    driver = scope.driver()
    first, second = scope.election("b1:3181", driver), scope.election("b2:3181")
    assert first.run_once() is True and second.run_once() is False
    old_vote = first.vote
    replaced(driver[1], scope.kv)
    assert first.wait_for_change(5) and second.wait_for_change(5)
    assert second.run_once() is True
    assert first.run_once() is False and not first.is_auditor
    assert first.vote != old_vote and scope.kv.get(first.vote).lease == driver[1].lease
    assert first.current_auditor() == "b2:3181"


def test_two_candidates_on_one_session_cast_two_votes(scope):
    driver = scope.driver()
    first, second = scope.election("b1:3181", driver), scope.election("b2:3181", driver)
    assert first.run_once() is True and second.run_once() is False
    assert first.vote != second.vote
    first.withdraw()
    assert second.wait_for_change(5) and second.run_once() is True
    first.close()
    second.close()
    second.withdraw()
    assert first.current_auditor() is None


def test_a_broken_watch_stream_fires_the_watch_and_wakes_the_election(scope):
    urm, election = scope.manager(), scope.election("b1:3181")
    watch = Counter()
    urm.is_enabled(watch=watch)
    assert election.run_once() is True
    (shot,) = urm._watches._pending.values()
    for handle in (shot.handle, election._watch):         # as when etcd restarts: the stream ends
        wait_until("the watch stream to open", lambda h=handle: h._stream is not None, 10.0, 0.01)
        handle._stream.shutdown()
    assert watch.event.wait(5) and election.wait_for_change(5)
    time.sleep(QUIET_S)
    assert watch.calls == 1 and urm.is_enabled()
    assert election.run_once() is True                    # a spurious wake costs one round
