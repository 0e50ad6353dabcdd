"""Manual recovery, `bkfast shell recover`, on real bookie processes and a real ZooKeeper: a dry run changes
nothing, a real run re-replicates a stopped bookie's ledgers (fencing the open one), a second run is a no-op."""

from __future__ import annotations

import random

import pytest

from bkfast import BookKeeper
from bkfast.errors import BKError
from bkfast.meta.ledger_metadata import LedgerState

from .client_cluster import Cluster
from .replication_support import check_replicas, shell, shell_json

pytestmark = pytest.mark.zookeeper

PASSWORD = b"recover-tests"


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp("recover"), bookies=4)
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
