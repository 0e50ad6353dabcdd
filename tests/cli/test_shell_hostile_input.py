"""`bkfast shell` given what an operator should not give it (issue 24, point 7): a bookie id with path parts,
a ledger id that only Python's int() reads as a number, a ZooKeeper nobody listens on, a ZooKeeper path that
holds no BookKeeper cluster, a bookie without cookies.

The answer is one `Error:` line on stderr and exit 1: never a traceback, kazoo's lines, or a report that all
is well. Against a real ZooKeeper; the commands run through click's CliRunner, except where logging matters
(kazoo's lines, the traceback of the issue): there the real command runs in a subprocess, configured as an
operator's shell is.
"""

from __future__ import annotations

import subprocess
import sys
import traceback
import uuid

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.local_cluster import free_port
from bkfast.cli.main import main
from tests.cluster_factory import running_cluster
from tests.server_support import REPO

pytestmark = pytest.mark.zookeeper


def shell(*args: str) -> subprocess.CompletedProcess:
    """The command in this process; a bkfast exception that escapes it shows as its traceback on stderr."""
    result = CliRunner().invoke(main, ["shell", *args])
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


def shell_process(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bkfast.cli.main", "shell", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 1, nothing on stdout, and stderr is exactly one `Error:` line holding every word."""
    assert proc.returncode == 1, (proc.args, proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert proc.stdout == "", (proc.args, proc.stdout)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), (proc.args, proc.stderr)
    assert all(word in lines[0] for word in words), (proc.args, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def zk(zookeeper_server):
    client = KazooClient(hosts=zookeeper_server, timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def cluster(zookeeper_server):
    """(connect string, root) of an initialized cluster without bookies."""
    with running_cluster(zookeeper_server, None, 0) as started:
        yield zookeeper_server, started.root


def at(cluster) -> list[str]:
    hosts, root = cluster
    return ["--metadata-uri", f"zk+hierarchical://{hosts}{root}"]


# --- ids ---------------------------------------------------------------------------------------------------


def test_decommissionbookie_with_path_parts_is_one_line_not_a_traceback(cluster):
    one_line_error(shell_process("decommissionbookie", "../../x", *at(cluster)), "invalid bookie id '../../x'")


@pytest.mark.parametrize("args", [
    ["decommissionbookie", "readonly"],         # available/readonly exists: it read as a registered bookie
    ["decommissionbookie", ".."],
    ["decommissionbookie", "a b"],
    ["recover", "127.0.0.1:3181,../x"],
    ["recover", "--target", "a/b", "127.0.0.1:3181"],
    ["listunderreplicated", "--missing-replica", "../x"],
    ["listunderreplicated", "--excluding-missing-replica", "x/y"],
], ids=lambda a: " ".join(a))
def test_a_bookie_id_that_is_not_a_bookkeeper_bookie_id_is_one_line(cluster, args):
    bad = next(a for a in args if "/" in a or a in ("readonly", "..", "a b"))
    one_line_error(shell(*args, *at(cluster)), "invalid bookie id", repr(bad.split(",")[-1]))


def test_bookie_ids_as_bookkeeper_accepts_them_pass(cluster):
    """Java's pattern lets a name, a bracketed IPv6 host:port and a host:port through: so does the shell (the
    cluster has no such bookie, which is what it then says)."""
    for bid in ("bk-1.rack_2", "[::1]:3181", "127.0.0.1:3181"):
        one_line_error(shell("decommissionbookie", bid, *at(cluster)), f"{bid} is not a bookie of this cluster")


@pytest.mark.parametrize("text", ["\u0661", " +1_0", "1_0", "+1", "0x1", "1\n"], ids=ascii)
@pytest.mark.parametrize("args", [
    ["ledgermetadata", "{}"],
    ["readledger", "{}"],
    ["deleteledger", "-f", "{}"],
    ["recover", "--dry-run", "--ledger", "{}", "127.0.0.1:3181"],
], ids=lambda a: a[0])
def test_a_ledger_id_is_ascii_digits_only(cluster, args, text):
    """int() takes each of these (U+0661 is ARABIC-INDIC DIGIT ONE, " +1_0" is 10): each named ledger 1 or 10."""
    one_line_error(shell(*[a.format(text) for a in args], *at(cluster)), "invalid ledger id", repr(text))


def test_entry_and_scope_ids_are_ascii_digits_only(cluster):
    one_line_error(shell("readledger", "1", "--last", "\u0661", *at(cluster)), "invalid entry id")
    one_line_error(shell("readledger", "1", "--ledger-scope-id", "\u0661", *at(cluster)), "invalid ledger scope id")
    one_line_error(shell("listledgers", "--ledger-scope-id", " 1", *at(cluster)), "invalid ledger scope id")


# --- ZooKeeper down -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def down_conf(tmp_path_factory):
    """A conf naming a port nobody listens on, with a 1 s zkTimeout; and bookie dirs for updatecookie."""
    d = tmp_path_factory.mktemp("down")
    conf = d / "down.conf"
    conf.write_text(f"metadataServiceUri=zk+hierarchical://127.0.0.1:{free_port()}/ledgers\nzkTimeout=1000\n"
                    f"bookieId=bk-down\njournalDirectories={d / 'j'}\nledgerDirectories={d / 'l'}\n")
    return str(conf)


@pytest.mark.parametrize("args", [
    ["listbookies"], ["autorecovery"], ["listunderreplicated"], ["whoisauditor"], ["listledgers"],
    ["decommissionbookie", "127.0.0.1:3181"], ["updatecookie", "--list"], ["initnewcluster"],
], ids=lambda a: a[0])
def test_an_unreachable_zookeeper_is_one_line_without_kazoo_lines(down_conf, args):
    line = one_line_error(shell_process(*args, "--conf", down_conf), "cannot connect to ZooKeeper at 127.0.0.1:")
    assert "Connection refused" in line, line          # kazoo's reason, said once


def test_verbose_still_shows_kazoos_connection_attempts(down_conf):
    proc = shell_process("whoisauditor", "--verbose", "--conf", down_conf)
    assert proc.returncode == 1
    assert "kazoo.client" in proc.stderr and "Connection refused" in proc.stderr, proc.stderr


# --- not a cluster ------------------------------------------------------------------------------------------

CLUSTER_READERS = [
    ["autorecovery"], ["autorecovery", "--status"], ["autorecovery", "--disable"], ["listunderreplicated"],
    ["whoisauditor"], ["triggeraudit"], ["lostbookierecoverydelay"], ["lostbookierecoverydelay", "--set", "5"],
    ["listbookies"], ["clusterinfo"], ["whatisinstanceid"], ["bookieinfo"], ["listledgers"],
    ["ledgermetadata", "1"], ["decommissionbookie", "127.0.0.1:3181"],
]


@pytest.fixture(params=["missing", "no-layout", "half-made"])
def not_a_cluster(request, zk, zookeeper_server):
    """A root that does not exist, one with unrelated znodes, one with INSTANCEID and available/ but no
    LAYOUT (an initnewcluster cut short)."""
    root = f"/hostile-{uuid.uuid4().hex[:12]}/ledgers"
    if request.param == "no-layout":
        zk.ensure_path(f"{root}/something-else")
    elif request.param == "half-made":
        zk.ensure_path(f"{root}/available/readonly")
        zk.create(f"{root}/INSTANCEID", b"not-finished")
    before = zk.get_children(root) if zk.exists(root) else None
    yield zookeeper_server, root
    after = zk.get_children(root) if zk.exists(root) else None
    assert after == before, "a refused command changed the tree"
    if zk.exists(root.rsplit("/", 1)[0]):
        zk.delete(root.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize("args", CLUSTER_READERS, ids=lambda a: " ".join(a))
def test_a_path_without_a_cluster_is_named_and_refused(not_a_cluster, args):
    hosts, root = not_a_cluster
    one_line_error(shell(*args, *at(not_a_cluster)), f"{hosts}{root} is not a BookKeeper cluster", "initnewcluster")


def test_a_cluster_still_answers_and_initnewcluster_still_creates_one(zk, zookeeper_server):
    root = f"/hostile-{uuid.uuid4().hex[:12]}/ledgers"
    created = shell("initnewcluster", "--zk-connect", zookeeper_server, "--root", root)
    try:
        assert created.returncode == 0, created.stderr
        where = at((zookeeper_server, root))
        assert shell("autorecovery", *where).stdout == "autorecovery is enabled\n"
        assert shell("whoisauditor", *where).stdout == "no auditor elected\n"
        assert shell("listunderreplicated", *where).stdout == "no under-replicated ledgers\n"
        assert shell("listledgers", *where).returncode == 0
    finally:
        zk.delete(root.rsplit("/", 1)[0], recursive=True)


# --- cookies ------------------------------------------------------------------------------------------------


def test_updatecookie_list_says_which_cookie_is_missing(cluster, zk, tmp_path):
    from bkfast.conf import ServerConfiguration
    from bkfast.meta import check_or_create_cookies

    hosts, root = cluster
    bid = f"bk-{uuid.uuid4().hex[:8]}"
    journal, ledgers = tmp_path / "j", tmp_path / "l"
    conf = tmp_path / "bk.conf"
    conf.write_text(f"metadataServiceUri=zk+hierarchical://{hosts}{root}\nbookieId={bid}\n"
                    f"journalDirectories={journal}\nledgerDirectories={ledgers}\n")

    proc = shell("updatecookie", "--list", "--conf", str(conf))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"no cookie for {bid} in ZooKeeper ({root}/cookies/{bid})",
                                        f"{journal}: no cookie", f"{ledgers}: no cookie"]

    check_or_create_cookies(zk, root, ServerConfiguration.load(str(conf)), bid)
    (journal / "current" / "VERSION").unlink()
    lines = shell("updatecookie", "--list", "--conf", str(conf)).stdout.splitlines()
    assert lines[0] == f"ZooKeeper cookie of {bid}:"
    assert f"{journal}: no cookie" in lines and f"{ledgers}:" in lines
    assert "None" not in lines
    assert sum(f'bookieHost: "{bid}"' in line for line in lines) == 2       # ZooKeeper's and the ledger dir's


@pytest.mark.parametrize("text", ["\u0661", " 1", "1_0", "+1", "0x_1"], ids=ascii)
@pytest.mark.parametrize("command", ["readjournal", "readentrylog"])
def test_journal_and_entry_log_ids_are_ascii_digits_only(tmp_path, command, text):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"journalDirectories={tmp_path}/journal\nledgerDirectories={tmp_path}/ledgers\n")
    one_line_error(shell(command, text, "--conf", str(conf)), "is neither a number")
