"""The HTTP admin endpoints (bkfast/http/admin_api.py) of a real bookie process in a real cluster (ZooKeeper +
2 more bookie processes): Java's paths, parameters and JSON shapes (spec §9.2), 400/404/405 for mistakes, and
a property-based fuzz of every endpoint of docs/admin-api.openapi.json: never a 5xx."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkfast import BookKeeper
from bkfast.cli.local_cluster import LocalBookie, free_port
from bkfast.http.admin_api import ENDPOINTS
from bkfast.http.autorecovery_api import ENDPOINTS as AUTORECOVERY_ENDPOINTS
from tests import REPO
from tests.client_cluster import Cluster

pytestmark = pytest.mark.zookeeper

OPENAPI = json.loads((REPO / "docs" / "admin-api.openapi.json").read_text())

TOKEN = "admin-token-6f1c9e"
LEDGER_PASSWORD = b"ledger-pw-Zq8xK"
KEYSTORE_PASSWORD = "keystore-pw-Wb3v"
SASL_PASSWORD = "sasl-pw-Tt5n"             # a key bkfast does not know, carried over from a Java conf


@pytest.fixture(scope="module")
def api(zookeeper_server, tmp_path_factory):
    cluster = Cluster(zookeeper_server, tmp_path_factory.mktemp("http-cluster"), bookies=2,
                      dbStorage_writeCacheMaxSizeMb="16", dbStorage_readAheadCacheMaxSizeMb="16")
    http_port = free_port()
    secrets_dir = tmp_path_factory.mktemp("http-secrets")
    (secrets_dir / "token").write_text(TOKEN + "\n")
    bookie = LocalBookie(tmp_path_factory.mktemp("http-bookie"), free_port(), cluster.metadata_uri,
                         {"httpServerEnabled": "true", "httpServerPort": str(http_port),
                          "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16",
                          "journalMaxGroupWaitMSec": "1", "httpServerAuthTokenFile": str(secrets_dir / "token"),
                          # no checkpoint on a timer: the GET test's snapshot of the bookie's files must see
                          # only what requests change (a checkpoint flushes earlier tests' adds at any time)
                          "flushInterval": "3600000",
                          "httpServerKeystorePassword": KEYSTORE_PASSWORD, "saslJaasClientPassword": SASL_PASSWORD})
    try:
        bookie.start()
        cluster.wait_registered(3)
        with BookKeeper(cluster.metadata_uri, timeout=60) as bk:
            lh = bk.create_ledger(3, 2, 2, password=LEDGER_PASSWORD)
            lh.add_entries([f"entry-{i}".encode() for i in range(5)])
            lh.close()
        cluster.http_port = http_port
        cluster.http_bookie = bookie
        cluster.ledger_id = lh.ledger_id
        cluster.token_file = str(secrets_dir / "token")
        yield cluster
    finally:
        bookie.stop()
        cluster.stop()


def call(api, path, method="GET", body=None, raw=None, token=TOKEN, **params):
    query = ("?" + urllib.parse.urlencode(params)) if params else ""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    req = urllib.request.Request(f"http://127.0.0.1:{api.http_port}{path}{query}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Content-Type", "")


def ok_json(api, path, method="GET", body=None, **params):
    status, text, _ = call(api, path, method, body, **params)
    assert status == 200, text
    return json.loads(text)


def error(api, path, status, method="GET", body=None, raw=None, **params) -> str:
    got, text, ctype = call(api, path, method, body, raw, **params)
    assert got == status, text
    assert ctype == "application/json"
    return json.loads(text)["error"]


def test_openapi_describes_every_endpoint():
    described = {(path, method.upper()) for path, ops in OPENAPI["paths"].items() for method in ops}
    served = {("/api/v1/" + path, method) for path, methods in {**ENDPOINTS, **AUTORECOVERY_ENDPOINTS}.items()
              for method in methods}
    assert described == served


def test_server_config_get_and_put(api):
    conf = ok_json(api, "/api/v1/config/server_config")
    assert conf["httpServerEnabled"] == "true" and conf["bookiePort"] == str(api.http_bookie.port)
    assert all(isinstance(v, str) for v in conf.values())
    status, text, ctype = call(api, "/api/v1/config/server_config", "PUT", {"journalMaxBackups": 7})
    assert (status, text.strip(), ctype) == (200, "Success set server config.", "text/plain; charset=utf-8")
    assert ok_json(api, "/api/v1/config/server_config")["journalMaxBackups"] == "7"
    assert "journalMaxBackups" in error(api, "/api/v1/config/server_config", 400, "PUT", {"journalMaxBackups": "x"})
    assert "not JSON" in error(api, "/api/v1/config/server_config", 400, "PUT", raw=b"{nope")
    error(api, "/api/v1/config/server_config", 400, "PUT", raw=b"")
    assert ok_json(api, "/api/v1/config/server_config")["journalMaxBackups"] == "7"


def test_ledger_list_metadata_read(api):
    lid = str(api.ledger_id)
    assert ok_json(api, "/api/v1/ledger/list")[lid] is None
    listed = ok_json(api, "/api/v1/ledger/list", print_metadata="true", decode_meta="true")
    md = listed[lid]
    assert (md["state"], md["lastEntryId"], md["closed"], md["password"]) == ("CLOSED", 4, True, None)
    assert "withheld" in md["passwordWithheld"]
    assert list(md) == ["ledgerId", "metadataFormatVersion", "ensembleSize", "writeQuorumSize", "ackQuorumSize",
                        "state", "length", "lastEntryId", "ctime", "digestType", "password", "customMetadata",
                        "closed", "allEnsembles", "ctoken", "passwordWithheld"]
    assert isinstance(ok_json(api, "/api/v1/ledger/list", print_metadata="true")[lid], str)
    assert ok_json(api, "/api/v1/ledger/list", print_metadata="true", page="2") == {}
    assert ok_json(api, "/api/v1/ledger/metadata", ledger_id=lid) == {lid: md}
    assert ok_json(api, "/api/v1/ledger/metadata", ledger_id=lid, ledger_scope_id="0") == {lid: md}
    assert ok_json(api, "/api/v1/ledger/read", ledger_id=lid) == {str(i): f"entry-{i}" for i in range(5)}
    assert ok_json(api, "/api/v1/ledger/read", ledger_id=lid, start_entry_id="1", end_entry_id="2") == {
        "1": "entry-1", "2": "entry-2"}
    assert ok_json(api, "/api/v1/ledger/read", ledger_id=lid, page="1")["Entries for page: "] == "1"
    assert "after end_entry_id" in error(api, "/api/v1/ledger/read", 400, ledger_id=lid, start_entry_id="3",
                                         end_entry_id="1")
    assert "does not exist" in error(api, "/api/v1/ledger/metadata", 404, ledger_id="987654321")
    assert "give an integer in ASCII digits" in error(api, "/api/v1/ledger/metadata", 400, ledger_id="abc")
    assert "missing parameter ledger_id" in error(api, "/api/v1/ledger/read", 400)
    assert "expected true or false" in error(api, "/api/v1/ledger/list", 400, print_metadata="maybe")


def test_ledger_list_of_a_scope_lists_its_scoped_ledgers_only(api):
    """BP-34: ledger_scope_id lists that scope's 128-bit ledgers (their metadata with scopeId and
    qualifiedName); without it, scope 0, where they are not. One scoped ledger reuses the unscoped ledger's
    64-bit id: the scope alone tells them apart."""
    scope = 0x5C0_7E5F                                   # no other test uses it
    with BookKeeper(api.metadata_uri, timeout=60) as bk:
        twin = bk.create_ledger_adv(2, 2, 2, password=b"scoped", scope_id=scope, ledger_id=api.ledger_id)
        twin.close()
        other = bk.create_ledger(2, 2, 2, password=b"scoped", scope_id=scope)
        other.close()
    twin_id, other_id, plain = str(twin.ledger_id), str(other.ledger_id), str(api.ledger_id)
    assert twin_id == plain
    assert ok_json(api, "/api/v1/ledger/list", ledger_scope_id=str(scope)) == {twin_id: None, other_id: None}
    listed = ok_json(api, "/api/v1/ledger/list", ledger_scope_id=str(scope), print_metadata="true",
                     decode_meta="true")
    assert set(listed) == {twin_id, other_id}
    for lid, handle in ((twin_id, twin), (other_id, other)):
        md = listed[lid]
        assert (md["ledgerId"], md["scopeId"], md["ensembleSize"]) == (int(lid), scope, 2)
        assert md["qualifiedName"] == handle.qualified_name == f"{scope:016x}{int(lid):016x}"
    assert ok_json(api, "/api/v1/ledger/list", ledger_scope_id=str(scope + 1)) == {}
    unscoped = ok_json(api, "/api/v1/ledger/list", print_metadata="true", decode_meta="true")
    assert other_id not in unscoped
    assert unscoped[plain]["ensembleSize"] == 3 and "scopeId" not in unscoped[plain]
    assert ok_json(api, "/api/v1/ledger/metadata", ledger_id=twin_id, ledger_scope_id=str(scope)) == {
        listed[twin_id]["qualifiedName"]: listed[twin_id]}


@pytest.fixture(scope="module")
def bare_api(tmp_path_factory):
    """A bookie without a metadata service (--no-metadata) and its admin port."""
    http_port = free_port()
    bookie = LocalBookie(tmp_path_factory.mktemp("http-bare-bookie"), free_port(), None,
                         {"httpServerEnabled": "true", "httpServerPort": str(http_port),
                          "dbStorage_writeCacheMaxSizeMb": "16", "dbStorage_readAheadCacheMaxSizeMb": "16"})
    try:
        bookie.start()
        bookie.http_port = http_port
        yield bookie
    finally:
        bookie.stop()


def test_endpoints_that_need_the_metadata_service_are_503_on_a_bookie_without_one(bare_api):
    """The cluster endpoints cannot answer (503, naming --no-metadata); the bookie's own ones still do."""
    for path, params in (("/api/v1/bookie/list_bookies", {"type": "rw"}), ("/api/v1/bookie/cluster_info", {}),
                         ("/api/v1/ledger/list", {}), ("/api/v1/ledger/metadata", {"ledger_id": "1"})):
        assert "--no-metadata" in error(bare_api, path, 503, **params), path
    assert call(bare_api, "/api/v1/bookie/is_ready")[:2] == (200, "OK\n")
    assert set(ok_json(bare_api, "/api/v1/bookie/list_disk_file", file_type="journal")) == {"journal files"}
    assert bare_api.alive()


