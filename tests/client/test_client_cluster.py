"""The ledger client against a real cluster: real ZooKeeper, 5 real bookie processes (issue 5)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time

import pytest

from bkfast import BookKeeper
from bkfast.errors import (
    BKLedgerFencedException,
    BKNoSuchLedgerExistsException,
    BKNotEnoughBookiesException,
    BKReadException,
    BKUnauthorizedAccessException,
)
from bkfast.meta.ledger_metadata import LedgerState
from tests.cluster_factory import cluster_fixture

pytestmark = pytest.mark.zookeeper

PASSWORD = b"client-tests"


cluster = cluster_fixture(bookies=5)


@pytest.fixture
def running(cluster):
    cluster.ensure_all_running()
    return cluster


@pytest.fixture(params=["v2", "v3"])
def protocol(request):
    return request.param


def _client(cluster, **conf):
    return BookKeeper(cluster.metadata_uri, timeout=60, **conf)


def test_e3_w2_a2_ten_thousand_random_entries_read_back(running, protocol):
    rng = random.Random(1234)
    payloads = [rng.randbytes(rng.choice([0, 1, 10, 100, 1000, 4000, rng.randint(0, 20000)])) for _ in range(10000)]
    with _client(running, protocol=protocol) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
        ids = lh.add_entries(payloads, max_outstanding=500)
        assert ids == list(range(10000))
        assert lh.last_add_confirmed == 9999
        entries = lh.read_entries(0, 9999)
        assert [e.data for e in entries] == payloads
        assert [e.entry_id for e in entries] == list(range(10000))
        assert entries[-1].length == sum(map(len, payloads))
        lh.close()
        md = bk.get_ledger_metadata(lh.ledger_id)
        assert md.state == LedgerState.CLOSED and md.last_entry_id == 9999
        assert md.length == sum(map(len, payloads))
        with bk.open_ledger(lh.ledger_id, PASSWORD) as rh:
            assert rh.last_add_confirmed == 9999
            assert [e.data for e in rh.read_entries(5000, 5100)] == payloads[5000:5101]
        bk.delete_ledger(lh.ledger_id)
        with pytest.raises(BKNoSuchLedgerExistsException):
            bk.open_ledger(lh.ledger_id, PASSWORD)


def test_ledger_znode_matches_java_layout(running):
    """Metadata lands at the hierarchical path as format v3 binary, with the header line Java writes."""
    with _client(running) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32", password=PASSWORD, custom_metadata={"app": "tests"})
        lid = lh.ledger_id
        s = f"{lid:010d}"
        data, stat = running.zk.get(f"{running.root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}")
        assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
        assert stat.version == 0
        lh.add_entry(b"x")
        lh.close()
        data, stat = running.zk.get(f"{running.root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}")
        assert stat.version == 1
        assert lid in bk.list_ledgers()


def test_wrong_password_and_missing_ledger(running):
    with _client(running) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entry(b"a")
        with pytest.raises(BKUnauthorizedAccessException):
            bk.open_ledger(lh.ledger_id, b"wrong", recovery=False)
        with pytest.raises(BKNoSuchLedgerExistsException):
            bk.open_ledger(987654321, PASSWORD)
        with pytest.raises(BKNotEnoughBookiesException):
            bk.create_ledger(6, 2, 2, password=PASSWORD)
        with pytest.raises(BKReadException):
            lh.read_entries(0, 5)
        lh.close()



def _write_while_killing(lh, payloads, chunk, outstanding, kill_after, victims):
    """Write `payloads` (add_entries in chunks, from a thread) and SIGKILL `victims` once `kill_after`
    entries are acknowledged; returns (acknowledged entry ids, errors the writer raised)."""
    acked: list[int] = []
    errors: list[BaseException] = []

    def writer():
        try:
            for start in range(0, len(payloads), chunk):
                acked.extend(lh.add_entries(payloads[start:start + chunk], max_outstanding=outstanding))
        except BaseException as exc:  # recorded for the caller's assertion
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    while len(acked) < kill_after and thread.is_alive():
        time.sleep(0.01)
    for victim in victims:
        victim.kill()
    thread.join(120)
    return acked, errors

def test_kill_bookie_while_writing_changes_ensemble(running):
    payload_rng = random.Random(7)
    with _client(running, addEntryTimeoutSec=5) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
        first_ensemble = lh.metadata.ensembles[0][1]
        payloads = [payload_rng.randbytes(512) for _ in range(6000)]
        victim = running.by_id(first_ensemble[1])
        acked, errors = _write_while_killing(lh, payloads, 500, 200, 1500, [victim])
        assert not errors, errors
        assert acked == list(range(len(payloads)))
        md = lh.metadata
        assert len(md.ensembles) >= 2, md.ensembles
        assert victim.bookie_id not in md.ensembles[-1][1]
        entries = lh.read_entries(0, len(payloads) - 1)
        assert [e.data for e in entries] == payloads
        lh.close()
        stored = bk.get_ledger_metadata(lh.ledger_id)
        assert len(stored.ensembles) >= 2 and stored.last_entry_id == len(payloads) - 1
        with _client(running) as other:
            rh = other.open_ledger(lh.ledger_id, PASSWORD)
            assert [e.data for e in rh.read_entries(0, len(payloads) - 1)] == payloads


def test_fencing_persistence_property(running):
    """A writer keeps adding while another client recovers the ledger: afterwards the writer is fenced,
    and every entry it saw acknowledged is <= the recovered last entry and readable. 50 trials."""
    rng = random.Random(2026)
    violations = []
    with _client(running) as writer_bk, _client(running) as recover_bk:
        for trial in range(50):
            lh = writer_bk.create_ledger(3, rng.choice([2, 3]), 2, digest_type="CRC32C", password=PASSWORD)
            acked: list[int] = []
            stop = threading.Event()
            fenced: list[BaseException] = []

            def writer(lh=lh, acked=acked, stop=stop, fenced=fenced):
                while not stop.is_set():
                    try:
                        acked.extend(lh.add_entries([b"e%d" % len(acked)] * 20, max_outstanding=20))
                    except BKLedgerFencedException as exc:
                        fenced.append(exc)
                        return

            thread = threading.Thread(target=writer)
            thread.start()
            time.sleep(rng.uniform(0.0, 0.15))
            rh = recover_bk.open_ledger(lh.ledger_id, PASSWORD, recovery=True)
            last = rh.metadata.last_entry_id
            stop.set()
            thread.join(60)
            with pytest.raises(BKLedgerFencedException):
                lh.add_entry(b"after recovery")
            if acked and max(acked) > last:
                violations.append((trial, max(acked), last))
            if last >= 0:
                got = rh.read_entries(0, last)
                assert [e.entry_id for e in got] == list(range(last + 1))
            lh.close()
    assert violations == []


def _written_to_one_bookie(bk, lh, entry_id: int, payload: bytes, bookie: str):
    """Send one entry to a single bookie, as a writer that dies mid-entry would."""
    from tests.reactor_thread import call

    handle = lh.async_handle
    entry = handle.digest.encode(entry_id, handle.last_add_confirmed, handle.length + len(payload), payload)
    call(bk.async_client.bookie_client.add_entry, bookie, handle.ledger_id, entry_id, entry, handle.digest.master_key)


@pytest.mark.parametrize("quorums,expected", [((3, 3, 1), "recovered"), ((3, 2, 2), "either")])
def test_recovery_of_entry_written_to_one_bookie(running, quorums, expected):
    e, w, a = quorums
    with _client(running) as bk:
        lh = bk.create_ledger(e, w, a, digest_type="CRC32C", password=PASSWORD)
        payloads = [b"entry-%d" % i for i in range(10)]
        lh.add_entries(payloads, max_outstanding=1)
        md = lh.metadata
        ensemble = md.ensembles[-1][1]
        target = ensemble[10 % e]                        # first bookie of entry 10's write set
        _written_to_one_bookie(bk, lh, 10, b"half-written", target)
        with _client(running) as other:
            rh = other.open_ledger(lh.ledger_id, PASSWORD, recovery=True)
            last = rh.metadata.last_entry_id
            if expected == "recovered":
                assert last == 10
            else:
                assert last in (9, 10)
            got = rh.read_entries(0, last)
            assert [x.data for x in got[:10]] == payloads
            if last == 10:
                assert got[10].data == b"half-written"
                # recovery re-added it to its whole write set: every replica serves it now
                from tests.reactor_thread import call

                handle = rh.async_handle
                for idx in range(w):
                    bookie = ensemble[(10 + idx) % e]
                    data = call(other.async_client.bookie_client.read_entry, bookie, handle.ledger_id, 10)
                    assert handle.digest.to_ledger_entry(data, 10).data == b"half-written"


def test_scoped_ledger_round_trip_and_placement(running):
    scope = 0x00000000_0000_0ABC
    # Make one bookie look like one without scope support (a Java bookie): rewrite its registration.
    from bkfast.meta.registration import bookie_service_info

    plain = running.bookies[0]
    node = f"{running.root}/available/{plain.bookie_id}"
    running.zk.set(node, bookie_service_info(plain.host, plain.port, scope_ids=False))
    try:
        time.sleep(0.5)
        with _client(running) as bk:
            for _ in range(5):
                lh = bk.create_ledger(4, 2, 2, digest_type="CRC32C", password=PASSWORD, scope_id=scope)
                assert plain.bookie_id not in lh.metadata.ensembles[0][1]
                lh.close()
            with pytest.raises(BKNotEnoughBookiesException):
                bk.create_ledger(5, 2, 2, password=PASSWORD, scope_id=scope)
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD, scope_id=scope)
            assert lh.scope_id == scope and lh.qualified_name == f"{scope:016x}{lh.ledger_id:016x}"
            ids = lh.add_entries([b"scoped-%d" % i for i in range(100)])
            assert ids == list(range(100))
            assert [e.data for e in lh.read_entries(0, 99)] == [b"scoped-%d" % i for i in range(100)]
            lh.close()
            s = f"{lh.ledger_id:019d}"
            path = f"{running.root}/scoped/{scope:016x}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"
            assert running.zk.exists(path) is not None
            rh = bk.open_ledger(lh.ledger_id, PASSWORD, scope_id=scope)
            assert rh.last_add_confirmed == 99
            assert rh.read_entry(42).data == b"scoped-42"
            assert lh.ledger_id in bk.list_ledgers(scope_id=scope)
            bk.delete_ledger(lh.ledger_id, scope_id=scope)
            assert running.zk.exists(path) is None
            with pytest.raises(BKNoSuchLedgerExistsException):
                bk.open_ledger(lh.ledger_id, PASSWORD, scope_id=scope)
    finally:
        running.zk.set(node, bookie_service_info(plain.host, plain.port))


def test_tailing_reader_sees_every_entry(running):
    with _client(running) as bk, _client(running) as reader_bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
        rh = reader_bk.open_ledger(lh.ledger_id, PASSWORD, recovery=False)
        seen = []

        def tail():
            for entry in rh.tail(0, poll_timeout_ms=500):
                seen.append(entry.data)

        thread = threading.Thread(target=tail)
        thread.start()
        for i in range(200):
            lh.add_entry(b"tail-%d" % i)
        lh.close()
        thread.join(60)
        assert seen == [b"tail-%d" % i for i in range(200)]


def test_explicit_lac_and_force(running):
    with _client(running, explicitLacInterval=100, protocol="v3") as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
        lh.add_entries([b"x"] * 10)
        assert lh.force() == 9
        deadline = time.monotonic() + 10
        rh = bk.open_ledger(lh.ledger_id, PASSWORD, recovery=False)
        while rh.read_explicit_lac() < 9 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rh.read_explicit_lac() == 9
        lh.close()


def test_create_ledger_adv(running):
    with _client(running) as bk:
        lh = bk.create_ledger_adv(3, 2, 2, password=PASSWORD, ledger_id=424242)
        assert lh.ledger_id == 424242
        results = [lh.add_entry_async(i, b"adv-%d" % i) for i in (2, 0, 1, 3)]
        assert sorted(r.wait(30) for r in results) == [0, 1, 2, 3]
        assert lh.last_add_confirmed == 3
        lh.close()
        assert [e.data for e in bk.open_ledger(424242, PASSWORD).read_entries(0, 3)] == [b"adv-%d" % i
                                                                                         for i in range(4)]


def test_frozen_bookie_times_out_and_is_replaced(running):
    """A bookie of the ensemble stops answering (SIGSTOP, the socket stays open): its adds time out
    after addEntryTimeoutSec, the writer replaces it and goes on, and every acknowledged entry reads back."""
    with _client(running, addEntryTimeoutSec=2) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
        lh.add_entries([b"before-%d" % i for i in range(30)])
        frozen = running.by_id(lh.metadata.ensembles[0][1][2])
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            ids = lh.add_entries([b"after-%d" % i for i in range(30)], max_outstanding=10)
            waited = time.monotonic() - started
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        assert ids == list(range(30, 60))
        assert waited >= 1.5, "adds to the frozen bookie were acknowledged without it"
        md = lh.metadata
        assert len(md.ensembles) == 2 and frozen.bookie_id not in md.ensembles[-1][1], md.ensembles
        expected = [b"before-%d" % i for i in range(30)] + [b"after-%d" % i for i in range(30)]
        assert [e.data for e in lh.read_entries(0, 59)] == expected
        lh.close()


def test_throttle_holds_adds_back_and_close_waits_for_them(running):
    """throttle=50 (adds/s per handle): of 40 adds issued at once only the first is sent; the rest wait
    for permits, in order; close() waits for all of them."""
    from tests.reactor_thread import call

    with _client(running, throttle=50) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        handle = lh.async_handle
        done: list[tuple] = []

        def issue():
            for i in range(40):
                handle.async_add_entry(b"t-%d" % i, lambda err, e, ctx: done.append((err, e, ctx)), i)
            return handle.pending_adds, len(handle._core.pending)

        pending, sent = call(issue)
        assert pending == 40 and sent <= 2, (pending, sent)
        lh.close()
        assert done == [(None, i, i) for i in range(40)]
        assert lh.last_add_confirmed == 39
        assert bk.get_ledger_metadata(lh.ledger_id).last_entry_id == 39

def test_throttled_adv_handle_refuses_waiting_duplicates_and_fencing_fails_the_waiting_adds(running):
    """throttle=1: of entries 1, 2, 3 of a fenced ledger only 1 is sent; 2 and 3 wait for permits. A second
    add of 1 (sent) or 2 (waiting) is refused as a duplicate; the bookie's fenced answer to 1 fails 1 and
    the adds still waiting, each with BKLedgerFencedException (callback or Deferred, as it was added)."""
    from twisted.internet import defer

    from bkfast.errors import BKDuplicateEntryIdException
    from tests.reactor_thread import call

    with _client(running, throttle=1) as bk, _client(running) as recover_bk:
        lh = bk.create_ledger_adv(3, 2, 2, password=PASSWORD)
        handle = lh.async_handle
        lh.add_entry(0, b"adv-0")
        time.sleep(1.1)                          # entry 1's permit is there when it is added
        recover_bk.open_ledger(lh.ledger_id, PASSWORD, recovery=True)
        called_back: list[tuple] = []

        def issue():
            outcomes = [handle.add_entry(i, b"adv-%d" % i) for i in (1, 2)]
            handle.async_add_entry(3, b"adv-3", lambda err, e, ctx: called_back.append((type(err), e, ctx)), "c")
            waiting = handle.pending_adds
            outcomes += [handle.add_entry(1, b"again"), handle.add_entry(2, b"again")]
            return waiting, defer.DeferredList(outcomes, consumeErrors=True)

        waiting, outcomes = call(issue)
        assert waiting == 3
        results = call(lambda: outcomes)
        errors = [type(failure.value) for ok, failure in results if not ok]
        assert errors == [BKLedgerFencedException, BKLedgerFencedException,
                          BKDuplicateEntryIdException, BKDuplicateEntryIdException], errors
        assert called_back == [(BKLedgerFencedException, 3, "c")]
        assert handle.pending_adds == 0


@contextlib.contextmanager
def _first_replica_frozen(running, bk, prefix: bytes):
    """A closed 6-entry ledger opened for reading, with the first replica of entries 0 and 2 SIGSTOPped
    until the block ends; yields the read handle."""
    lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
    lh.add_entries([prefix + b"-%d" % i for i in range(6)])
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, PASSWORD)
    frozen = running.by_id(rh.metadata.ensembles[0][1][0])
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        yield rh
    finally:
        os.kill(frozen.pid, signal.SIGCONT)


def test_speculative_read_goes_to_the_next_replica(running):
    """With the first replica frozen (SIGSTOP), a read is answered by the second one after
    speculativeReadTimeout, long before the 60 s read timeout would fail the first request."""
    from bkfast.errors import BKTimeoutException

    with _client(running, speculativeReadTimeout=200, readEntryTimeoutSec=60) as bk, \
            _first_replica_frozen(running, bk, b"spec") as rh:
        rh._timeout = 20          # fail the test (BKTimeoutException) if no replica answers in 20 s
        try:
            assert rh.read_entry(0).data == b"spec-0"
            assert [e.data for e in rh.read_entries(0, 5)] == [b"spec-%d" % i for i in range(6)]
        except BKTimeoutException:
            pytest.fail("the read waited for the frozen bookie instead of asking the next replica")


def test_read_from_a_frozen_replica_times_out_and_goes_to_the_next(running):
    """Speculative reads off: a read whose first replica is frozen (SIGSTOP) fails over to the next
    replica after readEntryTimeoutSec."""
    with _client(running, speculativeReadTimeout=0, readEntryTimeoutSec=2) as bk:
        with _first_replica_frozen(running, bk, b"slow") as rh:
            started = time.monotonic()
            assert [e.data for e in rh.read_entries(0, 5)] == [b"slow-%d" % i for i in range(6)]
            waited = time.monotonic() - started
        assert waited >= 1.5, "answered without waiting for the frozen replica's timeout"

ASYNCIO_SCRIPT = """
import asyncio, sys
from twisted.internet import asyncioreactor
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
asyncioreactor.install(loop)
from twisted.internet import reactor
from bkfast.client import AsyncBookKeeper

