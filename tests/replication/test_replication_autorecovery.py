"""AutoRecovery acceptance on 5 real `bkfast bookie` processes with autoRecoveryDaemonEnabled=true and a real
ZooKeeper: kill -9 of a bookie under live writers heals the cluster while the writers keep writing;
`PUT /api/v1/autorecovery/trigger_audit` on a bookie's admin port audits a loss held back by
lostBookieRecoveryDelay at once; `--disable` holds replication; the auditor's bookie killed -9 hands the
election over and marks made before are still processed."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request

import pytest

from bkfast import BookKeeper
from bkfast.errors import BKError
from bkfast.meta.zk_election import ZkAuditorElection
from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager
from tests.client_cluster import Cluster
from tests.replication_support import admin_port, admin_request, check_replicas, shell

pytestmark = pytest.mark.zookeeper

PASSWORD = b"autorecovery"
DAEMON_CONF = {
    "autoRecoveryDaemonEnabled": "true",
    "lostBookieRecoveryDelay": "0",
    "zkTimeout": "4000",                          # a killed bookie's nodes go after 4 s
    "openLedgerRereplicationGracePeriod": "3000",
    "rwRereplicateBackoffMs": "500",
    "lockReleaseOfFailedLedgerGracePeriod": "1000",
    "auditorPeriodicCheckInterval": "0",
    "httpServerEnabled": "true",
    "httpServerPort": "0",
}


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("autorecovery"), bookies=5, **DAEMON_CONF)
    try:
        yield c
    finally:
        c.stop()


def _wait(what, predicate, timeout=120.0, step=0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def _metrics(bookie) -> dict[str, float]:
    """The bkfast_replication_* samples of a bookie's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port(bookie)}/metrics", timeout=10).read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("bkfast_replication_")}


def _urm(cluster):
    """The cluster's under-replication manager, on whichever store it uses (a reader: it takes no lock)."""
    if cluster.kv is not None:
        from bkfast.meta.etcd_layout import EtcdKeys
        from bkfast.meta.etcd_underreplication import EtcdUnderReplicationManager

        return EtcdUnderReplicationManager(cluster.kv, EtcdKeys(cluster.root), None)
    return UnderReplicationManager(cluster.zk, cluster.root)


def _election(cluster):
    """An observer of the cluster's auditor election."""
    if cluster.kv is not None:
        from bkfast.meta.etcd_layout import EtcdKeys
        from bkfast.meta.etcd_underreplication import EtcdAuditorElection

        return EtcdAuditorElection(cluster.kv, EtcdKeys(cluster.root), None)
    return ZkAuditorElection(cluster.zk, cluster.root)


def _healed(bk, urm, ledger_ids, dead):
    if urm.list_marked():
        return False
    return all(not dead & bk.get_ledger_metadata(lid).all_bookies for lid in ledger_ids)


class _Writer(threading.Thread):
    def __init__(self, lh, rng):
        super().__init__(daemon=True)
        self.lh, self.rng = lh, rng
        self.acked: dict[int, bytes] = {}
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                payload = self.rng.randbytes(self.rng.randint(1, 2000))
                self.acked[self.lh.add_entry(payload)] = payload
                time.sleep(0.02)
        except BKError as err:                    # the worker's fencing is allowed; acked entries must stay
            self.error = err