def test_ledger_delete(api):
    with BookKeeper(api.metadata_uri, timeout=60) as bk:
        lh = bk.create_ledger(2, 2, 2)
        lh.close()
    lid = str(lh.ledger_id)
    assert "use DELETE" in error(api, "/api/v1/ledger/delete", 405, ledger_id=lid)
    assert ok_json(api, "/api/v1/ledger/delete", "DELETE", ledger_id=lid) == f"Deleted ledger: {lid}"
    error(api, "/api/v1/ledger/metadata", 404, ledger_id=lid)
    error(api, "/api/v1/ledger/delete", 404, "DELETE", ledger_id=lid)


def test_bookie_endpoints(api):
    ids = sorted(b.bookie_id for b in api.bookies + [api.http_bookie])
    assert sorted(ok_json(api, "/api/v1/bookie/list_bookies", type="rw")) == ids
    assert ok_json(api, "/api/v1/bookie/list_bookies", type="ro") == {}
    assert all(isinstance(v, str) for v in
               ok_json(api, "/api/v1/bookie/list_bookies", type="rw", print_hostnames="true").values())
    assert "type" in error(api, "/api/v1/bookie/list_bookies", 400)
    info = ok_json(api, "/api/v1/bookie/list_bookie_info")
    assert sorted(k for k in info if k != "ClusterInfo: ") == ids
    assert info["ClusterInfo: "].startswith("{Free: ") and all(v.startswith(": {Free: ") for k, v in info.items()
                                                               if k != "ClusterInfo: ")
    (mark,) = ok_json(api, "/api/v1/bookie/last_log_mark").items()
    assert mark[0].startswith("LastLogMark: Journal Id - ") and mark[1].startswith("Pos - ")
    files = ok_json(api, "/api/v1/bookie/list_disk_file")
    assert set(files) == {"journal files", "entrylog files", "index files"}
    assert files["journal files"].endswith(".txn\t")
    assert set(ok_json(api, "/api/v1/bookie/list_disk_file", file_type="journal")) == {"journal files"}
    error(api, "/api/v1/bookie/list_disk_file", 400, file_type="nope")
    assert call(api, "/api/v1/bookie/is_ready")[:2] == (200, "OK\n")
    assert ok_json(api, "/api/v1/bookie/sanity") == {"passed": True, "readOnly": False}
    cluster_info = ok_json(api, "/api/v1/bookie/cluster_info")
    assert cluster_info == {"auditorElected": False, "auditorId": "", "clusterUnderReplicated": False,
                            "ledgerReplicationEnabled": True, "totalBookiesCount": 3, "writableBookiesCount": 3,
                            "readonlyBookiesCount": 0, "unavailableBookiesCount": 0}


