"""The bookie's LAC tracker (bkfast.bookie.lac): long-poll readers are woken when an entry reaches ledger
storage, before its journal sync, and what the tracker keeps is bounded."""

from __future__ import annotations

import threading
import time

import pytest

from bkfast.bookie.lac import LacTracker, LacWaiter
from bkfast.codec import DigestType, encode_entry, master_key
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.server_support import BookieProcess

KEY = master_key("secret")
CRC = DigestType.CRC32C


def test_tracker_wakes_only_waiters_the_new_lac_satisfies_and_forgets_deleted_and_idle_ledgers():
    now = [0.0]
    tracker = LacTracker(idle_timeout_s=10, clock=lambda: now[0])
    assert tracker.known(0, 1, lambda: 4) == 4
    assert tracker.known(0, 1, lambda: 99) == 4           # loaded once, then one lookup
    woken = []
    low, high = LacWaiter(4, lambda: woken.append("low")), LacWaiter(6, lambda: woken.append("high"))
    tracker.watch(0, 1, low)
    tracker.watch(0, 1, high)
    tracker.advance(0, 1, 3)                               # lower LAC: ignored
    tracker.advance(0, 1, 5)
    assert woken == ["low"] and tracker.known(0, 1, lambda: 0) == 5
    tracker.advance(0, 2, 7)                               # untracked ledger: nothing kept
    assert (0, 2) not in tracker and len(tracker) == 1
    tracker.drop(0, 1)                                     # deleted: its waiters are answered
    assert woken == ["low", "high"] and len(tracker) == 0
    for ledger in range(100):
        tracker.known(0, ledger, lambda: -1)
    tracker.watch(0, 7, LacWaiter(0, lambda: None))
    now[0] = 11.0
    tracker.known(0, 1000, lambda: -1)                     # a new ledger triggers the idle sweep
    assert len(tracker) == 2 and (0, 7) in tracker and (0, 1000) in tracker


def test_a_ledger_is_watched_before_its_lac_is_loaded_and_unwatched_when_the_load_fails():
    """The add fast path must report the LAC of every add the load did not see: an add worker's run that
    stores after the load must already find the ledger watched. So on_tracking comes first, and a load that
    raises (no such ledger) takes the watch back."""
    tracker = LacTracker()
    events = []
    tracker.on_tracking = lambda scope, ledger, tracked: events.append(("watch", ledger, tracked))

    def load():
        events.append(("load", 5))
        return 3
    assert tracker.known(0, 5, load) == 3
    assert events == [("watch", 5, True), ("load", 5)]
    events.clear()

    def missing():
        raise KeyError("no ledger 6")
    with pytest.raises(KeyError):
        tracker.known(0, 6, missing)
    assert events == [("watch", 6, True), ("watch", 6, False)] and (0, 6) not in tracker


def _v3_add_frame(ledger, entry, txn):
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.ADD_ENTRY, txn
    a = r.addRequest
    a.ledgerId, a.entryId, a.masterKey = ledger, entry, KEY
    a.body = encode_entry(ledger, entry, entry - 1, entry + 1, b"t", CRC)
    return r.SerializeToString()


def test_long_poll_is_answered_when_the_entry_reaches_storage_not_after_the_journal_sync(tmp_path):
    # Every journal batch waits 400 ms before its sync: an add is acknowledged >= 400 ms after it arrives.
    b = BookieProcess(tmp_path, "-D", "journalMaxGroupWaitMSec=400", "-D", "journalFlushWhenQueueEmpty=false",
                      "-D", "journalBufferedEntriesThreshold=0").start()
    try:
        with b.connect() as reader, b.connect() as writer:
            for e in (0, 1):
                writer.send_body(_v3_add_frame(12, e, e))
                assert pb.Response.FromString(writer.recv_body()).status == pb.EOK
            result = {}

            def poll():
                result["r"] = reader.v3(pb.READ_ENTRY, readRequest=dict(
                    ledgerId=12, entryId=-1, previousLAC=0, timeOut=10000, flag=pb.ReadRequest.ENTRY_PIGGYBACK))
                result["t"] = time.monotonic()

            t = threading.Thread(target=poll)
            t.start()
            time.sleep(0.3)
            writer.send_body(_v3_add_frame(12, 2, 7))          # piggy-backs LAC 1
            sent = time.monotonic()
            ack = pb.Response.FromString(writer.recv_body())
            acked = time.monotonic()
            t.join(10)
            assert ack.status == pb.EOK and acked - sent >= 0.3
            r = result["r"]
            assert r.status == pb.EOK and r.readResponse.maxLAC == 1 and r.readResponse.entryId == 1
            # Before: the waiter was woken by the add's journal completion, i.e. with its ack.
            assert result["t"] - sent < 0.2 and acked - result["t"] >= 0.2, (result["t"] - sent, acked - sent)
    finally:
        b.stop()
