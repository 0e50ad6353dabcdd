"""The fault checker catches what it claims: each violation injected into a small, valid history is
reported with its kind, and the valid history itself passes (the campaign test repeats the two
injections the issue names on real histories)."""

from __future__ import annotations

import copy

from tests.faults.checker import check, format_violation, slice_for

B = ["127.77.0.3:3181", "127.77.0.4:3181", "127.77.0.5:3181"]


def h(entry: int) -> str:
    return f"{entry:016x}"


def valid_run():
    """Ledger 7 (E/W/A 3/2/2): w1 acks entries 0..4, recoverer r1 recovers it at LAC 4 and reads it all,
    t1 tails entries 0..2 while it is open; the final state has every entry on its two replicas."""
    t = iter(range(1000, 10**6, 10))
    ev = [{"t": next(t), "p": "w1", "op": "create", "phase": "ok", "ledger": 7, "ewa": [3, 2, 2]}]
    for e in range(5):
        ev.append({"t": next(t), "p": "w1", "op": "add", "phase": "invoke", "ledger": 7, "seq": e, "h": h(e)})
        ev.append({"t": next(t), "p": "w1", "op": "add", "phase": "ok", "ledger": 7, "seq": e, "h": h(e), "entry": e})
        if e == 2:
            ev.append({"t": next(t), "p": "t1", "op": "read", "ledger": 7, "first": 0, "hashes": [h(0), h(1), h(2)]})
    ev.append({"t": next(t), "p": "nemesis", "op": "fault", "kind": "pause", "phase": "start", "host": "w1"})
    ev.append({"t": next(t), "p": "r1", "op": "recover", "phase": "invoke", "ledger": 7})
    ev.append({"t": next(t), "p": "r1", "op": "recover", "phase": "ok", "ledger": 7, "lac": 4})
    ev.append({"t": next(t), "p": "r1", "op": "read", "ledger": 7, "first": 0, "hashes": [h(e) for e in range(5)],
               "closed": True})
    ev.append({"t": next(t), "p": "w1", "op": "add", "phase": "invoke", "ledger": 7, "seq": 5, "h": h(5)})
    ev.append({"t": next(t), "p": "w1", "op": "add", "phase": "fail", "ledger": 7, "seq": 5, "h": h(5),
               "err": "BKLedgerFencedException"})
    replicas = {str(e): {B[e % 3]: h(e), B[(e + 1) % 3]: h(e)} for e in range(5)}
    final = {"ledgers": {"7": {"ewa": [3, 2, 2], "lac": 4, "state": "CLOSED", "ensembles": [[0, B]],
                               "entries": [h(e) for e in range(5)], "replicas": replicas}}, "errors": {}}
    return ev, final


def kinds(history, final):
    report = check(history, final)
    return sorted(v.kind for v in report.violations), report


def test_valid_history_passes_and_counts_every_acknowledged_entry():
    found, report = kinds(*valid_run())
    assert found == []
    assert report.acked_checked == 5
    assert report.operations == 1 + 5 + 2 + 1 + 1 + 1   # create, acks, reads, fault, recover, failed add


def test_acknowledged_entry_removed_from_a_bookies_answer_is_a_durability_violation():
    history, final = valid_run()
    final["ledgers"]["7"]["replicas"]["3"][B[0]] = "missing"
    found, report = kinds(history, final)
    assert found == ["durability"]
    assert "entry 3 is on 1 bookie(s)" in report.violations[0].message


def test_a_bookie_answering_other_bytes_is_a_durability_violation():
    history, final = valid_run()
    final["ledgers"]["7"]["replicas"]["1"][B[1]] = "ffffffffffffffff"
    found, report = kinds(history, final)
    assert found == ["durability", "durability"]       # one replica fewer than AQ, and different bytes
    assert any("other bytes" in v.message for v in report.violations)


def test_add_acknowledged_after_the_close_is_a_persistence_violation_with_its_slice():
    history, final = valid_run()
    late = copy.deepcopy(history[-1])
    history[-1] = dict(late, phase="ok", entry=5)
    history[-1].pop("err")
    found, report = kinds(history, final)
    assert "persistence" in found and "fencing" in found
    persistence = next(v for v in report.violations if v.kind == "persistence")
    shown = slice_for(history, persistence)
    assert shown[0]["op"] == "recover" and shown[-1]["op"] == "add" and shown[-1]["phase"] == "ok"
    assert len(shown) < len(history)
    assert "VIOLATION persistence ledger 7" in format_violation(history, persistence)


def test_fenced_writer_acknowledged_after_the_recovery_is_a_fencing_violation():
    history, final = valid_run()
    final["ledgers"]["7"]["lac"] = 5                   # even if the entry made it into the ledger
    final["ledgers"]["7"]["entries"].append(h(5))
    final["ledgers"]["7"]["replicas"]["5"] = {B[2]: h(5), B[0]: h(5)}
    history[-1] = dict(history[-1], phase="ok", entry=5)
    found, _ = kinds(history, final)
    assert "fencing" in found