def test_gc_suspend_and_resume(api):
    path = "/api/v1/bookie/gc/suspend_compaction"
    assert ok_json(api, path) == {"isMajorGcSuspended": "false", "isMinorGcSuspended": "false"}
    assert ok_json(api, path, "PUT", {"suspendMajor": True}) == {"isMajorGcSuspended": "true",
                                                                 "isMinorGcSuspended": "false"}
    assert ok_json(api, "/api/v1/bookie/gc/resume_compaction")["isMajorGcSuspended"] == "true"
    assert ok_json(api, "/api/v1/bookie/gc/resume_compaction", "PUT", {"resumeMajor": True}) == {
        "isMajorGcSuspended": "false", "isMinorGcSuspended": "false"}
    error(api, path, 400, "PUT", {"suspendMajor": "yes"})
    error(api, path, 400, "PUT", {"other": True})
    error(api, path, 405, "DELETE")


def test_unknown_paths_are_404_and_old_endpoints_stay(api):
    assert call(api, "/api/v1/bookie/nope")[0] == 404          # under the site's own nodes: twisted's 404 page
    assert call(api, "/api/v1/nope")[0] == 404
    error(api, "/api/v1/ledger/nope", 404)
    error(api, "/api/v1/ledger/list/extra", 404)
    error(api, "/api/v1/bookie/gc/suspend_compaction/x", 404)
    assert call(api, "/api/v1/bookie/state")[0] == 200
    assert call(api, "/heartbeat")[:2] == (200, "OK\n")


