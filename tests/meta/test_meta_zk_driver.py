"""ZooKeeper metadata driver: Java-compatible znodes, paths per layout, id generation (incl. the HOB scheme),
reserved names, session expiry and bounded failure when ZooKeeper is away. Real ZooKeeper throughout."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkfast.errors import BKZKException
from bkfast.ids import LedgerId
from bkfast.meta import MetadataError, bookie_service_info, init_new_cluster
from bkfast.meta import ledger_paths as lp
from bkfast.meta.ledger_metadata import LedgerState, parse_metadata
from bkfast.meta.zk_driver import ZkMetadataDriver
from tests import VECTORS_DIR
from tests.meta.test_meta_driver_contract import Events, make_md, wait_for
from tests.reactor_thread import call
from tests.zk_server import ZooKeeperServer, expire_session

VECTOR = json.loads((VECTORS_DIR / "zk_layout.json").read_text())
NODES = {n["path"]: n for n in VECTOR["nodes"]}


# --- paths (pure) -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lid, layout, path", [
    (1, "hierarchical", "00/0000/L0001"),
    (12345, "hierarchical", "00/0001/L2345"),
    (2147483646, "hierarchical", "21/4748/L3646"),
    (2147483647, "hierarchical", "000/0000/0021/4748/L3647"),
    (3000000000, "hierarchical", "000/0000/0030/0000/L0000"),
    (2**63 - 1, "hierarchical", "922/3372/0368/5477/L5807"),
    (1, "longhierarchical", "000/0000/0000/0000/L0001"),
    (5, "flat", "L0000000005"),
])
def test_ledger_paths_per_layout(lid, layout, path):
    assert lp.ledger_relative_path(LedgerId.classic(lid), layout) == path
    assert lp.ledger_path("/ledgers", LedgerId.classic(lid), layout) == "/ledgers/" + path
    parts = path.split("/")
    inverse = {2: None, 3: lp.id_from_short, 5: lp.id_from_long}.get(len(parts))
    assert (inverse(*parts) if inverse else lp.id_from_flat(path)) == lid


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**63 - 1), st.sampled_from(lp.LAYOUTS))
def test_every_path_maps_back_to_its_id(lid, layout):
    parts = lp.ledger_relative_path(LedgerId.classic(lid), layout).split("/")
    if layout == "flat":
        assert len(parts) == 1 and lp.id_from_flat(parts[0]) == lid
    elif len(parts) == 3:
        assert layout == "hierarchical" and lid < 2**31 - 1 and lp.id_from_short(*parts) == lid
    else:
        assert lid >= 2**31 - 1 or layout == "longhierarchical"
        assert lp.is_long_top(parts[0]) and lp.id_from_long(*parts) == lid


def test_scoped_paths_use_the_scope_hex_and_the_long_path_in_every_layout():
    for layout in lp.LAYOUTS:
        assert (lp.ledger_path("/bk/ledgers", LedgerId(0xAB, 12345), layout)
                == "/bk/ledgers/scoped/00000000000000ab/000/0000/0000/0001/L2345")
    assert lp.scope_root("/ledgers", 2**64 - 1) == "/ledgers/scoped/ffffffffffffffff"


def test_reserved_names_and_non_ledger_components():
    for name in ("available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long",
                 "scoped", "ID-0000000001"):
        assert lp.is_reserved(name)
    assert not lp.is_reserved("00") and not lp.is_reserved("000")
    assert lp.id_from_short("00", "0000", "X0001") is None
    assert lp.id_from_short("00", "000", "L0001") is None
    assert lp.id_from_long("000", "0000", "0000", "0000", "L001") is None
    with pytest.raises(MetadataError, match="ms"):
        lp.ledger_relative_path(LedgerId.classic(1), "ms")


# --- fixtures ---------------------------------------------------------------------------------------

@pytest.fixture
def cluster(zk_client, zookeeper_server):
    """(kazoo client chrooted to the test's tree, metadata URI of a fresh hierarchical cluster in it)."""
    init_new_cluster(zk_client, "/ledgers")
    return zk_client, f"zk+hierarchical://{zookeeper_server}{zk_client.chroot}/ledgers"


@pytest.fixture
def drivers():
    opened = []

    def make(uri, **kw):
        driver = ZkMetadataDriver(uri, **kw)
        opened.append(driver)
        call(driver.start)
        return driver
    yield make
    for driver in opened:
        call(driver.close)


def _tree(zk, path):
    """Every znode below `path` (inclusive): path -> (data, stat)."""
    out = {path: zk.get(path)}
    for child in zk.get_children(path):
        out.update(_tree(zk, f"{path.rstrip('/')}/{child}"))
    return out


# --- Java compatibility -----------------------------------------------------------------------------

def test_created_ledgers_look_like_the_java_tree(cluster, drivers):
    zk, uri = cluster
    driver = drivers(uri)
    md = {p: parse_metadata(bytes.fromhex(n["dataHex"])) for p, n in NODES.items()
          if re.search(r"/L\d{4}$", p)}
    closed = md["/ledgers/00/0000/L0000"]
    assert closed.c_token == 0 and closed.is_closed
    created = call(driver.create_ledger_metadata, LedgerId.classic(0), closed.replace(state=LedgerState.OPEN,
                                                                                     last_entry_id=-1, length=0))
    call(driver.write_ledger_metadata, LedgerId.classic(0), closed, created.version)   # Java closes it the same way
    call(driver.create_ledger_metadata, LedgerId.classic(1), md["/ledgers/00/0000/L0001"])
    call(driver.create_ledger_metadata, LedgerId.classic(3000000000), md["/ledgers/000/0000/0030/0000/L0000"])
    ours = _tree(zk, "/ledgers")
    for path, node in NODES.items():
        if path.startswith(("/ledgers/00", "/ledgers/000")):
            data, stat = ours[path]
            assert data.hex() == node["dataHex"], path
            assert (stat.version, stat.numChildren, bool(stat.ephemeralOwner)) == (
                node["version"], node["numChildren"], node["ephemeral"]), path
    ledger_nodes = {p for p in ours if p.startswith(("/ledgers/00", "/ledgers/000"))}
    assert ledger_nodes == {p for p in NODES if p.startswith(("/ledgers/00", "/ledgers/000"))}
    assert call(driver.list_ledgers) == [0, 1, 3000000000]


def test_listing_skips_reserved_and_foreign_znodes(cluster, drivers):
    zk, uri = cluster
    driver = drivers(uri)
    for lid in (3, 2**31 + 5):
        call(driver.create_ledger_metadata, LedgerId.classic(lid), make_md())
    call(driver.create_ledger_metadata, LedgerId(9, 4), make_md())
    call(driver.generate_ledger_id)
    for junk in ("/ledgers/cookies/127.0.0.1:3181",
                 "/ledgers/underreplication/ledgers/0000/0000/0000/0003/urL0000000003",
                 "/ledgers/idgen-long/HOB-0000000001", "/ledgers/ID-0000000007", "/ledgers/abc/0000/L0001",
                 "/ledgers/00/abcd/L0001", "/ledgers/00/0000/notaledger", "/ledgers/scoped/zz"):
        zk.create(junk, b"x", makepath=True)
    zk.create("/ledgers/available/127.0.0.1:3181", b"", ephemeral=True)
    assert call(driver.list_ledgers) == [3, 2**31 + 5]
    assert call(driver.list_ledgers, 9) == [4]


def test_id_generation_uses_idgen_and_deletes_its_nodes(cluster, drivers):
    zk, uri = cluster
    driver = drivers(uri)
    ids = [call(driver.generate_ledger_id) for _ in range(5)]
    assert ids == sorted(set(ids)) and ids[0] == 0
    wait_for(lambda: zk.get_children("/ledgers/idgen") == [], what="idgen children deleted")
    assert zk.exists("/ledgers/idgen-long") is None


def test_short_id_overflow_switches_to_the_hob_scheme(cluster, drivers):
    zk, uri = cluster
    driver = drivers(uri)
    driver.short_id_limit = 3                      # pretend Integer.MAX_VALUE is 3: the same code path
    ids = [call(driver.generate_ledger_id) for _ in range(12)]
    short = [i for i in ids if i < 2**32]
    assert short and all(i < 3 for i in short)
    long_ids = ids[len(short):]
    assert all(i >= 2**32 for i in long_ids) and ids == sorted(set(ids))
    assert long_ids[0] >> 32 == 1 and long_ids[-1] >> 32 >= 2          # low half overflowed into HOB 2
    assert all((i & 0xFFFFFFFF) < 3 for i in long_ids)
    assert zk.exists("/ledgers/idgen-long/HOB-0000000001") is not None
    # a new client finds idgen-long and goes straight to long ids
    other = drivers(uri)
    other.short_id_limit = 3
    assert call(other.generate_ledger_id) > ids[-1]


def test_long_ids_use_the_highest_hob_and_keep_three_directories(cluster, drivers):
    zk, uri = cluster
    for high in range(1, 6):
        zk.create(f"/ledgers/idgen-long/HOB-{high:010d}", b"", makepath=True)
    driver = drivers(uri)
    lid = call(driver.generate_ledger_id)
    assert lid >> 32 == 5 and lid & 0xFFFFFFFF < 2**31
    wait_for(lambda: sorted(zk.get_children("/ledgers/idgen-long")) == [f"HOB-{h:010d}" for h in (3, 4, 5)],
             what="old HOB directories removed")


@pytest.mark.parametrize("layout, path", [("flat", "/ledgers/L0000000005"),
                                          ("longhierarchical", "/ledgers/000/0000/0000/0000/L0005")])
def test_the_clusters_layout_decides_the_paths(zk_client, zookeeper_server, drivers, layout, path):
    init_new_cluster(zk_client, "/ledgers", layout=layout)
    driver = drivers(f"zk://{zookeeper_server}{zk_client.chroot}/ledgers")       # URI says hierarchical
    assert driver.layout == layout
    call(driver.create_ledger_metadata, LedgerId.classic(5), make_md())
    assert zk_client.exists(path) is not None
    assert call(driver.list_ledgers) == [5]
    assert call(driver.generate_ledger_id) == 0                   # ids come from idgen, not from the ledgers


def test_hosts_may_be_separated_by_semicolons(cluster, zookeeper_server, drivers):
    zk, _ = cluster
    driver = drivers(f"zk+hierarchical://{zookeeper_server};{zookeeper_server}{zk.chroot}/ledgers")
    assert call(driver.list_ledgers) == []


def test_uninitialized_cluster_is_refused_with_a_hint(zk_client, zookeeper_server):
    driver = ZkMetadataDriver(f"zk+hierarchical://{zookeeper_server}{zk_client.chroot}/nothing",
                              operation_timeout_s=5)
    try:
        with pytest.raises(MetadataError, match="bkfast shell initnewcluster"):
            call(driver.start)
    finally:
        call(driver.close)


def test_unreachable_zookeeper_fails_within_the_operation_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                   # nothing listens here once closed
    driver = ZkMetadataDriver(f"zk+hierarchical://127.0.0.1:{port}/ledgers", operation_timeout_s=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(BKZKException, match=f"127.0.0.1:{port}"):
            call(driver.start)
    finally:
        call(driver.close)
    assert time.monotonic() - started < 5


# --- sessions ---------------------------------------------------------------------------------------

def test_session_expiry_keeps_watches_and_registrations(cluster, drivers):
    zk, uri = cluster
    driver, writer = drivers(uri), drivers(uri)
    lid = LedgerId.classic(61)
    v0 = call(writer.create_ledger_metadata, lid, make_md())
    events, bookie_events = Events(), Events()
    call(driver.watch_ledger_metadata, lid, events)
    events.wait_len(1)
    call(driver.register_bookie, "127.0.0.1:3190", bookie_service_info("127.0.0.1", 3190))
    call(driver.watch_bookies, bookie_events)
    wait_for(lambda: bookie_events.items and "127.0.0.1:3190" in bookie_events.items[-1][0], what="bookie seen")
    old_session = driver.zk.client_id
    expire_session(driver.zk)
    assert driver.zk.client_id != old_session
    v1 = call(writer.write_ledger_metadata, lid, v0.metadata.closed(3, 30), 0)
    assert events.wait_len(2) == [v0, v1]                                  # the watch was re-armed
    wait_for(lambda: "127.0.0.1:3190" in call(writer.get_bookies), what="bookie re-registered after expiry")
    assert call(driver.read_ledger_metadata, lid) == v1                    # operations work on the new session
    wait_for(lambda: "127.0.0.1:3190" in bookie_events.items[-1][0], what="bookie watch after expiry")


def test_operations_wait_for_a_restarted_server_and_fail_after_the_bound(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ZooKeeperServer(tmp_path / "zk", port=port)
    server.start()
    driver = None
    try:
        from kazoo.client import KazooClient
        admin = KazooClient(hosts=server.connect_string)
        admin.start(timeout=15)
        init_new_cluster(admin, "/ledgers")
        admin.stop()
        admin.close()
        driver = ZkMetadataDriver(f"zk+hierarchical://{server.connect_string}/ledgers", zk_timeout_s=30,
                                  operation_timeout_s=2.0)
        call(driver.start)
        lid = LedgerId.classic(1)
        call(driver.create_ledger_metadata, lid, make_md())
        server.stop()
        started = time.monotonic()
        with pytest.raises(BKZKException, match="within 2 s"):
            call(driver.read_ledger_metadata, lid)
        assert time.monotonic() - started < 6
        driver.operation_timeout_s = 30.0
        result = {}
        reader = threading.Thread(target=lambda: result.setdefault("v", call(driver.read_ledger_metadata, lid)))
        reader.start()
        time.sleep(0.5)
        server.start()                                                       # same port, same data
        reader.join(40)
        assert result["v"].version == 0
    finally:
        if driver is not None:
            call(driver.close)
        server.stop()
