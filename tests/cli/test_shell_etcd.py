"""`bkfast shell` and the admin HTTP API on a cluster whose metadata is in a real etcd: initnewcluster,
whatisinstanceid, metaformat and nukeexistingcluster on a fresh scope; listbookies, listledgers, clusterinfo,
the AutoRecovery switch and delay, recover of a killed bookie, and the HTTP bookie list and cluster info on a
running 3-bookie cluster. Every command is a real `bkfast` process."""

from __future__ import annotations

import json
import uuid

import pytest

from bkfast import BookKeeper
from bkfast.meta.etcd_layout import EtcdKeys
from tests.cluster_factory import cluster_fixture
from tests.replication_support import admin_request, shell, shell_json
from tests.waiting import wait_until

pytestmark = pytest.mark.etcd

PASSWORD = b"shell-etcd"

# zkTimeout is the registration lease's TTL on etcd: a killed bookie is gone from the list after 4 s.
cluster = cluster_fixture(bookies=3, store="etcd", httpServerEnabled="true", httpServerPort="0", zkTimeout="4000")


class _Target:
    def __init__(self, uri: str):
        self.metadata_uri = uri


def test_cluster_commands_create_describe_format_and_delete_a_scope(etcd_server):
    from bkfast.meta.etcd_driver import etcd_client_from_conf

    scope = f"/fresh-{uuid.uuid4().hex[:10]}"
    target = _Target(f"etcd://{etcd_server.endpoint}{scope}")
    _rc, created = shell_json(target, "initnewcluster")
    assert created["root"] == scope and created["layout"] == "etcd"
    again = shell(target, "initnewcluster")
    assert again.returncode == 1 and "already initialized" in again.stderr
    assert shell_json(target, "whatisinstanceid")[1] == {"instanceId": created["instanceId"]}
    kv = etcd_client_from_conf(target.metadata_uri)
    try:
        assert kv.get(EtcdKeys(scope).layout).value == \
            b"2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0"
        refused = shell(target, "metaformat")
        assert refused.returncode == 1 and "--force" in refused.stderr
        _rc, formatted = shell_json(target, "metaformat", "--force")
        assert formatted["deleted"] and formatted["instanceId"] != created["instanceId"]
        wrong = shell(target, "nukeexistingcluster", "--instance-id", created["instanceId"])
        assert wrong.returncode == 1 and formatted["instanceId"] in wrong.stderr
        _rc, nuked = shell_json(target, "nukeexistingcluster", "--instance-id", formatted["instanceId"])
        assert nuked["deletedNodes"] >= 10
        assert kv.range(EtcdKeys(scope).root, EtcdKeys(scope).root_end)[0] == []
    finally:
        kv.close()
    missing = shell(target, "listbookies")
    assert missing.returncode == 1 and "not a BookKeeper cluster" in missing.stderr


def test_listing_autorecovery_switches_and_http_on_a_running_cluster(cluster):
    cluster.ensure_all_running()
    _rc, rows = shell_json(cluster, "listbookies")
    assert sorted(r["bookieId"] for r in rows) == sorted(b.bookie_id for b in cluster.bookies)
    with BookKeeper(cluster.metadata_uri, timeout=60) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entries([b"listed-%d" % i for i in range(5)])
        lh.close()
    _rc, ledgers = shell_json(cluster, "listledgers")
    assert lh.ledger_id in [r["ledgerId"] for r in ledgers]
    with BookKeeper(cluster.metadata_uri, timeout=60) as bk:
        bk.delete_ledger(lh.ledger_id)          # on every bookie: the recover test below could not move it
    _rc, info = shell_json(cluster, "clusterinfo")
    assert (info["layout"], info["writableBookiesCount"], info["ledgerReplicationEnabled"]) == ("etcd", 3, True)
    assert shell(cluster, "autorecovery", "--disable").returncode == 0
    assert shell_json(cluster, "autorecovery")[1] == {"enabled": False}
    assert shell(cluster, "autorecovery", "--enable").returncode == 0
    assert shell_json(cluster, "lostbookierecoverydelay", "--set", "42")[1] == {"lostBookieRecoveryDelay": 42}
    assert shell_json(cluster, "lostbookierecoverydelay")[1] == {"lostBookieRecoveryDelay": 42}
    assert shell_json(cluster, "whoisauditor")[1] == {"auditor": None}
    status, text = admin_request(cluster.bookies[0], "GET", "bookie/list_bookies?type=rw")
    assert status == 200 and set(json.loads(text)) == {b.bookie_id for b in cluster.bookies}
    status, text = admin_request(cluster.bookies[1], "GET", "bookie/cluster_info")
    assert status == 200 and json.loads(text)["writableBookiesCount"] == 3
    status, text = admin_request(cluster.bookies[2], "GET", "autorecovery/lost_bookie_recovery_delay")
    assert status == 200 and "42" in text


def test_recover_copies_a_killed_bookies_ledgers(cluster):
    cluster.ensure_all_running()
    with BookKeeper(cluster.metadata_uri, timeout=60) as bk:
        lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        payloads = [b"recover-%d" % i for i in range(50)]
        lh.add_entries(payloads)
        lh.close()
        victim = cluster.by_id(lh.metadata.ensembles[0][1][0])
        victim.kill()
        wait_until("the killed bookie's lease to expire", lambda: victim.bookie_id not in cluster.registered(),
                   timeout=30, step=0.2)
        _rc, out = shell_json(cluster, "recover", victim.bookie_id)
        assert out["ledgersReplicated"] >= 1 and out["ledgersFailed"] == 0
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert victim.bookie_id not in md.ensembles[-1][1]
        assert [e.data for e in bk.open_ledger(lh.ledger_id, PASSWORD).read_entries(0, 49)] == payloads
    cluster.ensure_all_running()


def test_cookie_commands_list_expand_and_format_a_stopped_bookie_on_etcd(cluster, tmp_path):
    from tests.admin.test_admin_shell import bookie_conf

    cluster.ensure_all_running()
    bookie = cluster.bookies[2]
    conf = bookie_conf(cluster, bookie, tmp_path, listeningInterface="127.0.0.1")
    cookie_key = EtcdKeys(cluster.root).cookie(bookie.bookie_id)
    running = shell(cluster, "bookieformat", "--force", "--conf", conf)
    assert running.returncode == 1 and "registered (running)" in running.stderr
    bookie.stop()
    _rc, listed = shell_json(cluster, "updatecookie", "--list", "--conf", conf)
    assert bookie.bookie_id in listed["etcd"] and listed["where"] == cookie_key.decode()
    assert cluster.kv.get(cookie_key).value.decode() == listed["etcd"]
    new_dir = tmp_path / "more-ledgers"
    expanded = bookie_conf(cluster, bookie, tmp_path, "expanded", listeningInterface="127.0.0.1",
                           ledgerDirectories=f"{bookie.data_dir / 'ledgers'},{new_dir}")
    assert shell_json(cluster, "updatecookie", "--expandstorage", "--conf", expanded)[1]["addedDirectories"] == \
        [str(new_dir)]
    assert str(new_dir) in cluster.kv.get(cookie_key).value.decode()
    refused = shell(cluster, "bookieformat", "--conf", expanded)
    assert refused.returncode == 1 and f"etcd has cookie {cookie_key.decode()}" in refused.stderr
    _rc, formatted = shell_json(cluster, "bookieformat", "--force", "--conf", expanded)
    assert f"deleted cookie {cookie_key.decode()}" in formatted["actions"]
    assert cluster.kv.get(cookie_key) is None
