"""Cluster init / metaformat / LAYOUT against a real ZooKeeper and the Java 4.16.7 tree (zk_layout.json)."""

import json
import re
import uuid

import pytest

from bkfast.meta import (
    ClusterExistsError,
    MetadataError,
    format_layout,
    format_metadata,
    init_new_cluster,
    parse_layout,
    parse_metadata_service_uri,
    read_instance_id,
    read_layout,
    zk_layout,
)
from tests import VECTORS_DIR

VECTOR = json.loads((VECTORS_DIR / "zk_layout.json").read_text())
NODES = {n["path"]: n for n in VECTOR["nodes"]}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
INIT_NODES = ["/ledgers", "/ledgers/available", "/ledgers/available/readonly", "/ledgers/LAYOUT"]


@pytest.mark.zookeeper
def test_init_matches_java_tree(zk_client):
    iid = init_new_cluster(zk_client, "/ledgers")
    assert UUID_RE.match(iid)
    for path in INIT_NODES:
        data, stat = zk_client.get(path)
        assert data.hex() == NODES[path]["dataHex"], path
        assert stat.ephemeralOwner == 0
    data, _ = zk_client.get("/ledgers/INSTANCEID")
    assert data.decode() == iid and len(data) == NODES["/ledgers/INSTANCEID"]["dataLength"]
    # initnewcluster creates exactly these; cookies/idgen come later (first cookie, first ledger id)
    assert sorted(zk_client.get_children("/ledgers")) == ["INSTANCEID", "LAYOUT", "available"]
    assert zk_client.get_children("/ledgers/available") == ["readonly"]
    assert read_instance_id(zk_client, "/ledgers") == iid
    assert read_layout(zk_client, "/ledgers").name == "hierarchical"


@pytest.mark.zookeeper
def test_init_refuses_existing_cluster(zk_client):
    init_new_cluster(zk_client, "/ledgers", instance_id="x")
    with pytest.raises(ClusterExistsError, match="already exists"):
        init_new_cluster(zk_client, "/ledgers")
    assert zk_client.get("/ledgers/INSTANCEID")[0] == b"x"


@pytest.mark.zookeeper
def test_ensure_cluster_inits_once(zk_client):
    zk_layout.ensure_cluster(zk_client, "/ledgers")
    iid = read_instance_id(zk_client, "/ledgers")
    zk_layout.ensure_cluster(zk_client, "/ledgers")          # found: left as it is
    assert read_instance_id(zk_client, "/ledgers") == iid
    assert read_layout(zk_client, "/ledgers").name == "hierarchical"


@pytest.mark.zookeeper
def test_init_nested_root_and_other_layouts(zk_client):
    init_new_cluster(zk_client, "/a/b/ledgers", layout="longhierarchical")
    assert read_layout(zk_client, "/a/b/ledgers").manager_factory_class.endswith("LongHierarchicalLedgerManagerFactory")
    with pytest.raises(MetadataError, match="unknown ledger layout"):
        init_new_cluster(zk_client, "/c", layout="nope")
    assert zk_client.exists("/c") is None


@pytest.mark.zookeeper
def test_metaformat(zk_client):
    old = init_new_cluster(zk_client, "/ledgers")
    zk_client.create("/ledgers/00/0000/L0001", b"meta", makepath=True)
    with pytest.raises(ClusterExistsError, match="--force"):
        format_metadata(zk_client, "/ledgers", force=False)
    new = format_metadata(zk_client, "/ledgers", force=True)
    assert new != old and zk_client.exists("/ledgers/00") is None
    assert sorted(zk_client.get_children("/ledgers")) == ["INSTANCEID", "LAYOUT", "available"]
    # on an empty root, metaformat without --force is just init
    format_metadata(zk_client, "/other", force=False)
    assert read_layout(zk_client, "/other").name == "hierarchical"


def test_parse_layout():
    lay = parse_layout(bytes.fromhex(NODES["/ledgers/LAYOUT"]["dataHex"]))
    assert (lay.name, lay.manager_version, lay.layout_format_version) == ("hierarchical", 1, 2)
    assert format_layout("hierarchical") == bytes.fromhex(NODES["/ledgers/LAYOUT"]["dataHex"])
    with pytest.raises(MetadataError, match="unknown ledger manager factory 'com.example.Foo'"):
        parse_layout(b"2\ncom.example.Foo:1")
    with pytest.raises(MetadataError, match="format version 3"):
        parse_layout(b"3\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1")
    with pytest.raises(MetadataError, match="invalid LAYOUT"):
        parse_layout(b"2\n")


@pytest.mark.zookeeper
def test_read_layout_missing(zk_client):
    with pytest.raises(MetadataError, match="not initialized"):
        read_layout(zk_client, "/ledgers")
    assert read_instance_id(zk_client, "/ledgers") is None
    zk_client.create("/ledgers/LAYOUT", b"2\norg.example.CustomLedgerManagerFactory:1", makepath=True)
    with pytest.raises(MetadataError, match="unknown ledger manager factory 'org.example.CustomLedgerManagerFactory'"):
        read_layout(zk_client, "/ledgers")


def test_parse_metadata_service_uri():
    assert parse_metadata_service_uri("zk+hierarchical://h1:2181;h2:2182/ledgers") == (
        "h1:2181,h2:2182", "/ledgers", "hierarchical")
    assert parse_metadata_service_uri("zk://h:1/x/y") == ("h:1", "/x/y", "hierarchical")
    assert parse_metadata_service_uri("zk+null://h:1/ledgers")[2] == "hierarchical"
    with pytest.raises(MetadataError, match="unsupported"):
        parse_metadata_service_uri("etcd://h:1/x")


@pytest.mark.zookeeper
def test_uuid_instance_ids_differ(zk_client):
    a = init_new_cluster(zk_client, "/r1")
    b = init_new_cluster(zk_client, "/r2")
    assert a != b and uuid.UUID(a).version == 4
