"""Manual recovery, `bkfast shell recover`, on real bookie processes and a real ZooKeeper: a dry run changes
nothing, a real run re-replicates a stopped bookie's ledgers (fencing the open one), a second run is a no-op;
`--skip-open-ledgers`, `--target`, exit code 1 when entries are lost; and the same recovery and decommission
through a bookie's admin HTTP port (`PUT /api/v1/autorecovery/bookie`, `.../decommission`)."""

from __future__ import annotations

import random
import time

import pytest

from bkfast import BookKeeper
from bkfast.errors import BKError
from bkfast.meta.ledger_metadata import LedgerState
from tests.client_cluster import Cluster
from tests.replication_support import admin_request, check_replicas, shell, shell_json

pytestmark = pytest.mark.zookeeper

PASSWORD = b"recover-tests"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("recover"), bookies=4,
                httpServerEnabled="true", httpServerPort="0")
    try:
        yield c
    finally:
        c.stop()


def test_dry_run_then_recover_then_nothing_left(cluster):
    rng = random.Random(13)
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        victim = None
        closed: dict[int, dict[int, bytes]] = {}
        for n in range(4):
            lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C", password=PASSWORD)
            victim = victim or lh.metadata.ensembles[0][1][0]
            payloads = [rng.randbytes(rng.randint(1, 3000)) for _ in range(60 + n)]
            lh.add_entries(payloads)
            lh.close()
            closed[lh.ledger_id] = dict(enumerate(payloads))
        empty = bk.create_ledger(3, 2, 2, password=PASSWORD)
        empty.close()
        # an open ledger whose ensemble holds the victim, with a writer still holding it
        writer = None
        for _ in range(20):
            lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
            if victim in lh.metadata.ensembles[0][1]:
                writer = lh
                break
            lh.close()
        assert writer is not None
        open_payloads = [b"open-%d" % i for i in range(40)]
        writer.add_entries(open_payloads)
        before = {lid: bk.get_ledger_metadata(lid) for lid in bk.list_ledgers()}
        affected = {lid for lid, md in before.items() if victim in md.all_bookies}
        assert writer.ledger_id in affected and len(affected) >= 2

        cluster.by_id(victim).stop()
        cluster.wait_registered(3)

        # a user's mistakes: one line, exit 1
        bad = shell(cluster, "recover", "not-a-bookie")
        assert bad.returncode == 1 and "not a bookie id" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
        bad = shell(cluster, "recover", victim, "--target", "127.0.0.1:1")
        assert bad.returncode == 1 and "not a registered writable bookie" in bad.stderr

        _rc, plan = shell_json(cluster, "recover", victim, "--dry-run")
        assert plan["dryRun"] and plan["entriesCopied"] == 0
        planned = {row["ledgerId"]: row for row in plan["ledgers"]}
        assert set(planned) == affected
        assert planned[writer.ledger_id]["fenceRequired"] is True
        assert all(victim in seg["oldEnsemble"] and victim not in seg["newEnsemble"]
                   for row in planned.values() for seg in row["segments"])
        text = shell(cluster, "recover", victim, "--dry-run")
        assert "[fence required]" in text.stdout and f"{victim}*" in text.stdout
        after_dry = {lid: bk.get_ledger_metadata(lid) for lid in bk.list_ledgers()}
        assert after_dry == before                   # nothing changed, the open ledger is still OPEN

        _rc, done = shell_json(cluster, "recover", victim)
        assert done["ok"] and done["ledgersReplicated"] == len(affected) and done["ledgersFenced"] == 1
        assert done["entriesCopied"] > 0 and done["bytesCopied"] > 0
        with pytest.raises(BKError):
            writer.add_entry(b"after-fence")                         # fenced by the recovery
        for lid in bk.list_ledgers():
            md = bk.get_ledger_metadata(lid)
            expected = closed.get(lid) or (dict(enumerate(open_payloads)) if lid == writer.ledger_id else None)
            check_replicas(bk, lid, md, {victim}, expected)
        md = bk.get_ledger_metadata(writer.ledger_id)
        assert md.state == LedgerState.CLOSED and md.last_entry_id == len(open_payloads) - 1
        assert bk.get_ledger_metadata(empty.ledger_id).last_entry_id == -1

        _rc, again = shell_json(cluster, "recover", victim)
        assert again["ok"] and again["ledgersAffected"] == 0 and again["entriesCopied"] == 0
    finally:
        bk.close()


def _wait(what, predicate, timeout=60.0, step=0.25):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def _fresh(cluster, bk):
    """Every bookie of the cluster running and no ledger left from an earlier test."""
    cluster.ensure_all_running()
    for lid in bk.list_ledgers():
        bk.delete_ledger(lid)


def _ledger_on(bk, on: str, n: int, e=2, w=2, a=2, avoid=(), close=True):
    """A ledger whose first ensemble holds `on` and none of `avoid`, with n entries; (handle, payloads)."""
    for _ in range(200):
        lh = bk.create_ledger(e, w, a, digest_type="CRC32C", password=PASSWORD)
        members = set(lh.metadata.ensembles[0][1])
        if on in members and not members & set(avoid):
            break
        lh.close()
        bk.delete_ledger(lh.ledger_id)
    else:
        raise AssertionError(f"no ensemble with {on} and without {avoid}")
    payloads = [b"%d-%d-" % (lh.ledger_id, i) * 20 for i in range(n)]
    if payloads:
        lh.add_entries(payloads)
    if close:
        lh.close()
    return lh, dict(enumerate(payloads))


