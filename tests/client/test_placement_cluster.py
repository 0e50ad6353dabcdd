"""Topology-aware placement on a real cluster (ZooKeeper + six `bkfast bookie` processes in three racks of
Pulsar's rack table): the shell and HTTP faces of the table, a rack-aware client that places, changes and
refuses ensembles by it and follows its changes, acknowledgements that must come from two racks, reads in
the client's rack first, free-disk weights from the bookies, and the auditor's placement check with the
workers' repair."""

from __future__ import annotations

import os
import signal
import time

import pytest

from bkfast import BookKeeper
from bkfast.client.placement import Adherence
from bkfast.client.reads import _reordered_write_sets
from bkfast.conf import ServerConfiguration
from bkfast.errors import PlacementPolicyError
from bkfast.meta.rack_table import rack_table_path, serialize_rack_table, update_rack_table, with_bookie
from bkfast.meta.underreplication import PLACEMENT_POLICY_CHECK_CTIME
from bkfast.meta.zk_underreplication import ZkUnderReplicationManager
from bkfast.reactor import call
from bkfast.replication.auditor import Auditor
from bkfast.replication.rereplicate import OK
from bkfast.replication.settings import AuditorSettings, WorkerSettings
from bkfast.replication.stats import ReplicationStats
from bkfast.replication.worker import ReplicationWorker
from tests.cluster_factory import cluster_fixture
from tests.replication_support import admin_request, check_replicas, shell, shell_json
from tests.waiting import wait_until

pytestmark = pytest.mark.zookeeper

PASSWORD = b"racks"
PULSAR_MAPPING = "org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping"
RACKS = ("/rack-a", "/rack-a", "/rack-b", "/rack-b", "/rack-c", "/rack-c")
RACK_AWARE = {"ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
              "reppDnsResolverClass": PULSAR_MAPPING, "enforceMinNumRacksPerWriteQuorum": True}


def set_table(cluster, racks: dict[str, str]) -> None:
    table = {}
    for bookie, rack in racks.items():
        table = with_bookie(table, "default", bookie, rack)
    update_rack_table(cluster.zk, rack_table_path(cluster.root), lambda _old: table)


def rack_of(cluster) -> dict[str, str]:
    return dict(zip((b.bookie_id for b in cluster.bookies), RACKS, strict=True))


cluster = cluster_fixture(bookies=6, httpServerEnabled="true", httpServerPort="0",
                          prepare=lambda started: set_table(started, rack_of(started)))


def covers(ensemble, w, racks) -> bool:
    n = len(ensemble)
    starts = range(1) if w >= n else range(n)
    return all(len({racks[ensemble[(s + j) % n]] for j in range(w)}) >= min(w, 2) for s in starts)


def test_shell_keeps_the_rack_table_in_pulsars_format(cluster):
    bookie = cluster.bookies[0].bookie_id
    out = shell_json(cluster, "setbookierack", bookie, "--rack", "/rack-z", "--group", "g2", "--hostname", "b0")[1]
    assert out == {"bookie": bookie, "group": "g2", "rack": "/rack-z", "hostname": "b0"}
    assert shell_json(cluster, "getbookierack", bookie)[1] == out
    table = shell_json(cluster, "listbookieracks")[1]
    assert table["g2"] == {bookie: {"rack": "/rack-z", "hostname": "b0"}} and bookie not in table["default"]
    raw = cluster.zk.get(rack_table_path(cluster.root))[0]
    assert raw == serialize_rack_table(table) and raw.startswith(b'{"default":{"127.0.0.1:')
    assert shell(cluster, "listbookieracks").stdout.count("\track ") == 6
    assert shell_json(cluster, "deletebookierack", bookie)[1] == {"bookie": bookie, "deleted": True}
    missing = shell(cluster, "getbookierack", bookie)
    assert missing.returncode == 1 and "does not exist in the rack table" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    bad = shell(cluster, "setbookierack", bookie, "--rack", "/")
    assert bad.returncode == 1 and "invalid rack" in bad.stderr
    assert shell(cluster, "setbookierack", "no/slash:1", "--rack", "/r").returncode == 1
    set_table(cluster, rack_of(cluster))


