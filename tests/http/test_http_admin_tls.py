"""The admin HTTP API of a real `bkfast bookie` over HTTPS, with a bearer token and client certificates:
a mutating request without either gets 401 and changes nothing; read-only endpoints stay open."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest

from tests.http.test_http_admin import _free_port
from tests.server_support import BookieProcess
from tests.tls_support import make_pki

TOKEN = "s3cret-admin-token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def start_https_bookie(d, pki, **conf) -> BookieProcess:
    """A bookie (no metadata) whose admin API is HTTPS with the test CA's client certificates and TOKEN;
    `conf`: more bookie keys."""
    keystore = d / "http.pem"
    keystore.write_bytes(pki.bookie_key.read_bytes() + pki.bookie_cert.read_bytes())
    (d / "token").write_text(TOKEN + "\n")
    port = _free_port()
    b = BookieProcess(d / "bookie")
    b.extra_conf.update(conf)
    b.extra_conf.update(httpServerEnabled="true", httpServerPort=str(port), httpServerHost="127.0.0.1",
                        httpServerTlsEnable="true", httpServerKeystorePath=str(keystore),
                        httpServerTrustStorePath=str(pki.ca), httpServerAuthTokenFile=str(d / "token"))
    b.start()
    b.http_port = port
    return b


@pytest.fixture(scope="module")
def https_bookie(tmp_path_factory, pki):
    b = start_https_bookie(tmp_path_factory.mktemp("https"), pki)
    yield b
    assert b.stop() == 0, b.log()


def https(bookie, pki, path, method="GET", body=None, token=None, cert=None):
    ctx = pki.ssl_context(cert)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"https://127.0.0.1:{bookie.http_port}{path}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _read_only(bookie, pki) -> bool:
    status, body = https(bookie, pki, "/api/v1/bookie/state")
    assert status == 200
    return json.loads(body)["readOnly"]


def test_read_only_endpoints_need_no_authentication(https_bookie, pki):
    assert https(https_bookie, pki, "/heartbeat") == (200, "OK\n")
    assert https(https_bookie, pki, "/api/v1/bookie/info")[0] == 200


@pytest.mark.parametrize("token, cert", [(None, None), ("wrong-token", None), (None, "otherca")])
def test_mutating_request_without_credentials_gets_401_and_changes_nothing(https_bookie, pki, token, cert):
    if cert == "otherca":
        # a certificate from another CA does not even finish the handshake
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            https(https_bookie, pki, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": True}, token, cert)
    else:
        status, body = https(https_bookie, pki, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": True}, token)
        assert status == 401, body
    assert _read_only(https_bookie, pki) is False


@pytest.mark.parametrize("token, cert", [(TOKEN, None), (None, "good")])
def test_token_or_trusted_client_certificate_may_mutate(https_bookie, pki, token, cert):
    try:
        status, _ = https(https_bookie, pki, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": True}, token, cert)
        assert status == 200
        assert _read_only(https_bookie, pki) is True
    finally:
        assert https(https_bookie, pki, "/api/v1/bookie/state/readonly", "PUT", {"readOnly": False},
                     TOKEN)[0] == 200
    assert _read_only(https_bookie, pki) is False


def test_plain_http_is_not_served_on_the_https_port(https_bookie):
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{https_bookie.http_port}/heartbeat", timeout=5)


def test_plain_http_with_token_only(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    port = _free_port()
    b = BookieProcess(tmp_path / "bookie")
    b.extra_conf.update(httpServerEnabled="true", httpServerPort=str(port), httpServerHost="127.0.0.1",
                        httpServerAuthTokenFile=str(tmp_path / "token"), httpServerReadOnlyOpen="false")
    b.start()
    try:
        def call(method, path, token=None, body=None):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status
            except urllib.error.HTTPError as err:
                return err.code

        assert call("GET", "/api/v1/bookie/state") == 401          # httpServerReadOnlyOpen=false
        assert call("GET", "/api/v1/bookie/state", TOKEN) == 200
        assert call("PUT", "/api/v1/bookie/gc", None, {}) == 401
        assert call("PUT", "/api/v1/bookie/gc", TOKEN, {}) == 200
    finally:
        assert b.stop() == 0, b.log()


def test_http_server_binds_the_configured_host(tmp_path):
    """httpServerHost=127.0.0.2 (Linux routes all of 127/8 to lo): the admin API answers there, and the same
    port on 127.0.0.1 (the bookie's own interface) refuses."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    b = BookieProcess(tmp_path / "bookie")
    b.extra_conf.update(httpServerEnabled="true", httpServerPort=str(port), httpServerHost="127.0.0.2")
    b.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/heartbeat", timeout=10) as resp:
            assert (resp.status, resp.read()) == (200, b"OK\n")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        assert b.stop() == 0, b.log()
