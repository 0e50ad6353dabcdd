"""The Java AutoRecovery bugs bkfast must not repeat (spec §7.9), each reproduced on real bookies + ZooKeeper with
a real replication worker; plus the recovery shell commands and HTTP handlers, and the worker's metrics.

#3316 a ledger deleted while marked is unmarked; #2766 a mark whose bookies are back is dropped without copying;
#3220 a closed empty ledger gets its ensemble fixed without reads; #4872 a ledger whose only replica is gone is
reported once (metric + log naming the entries) and not retried in a loop."""

from __future__ import annotations

import logging
import re
import shutil
import time
from types import SimpleNamespace

import pytest
from twisted.internet import defer

from bkfast import BookKeeper
from bkfast.conf import ServerConfiguration
from bkfast.http import autorecovery_api
from bkfast.http.admin_api import _ApiError, _Services
from bkfast.ids import LedgerId
from bkfast.meta.underreplication import CHECK_ALL_LEDGERS_CTIME
from bkfast.meta.zk_underreplication import CTIME_NODES
from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager
from bkfast.reactor import call, start_reactor_thread
from bkfast.replication.auditor import Auditor
from bkfast.replication.checker import bad_bookies, striped_sample
from bkfast.replication.copier import ByteRateLimiter
from bkfast.replication.rereplicate import DELETED, FAILED, LOST, OK, UNAFFECTED
from bkfast.replication.settings import AuditorSettings, WorkerSettings
from bkfast.replication.stats import ReplicationCollector, ReplicationStats
from bkfast.replication.worker import ReplicationWorker
from bkfast.server.metadata import MetadataSession
from tests.client_cluster import Cluster
from tests.replication_support import check_replicas, shell, shell_json
from tests.waiting import wait_until

pytestmark = pytest.mark.zookeeper

PASSWORD = b"anchors"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("anchors"), bookies=4)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def bk(cluster):
    client = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        yield client
    finally:
        client.close()


def _worker(cluster, bk, stats=None):
    conf = ServerConfiguration({"metadataServiceUri": cluster.metadata_uri,
                                "openLedgerRereplicationGracePeriod": 100, "rwRereplicateBackoffMs": 10,
                                "lockReleaseOfFailedLedgerGracePeriod": 0})
    urm = UnderReplicationManager(cluster.zk, cluster.root)
    return ReplicationWorker(urm, WorkerSettings.from_conf(conf), bk.async_client, stats or ReplicationStats(),
                             call), urm


def _closed_ledger(bk, n, e=3, w=2, a=2, on=None):
    for _ in range(50):
        lh = bk.create_ledger(e, w, a, password=PASSWORD)
        if on is None or on in lh.metadata.ensembles[0][1]:
            break
        lh.close()
        bk.delete_ledger(lh.ledger_id)
    payloads = [b"entry-%d" % i for i in range(n)]
    if payloads:
        lh.add_entries(payloads)
    lh.close()
    return lh.ledger_id, dict(enumerate(payloads))


def test_3316_deleted_ledger_is_unmarked(cluster, bk):
    worker, urm = _worker(cluster, bk)
    lid, _ = _closed_ledger(bk, 5)
    victim = sorted(bk.get_ledger_metadata(lid).all_bookies)[0]
    urm.mark(lid, [victim])
    bk.delete_ledger(lid)
    assert urm.try_lock(lid)
    assert worker.process(lid) == DELETED
    assert urm.get_mark(lid) is None and urm.lock_holder_of(lid) is None


def test_2766_mark_of_bookies_that_are_back_is_dropped_without_copying(cluster, bk):
    stats = ReplicationStats()
    worker, urm = _worker(cluster, bk, stats)
    lid, _ = _closed_ledger(bk, 20)
    md = bk.get_ledger_metadata(lid)
    urm.mark(lid, sorted(md.all_bookies)[:1])          # "lost" earlier, registered and serving now
    assert urm.try_lock(lid)
    assert worker.process(lid) == UNAFFECTED
    assert urm.get_mark(lid) is None
    assert stats.entries_copied == 0 and bk.get_ledger_metadata(lid) == md


