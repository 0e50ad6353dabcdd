"""`bkfast bookie` as a real process, driven by raw-socket v2 and v3 clients."""

from __future__ import annotations

import threading
import time

import pytest

from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    DigestType,
    decode_response,
    encode_add_request,
    encode_batch_read_request,
    encode_entry,
    encode_lac,
    encode_read_request,
    master_key,
)
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from tests.server_support import BookieProcess, Client

KEY = master_key("secret")
WRONG = master_key("wrong")
CRC = DigestType.CRC32C


@pytest.fixture
def bookie(tmp_path):
    b = BookieProcess(tmp_path).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def v2_add(client: Client, ledger, entry, payload=b"x", key=KEY, flags=0):
    client.send_raw(encode_add_request(key, ledger, entry, entry - 1, entry + 1, payload, CRC, flags=flags))
    r = decode_response(client.recv_body())
    assert (r.ledger_id, r.entry_id) == (ledger, entry)
    return r.rc


def v2_read(client: Client, ledger, entry, flags=0, key=None):
    client.send_raw(encode_read_request(ledger, entry, flags, key))
    return decode_response(client.recv_body())


def v3_add(client: Client, ledger, entry, payload=b"y", key=KEY, **extra):
    body = encode_entry(ledger, entry, entry - 1, entry + 1, payload, CRC)
    r = client.v3(pb.ADD_ENTRY, addRequest=dict(ledgerId=ledger, entryId=entry, masterKey=key, body=body,
                                                 **extra))
    assert r.status == r.addResponse.status
    return r.addResponse.status, body


def test_v2_add_read_fence(bookie):
    with bookie.connect() as c:
        for e in range(5):
            assert v2_add(c, 1, e, b"payload-%d" % e) == 0
        r = v2_read(c, 1, 3)
        assert r.rc == 0 and r.data == encode_entry(1, 3, 2, 4, b"payload-3", CRC)
        assert v2_read(c, 1, -1).data[8:16] == (4).to_bytes(8, "big")
        assert v2_read(c, 1, 99).rc == 2                          # ENOENTRY
        assert v2_read(c, 777, 0).rc == 1                         # ENOLEDGER
        assert v2_add(c, 1, 5, key=WRONG) == 102                  # EUA
        assert v2_read(c, 1, -1, FLAG_DO_FENCING, WRONG).rc == 102
        r = v2_read(c, 1, -1, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, KEY)
        assert r.rc == 0 and r.entry_id == -1
        assert v2_add(c, 1, 5) == 104                             # EFENCED
        assert v2_add(c, 1, 5, flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY) == 0
        # batch read: maxCount 3 from entry 2
        c.send_raw(encode_batch_read_request(1, 2, 42, 3, 1 << 20))
        r = decode_response(c.recv_body())
        assert r.rc == 0 and r.request_id == 42
        assert [bytes(e)[8:16] for e in r.entries] == [i.to_bytes(8, "big") for i in (2, 3, 4)]


def test_v2_pipelined_adds_and_too_many_requests(tmp_path):
    b = BookieProcess(tmp_path, "-D", "maxPendingAddRequestsPerThread=1").start()
    try:
        with b.connect() as c:
            n = 300
            c.send_raw(b"".join(encode_add_request(KEY, 9, e, e - 1, e + 1, b"z", CRC) for e in range(n)))
            rcs = [decode_response(c.recv_body()).rc for _ in range(n)]
            assert set(rcs) == {0, 106}
    finally:
        assert b.stop() == 0, b.log()


def test_v2_many_pipelined_adds_all_acked(bookie):
    with bookie.connect() as c:
        n = 5000
        c.send_raw(b"".join(encode_add_request(KEY, 3, e, e - 1, e + 1, b"p" * 100, CRC) for e in range(n)))
        got = sorted(decode_response(c.recv_body()).entry_id for _ in range(n))
        assert got == list(range(n))
        assert v2_read(c, 3, -1).data[8:16] == (n - 1).to_bytes(8, "big")