# --- fuzz: every operation of the OpenAPI description, random parameters and bodies; never 5xx ------------

_OPERATIONS = sorted((path, method) for path, ops in OPENAPI["paths"].items() for method in ops)
_JUNK = st.one_of(st.text(max_size=12), st.integers(-(2**65), 2**65).map(str), st.sampled_from(
    ["", "-1", "0", "1", "true", "false", "rw", "ro", "journal", "0x10", "1e3", "%00", "\u00e9"]))


def _value(schema):
    if schema.get("enum"):
        return st.one_of(st.sampled_from(schema["enum"]), _JUNK)
    if schema.get("type") == "integer":
        return st.one_of(st.integers(-5, 2**64).map(str), _JUNK)
    return _JUNK


@st.composite
def requests(draw, operation):
    path, method = operation
    op = OPENAPI["paths"][path][method]
    params = {}
    for p in op.get("parameters", []):
        if p.get("required") or draw(st.booleans()):
            params[p["name"]] = draw(_value(p["schema"]))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["get", "put", "post", "delete"]))
    body = None
    if method in ("put", "post"):
        body = draw(st.one_of(
            # configuration keys that change nothing the later tests rely on
            st.dictionaries(st.sampled_from(["suspendMajor", "suspendMinor", "resumeMajor", "resumeMinor",
                                             "journalMaxBackups", "diskUsageWarnThreshold", "x"]),
                            st.one_of(st.booleans(), st.integers(-3, 10**6), st.text(max_size=5)), max_size=3)
            .map(lambda d: json.dumps(d).encode()),
            st.binary(max_size=20)))
    return path, method.upper(), params, body


