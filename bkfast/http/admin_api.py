"""BookKeeper's HTTP admin endpoints for operators (spec §9.2: Java's paths, parameters, JSON shapes), as
twisted.web resources over bkfast.admin. `install_admin_api(root, context)` adds them under /api/v1/ of a
root resource; the server that owns the site calls it once.

  GET|PUT /api/v1/config/server_config      GET: explicitly set keys (values as strings); PUT {key: value}
  GET     /api/v1/ledger/list               print_metadata, decode_meta, page (100 per page), ledger_scope_id
  GET     /api/v1/ledger/metadata           ledger_id (+ ledger_scope_id)
  GET     /api/v1/ledger/read               ledger_id, start_entry_id, end_entry_id, page (1000 per page)
  DELETE  /api/v1/ledger/delete             ledger_id
  GET     /api/v1/bookie/list_bookies       type=rw|ro, print_hostnames
  GET     /api/v1/bookie/list_bookie_info   free/total disk space per bookie and for the cluster
  GET     /api/v1/bookie/last_log_mark      this bookie's lastMark
  GET     /api/v1/bookie/list_disk_file     file_type=journal|entrylog|index (default all)
  GET     /api/v1/bookie/is_ready           "OK", or 503 while starting / stopping
  GET     /api/v1/bookie/sanity             write/read a ledger on this bookie alone
  GET     /api/v1/bookie/cluster_info       bookie counts, auditor, under-replication
  GET|PUT /api/v1/bookie/gc/suspend_compaction, /api/v1/bookie/gc/resume_compaction
  GET     /api/v1/bookie/racks_info       the bookie rack table (Pulsar's /bookies: group -> bookie -> rack)
  GET|PUT|DELETE /api/v1/bookie/rack_info bookie=host:port; PUT {"rack", "group", "hostname"} (bkfast.admin.racks)
  /api/v1/autorecovery/...                  bkfast.http.autorecovery_api (install_all_admin_apis there)

Unlike Java, a bad or missing parameter is 400 with {"error": message}, a missing ledger 404, a wrong
method 405 (with Allow), a metadata store or bookie that cannot answer 503; 500 is left for bkfast's own bugs.
Every handler runs in the reactor's thread pool (kazoo, files, the blocking client); none blocks the reactor.

`context` needs: `bookie` (its `conf`, `started`, `read_only`, `gc`), `meta` (an object with a started kazoo
client `zk` and the ledgers `root`; None for a bookie without metadata) and `shutting_down`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading

from twisted.internet import defer
from twisted.web import resource, server

from bkfast.admin import bookie_files, bookie_ops, cluster, ledgers, racks
from bkfast.admin.common import AdminError, LedgerRef, in_reactor, parse_id
from bkfast.conf import client_settings_of, format_value, is_secret_key
from bkfast.errors import (
    AdminBusyError,
    BKError,
    BKNoSuchLedgerExistsException,
    ConfigurationError,
    InvalidLedgerIdError,
)
from bkfast.http.limits import AdmissionGate, load_json
from bkfast.ids import LedgerId

__all__ = ["install_admin_api", "_ApiError", "ENDPOINTS"]

log = logging.getLogger(__name__)

LEDGERS_PER_PAGE = 100
ENTRIES_PER_PAGE = 1000


class _ApiError(Exception):
    """An answer other than 200, with its status and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Text(str):
    """A body sent as plain text rather than JSON (Java's text answers)."""


# --- parameters ---------------------------------------------------------------------------------------


def _int(params: dict, name: str, default: int | None = None, low: int = 0, high: int = 2**63 - 1) -> int:
    text = params.get(name)
    if text is None or text == "":
        if default is None:
            raise _ApiError(400, f"missing parameter {name}")
        return default
    try:
        return parse_id(text, name, high, low)      # ASCII digits only, as the shell takes them
    except AdminError as err:
        raise _ApiError(400, str(err)) from None


def _bool(params: dict, name: str) -> bool:
    text = params.get(name, "false").lower()
    if text not in ("true", "false"):
        raise _ApiError(400, f"{name}: expected true or false, got {params.get(name)!r}")
    return text == "true"