def test_v3_add_read_lac_fence(bookie):
    with bookie.connect() as c:
        for e in range(3):
            assert v3_add(c, 5, e)[0] == pb.EOK
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=5, entryId=1))
        assert r.status == pb.EOK and r.readResponse.maxLAC == 1
        assert v3_add(c, 5, 3, key=WRONG)[0] == pb.EUA
        lac = encode_lac(5, 2, CRC)
        r = c.v3(pb.WRITE_LAC, writeLacRequest=dict(ledgerId=5, lac=2, masterKey=KEY, body=lac))
        assert r.status == pb.EOK
        r = c.v3(pb.READ_LAC, readLacRequest=dict(ledgerId=5))
        assert r.status == pb.EOK and r.readLacResponse.lacBody == lac
        assert r.readLacResponse.lastEntryBody[8:16] == (2).to_bytes(8, "big")
        assert c.v3(pb.READ_LAC, readLacRequest=dict(ledgerId=404)).status == pb.ENOENTRY
        assert v3_add(c, 6, 0, writeFlags=1)[0] == pb.EOK       # DEFERRED_SYNC
        assert c.v3(pb.FORCE_LEDGER, forceLedgerRequest=dict(ledgerId=6)).status == pb.EOK
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=5, entryId=-1, flag=pb.ReadRequest.FENCE_LEDGER))
        assert r.status == pb.EUA                                 # fencing needs a key
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=5, entryId=-1, flag=pb.ReadRequest.FENCE_LEDGER,
                                                 masterKey=KEY))
        assert r.status == pb.EOK and r.readResponse.body[8:16] == (2).to_bytes(8, "big")
        assert v3_add(c, 5, 3)[0] == pb.EFENCED
        assert v3_add(c, 5, 3, flag=pb.AddRequest.RECOVERY_ADD)[0] == pb.EOK
        r = c.v3(pb.GET_LIST_OF_ENTRIES_OF_LEDGER, getListOfEntriesOfLedgerRequest=dict(ledgerId=404))
        assert r.status == pb.ENOLEDGER


def test_v3_scope_ids_are_separate_ledgers(bookie):
    with bookie.connect() as c:
        assert v3_add(c, 8, 0, payload=b"scope0")[0] == pb.EOK
        body = encode_entry(8, 0, -1, 1, b"scope7", CRC, scope_id=7)
        r = c.v3(pb.ADD_ENTRY, addRequest=dict(ledgerId=8, entryId=0, masterKey=WRONG, body=body,
                                                ledgerScopeId=7))
        assert r.status == pb.EOK and r.addResponse.ledgerScopeId == 7
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=8, entryId=0, ledgerScopeId=7))
        assert r.readResponse.body == body and r.readResponse.ledgerScopeId == 7
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=8, entryId=0))
        assert r.readResponse.body.endswith(b"scope0") and not r.readResponse.HasField("ledgerScopeId")
    with bookie.connect() as c:
        # a scoped entry over v2: EBADREQ
        c.send_raw(_v2_frame_for(KEY, body))
        assert decode_response(c.recv_body()).rc == 100


def _v2_frame_for(key, entry):
    from bkfast.codec import encode_add_request_for_entry
    return encode_add_request_for_entry(key, entry)


def test_v3_long_poll(bookie):
    with bookie.connect() as c, bookie.connect() as writer:
        assert v3_add(writer, 11, 0)[0] == pb.EOK                 # LAC field -1
        assert v3_add(writer, 11, 1)[0] == pb.EOK                 # LAC field 0
        # times out: ENOENTRY for entry 2, after about timeOut ms
        start = time.monotonic()
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=11, entryId=2, previousLAC=0, timeOut=300))
        assert r.status == pb.ENOENTRY and time.monotonic() - start >= 0.25
        # woken by an add that moves the LAC: piggyback returns entry previousLAC + 1 and maxLAC
        result = {}

        def poll():
            result["r"] = c.v3(pb.READ_ENTRY, readRequest=dict(
                ledgerId=11, entryId=-1, previousLAC=0, timeOut=10000, flag=pb.ReadRequest.ENTRY_PIGGYBACK))

        t = threading.Thread(target=poll)
        start = time.monotonic()
        t.start()
        time.sleep(0.3)
        assert "r" not in result
        assert v3_add(writer, 11, 2)[0] == pb.EOK                 # LAC field 1 > previousLAC 0
        t.join(10)
        r = result["r"]
        assert time.monotonic() - start < 5
        assert r.status == pb.EOK and r.readResponse.maxLAC == 1 and r.readResponse.entryId == 1
        assert r.readResponse.body[8:16] == (1).to_bytes(8, "big") and r.readResponse.lacUpdateTimestamp > 0
        # unknown ledger: ENOLEDGER at once
        r = c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=999, entryId=0, previousLAC=0, timeOut=5000))
        assert r.status == pb.ENOLEDGER


def test_read_only_bookie(tmp_path):
    b = BookieProcess(tmp_path, "--read-only").start()
    try:
        with b.connect() as c:
            assert v2_add(c, 1, 0) == 105                                         # EREADONLY
            assert v2_add(c, 1, 0, flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY) == 0
            assert v2_read(c, 1, 0).rc == 0
        with b.connect() as c:
            assert v3_add(c, 2, 0)[0] == pb.EREADONLY
            assert v3_add(c, 2, 0, flag=pb.AddRequest.RECOVERY_ADD)[0] == pb.EOK
    finally:
        assert b.stop() == 0, b.log()
    conf = tmp_path / "bk_server.conf"
    conf.write_text("# BookKeeper's key\nforceReadOnlyBookie=true\n")
    b = BookieProcess(tmp_path, "--conf", str(conf)).start()
    try:
        with b.connect() as c:
            assert v2_add(c, 1, 1) == 105
    finally:
        assert b.stop() == 0, b.log()