@pytest.mark.parametrize("operation", _OPERATIONS, ids=[f"{m} {p}" for p, m in _OPERATIONS])
def test_fuzz_every_endpoint_never_answers_5xx(api, operation):
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(request=requests(operation))
    def fuzz(request):
        path, method, params, body = request
        status, text, _ctype = call(api, path, method, raw=body, **params)
        assert status < 500, (path, method, params, body, status, text)

    fuzz()
    assert api.http_bookie.alive()
    if operation[0] == "/api/v1/autorecovery/status":   # the fuzz may have disabled it: the later tests need it on
        assert call(api, operation[0], "PUT", enabled="true")[0] == 200


def test_autorecovery_endpoints_are_served_by_the_bookie(api):
    """The /api/v1/autorecovery/... endpoints on a running bookie's admin port (the cluster has no
    auditor and nothing under-replicated: Java answers 404 for both)."""
    assert ok_json(api, "/api/v1/autorecovery/status") == {"enabled": True}
    assert ok_json(api, "/api/v1/autorecovery/status", method="PUT", enabled="false") == {"enabled": False}
    assert ok_json(api, "/api/v1/autorecovery/status") == {"enabled": False}
    assert ok_json(api, "/api/v1/autorecovery/status", method="PUT", enabled="true") == {"enabled": True}
    assert call(api, "/api/v1/autorecovery/who_is_auditor")[0] == 404
    assert call(api, "/api/v1/autorecovery/list_under_replicated_ledger")[0] == 404
    assert "not set yet" in error(api, "/api/v1/autorecovery/lost_bookie_recovery_delay", 400)
    status, text, _ = call(api, "/api/v1/autorecovery/lost_bookie_recovery_delay", "PUT", {"delay_seconds": 7})
    assert status == 200, text
    status, text, _ = call(api, "/api/v1/autorecovery/lost_bookie_recovery_delay")
    assert status == 200 and text.strip() == "lostBookieRecoveryDelay value: 7"


# --- hostile input (issue 24): secrets, GETs that change nothing, bodies before credentials ----------------

_EXTRA_GETS = ["/heartbeat", "/metrics", "/api/v1/bookie/info", "/api/v1/bookie/state",
               "/api/v1/bookie/state/readonly", "/api/v1/bookie/gc", "/api/v1/bookie/gc_details"]


def _zk_tree(zk, path="/") -> dict:
    data, stat = zk.get(path)
    out = {path: (data, stat.mzxid, stat.cversion)}
    for child in zk.get_children(path):
        if path == "/" and child == "zookeeper":
            continue
        out.update(_zk_tree(zk, path.rstrip("/") + "/" + child))
    return out


def _files(bookie_dir: Path) -> dict:
    """The bookie's journal and ledger files; not the logs (the bookie's records the refusals, RocksDB's LOG
    gets a statistics dump on a timer)."""
    return {str(p): (p.stat().st_size, p.read_bytes()) for d in ("journal", "ledgers")
            for p in sorted((bookie_dir / d).rglob("*")) if p.is_file() and not p.name.startswith("LOG")}


