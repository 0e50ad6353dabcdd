"""Helpers of the replication tests: run `bkfast shell` as a real process, and check that a ledger is fully
replicated by reading every entry from every bookie of its write set directly (not through the client)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

from bkfast.client.blocking import call_in_reactor
from bkfast.client.distribution import write_set
from bkfast.meta.ledger_metadata import LedgerMetadata


def shell(cluster, *args, timeout=180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bkfast.cli.main", "shell", *args, "--metadata-uri", cluster.metadata_uri]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ})


def shell_json(cluster, *args, ok=True):
    result = shell(cluster, *args, "--json")
    if ok:
        assert result.returncode == 0, result.stderr + result.stdout
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None


def read_raw(bk, bookie: str, ledger_id: int, entry_id: int) -> bytes:
    client = bk.async_client.bookie_client
    return bytes(call_in_reactor(30, client.read_entry, bookie, ledger_id, entry_id))


def check_replicas(bk, ledger_id: int, md: LedgerMetadata, dead: set[str], expected: dict[int, bytes] | None = None):
    """No segment lists a dead bookie; every entry up to the last one is on every bookie of its write set,
    byte-identical across them; with `expected`, its payload is the one acknowledged."""
    assert not dead & md.all_bookies, (ledger_id, md.ensembles)
    last = md.last_entry_id
    digest = None
    if expected is not None:
        from bkfast.client.entries import DigestContext

        digest = DigestContext(md.digest_type, md.password, 0, ledger_id)
    for i, (first, ensemble) in enumerate(md.ensembles):
        end = md.ensembles[i + 1][0] - 1 if i + 1 < len(md.ensembles) else last
        for entry_id in range(first, end + 1):
            copies = {ensemble[j]: read_raw(bk, ensemble[j], ledger_id, entry_id)
                      for j in write_set(entry_id, md.ensemble_size, md.write_quorum_size)}
            assert len(set(copies.values())) == 1, (ledger_id, entry_id, list(copies))
            if digest is not None and entry_id in expected:
                entry, _lac = digest.verify(next(iter(copies.values())), entry_id)
                assert entry.data == expected[entry_id], (ledger_id, entry_id)


def admin_port(bookie) -> int:
    """A bookie's admin HTTP port (httpServerPort=0: it is in its log)."""
    return int(re.findall(r"admin HTTP server listening on [\d.]+:(\d+)", bookie.log_path.read_text())[-1])


def admin_request(bookie, method: str, path: str, body=None) -> tuple[int, str]:
    """(status, body text) of `method /api/v1/<path>` on a bookie's admin HTTP port, JSON `body` if given."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port(bookie)}/api/v1/{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()
