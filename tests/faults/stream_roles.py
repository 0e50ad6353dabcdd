"""The named-log-stream side of the fault workload: a stream writer and a tailing stream reader (both on the
blocking API, bkfast.streams.Namespace, in their own processes), and the final read of the stream.

Records: the value of record `seq` is ``b"<seq>/"`` plus random bytes, so a reader knows which append it
sees; only the first 16 hex digits of the value's SHA-256 go to the history. Events (one JSON line each):
  * ``sappend`` invoke {seq, h}; ok {seq, h, pos: [segment, entry, slot]}; fail {seq, h, err} (an error or
    a timeout: the record may or may not be in the stream, like Jepsen's indeterminate operations);
  * ``sread`` {recs: [[segment, entry, slot, seq, h], ...]} one per successful read call, in read order;
  * ``sreopen`` {at: position, err} the reader failed and resumes at the position after its last record;
  * ``swriter_open`` ok/fail: a (new) writer took the stream over (after any failure the old one is dropped;
    `takeover`: on purpose, with the old one's appends in flight).
The final read (`final_stream`) reads the whole stream from the start after healing.
Owns the stream workload and nothing else: the history file and timing helpers are client_proc's.
"""

from __future__ import annotations

import hashlib
import random
import time

STREAM = "faults"
WAIT_S = 8.0                       # how long a blocking call may take before the outcome counts as unknown


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def seq_of(value: bytes) -> int:
    try:
        return int(bytes(value).split(b"/", 1)[0])
    except ValueError:
        return -1


def _settle(pending, timeout: float) -> None:
    """Wait up to `timeout` for a Pending to finish, whatever its outcome (read it with done() / wait(0))."""
    try:
        pending.wait(max(0.0, timeout))
    except Exception:
        pass


def _records(records) -> list[list]:
    return [[r.position.segment, r.position.entry, r.position.slot, seq_of(r.value), digest(bytes(r.value))]
            for r in records]


def _namespace(uri: str, until: float, conf: dict):
    from bkfast.streams import Namespace

    while True:
        try:
            return Namespace(uri, timeout=WAIT_S * 2, **conf)
        except Exception:
            if time.monotonic() > until:
                raise
            time.sleep(1.0)


def stream_writer(uri: str, rec, rng: random.Random, until: float, conf: dict, password: bytes) -> None:
    """Append records with 1 to 32 in flight; any error or timeout drops the writer and opens a new one
    (which fences the old), and every 3 to 10 s a new writer takes over while the old one's records are
    in flight. Outcomes that arrive late, from a dropped writer too, are still recorded."""
    from bkfast.errors import StreamExistsError

    ns = _namespace(uri, until, conf)
    while time.monotonic() < until:
        try:
            ns.create_stream(STREAM)
            break
        except StreamExistsError:
            break
        except Exception:
            time.sleep(0.5)
    options = {"ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, "password": password,
               "digest_type": "CRC32C", "linger_ms": rng.choice([1, 5, 20]),
               "max_batch_records": rng.choice([1, 8, 64]), "max_segment_records": rng.choice([200, 500, 2000])}
    outstanding: list = []                  # (seq, h, Pending)
    seq, writer = 0, None
    takeover_at = time.monotonic() + rng.uniform(3.0, 10.0)

    def sweep(block: float = 0.0) -> bool:
        """Record finished appends; True if one failed."""
        failed = False
        deadline = time.monotonic() + block
        for item in list(outstanding):
            s, h, pending = item
            if not pending.done() and time.monotonic() < deadline:
                _settle(pending, deadline - time.monotonic())
            if not pending.done():
                continue
            outstanding.remove(item)
            try:
                pos = pending.wait(0)
                rec("sappend", phase="ok", seq=s, h=h, pos=list(pos))
            except Exception as exc:
                rec("sappend", phase="fail", seq=s, h=h, err=type(exc).__name__)
                failed = True
        return failed

    while time.monotonic() < until:
        if writer is None:
            try:
                writer = ns.open_writer(STREAM, **options)
                rec("swriter_open", phase="ok", epoch=writer.epoch)
            except Exception as exc:
                rec("swriter_open", phase="fail", err=type(exc).__name__)
                time.sleep(0.5)
                continue
        depth = rng.choice((1, 4, 32))
        burst = []
        for _ in range(depth):
            value = b"%d/" % seq + rng.randbytes(rng.randint(5, 200))
            h = digest(value)
            rec("sappend", phase="invoke", seq=seq, h=h)
            burst.append((seq, h, writer.write(value)))
            seq += 1
        outstanding.extend(burst)
        if time.monotonic() >= takeover_at:    # a new writer fences this one while its burst is in flight
            takeover_at = time.monotonic() + rng.uniform(3.0, 10.0)
            try:
                writer = ns.open_writer(STREAM, **options)
                rec("swriter_open", phase="ok", epoch=writer.epoch, takeover=True)
            except Exception as exc:
                rec("swriter_open", phase="fail", err=type(exc).__name__, takeover=True)
                writer = None
            sweep()
            continue
        stuck, deadline = False, time.monotonic() + WAIT_S     # one wait for the whole burst
        for _s, _h, pending in burst:
            _settle(pending, deadline - time.monotonic())
            stuck = stuck or not pending.done()
        if sweep() or stuck:
            writer = None                  # dropped: its late outcomes are recorded by later sweeps
        time.sleep(rng.uniform(0.0, 0.02))
    sweep(block=WAIT_S)
    if writer is None:                     # take the stream over once more, so that closing seals it
        try:
            writer = ns.open_writer(STREAM, **options)
            rec("swriter_open", phase="ok", epoch=writer.epoch)
        except Exception as exc:
            rec("swriter_open", phase="fail", err=type(exc).__name__)
    if writer is not None:
        try:
            writer.close()
            rec("swriter_close", phase="ok")
        except Exception as exc:
            rec("swriter_close", phase="fail", err=type(exc).__name__)
    sweep(block=1.0)
    for s, h, _pending in outstanding:    # never answered: unknown
        rec("sappend", phase="fail", seq=s, h=h, err="timeout")
    try:
        ns.close()
    except Exception:
        pass