def _secrets(api) -> list[str]:
    import base64

    return [TOKEN, api.token_file, KEYSTORE_PASSWORD, SASL_PASSWORD, LEDGER_PASSWORD.decode(),
            base64.b64encode(LEDGER_PASSWORD).decode()]


def test_no_get_answer_holds_a_secret_and_no_get_changes_zookeeper_or_the_disks(api):
    """Every GET of the OpenAPI description (fuzzed) and the bookie's own GETs, without credentials as an
    attacker sends them: no answer contains a configured secret or a ledger password, and ZooKeeper and
    the bookie's files are exactly as before (sanity, a GET that writes, is refused)."""
    gets = sorted(op for op in _OPERATIONS if op[1] == "get")
    zk_before, files_before = _zk_tree(api.zk), _files(api.http_bookie.data_dir)
    answers = []

    for path in _EXTRA_GETS:
        answers.append(call(api, path, token=None))
    for print_metadata, decode in [("true", "true"), ("true", "false")]:
        answers.append(call(api, "/api/v1/ledger/list", token=None, print_metadata=print_metadata,
                            decode_meta=decode))
    answers.append(call(api, "/api/v1/ledger/metadata", token=None, ledger_id=str(api.ledger_id)))
    answers.append(call(api, "/api/v1/config/server_config", token=None))
    for operation in gets:
        @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(request=requests(operation))
        def fuzz(request):
            path, method, params, body = request
            if method == "GET":
                answers.append(call(api, path, method, raw=body, token=None, **params))

        fuzz()

    assert len(answers) > 50
    for status, text, _ in answers:
        assert status < 500, text
        for secret in _secrets(api):
            assert secret not in text, (secret, text[:300])
    config = json.loads(call(api, "/api/v1/config/server_config", token=None)[1])
    assert config["httpServerKeystorePassword"].startswith("(redacted")
    assert config["httpServerAuthTokenFile"].startswith("(redacted")
    assert config["saslJaasClientPassword"].startswith("(redacted")
    assert _zk_tree(api.zk) == zk_before
    assert _files(api.http_bookie.data_dir) == files_before


def test_sanity_is_a_mutating_request(api):
    """GET bookie/sanity writes and deletes a ledger: without credentials it is refused and nothing is
    written; with them it passes on a client of its own (the shared client still sees every bookie)."""
    with BookKeeper(api.metadata_uri, timeout=60) as bk:
        listed_before = bk.list_ledgers()
    zk_before = _zk_tree(api.zk)
    for token in (None, "wrong"):
        status, text, _ = call(api, "/api/v1/bookie/sanity", token=token)
        assert status == 401, text
    assert _zk_tree(api.zk) == zk_before
    assert ok_json(api, "/api/v1/bookie/sanity") == {"passed": True, "readOnly": False}
    with BookKeeper(api.metadata_uri, timeout=60) as bk:
        assert bk.list_ledgers() == listed_before
    ids = sorted(b.bookie_id for b in api.bookies + [api.http_bookie])
    assert sorted(k for k in ok_json(api, "/api/v1/bookie/list_bookie_info") if k != "ClusterInfo: ") == ids