def test_shell_and_http_recovery_commands(cluster, bk):
    code, out = shell_json(cluster, "autorecovery", "--status")
    assert out == {"enabled": True}
    assert shell_json(cluster, "autorecovery", "--disable")[1] == {"enabled": False}
    again = shell(cluster, "autorecovery", "--disable")
    assert again.returncode == 1 and again.stderr.strip().endswith("AutoRecovery is already disabled!")
    assert shell_json(cluster, "autorecovery", "--enable")[1] == {"enabled": True}
    no_delay = shell(cluster, "lostbookierecoverydelay")
    assert no_delay.returncode == 1 and len(no_delay.stderr.strip().splitlines()) == 1
    assert shell_json(cluster, "lostbookierecoverydelay", "--set", "30")[1] == {"lostBookieRecoveryDelay": 30}
    assert shell(cluster, "lostbookierecoverydelay").stdout.strip() == "lostBookieRecoveryDelay value: 30"
    assert cluster.zk.get(f"{cluster.root}/underreplication/lostBookieRecoveryDelay")[0] == b"30"
    assert shell(cluster, "whoisauditor").stdout.strip() == "no auditor elected"
    trig = shell(cluster, "triggeraudit")
    assert trig.returncode == 1 and "no auditor" in trig.stderr
    urm = UnderReplicationManager(cluster.zk, cluster.root)
    urm.mark(77, ["10.0.0.1:3181"])
    urm.mark(0x123456789, ["10.0.0.2:3181"])
    rows = shell_json(cluster, "listunderreplicated")[1]
    assert [r["ledgerId"] for r in rows] == [77, 0x123456789]
    assert rows[0]["missingReplicas"] == ["10.0.0.1:3181"]
    text = shell(cluster, "listunderreplicated", "--print-missing-replica", "--missing-replica", "10.0.0.2:3181")
    assert text.stdout.strip() == f"{0x123456789}\t10.0.0.2:3181"

    # the HTTP handlers on the same ZooKeeper
    conf = ServerConfiguration({"metadataServiceUri": cluster.metadata_uri})
    meta = MetadataSession(conf)                  # a bookie's metadata session on the same ZooKeeper
    try:
        _http_autorecovery_endpoints(SimpleNamespace(bookie=SimpleNamespace(conf=conf), meta=meta,
                                                     shutting_down=False), urm)
    finally:
        meta.close()


def _http_autorecovery_endpoints(context, urm):
    services = _Services(context)
    ep = autorecovery_api
    assert ep.list_under_replicated(services, {}, b"") == [77, 0x123456789]
    assert ep.list_under_replicated(services, {"printmissingreplica": ""}, b"")["77"] == ["10.0.0.1:3181"]
    assert ep.delay_get(services, {}, b"") == "lostBookieRecoveryDelay value: 30"
    assert ep.delay_put(services, {}, b'{"delay_seconds": 0}') == "Success set lostBookieRecoveryDelay to 0"
    assert ep.status_put(services, {"enabled": "false"}, b"") == {"enabled": False}
    assert ep.status(services, {}, b"") == {"enabled": False}
    assert ep.status_put(services, {"enabled": "true"}, b"") == {"enabled": True}
    for fn, params, body, status in ((ep.who_is_auditor, {}, b"", 404), (ep.trigger_audit, {}, b"", 404),
                                     (ep.status_put, {}, b"", 400), (ep.delay_put, {}, b'{"delay_seconds": -1}', 400),
                                     (ep.decommission, {}, b'{"bookie_src": 5}', 400)):
        with pytest.raises(_ApiError) as err:
            fn(services, params, body)
        assert err.value.status == status
    urm.unmark(77)
    urm.unmark(0x123456789)
    with pytest.raises(_ApiError) as err:
        ep.list_under_replicated(services, {}, b"")
    assert err.value.status == 404 and str(err.value) == "No under replicated ledgers found"


def test_decommission_live_bookie(cluster, bk):
    live = cluster.bookies[3]
    ledgers = [_closed_ledger(bk, 15, on=live.bookie_id) for _ in range(3)]
    out = shell_json(cluster, "decommissionbookie", live.bookie_id)[1]
    assert out["cookieDeleted"] and out["stillRegistered"] and out["ledgersReplicated"] >= 3
    assert cluster.zk.exists(f"{cluster.root}/cookies/{live.bookie_id}") is None
    for lid, expected in ledgers:
        check_replicas(bk, lid, bk.get_ledger_metadata(lid), {live.bookie_id}, expected)
    live.stop()                                           # it has no cookie any more: it leaves for good
    cluster.bookies.remove(live)