def test_http_admin_api_reads_and_writes_the_rack_table(cluster):
    web, bookie = cluster.bookies[1], cluster.bookies[2].bookie_id
    status, text = admin_request(web, "PUT", f"bookie/rack_info?bookie={bookie}", {"rack": "/rack-q", "group": "g"})
    assert status == 200, text
    assert admin_request(web, "GET", f"bookie/rack_info?bookie={bookie}")[0] == 200
    status, text = admin_request(web, "GET", "bookie/racks_info")
    assert status == 200 and '"/rack-q"' in text
    assert admin_request(web, "PUT", f"bookie/rack_info?bookie={bookie}", {"rack": ""})[0] == 400
    assert admin_request(web, "PUT", f"bookie/rack_info?bookie={bookie}", {"rack": 5})[0] == 400
    assert admin_request(web, "GET", "bookie/rack_info")[0] == 400
    assert admin_request(web, "DELETE", f"bookie/rack_info?bookie={bookie}")[0] == 200
    assert admin_request(web, "DELETE", f"bookie/rack_info?bookie={bookie}")[0] == 404
    set_table(cluster, rack_of(cluster))


def test_rack_aware_client_places_and_changes_ensembles_across_racks(cluster):
    racks = rack_of(cluster)
    with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5, **RACK_AWARE) as bk:
        for e, w, a in ((3, 2, 2), (5, 3, 2), (3, 3, 2)):
            for _ in range(5):
                lh = bk.create_ledger(e, w, a, password=PASSWORD)
                assert covers(lh.metadata.ensembles[0][1], w, racks)
                lh.close()
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entries([b"before-%d" % i for i in range(10)])
        victim = cluster.by_id(lh.metadata.ensembles[0][1][1])
        victim.kill()
        try:
            lh.add_entries([b"after-%d" % i for i in range(10)])
            first, ensemble = lh.metadata.ensembles[-1]
            assert first > 0 and victim.bookie_id not in ensemble and covers(ensemble, 2, racks)
            new = set(ensemble) - set(lh.metadata.ensembles[0][1])
            assert {racks[b] for b in new} == {racks[victim.bookie_id]}        # its rack's other bookie
            lh.close()
            assert len(lh.read_entries(0, 19)) == 20
        finally:
            cluster.ensure_all_running()


def test_a_running_client_follows_table_changes_and_enforcement_fails_in_one_line(cluster):
    ids = [b.bookie_id for b in cluster.bookies]
    with BookKeeper(cluster.metadata_uri, timeout=60, **RACK_AWARE) as bk:
        assert covers(bk.create_ledger(3, 2, 2, password=PASSWORD).metadata.ensembles[0][1], 2, rack_of(cluster))
        set_table(cluster, {b: ("/rack-a" if i < 3 else "/rack-b") for i, b in enumerate(ids)})
        placement = bk.async_client.placement
        wait_until("the client to see two racks", lambda: placement.topology.location(ids[5]) == "/rack-b"
                   and placement.topology.location(ids[2]) == "/rack-a", 60)
        with pytest.raises(PlacementPolicyError) as err:
            bk.create_ledger(3, 2, 2, password=PASSWORD)
        assert "every write quorum on 2 racks" in str(err.value) and "\n" not in str(err.value)
        assert covers(bk.create_ledger(4, 2, 2, password=PASSWORD).metadata.ensembles[0][1], 2,
                      {b: placement.topology.location(b) for b in ids})
        set_table(cluster, rack_of(cluster))
        wait_until("the three racks back", lambda: placement.topology.location(ids[2]) == "/rack-b", 60)
        bk.create_ledger(3, 2, 2, password=PASSWORD).close()


def test_acknowledgements_must_come_from_two_racks_with_enforce_min_num_fault_domains(cluster):
    racks = rack_of(cluster)
    ids = [b.bookie_id for b in cluster.bookies]
    # two bookies in /rack-a, one in /rack-b, the rest in the default rack (never chosen under enforcement):
    # a W=3 quorum has two bookies of one rack
    set_table(cluster, {ids[0]: "/rack-a", ids[1]: "/rack-a", ids[2]: "/rack-b",
                        **{b: "/default-rack" for b in ids[3:]}})
    lonely = cluster.by_id(ids[2])
    try:
        for rule, completes_while_paused in ((True, False), (False, True)):
            with BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=60, **RACK_AWARE,
                            enforceMinNumFaultDomainsForWrite=rule) as bk:
                lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
                assert set(lh.metadata.ensembles[0][1]) == set(ids[:3])
                lh.add_entry(b"warm-up")
                os.kill(lonely.pid, signal.SIGSTOP)
                try:
                    d = lh.add_entry_async(b"racks")
                    if completes_while_paused:
                        wait_until("the add acknowledged by the two bookies of /rack-a alone", d.done, 30)
                    else:
                        time.sleep(1.5)                # the two bookies of /rack-a have acknowledged long since
                        assert not d.done(), rule
                finally:
                    os.kill(lonely.pid, signal.SIGCONT)
                assert d.wait(30) == 1
                lh.close()
    finally:
        set_table(cluster, racks)


