"""The admin HTTP API's security on TLS setups (issue 24): client certificates are held to `authorizedRoles`
as on the bookie's own port, and the API's own ledger client speaks the cluster's TLS with the bookie's keys
(it used to connect in plaintext, and its reads failed as "unauthorized")."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from bkfast import BookKeeper
from bkfast.cli.local_cluster import LocalBookie, free_port
from tests.client_cluster import Cluster
from tests.http.test_http_admin_tls import TOKEN, https, start_https_bookie
from tests.tls_support import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def authz_https_bookie(tmp_path_factory, pki):
    """HTTPS admin API with client certificates and BookieAuthZFactory (authorizedRoles=bkclient)."""
    b = start_https_bookie(tmp_path_factory.mktemp("https-authz"), pki, **pki.bookie_conf(authz=True))
    yield b
    assert b.stop() == 0, b.log()


def _gc_trigger(bookie, pki, cert=None, token=None):
    return https(bookie, pki, "/api/v1/bookie/gc", "PUT", {"forceMajor": False, "forceMinor": False}, token, cert)


@pytest.mark.parametrize("cert", ["intruder", "noou"])
def test_certificate_without_an_authorized_role_may_not_mutate(authz_https_bookie, pki, cert):
    status, body = _gc_trigger(authz_https_bookie, pki, cert)
    assert status == 401, body
    assert https(authz_https_bookie, pki, "/api/v1/bookie/state", cert=cert)[0] == 200     # reads stay open


def test_certificate_with_an_authorized_role_or_the_token_may_mutate(authz_https_bookie, pki):
    assert _gc_trigger(authz_https_bookie, pki, "good")[0] == 200
    assert _gc_trigger(authz_https_bookie, pki, token=TOKEN)[0] == 200


@pytest.mark.zookeeper
def test_admin_client_uses_the_bookies_tls_keys(zookeeper_server, tmp_path, pki):
    """A cluster whose bookies demand TLS client certificates: ledger/read and sanity through the admin API
    work, because its client presents the bookie's own key and trusts its CA."""
    tls = pki.bookie_conf(client_auth=True)
    cluster = Cluster(zookeeper_server, tmp_path / "cluster", bookies=2, **tls)
    (tmp_path / "token").write_text(TOKEN)
    http_port = free_port()
    bookie = LocalBookie(tmp_path / "http-bookie", free_port(), cluster.metadata_uri,
                         {**tls, "httpServerEnabled": "true", "httpServerPort": str(http_port),
                          "journalMaxGroupWaitMSec": "1", "httpServerAuthTokenFile": str(tmp_path / "token")})
    try:
        bookie.start()
        cluster.wait_registered(3)
        with BookKeeper(cluster.metadata_uri, timeout=60, **pki.client_conf("good")) as bk:
            lh = bk.create_ledger(2, 2, 2, password=b"tls-admin")
            lh.add_entries([f"tls-{i}".encode() for i in range(3)])
            lh.close()

        def get(path, **params):
            req = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}?{urllib.parse.urlencode(params)}",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as err:
                return err.code, err.read().decode()

        assert get("/api/v1/ledger/read", ledger_id=str(lh.ledger_id)) == (
            200, {str(i): f"tls-{i}" for i in range(3)})
        assert get("/api/v1/bookie/sanity") == (200, {"passed": True, "readOnly": False})
    finally:
        bookie.stop()
        cluster.stop()
