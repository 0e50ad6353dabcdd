"""The under-replication znodes against Java 4.16.7's own output (tests/vectors/underreplication.json), on a
real ZooKeeper: bkfast's ZooKeeper implementation of the under-replication interfaces (bkfast.meta.
zk_underreplication, zk_election) writes the same bytes for the same inputs and reads every node Java wrote."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from bkfast.meta import underreplication as urm_api
from bkfast.meta import zk_underreplication as zk_urm
from bkfast.meta.underreplication import ReplicationUnavailableError
from bkfast.meta.zk_election import ZkAuditorElection
from bkfast.meta.zk_underreplication import ZkUnderReplicationManager
from tests import VECTORS_DIR

pytestmark = pytest.mark.zookeeper

VECTORS = json.loads((VECTORS_DIR / "underreplication.json").read_text())
EVENTS = {e["name"]: e for e in VECTORS["events"]}
ROOT = "/ledgers"


def _event_node(name):
    return EVENTS[name]["node"]


def _ctime_of(node) -> int:
    return zk_urm.parse_mark(bytes.fromhex(node["dataHex"]))[1]


def _manager(zk, ctime=None, **kw):
    return ZkUnderReplicationManager(zk, ROOT, clock_ms=(lambda: ctime) if ctime is not None else None,
                                     lock_holder="localhost", **kw)


def _data(zk, path):
    data, stat = zk.get(path)
    return data, stat


def test_layout_and_base_nodes_as_java_creates_them(zk_client):
    m = _manager(zk_client)
    m.ensure_layout()
    data, stat = _data(zk_client, f"{ROOT}/underreplication/LAYOUT")
    assert data.hex() == VECTORS["layout"]["dataHex"]
    first = VECTORS["snapshots"][0]
    for node in first["nodes"]:
        got, _ = _data(zk_client, node["path"])
        assert got.hex() == node["dataHex"], node["path"]
    assert sorted(zk_client.get_children(f"{ROOT}/underreplication")) == sorted(
        n["name"] for n in first["nodes"] if n["path"].count("/") == 3)
    # another layout is refused
    zk_client.set(f"{ROOT}/underreplication/LAYOUT", b'type: "OTHER"\nversion: 1\n')
    with pytest.raises(ReplicationUnavailableError, match="OTHER"):
        _manager(zk_client).ensure_layout()


def test_marks_accumulate_byte_identical(zk_client):
    first, second, dup = (_event_node(n) for n in ("mark_5_first", "mark_5_second", "mark_5_duplicate"))
    assert _manager(zk_client, _ctime_of(first)).mark(5, ["127.0.0.1:3181"]) is True
    data, stat = _data(zk_client, first["path"])
    assert data.hex() == first["dataHex"] and stat.version == first["version"] == 0
    assert _manager(zk_client, _ctime_of(second)).mark(5, ["127.0.0.1:3182"]) is True
    data, stat = _data(zk_client, second["path"])
    assert data.hex() == second["dataHex"] and stat.version == second["version"] == 1
    assert _manager(zk_client, 1).mark(5, ["127.0.0.1:3181"]) is False
    data, stat = _data(zk_client, dup["path"])
    assert data.hex() == dup["dataHex"] and stat.version == dup["version"]


@pytest.mark.parametrize("event,ledger,replicas,store_ctime", [
    ("mark_0x123456789", 0x123456789, ["127.0.0.1:3183"], True),
    ("mark_9_empty_replicas", 9, [], True),
    ("mark_7_no_ctime", 7, ["127.0.0.1:3181", "127.0.0.1:3182"], False),
])
def test_single_marks_byte_identical(zk_client, event, ledger, replicas, store_ctime):
    node = _event_node(event)
    m = _manager(zk_client, _ctime_of(node), store_ctime=store_ctime)
    m.mark(ledger, replicas)
    assert m.mark_path(ledger) == node["path"]
    data, stat = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"]
    assert stat.version == node["version"] and stat.ephemeralOwner == 0


def test_auditor_mark_of_42_accumulates_in_call_order(zk_client):
    node = _event_node("auditor_marked_42")
    m = _manager(zk_client, _ctime_of(node))
    m.mark(42, ["127.0.0.1:3185"])
    m.mark(42, ["127.0.0.1:3184"])
    data, stat = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"] and stat.version == node["version"]


def test_lock_is_ephemeral_and_byte_identical(zk_client):
    node = _event_node("lock_acquired")
    m = _manager(zk_client)
    m.mark(5, ["127.0.0.1:3181"])
    assert m.try_lock(5) is True
    assert m.try_lock(5) is False
    data, stat = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"]
    assert stat.ephemeralOwner != 0
    holder = VECTORS["api_results"]["getReplicationWorkerIdRereplicatingLedger_locked"]
    assert m.lock_holder_of(5) == "localhost" == holder
    assert m.locked() == {5}
    m.release_lock(5)
    assert m.lock_holder_of(5) is None


def test_disable_enable_and_their_errors(zk_client):
    m = _manager(zk_client)
    assert m.is_enabled()
    m.disable()
    node = _event_node("disable")
    data, stat = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"] == "" and stat.version == 0
    assert not m.is_enabled()
    with pytest.raises(ReplicationUnavailableError) as err:
        m.disable()
    assert VECTORS["api_results"]["disable_twice"].endswith(str(err.value))
    m.enable()
    assert zk_client.exists(EVENTS["enable"]["node_absent"]) is None
    with pytest.raises(ReplicationUnavailableError) as err:
        m.enable()
    assert VECTORS["api_results"]["enable_twice"].endswith(str(err.value))


@pytest.mark.parametrize("event,name,value", [
    ("setCheckAllLedgersCTime", urm_api.CHECK_ALL_LEDGERS_CTIME, 1700000000000),
    ("setPlacementPolicyCheckCTime", urm_api.PLACEMENT_POLICY_CHECK_CTIME, 1700000000001),
    ("setReplicasCheckCTime", urm_api.REPLICAS_CHECK_CTIME, 1700000000002),
])
def test_ctime_nodes_are_binary_protobuf(zk_client, event, name, value):
    m = _manager(zk_client)
    assert m.get_ctime(name) == -1
    m.set_ctime(name, value)
    node = _event_node(event)
    data, _ = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"]
    assert m.get_ctime(name) == value


def test_lost_bookie_recovery_delay_text(zk_client):
    m = _manager(zk_client)
    assert m.get_lost_bookie_recovery_delay() is None
    m.init_lost_bookie_recovery_delay(0)
    node = _event_node("lostBookieRecoveryDelay_initialized")
    assert _data(zk_client, node["path"])[0].hex() == node["dataHex"]
    m.init_lost_bookie_recovery_delay(99)          # present: left alone
    m.set_lost_bookie_recovery_delay(30)
    node = _event_node("lostBookieRecoveryDelay_30")
    data, stat = _data(zk_client, node["path"])
    assert data.hex() == node["dataHex"] and stat.version == node["version"]
    assert m.get_lost_bookie_recovery_delay() == VECTORS["api_results"]["admin_getLostBookieRecoveryDelay"]


def test_vote_and_election_node_byte_identical(zk_client, zookeeper_server):
    elector = ZkAuditorElection(zk_client, ROOT, "127.0.0.1:3181")
    assert elector.run_once() is True
    vote = _event_node("auditor_vote")
    data, stat = _data(zk_client, vote["path"])
    assert data.hex() == vote["dataHex"] and stat.ephemeralOwner != 0
    parent = _event_node("auditorelection_parent")
    data, stat = _data(zk_client, parent["path"])
    assert data.hex() == parent["dataHex"] and stat.version == parent["version"]
    assert ZkAuditorElection(zk_client, ROOT).current_auditor() == VECTORS["api_results"]["getCurrentAuditor"]


def test_election_failover_on_session_end(zk_client, zookeeper_server):
    chroot = zk_client.chroot
    others = [KazooClient(hosts=zookeeper_server + chroot, timeout=10.0) for _ in range(2)]
    for c in others:
        c.start(timeout=15)
    try:
        first = ZkAuditorElection(others[0], ROOT, "b1:3181")
        second = ZkAuditorElection(others[1], ROOT, "b2:3181")
        third = ZkAuditorElection(zk_client, ROOT, "b3:3181")
        assert first.run_once() is True
        assert second.run_once() is False and third.run_once() is False
        assert ZkAuditorElection(zk_client, ROOT).current_auditor() == "b1:3181"
        others[0].stop()                                 # the auditor's session ends: its vote goes
        assert second.wake.wait(10)
        assert third.run_once() is False                 # still behind b2
        assert second.run_once() is True
        assert ZkAuditorElection(zk_client, ROOT).current_auditor() == "b2:3181"
        second.withdraw()
        assert third.wake.wait(10) and third.run_once() is True
    finally:
        for c in others:
            c.stop()
            c.close()


def test_reads_every_node_java_wrote(zk_client):
    """Load Java's final tree as raw bytes, then read it back through bkfast."""
    for node in VECTORS["nodes"]:
        if node["path"].endswith("/V_0000000000"):
            continue                                     # a sequential vote cannot be created by name
        zk_client.create(node["path"], bytes.fromhex(node["dataHex"]), makepath=True,
                         ephemeral=node["ephemeral"])
    m = _manager(zk_client)
    m.ensure_layout()                                    # accepts Java's LAYOUT
    info = VECTORS["api_results"]["getLedgerUnreplicationInfo"]
    marks = m.list_marks()
    assert sorted(marks) == sorted([*map(int, info), 42])
    for lid, expected in info.items():
        mark = marks[int(lid)]
        assert list(mark.replicas) == expected["replicaList"] and mark.ctime == expected["ctime"]
    assert m.lock_holder_of(5) == "localhost"
    assert m.is_enabled()                                # Java's final tree has no disable node
    assert m.get_lost_bookie_recovery_delay() == 30
    decoded = {n["name"]: n["decoded"] for n in VECTORS["nodes"] if n.get("decoded")}
    check_of_node = {node: check for check, (node, _cls, _field) in zk_urm.CTIME_NODES.items()}
    for name, value in decoded.items():
        assert m.get_ctime(check_of_node[name]) == next(iter(value.values()))
    zk_client.create(f"{ROOT}/underreplication/auditorelection/V_", bytes.fromhex(
        next(n for n in VECTORS["nodes"] if n["name"] == "V_0000000000")["dataHex"]), sequence=True, ephemeral=True)
    assert ZkAuditorElection(zk_client, ROOT).current_auditor() == "127.0.0.1:3181"