def test_kill_9_one_bookie_under_live_writers_heals(cluster):
    rng = random.Random(42)
    urm = _urm(cluster)
    auditor = _wait("an auditor", lambda: _election(cluster).current_auditor(), 60)
    bk = BookKeeper(cluster.metadata_uri, timeout=60, addEntryTimeoutSec=5)
    try:
        closed: dict[int, dict[int, bytes]] = {}
        for _ in range(20):
            lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
            payloads = [rng.randbytes(rng.randint(1, 4000)) for _ in range(10)]
            lh.add_entries(payloads)
            lh.close()
            closed[lh.ledger_id] = dict(enumerate(payloads))
        writers = [_Writer(bk.create_ledger(3, 2, 2, password=PASSWORD), random.Random(i)) for i in range(10)]
        for w in writers:
            w.start()
        _wait("writers to start", lambda: all(len(w.acked) >= 5 for w in writers), 30)
        all_ids = list(closed) + [w.lh.ledger_id for w in writers]
        counts: dict[str, int] = {}
        for lid in all_ids:
            for b in bk.get_ledger_metadata(lid).all_bookies:
                counts[b] = counts.get(b, 0) + 1
        victim = max((b for b in counts if b != auditor), key=counts.get)
        on_victim = [w for w in writers if victim in bk.get_ledger_metadata(w.lh.ledger_id).last_ensemble[1]]
        assert on_victim
        cluster.by_id(victim).kill()                               # kill -9, for good
        acked_at_kill = {w: len(w.acked) for w in writers}
        started = time.monotonic()
        _wait("every mark gone and no segment on the dead bookie",
              lambda: _healed(bk, urm, all_ids, {victim}), 150, 0.5)
        healed_s = time.monotonic() - started
        time.sleep(0.5)
        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(30)
        alive = [w for w in writers if w.error is None]
        assert alive, "every writer was stopped"
        # the writers kept writing after the kill: every one not fenced, and at least one of those whose
        # ensemble held the victim (its own ensemble change)
        assert all(len(w.acked) > acked_at_kill[w] for w in alive), [(len(w.acked), acked_at_kill[w]) for w in alive]
        assert any(len(w.acked) > acked_at_kill[w] for w in on_victim if w.error is None), \
            [(len(w.acked), acked_at_kill[w], w.error) for w in on_victim]
        for w in writers:
            if w.error is None:
                w.lh.close()
        for lid, expected in closed.items():
            check_replicas(bk, lid, bk.get_ledger_metadata(lid), {victim}, expected)
        for w in writers:
            md = bk.get_ledger_metadata(w.lh.ledger_id)
            if w.error is not None:                                # fenced: recovery closed it
                bk.open_ledger(w.lh.ledger_id, PASSWORD).close()
                md = bk.get_ledger_metadata(w.lh.ledger_id)
            assert md.last_entry_id >= max(w.acked)                 # no acknowledged entry lost
            check_replicas(bk, w.lh.ledger_id, md, {victim}, w.acked)
        print(f"healed {len(all_ids)} ledgers {healed_s:.1f} s after kill -9 of {victim}")
        scraped = [_metrics(b) for b in cluster.bookies if b.alive()]
        assert sum(m["bkfast_replication_replicated_ledgers_total"] for m in scraped) >= 1
        assert sum(m["bkfast_replication_bytes_copied_total"] for m in scraped) > 0
        assert sum(m["bkfast_replication_is_auditor"] for m in scraped) == 1
        for lid in all_ids:                                        # the next test has fewer bookies
            bk.delete_ledger(lid)
    finally:
        bk.close()


def test_bookie_back_within_lost_bookie_recovery_delay_is_not_lost(cluster):
    urm = _urm(cluster)
    auditor_id = _wait("an auditor", lambda: _election(cluster).current_auditor(), 60)
    assert shell(cluster, "lostbookierecoverydelay", "--set", "8").returncode == 0
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        lid = None
        bouncer = next(b for b in cluster.bookies if b.alive() and b.bookie_id != auditor_id)
        for _ in range(30):
            lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
            lh.add_entries([b"delay-%d" % i for i in range(10)])
            lh.close()
            if bouncer.bookie_id in lh.metadata.ensembles[0][1]:
                lid = lh.ledger_id
                break
            bk.delete_ledger(lh.ledger_id)
        assert lid is not None
        md = bk.get_ledger_metadata(lid)
        bouncer.stop()                              # clean stop: its registration goes at once
        _wait("the registration to go",
              lambda: bouncer.bookie_id not in cluster.registered(), 30)
        time.sleep(1.0)
        bouncer.start()                             # back within the 8 s delay
        cluster.wait_registered(4)
        time.sleep(10)                              # past the delay: the cancelled audit must not mark it
        assert urm.list_marked() == []
        assert bk.get_ledger_metadata(lid) == md    # nothing was copied off it
        bk.delete_ledger(lid)
    finally:
        bk.close()
        assert shell(cluster, "lostbookierecoverydelay", "--set", "0").returncode == 0


