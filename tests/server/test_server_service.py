"""bkfast.server.BookieService in this process: one lifecycle, and the metrics it hands to every part.

The bookie runs on the tests' reactor thread (no metadata service); a real socket client adds to it and
the admin HTTP server is read over HTTP. Processes, signals and ZooKeeper are covered by the tests that
start `bkfast bookie` (test_server_integration.py, test_http_admin.py, test_bookie_registration.py).
"""

from __future__ import annotations

import re
import socket
import urllib.request

from bkfast.codec import DigestType, decode_response, encode_add_request, master_key
from bkfast.conf import ServerConfiguration
from bkfast.server import BookieService
from tests.reactor_thread import call, reactor
from tests.server_support import Client

KEY = master_key("secret")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(tmp_path, http_port: int) -> ServerConfiguration:
    return ServerConfiguration.load(None, {
        "journalDirectory": str(tmp_path / "journal"), "ledgerDirectories": str(tmp_path / "ledgers"),
        "listeningInterface": "127.0.0.1", "bookiePort": 0, "allowEphemeralPorts": "true",
        "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16",
        "httpServerEnabled": "true", "httpServerPort": str(http_port)})


def test_service_hands_its_metrics_to_bookie_journal_and_http_and_stops_as_a_whole(tmp_path):
    http_port = _free_port()
    service = BookieService(_conf(tmp_path, http_port), use_metadata=False, reactor=reactor)
    call(service.start)
    try:
        metrics = service.metrics
        assert metrics is not None
        assert service.bookie.metrics is metrics and service.admin.metrics is metrics
        assert service.bookie.journal.sync_latency_observer == metrics.journal_sync_observe

        with Client("127.0.0.1", service.address.port) as client:
            client.send_raw(encode_add_request(KEY, 7, 0, -1, 0, b"payload", DigestType.CRC32C))
            assert decode_response(client.recv_body()).rc == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert 'bkfast_add_entry_total{status="OK"} 1.0' in text
        synced = re.search(r"^bkfast_journal_sync_latency_seconds_count (\S+)$", text, re.MULTILINE)
        assert synced and float(synced.group(1)) >= 1, "the journal did not report to the service's metrics"
    finally:
        call(service.stop)
        service.close()
    assert service.admin.shutting_down
    for port in (service.address.port, http_port):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still accepts after stop()"
    assert not service.bookie.started
    assert reactor.running, "stop() must leave the reactor to its owner"


def test_a_serving_bookie_freezes_its_start_up_objects_and_collects_gen0_at_50000():
    import gc

    from bkfast.server.service import GC_THRESHOLDS, tune_gc_for_serving

    before = gc.get_threshold()
    try:
        tune_gc_for_serving()
        assert gc.get_freeze_count() > 1000
        assert gc.get_threshold() == GC_THRESHOLDS == (50000, 50, 100)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