def test_sigterm_exits_zero_and_entries_survive(tmp_path):
    b = BookieProcess(tmp_path).start()
    with b.connect() as c:
        for e in range(50):
            assert v2_add(c, 21, e, b"keep-%d" % e) == 0
    with b.connect() as c:                                  # the first connection is v2 for good
        assert v3_add(c, 22, 0)[0] == pb.EOK
    assert b.stop() == 0, b.log()
    b2 = BookieProcess(tmp_path).start()
    try:
        with b2.connect() as c:
            for e in range(50):
                r = v2_read(c, 21, e)
                assert r.rc == 0 and bytes(r.data).endswith(b"keep-%d" % e)
        with b2.connect() as c:
            assert c.v3(pb.READ_ENTRY, readRequest=dict(ledgerId=22, entryId=0)).status == pb.EOK
    finally:
        assert b2.stop() == 0, b2.log()


def test_sigkill_after_acks_every_acked_entry_reads_back(tmp_path):
    b = BookieProcess(tmp_path).start()
    acked = []
    with b.connect() as c:
        n = 2000
        c.send_raw(b"".join(encode_add_request(KEY, 31, e, e - 1, e + 1, b"d%d" % e, CRC) for e in range(n)))
        for _ in range(n):
            r = decode_response(c.recv_body())
            if r.rc == 0:
                acked.append(r.entry_id)
    b.kill()                                                # SIGKILL: no flush, no checkpoint
    assert len(acked) == 2000
    b2 = BookieProcess(tmp_path).start()
    try:
        with b2.connect() as c:
            for e in acked:
                r = v2_read(c, 31, e)
                assert r.rc == 0 and bytes(r.data).endswith(b"d%d" % e), e
    finally:
        assert b2.stop() == 0, b2.log()


def test_unsupported_ledger_storage_is_a_clear_error(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run(
        [sys.executable, "-m", "bkfast.cli.main", "bookie", "--no-metadata", "-D", f"journalDirectory={tmp_path / 'j'}",
         "-D", f"ledgerDirectories={tmp_path / 'l'}", "-D", "listeningInterface=127.0.0.1", "--port", "0",
         "-D", "ledgerStorageClass=com.example.NoSuchLedgerStorage"],
        capture_output=True, timeout=60)
    assert proc.returncode != 0
    assert b"ledgerStorageClass" in proc.stderr and b"com.example.NoSuchLedgerStorage" in proc.stderr
    assert b"Traceback" not in proc.stderr
    assert b"bookie listening" not in proc.stdout


def test_sigterm_with_adds_in_flight_acks_them_and_exits_zero(tmp_path):
    import os
    import signal
    b = BookieProcess(tmp_path).start()
    acked = []
    with b.connect() as c:
        n = 3000
        c.send_raw(b"".join(encode_add_request(KEY, 41, e, e - 1, e + 1, b"f%d" % e, CRC) for e in range(n)))
        os.kill(b.proc.pid, signal.SIGTERM)
        try:
            for _ in range(n):
                r = decode_response(c.recv_body())
                if r.rc == 0:
                    acked.append(r.entry_id)
        except (ConnectionError, OSError):
            pass                                             # closed after draining
    assert b.stop() == 0, b.log()
    b2 = BookieProcess(tmp_path).start()
    try:
        with b2.connect() as c:
            for e in acked:
                r = v2_read(c, 41, e)
                assert r.rc == 0 and bytes(r.data).endswith(b"f%d" % e), e
    finally:
        assert b2.stop() == 0, b2.log()


def test_sigterm_during_start_up_stops_cleanly_after_replay(tmp_path):
    """A SIGTERM that lands while the bookie is replaying its journal is a clean stop, not a kill."""
    import os
    import signal
    import subprocess
    import sys

    b = BookieProcess(tmp_path).start()
    with b.connect() as c:
        c.send_raw(b"".join(encode_add_request(KEY, 41, e, e - 1, e + 1, b"s%d" % e, CRC) for e in range(2000)))
        for _ in range(2000):
            assert decode_response(c.recv_body()).rc == 0
    b.kill()  # SIGKILL: the next start has a journal to replay
    args = [sys.executable, "-m", "bkfast.cli.main", "bookie", "--no-metadata", "--port", "0",
            "-D", f"journalDirectory={tmp_path / 'journal'}", "-D", f"ledgerDirectories={tmp_path / 'ledgers'}",
            "-D", "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
            "-D", "listeningInterface=127.0.0.1"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        seen = []
        for raw in proc.stderr:  # the start-up signal handler is installed before replay is logged
            seen.append(raw.decode(errors="replace"))
            if "replaying journal" in seen[-1]:
                proc.send_signal(signal.SIGTERM)
                break
        else:
            pytest.fail("bookie never logged its journal replay:\n" + "".join(seen)[-3000:])
        rest = proc.stderr.read().decode(errors="replace")
        assert proc.wait(60) == 0, "".join(seen)[-2000:] + rest[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    b2 = BookieProcess(tmp_path).start()
    try:
        with b2.connect() as c:
            assert v2_read(c, 41, 1999).rc == 0
    finally:
        assert b2.stop() == 0, b2.log()
