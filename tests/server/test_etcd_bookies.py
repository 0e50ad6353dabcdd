"""Bookie processes on a real etcd (Java's etcd layout): the registration lives on a lease, so a bookie stopped
past the TTL (SIGSTOP) leaves bookies/writable and comes back once it runs again; an etcd restarted while a
client writes loses nothing acknowledged, the adds go on, and the registrations are there afterwards."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from bkfast import BookKeeper
from tests.cluster_factory import running_cluster
from tests.etcd_server import EtcdServer
from tests.waiting import wait_until

pytestmark = pytest.mark.etcd

PASSWORD = b"etcd-bookies"


def test_a_bookie_stopped_past_its_lease_drops_out_and_comes_back(etcd_server, tmp_path):
    # zkTimeout is the lease TTL on etcd (Java's etcd bookie driver): 3 s here.
    with running_cluster(etcd_server.endpoint, tmp_path, 2, "etcd", zkTimeout="3000") as cluster:
        paused = cluster.bookies[0]
        assert sorted(cluster.registered()) == sorted(b.bookie_id for b in cluster.bookies)
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            wait_until("the stopped bookie to leave bookies/writable",
                       lambda: paused.bookie_id not in cluster.registered(), timeout=20, step=0.2)
            assert cluster.bookies[1].bookie_id in cluster.registered()      # the other one renews its lease
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        wait_until("the resumed bookie to register again", lambda: paused.bookie_id in cluster.registered(),
                   timeout=20, step=0.2)
        with BookKeeper(cluster.metadata_uri, timeout=60) as bk:      # and it serves: a ledger on both bookies
            lh = bk.create_ledger(2, 2, 2, digest_type="CRC32C", password=PASSWORD)
            assert lh.add_entries([b"after-resume-%d" % i for i in range(100)]) == list(range(100))
            lh.close()


def test_etcd_restarted_during_writes_loses_nothing_and_registrations_come_back(tmp_path):
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        with running_cluster(etcd.endpoint, tmp_path / "bookies", 3, "etcd", zkTimeout="4000") as cluster, \
                BookKeeper(cluster.metadata_uri, timeout=60) as bk:
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
            acked: list[int] = []
            errors: list[BaseException] = []
            stop = threading.Event()

            def writer():
                try:
                    while not stop.is_set():
                        acked.extend(lh.add_entries([b"e-%d" % len(acked)] * 50, max_outstanding=50))
                except BaseException as err:          # noqa: BLE001 - reported by the assertion below
                    errors.append(err)

            thread = threading.Thread(target=writer, name="etcd-restart-writer")
            thread.start()
            wait_until("some adds before the restart", lambda: len(acked) >= 500, timeout=30)
            etcd.kill()                               # SIGKILL: etcd's own crash recovery, not a clean stop
            at_kill = len(acked)
            wait_until("adds to go on while etcd is down", lambda: len(acked) >= at_kill + 2000, timeout=30)
            etcd.start()
            wait_until("adds after etcd is back", lambda: len(acked) >= at_kill + 4000, timeout=30)
            stop.set()
            thread.join(60)
            assert not errors, errors
            assert acked == list(range(len(acked)))
            lh.close()                                # the close is a metadata write: etcd answers again
            wait_until("every bookie registered after the restart", lambda: len(cluster.registered()) == 3,
                       timeout=30, step=0.2)
            with BookKeeper(cluster.metadata_uri, timeout=60) as other:
                rh = other.open_ledger(lh.ledger_id, PASSWORD)
                assert rh.metadata.last_entry_id == len(acked) - 1
                assert [e.data for e in rh.read_entries(0, len(acked) - 1)] == \
                    [b"e-%d" % (i - i % 50) for i in range(len(acked))]
    finally:
        etcd.stop()