def _auditor(cluster, bk, **intervals):
    conf = ServerConfiguration({"metadataServiceUri": cluster.metadata_uri, "lostBookieRecoveryDelay": 0,
                                **intervals})
    urm = UnderReplicationManager(cluster.zk, cluster.root)
    return Auditor(urm, AuditorSettings.from_conf(conf), bk.async_client, ReplicationStats(), call)


def test_auditor_periodic_bookie_check_and_check_all_ledgers(cluster, bk):
    """auditorPeriodicBookieCheckInterval re-marks what a lost bookie holds; auditorPeriodicCheckInterval
    (checkAllLedgers) marks the ledgers of a registered bookie that lost its data (restarted empty, as after a
    disk replacement), and writes checkallledgersctime; a worker then re-replicates those marks off the
    registered but empty bookie. Marks in Java's text format."""
    for lid in bk.list_ledgers():
        bk.delete_ledger(lid)
    urm = UnderReplicationManager(cluster.zk, cluster.root)
    alive = [b for b in cluster.bookies if b.alive()]
    wiped, other = alive[1], alive[2]
    wiped_ledgers = dict(_closed_ledger(bk, 8, e=2, w=2, a=2, on=wiped.bookie_id) for _ in range(3))
    on_wiped = list(wiped_ledgers)
    for _ in range(50):
        healthy, _ = _closed_ledger(bk, 8, e=2, w=2, a=2)
        if wiped.bookie_id not in bk.get_ledger_metadata(healthy).all_bookies:
            break
        bk.delete_ledger(healthy)
    mark_text = re.compile(rb'replica: "%s"\nctime: (\d+)\n' % re.escape(wiped.bookie_id.encode()))

    # 1. the wiped bookie stopped: the first audit marks its ledgers; marks lost later (an operator's unmark)
    #    come back by the periodic bookie check alone (no bookie changes any more)
    wiped.stop()
    wait_until("the registration to go", lambda: wiped.bookie_id not in _registered(cluster))
    auditor = _auditor(cluster, bk, auditorPeriodicBookieCheckInterval=1, auditorPeriodicCheckInterval=0)
    auditor.start()
    try:
        wait_until("the first audit's marks", lambda: sorted(urm.list_marked()) == sorted(on_wiped))
        for lid in on_wiped:
            assert mark_text.fullmatch(cluster.zk.get(urm.mark_path(lid))[0])
            urm.unmark(lid)
        wait_until("the periodic bookie check's marks", lambda: sorted(urm.list_marked()) == sorted(on_wiped))
    finally:
        auditor.stop()
    for lid in on_wiped:
        urm.unmark(lid)

    # 2. it comes back empty under the same id (data dirs wiped, cookie deleted): registered, so only
    #    checkAllLedgers' reads find the lost replicas
    for name in ("journal", "ledgers"):
        shutil.rmtree(wiped.data_dir / name)
    cluster.zk.delete(f"{cluster.root}/cookies/{wiped.bookie_id}")
    wiped.start()
    cluster.wait_registered(len(alive))
    ctime_path = f"{urm.base}/{CTIME_NODES[CHECK_ALL_LEDGERS_CTIME][0]}"
    if cluster.zk.exists(ctime_path):
        cluster.zk.delete(ctime_path)
    started_ms = int(time.time() * 1000)
    auditor = _auditor(cluster, bk, auditorPeriodicBookieCheckInterval=0, auditorPeriodicCheckInterval=1)
    auditor.start()
    try:
        wait_until("checkAllLedgers' marks", lambda: sorted(urm.list_marked()) == sorted(on_wiped))
        assert auditor.last_audit["marksWritten"] == 0           # the bookie audit saw nothing lost
        for lid in on_wiped:
            assert mark_text.fullmatch(cluster.zk.get(urm.mark_path(lid))[0])
        first = wait_until("checkallledgersctime", lambda: urm.get_ctime(CHECK_ALL_LEDGERS_CTIME) > 0 and
                      urm.get_ctime(CHECK_ALL_LEDGERS_CTIME))
        assert started_ms <= first <= int(time.time() * 1000)
        raw = cluster.zk.get(ctime_path)[0]                       # binary CheckAllLedgersFormat, field 1
        assert raw[0] == 0x08 and len(raw) == 7
        wait_until("a second periodic checkAllLedgers", lambda: urm.get_ctime(CHECK_ALL_LEDGERS_CTIME) > first)
        assert healthy not in urm.list_marked()
    finally:
        auditor.stop()

    # 3. a worker moves the fragments the wiped bookie should hold to other bookies, as Java's worker does
    #    through its LedgerChecker (before, it dropped these marks: "every bookie is available")
    worker, _ = _worker(cluster, bk)
    for lid in on_wiped:
        assert urm.try_lock(lid)
        assert worker.process(lid) == OK
        assert urm.get_mark(lid) is None
        check_replicas(bk, lid, bk.get_ledger_metadata(lid), {wiped.bookie_id}, wiped_ledgers[lid])
    cluster.zk.delete(ctime_path)
    for lid in bk.list_ledgers():
        bk.delete_ledger(lid)
    assert other.alive()


