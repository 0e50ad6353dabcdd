"""A blocking etcd v3 client for the metadata driver: key ranges, transactions, leases and watches over etcd's
JSON gateway (bkfast.meta.etcd_http says why not a client library).

Owns: the endpoints (tried in turn: a refused or timed-out endpoint passes the call to the next), the
base64/int64-as-text encoding of the gateway, and one deadline per operation across retries. Every failure
to reach the store within the deadline is a `BKMetaStoreException` naming the endpoints. Watches
(`EtcdWatch`) run on their own thread and survive an etcd restart: when the stream breaks they ask their owner
to read the state again (`on_reset`) and watch on from the revision of that read, so no change is lost.

Must never: run in the reactor thread (every call blocks), know the BookKeeper key layout (bkfast.meta.etcd_layout).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bkfast.errors import BKMetaStoreException
from bkfast.threads import start_thread

from .etcd_http import EtcdEndpoint, EtcdRefused, EtcdUnavailable, tls_context

__all__ = ["EtcdKV", "KeyValue", "WatchEvent", "EtcdWatch", "TxnResult", "range_end_of_prefix", "EtcdRefused",
           "EtcdUnavailable", "MAX_TXN_OPS"]

log = logging.getLogger(__name__)


# etcd refuses a transaction of more than --max-txn-ops (128 by default) operations.
MAX_TXN_OPS = 128


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def range_end_of_prefix(prefix: bytes) -> bytes:
    """The key just past every key starting with `prefix` (etcd's prefix range end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True)
class KeyValue:
    """One key as etcd returns it; `version` counts the puts since the key was created (1 after the first)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict) -> KeyValue:
        return cls(_unb64(kv.get("key")), _unb64(kv.get("value")), int(kv.get("create_revision", 0)),
                   int(kv.get("mod_revision", 0)), int(kv.get("version", 0)), int(kv.get("lease", 0)))


@dataclass(frozen=True)
class WatchEvent:
    """A put (`deleted` False) or a delete of one key, at `kv.mod_revision`."""

    deleted: bool
    kv: KeyValue


@dataclass(frozen=True)
class TxnResult:
    """Whether the compares held, the store's revision after the transaction, and each request's answer."""

    succeeded: bool
    revision: int
    responses: list[dict]

    def ranges(self) -> list[list[KeyValue]]:
        """The key-values of each range request of the branch that ran, in order."""
        return [[KeyValue.from_json(kv) for kv in r["response_range"].get("kvs", [])]
                for r in self.responses if "response_range" in r]


# --- transaction parts (etcd's Compare and RequestOp messages) --------------------------------------------

def cmp_absent(key: bytes) -> dict:
    """Holds when `key` does not exist (its create revision is 0)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def cmp_present(key: bytes) -> dict:
    """Holds when `key` exists."""
    return {"key": _b64(key), "target": "CREATE", "result": "GREATER", "create_revision": "0"}


def cmp_put_count(key: bytes, puts: int) -> dict:
    """Holds when `key` has been written `puts` times since it was created (etcd's key version; 0: absent)."""
    return {"key": _b64(key), "target": "VERSION", "result": "EQUAL", "version": str(puts)}


def cmp_mod_revision(key: bytes, revision: int) -> dict:
    """Holds when `key` was last modified at `revision` (0: the key is absent)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def cmp_lease(key: bytes, lease: int) -> dict:
    """Holds when `key` is attached to `lease`."""
    return {"key": _b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def op_put(key: bytes, value: bytes, lease: int = 0) -> dict:
    put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def op_get(key: bytes, end: bytes | None = None, keys_only: bool = False) -> dict:
    rng: dict[str, Any] = {"key": _b64(key)}
    if end is not None:
        rng["range_end"] = _b64(end)
    if keys_only:
        rng["keys_only"] = True
    return {"request_range": rng}


def op_delete(key: bytes, end: bytes | None = None) -> dict:
    rng = {"key": _b64(key)}
    if end is not None:
        rng["range_end"] = _b64(end)
    return {"request_delete_range": rng}


class EtcdKV:
    """See the module docstring. `endpoints`: (host, port) pairs; `protocol` http or https; `ca_cert`,
    `cert_file`, `key_file` for TLS; `user`/`password` for etcd's authentication."""

    def __init__(self, endpoints: list[tuple[str, int]], *, protocol: str = "http", ca_cert: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, user: str | None = None,
                 password: str | None = None, timeout_s: float = 10.0):
        if not endpoints:
            raise ValueError("etcd: no endpoint given")
        self.endpoints = list(endpoints)
        self.timeout_s = float(timeout_s)
        tls = tls_context(ca_cert, cert_file, key_file) if protocol == "https" or ca_cert else None
        self._members = [EtcdEndpoint(h, p, self.timeout_s, tls, user, password) for h, p in self.endpoints]
        self._current = 0

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def close(self) -> None:
        """Close this thread's connections (other threads' close as their threads end)."""
        for member in self._members:
            member.close()

    # --- one request, retried across endpoints until the deadline -------------------------------------------
    def call(self, path: str, body: dict, what: str, timeout_s: float | None = None) -> dict:
        """POST `body` to the gateway's `path` (e.g. "kv/range"); the JSON answer. EtcdRefused when etcd says
        no; BKMetaStoreException once `timeout_s` (the client's timeout by default) has passed unanswered."""
        budget = timeout_s if timeout_s is not None else self.timeout_s
        deadline = time.monotonic() + budget
        delay = 0.02
        while True:
            member = self._members[self._current]
            try:
                return member.post(path, body, max(deadline - time.monotonic(), 0.05))
            except EtcdUnavailable as e:
                last = e
                self._current = (self._current + 1) % len(self._members)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BKMetaStoreException(f"{what}: etcd {self.describe()} did not answer within {budget:g} s "
                                           f"({str(last)[:200]})")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)

    # --- key-value ----------------------------------------------------------------------------------------
    def get(self, key: bytes, timeout_s: float | None = None) -> KeyValue | None:
        kvs, _ = self.range(key, None, timeout_s=timeout_s)
        return kvs[0] if kvs else None

    def range(self, key: bytes, end: bytes | None, *, keys_only: bool = False, limit: int = 0,
              timeout_s: float | None = None) -> tuple[list[KeyValue], int]:
        """The key-values from `key` up to `end` (None: `key` alone), and the store's revision when read."""
        body: dict[str, Any] = {"key": _b64(key)}
        if end is not None:
            body["range_end"] = _b64(end)
        if keys_only:
            body["keys_only"] = True
        if limit:
            body["limit"] = str(limit)
        answer = self.call("kv/range", body, f"read {key!r}", timeout_s)
        return [KeyValue.from_json(kv) for kv in answer.get("kvs", [])], int(answer["header"]["revision"])

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Store `value`; the store's revision after the put."""
        body = op_put(key, value, lease)["request_put"]
        return int(self.call("kv/put", body, f"write {key!r}")["header"]["revision"])

    def delete(self, key: bytes, end: bytes | None = None) -> int:
        """Delete `key` (or the range up to `end`); how many keys went."""
        body = op_delete(key, end)["request_delete_range"]
        return int(self.call("kv/deleterange", body, f"delete {key!r}").get("deleted", 0))

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None,
            what: str = "transaction") -> TxnResult:
        answer = self.call("kv/txn", {"compare": compare, "success": success, "failure": failure or []}, what)
        return TxnResult(bool(answer.get("succeeded", False)), int(answer["header"]["revision"]),
                         answer.get("responses", []))

    # --- leases -------------------------------------------------------------------------------------------
    def lease_grant(self, ttl_s: int) -> int:
        answer = self.call("lease/grant", {"TTL": str(int(ttl_s))}, "grant a lease")
        return int(answer["ID"])

    def lease_keepalive(self, lease: int, timeout_s: float | None = None) -> int:
        """Renew `lease`; its TTL in seconds, or 0 once it has expired (its keys are gone)."""
        answer = self.call("lease/keepalive", {"ID": str(lease)}, f"keep lease {lease} alive", timeout_s)
        return int(answer.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease: int, timeout_s: float | None = None) -> None:
        try:
            self.call("kv/lease/revoke", {"ID": str(lease)}, f"revoke lease {lease}", timeout_s)
        except EtcdRefused as e:
            if "not found" not in e.etcd_message:  # already expired: nothing to revoke
                raise

    # --- watches ------------------------------------------------------------------------------------------
    def watch(self, key: bytes, end: bytes | None, on_events: Callable[[list[WatchEvent]], None],
              on_reset: Callable[[], int], name: str = "etcd-watch") -> EtcdWatch:
        """Watch `key` (to `end`): `on_reset()` reads the state and returns the revision it read at, then
        `on_events` gets every later change; after a broken stream, `on_reset` again. Both in the watch's thread."""
        return EtcdWatch(self, key, end, on_events, on_reset, name)

    def open_watch_stream(self, key: bytes, end: bytes | None, start_revision: int) -> WatchStream:
        """A watch's own connection with the watch created on it (see EtcdWatch)."""
        member = self._members[self._current]
        create: dict[str, Any] = {"key": _b64(key), "start_revision": str(start_revision)}
        if end is not None:
            create["range_end"] = _b64(end)
        connection = member.connect(self.timeout_s)
        try:
            headers = {"Content-Type": "application/json", **member.auth_headers(self.timeout_s)}
            connection.request("POST", "/v3/watch", body=json.dumps({"create_request": create}), headers=headers)
            response = connection.getresponse()
            connection.sock.settimeout(None)       # a quiet key sends nothing for as long as it stays quiet
        except (OSError, http.client.HTTPException) as e:
            connection.close()
            self._current = (self._current + 1) % len(self._members)
            raise EtcdUnavailable(f"etcd {member.describe()}: watch: {type(e).__name__}: {e}") from None
        return WatchStream(connection, response)


