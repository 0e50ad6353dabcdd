"""`bkfast sandbox --tls`: a throwaway CA and certificates, bookies with mutual TLS and role authorization,
and the demo's client over TLS (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys

from bkfast.conf import ClientConfiguration
from bkfast.tls.context import ClientTLS
from tests.server_support import REPO, Client
from tests.tls_support import START_TLS, START_TLS_EOK


def test_sandbox_tls_demo(tmp_path):
    data_dir = tmp_path / "sbtls"
    proc = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "sandbox", "--tls", "--demo", "--exit-after-demo",
         "--demo-entries", "500", "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    out = proc.stdout
    assert "sandbox TLS: mutual TLS + BookieAuthZFactory" in out
    assert "demo: the client talks TLS" in out and "byte-identical" in out and "demo: done" in out
    info = json.loads((data_dir / "sandbox.json").read_text())
    conf = ClientConfiguration.load(info["client_conf_file"])
    assert conf.get("tlsClientAuthentication") and conf.get("tlsHostnameVerificationEnabled")
    ClientTLS(conf)                                   # the written client keys load
    for name in ("ca.pem", "bookie.key", "bookie.pem", "client.key", "client.pem"):
        assert (data_dir / "tls" / name).is_file()
    logs = "".join((data_dir / f"bookie-{i}" / "bookie.log").read_text() for i in range(3))
    assert "unauthorized client" not in logs and "handshake" not in logs.lower()


def test_sandbox_tls_bookies_refuse_plaintext(tmp_path):
    """While the sandbox serves, a plaintext request gets EUA and START_TLS is answered EOK."""
    import time

    data_dir = tmp_path / "sbtls2"
    proc = subprocess.Popen([sys.executable, "-m", "bkfast.cli.main", "sandbox", "--tls", "--bookies", "1",
                             "--data-dir", str(data_dir)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (data_dir / "sandbox.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        host, port = json.loads((data_dir / "sandbox.json").read_text())["bookies"][0].rsplit(":", 1)
        with Client(host, int(port)) as c:
            c.send_raw(bytes.fromhex("0000000d0a06080310081832ca06020803"))      # GET_BOOKIE_INFO, plaintext
            assert c.recv_frame() == bytes.fromhex("0000000b0a0608031008183210f603")  # EUA
            c.send_raw(START_TLS)
            assert c.recv_frame() == START_TLS_EOK
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