def test_replication_rate_by_bytes_throttles_the_worker(cluster, bk):
    """A worker with replicationRateByBytes = R copies B bytes in at least B / R seconds (the bucket starts
    empty, as Guava's; 10 % of slack for the estimate corrections still unpaid at the end)."""
    rate = 50_000
    alive = [b for b in cluster.bookies if b.alive()]
    stopped = alive[0]
    lh = None
    for _ in range(50):
        lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        if stopped.bookie_id in lh.metadata.ensembles[0][1]:
            break
        lh.close()
        bk.delete_ledger(lh.ledger_id)
    payloads = [bytes([i]) * 1000 for i in range(100)]
    lh.add_entries(payloads)
    lh.close()
    stopped.stop()
    cluster.wait_registered(len(alive) - 1)
    try:
        stats = ReplicationStats()
        conf = ServerConfiguration({"metadataServiceUri": cluster.metadata_uri, "replicationRateByBytes": rate})
        urm = UnderReplicationManager(cluster.zk, cluster.root)
        urm.mark(lh.ledger_id, [stopped.bookie_id])
        assert urm.try_lock(lh.ledger_id)
        started = time.monotonic()
        worker = ReplicationWorker(urm, WorkerSettings.from_conf(conf), bk.async_client, stats, call)
        assert worker.process(lh.ledger_id) == OK
        elapsed = time.monotonic() - started
        assert stats.bytes_copied >= 100_000
        assert elapsed >= 0.9 * stats.bytes_copied / rate, (elapsed, stats.bytes_copied)
        check_replicas(bk, lh.ledger_id, bk.get_ledger_metadata(lh.ledger_id), {stopped.bookie_id},
                       dict(enumerate(payloads)))
        bk.delete_ledger(lh.ledger_id)
    finally:
        stopped.start()
        cluster.wait_registered(len(alive))


def test_byte_rate_limiter_paces_acquires_and_charges():
    """ByteRateLimiter directly: n acquires of k bytes at rate r take at least n*k/r; bytes charged after an
    acquire are paid by the next one; rate <= 0 never waits."""
    start_reactor_thread()
    from twisted.internet import reactor

    async def paced(rate, sizes, charge=0):
        limiter = ByteRateLimiter(rate, reactor)
        started = time.monotonic()
        for n in sizes:
            await limiter.acquire(n)
            limiter.charge(charge)
        return time.monotonic() - started

    assert call(lambda: defer.ensureDeferred(paced(1_000_000, [25_000] * 16)), timeout=30) >= 0.4
    assert call(lambda: defer.ensureDeferred(paced(1_000_000, [1, 1], charge=300_000)), timeout=30) >= 0.3
    unlimited = ByteRateLimiter(-1, reactor)
    assert unlimited.unlimited and unlimited.acquire(10**12).called