def test_trigger_audit_over_http_audits_a_delayed_loss_now(cluster):
    urm = _urm(cluster)
    auditor_id = _wait("an auditor", lambda: _election(cluster).current_auditor(), 60)
    alive = [b for b in cluster.bookies if b.alive()]
    gone = next(b for b in alive if b.bookie_id != auditor_id)
    api = next(b for b in alive if b is not gone)
    status, text = admin_request(api, "PUT", "autorecovery/lost_bookie_recovery_delay", {"delay_seconds": 600})
    assert (status, text) == (200, "Success set lostBookieRecoveryDelay to 600")
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        ledgers: dict[int, dict[int, bytes]] = {}
        while len(ledgers) < 3:
            lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
            payloads = {n: b"trigger-%d-%d" % (lh.ledger_id, n) for n in range(10)}
            lh.add_entries(list(payloads.values()))
            lh.close()
            if gone.bookie_id in lh.metadata.ensembles[0][1]:
                ledgers[lh.ledger_id] = payloads
            else:
                bk.delete_ledger(lh.ledger_id)
        gone.stop()
        _wait("the registration to go",
              lambda: gone.bookie_id not in cluster.registered(), 30)
        time.sleep(1.5)
        assert urm.list_marked() == []                 # the audit waits for the 600 s delay
        assert admin_request(api, "PUT", "autorecovery/trigger_audit") == (200, "Success trigger audit.")
        _wait("the triggered audit's marks processed", lambda: _healed(bk, urm, list(ledgers), {gone.bookie_id}),
              60, 0.5)
        for lid, expected in ledgers.items():
            check_replicas(bk, lid, bk.get_ledger_metadata(lid), {gone.bookie_id}, expected)
            bk.delete_ledger(lid)
        assert admin_request(api, "PUT", "autorecovery/status?enabled=false")[0] == 200
        status, text = admin_request(api, "POST", "autorecovery/trigger_audit")
        assert status == 404 and "disabled" in text
        assert admin_request(api, "PUT", "autorecovery/status?enabled=true")[0] == 200
    finally:
        bk.close()
        assert admin_request(api, "PUT", "autorecovery/lost_bookie_recovery_delay", {"delay_seconds": 0})[0] == 200
        gone.start()
        cluster.wait_registered(len(alive))


def test_disable_then_auditor_failover_processes_earlier_marks(cluster):
    urm = _urm(cluster)
    alive = [b for b in cluster.bookies if b.alive()]
    assert len(alive) == 4
    auditor_id = _wait("an auditor", lambda: _election(cluster).current_auditor(), 60)
    auditor = cluster.by_id(auditor_id)
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        ledgers = {}
        for i in range(8):
            lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
            lh.add_entries([b"d%d-%d" % (i, n) for n in range(25)])
            lh.close()
            ledgers[lh.ledger_id] = {n: b"d%d-%d" % (i, n) for n in range(25)}
        other = next(b for b in alive if b is not auditor and any(
            b.bookie_id in bk.get_ledger_metadata(lid).all_bookies for lid in ledgers))
        for lid in list(ledgers):            # both replicas of these would die: not this test's case (#4872 is)
            if {other.bookie_id, auditor_id} <= bk.get_ledger_metadata(lid).all_bookies:
                bk.delete_ledger(lid)
                del ledgers[lid]
        assert shell(cluster, "autorecovery", "--disable").returncode == 0
        other.kill()
        _wait("the killed bookie's registration to go",
            lambda: other.bookie_id not in cluster.registered(), 30)
        # marks made before the failover (as the auditor would: one call per lost bookie)
        on_other = [lid for lid in ledgers if other.bookie_id in bk.get_ledger_metadata(lid).all_bookies]
        urm.mark_many(on_other, [other.bookie_id])
        before = {lid: bk.get_ledger_metadata(lid) for lid in ledgers}
        time.sleep(3)
        assert {lid: bk.get_ledger_metadata(lid) for lid in ledgers} == before     # disabled: nothing copied
        assert sorted(urm.list_marked()) == sorted(on_other)
        auditor.kill()
        election = _election(cluster)
        new_auditor = _wait("another auditor", lambda: (a := election.current_auditor()) not in (None, auditor_id)
                            and a, 30)
        assert new_auditor in {b.bookie_id for b in cluster.bookies if b.alive()}
        time.sleep(2)
        assert sorted(urm.list_marked()) == sorted(on_other)                       # still disabled
        assert shell(cluster, "autorecovery", "--enable").returncode == 0
        dead = {other.bookie_id, auditor_id}
        _wait("every mark processed after --enable", lambda: _healed(bk, urm, list(ledgers), dead), 90, 0.5)
        for lid, expected in ledgers.items():
            check_replicas(bk, lid, bk.get_ledger_metadata(lid), dead, expected)
    finally:
        bk.close()