def test_reads_go_to_the_clients_rack_first_with_reorder_read_sequence(cluster):
    racks = rack_of(cluster)
    with BookKeeper(cluster.metadata_uri, timeout=60, reorderReadSequenceEnabled=True, **RACK_AWARE) as bk:
        lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
        lh.add_entries([b"x"] * 6)
        lh.close()
        client = bk.async_client
        md = lh.metadata
        local = racks[md.ensembles[0][1][2]]
        client.placement.topology.local_location = local
        orders = call(_reordered_write_sets, client, md, timeout=10)
        assert all(racks[order[0]] == local for order in orders.values())
        assert [e.data for e in bk.open_ledger(lh.ledger_id, PASSWORD).read_entries(0, 5)] == [b"x"] * 6


def test_disk_weights_come_from_every_bookies_free_space(cluster):
    with BookKeeper(cluster.metadata_uri, timeout=60, diskWeightBasedPlacementEnabled=True, **RACK_AWARE) as bk:
        client = bk.async_client
        wait_until("a round of GET_BOOKIE_INFO", lambda: client._disk_weights.rounds > 0, 60)
        weights = client.placement.weights
        assert set(weights) == {b.bookie_id for b in cluster.bookies}
        assert all(w > 0 for w in weights.values())
        assert covers(bk.create_ledger(3, 2, 2, password=PASSWORD).metadata.ensembles[0][1], 2, rack_of(cluster))


def test_auditor_counts_ledgers_that_break_the_policy_and_workers_repair_them(cluster, tmp_path):
    racks = rack_of(cluster)
    urm = ZkUnderReplicationManager(cluster.zk, cluster.root)
    with BookKeeper(cluster.metadata_uri, timeout=60,
                    ensemblePlacementPolicy="org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy") as rnd:
        for lid in rnd.list_ledgers():
            rnd.delete_ledger(lid)
        written, breaking = {}, []
        while len(breaking) < 3:
            lh = rnd.create_ledger(3, 2, 2, password=PASSWORD)
            lh.add_entries([b"e-%d" % i for i in range(6)])
            lh.close()
            written[lh.ledger_id] = {i: b"e-%d" % i for i in range(6)}
            if not covers(lh.metadata.ensembles[0][1], 2, racks):
                breaking.append(lh.ledger_id)
        rnd.create_ledger(3, 2, 2, password=PASSWORD)             # open: not judged
    conf = ServerConfiguration({"metadataServiceUri": cluster.metadata_uri,
                                "repairedPlacementPolicyNotAdheringBookieEnable": True,
                                "openLedgerRereplicationGracePeriod": 100, "rwRereplicateBackoffMs": 10,
                                "lockReleaseOfFailedLedgerGracePeriod": 0, **RACK_AWARE})
    with BookKeeper(cluster.metadata_uri, timeout=60, **RACK_AWARE) as bk:
        stats = ReplicationStats()
        auditor = Auditor(urm, AuditorSettings.from_conf(conf), bk.async_client, stats, call)
        found = auditor.placement_policy_check()
        assert stats.num_ledgers_not_adhering_to_placement_policy == len(breaking) >= 3
        assert stats.num_ledgers_softly_adhering_to_placement_policy == 0
        assert sorted(found["notAdhering"]) == breaking and found["ledgersChecked"] == len(written)
        assert sorted(found["marked"]) == breaking == sorted(urm.list_marked())
        assert urm.get_ctime(PLACEMENT_POLICY_CHECK_CTIME) > 0
        conf_file = tmp_path / "bk_server.conf"
        conf_file.write_text(f"reppDnsResolverClass={PULSAR_MAPPING}\n")
        shell_out = shell_json(cluster, "placementpolicycheck", "--conf", str(conf_file))[1]
        assert sorted(shell_out["notAdhering"]) == breaking and shell_out["ledgersChecked"] == len(written)
        # no topology (the default conf): every bookie in /default-rack, so no write quorum spans two racks
        assert shell_json(cluster, "placementpolicycheck")[1]["numLedgersNotAdheringToPlacementPolicy"] == \
            len(written)
        worker = ReplicationWorker(urm, WorkerSettings.from_conf(conf), bk.async_client, ReplicationStats(), call)
        for lid in breaking:
            assert urm.try_lock(lid)
            assert worker.process(lid) == OK
            md = bk.get_ledger_metadata(lid)
            assert covers(md.ensembles[0][1], 2, racks)
            assert bk.async_client.placement.adherence(md.ensembles[0][1], 2, 2) == Adherence.MEETS_STRICT
            check_replicas(bk, lid, md, set(), written[lid])
        assert urm.list_marked() == []
        assert auditor.placement_policy_check()["notAdhering"] == []
        assert stats.num_ledgers_not_adhering_to_placement_policy == 0