def test_3220_empty_closed_ledger_and_4872_lost_only_replica(cluster, bk, caplog):
    stats = ReplicationStats()
    worker, urm = _worker(cluster, bk, stats)
    victim = cluster.bookies[0]
    empty, _ = _closed_ledger(bk, 0, e=2, w=2, a=2, on=victim.bookie_id)
    single, _ = _closed_ledger(bk, 12, e=1, w=1, a=1, on=victim.bookie_id)
    every = len(_registered(cluster))   # the module's earlier tests may have stopped bookies (or not run)
    wide, _ = _closed_ledger(bk, 6, e=every, w=every, a=every, on=victim.bookie_id)
    healthy, _ = _closed_ledger(bk, 30, e=2, w=2, a=2)
    md_healthy, registered = bk.get_ledger_metadata(healthy), _registered(cluster)
    assert call(lambda: defer.ensureDeferred(bad_bookies(bk.async_client, LedgerId(0, healthy), md_healthy,
                                                         registered)), timeout=30) == set()
    victim.stop()
    cluster.wait_registered(2)
    reads_before = stats.entries_copied

    # 3220: metadata fixed, nothing read or copied
    urm.mark(empty, [victim.bookie_id])
    assert urm.try_lock(empty)
    assert worker.process(empty) == OK
    assert victim.bookie_id not in bk.get_ledger_metadata(empty).all_bookies
    assert stats.entries_copied == reads_before and urm.get_mark(empty) is None

    # 4872: reported once, not retried in a loop
    with caplog.at_level(logging.ERROR, logger="bkfast.replication.worker"):
        for _ in range(3):
            urm.mark(single, [victim.bookie_id])
            assert urm.try_lock(single)
            assert worker.process(single) == LOST
            assert urm.get_mark(single) is None and urm.lock_holder_of(single) is None
    errors = [r.getMessage() for r in caplog.records if "unrecoverable" in r.getMessage()]
    assert len(errors) == 1 and f"ledger {single} " in errors[0] and "entries 0-11" in errors[0]
    assert stats.unrecoverable_ledgers == 1
    scraped = {m.name: m.samples[0].value for m in ReplicationCollector(stats).collect()}
    assert scraped["bkfast_replication_unrecoverable_ledgers"] == 1
    assert victim.bookie_id in bk.get_ledger_metadata(single).all_bookies   # never pointed at an empty bookie

    # 3905: E = every bookie left, so no replacement: the pass fails, the lock is released, the mark stays
    urm.mark(wide, [victim.bookie_id])
    assert urm.try_lock(wide)
    assert worker.process(wide) == FAILED
    assert urm.get_mark(wide) is not None and urm.lock_holder_of(wide) is None
    assert stats.failed_ledgers == 1

    # the auditor's LedgerChecker: an unregistered bookie is bad without a read; a registered one that does
    # not answer is bad after its reads fail
    md = bk.get_ledger_metadata(wide)
    registered = _registered(cluster)
    check = lambda available: call(lambda: defer.ensureDeferred(  # noqa: E731
        bad_bookies(bk.async_client, LedgerId(0, wide), md, available)), timeout=60)
    assert check(registered) == {victim.bookie_id}
    assert check(registered | {victim.bookie_id}) == {victim.bookie_id}
    urm.unmark(wide)


def _registered(cluster) -> set[str]:
    return {c for c in cluster.zk.get_children(f"{cluster.root}/available") if c != "readonly"}


def test_striped_sample():
    # E=3 W=2: index 0 stores the entries with (0 - e) % 3 < 2, i.e. e % 3 in (0, 2)
    assert striped_sample(0, 9, 0, 3, 2) == [0, 9]
    assert striped_sample(0, 9, 2, 3, 2) == [1, 8]
    assert striped_sample(5, 5, 1, 3, 2) == []
    assert len(striped_sample(0, 999, 0, 3, 2, percentage=10)) > 2


def test_standalone_autorecovery_process(cluster, tmp_path):
    """`bkfast autorecovery` as its own process: it is elected, and SIGTERM (by pid) ends it and its vote."""
    import os
    import signal
    import subprocess
    import sys
    import time

    log_path = tmp_path / "autorecovery.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "autorecovery", "-D",
                                 f"metadataServiceUri={cluster.metadata_uri}", "-D", "bookieId=autorecovery-test:1"],
                                stdout=subprocess.PIPE, stderr=log_file, text=True)
    try:
        assert proc.stdout.readline().strip() == "autorecovery running as autorecovery-test:1"
        deadline = time.monotonic() + 30
        while shell(cluster, "whoisauditor").stdout.strip() != "Auditor: autorecovery-test:1":
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert shell(cluster, "whoisauditor").stdout.strip() == "no auditor elected"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stdout.close()
