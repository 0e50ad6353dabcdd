"""Cookies (spec §5.5): text format against the real Java cookie in zk_layout.json, files, ZooKeeper,
the startup check and bookieformat, with a real ZooKeeper."""

import json
import os
from pathlib import Path

import pytest

from bkfast.conf import ServerConfiguration
from bkfast.meta import (
    Cookie,
    CookieError,
    CookieMismatchError,
    check_local_cookies,
    check_or_create_cookies,
    format_bookie,
    init_new_cluster,
    read_cookie_file,
    read_zk_cookie,
    write_cookie_file,
    write_zk_cookie,
)
from tests import VECTORS_DIR

VECTOR = json.loads((VECTORS_DIR / "zk_layout.json").read_text())
JAVA_COOKIES = {n["path"]: bytes.fromhex(n["dataHex"]) for n in VECTOR["nodes"] if "/cookies/" in n["path"]}
BID = "127.0.0.1:3181"


def test_java_cookie_roundtrip():
    assert len(JAVA_COOKIES) == 3
    for path, data in JAVA_COOKIES.items():
        c = Cookie.parse(data)
        port = path.rsplit(":", 1)[1]
        assert c.bookie_id == f"127.0.0.1:{port}"
        assert c.journal_dirs == (f"zkl/{port}/j",)
        assert c.ledger_dirs == (f"zkl/{port}/l",)
        assert c.instance_id == "fdde28d9-8744-476c-8300-446e330d7c10"
        assert c.index_dirs is None and c.layout_version == 5
        assert c.to_bytes() == data


def test_cookie_format_details():
    c = Cookie("h:1", ("/j1", "/j2"), ("/a", "/b"), "iid", ("/i",))
    text = c.to_text()
    assert text == ('5\nbookieHost: "h:1"\njournalDir: "/j1,/j2"\nledgerDirs: "2\\t/a\\t/b"\n'
                    'instanceId: "iid"\nindexDirs: "1\\t/i"\n')
    assert Cookie.parse(text) == c
    odd = Cookie("h:1", ('/we"ird\\dir',), ("/é",), None)
    assert Cookie.parse(odd.to_bytes()) == odd
    assert "instanceId" not in odd.to_text()
    assert '\\303\\251' in odd.to_text()            # non-ASCII as octal UTF-8 bytes, like Java's TextFormat


def test_parse_old_versions():
    v4 = b'4\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\ninstanceId: "x"\n'
    c = Cookie.parse(v4)
    assert (c.layout_version, c.bookie_id, c.ledger_dirs, c.instance_id) == (4, "h:1", ("/l",), "x")
    assert c.to_bytes() == v4
    v3 = b"3\nh:1\n/j1,/j2\n2\t/a\t/b\n"
    c = Cookie.parse(v3)
    assert (c.layout_version, c.journal_dirs, c.ledger_dirs, c.instance_id) == (3, ("/j1", "/j2"), ("/a", "/b"), None)
    assert c.to_bytes() == v3
    with pytest.raises(CookieError, match="unsupported cookie layout version 2"):
        Cookie.parse(b"2\nh:1\n/j\n1\t/l\n")
    with pytest.raises(CookieError, match="missing ledgerDirs"):
        Cookie.parse(b'5\nbookieHost: "h:1"\njournalDir: "/j"\n')
    with pytest.raises(CookieError, match="count 2"):
        Cookie.parse(b'5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "2\\t/l"\n')


def test_cookie_file(tmp_path):
    c = Cookie.parse(next(iter(JAVA_COOKIES.values())))
    assert read_cookie_file(str(tmp_path)) is None
    path = write_cookie_file(str(tmp_path), c)
    assert path == str(tmp_path / "current" / "VERSION")
    assert Path(path).read_bytes() == c.to_bytes()
    assert read_cookie_file(str(tmp_path)) == c


@pytest.mark.zookeeper
def test_zk_cookie_versioned(zk_client):
    c = Cookie(BID, ("/j",), ("/l",), "iid")
    assert read_zk_cookie(zk_client, "/ledgers", BID) is None
    assert write_zk_cookie(zk_client, "/ledgers", BID, c) == 0
    with pytest.raises(CookieError, match="already exists"):
        write_zk_cookie(zk_client, "/ledgers", BID, c)
    got, version = read_zk_cookie(zk_client, "/ledgers", BID)
    assert got == c and version == 0
    c2 = Cookie(BID, ("/j",), ("/l", "/m"), "iid")
    assert write_zk_cookie(zk_client, "/ledgers", BID, c2, version=0) == 1
    with pytest.raises(CookieError, match="stale"):
        write_zk_cookie(zk_client, "/ledgers", BID, c, version=0)
    assert read_zk_cookie(zk_client, "/ledgers", BID) == (c2, 1)


