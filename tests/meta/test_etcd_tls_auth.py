"""The etcd driver over TLS with client certificates (etcd --client-cert-auth, certificates from a CA made
in the test) and with etcd's user authentication, configured with bkfast's etcd keys: a store it can reach is
used for real (a cluster initialized, a ledger created and read), and each wrong or missing credential is one
clear error, not a hang."""

from __future__ import annotations

import pytest

from bkfast.conf import ServerConfiguration
from bkfast.errors import BKMetaStoreException
from bkfast.ids import LedgerId
from bkfast.meta.etcd_cluster import init_new_etcd_cluster
from bkfast.meta.etcd_driver import etcd_client_from_conf
from bkfast.meta.etcd_kv import EtcdRefused
from bkfast.meta.factory import open_metadata_driver
from bkfast.tls.certs import CertificateAuthority
from tests.etcd_server import EtcdServer, EtcdTls
from tests.meta.test_meta_driver_contract import make_md
from tests.reactor_thread import call

pytestmark = pytest.mark.etcd


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("etcd-pki")
    ca = CertificateAuthority("etcd test CA")
    ca.write_pem(directory / "ca.pem")
    server_key, server_cert = ca.issue("127.0.0.1", hosts=("127.0.0.1",)).write_pem(directory, "server")
    client_key, client_cert = ca.issue("bkfast-client").write_pem(directory, "client")
    stranger = CertificateAuthority("another CA")
    stranger_key, stranger_cert = stranger.issue("intruder").write_pem(directory, "intruder")
    return {"ca": str(directory / "ca.pem"), "server": (str(server_cert), str(server_key)),
            "client": (str(client_cert), str(client_key)), "intruder": (str(stranger_cert), str(stranger_key))}


@pytest.fixture(scope="module")
def tls_etcd(pki, tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd-tls"), tls=EtcdTls(*pki["server"], pki["ca"])).start()
    try:
        yield server
    finally:
        server.stop()


def _conf(**keys) -> ServerConfiguration:
    conf = ServerConfiguration()
    for key, value in {"zkTimeout": "3000", **keys}.items():
        conf.set(key, value)
    return conf


def _init_and_round_trip(uri: str, conf: ServerConfiguration, scope: str) -> None:
    """Initialize the cluster through a client built from `conf`, then create and read a ledger through a driver."""
    kv = etcd_client_from_conf(uri, conf)
    try:
        init_new_etcd_cluster(kv, scope)
    finally:
        kv.close()
    driver = open_metadata_driver(uri, conf=conf)
    call(driver.start)
    try:
        lid = LedgerId.classic(call(driver.generate_ledger_id))
        created = call(driver.create_ledger_metadata, lid, make_md())
        assert call(driver.read_ledger_metadata, lid) == created
    finally:
        call(driver.close)


def test_tls_with_a_client_certificate_serves_the_driver(tls_etcd, pki):
    uri = f"etcd+https://{tls_etcd.endpoint}/tls"
    conf = _conf(etcdTlsCaFile=pki["ca"], etcdTlsCertFile=pki["client"][0], etcdTlsKeyFile=pki["client"][1])
    _init_and_round_trip(uri, conf, "/tls")


@pytest.mark.parametrize("credentials", ["none", "intruder"])
def test_tls_without_an_accepted_client_certificate_is_a_clear_error(tls_etcd, pki, credentials):
    keys = {"etcdTlsCaFile": pki["ca"]}
    if credentials == "intruder":
        keys.update(etcdTlsCertFile=pki["intruder"][0], etcdTlsKeyFile=pki["intruder"][1])
    kv = etcd_client_from_conf(f"etcd+https://{tls_etcd.endpoint}/tls", _conf(**keys), timeout_s=1.0)
    with pytest.raises(BKMetaStoreException, match=rf"etcd {tls_etcd.endpoint} did not answer within 1 s .*SSL"):
        kv.get(b"/tls/layout")


def test_a_server_certificate_from_an_unknown_ca_is_refused(tls_etcd, pki):
    other = CertificateAuthority("not the etcd CA")
    path = other.write_pem(tls_etcd.data_dir / "other-ca.pem")
    kv = etcd_client_from_conf(f"etcd+https://{tls_etcd.endpoint}/tls",
                               _conf(etcdTlsCaFile=str(path), etcdTlsCertFile=pki["client"][0],
                                     etcdTlsKeyFile=pki["client"][1]), timeout_s=1.0)
    with pytest.raises(BKMetaStoreException, match="CERTIFICATE_VERIFY_FAILED"):
        kv.get(b"/tls/layout")


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd-auth")).start()
    admin = etcd_client_from_conf(f"etcd://{server.endpoint}/auth")
    try:
        for path, body in (("auth/role/add", {"name": "root"}),
                           ("auth/user/add", {"name": "root", "password": "rootpw"}),
                           ("auth/user/grant", {"user": "root", "role": "root"}),
                           ("auth/enable", {})):
            admin.call(path, body, f"set up etcd auth ({path})")
        yield server
    finally:
        admin.close()
        server.stop()


def test_user_and_password_serve_the_driver(auth_etcd):
    uri = f"etcd://{auth_etcd.endpoint}/auth"
    conf = _conf(etcdUser="root", etcdPassword="rootpw")
    _init_and_round_trip(uri, conf, "/auth")


@pytest.mark.parametrize("keys,refusal", [({}, "user name is empty"),
                                          ({"etcdUser": "root", "etcdPassword": "wrong"}, "authentication failed")])
def test_a_missing_or_wrong_password_is_refused_at_once(auth_etcd, keys, refusal):
    kv = etcd_client_from_conf(f"etcd://{auth_etcd.endpoint}/auth", _conf(**keys))
    with pytest.raises(EtcdRefused, match=refusal):
        kv.get(b"/auth/layout")
