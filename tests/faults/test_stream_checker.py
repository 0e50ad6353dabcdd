"""The stream checker catches what it claims: each violation injected into a small, valid stream history is
reported with its kind (and only it), and what may legitimately differ (an append whose outcome is unknown)
is not a violation."""

from __future__ import annotations

from tests.faults.checker import check, format_violation
from tests.faults.stream_checker import check_stream


def h(seq: int) -> str:
    return f"{seq:016x}"


def valid_stream():
    """sw1 appends records 0..5 in two segments (1: entries 0-1, 2: entry 0); record 5's append timed out and
    it is not in the stream; sr1 tails it in three reads (reopening once) and catches up; the final read has
    records 0..4."""
    t = iter(range(1000, 10**6, 10))
    positions = {0: (1, 0, 0), 1: (1, 0, 1), 2: (1, 1, 0), 3: (2, 0, 0), 4: (2, 0, 1)}
    ev = [{"t": next(t), "p": "sw1", "op": "swriter_open", "phase": "ok", "epoch": 1}]
    for seq in range(6):
        ev.append({"t": next(t), "p": "sw1", "op": "sappend", "phase": "invoke", "seq": seq, "h": h(seq)})
    for seq in range(5):
        ev.append({"t": next(t), "p": "sw1", "op": "sappend", "phase": "ok", "seq": seq, "h": h(seq),
                   "pos": list(positions[seq])})
    ev.append({"t": next(t), "p": "sw1", "op": "sappend", "phase": "fail", "seq": 5, "h": h(5), "err": "timeout"})
    rec = {seq: [*positions[seq], seq, h(seq)] for seq in range(5)}
    ev.append({"t": next(t), "p": "sr1", "op": "sread", "recs": [rec[0], rec[1]]})
    ev.append({"t": next(t), "p": "sr1", "op": "sreopen", "at": "1:1:0", "err": "BKTimeoutException"})
    ev.append({"t": next(t), "p": "sr1", "op": "sread", "recs": [rec[2]]})
    ev.append({"t": next(t), "p": "sr1", "op": "sread", "recs": [rec[3], rec[4]]})
    ev.append({"t": next(t), "p": "sr1", "op": "sreader_end", "caught_up": True, "at": "3:0:0"})
    final = {"ledgers": {}, "errors": {}, "stream": {"records": [rec[s] for s in range(5)], "exists": True}}
    return ev, final


def kinds(history, final):
    violations, stats = check_stream(history, final)
    return sorted(v.kind for v in violations), violations, stats


def test_valid_stream_history_passes_and_counts_records():
    found, _, stats = kinds(*valid_stream())
    assert found == []
    assert stats == {"stream_records_checked": 5, "stream_records_read": 5, "stream_indeterminate": 1,
                     "stream_indeterminate_present": 0}
    report = check(*valid_stream())            # the full checker runs it too, and counts reads as operations
    assert report.violations == [] and report.summary()["stream_records_checked"] == 5


def test_an_indeterminate_append_may_be_in_the_stream():
    history, final = valid_stream()
    final["stream"]["records"].append([2, 1, 0, 5, h(5)])
    history[-2]["recs"].append([2, 1, 0, 5, h(5)])         # and the reader, which caught up, read it
    found, _, stats = kinds(history, final)
    assert found == [] and stats["stream_indeterminate_present"] == 1
    history[-2]["recs"].pop()                              # caught up yet it never read it: a gap
    assert kinds(history, final)[0] == ["stream_gap"]
    history[-2]["recs"].append([2, 1, 0, 5, h(5)])
    history = [e for e in history if not (e["op"] == "sappend" and e["phase"] == "fail")]
    found, _, stats = kinds(history, final)                # the writer was killed before it heard back
    assert found == [] and stats["stream_indeterminate"] == stats["stream_indeterminate_present"] == 1