def test_mark_replicated_deletes_only_the_version_it_saw_and_prunes(zk_client):
    m = _manager(zk_client)
    m.mark(0x123456789, ["a:1"])
    m.mark(7, ["a:1"])
    assert m.try_lock(0x123456789)
    seen = m.get_mark(0x123456789)
    m.mark(0x123456789, ["b:1"])                         # re-marked while being replicated
    assert m.mark_replicated(0x123456789, seen.version) is False
    assert m.get_mark(0x123456789).replicas == ("a:1", "b:1")
    assert m.lock_holder_of(0x123456789) is None         # the lock is released either way
    assert m.mark_replicated(0x123456789, m.get_mark(0x123456789).version) is True
    assert zk_client.exists(f"{ROOT}/underreplication/ledgers/0000/0001") is None
    assert zk_client.exists(f"{ROOT}/underreplication/ledgers/0000/0000/0000/0007") is not None
    assert m.list_marked() == [7]


def test_mark_many_writes_what_mark_writes(zk_client):
    """The batched auditor path gives the same nodes as one `mark` per ledger, also next to existing marks and
    left-over directories (whose transaction fails and falls back to `mark`)."""
    ids = list(range(1, 450)) + [0x123456789]
    batched = _manager(zk_client, 1795644908239)
    batched.mark(7, ["127.0.0.1:3181"])                                 # already marked: appended
    zk_client.ensure_path(batched.mark_path(300).rsplit("/", 1)[0])     # a directory without its mark
    assert batched.mark_many(ids, ["127.0.0.1:3182"]) == len(ids)
    assert sorted(batched.list_marked()) == sorted(ids)
    expected = _event_node("mark_5_second")
    data, stat = _data(zk_client, batched.mark_path(7))
    assert data.hex() == expected["dataHex"] and stat.version == 1     # Java's bytes for the same two marks
    for lid in (1, 300, 449, 0x123456789):
        data, stat = _data(zk_client, batched.mark_path(lid))
        assert data == b'replica: "127.0.0.1:3182"\nctime: 1795644908239\n' and stat.version == 0
    assert batched.mark_many([7, 8], ["127.0.0.1:3182"]) == 0           # nothing new: nothing written