def test_readers_disagreeing_on_the_last_entry_is_an_agreement_violation():
    history, final = valid_run()
    history.append({"t": 10**7, "p": "w1", "op": "close", "phase": "ok", "ledger": 7, "lac": 3})
    assert kinds(history, final)[0] == ["agreement"]


def test_an_entry_a_tailer_saw_that_later_vanished_is_reported():
    history, final = valid_run()
    tail = next(e for e in history if e["p"] == "t1")
    tail["hashes"] = tail["hashes"] + [h(3), "0123456789abcdef"]
    found, report = kinds(history, final)
    assert found == ["vanished"]
    assert "entry 4" in report.violations[0].message


def test_a_ledger_that_cannot_be_recovered_at_the_end_loses_its_acknowledged_entries():
    history, final = valid_run()
    del final["ledgers"]["7"]
    final["errors"]["7"] = "BKLedgerRecoveryException"
    found, _ = kinds(history, final)
    assert found == ["durability"] * 5


# --- AutoRecovery: marks left after the settle wait, closed ledgers missing replicas ---------------------------
def with_replication(marks=None, available=B):
    history, final = valid_run()
    final["ledgers"]["7"]["closed_before"] = True      # r1 closed it before the final check
    final["replication"] = {"marks": marks or {}, "available": list(available), "settle_s": 60.0}
    return history, final


def test_a_healed_cluster_with_every_replica_in_place_passes_the_replication_checks():
    found, report = kinds(*with_replication())
    assert found == []
    assert report.summary()["underreplicated_left"] == 0 and report.summary()["replica_entries_missing_at_write"] == 0


SPARE = "127.77.0.6:3181"


def test_a_mark_left_for_a_ledger_that_could_be_healed_is_an_underreplicated_violation():
    found, report = kinds(*with_replication(marks={"7": [B[0]]}, available=B + [SPARE]))
    assert found == ["underreplicated"]
    assert "still marked under-replicated" in report.violations[0].message and report.violations[0].ledger == 7
    assert report.summary()["underreplicated_left"] == 1


def test_a_mark_left_while_a_bookie_of_the_ledger_is_not_registered_is_counted_not_a_violation():
    found, report = kinds(*with_replication(marks={"7": [B[0]]}, available=B[1:] + [SPARE]))
    assert found == []
    assert report.summary()["underreplicated_left"] == 1


def test_a_mark_left_when_no_registered_bookie_is_outside_the_ensemble_is_counted_not_a_violation():
    """E=5 on 5 bookies (seen in a campaign): a bookie that missed entries can only be replaced by one outside
    the ensemble, and there is none, so AutoRecovery cannot heal the ledger (Java's worker cannot either)."""
    found, report = kinds(*with_replication(marks={"7": [B[0]]}, available=B))
    assert found == []
    assert report.summary()["underreplicated_left"] == 1 and report.summary()["underreplicated_unhealable"] == 1


def test_a_closed_ledger_entry_missing_on_one_bookie_of_its_write_set_names_the_bookie_and_entries():
    history, final = with_replication()
    final["ledgers"]["7"]["ewa"] = [3, 2, 1]           # one copy is still >= AQ: no durability violation
    for e in (1, 4):                                   # B[2]'s share is 1, 2, 4: two holes
        final["ledgers"]["7"]["replicas"][str(e)][B[2]] = "missing"
    found, report = kinds(history, final)
    assert found == ["underreplicated"]
    assert f"{B[2]} (segment at 0: 2 separate runs missing): entries 1,4" in report.violations[0].message


def test_one_run_of_writes_a_failed_bookie_missed_is_bookkeepers_own_unless_autorecovery_put_it_there():
    history, final = with_replication()
    final["ledgers"]["7"]["ewa"] = [3, 2, 1]
    final["ledgers"]["7"]["replicas"]["2"][B[2]] = "missing"     # B[2]'s share is 1, 2, 4: one run missed
    final["ledgers"]["7"]["replicas"]["4"][B[2]] = "missing"
    found, report = kinds(history, final)
    assert found == [] and report.summary()["replica_entries_missing_at_write"] == 2
    final["rereplicated"] = [[7, 0, B[2]]]                       # but AutoRecovery copied the segment to it
    found, report = kinds(history, final)
    assert found == ["underreplicated"]
    assert f"{B[2]} (segment at 0: put there by AutoRecovery): entries 2,4" in report.violations[0].message


def test_missing_replicas_of_a_ledger_the_final_check_closed_itself_are_not_reported():
    history, final = with_replication()
    final["ledgers"]["7"]["closed_before"] = False     # its writer never closed it: entries past its LAC
    final["ledgers"]["7"]["ewa"] = [3, 2, 1]
    final["ledgers"]["7"]["replicas"]["4"][B[1]] = "missing"
    assert kinds(history, final)[0] == []
