"""One client process of the fault harness, run inside a host's network namespace.

Roles (``python -m tests.faults.client_proc ROLE URI HISTORY SEED SECONDS [HINT]``):
  * ``init``      creates the cluster's layout in ZooKeeper (``/ledgers``), then exits;
  * ``writer``    creates ledgers with E/W/A 3/3/2, 3/2/2 or 5/3/2 and appends to them (1 to 256 adds in
                  flight, deep pipelines in bursts), closes some, moves on after any error;
  * ``recoverer`` at random moments opens a ledger that is still open with recovery (fencing its writer;
                  a ledger named in the HINT file by the nemesis first), then reads it all;
  * ``tailer``    follows open ledgers without recovery, reading entries as their LAC moves;
  * ``swriter``, ``sreader``  append to / tail the named log stream ``faults`` (blocking API; see
                  stream_roles.py for their events);
  * ``final``     after the faults are healed: waits (at most HINT seconds, if given) until AutoRecovery
                  has left no under-replication mark and notes the marks still left and the registered
                  bookies, then recovers every ledger and reads it, and every entry from every bookie of its
                  write set, and reads the stream from the start; writes the result as JSON to HISTORY.

Every operation goes to the HISTORY file as one JSON line with its time (CLOCK_MONOTONIC in ns, which
all processes on the machine share), the process name and its outcome. Payloads are never written,
only the first 16 hex digits of their SHA-256. Owns nothing but the client side of the workload.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

from twisted.internet import defer, task

from bkfast.client.bookkeeper import AsyncBookKeeper
from bkfast.client.distribution import write_set
from bkfast.errors import BKError

PASSWORD = b"faults"
MIXES = ((3, 3, 2), (3, 2, 2), (5, 3, 2))
DEPTHS = (1, 4, 64, 256)     # adds in flight per ledger: deep pipelines leave many entries past the LAC
OP_TIMEOUT_S = 20.0          # how long a client waits for one operation before it moves on
CLIENT_CONF = {"addEntryTimeoutSec": 6, "readEntryTimeoutSec": 6, "throttle": 0}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class History:
    """Appends one JSON line per event; flushed at once so a killed process loses nothing it returned."""

    def __init__(self, path: str, proc: str):
        self.file = open(path, "a", buffering=1)
        self.proc = proc

    def __call__(self, op: str, **fields) -> None:
        fields.update(t=time.monotonic_ns(), p=self.proc, op=op)
        self.file.write(json.dumps(fields, separators=(",", ":")) + "\n")


def _error_name(failure_or_exc) -> str:
    exc = getattr(failure_or_exc, "value", failure_or_exc)
    return type(exc).__name__


async def bounded(reactor, d: defer.Deferred, timeout: float):
    """('ok', value) | ('err', name) | ('timeout', None) without cancelling `d` (it may still finish)."""
    box = defer.Deferred()
    d.addCallbacks(lambda v: box.called or box.callback(("ok", v)),
                   lambda f: box.called or box.callback(("err", _error_name(f))))
    call = reactor.callLater(timeout, lambda: box.called or box.callback(("timeout", None)))
    result = await box
    if call.active():
        call.cancel()
    return result


def sleep(reactor, seconds: float) -> defer.Deferred:
    return task.deferLater(reactor, seconds, lambda: None)


# --- roles -------------------------------------------------------------------------------------------
async def writer(reactor, bk, rec: History, rng: random.Random, until: float) -> None:
    name = rec.proc
    while time.monotonic() < until:
        ewa = rng.choice(MIXES)
        rec("create", phase="invoke", ewa=ewa)
        status, lh = await bounded(reactor, bk.create_ledger(*ewa, digest_type="CRC32C", password=PASSWORD),
                                   OP_TIMEOUT_S)
        if status != "ok":
            rec("create", phase="fail", ewa=ewa, err=lh or status)
            await sleep(reactor, 0.5)
            continue
        ledger = lh.ledger_id
        depth = rng.choice(DEPTHS)
        rec("create", phase="ok", ledger=ledger, ewa=ewa, depth=depth)
        target, failed, outstanding = rng.randint(20, 400 if depth <= 4 else 2000), [], []
        for seq in range(target):
            if failed or time.monotonic() >= until:
                break
            payload = f"{name}/{ledger}/{seq}/".encode() + rng.randbytes(rng.randint(10, 300))
            h = digest(payload)
            rec("add", phase="invoke", ledger=ledger, seq=seq, h=h)
            d = lh.add_entry(payload)

            # bound now: an abandoned ledger's adds may complete while the next ledger is written
            def ok(entry_id, seq=seq, h=h, ledger=ledger):
                rec("add", phase="ok", ledger=ledger, seq=seq, h=h, entry=entry_id)

            def fail(f, seq=seq, h=h, ledger=ledger, failed=failed):
                rec("add", phase="fail", ledger=ledger, seq=seq, h=h, err=_error_name(f))
                failed.append(seq)

            d.addCallbacks(ok, fail)
            outstanding.append(d)
            outstanding = [x for x in outstanding if not x.called]
            while len(outstanding) >= depth and not failed:
                await bounded(reactor, outstanding[0], OP_TIMEOUT_S)
                if not outstanding[0].called:      # stuck: leave this ledger (its adds may still finish)
                    failed.append(-1)
                    break
                outstanding = [x for x in outstanding if not x.called]
            if depth <= 4 or seq % depth == depth - 1:      # deep pipelines write in bursts
                await sleep(reactor, rng.uniform(0.0, 0.01 if depth <= 4 else 0.05))
        for d in outstanding:
            await bounded(reactor, d, OP_TIMEOUT_S)
        if failed:
            rec("abandon", ledger=ledger)
            continue
        rec("close", phase="invoke", ledger=ledger)
        status, value = await bounded(reactor, lh.close(), OP_TIMEOUT_S)
        if status == "ok":
            rec("close", phase="ok", ledger=ledger, lac=lh.last_add_confirmed)
        else:
            rec("close", phase="fail", ledger=ledger, err=value or status)


async def _pick_open_ledger(reactor, bk, rng, hint_path: str | None):
    if hint_path and os.path.exists(hint_path):
        try:
            with open(hint_path) as f:
                ledger = int(f.read().strip())
            os.unlink(hint_path)
            return ledger
        except (OSError, ValueError):
            pass
    status, ledgers = await bounded(reactor, bk.list_ledgers(), OP_TIMEOUT_S)
    if status != "ok" or not ledgers:
        return None
    candidates = sorted(ledgers)[-8:]
    rng.shuffle(candidates)
    for ledger in candidates:
        status, md = await bounded(reactor, bk.get_ledger_metadata(ledger), OP_TIMEOUT_S)
        if status == "ok" and not md.is_closed:
            return ledger
    return None


async def recoverer(reactor, bk, rec: History, rng: random.Random, until: float, hint_path: str | None) -> None:
    while time.monotonic() < until:
        for _ in range(20):
            await sleep(reactor, rng.uniform(0.05, 0.2))
            if hint_path and os.path.exists(hint_path):
                break
        ledger = await _pick_open_ledger(reactor, bk, rng, hint_path)
        if ledger is None:
            continue
        rec("recover", phase="invoke", ledger=ledger)
        status, lh = await bounded(reactor, bk.open_ledger(ledger, PASSWORD, recovery=True), OP_TIMEOUT_S)
        if status != "ok":
            rec("recover", phase="fail", ledger=ledger, err=lh or status)
            continue
        lac = lh.last_add_confirmed
        rec("recover", phase="ok", ledger=ledger, lac=lac)
        if lac >= 0:
            status, entries = await bounded(reactor, lh.read_entries(0, lac), OP_TIMEOUT_S)
            if status == "ok":
                rec("read", ledger=ledger, first=0, hashes=[digest(e.data) for e in entries], closed=True)
            else:
                rec("read_fail", ledger=ledger, err=entries or status)


async def tailer(reactor, bk, rec: History, rng: random.Random, until: float) -> None:
    while time.monotonic() < until:
        await sleep(reactor, rng.uniform(0.2, 1.0))
        ledger = await _pick_open_ledger(reactor, bk, rng, None)
        if ledger is None:
            continue
        status, lh = await bounded(reactor, bk.open_ledger(ledger, PASSWORD, recovery=False), OP_TIMEOUT_S)
        if status != "ok":
            continue
        next_entry, stop = 0, time.monotonic() + rng.uniform(2.0, 6.0)
        while time.monotonic() < min(stop, until):
            status, lac = await bounded(reactor, lh.read_last_add_confirmed(), OP_TIMEOUT_S)
            if status != "ok":
                break
            if lac >= next_entry:
                status, entries = await bounded(reactor, lh.read_entries(next_entry, lac), OP_TIMEOUT_S)
                if status != "ok":
                    break
                rec("read", ledger=ledger, first=next_entry, hashes=[digest(e.data) for e in entries])
                next_entry = lac + 1
            await sleep(reactor, 0.2)


async def _replica_answers(reactor, lh, last: int) -> dict:
    """{entry: {bookie: hash | 'missing' | 'error:<name>'}} for entries 0..last, every write-set bookie."""
    md = lh.metadata
    answers: dict[int, dict[str, str]] = {}
    pending = []
    for entry_id in range(last + 1):
        ensemble = md.ensemble_at(entry_id)
        row = answers.setdefault(entry_id, {})
        for index in write_set(entry_id, md.ensemble_size, md.write_quorum_size):
            bookie = ensemble[index]

            def ok(data, row=row, bookie=bookie, entry_id=entry_id):
                try:
                    row[bookie] = digest(lh.digest.to_ledger_entry(data, entry_id).data)
                except BKError as exc:
                    row[bookie] = f"error:{type(exc).__name__}"

            def err(f, row=row, bookie=bookie):
                name = _error_name(f)
                row[bookie] = "missing" if name in ("BKNoSuchEntryException", "BKNoSuchLedgerExistsException") \
                    else f"error:{name}"

            d = lh.bookie_client.read_entry(bookie, lh.ledger_id, entry_id)
            d.addCallbacks(ok, err)
            pending.append(d)
            if len(pending) >= 500:
                await defer.DeferredList(pending)
                pending = []
    await defer.DeferredList(pending)
    return answers


def _zk(uri: str):
    from kazoo.client import KazooClient

    connect = uri.split("://", 1)[1].split("/", 1)[0]
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    return client


def _replication_state(uri: str) -> dict:
    """The under-replication marks ({ledger: [bookies]}) and the registered bookies (writable or read-only)."""
    from bkfast.meta.zk_underreplication import ZkUnderReplicationManager as UnderReplicationManager

    client = _zk(uri)
    try:
        marks = {str(lid): list(info.replicas) for lid, info in UnderReplicationManager(client, "/ledgers")
                 .list_marks().items()}
        available = [c for c in client.get_children("/ledgers/available") if c != "readonly"]
        if client.exists("/ledgers/available/readonly"):
            available += client.get_children("/ledgers/available/readonly")
        return {"marks": marks, "available": sorted(available)}
    finally:
        client.stop()
        client.close()


async def _settle_replication(reactor, uri: str, until: float) -> dict:
    """Wait until no under-replication mark is left (AutoRecovery has acted on every lost bookie), at most
    until `until`; returns the last state seen and how long the wait took."""
    from twisted.internet import threads

    started, state = time.monotonic(), {"marks": {}, "available": []}
    while True:
        try:
            state = await threads.deferToThread(_replication_state, uri)
        except Exception as exc:
            state = {"marks": {}, "available": [], "error": f"{type(exc).__name__}: {exc}"}
        if (not state["marks"] and "error" not in state) or time.monotonic() >= until:
            break
        await sleep(reactor, 1.0)
    state["settle_s"] = round(time.monotonic() - started, 1)
    return state


async def final(reactor, bk, out_path: str, until: float, uri: str = "", settle_s: float = 0.0) -> None:
    """Let AutoRecovery settle (at most `settle_s`), then recover and read every ledger, retried until
    `until` while the healed cluster settles, then read the stream."""
    result: dict = {"ledgers": {}, "errors": {}}
    if settle_s > 0:
        result["replication"] = await _settle_replication(reactor, uri, time.monotonic() + settle_s)
    ledgers = None
    while ledgers is None and time.monotonic() < until:
        status, value = await bounded(reactor, bk.list_ledgers(), OP_TIMEOUT_S)
        if status == "ok":
            ledgers = value
        else:
            await sleep(reactor, 1.0)
    for ledger in sorted(ledgers or []):
        last_error = None
        status, md_before = await bounded(reactor, bk.get_ledger_metadata(ledger), OP_TIMEOUT_S)
        closed_before = status == "ok" and md_before.is_closed
        while time.monotonic() < until:
            status, lh = await bounded(reactor, bk.open_ledger(ledger, PASSWORD, recovery=True), OP_TIMEOUT_S)
            if status == "ok":
                lac = lh.last_add_confirmed
                entries = []
                if lac >= 0:
                    status, entries = await bounded(reactor, lh.read_entries(0, lac), OP_TIMEOUT_S)
                if status == "ok":
                    md = lh.metadata
                    result["ledgers"][str(ledger)] = {
                        "ewa": [md.ensemble_size, md.write_quorum_size, md.ack_quorum_size],
                        "lac": lac, "state": md.state.name, "closed_before": closed_before,
                        "ensembles": [[start, list(bookies)] for start, bookies in md.ensembles],
                        "entries": [digest(e.data) for e in entries],
                        "replicas": await _replica_answers(reactor, lh, lac),
                    }
                    result["errors"].pop(str(ledger), None)
                    break
                last_error = entries or status
            else:
                last_error = lh or status
            result["errors"][str(ledger)] = str(last_error)
            await sleep(reactor, 1.0)
    from .stream_roles import final_stream

    result["stream"] = await final_stream(reactor, bk, PASSWORD, until, bounded, sleep)
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)


async def init(reactor, uri: str) -> None:
    from bkfast.meta import zk_layout

    client = _zk(uri)
    try:
        zk_layout.ensure_cluster(client, "/ledgers")
    finally:
        client.stop()
        client.close()


async def connect_until(reactor, uri: str, until: float, **conf) -> AsyncBookKeeper:
    """A client, retried every second while the metadata service cannot be reached, until `until`."""
    while True:
        try:
            return await AsyncBookKeeper.connect(uri, reactor, **conf)
        except Exception:
            if time.monotonic() > until:
                raise
            await sleep(reactor, 1.0)


async def main(reactor, role: str, uri: str, history: str, seed: str, seconds: str, hint: str = "") -> None:
    until = time.monotonic() + float(seconds)
    if role == "init":
        await init(reactor, uri)
        return
    bk = await connect_until(reactor, uri, until, **CLIENT_CONF)
    rng = random.Random(f"{seed}/{role}/{os.path.basename(history)}")
    try:
        if role == "final":
            await final(reactor, bk, history, until, uri, float(hint or 0))
            return
        rec = History(history, os.path.basename(history).rsplit(".", 1)[0])
        if role == "writer":
            await writer(reactor, bk, rec, rng, until)
        elif role == "recoverer":
            await recoverer(reactor, bk, rec, rng, until, hint or None)
        elif role == "tailer":
            await tailer(reactor, bk, rec, rng, until)
        else:
            raise SystemExit(f"unknown role {role!r}")
        rec("done")
    finally:
        await bounded(reactor, bk.close(), 10.0)


def main_blocking(role: str, uri: str, history: str, seed: str, seconds: str) -> None:
    """The stream roles, on the blocking API (its reactor runs in a thread of its own)."""
    from . import stream_roles

    until = time.monotonic() + float(seconds)
    rng = random.Random(f"{seed}/{role}/{os.path.basename(history)}")
    rec = History(history, os.path.basename(history).rsplit(".", 1)[0])
    conf = dict(CLIENT_CONF)
    if role == "swriter":
        stream_roles.stream_writer(uri, rec, rng, until, conf, PASSWORD)
    else:
        stream_roles.stream_reader(uri, rec, rng, until, conf, PASSWORD)
    rec("done")


if __name__ == "__main__":
    if sys.argv[1] in ("swriter", "sreader"):
        main_blocking(*sys.argv[1:6])
        os._exit(0)                        # the blocking API's reactor thread needs no orderly stop here
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, *sys.argv[1:])))
