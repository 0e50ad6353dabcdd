"""`bkfast shell` against a real cluster: a real ZooKeeper, 3 real `bkfast bookie` processes. Cluster and ledger
commands with --json parsed back, one-line errors, bookiesanity on a running bookie, then the offline commands
and the cookie commands on a stopped bookie's directories."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from click.testing import CliRunner

from bkfast import BookKeeper
from bkfast.cli.main import main
from tests.cluster_factory import cluster_fixture

pytestmark = pytest.mark.zookeeper

PASSWORD = b"shell-tests"


cluster = cluster_fixture(bookies=3, dbStorage_writeCacheMaxSizeMb="16", dbStorage_readAheadCacheMaxSizeMb="16")


@pytest.fixture(scope="module")
def ledger(cluster):
    """A closed ledger of 20 entries "entry-<i>" (E3 W2 A2)."""
    with BookKeeper(cluster.metadata_uri, timeout=60) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PASSWORD)
        lh.add_entries([f"entry-{i}".encode() for i in range(20)])
        lh.close()
        return lh.ledger_id


def shell(*args, ok=True, input=None):
    result = CliRunner().invoke(main, ["shell", *args], input=input)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def shell_json(*args):
    return json.loads(shell(*args, "--json").stdout)


def bookie_conf(cluster, bookie, tmp_path, name: str = "bookie", **extra) -> str:
    conf = {
        "metadataServiceUri": cluster.metadata_uri,
        "journalDirectory": str(bookie.data_dir / "journal"),
        "ledgerDirectories": str(bookie.data_dir / "ledgers"),
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "listeningInterface": "lo",
        "bookiePort": str(bookie.port),
        "dbStorage_writeCacheMaxSizeMb": "16",
        "dbStorage_readAheadCacheMaxSizeMb": "16",
        **extra,
    }
    path = tmp_path / f"{name}-{bookie.port}.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return str(path)


# --- cluster commands ---------------------------------------------------------------------------------


def test_whatisinstanceid_and_clusterinfo(cluster):
    iid = cluster.zk.get(cluster.root + "/INSTANCEID")[0].decode()
    assert shell_json("whatisinstanceid", "--metadata-uri", cluster.metadata_uri) == {"instanceId": iid}
    assert shell("whatisinstanceid", "--metadata-uri", cluster.metadata_uri).output.strip() == iid
    info = shell_json("clusterinfo", "--metadata-uri", cluster.metadata_uri)
    assert info["instanceId"] == iid and info["layout"] == "hierarchical"
    assert (info["totalBookiesCount"], info["writableBookiesCount"], info["readonlyBookiesCount"]) == (3, 3, 0)
    assert sorted(info["bookies"]) == sorted(b.bookie_id for b in cluster.bookies)
    assert info["auditorElected"] is False and info["underReplicatedLedgers"] == 0
    assert info["ledgerReplicationEnabled"] is True and info["unavailableBookiesCount"] == 0


def test_listbookies(cluster):
    rows = shell_json("listbookies", "--metadata-uri", cluster.metadata_uri)
    assert sorted(r["bookieId"] for r in rows) == sorted(b.bookie_id for b in cluster.bookies)
    assert all(r["host"] == "127.0.0.1" and not r["readOnly"] for r in rows)
    assert all(r["properties"].get("bkfast.scopeIds") == "1" for r in rows)
    assert shell_json("listbookies", "--readonly", "--metadata-uri", cluster.metadata_uri) == []
    assert len(shell_json("listbookies", "--readwrite", "--metadata-uri", cluster.metadata_uri)) == 3
    text = shell("listbookies", "--zk-connect", cluster.zk_connect, "--root", cluster.root).output.splitlines()
    assert sorted(line.split("\t")[0] for line in text) == sorted(b.bookie_id for b in cluster.bookies)
    r = shell("listbookies", "--readwrite", "--readonly", "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 2


def test_bookieinfo_reports_each_bookies_disk(cluster):
    rows = shell_json("bookieinfo", "--metadata-uri", cluster.metadata_uri)
    assert sorted(r["bookieId"] for r in rows) == sorted(b.bookie_id for b in cluster.bookies)
    for r in rows:
        assert r["state"] == "writable"
        assert 0 < r["freeDiskSpace"] <= r["totalDiskSpace"]


def test_initnewcluster_whatisinstanceid_nukeexistingcluster(cluster):
    uri = f"zk+longhierarchical://{cluster.zk_connect}/shell-nuke-{uuid.uuid4().hex[:8]}/ledgers"
    root = uri.split(cluster.zk_connect, 1)[1]
    created = shell_json("initnewcluster", "--metadata-uri", uri)
    assert created["layout"] == "longhierarchical" and created["root"] == root
    assert shell_json("whatisinstanceid", "--metadata-uri", uri)["instanceId"] == created["instanceId"]
    r = shell("initnewcluster", "--metadata-uri", uri, ok=False)
    assert r.exit_code == 1 and "already exists" in r.output and len(r.output.splitlines()) == 1
    formatted = shell_json("metaformat", "--force", "--metadata-uri", uri)
    assert formatted["deleted"] and formatted["layout"] == "longhierarchical"
    assert formatted["instanceId"] != created["instanceId"]

    r = shell("nukeexistingcluster", "--metadata-uri", uri, ok=False)
    assert r.exit_code == 1 and f"--instance-id {formatted['instanceId']}" in r.output
    r = shell("nukeexistingcluster", "--instance-id", "wrong", "--metadata-uri", uri, ok=False)
    assert r.exit_code == 1 and "not wrong" in r.output
    assert cluster.zk.exists(root) is not None
    out = shell_json("nukeexistingcluster", "--instance-id", formatted["instanceId"], "--metadata-uri", uri)
    assert out["root"] == root and out["deletedNodes"] >= 5
    assert cluster.zk.exists(root) is None
    r = shell("whatisinstanceid", "--metadata-uri", uri, ok=False)
    assert r.exit_code == 1 and "initnewcluster" in r.output
    cluster.zk.delete(root.rsplit("/", 1)[0], recursive=True)


# --- ledger commands ----------------------------------------------------------------------------------


def test_listledgers_and_ledgermetadata(cluster, ledger):
    ids = [r["ledgerId"] for r in shell_json("listledgers", "--metadata-uri", cluster.metadata_uri)]
    assert ledger in ids
    with_meta = {r["ledgerId"]: r["metadata"] for r in
                 shell_json("listledgers", "--meta", "--metadata-uri", cluster.metadata_uri)}
    md = with_meta[ledger]
    assert (md["state"], md["lastEntryId"], md["ensembleSize"], md["writeQuorumSize"]) == ("CLOSED", 19, 3, 2)
    assert sorted(b["id"] for b in md["allEnsembles"]["0"]) == sorted(b.bookie_id for b in cluster.bookies)
    assert md["closed"] is True and md["password"] == "c2hlbGwtdGVzdHM="          # base64 of the password
    assert shell_json("ledgermetadata", str(ledger), "--metadata-uri", cluster.metadata_uri) == md
    qualified = f"{0:016x}{ledger:016x}"
    assert shell_json("ledgermetadata", "--ledger-qualified-name", qualified,
                      "--metadata-uri", cluster.metadata_uri) == md
    assert shell_json("ledgermetadata", str(ledger), "--ledger-scope-id", "0",
                      "--metadata-uri", cluster.metadata_uri) == md
    text = shell("listledgers", "--metadata-uri", cluster.metadata_uri).output
    assert f"ledgerID: {ledger}" in text.splitlines()


def test_readledger_text_hex_and_range(cluster, ledger):
    rows = shell_json("readledger", str(ledger), "--metadata-uri", cluster.metadata_uri)
    assert [(r["entryId"], r["data"]) for r in rows] == [(i, f"entry-{i}") for i in range(20)]
    rows = shell_json("readledger", str(ledger), "--first", "5", "--last", "7", "--as", "hex",
                      "--metadata-uri", cluster.metadata_uri)
    assert [bytes.fromhex(r["data"]) for r in rows] == [b"entry-5", b"entry-6", b"entry-7"]
    text = shell("readledger", str(ledger), "-fe", "3", "-le", "3", "--metadata-uri", cluster.metadata_uri).output
    assert text.splitlines() == ["entry 3\t7 bytes\tentry-3"]


def test_simpletest_and_deleteledger(cluster):
    out = shell_json("simpletest", "--ensemble", "3", "--write-quorum", "3", "--ack-quorum", "2", "--entries", "200",
                     "--keep", "--metadata-uri", cluster.metadata_uri)
    assert out["entries"] == 200 and out["addsPerSecond"] > 0 and out["readsPerSecond"] > 0
    lid = out["ledgerId"]
    md = shell_json("ledgermetadata", str(lid), "--metadata-uri", cluster.metadata_uri)
    assert (md["lastEntryId"], md["writeQuorumSize"]) == (199, 3)
    r = shell("deleteledger", str(lid), "--metadata-uri", cluster.metadata_uri, ok=False, input="n\n")
    assert r.exit_code == 1
    assert shell_json("deleteledger", str(lid), "--force", "--metadata-uri", cluster.metadata_uri)["deleted"]
    r = shell("ledgermetadata", str(lid), "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 1 and r.output == f"Error: ledger {lid} does not exist\n"
    text = shell("simpletest", "-e", "2", "-w", "2", "-a", "1", "-n", "10", "--metadata-uri", cluster.metadata_uri)
    assert text.output.splitlines()[-1] == "ledger deleted"
    r = shell("simpletest", "-e", "2", "-w", "3", "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 2


# --- mistakes: one line, exit 1 (2 for usage), no traceback ---------------------------------------------


def test_mistakes_are_one_line_without_traceback(cluster, tmp_path):
    conf = tmp_path / "down.conf"
    conf.write_text("metadataServiceUri=zk+hierarchical://127.0.0.1:1/ledgers\nzkTimeout=1000\n")
    for command in ("listbookies", "listledgers", "clusterinfo"):
        r = shell(command, "--conf", str(conf), ok=False)
        assert r.exit_code == 1, r.output
        assert r.output.startswith("Error: cannot connect to ZooKeeper at 127.0.0.1:1")
        assert len(r.output.splitlines()) == 1 and "Traceback" not in r.output
    for command in ("listbookies", "listledgers"):
        r = shell(command, "--metadata-uri", f"embedded://{tmp_path}/meta", ok=False)
        assert r.exit_code == 1 and "start the sandbox with --zk" in r.output and len(r.output.splitlines()) == 1
    assert not (tmp_path / "meta").exists()
    r = shell("readledger", "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 2 and "no ledger given" in r.output
    r = shell("readledger", "1", "--ledger-qualified-name", "x" * 32, "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 2
    r = shell("ledgermetadata", "--ledger-qualified-name", "12", "--metadata-uri", cluster.metadata_uri, ok=False)
    assert r.exit_code == 2 and "32 hex digits" in r.output
    r = shell("listbookies", "--metadata-uri", cluster.metadata_uri, "--zk-connect", "x:1", ok=False)
    assert r.exit_code == 2
    uninitialized = f"zk+hierarchical://{cluster.zk_connect}/never-{uuid.uuid4().hex[:8]}/ledgers"
    r = shell("listbookies", "--metadata-uri", uninitialized, ok=False)
    assert r.exit_code == 1 and "initnewcluster" in r.output and len(r.output.splitlines()) == 1
    r = shell("listbookies", "--verbose", "--metadata-uri", uninitialized, ok=False)
    assert r.exit_code == 1 and "Traceback" in r.output


def test_a_misspelled_key_in_conf_is_reported(cluster, tmp_path, caplog):
    conf = tmp_path / "typo.conf"
    conf.write_text(f"metadataServiceUri={cluster.metadata_uri}\njournalDirectores=/tmp/j\n")
    with caplog.at_level("WARNING", logger="bkfast.conf"):
        shell("whatisinstanceid", "--conf", str(conf))
    assert "journalDirectores is not a key bkfast reads; did you mean journalDirectories?" in caplog.messages


# --- one bookie: sanity while running, then its files and cookies once stopped ----------------------------


def test_bookiesanity_on_a_running_bookie(cluster, tmp_path):
    conf = bookie_conf(cluster, cluster.bookies[0], tmp_path)
    out = shell_json("bookiesanity", "--conf", conf)
    assert out["ok"] and out["bookieId"] == cluster.bookies[0].bookie_id and out["entries"] == 10
    wrong_port = bookie_conf(cluster, cluster.bookies[0], tmp_path, "port1", bookiePort="1")
    r = shell("bookiesanity", "--conf", wrong_port, ok=False)
    assert r.exit_code == 1 and "127.0.0.1:1 is not registered" in r.output


def test_offline_commands_on_a_stopped_bookie(cluster, ledger, tmp_path):
    bookie = cluster.bookies[2]
    conf = bookie_conf(cluster, bookie, tmp_path)
    r = shell("localconsistencycheck", "--conf", conf, ok=False)            # running: RocksDB is locked
    assert r.exit_code == 1 and "stop the bookie first" in r.output and len(r.output.splitlines()) == 1
    r = shell("bookieformat", "--force", "--conf", conf, ok=False)
    assert r.exit_code == 1 and "registered (running)" in r.output
    assert bookie.stop() == 0
    cluster.wait_registered(2)

    mark = shell_json("lastmark", "--conf", conf)
    files = shell_json("listfilesondisc", "--conf", conf)
    assert files["journal"] and files["entrylog"] and files["index"]
    journal = files["journal"][-1]["path"]
    assert journal.endswith(f"{mark['journalIdHex']}.txn")
    records = shell_json("readjournal", journal, "--conf", conf)
    mine = sorted(r["entryId"] for r in records if r["ledgerId"] == ledger and r["kind"] == "entry")
    index = shell_json("ledger", str(ledger), "--conf", conf)
    assert [e["entryId"] for e in index["entries"]] == mine and len(mine) >= 10   # W2 of E3: 2/3 of 20
    log_id = index["entries"][0]["logId"]
    from_log = shell_json("readentrylog", str(log_id), "--ledger", str(ledger), "--msg", "--as", "text",
                          "--conf", conf)
    assert {r["entryId"] for r in from_log} >= set(mine)
    assert all(r["data"].endswith(f"entry-{r['entryId']}") for r in from_log)
    check = shell_json("localconsistencycheck", "--conf", conf)
    assert check["problems"] == [] and check["entries"] >= len(mine)

    listed = shell_json("updatecookie", "--list", "--conf", conf)
    assert bookie.bookie_id in listed["zookeeper"]
    assert all(bookie.bookie_id in text for text in listed["directories"].values())

    # The id moves to the host-name form and back; cookies in ZooKeeper and in every directory follow.
    host = socket.gethostbyaddr("127.0.0.1")[0]
    moved = shell_json("updatecookie", "--bookie-id", "hostname", "--conf", conf)
    assert moved == {"oldBookieId": bookie.bookie_id, "newBookieId": f"{host}:{bookie.port}"}
    assert cluster.zk.exists(f"{cluster.root}/cookies/{bookie.bookie_id}") is None
    by_name = bookie_conf(cluster, bookie, tmp_path, "by-name", useHostNameAsBookieID="true")
    listed = shell_json("updatecookie", "--list", "--conf", by_name)
    assert all(f'bookieHost: "{host}:{bookie.port}"' in text for text in listed["directories"].values())
    r = shell("updatecookie", "--bookie-id", "hostname", "--conf", by_name, ok=False)
    assert r.exit_code == 1 and "either way" in r.output
    back = shell_json("updatecookie", "--bookie-id", "ip", "--conf", by_name)
    assert back["newBookieId"] == bookie.bookie_id
    assert shell_json("localconsistencycheck", "--conf", conf)["problems"] == []

    new_dir = tmp_path / "more-ledgers"
    expanded_conf = bookie_conf(cluster, bookie, tmp_path, "expanded",
                                ledgerDirectories=f"{bookie.data_dir / 'ledgers'},{new_dir}")
    out = shell_json("updatecookie", "--expandstorage", "--conf", expanded_conf)
    assert out["addedDirectories"] == [str(new_dir)]
    zk_cookie = cluster.zk.get(f"{cluster.root}/cookies/{bookie.bookie_id}")[0].decode()
    assert str(new_dir) in zk_cookie and (new_dir / "current" / "VERSION").exists()

    r = shell("updatecookie", "--delete", "--conf", expanded_conf, ok=False)
    assert r.exit_code == 1 and "--force" in r.output
    r = shell("updatecookie", "--list", "--delete", "--conf", expanded_conf, ok=False)
    assert r.exit_code == 2
    r = shell("bookieformat", "--conf", expanded_conf, ok=False)
    assert r.exit_code == 1 and "--force" in r.output
    lines = shell("bookieformat", "--force", "--conf", expanded_conf).output.splitlines()
    assert lines[-1] == f"formatted bookie {bookie.bookie_id}"
    assert f"deleted cookie {cluster.root}/cookies/{bookie.bookie_id}" in lines
    assert cluster.zk.exists(f"{cluster.root}/cookies/{bookie.bookie_id}") is None
    r = shell("lastmark", "--conf", conf, ok=False)                       # wiped: nothing left to read
    assert r.exit_code == 1 and "check ledgerDirectories" in r.output


def test_the_console_script_runs_a_client_command_and_exits(cluster, ledger):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "shell", "listledgers", "--json",
                           "--metadata-uri", cluster.metadata_uri], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {"ledgerId": ledger} in json.loads(done.stdout)
    assert done.stderr == ""


def test_scoped_ledgers_by_scope_id_and_qualified_name(cluster, tmp_path):
    """BP-34: a 128-bit ledger id named by --ledger-scope-id + id or by --ledger-qualified-name."""
    scope = 0xB0B
    with BookKeeper(cluster.metadata_uri, timeout=60, protocol="v3") as bk:
        lh = bk.create_ledger(2, 2, 2, password=b"scoped", scope_id=scope)
        lh.add_entries([b"scoped-0", b"scoped-1", b"scoped-2"])
        lh.close()
    lid = lh.ledger_id
    qualified = f"{scope:016x}{lid:016x}"
    uri = ["--metadata-uri", cluster.metadata_uri]
    md = shell_json("ledgermetadata", "--ledger-qualified-name", qualified, *uri)
    assert (md["qualifiedName"], md["scopeId"], md["ledgerId"], md["lastEntryId"]) == (qualified, scope, lid, 2)
    assert shell_json("ledgermetadata", str(lid), "--ledger-scope-id", str(scope), *uri) == md
    assert [r["ledgerId"] for r in shell_json("listledgers", "--ledger-scope-id", str(scope), *uri)] == [lid]
    rows = shell_json("readledger", "--ledger-qualified-name", qualified, *uri)
    assert [r["data"] for r in rows] == ["scoped-0", "scoped-1", "scoped-2"]
    assert shell_json("deleteledger", str(lid), "--ledger-scope-id", str(scope), "--force", *uri)["deleted"]
    r = shell("ledgermetadata", "--ledger-qualified-name", qualified, *uri, ok=False)
    assert r.exit_code == 1 and f"ledger {qualified} does not exist" in r.output
