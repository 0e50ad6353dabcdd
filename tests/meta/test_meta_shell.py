"""`bkfast shell initnewcluster / metaformat / bookieformat` through click's CliRunner and a real ZooKeeper."""

import uuid

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from bkfast.cli.main import main
from bkfast.meta import read_cookie_file, read_layout

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def zk(zookeeper_server):
    c = KazooClient(hosts=zookeeper_server, timeout=10.0)
    c.start(timeout=15)
    root = f"/shell-{uuid.uuid4().hex}/ledgers"
    yield c, zookeeper_server, root
    c.delete(root.rsplit("/", 1)[0], recursive=True)
    c.stop()
    c.close()


def run(*args):
    return CliRunner().invoke(main, ["shell", *args], catch_exceptions=False)


def test_initnewcluster_and_metaformat(zk):
    client, hosts, root = zk
    r = run("initnewcluster", "--zk-connect", hosts, "--root", root)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"initialized cluster at {hosts}{root} (instance id ")
    assert read_layout(client, root).name == "hierarchical"
    iid = client.get(root + "/INSTANCEID")[0].decode()

    r = run("initnewcluster", "--zk-connect", hosts, "--root", root)
    assert r.exit_code != 0 and "already exists" in r.output

    r = run("metaformat", "--zk-connect", hosts, "--root", root)
    assert r.exit_code != 0 and "--force" in r.output
    r = run("metaformat", "--force", "--zk-connect", hosts, "--root", root)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"deleted metadata under {hosts}{root}"
    assert client.get(root + "/INSTANCEID")[0].decode() != iid


def test_conf_file(zk, tmp_path):
    client, hosts, root = zk
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"metadataServiceUri=zk+longhierarchical://{hosts}{root}\n")
    r = run("initnewcluster", "--conf", str(conf))
    assert r.exit_code == 0, r.output
    assert read_layout(client, root).name == "longhierarchical"


def test_bookieformat(zk, tmp_path):
    from bkfast.conf import ServerConfiguration
    from bkfast.meta import check_or_create_cookies

    client, hosts, root = zk
    assert run("initnewcluster", "--zk-connect", hosts, "--root", root).exit_code == 0
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"zkServers={hosts}\nzkLedgersRootPath={root}\nbookieId=bk-1\n"
                    f"journalDirectories={tmp_path / 'j'}\nledgerDirectories={tmp_path / 'l'}\n")
    check_or_create_cookies(client, root, ServerConfiguration.load(str(conf)), "bk-1")
    assert client.exists(f"{root}/cookies/bk-1")

    r = run("bookieformat", "--conf", str(conf))
    assert r.exit_code != 0 and "--force" in r.output and "bk-1" in r.output
    r = run("bookieformat", "--force", "--conf", str(conf))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert f"wiped {tmp_path / 'j'}" in lines and f"deleted cookie {root}/cookies/bk-1" in lines
    assert lines[-1] == "formatted bookie bk-1"
    assert client.exists(f"{root}/cookies/bk-1") is None
    assert read_cookie_file(str(tmp_path / "l")) is None


def test_unreachable_zookeeper(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("zkTimeout=1000\n")
    r = run("initnewcluster", "--conf", str(conf), "--zk-connect", "127.0.0.1:1", "--root", "/x")
    assert r.exit_code != 0 and "cannot connect to ZooKeeper at 127.0.0.1:1" in r.output