class WatchStream:
    """One watch's HTTP stream; `shutdown()` from another thread ends the read in progress, never blocking."""

    def __init__(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse):
        self.connection, self.response = connection, response
        self._socket = connection.sock

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):      # not connected any more: the reader ends by itself
            self._socket.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.connection.close()


class EtcdWatch:
    """A watch on its own thread (see `EtcdKV.watch`); `cancel()` ends it (no callback after it returns,
    except one already running)."""

    def __init__(self, kv: EtcdKV, key: bytes, end: bytes | None, on_events, on_reset, name: str):
        self._kv, self._key, self._end = kv, key, end
        self._on_events, self._on_reset = on_events, on_reset
        self._cancelled = threading.Event()
        self._stream: WatchStream | None = None
        self._thread = start_thread(self._run, name)

    def cancel(self) -> None:
        """Never blocks (the reactor thread calls it): the stream's socket is shut down, which ends the
        watch thread's read; closing the response here instead can wait on that read."""
        self._cancelled.set()
        stream = self._stream
        if stream is not None:
            stream.shutdown()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _run(self) -> None:
        backoff = 0.05
        while not self._cancelled.is_set():
            try:
                revision = self._on_reset()
                if self._cancelled.is_set():
                    return
                self._stream_from(revision + 1)
                backoff = 0.05
            except Exception as e:                  # the stream or a read failed: read again and watch on
                if self._cancelled.is_set():
                    return
                log.info("etcd watch on %r broke (%s: %s); reading again", self._key, type(e).__name__, e)
            self._cancelled.wait(backoff)
            backoff = min(backoff * 2, 1.0)

    def _stream_from(self, revision: int) -> None:
        self._stream = stream = self._kv.open_watch_stream(self._key, self._end, revision)
        try:
            if not self._cancelled.is_set():
                self._read_stream(stream.response)
        finally:
            stream.close()

    def _deliver(self, events: list[WatchEvent]) -> None:
        """A listener's own failure is logged here: it is no reason to read the state again and replay."""
        try:
            self._on_events(events)
        except Exception:
            log.exception("etcd watch on %r: the listener failed on %d events", self._key, len(events))

    def _read_stream(self, response: http.client.HTTPResponse) -> None:
        if response.status != 200:
            raise EtcdRefused(response.status, response.read(300).decode("utf-8", "replace"))
        while not self._cancelled.is_set():
            line = response.readline()
            if not line:
                break
            if not line.strip():
                continue
            result = json.loads(line).get("result", {})
            if result.get("canceled"):
                raise EtcdUnavailable(f"watch cancelled by etcd: {result.get('cancel_reason', '')} "
                                      f"(compacted to {result.get('compact_revision', '?')})")
            events = [WatchEvent(e.get("type") == "DELETE", KeyValue.from_json(e["kv"]))
                      for e in result.get("events", [])]
            if events:
                self._deliver(events)
        if not self._cancelled.is_set():
            raise EtcdUnavailable("watch stream ended")