def _ledger(params: dict) -> LedgerRef:
    if "ledger_qualified_name" in params:
        try:
            return LedgerRef(LedgerId.parse_qualified_name(params["ledger_qualified_name"]))
        except InvalidLedgerIdError as err:
            raise _ApiError(400, f"ledger_qualified_name: {err}") from None
    scope = _int(params, "ledger_scope_id", 0, 0, 2**64 - 1)
    return LedgerRef(LedgerId(scope, _int(params, "ledger_id")))


def _body_object(body: bytes) -> dict:
    try:
        value = load_json(body or b"null")
    except ValueError as err:
        raise _ApiError(400, f"the body is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise _ApiError(400, "expected a JSON object in the body")
    return value


# --- the shared pieces a handler uses -----------------------------------------------------------------


class _Services:
    """Lazily built, shared by the handlers: the ledger client of this process (on the bookie's reactor)."""

    def __init__(self, context, gate: AdmissionGate | None = None):
        self.context = context
        self.gate = gate
        self._client = None
        self._lock = threading.Lock()
        self.sanity_running = threading.Lock()

    @property
    def conf(self):
        return self.context.bookie.conf

    def zk(self) -> tuple:
        meta = self.meta()
        if meta.zk is None:
            raise _ApiError(501, "this endpoint reads ZooKeeper; this bookie's metadata store is etcd")
        return meta.zk, meta.root

    def etcd(self) -> tuple | None:
        """(etcd client, scope) when the bookie's metadata store is etcd, else None (ZooKeeper)."""
        meta = self.meta()
        return (meta.kv, meta.root) if meta.kv is not None else None

    def meta(self):
        """The bookie's metadata session (bkfast.server.metadata); 503 when it runs without one."""
        meta = self.context.meta
        if meta is None:
            raise _ApiError(503, "this bookie runs without a metadata service (--no-metadata)")
        return meta

    def client(self):
        """A blocking ledger client (call from a pool thread only)."""
        self.meta()
        with self._lock:
            if self._client is None:
                from bkfast import BookKeeper

                self._client = BookKeeper(self.conf.get("metadataServiceUri"), timeout=30.0,
                                          **client_settings_of(self.conf))
            return self._client

    def close(self):
        client, self._client = self._client, None
        if client is not None:
            return client.async_client.close()          # reactor thread: the async close
        return None


# --- handlers: (services, params, body) -> JSON-able or Text --------------------------------------------


REDACTED = "(redacted: the admin API never returns secrets)"


def server_config_get(s: _Services, params, body):
    return {k: REDACTED if is_secret_key(k) else format_value(v)
            for k, v in s.conf.to_dict().items() if v is not None}


def server_config_put(s: _Services, params, body):
    values = _body_object(body)
    if not values:
        raise _ApiError(400, "expected a JSON object of configuration keys and values")
    checked = type(s.conf)(s.conf.to_dict())
    try:
        for key, value in values.items():
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise ConfigurationError(f"{key}: expected a string, number or boolean")
            checked.set(key, value if isinstance(value, (bool, int, float)) or value is None else str(value))
        checked.validate()
    except ConfigurationError as err:
        raise _ApiError(400, str(err)) from None
    for key, value in values.items():
        s.conf.set(key, value)
    log.info("server configuration changed via the admin API: %s", ", ".join(values))
    return Text("Success set server config.")


def ledger_list(s: _Services, params, body):
    print_metadata = _bool(params, "print_metadata")
    decode = _bool(params, "decode_meta")
    scope = _int(params, "ledger_scope_id", 0, 0, 2**64 - 1)
    page = _int(params, "page", 0, 0, 2**31 - 1)
    bk = s.client()
    ids = bk.list_ledgers(scope)
    if not print_metadata:
        return {str(i): None for i in ids}
    if page > 0:
        ids = ids[(page - 1) * LEDGERS_PER_PAGE:page * LEDGERS_PER_PAGE]
    wanted = [LedgerId(scope, lid) for lid in ids]
    # One batched read (one reactor hop): a read per ledger cost the bookie's reactor ~0.15 ms each.
    found = in_reactor(60.0, bk.async_client.driver.read_many_ledger_metadata, wanted)
    out = {}
    for ledger in wanted:                       # ledgers deleted since the listing are left out
        if ledger in found:
            md = found[ledger].metadata
            out[str(ledger.ledger_id)] = _withheld(ledgers.metadata_to_dict(LedgerRef(ledger), md)) if decode \
                else _metadata_text(md)
    return out


PASSWORD_WITHHELD = "withheld: the admin API never returns ledger passwords"


def _withheld(metadata: dict) -> dict:
    # The password is all that guards a ledger's master key: whoever has it can fence the ledger or send
    # recovery adds, and these GETs are open to anyone who reaches the port (httpServerReadOnlyOpen).
    return {**metadata, "password": None, "passwordWithheld": PASSWORD_WITHHELD}


def _metadata_text(md) -> str:
    """Java's print_metadata text (the znode bytes as UTF-8), with the password field left empty."""
    from bkfast.meta.ledger_metadata import serialize_metadata

    text = serialize_metadata(md.replace(password=b"")).decode("utf-8", "replace")
    return f"{text} ({PASSWORD_WITHHELD})"


def ledger_metadata(s: _Services, params, body):
    ref = _ledger(params)
    return {str(ref): _withheld(ledgers.ledger_metadata(s.client(), ref))}


def ledger_read(s: _Services, params, body):
    ref = _ledger(params)
    start = _int(params, "start_entry_id", 0)
    end = _int(params, "end_entry_id", -1, -1)
    page = _int(params, "page", 0, 0, 2**31 - 1)
    if end != -1 and start > end:
        raise _ApiError(400, f"start_entry_id {start} is after end_entry_id {end}")
    if page > 0:
        start = start + (page - 1) * ENTRIES_PER_PAGE
        last_of_page = start + ENTRIES_PER_PAGE - 1
        end = last_of_page if end == -1 else min(end, last_of_page)
        if end < start:
            return {"Entries for page: ": str(page)}
    rows = ledgers.read_ledger(s.client(), ref, start, end)
    out = {str(r["entryId"]): r["data"].decode("ascii", "replace") for r in rows}
    if page > 0:
        out["Entries for page: "] = str(page)
    return out


def ledger_delete(s: _Services, params, body):
    ref = _ledger(params)
    ledgers.delete_ledger(s.client(), ref)
    return f"Deleted ledger: {ref}"


def _host_name(host: str) -> str:
    try:
        return socket.gethostbyaddr(host)[0]
    except OSError:
        return host


def list_bookies(s: _Services, params, body):
    kind = params.get("type")
    if kind not in ("rw", "ro"):
        raise _ApiError(400, f"type: expected rw or ro, got {kind!r}")
    names = _bool(params, "print_hostnames")
    rows = _list_bookies(s, writable=kind == "rw", read_only=kind == "ro")
    return {r["bookieId"]: (_host_name(r["host"]) if names else None) for r in rows}


def _list_bookies(s: _Services, writable: bool = True, read_only: bool = True) -> list[dict]:
    on_etcd = s.etcd()
    if on_etcd is not None:
        from bkfast.admin import etcd_admin

        kv, scope = on_etcd
        return etcd_admin.list_bookies(kv, scope, writable=writable, read_only=read_only)
    zk, root = s.zk()
    return cluster.list_bookies(zk, root, writable=writable, read_only=read_only)


def _gb(n: int) -> str:
    return f"{n}({n / 1e9:.3f}GB)"


def list_bookie_info(s: _Services, params, body):
    rows = cluster.bookie_info(s.client(), _list_bookies(s))
    answered = [r for r in rows if "error" not in r]
    if not answered:
        raise _ApiError(404, "no bookie answered")
    out = {r["bookieId"]: f": {{Free: {_gb(r['freeDiskSpace'])}, Total: {_gb(r['totalDiskSpace'])}}},"
           for r in answered}
    free, total = sum(r["freeDiskSpace"] for r in answered), sum(r["totalDiskSpace"] for r in answered)
    out["ClusterInfo: "] = f"{{Free: {_gb(free)}, Total: {_gb(total)}}}"
    return out


def last_log_mark(s: _Services, params, body):
    mark = bookie_files.last_mark(s.conf)
    return {f"LastLogMark: Journal Id - {m['journalId']}({m['journalIdHex']}.txn)": f"Pos - {m['offset']}"
            for m in mark.get("journals", [mark])}     # one key per journal directory


_FILE_TYPES = {"journal": "journal", "entrylog": "entrylog", "index": "index"}


def list_disk_file(s: _Services, params, body):
    kind = params.get("file_type")
    if kind is not None and kind not in _FILE_TYPES:
        raise _ApiError(400, f"file_type: expected journal, entrylog or index, got {kind!r}")
    files = bookie_files.list_files(s.conf, journal=kind in (None, "journal"), entry_logs=kind in (None, "entrylog"),
                                    index=kind in (None, "index"))
    return {f"{k} files": "".join(os.path.basename(f["path"]) + "\t" for f in v) for k, v in files.items()}


def is_ready(s: _Services, params, body):
    bookie = s.context.bookie
    if not getattr(bookie, "started", False) or s.context.shutting_down:
        raise _ApiError(503, "Bookie is not fully started yet")
    return Text("OK")


def sanity(s: _Services, params, body):
    """Java's GET bookie/sanity. It writes and deletes a ledger, so it needs a mutating request's credentials
    (_Endpoint checks them: CREDENTIALS_REQUIRED), and it pins a client of its own to this bookie, never the
    shared one the other endpoints use."""
    if s.conf.get("forceReadOnlyBookie") or s.context.bookie.read_only:
        return {"passed": False, "readOnly": True}
    if not s.sanity_running.acquire(blocking=False):
        raise _ApiError(409, "a sanity test is already running on this bookie")
    try:
        s.meta()
        from bkfast import BookKeeper

        with BookKeeper(s.conf.get("metadataServiceUri"), timeout=30.0, **client_settings_of(s.conf)) as own:
            bookie_ops.bookie_sanity(own, s.conf)
    finally:
        s.sanity_running.release()
    return {"passed": True, "readOnly": False}


_CLUSTER_INFO_KEYS = ("auditorElected", "auditorId", "clusterUnderReplicated", "ledgerReplicationEnabled",
                      "totalBookiesCount", "writableBookiesCount", "readonlyBookiesCount", "unavailableBookiesCount")


def cluster_info(s: _Services, params, body):
    on_etcd = s.etcd()
    if on_etcd is not None:
        from bkfast.admin import etcd_admin

        info = etcd_admin.cluster_info(*on_etcd)
    else:
        info = cluster.cluster_info(*s.zk())
    return {k: info[k] for k in _CLUSTER_INFO_KEYS}


def racks_info(s: _Services, params, body):
    zk, root = s.zk()
    return racks.list_bookie_racks(zk, root)


def _rack_bookie(params: dict) -> str:
    bookie = params.get("bookie")
    if not bookie:
        raise _ApiError(400, "missing parameter bookie (host:port)")
    return bookie


def rack_info_get(s: _Services, params, body):
    zk, root = s.zk()
    return racks.get_bookie_rack(zk, root, _rack_bookie(params))


def rack_info_put(s: _Services, params, body):
    bookie = _rack_bookie(params)
    values = _body_object(body) if body else {}
    unknown = set(values) - {"rack", "group", "hostname"}
    if unknown:
        raise _ApiError(400, f"unknown fields {sorted(unknown)}: expected {{\"rack\", \"group\", \"hostname\"}}")
    for key in ("rack", "group", "hostname"):
        value = values.get(key, params.get(key))
        if value is not None and not isinstance(value, str):
            raise _ApiError(400, f"{key}: expected a string, got {value!r}")
        values[key] = value
    if not values["rack"]:
        raise _ApiError(400, "missing rack (e.g. {\"rack\": \"/rack1\"})")
    zk, root = s.zk()
    return racks.set_bookie_rack(zk, root, bookie, values["rack"], values["group"], values["hostname"])


def rack_info_delete(s: _Services, params, body):
    zk, root = s.zk()
    return racks.delete_bookie_rack(zk, root, _rack_bookie(params))


def _gc(s: _Services):
    gc = getattr(s.context.bookie, "gc", None)
    if gc is None or not hasattr(gc, "suspended"):
        raise _ApiError(503, "this bookie has no garbage collector")
    return gc


def _gc_status(gc) -> dict:
    return {"isMajorGcSuspended": str(gc.suspended["major"]).lower(),
            "isMinorGcSuspended": str(gc.suspended["minor"]).lower()}


def gc_status(s: _Services, params, body):
    return _gc_status(_gc(s))


def _major_minor(body: bytes, major: str, minor: str) -> tuple[bool, bool]:
    values = _body_object(body)
    unknown = set(values) - {major, minor}
    if unknown or not values:
        raise _ApiError(400, f"expected JSON {{\"{major}\": bool, \"{minor}\": bool}}")
    for key, value in values.items():
        if not isinstance(value, bool):
            raise _ApiError(400, f"{key}: expected true or false, got {value!r}")
    return values.get(major, False), values.get(minor, False)


def gc_suspend(s: _Services, params, body):
    gc = _gc(s)
    major, minor = _major_minor(body, "suspendMajor", "suspendMinor")
    gc.suspend(major=major, minor=minor)
    return _gc_status(gc)


def gc_resume(s: _Services, params, body):
    gc = _gc(s)
    major, minor = _major_minor(body, "resumeMajor", "resumeMinor")
    gc.resume(major=major, minor=minor)
    return _gc_status(gc)


ENDPOINTS: dict[str, dict[str, object]] = {
    "config/server_config": {"GET": server_config_get, "PUT": server_config_put},
    "ledger/list": {"GET": ledger_list},
    "ledger/metadata": {"GET": ledger_metadata},
    "ledger/read": {"GET": ledger_read},
    "ledger/delete": {"DELETE": ledger_delete},
    "bookie/list_bookies": {"GET": list_bookies},
    "bookie/list_bookie_info": {"GET": list_bookie_info},
    "bookie/last_log_mark": {"GET": last_log_mark},
    "bookie/list_disk_file": {"GET": list_disk_file},
    "bookie/is_ready": {"GET": is_ready},
    "bookie/sanity": {"GET": sanity},
    "bookie/cluster_info": {"GET": cluster_info},
    "bookie/gc/suspend_compaction": {"GET": gc_status, "PUT": gc_suspend},
    "bookie/gc/resume_compaction": {"GET": gc_status, "PUT": gc_resume},
    "bookie/racks_info": {"GET": racks_info},
    "bookie/rack_info": {"GET": rack_info_get, "PUT": rack_info_put, "DELETE": rack_info_delete},
}
"""Path under /api/v1/ -> {HTTP method: handler}."""

CREDENTIALS_REQUIRED = frozenset({sanity})
"""Handlers that change state although Java serves them on GET: they need a mutating request's credentials."""


# --- twisted.web plumbing -------------------------------------------------------------------------------


def _classify(err: BaseException) -> tuple[int, str]:
    from bkfast.meta import MetadataError

    if isinstance(err, _ApiError):
        return err.status, str(err)
    if isinstance(err, BKNoSuchLedgerExistsException) or (isinstance(err, AdminError) and "does not exist" in str(err)):
        return 404, str(err)
    if isinstance(err, (AdminError, ConfigurationError, InvalidLedgerIdError)):
        return 400, str(err)
    if isinstance(err, (BKError, MetadataError, OSError)):
        return 503, f"{type(err).__name__}: {err}"
    log.error("admin API handler failed", exc_info=(type(err), err, err.__traceback__))
    return 500, f"internal error: {type(err).__name__}: {err}"


class _Endpoint(resource.Resource):
    isLeaf = True

    def __init__(self, services: _Services, methods: dict):
        super().__init__()
        self.services = services
        self.methods = methods

    def render(self, request):
        method = request.method.decode("ascii", "replace")
        handler = self.methods.get("GET" if method == "HEAD" else method)
        if request.postpath not in ([], [b""]):
            return _reply(request, 404, {"error": "no such resource"})
        if handler is None:
            request.setHeader(b"Allow", ", ".join(self.methods).encode())
            return _reply(request, 405, {"error": f"method {method} not allowed; use {' or '.join(self.methods)}"})
        security = getattr(request.channel.site, "security", None)
        if handler in CREDENTIALS_REQUIRED and security is not None and not security.allows_mutation(request):
            from bkfast.http.security import unauthorized_resource

            log.warning("admin API: refused %s %s without credentials (it changes state)", method,
                        request.path.decode("ascii", "replace"))
            return unauthorized_resource().render(request)
        try:
            params = {k.decode(): v[-1].decode() for k, v in request.args.items()}
        except UnicodeDecodeError:
            return _reply(request, 400, {"error": "parameters must be UTF-8"})
        body = request.content.read() if request.content is not None else b""
        try:
            d = self.services.gate.run(_handle, handler, self.services, params, body,
                                       ahead=security is not None and security.allows_mutation(request))
        except AdminBusyError as err:
            request.setHeader(b"Retry-After", b"1")
            return _reply(request, 503, {"error": f"admin API busy, retry later: {err}"})
        gone = []

        def client_gone(failure):
            gone.append(failure)
            d.cancel()                  # a request still waiting for the gate is dropped

        request.notifyFinish().addErrback(client_gone)

        def done(answer):
            if not gone:
                status, content_type, data = answer
                request.setResponseCode(status)
                request.setHeader(b"Content-Type", content_type)
                request.write(data)
                request.finish()

        d.addCallback(done)
        d.addErrback(lambda failure: failure.trap(defer.CancelledError))
        return server.NOT_DONE_YET


def _handle(handler, services, params, body) -> tuple[int, bytes, bytes]:
    """Runs in a pool thread: the handler and the encoding of its answer, so that neither costs the reactor."""
    try:
        status, result = 200, handler(services, params, body)
    except Exception as err:            # every failure is an answer; _classify logs bkfast's own bugs
        status, message = _classify(err)
        result = {"error": message}
    return (status, *_encode(result))


def _encode(body) -> tuple[bytes, bytes]:
    if isinstance(body, Text):
        return b"text/plain; charset=utf-8", body.encode() + b"\n"
    return b"application/json", (json.dumps(body, indent=2) + "\n").encode()


def _reply(request, status: int, body) -> bytes:
    request.setResponseCode(status)
    content_type, data = _encode(body)
    request.setHeader(b"Content-Type", content_type)
    return data


class _Branch(resource.Resource):
    """An inner path node: unknown children are 404 with a JSON body."""

    def getChild(self, path, request):
        return _NotFound()


class _NotFound(resource.Resource):
    isLeaf = True

    def render(self, request):
        return _reply(request, 404, {"error": f"no such resource: {request.path.decode('utf-8', 'replace')}"})


class _LeafWithChildren(resource.Resource):
    """An existing leaf endpoint (e.g. /api/v1/bookie/gc) that now has children (gc/suspend_compaction): the
    leaf still answers its own path."""

    def __init__(self, leaf: resource.Resource):
        super().__init__()
        self.leaf = leaf

    def render(self, request):
        return self.leaf.render(request)

    def getChild(self, path, request):
        if path == b"":
            return self.leaf
        return _NotFound()


def _child(parent: resource.Resource, name: bytes) -> resource.Resource:
    existing = parent.children.get(name)
    if existing is None:
        existing = _Branch()
        parent.putChild(name, existing)
    elif existing.isLeaf:
        existing = _LeafWithChildren(existing)
        parent.putChild(name, existing)
    return existing


def install_admin_api(root: resource.Resource, context, endpoints: dict | None = None) -> None:
    """Add the endpoints of ENDPOINTS under `root`/api/v1/ (existing children such as bookie/state stay).
    Call once per site, before the server listens. Also makes the ledger client share the running reactor."""
    import crochet

    try:
        crochet.no_setup()          # the bookie's reactor runs in the main thread: crochet must not start one
    except RuntimeError:
        pass                        # crochet already set up (a process that owns a client reactor thread)
    from twisted.internet import reactor

    conf = context.bookie.conf
    gate = AdmissionGate(reactor, conf.http_server_max_concurrent_requests, conf.http_server_max_queued_requests,
                         conf.http_server_max_busy_share)
    services = _Services(context, gate)
    v1 = _child(_child(root, b"api"), b"v1")
    for path, methods in (endpoints if endpoints is not None else ENDPOINTS).items():
        node = v1
        *parents, leaf = path.split("/")
        for name in parents:
            node = _child(node, name.encode())
        node.putChild(leaf.encode(), _Endpoint(services, methods))
    reactor.addSystemEventTrigger("before", "shutdown", services.close)
    reactor.addSystemEventTrigger("before", "shutdown", gate.stop)