def test_an_acknowledged_record_missing_from_the_final_stream_is_lost():
    history, final = valid_stream()
    history = [e for e in history if e["op"] not in ("sread", "sreader_end")]    # no reader to notice first
    del final["stream"]["records"][2]
    found, violations, _ = kinds(history, final)
    assert found == ["stream_lost"]
    assert "record 2 was acknowledged at 1:1:0" in violations[0].message
    assert history[violations[0].witnesses[0]] == {**history[violations[0].witnesses[0]], "seq": 2, "phase": "ok"}


def test_a_stream_that_cannot_be_read_at_the_end_loses_every_acknowledged_record():
    history, final = valid_stream()
    final["stream"] = {"error": "BKTimeoutException"}
    assert kinds(history, final)[0] == ["stream_lost"] * 5


def test_a_record_that_was_never_appended_is_a_phantom():
    history, final = valid_stream()
    history = [e for e in history if e["op"] not in ("sread", "sreader_end")]
    final["stream"]["records"].append([2, 1, 0, 9, h(9)])
    found, violations, _ = kinds(history, final)
    assert found == ["stream_phantom"] and "was never appended" in violations[0].message


def test_other_bytes_than_appended_are_a_phantom():
    history, final = valid_stream()
    history = [e for e in history if e["op"] not in ("sread", "sreader_end")]
    final["stream"]["records"].append([2, 1, 0, 5, "ffffffffffffffff"])     # the indeterminate one, altered
    assert kinds(history, final)[0] == ["stream_phantom"]


def test_a_record_twice_in_the_stream_is_a_duplicate():
    history, final = valid_stream()
    history = [e for e in history if e["op"] not in ("sread", "sreader_end")]
    final["stream"]["records"].append([2, 1, 0, 3, h(3)])
    found, violations, _ = kinds(history, final)
    assert found == ["stream_duplicate"] and "at 2:0:0 and at 2:1:0" in violations[0].message


def test_records_out_of_append_order_or_at_another_position_are_order_violations():
    history, final = valid_stream()
    history = [e for e in history if e["op"] not in ("sread", "sreader_end")]
    records = final["stream"]["records"]
    records[3][3:], records[4][3:] = records[4][3:], records[3][3:]              # 4 before 3
    found, violations, _ = kinds(history, final)
    assert found == ["stream_order"] * 3    # 3 follows 4, and neither is where its append said
    assert any("record 3 follows record 4" in v.message for v in violations)


def test_a_tailing_reader_that_skips_a_record_is_a_gap():
    history, final = valid_stream()
    read = next(e for e in history if e["op"] == "sread" and len(e["recs"]) == 1)
    history.remove(read)                       # sr1 never returned record 2
    found, violations, _ = kinds(history, final)
    assert found == ["stream_gap"]
    assert "skipped 1 record(s) before 2:0:0: seq 2 (1 acknowledged)" in violations[0].message
    assert "VIOLATION stream_gap" in format_violation(history, violations[0])


def test_a_tailing_reader_that_returns_a_record_twice_is_a_duplicate():
    history, final = valid_stream()
    read = next(e for e in history if e["op"] == "sread" and len(e["recs"]) == 1)
    read["recs"] = [[1, 0, 1, 1, h(1)], *read["recs"]]      # after reopening, record 1 again
    assert kinds(history, final)[0] == ["stream_duplicate"]


def test_a_tailing_reader_that_saw_a_record_the_stream_no_longer_has_is_a_gap():
    history, final = valid_stream()
    history[-2]["recs"].append([2, 1, 0, 5, h(5)])          # the indeterminate record, read, then gone
    found, violations, _ = kinds(history, final)
    assert found == ["stream_gap"] and "nothing there" in violations[0].message


def test_a_reader_that_caught_up_with_the_sealed_stream_must_have_read_to_its_end():
    history, final = valid_stream()
    history[-2]["recs"].pop()                  # its last read lacks record 4, yet it says it caught up
    found, violations, _ = kinds(history, final)
    assert found == ["stream_gap"] and "1 record(s) unread" in violations[0].message
