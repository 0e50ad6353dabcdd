"""The stream half of the history checker: what the stream writer and the tailing reader saw, against the
stream read from the start after healing (`final["stream"]`, see stream_roles.py for the events).

Records are named by their append's `seq` (each value starts with it) and compared by the hash of their
bytes. Checks:
  * stream_lost       every acknowledged record is in the final stream, at the position its append returned,
                      with its bytes;
  * stream_phantom    every record in the stream was appended (an invoke with that seq and those bytes) —
                      an append that failed or timed out may or may not be there (indeterminate), but
                      nothing else may;
  * stream_duplicate  no record is in the final stream twice, and no reader returned one twice;
  * stream_order      positions strictly increase along the stream and along each reader's reads, and
                      records are in the order they were appended (one writer process: seq order);
  * stream_gap        each tailing reader's records are one contiguous run of the final stream from its
                      start (no record skipped, none that is not in the stream), and a reader that saw the
                      writer seal the stream and caught up read it to its end.
A violation's witnesses are history indexes (the append, or the reader's read event). Pure functions.
"""

from __future__ import annotations

from .checker import Violation, _ranges

__all__ = ["check_stream", "STREAM_OPS", "STREAM"]

STREAM = -1                       # the `ledger` of a stream violation (it belongs to no one ledger)
STREAM_OPS = frozenset({"sappend", "sread", "sreopen", "swriter_open", "swriter_close", "sreader_end"})
MAX_PER_KIND = 20


def check_stream(history: list[dict], final: dict) -> tuple[list[Violation], dict]:
    """(violations, stats) for the stream; stats: stream_records_checked, stream_records_read,
    stream_indeterminate (appends that failed, timed out or never answered: the writer was killed) and
    stream_indeterminate_present (how many of those are in the stream)."""
    out: list[Violation] = []
    count: dict[str, int] = {}

    def report(kind: str, message: str, witnesses: list[int]) -> None:
        count[kind] = count.get(kind, 0) + 1
        if count[kind] <= MAX_PER_KIND:
            out.append(Violation(kind, STREAM, message, sorted(set(witnesses))))

    invoked: dict[int, tuple[int, str]] = {}          # seq -> (index, hash)
    acked: dict[int, tuple[int, str, tuple]] = {}     # seq -> (index, hash, position)
    reads: dict[str, list[tuple[int, list]]] = {}     # reader -> [(index, rec)] in read order
    ends: dict[str, tuple[int, dict]] = {}
    for i, e in enumerate(history):
        op = e["op"]
        if op == "sappend":
            if e["phase"] == "invoke":
                invoked[e["seq"]] = (i, e["h"])
            elif e["phase"] == "ok":
                acked[e["seq"]] = (i, e["h"], tuple(e["pos"]))
        elif op == "sread":
            reads.setdefault(e["p"], []).extend((i, rec) for rec in e["recs"])
        elif op == "sreader_end":
            ends[e["p"]] = (i, e)
    stats = {"stream_records_checked": 0, "stream_records_read": sum(len(r) for r in reads.values()),
             "stream_indeterminate": len(invoked.keys() - acked.keys()), "stream_indeterminate_present": 0}
    stream = final.get("stream")
    if stream is None or "records" not in stream:
        why = (stream or {}).get("error", "no final read of the stream")
        for seq, (i, _h, _pos) in sorted(acked.items()):
            report("stream_lost", f"record {seq} was acknowledged but the stream could not be read at the end: "
                   f"{why}", [i])
        return out, stats
    records = [tuple(r) for r in stream["records"]]
    where: dict[tuple, int] = {}                      # position -> index in `records`
    by_seq: dict[int, int] = {}
    last_pos, last_seq = None, None
    for n, (seg, entry, slot, seq, h) in enumerate(records):
        pos = (seg, entry, slot)
        if seq in by_seq:
            report("stream_duplicate", f"record {seq} is in the stream twice: at {_p(records[by_seq[seq]])} and "
                   f"at {_p(records[n])}", [_witness(seq, invoked, acked)])
        by_seq.setdefault(seq, n)
        where[pos] = n
        if seq not in invoked or invoked[seq][1] != h:
            what = "was never appended" if seq not in invoked else f"has bytes {h}, not the appended {invoked[seq][1]}"
            report("stream_phantom", f"the record at {_p(records[n])} (seq {seq}) {what}",
                   [invoked[seq][0]] if seq in invoked else [])
        if last_pos is not None and pos <= last_pos:
            report("stream_order", f"the final read returned {_p(records[n])} after {last_pos}", [])
        if last_seq is not None and seq <= last_seq and by_seq[seq] == n:
            report("stream_order", f"record {seq} follows record {last_seq} in the stream but was appended "
                   "before it", [_witness(seq, invoked, acked), _witness(last_seq, invoked, acked)])
        last_pos, last_seq = pos, seq
    for seq, (i, h, pos) in sorted(acked.items()):
        stats["stream_records_checked"] += 1
        n = by_seq.get(seq)
        if n is None:
            report("stream_lost", f"record {seq} was acknowledged at {_p(pos)} but is not in the stream", [i])
        elif records[n][:3] != pos:
            report("stream_order", f"record {seq} was acknowledged at {_p(pos)} but the stream has it at "
                   f"{_p(records[n])}", [i])
        elif records[n][4] != h:
            report("stream_lost", f"record {seq} at {_p(pos)}: the stream has bytes {records[n][4]}, the "
                   f"acknowledged ones are {h}", [i])
    stats["stream_indeterminate_present"] = sum(1 for seq in by_seq if seq in invoked and seq not in acked)

    for reader, seen in sorted(reads.items()):
        expect = 0                                    # index in `records` of the next record this reader must see
        returned: dict[tuple, int] = {}
        for i, rec in seen:
            pos = tuple(rec[:3])
            if pos in returned:
                report("stream_duplicate", f"{reader} returned the record at {_p(pos)} (seq {rec[3]}) twice",
                       [returned[pos], i])
                continue
            returned[pos] = i
            n = where.get(pos)
            if n is None or records[n][3:] != tuple(rec[3:]):
                have = f"seq {records[n][3]} bytes {records[n][4]}" if n is not None else "nothing there"
                report("stream_gap", f"{reader} read seq {rec[3]} (bytes {rec[4]}) at {_p(pos)}; the final stream "
                       f"has {have}", [i])
                continue
            if n > expect:
                skipped = [r[3] for r in records[expect:n]]
                report("stream_gap", f"{reader} skipped {len(skipped)} record(s) before {_p(pos)}: seq "
                       f"{_ranges(skipped)} ({sum(1 for s in skipped if s in acked)} acknowledged)", [i])
            elif n < expect:
                report("stream_order", f"{reader} read {_p(pos)} after {_p(records[expect - 1])}", [i])
                continue
            expect = n + 1
        end = ends.get(reader)
        if end is not None and end[1].get("caught_up") and expect < len(records):
            report("stream_gap", f"{reader} caught up with the sealed stream but stopped before {_p(records[expect])}"
                   f" ({len(records) - expect} record(s) unread)", [end[0]])
    return out, stats


def _witness(seq: int, invoked: dict, acked: dict) -> int:
    if seq in acked:
        return acked[seq][0]
    return invoked[seq][0] if seq in invoked else 0


def _p(rec) -> str:
    return ":".join(str(x) for x in tuple(rec)[:3])
