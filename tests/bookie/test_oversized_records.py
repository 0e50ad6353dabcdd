"""Issue 24, point 2: a record or entry that no bookie accepts in one frame (nettyMaxFrameSizeBytes) fails at
once and leaves nothing behind, and a writer whose adds a bookie refuses every time stops after a bounded
number of segments instead of rolling forever. Real ZooKeeper, real bookie processes: a default cluster,
and one whose bookies refuse frames over 64 KiB while the clients' own limit stays 5 MiB."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from bkfast import BookKeeper, codec
from bkfast.client.entry_size import ADD_FRAMING_BYTES, max_entry_size
from bkfast.digests import DigestType, mac_key, master_key
from bkfast.errors import (
    BKNotEnoughBookiesException,
    EntryTooLargeError,
    StreamWriterStoppedError,
)
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.streams import Namespace, decode_batch, encode_batch
from bkfast.streams.batch import encoded_size
from bkfast.streams.limits import max_batch_payload
from tests.cluster_factory import cluster_fixture

DEFAULT_FRAME = 5 * 1024 * 1024
SMALL_FRAME = 64 * 1024


# Three bookies with BookKeeper's default nettyMaxFrameSizeBytes.
bookies = cluster_fixture(3)


@pytest.fixture(scope="module")
def streams(bookies):
    with Namespace(bookies.metadata_uri, timeout=60) as namespace:
        yield namespace


def _name(prefix: str) -> str:
    return f"{prefix}-{random.randrange(1 << 30):x}"


# --- the limit itself (no cluster) -----------------------------------------------------------------


@pytest.mark.parametrize("digest", [DigestType.CRC32, DigestType.MAC, DigestType.CRC32C, DigestType.DUMMY])
@pytest.mark.parametrize("scope_id", [0, (1 << 63) - 1])
def test_an_add_of_the_largest_entry_fits_its_frame_in_v2_and_v3_with_every_field_at_its_widest(digest, scope_id):
    frame = SMALL_FRAME
    payload = b"p" * max_entry_size(frame)
    entry = codec.encode_entry((1 << 63) - 1, (1 << 63) - 1, (1 << 63) - 1, (1 << 63) - 1, payload, int(digest),
                               mac_key(b"pw") if digest == DigestType.MAC else b"", scope_id)
    v2 = codec.encode_add_request_for_entry(master_key(b"pw"), entry, 0xFFFF)
    request = pb.Request()
    request.header.version = pb.VERSION_THREE
    request.header.operation = pb.ADD_ENTRY
    request.header.txnId = (1 << 64) - 1
    request.header.priority = (1 << 32) - 1
    add = request.addRequest
    add.flag = pb.AddRequest.RECOVERY_ADD
    add.ledgerId = add.entryId = add.ledgerScopeId = -1
    add.writeFlags = -1
    add.masterKey = master_key(b"pw")
    add.body = entry
    body = request.SerializeToString()
    v3 = len(body).to_bytes(4, "big") + body
    for wire in (v2, v3):
        assert len(wire) <= frame
        assert len(codec.FrameSplitter(frame).feed(wire)) == 1       # what a bookie's splitter takes
    assert ADD_FRAMING_BYTES <= 200                                     # and not absurdly conservative


def test_encoded_size_is_the_exact_length_of_a_batch():
    rng = random.Random(5)
    for _ in range(500):
        n = rng.randint(1, 30)
        values = [rng.randbytes(rng.randint(0, 40)) for _ in range(n)]
        keys = [rng.randbytes(rng.randint(0, 9)) if rng.random() < 0.7 else None for _ in range(n)]
        if rng.random() < 0.4:
            keys = None
        has_keys = keys is not None and any(k is not None for k in keys)
        key_bytes = sum(len(k) for k in keys if k is not None) if keys else 0
        assert len(encode_batch(values, keys, [1] * n, 0)) == encoded_size(n, sum(map(len, values)), key_bytes,
                                                                         has_keys)


# --- streams on a default cluster -------------------------------------------------------------------


def _stream_znode(cluster, name):
    data, stat = cluster.zk.get(f"{cluster.root}/streams/{name}")
    return data, stat.version


def _ledger_count(cluster) -> int:
    with BookKeeper(cluster.metadata_uri) as bk:
        return len(bk.list_ledgers())


@pytest.mark.zookeeper
def test_a_six_megabyte_record_fails_at_once_naming_the_limit_and_changes_nothing(streams, bookies):
    name = _name("big")
    streams.create_stream(name)
    w = streams.open_writer(name)
    before = (streams.describe(name).segments, _stream_znode(bookies, name), _ledger_count(bookies))
    started = time.monotonic()
    with pytest.raises(EntryTooLargeError) as raised:
        w.write(b"V" * 6_000_000).wait(5)
    with pytest.raises(EntryTooLargeError):
        w.write_many([b"small", b"V" * 6_000_000, b"small"])             # all or nothing
    assert time.monotonic() - started < 1.0
    message = str(raised.value)
    assert "record of 6000000 bytes" in message and "nettyMaxFrameSizeBytes=5242880" in message
    assert f"less {ADD_FRAMING_BYTES + encoded_size(1, 6_000_000) - 6_000_000} bytes of framing" in message
    assert (streams.describe(name).segments, _stream_znode(bookies, name), _ledger_count(bookies)) == before
    position = w.write(b"after").wait(10)                             # the writer goes on
    w.close()
    assert position.entry == 0 and position.slot == 0


@pytest.mark.zookeeper
def test_records_over_the_batch_limit_but_under_the_frame_limit_go_as_batches_that_fit_a_frame(streams, bookies):
    name = _name("fit")
    streams.create_stream(name)
    limit = max_batch_payload(DEFAULT_FRAME)
    alone = b"a" * (limit - encoded_size(1, 0))                          # the largest record there is
    big = [bytes([65 + i]) * 1_500_000 for i in range(7)]
    with streams.open_writer(name, max_batch_bytes=64 * 1024 * 1024, linger_ms=50) as w:
        w.write(alone).wait(30)
        w.write_many(big)
        pending = [w.write(b"x" * 1_200_000) for _ in range(5)]
        w.flush()
        assert all(p.wait(30) for p in pending)
    segment = streams.describe(name).segments[-1]
    with BookKeeper(bookies.metadata_uri) as bk:
        entries = bk.open_ledger(segment.ledger).read_entries(0, segment.last_entry)
    batches = [decode_batch(e.data) for e in entries]
    assert all(len(e.data) <= limit for e in entries)
    assert [v for b in batches for v in b.values()] == [alone, *big, *[b"x" * 1_200_000] * 5]
    assert [b.count for b in batches if b.count][:4] == [1, 3, 3, 1]


@pytest.mark.zookeeper
def test_stream_append_command_exits_with_one_line_naming_the_limit_and_leaves_the_stream_alone(streams, bookies):
    name = _name("cli")
    streams.create_stream(name)
    before = (_stream_znode(bookies, name), _ledger_count(bookies))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bkfast.cli.main", "stream", "append", "--metadata-uri",
                           bookies.metadata_uri, name], input=b"V" * 6_000_000 + b"\n", capture_output=True,
                          timeout=120)
    assert proc.returncode != 0
    err = proc.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "record of 6000000 bytes" in err and "nettyMaxFrameSizeBytes=5242880" in err
    assert time.monotonic() - started < 30
    assert (_stream_znode(bookies, name), _ledger_count(bookies)) == before


# --- the ledger client -------------------------------------------------------------------------------


@pytest.mark.zookeeper
def test_an_oversized_entry_fails_at_once_with_the_ensemble_unchanged_and_the_handle_writable(bookies):
    with BookKeeper(bookies.metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, digest_type="CRC32C")
        ensembles = lh.metadata.ensembles
        too_big = b"e" * (max_entry_size(DEFAULT_FRAME) + 1)
        started = time.monotonic()
        with pytest.raises(EntryTooLargeError, match="nettyMaxFrameSizeBytes=5242880"):
            lh.add_entry(too_big)
        with pytest.raises(EntryTooLargeError, match=f"ledger {lh.ledger_id}: entry of {len(too_big)} bytes"):
            lh.add_entries([b"one", too_big])
        assert time.monotonic() - started < 1.0
        assert bk.get_ledger_metadata(lh.ledger_id).ensembles == ensembles == lh.metadata.ensembles
        assert lh.add_entries([b"two", b"three"]) == [1, 2]           # "one" went before the refusal
        assert lh.add_entry(b"e" * max_entry_size(DEFAULT_FRAME)) == 3
        adv = bk.create_ledger_adv(3, 2, 2)
        with pytest.raises(EntryTooLargeError):
            adv.add_entry(0, too_big)
        assert adv.add_entry(0, b"zero") == 0
        lh.close()
        adv.close()
        assert lh.metadata.ensembles == ensembles


# --- bookies that refuse every add -----------------------------------------------------------------------


# Bookies that close the connection on any frame over 64 KiB: a deterministic refusal of every add of more
# than that, which the clients (limit 5 MiB) cannot see coming.
refusing = cluster_fixture(3, nettyMaxFrameSizeBytes=str(SMALL_FRAME))


@pytest.mark.zookeeper
def test_a_writer_whose_adds_are_always_refused_stops_after_bounded_segments_and_close_returns(refusing):
    name = _name("refused")
    with Namespace(refusing.metadata_uri, timeout=60) as rns:
        rns.create_stream(name)
        ledgers = _ledger_count(refusing)
        w = rns.open_writer(name, max_failed_rolls=3, roll_backoff_ms=10)
        pending = [w.write(b"r" * 100_000), w.write(b"small")]
        for p in pending:
            with pytest.raises(StreamWriterStoppedError, match="4 segments failed in a row"):
                p.wait(60)
        started = time.monotonic()
        w.close()
        assert time.monotonic() - started < 1.0
        md = rns.describe(name)
        assert len(md.segments) == 4 and not any(s.is_open for s in md.segments)   # the open one and 3 rolls
        assert _ledger_count(refusing) - ledgers <= 4
        with pytest.raises(StreamWriterStoppedError):
            w.write(b"more").wait(5)


@pytest.mark.zookeeper
def test_closing_a_writer_in_a_long_backoff_does_not_wait_it_out(refusing):
    name = _name("hurried")
    with Namespace(refusing.metadata_uri, timeout=60) as rns:
        rns.create_stream(name)
        w = rns.open_writer(name, max_failed_rolls=2, roll_backoff_ms=20_000)
        pending = w.write(b"r" * 100_000)
        first = rns.describe(name).segments[0]
        with BookKeeper(refusing.metadata_uri) as bk:
            deadline = time.monotonic() + 10
            while not bk.get_ledger_metadata(first.ledger).is_closed and time.monotonic() < deadline:
                time.sleep(0.05)                    # recovered: the writer now backs off for 20 s
        time.sleep(0.5)
        assert len(rns.describe(name).segments) == 1 and not pending.done()
        started = time.monotonic()
        with pytest.raises(StreamWriterStoppedError, match="3 segments failed in a row"):
            w.close()                               # the flush rolls at once, and fails the same way
        assert time.monotonic() - started < 10.0
        with pytest.raises(StreamWriterStoppedError):
            pending.wait(5)
        assert len(rns.describe(name).segments) == 3


@pytest.mark.zookeeper
def test_segments_created_without_a_successful_write_are_capped_per_minute(refusing):
    name = _name("capped")
    with Namespace(refusing.metadata_uri, timeout=60) as rns:
        rns.create_stream(name)
        w = rns.open_writer(name, max_failed_rolls=1000, roll_backoff_ms=0, max_failed_segments_per_minute=3)
        pending = w.write(b"r" * 100_000)
        deadline = time.monotonic() + 20
        while len(rns.describe(name).segments) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)
        assert len(rns.describe(name).segments) == 3 and not pending.done()
        started = time.monotonic()
        w.close()                                   # ends the wait: the writer stops, its writes fail
        assert time.monotonic() - started < 1.0
        with pytest.raises(StreamWriterStoppedError, match="closed while waiting to roll after 3 failed"):
            pending.wait(5)
        assert len(rns.describe(name).segments) == 3


@pytest.mark.zookeeper
def test_a_ledger_whose_entry_every_bookie_refuses_fails_instead_of_changing_its_ensemble_forever(refusing):
    with BookKeeper(refusing.metadata_uri) as bk:
        lh = bk.create_ledger(2, 1, 1, digest_type="CRC32C")      # one spare bookie to swap with
        with pytest.raises(BKNotEnoughBookiesException, match="none is tried twice"):
            lh.add_entry(b"r" * 100_000)
        assert len(bk.get_ledger_metadata(lh.ledger_id).ensembles) <= 2


@pytest.mark.zookeeper
@pytest.mark.parametrize("protocol", ["v2", "v3"])
def test_the_largest_entry_the_client_allows_is_one_the_bookies_accept(refusing, protocol):
    """Clients and bookies with the same nettyMaxFrameSizeBytes: the framing the client subtracts is
    enough for the widest add (MAC digest, scoped ledger id) on either protocol."""
    conf = {"nettyMaxFrameSizeBytes": SMALL_FRAME, "useV2WireProtocol": protocol == "v2"}
    largest = max_entry_size(SMALL_FRAME)
    with BookKeeper(refusing.metadata_uri, **conf) as bk:
        for scope_id in (0, (1 << 62) + 7):
            lh = bk.create_ledger(3, 3, 3, digest_type="MAC", password=b"pw", scope_id=scope_id)
            assert lh.add_entry(b"m" * largest) == 0
            with pytest.raises(EntryTooLargeError, match=f"nettyMaxFrameSizeBytes={SMALL_FRAME}"):
                lh.add_entry(b"m" * (largest + 1))
            assert lh.add_entry(b"after") == 1
            assert [len(e.data) for e in lh.read_entries(0, 1)] == [largest, 5]
            lh.close()
