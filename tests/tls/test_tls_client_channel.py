"""The client channel's START_TLS (bkfast.net.client_tls) against a real TLS bookie, a bookie without TLS,
a peer that never answers, and a bookie whose certificate names another host."""

from __future__ import annotations

import socket
import time

import pytest
from twisted.internet import defer

from bkfast.codec import DigestType, encode_entry, mac_key, master_key
from bkfast.conf import ClientConfiguration
from bkfast.errors import BKError
from bkfast.net.bookie_client import BookieClient
from bkfast.tls.certs import CertificateAuthority
from tests.reactor_thread import call, reactor
from tests.server_support import BookieProcess
from tests.tls_support import make_pki

KEY = master_key(b"secret")
MAC = mac_key(b"secret")


def entry(ledger, e):
    payload = b"tls-%d-%d" % (ledger, e)
    return encode_entry(ledger, e, e - 1, (e + 1) * len(payload), payload, DigestType.CRC32C, MAC, 0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_bookie(tmp_path_factory, pki):
    b = BookieProcess(tmp_path_factory.mktemp("b"))
    b.extra_conf.update(pki.bookie_conf())
    b.start()
    yield b
    assert b.stop() == 0, b.log()


def _client(conf) -> BookieClient:
    return BookieClient(reactor, ClientConfiguration(conf))


def _run(client, scenario):
    try:
        return call(lambda: defer.Deferred.fromCoroutine(scenario()))
    finally:
        call(client.close)


@pytest.mark.parametrize("proto", ["v2", "v3"])
def test_requests_queued_while_starting_tls_go_out_inside_tls(tls_bookie, pki, proto):
    client = _client(pki.client_conf())
    b = tls_bookie.bookie_id
    ledger = 40 if proto == "v2" else 41

    async def scenario():
        entries = [entry(ledger, e) for e in range(50)]
        # issued at once, before the connection (and START_TLS) exist: all wait, then go inside TLS
        await defer.gatherResults([client.add_entry(b, ledger, e, d, KEY, protocol=proto)
                                   for e, d in enumerate(entries)])
        got = await defer.gatherResults([client.read_entry(b, ledger, e, protocol=proto) for e in range(50)])
        assert got == entries

    _run(client, scenario)


def test_bookie_without_tls_fails_the_requests(tmp_path, pki):
    plain = BookieProcess(tmp_path).start()
    client = _client(pki.client_conf())
    try:
        async def scenario():
            try:
                await client.add_entry(plain.bookie_id, 1, 0, entry(1, 0), KEY, protocol="v2")
            except BKError as err:
                return str(err)
            raise AssertionError("an add went through without TLS")

        assert "refused START_TLS (EBADREQ)" in _run(client, scenario)
    finally:
        assert plain.stop() == 0, plain.log()


def test_silent_peer_times_out_after_start_tls_timeout(pki):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = _client({**pki.client_conf(), "startTLSTimeoutSecs": "1", "addEntryTimeoutSec": "30"})
    try:
        async def scenario():
            t0 = time.monotonic()
            try:
                await client.add_entry("127.0.0.1:%d" % server.getsockname()[1], 1, 0, entry(1, 0), KEY)
            except BKError as err:
                return str(err), time.monotonic() - t0
            raise AssertionError("no failure")

        why, elapsed = _run(client, scenario)
        assert "not established within 1 s" in why and elapsed < 5
    finally:
        server.close()


def test_hostname_verification_refuses_a_certificate_for_another_host(tmp_path, pki):
    ca = CertificateAuthority("names CA")
    key, cert = ca.issue("bookie.example.com", hosts=("bookie.example.com",)).write_pem(tmp_path, "wrongname")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    b = BookieProcess(tmp_path / "bookie")
    b.extra_conf.update({**pki.bookie_conf(), "tlsKeyStore": str(key), "tlsCertificatePath": str(cert)})
    b.start()
    try:
        conf = {**pki.client_conf(), "tlsTrustStore": str(ca_file)}
        for verify, ok in (("false", True), ("true", False)):
            client = _client({**conf, "tlsHostnameVerificationEnabled": verify})

            async def scenario(client=client):
                try:
                    await client.add_entry(b.bookie_id, 7, 0, entry(7, 0), KEY, protocol="v3")
                    return None
                except BKError as err:
                    return str(err)

            why = _run(client, scenario)
            if ok:
                assert why is None, why
            else:
                assert why is not None and "does not name 127.0.0.1" in why
    finally:
        assert b.stop() == 0, b.log()


def _conf_file(path, conf: dict):
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return path


@pytest.mark.parametrize("proto", ["v2", "v3"])
def test_bench_bookie_tls_against_plaintext(tls_bookie, pki, tmp_path, proto):
    import json
    import subprocess
    import sys

    conf = _conf_file(tmp_path / "client.conf", pki.client_conf())
    out = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "bench", "bookie", "--bookie", tls_bookie.bookie_id,
                          "--protocol", proto, "--latency-count", "200", "--throughput-count", "3000", "--tls",
                          "--tls-conf", str(conf), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    for mode in ("plaintext", "tls"):
        assert doc[mode]["throughput"]["adds"] == 3000 and doc[mode]["throughput"]["errors"] == 0
        assert doc[mode]["latency"]["adds"] == 200
    assert doc["tls_vs_plaintext"]["throughput_ratio"] > 0
    assert doc["errors"] == 0
