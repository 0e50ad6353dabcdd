"""The MetadataDriver contract, run against every driver: ZooKeeper and etcd (real servers) and embedded (RocksDB).

Where etcd differs by design it is said in the test: ledger ids follow Java's etcd bucket scheme
(docs/etcd.md), not ZooKeeper's sequential ids."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from bkfast.digests import DigestType
from bkfast.errors import (
    BKLedgerExistException,
    BKMetadataVersionException,
    BKNoSuchLedgerExistsException,
)
from bkfast.ids import LedgerId
from bkfast.meta import bookie_service_info, init_new_cluster
from bkfast.meta.driver import Versioned
from bkfast.meta.etcd_cluster import init_new_etcd_cluster
from bkfast.meta.etcd_driver import etcd_client_from_conf
from bkfast.meta.factory import open_metadata_driver
from bkfast.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkfast.meta.underreplication import CTIME_NAMES, ReplicationUnavailableError
from tests.reactor_thread import call

BOOKIES = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


def make_md(**changes) -> LedgerMetadata:
    md = LedgerMetadata(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, ensembles=((0, BOOKIES),),
                        digest_type=DigestType.CRC32C, password=b"secret", ctime=1700000000000,
                        custom_metadata={"application": b"contract"})
    return md.replace(**changes)


def wait_for(cond, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


class Events:
    """A listener that records its calls (made in the reactor thread) for the test thread."""

    def __init__(self):
        self.items = []
        self.threads = set()
        self._lock = threading.Lock()

    def __call__(self, *args):
        with self._lock:
            self.threads.add(threading.current_thread().name)
            self.items.append(args[0] if len(args) == 1 else args)

    def wait_len(self, n, timeout=15.0):
        wait_for(lambda: len(self.items) >= n, timeout, f"{n} listener calls (got {self.items!r})")
        return self.items


@pytest.fixture(params=["zk", "etcd", "embedded"])
def kind(request):
    return request.param


@pytest.fixture
def make_driver(request, kind, tmp_path):
    """Factory of started drivers on one fresh cluster / store; all closed after the test."""
    opened = []
    if kind == "zk":
        zk_client = request.getfixturevalue("zk_client")
        server = request.getfixturevalue("zookeeper_server")
        init_new_cluster(zk_client, "/ledgers")
        uri = f"zk+hierarchical://{server}{zk_client.chroot}/ledgers"
    elif kind == "etcd":
        server = request.getfixturevalue("etcd_server")
        scope = f"/contract-{uuid.uuid4().hex[:12]}"
        kv = etcd_client_from_conf(f"etcd://{server.endpoint}{scope}")
        init_new_etcd_cluster(kv, scope)
        kv.close()
        uri = f"etcd://{server.endpoint}{scope}"
    else:
        uri = f"embedded://{tmp_path}/meta"

    def make():
        driver = open_metadata_driver(uri)
        call(driver.start)
        opened.append(driver)
        return driver
    yield make
    for driver in opened:
        call(driver.close)


@pytest.fixture
def driver(make_driver):
    return make_driver()


def test_generated_ids_are_unique_and_increasing(driver, kind):
    ids = [call(driver.generate_ledger_id) for _ in range(20)]
    if kind == "etcd":
        # Java's Etcd64bitIdGenerator: 128 buckets taken in turn, bucket << 56 | the bucket's put count.
        buckets = [i >> 56 for i in ids]
        assert all(b == (buckets[0] + n) % 128 for n, b in enumerate(buckets))
        assert all(i & (2**56 - 1) == 1 for i in ids) and len(set(ids)) == 20
        return
    assert all(isinstance(i, int) and 0 <= i < 2**31 - 1 for i in ids)
    assert ids == sorted(set(ids))


def test_create_then_read_returns_the_metadata_at_version_0_with_a_ctoken(driver):
    lid = LedgerId.classic(call(driver.generate_ledger_id))
    created = call(driver.create_ledger_metadata, lid, make_md())
    assert created.version == 0 and created.metadata.c_token != 0
    assert created.metadata.replace(c_token=0) == make_md()
    assert call(driver.read_ledger_metadata, lid) == created


def test_create_of_an_existing_ledger_fails_unless_the_ctoken_is_ours(driver):
    lid = LedgerId.classic(7)
    first = call(driver.create_ledger_metadata, lid, make_md(c_token=1234))
    again = call(driver.create_ledger_metadata, lid, make_md(c_token=1234))       # a retried create: success
    assert again == first
    with pytest.raises(BKLedgerExistException, match="ledger 7"):
        call(driver.create_ledger_metadata, lid, make_md(c_token=999))
    with pytest.raises(BKLedgerExistException):
        call(driver.create_ledger_metadata, lid, make_md())                        # fresh random token


def test_write_is_compare_and_set_on_the_version(driver):
    lid = LedgerId.classic(11)
    v0 = call(driver.create_ledger_metadata, lid, make_md())
    closed = v0.metadata.closed(last_entry_id=9, length=1000)
    v1 = call(driver.write_ledger_metadata, lid, closed, v0.version)
    assert v1.version == v0.version + 1 and v1.metadata == closed
    with pytest.raises(BKMetadataVersionException, match="ledger 11"):
        call(driver.write_ledger_metadata, lid, v0.metadata.replace(state=LedgerState.IN_RECOVERY), v0.version)
    read = call(driver.read_ledger_metadata, lid)
    assert read == v1 and read.metadata.is_closed and read.metadata.last_entry_id == 9


def test_missing_ledger_is_reported_by_read_write_and_remove(driver):
    lid = LedgerId.classic(424242)
    with pytest.raises(BKNoSuchLedgerExistsException, match="424242"):
        call(driver.read_ledger_metadata, lid)
    with pytest.raises(BKNoSuchLedgerExistsException):
        call(driver.write_ledger_metadata, lid, make_md(), 0)
    with pytest.raises(BKNoSuchLedgerExistsException):
        call(driver.remove_ledger_metadata, lid)


def test_remove_checks_the_version_then_deletes(driver):
    lid = LedgerId.classic(12)
    v0 = call(driver.create_ledger_metadata, lid, make_md())
    with pytest.raises(BKMetadataVersionException):
        call(driver.remove_ledger_metadata, lid, v0.version + 5)
    call(driver.remove_ledger_metadata, lid, v0.version)
    with pytest.raises(BKNoSuchLedgerExistsException):
        call(driver.read_ledger_metadata, lid)
    assert 12 not in call(driver.list_ledgers)
    call(driver.create_ledger_metadata, lid, make_md())       # the id can be used again
    call(driver.remove_ledger_metadata, lid)                  # -1: any version


SCOPE0 = [0, 5, 9999, 2**31 - 2, 2**31 - 1, 3_000_000_000, 2**63 - 1]
SCOPED = {7: [1, 99, 2**40], 2**64 - 1: [3]}


def test_list_ledgers_per_scope_including_long_and_scoped_ids(driver):
    for lid in SCOPE0:
        call(driver.create_ledger_metadata, LedgerId.classic(lid), make_md())
    for scope, ids in SCOPED.items():
        for lid in ids:
            call(driver.create_ledger_metadata, LedgerId(scope, lid), make_md())
    call(driver.generate_ledger_id)                           # id generation leaves nothing that lists
    assert call(driver.list_ledgers) == SCOPE0
    assert call(driver.list_ledgers, 0) == SCOPE0
    for scope, ids in SCOPED.items():
        assert call(driver.list_ledgers, scope) == sorted(ids)
    assert call(driver.list_ledgers, 8) == []
    # scoped and classic ids with the same number are different ledgers
    assert call(driver.read_ledger_metadata, LedgerId(7, 99)).version == 0
    with pytest.raises(BKNoSuchLedgerExistsException):
        call(driver.read_ledger_metadata, LedgerId.classic(99))


def test_ledgers_exist_answers_the_subset_with_metadata(driver):
    present = [LedgerId.classic(1), LedgerId.classic(3_000_000_000), LedgerId(5, 1)]
    for lid in present:
        call(driver.create_ledger_metadata, lid, make_md())
    asked = present + [LedgerId.classic(2), LedgerId(5, 2), LedgerId(6, 1)]
    assert call(driver.ledgers_exist, asked) == set(present)
    assert call(driver.ledgers_exist, []) == set()


def test_read_many_returns_the_metadata_of_those_that_exist(driver):
    present = [LedgerId.classic(1), LedgerId.classic(3_000_000_000), LedgerId(5, 1)]
    for n, lid in enumerate(present):
        call(driver.create_ledger_metadata, lid, make_md(custom_metadata={"n": bytes([n])}))
    call(driver.write_ledger_metadata, present[0], make_md(state=LedgerState.CLOSED, last_entry_id=9, length=90), 0)
    found = call(driver.read_many_ledger_metadata, present + [LedgerId.classic(2), LedgerId(6, 1)])
    assert set(found) == set(present)
    for lid in present:
        assert found[lid] == call(driver.read_ledger_metadata, lid)
    assert found[present[0]].version == 1 and found[present[0]].metadata.last_entry_id == 9
    assert call(driver.read_many_ledger_metadata, []) == {}


def test_metadata_format_2_is_written_and_read_back_as_format_2(driver):
    lid = LedgerId.classic(21)
    md = make_md(metadata_format_version=2)
    created = call(driver.create_ledger_metadata, lid, md)
    assert created.metadata.c_token == 0                      # v2 has no cToken
    read = call(driver.read_ledger_metadata, lid)
    assert read.metadata == md and read.metadata.metadata_format_version == 2


def test_watch_delivers_current_then_each_change_then_none_in_the_reactor_thread(driver):
    lid = LedgerId.classic(31)
    v0 = call(driver.create_ledger_metadata, lid, make_md())
    events = Events()
    cancel = call(driver.watch_ledger_metadata, lid, events)
    assert events.wait_len(1)[0] == v0
    v1 = call(driver.write_ledger_metadata, lid, v0.metadata.replace(state=LedgerState.IN_RECOVERY), 0)
    events.wait_len(2)
    v2 = call(driver.write_ledger_metadata, lid, v1.metadata.closed(4, 40), 1)
    events.wait_len(3)
    call(driver.remove_ledger_metadata, lid)
    assert events.wait_len(4) == [v0, v1, v2, None]
    assert events.threads == {call(lambda: threading.current_thread().name)}        # the reactor's thread
    cancel()


def test_cancelled_watch_gets_nothing_more(driver):
    lid = LedgerId.classic(32)
    v0 = call(driver.create_ledger_metadata, lid, make_md())
    events = Events()
    cancel = call(driver.watch_ledger_metadata, lid, events)
    events.wait_len(1)
    call(cancel)
    call(driver.write_ledger_metadata, lid, v0.metadata.closed(0, 1), 0)
    other = Events()                                           # a later watch proves the change was visible
    call(driver.watch_ledger_metadata, lid, other)
    assert other.wait_len(1)[0].version == 1
    time.sleep(0.3)
    assert events.items == [v0]


def test_watch_of_a_missing_ledger_reports_none(driver):
    events = Events()
    call(driver.watch_ledger_metadata, LedgerId.classic(77777), events)
    assert events.wait_len(1) == [None]


def test_second_driver_sees_ledgers_and_notifications_of_the_first(make_driver):
    first, second = make_driver(), make_driver()
    lid = LedgerId(3, 41)
    v0 = call(first.create_ledger_metadata, lid, make_md())
    assert call(second.read_ledger_metadata, lid) == v0
    events = Events()
    call(second.watch_ledger_metadata, lid, events)
    events.wait_len(1)
    v1 = call(first.write_ledger_metadata, lid, v0.metadata.closed(1, 2), 0)
    assert events.wait_len(2) == [v0, v1]
    assert call(second.list_ledgers, 3) == [41]


def test_bookies_register_watch_and_unregister(make_driver):
    bookie_side, client_side = make_driver(), make_driver()
    events = Events()
    call(client_side.watch_bookies, events)
    assert events.wait_len(1)[0] == ({}, {})
    call(bookie_side.register_bookie, "127.0.0.1:3181", bookie_service_info("127.0.0.1", 3181))
    call(bookie_side.register_bookie, "127.0.0.1:3182", b"")                      # legacy: empty data
    call(bookie_side.register_bookie, "bk3.example:4000",
         bookie_service_info("10.0.0.3", 4000, {"rack": "r1"}, scope_ids=False), read_only=True)
    wait_for(lambda: events.items[-1] != ({}, {}) and len(events.items[-1][0]) == 2 and events.items[-1][1],
             what="3 bookies in the watch")
    writable, read_only = events.items[-1]
    assert writable == call(client_side.get_bookies) and read_only == call(client_side.get_bookies, True)
    b1, b2, b3 = writable["127.0.0.1:3181"], writable["127.0.0.1:3182"], read_only["bk3.example:4000"]
    assert (b1.host, b1.port, b1.supports_scope_ids, b1.read_only) == ("127.0.0.1", 3181, True, False)
    assert (b2.host, b2.port, b2.properties, b2.supports_scope_ids) == ("127.0.0.1", 3182, {}, False)
    assert (b3.host, b3.port, b3.properties, b3.read_only) == ("10.0.0.3", 4000, {"rack": "r1"}, True)
    call(bookie_side.unregister_bookie, "127.0.0.1:3181")
    wait_for(lambda: set(events.items[-1][0]) == {"127.0.0.1:3182"}, what="3181 gone from the watch")
    call(bookie_side.close)                                   # registrations are ephemeral
    wait_for(lambda: events.items[-1] == ({}, {}), what="all bookies gone after close")
    assert call(client_side.get_bookies) == {} and call(client_side.get_bookies, True) == {}


def test_bookie_moves_between_writable_and_read_only(driver):
    info = bookie_service_info("127.0.0.1", 3185)
    call(driver.register_bookie, "127.0.0.1:3185", info)
    assert list(call(driver.get_bookies)) == ["127.0.0.1:3185"]
    call(driver.register_bookie, "127.0.0.1:3185", info, read_only=True)
    assert call(driver.get_bookies) == {}
    assert call(driver.get_bookies, True)["127.0.0.1:3185"].read_only


def test_versioned_is_what_the_interface_promises(driver):
    lid = LedgerId.classic(51)
    value = call(driver.create_ledger_metadata, lid, make_md())
    assert isinstance(value, Versioned) and isinstance(value.metadata, LedgerMetadata)


# --- AutoRecovery's metadata: bkfast.meta.underreplication, served by both drivers ------------------------

def test_marks_accumulate_replicas_and_delete_only_at_the_version_seen(driver):
    urm = driver.under_replication(lock_holder="worker-1")
    urm.ensure_layout()
    assert urm.list_marked() == [] and urm.get_mark(5) is None
    assert urm.mark(5, ["a:1"]) is True
    assert urm.mark(5, ["a:1"]) is False                      # nothing new: nothing written
    assert urm.mark(5, ["b:1", "a:1"]) is True
    seen = urm.get_mark(5)
    assert seen.replicas == ("a:1", "b:1") and seen.ctime > 0
    assert urm.mark_many([6, 0x123456789, 5], ["c:1"]) == 3
    assert sorted(urm.list_marked()) == [5, 6, 0x123456789]
    assert set(urm.list_marks()) == {5, 6, 0x123456789}
    assert urm.list_marks()[5].replicas == ("a:1", "b:1", "c:1")
    assert urm.mark_replicated(5, seen.version) is False      # marked again since: the mark stays
    assert urm.mark_replicated(5, urm.get_mark(5).version) is True
    urm.unmark(6)
    assert urm.list_marked() == [0x123456789]


def test_a_mark_without_ctime_reports_minus_one(driver):
    urm = driver.under_replication(store_ctime=False)
    urm.mark(7, ["a:1"])
    assert urm.get_mark(7).ctime == -1


def test_a_held_lock_refuses_a_second_worker_until_released_or_its_session_ends(make_driver):
    first, second = make_driver(), make_driver()
    mine, theirs = first.under_replication(lock_holder="w1"), second.under_replication(lock_holder="w2")
    mine.mark(9, ["a:1"])
    assert mine.try_lock(9) is True
    assert theirs.try_lock(9) is False
    assert mine.try_lock(9) is False                          # a lock is not re-entrant either
    assert theirs.lock_holder_of(9) == "w1" and theirs.locked() == {9}
    mine.release_lock(9)
    assert theirs.lock_holder_of(9) is None
    assert theirs.try_lock(9) is True
    call(second.close)                                        # the holder's session ends
    wait_for(lambda: mine.lock_holder_of(9) is None, what="the lock of a closed driver to go")
    assert mine.try_lock(9) is True
    assert mine.mark_replicated(9, mine.get_mark(9).version) is True
    assert mine.locked() == set()                             # resolving a mark releases its lock


def test_the_switch_refuses_repeats_and_fires_its_watch_once(make_driver):
    urm, other = make_driver().under_replication(), make_driver().under_replication()
    fired = threading.Event()
    assert urm.is_enabled(watch=fired.set) is True
    other.disable()
    assert fired.wait(15)
    assert urm.is_enabled() is False
    with pytest.raises(ReplicationUnavailableError, match="already disabled"):
        urm.disable()
    fired.clear()
    assert urm.is_enabled(watch=fired.set) is False
    other.enable()
    assert fired.wait(15) and urm.is_enabled()
    with pytest.raises(ReplicationUnavailableError, match="already enabled"):
        urm.enable()


def test_lost_bookie_recovery_delay_is_initialised_once_and_watched(make_driver):
    urm, admin = make_driver().under_replication(), make_driver().under_replication()
    assert urm.get_lost_bookie_recovery_delay() is None
    urm.init_lost_bookie_recovery_delay(15)
    urm.init_lost_bookie_recovery_delay(99)                   # present: left alone
    fired = threading.Event()
    assert urm.get_lost_bookie_recovery_delay(watch=fired.set) == 15
    admin.trigger_audit()                                     # the same value, written again: still a change
    assert fired.wait(15)
    fired.clear()
    assert urm.get_lost_bookie_recovery_delay(watch=fired.set) == 15
    admin.set_lost_bookie_recovery_delay(30)
    assert fired.wait(15) and urm.get_lost_bookie_recovery_delay() == 30
    with pytest.raises(ValueError):
        admin.set_lost_bookie_recovery_delay(2**31)


def test_check_ctimes_are_absent_until_recorded(driver):
    urm = driver.under_replication()
    for name, value in zip(CTIME_NAMES, (1700000000000, 1700000000001, 1700000000002), strict=True):
        assert urm.get_ctime(name) == -1
        urm.set_ctime(name, value)
        assert urm.get_ctime(name) == value


def test_the_earliest_living_candidate_is_the_auditor(make_driver):
    drivers = [make_driver() for _ in range(3)]
    first, second, third = (d.auditor_election(f"b{i}:3181") for i, d in enumerate(drivers, 1))
    observer = drivers[2].auditor_election()
    assert observer.current_auditor() is None
    assert first.run_once() is True and first.is_auditor
    assert second.run_once() is False and third.run_once() is False
    assert observer.current_auditor() == "b1:3181"
    call(drivers[0].close)                                    # the auditor's session ends: its vote goes
    assert second.wait_for_change(15)
    assert second.run_once() is True and third.run_once() is False
    assert observer.current_auditor() == "b2:3181"
    second.withdraw()                                         # a clean step down
    assert third.wait_for_change(15) and third.run_once() is True
    assert observer.current_auditor() == "b3:3181"
    third.interrupt()
    assert third.wait_for_change(0.1) is True


def test_list_scopes_names_the_scopes_holding_ledgers(driver):
    assert call(driver.list_scopes) == []
    for scope in (7, 0x10000):
        call(driver.create_ledger_metadata, LedgerId(scope, 1), make_md())
    call(driver.create_ledger_metadata, LedgerId(0, 1), make_md())
    assert call(driver.list_scopes) == [7, 0x10000]