def stream_reader(uri: str, rec, rng: random.Random, until: float, conf: dict, password: bytes,
                  drain_s: float = 30.0) -> None:
    """Tail the stream from the start; on an error, reopen at the position after the last record read.
    After `until` (the cluster is healed then) keep reading until the writer has sealed the stream and
    nothing is left, for at most `drain_s`; records ``sreader_end`` with whether it got there."""
    from bkfast.streams import EARLIEST

    ns = _namespace(uri, until, conf)
    position, reader, caught_up = EARLIEST, None, False
    stop = until + drain_s
    while time.monotonic() < stop:
        try:
            if reader is None:
                reader = ns.open_reader(STREAM, position, password=password)
            records = reader.read(5000, 500)
            if records:
                rec("sread", recs=_records(records))
            position = reader.position
            if not records and time.monotonic() > until:
                md = ns.describe(STREAM)
                segments = md.segments
                if segments and not segments[-1].is_open:
                    caught_up = (position.segment, position.entry) >= (segments[-1].seq, segments[-1].last_entry + 1)
                    if caught_up:
                        break
        except Exception as exc:
            if "NoSuchStream" in type(exc).__name__:      # the writer has not created it yet
                time.sleep(0.5)
                continue
            rec("sreopen", at=str(position), err=type(exc).__name__)
            reader = None
            time.sleep(rng.uniform(0.2, 1.0))
    rec("sreader_end", caught_up=caught_up, at=str(position))
    try:
        ns.close()
    except Exception:
        pass


async def final_stream(reactor, bk, password: bytes, until: float, bounded, sleep) -> dict:
    """Every record of the stream, read from the start after healing: {"records": [...]} or {"error": ...}."""
    from twisted.internet import defer

    from bkfast.streams import EARLIEST, AsyncNamespace

    ns = AsyncNamespace(bk)
    status, exists = await bounded(reactor, ns.exists(STREAM), 20.0)
    if status == "ok" and not exists:
        return {"records": [], "exists": False}
    error = None
    while time.monotonic() < until:
        status, reader = await bounded(reactor, ns.open_reader(STREAM, EARLIEST, password=password), 20.0)
        if status != "ok":
            error = reader or status
            await sleep(reactor, 1.0)
            continue
        out: list = []
        while True:
            status, records = await bounded(reactor, defer.ensureDeferred(reader.read(10000, 0)), 30.0)
            if status != "ok":
                error = records or status
                break
            if not records:
                return {"records": out, "exists": True}
            out.extend(_records(records))
        await sleep(reactor, 1.0)
    return {"error": str(error)}