def _conf(tmp_path, **extra):
    d = {"journalDirectories": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l")}
    d.update(extra)
    return ServerConfiguration(d)


@pytest.fixture
def cluster(zk_client):
    iid = init_new_cluster(zk_client, "/ledgers")
    return zk_client, iid


@pytest.mark.zookeeper
def test_new_bookie_then_check(cluster, tmp_path):
    zk, iid = cluster
    conf = _conf(tmp_path, indexDirectories=str(tmp_path / "i"))
    c = check_or_create_cookies(zk, "/ledgers", conf, BID)
    assert c.instance_id == iid and c.index_dirs == (str(tmp_path / "i"),)
    for d in ("j", "l", "i"):
        assert read_cookie_file(str(tmp_path / d)) == c
    assert read_zk_cookie(zk, "/ledgers", BID)[0] == c
    assert zk.get(f"/ledgers/cookies/{BID}")[0] == c.to_bytes()
    # a restart with the same conf passes
    assert check_or_create_cookies(zk, "/ledgers", conf, BID) == c


@pytest.mark.zookeeper
def test_check_mismatch_names_what_differs(cluster, tmp_path):
    zk, _ = cluster
    check_or_create_cookies(zk, "/ledgers", _conf(tmp_path), BID)
    other = tmp_path / "l2"
    (other / "current").mkdir(parents=True)
    (other / "current" / "VERSION").write_bytes((tmp_path / "l" / "current" / "VERSION").read_bytes())
    conf = _conf(tmp_path, ledgerDirectories=str(other))
    with pytest.raises(CookieMismatchError) as e:
        check_or_create_cookies(zk, "/ledgers", conf, BID)
    msg = str(e.value)
    assert f"ledgerDirs: cookie says 1\t{tmp_path / 'l'}, this bookie has 1\t{other}" in msg
    assert "ZooKeeper /ledgers/cookies/" in msg and "journalDirs" not in msg
    # another bookie id pointing at the same dirs: ZK has no cookie for it -> refused
    with pytest.raises(CookieError, match="hold a cookie but ZooKeeper has none"):
        check_or_create_cookies(zk, "/ledgers", _conf(tmp_path), "10.0.0.1:3181")


@pytest.mark.zookeeper
def test_check_instance_id_mismatch(cluster, tmp_path):
    zk, iid = cluster
    check_or_create_cookies(zk, "/ledgers", _conf(tmp_path), BID)
    zk.set("/ledgers/INSTANCEID", b"other-instance")
    with pytest.raises(CookieMismatchError, match=f"instanceId: cookie says {iid}, this bookie has other-instance"):
        check_or_create_cookies(zk, "/ledgers", _conf(tmp_path), BID)


@pytest.mark.zookeeper
def test_check_zk_cookie_without_dirs_and_partial(cluster, tmp_path):
    zk, _ = cluster
    conf = _conf(tmp_path)
    check_or_create_cookies(zk, "/ledgers", conf, BID)
    os.unlink(tmp_path / "l" / "current" / "VERSION")
    with pytest.raises(CookieError, match=f"no cookie in directories {tmp_path / 'l'}"):
        check_or_create_cookies(zk, "/ledgers", conf, BID)
    os.unlink(tmp_path / "j" / "current" / "VERSION")
    with pytest.raises(CookieError, match="ZooKeeper has a cookie .* but none of its directories"):
        check_or_create_cookies(zk, "/ledgers", conf, BID)


@pytest.mark.zookeeper
def test_check_requires_cluster(zk_client, tmp_path):
    with pytest.raises(CookieError, match="not initialized"):
        check_or_create_cookies(zk_client, "/ledgers", _conf(tmp_path), BID)


@pytest.mark.zookeeper
def test_format_bookie(cluster, tmp_path):
    zk, _ = cluster
    conf = _conf(tmp_path)
    check_or_create_cookies(zk, "/ledgers", conf, BID)
    (tmp_path / "l" / "current" / "0.log").write_bytes(b"data")
    with pytest.raises(CookieError, match="--force"):
        format_bookie(zk, "/ledgers", conf, BID, force=False)
    actions = format_bookie(zk, "/ledgers", conf, BID, force=True)
    assert f"deleted cookie /ledgers/cookies/{BID}" in actions
    assert os.listdir(tmp_path / "l") == [] and os.listdir(tmp_path / "j") == []
    assert read_zk_cookie(zk, "/ledgers", BID) is None
    # the wiped bookie starts as a new one
    check_or_create_cookies(zk, "/ledgers", conf, BID)
    # formatting an empty bookie needs no --force
    format_bookie(zk, "/ledgers", _conf(tmp_path / "fresh"), "1.2.3.4:1", force=False)


@pytest.mark.zookeeper
def test_check_names_a_removed_or_added_journal_dir(cluster, tmp_path):
    zk, _ = cluster
    j1, j2 = tmp_path / "j1", tmp_path / "j2"
    check_or_create_cookies(zk, "/ledgers", _conf(tmp_path, journalDirectories=f"{j1},{j2}"), BID)
    with pytest.raises(CookieMismatchError, match=f"missing journal directory {j2}"):
        check_or_create_cookies(zk, "/ledgers", _conf(tmp_path, journalDirectories=str(j1)), BID)
    with pytest.raises(CookieMismatchError, match=f"new journal directory {tmp_path / 'j3'}"):
        check_or_create_cookies(zk, "/ledgers", _conf(tmp_path, journalDirectories=f"{j1},{j2},{tmp_path / 'j3'}"),
                                BID)


@pytest.mark.zookeeper
def test_cookies_of_a_bookie_run_without_metadata_are_checked_then_adopted(cluster, tmp_path):
    zk, iid = cluster
    conf = _conf(tmp_path)
    standalone = check_local_cookies(conf, "127.0.0.1:4000")       # first start: written, no instanceId
    assert read_cookie_file(str(tmp_path / "j")) == standalone and standalone.instance_id is None
    assert check_local_cookies(conf, "127.0.0.1:4001") == standalone.__class__(
        "127.0.0.1:4001", standalone.journal_dirs, standalone.ledger_dirs)   # another port: dirs only
    with pytest.raises(CookieMismatchError, match="ledgerDirs: cookie says"):
        check_local_cookies(_conf(tmp_path, ledgerDirectories=str(tmp_path / "l2")), "127.0.0.1:4000")
    # the first start with ZooKeeper adopts the directories
    c = check_or_create_cookies(zk, "/ledgers", conf, BID)
    assert c.instance_id == iid and read_cookie_file(str(tmp_path / "l")) == c
    assert read_zk_cookie(zk, "/ledgers", BID)[0] == c