def _raw_request(port: int, head: bytes, body_bytes: int = 0, chunk: int = 64 * 1024) -> bytes:
    """Send `head` then up to `body_bytes` of body (stopping when the server closes), and read the answer."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        sent = 0
        try:
            while sent < body_bytes:
                sock.sendall(b"x" * min(chunk, body_bytes - sent))
                sent += chunk
        except OSError:
            pass                                    # refused early: the server closed while we sent
        answer = b""
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except OSError:
            pass
        return answer


def _deleted_files_held(pid: int) -> list[str]:
    fd_dir = Path(f"/proc/{pid}/fd")
    held = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.endswith("(deleted)"):
            held.append(target)
    return held


def test_unauthenticated_bodies_are_refused_before_they_are_read(api):
    """The attack: 20 connections each sending 5 MiB of a declared 1 TB body without credentials. Each is
    refused (401) on its headers; nothing is spooled to disk; the bookie stays up and serves."""
    import concurrent.futures

    pid = api.http_bookie.pid
    head = (b"PUT /api/v1/config/server_config HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000000\r\n\r\n")
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: _raw_request(api.http_port, head, 5 << 20), range(20)))
    assert all(a.startswith(b"HTTP/1.1 401") or a == b"" for a in answers), answers[:2]
    assert sum(a.startswith(b"HTTP/1.1 401") for a in answers) >= 1
    assert _deleted_files_held(pid) == []
    # headers alone: the answer is there before any body byte is sent
    assert _raw_request(api.http_port, head).startswith(b"HTTP/1.1 401")
    # with credentials, a body over httpServerMaxRequestBodyBytes is refused on its declared length ...
    authed = head.replace(b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {TOKEN}\r\n".encode())
    assert _raw_request(api.http_port, authed).startswith(b"HTTP/1.1 413")
    # ... and a chunked one as soon as it passes the limit
    chunked = (b"PUT /api/v1/config/server_config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
               + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    answer = _raw_request(api.http_port, chunked + piece * 4)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert _deleted_files_held(pid) == []
    assert api.http_bookie.alive()
    assert call(api, "/heartbeat")[:2] == (200, "OK\n")
    # a small authorized body is still served
    assert call(api, "/api/v1/config/server_config", "PUT", {"journalMaxBackups": 6})[0] == 200


@pytest.mark.parametrize("path, method, params, body", [
    ("/api/v1/config/server_config", "PUT", {}, b"[" * 60000),
    ("/api/v1/bookie/state/readonly", "PUT", {}, b"[" * 60000),
    ("/api/v1/bookie/gc", "PUT", {}, b"{\"a\":" * 12000),
    ("/api/v1/autorecovery/lost_bookie_recovery_delay", "PUT", {}, json.dumps({"delay_seconds": 10**23}).encode()),
    ("/api/v1/autorecovery/lost_bookie_recovery_delay", "PUT", {}, json.dumps({"delay_seconds": 2**31}).encode()),
    ("/api/v1/ledger/metadata", "GET", {"ledger_id": "\u0661"}, None),
    ("/api/v1/ledger/metadata", "GET", {"ledger_id": " +1_0"}, None),
    ("/api/v1/ledger/metadata", "GET", {"ledger_id": "+10"}, None),
    ("/api/v1/ledger/read", "GET", {"ledger_id": "1", "start_entry_id": "\u0663"}, None),
])
def test_hostile_parameters_and_bodies_are_400(api, path, method, params, body):
    status, text, _ = call(api, path, method, raw=body, **params)
    assert status == 400, text
    assert "Traceback" not in text


def test_lost_bookie_recovery_delay_keeps_to_java_int(api):
    path = "/api/v1/autorecovery/lost_bookie_recovery_delay"
    assert call(api, path, "PUT", {"delay_seconds": 2**31 - 1})[0] == 200
    assert call(api, path)[1].strip() == f"lostBookieRecoveryDelay value: {2**31 - 1}"
    assert call(api, path, "PUT", {"delay_seconds": 10**23})[0] == 400
    assert call(api, path)[1].strip() == f"lostBookieRecoveryDelay value: {2**31 - 1}"


def test_the_docs_list_exactly_the_gets_a_read_only_open_api_serves(api):
    import re

    text = (REPO / "docs" / "admin-http-security.md").read_text()
    listed = set(re.findall(r"^\| `(/[^`]*)` \|", text, re.M))
    served = {path for path, method in _OPERATIONS if method == "get"} | set(_EXTRA_GETS)
    assert listed == served - {"/api/v1/bookie/sanity"}
    for path in sorted(listed):
        status, body, _ = call(api, path, token=None)
        assert status != 401, (path, body)
    assert call(api, "/api/v1/bookie/sanity", token=None)[0] == 401