async def main(loop):
    bk = await AsyncBookKeeper.connect(sys.argv[1], reactor).asFuture(loop)
    lh = await bk.create_ledger(3, 2, 2, password=b"aio").asFuture(loop)
    ids = [await lh.add_entry(b"aio-%d" % i).asFuture(loop) for i in range(20)]
    await lh.close().asFuture(loop)
    rh = await bk.open_ledger(lh.ledger_id, b"aio").asFuture(loop)
    entries = await rh.read_entries(0, 19).asFuture(loop)
    assert [e.data for e in entries] == [b"aio-%d" % i for i in range(20)] and ids == list(range(20))
    await bk.close().asFuture(loop)
    print("asyncio ok", lh.ledger_id)

def run():
    task = loop.create_task(main(loop))
    task.add_done_callback(lambda t: reactor.stop())
    reactor.run()
    task.result()

run()
"""


def test_async_api_awaitable_from_asyncio(running):
    """The Deferred API under Twisted's asyncio reactor, awaited from asyncio coroutines."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", ASYNCIO_SCRIPT, running.metadata_uri], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "asyncio ok" in proc.stdout


def test_a_program_that_never_closes_its_client_still_exits(running):
    import subprocess
    import sys

    script = ("from bkfast import BookKeeper\n"
              "import sys\n"
              "bk = BookKeeper(sys.argv[1])\n"
              "lh = bk.create_ledger(3, 2, 2, password=b'p')\n"
              "lh.add_entry(b'x')\n"
              "print('added', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script, running.metadata_uri], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "added" in proc.stdout


def test_two_bookies_die_at_once_while_writing(running):
    """Two of the three ensemble bookies are killed together: both are replaced (the remaining two
    bookies of the cluster), and every acknowledged entry survives on the new ensemble."""
    with _client(running, addEntryTimeoutSec=5) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
        ensemble = lh.metadata.ensembles[0][1]
        payloads = [b"two-%d" % i for i in range(4000)]
        victims = [running.by_id(ensemble[0]), running.by_id(ensemble[2])]
        acked, errors = _write_while_killing(lh, payloads, 400, 100, 800, victims)
        assert not errors, errors
        assert acked == list(range(len(payloads)))
        last = lh.metadata.ensembles[-1][1]
        assert not {v.bookie_id for v in victims} & set(last)
        assert [e.data for e in lh.read_entries(0, len(payloads) - 1)] == payloads
        lh.close()


@pytest.mark.parametrize("extra", [[], ["--rate", "2000", "--protocol", "v3"]])
def test_bench_ledger_json(running, extra):
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "ledger", "--metadata-uri",
                           running.metadata_uri, "--duration", "1", "--outstanding", "200", "--size", "512",
                           "--tailing", "50", "--json", *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for key in ("adds_per_s", "p50_ms", "p95_ms", "p99_ms", "p999_ms"):
        assert result[key] is not None and result[key] > 0, key
    assert result["errors"] == 0 and result["adds"] > 0
    assert result["read"]["entries"] == result["adds"]
    assert result["tailing"]["entries"] == 50
    with _client(running) as bk:
        md = bk.get_ledger_metadata(result["ledger_id"])
        assert md.is_closed and md.last_entry_id == result["adds"] - 1


def test_every_acknowledged_entry_survives_killing_the_whole_ensemble(running):
    """SIGKILL every bookie of the ensemble right after the adds were acknowledged, restart them on the
    same dirs and ports: recovery from a new client finds every acknowledged entry (journal replay)."""
    rng = random.Random(99)
    payloads = [rng.randbytes(rng.randint(1, 3000)) for _ in range(3000)]
    with _client(running) as bk:
        lh = bk.create_ledger(3, 3, 2, digest_type="CRC32C", password=PASSWORD)
        ids = lh.add_entries(payloads, max_outstanding=300)
        assert ids == list(range(len(payloads)))
        ensemble = lh.metadata.ensembles[-1][1]
        for bookie_id in ensemble:
            running.by_id(bookie_id).kill()
    running.ensure_all_running()
    with _client(running) as other:
        rh = other.open_ledger(lh.ledger_id, PASSWORD, recovery=True)
        assert rh.metadata.last_entry_id == len(payloads) - 1
        assert [e.data for e in rh.read_entries(0, len(payloads) - 1)] == payloads


def test_deferred_sync_ledger_and_force(running):
    """WriteFlag.DEFERRED_SYNC: adds go over v3 with the flag, and force() makes them durable."""
    with _client(running) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD, deferred_sync=True)
        ids = lh.add_entries([b"ds-%d" % i for i in range(300)], max_outstanding=50)
        assert ids == list(range(300))
        client = bk.async_client.bookie_client       # before force(), which always uses v3 itself
        assert {ch.bookie_id for ch in client.channels if ch.v3} == set(lh.metadata.ensembles[0][1])
        assert not any(not ch.v3 for ch in client.channels)
        assert lh.force() == 299
        assert [e.data for e in lh.read_entries(0, 299)] == [b"ds-%d" % i for i in range(300)]
        lh.close()
        assert bk.get_ledger_metadata(lh.ledger_id).last_entry_id == 299