def test_skip_open_ledgers_target_and_exit_code_when_entries_are_lost(cluster):
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        _fresh(cluster, bk)
        victim, target = cluster.bookies[0].bookie_id, cluster.bookies[1].bookie_id
        # E=2 ledgers on the victim and not on the target: the placement policy could pick either of two
        # bookies for each, --target must pick the target for all six
        closed = {}
        for _ in range(6):
            lh, payloads = _ledger_on(bk, victim, 20, avoid=[target])
            closed[lh.ledger_id] = payloads
        writer, open_payloads = _ledger_on(bk, victim, 10, e=3, close=False)
        single, _ = _ledger_on(bk, victim, 12, e=1, w=1, a=1)        # its only replica dies with the victim
        open_md, single_md = bk.get_ledger_metadata(writer.ledger_id), bk.get_ledger_metadata(single.ledger_id)
        cluster.by_id(victim).stop()
        cluster.wait_registered(3)

        rc, out = shell_json(cluster, "recover", victim, "--skip-open-ledgers", "--target", target, ok=False)
        assert rc == 1 and out["ok"] is False
        rows = {row["ledgerId"]: row for row in out["ledgers"]}
        assert rows[single.ledger_id]["status"] == "entries-lost"
        assert rows[single.ledger_id]["lostEntries"] == list(range(12))
        assert rows[writer.ledger_id]["status"] == "skipped-open" and not rows[writer.ledger_id]["fenced"]
        assert out["ledgersSkippedOpen"] == 1 and out["ledgersFenced"] == 0 and out["ledgersFailed"] == 1
        assert out["ledgersReplicated"] == len(closed)
        for lid, expected in closed.items():
            assert rows[lid]["status"] == "replicated"
            md = bk.get_ledger_metadata(lid)
            assert target in md.all_bookies, (lid, md.ensembles)
            check_replicas(bk, lid, md, {victim}, expected)
        assert bk.get_ledger_metadata(single.ledger_id) == single_md          # never pointed at an empty bookie
        assert bk.get_ledger_metadata(writer.ledger_id) == open_md            # skipped: not fenced, still OPEN
        assert writer.add_entry(b"still writable") == len(open_payloads)     # (its own ensemble change)
        writer.close()

        again = shell(cluster, "recover", victim)                             # text output, no option
        assert again.returncode == 1, again.stdout + again.stderr
        assert f"ledger {single.ledger_id}: entries-lost" in again.stdout and "LOST entries" in again.stdout
        check_replicas(bk, writer.ledger_id, bk.get_ledger_metadata(writer.ledger_id), {victim},
                       {**open_payloads, len(open_payloads): b"still writable"})
        bk.delete_ledger(single.ledger_id)
    finally:
        bk.close()


def test_recover_and_decommission_over_the_admin_http_port(cluster):
    bk = BookKeeper(cluster.metadata_uri, timeout=60)
    try:
        _fresh(cluster, bk)
        api, victim, leaving = cluster.bookies[0], cluster.bookies[2], cluster.bookies[3]
        ledgers = {}
        for on, avoid in [(victim, [])] * 3 + [(leaving, [victim.bookie_id])] * 3:
            lh, payloads = _ledger_on(bk, on.bookie_id, 15, avoid=avoid)
            ledgers[lh.ledger_id] = payloads
        cookie = f"{cluster.root}/cookies/%s"

        def off(bookie) -> bool:
            return cluster.zk.exists(cookie % bookie.bookie_id) is None and not any(
                bookie.bookie_id in bk.get_ledger_metadata(lid).all_bookies for lid in ledgers)

        victim.stop()
        cluster.wait_registered(3)
        assert admin_request(api, "PUT", "autorecovery/bookie", {"bookie_src": victim.bookie_id})[0] == 400
        assert admin_request(api, "GET", "autorecovery/bookie")[0] == 405
        status, text = admin_request(api, "PUT", "autorecovery/bookie", {"bookie_src": [victim.bookie_id],
                                                                  "delete_cookie": True})
        assert (status, text) == (200, "Success send recovery request command."), text
        _wait("the victim's ledgers re-replicated and its cookie deleted", lambda: off(victim))
        cluster.bookies.remove(victim)                      # no cookie any more: it cannot come back

        assert admin_request(api, "POST", "autorecovery/decommission", {"bookie_src": leaving.bookie_id})[0] == 405
        status, text = admin_request(api, "PUT", "autorecovery/decommission", {"bookie_src": leaving.bookie_id})
        assert (status, text) == (200, f"Success send decommission Bookie command {leaving.bookie_id}"), text
        _wait("the decommissioned bookie's ledgers re-replicated and its cookie deleted", lambda: off(leaving))
        assert leaving.alive()                              # a live bookie: decommission does not stop it
        leaving.stop()
        cluster.bookies.remove(leaving)
        for lid, expected in ledgers.items():
            check_replicas(bk, lid, bk.get_ledger_metadata(lid), {victim.bookie_id, leaving.bookie_id}, expected)
    finally:
        bk.close()
