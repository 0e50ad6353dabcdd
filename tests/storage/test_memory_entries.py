"""What the reactor's read loops look in (bkfast._writecache.MemoryEntries over DbLedgerStorage's write
cache halves and the read-ahead ring, ReadCacheRing): where each entry is found, the directory routing,
the hit counters, the ring's FIFO, and answers byte-identical to the Python lookup's."""

from __future__ import annotations

import pytest

from bkfast import _codec, _refcodec
from bkfast._stats import Counter
from bkfast._writecache import ENTRY_OVERHEAD, LEDGER_OVERHEAD, MemoryEntries, ReadCacheRing, WriteCacheHalf
from bkfast.proto import BookkeeperProtocol_pb2 as pb

SCOPED = (7 << 64) | 3


def test_finds_entries_in_write_halves_then_the_read_ring_and_counts_each_kind():
    memory = MemoryEntries(1)
    active, flushing, ring = WriteCacheHalf(), WriteCacheHalf(), ReadCacheRing(4 << 20)
    written, read = Counter(), Counter()
    memory.set_hit_counters(0, written, read)
    memory.set_write_halves(0, (active, flushing))
    ring.on_change = lambda halves: memory.set_read_halves(0, halves)
    memory.set_read_halves(0, ring.halves)
    active.put(5, 2, b"active")
    flushing.put(5, 1, b"flushing")
    flushing.put(5, 2, b"older copy")
    ring.put_run(5, [(0, 0, b"read-ahead"), (1, 0, b"stale")])
    ring.put(SCOPED, 4, b"scoped")
    assert memory.get(5, 2) == b"active"               # the active half first
    assert memory.get(5, 1) == b"flushing"             # a write half before the read-ahead ring
    assert memory.get(5, 0) == b"read-ahead"
    assert memory.get(3, 4, 7) == b"scoped"
    assert memory.get(3, 4) is None and memory.get(5, 9) is None and memory.get(5, -1) is None
    assert (written.value, read.value) == (2, 2)
    big = bytes(range(256)) * 1024                      # larger than the first scratch buffer
    active.put(6, 0, big)
    assert memory.get(6, 0) == big


def test_routes_ledgers_to_directories_as_db_ledger_storage_does():
    memory = MemoryEntries(3)
    halves = [WriteCacheHalf() for _ in range(3)]
    for d, half in enumerate(halves):
        memory.set_write_halves(d, (half,))
    for ledger in range(9):
        halves[ledger % 3].put(ledger, 0, b"L%d" % ledger)
    halves[(7 ^ 4) % 3].put((7 << 64) | 4, 0, b"scoped")   # scope 7, ledger 4: scope ^ ledger
    assert [memory.get(ledger, 0) for ledger in range(9)] == [b"L%d" % ledger for ledger in range(9)]
    assert memory.get(4, 0, 7) == b"scoped"
    with pytest.raises(ValueError):
        MemoryEntries(0)


def test_read_ring_drops_its_oldest_segment_whole_and_never_stores_an_entry_twice():
    segment = 4 * (1000 + ENTRY_OVERHEAD) + LEDGER_OVERHEAD
    ring = ReadCacheRing(3 * segment, segments=3)
    changes = []
    ring.on_change = changes.append
    data = b"x" * 1000
    ring.put_run(1, [(e, 0, data) for e in range(4)])
    ring.put_run(1, [(e, 0, data) for e in range(4)])    # already held: nothing stored
    assert ring.count == 4 and not changes
    ring.put_run(1, [(e, 0, data) for e in range(4, 12)])
    assert ring.count == 12 and len(ring.halves) == 3 and len(changes) == 1   # told once per run
    ring.put(1, 12, data)                               # a fourth segment: entries 0-3 are dropped
    assert [e for e in range(13) if ring.get(1, e) is not None] == list(range(4, 13))
    assert changes[-1] == ring.halves
    ring.put(1, 99, b"y" * segment)                     # larger than a segment: not stored
    assert ring.get(1, 99) is None
    ring.delete_ledger(1)
    assert ring.count == 0 and ring.get(1, 5) is None
    assert not ReadCacheRing(0).enabled


def _v3_read(ledger, entry, txn, scope=0):
    r = pb.Request()
    r.header.version, r.header.operation, r.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, txn
    r.readRequest.ledgerId, r.readRequest.entryId = ledger, entry
    if scope:
        r.readRequest.ledgerScopeId = scope
    return r.SerializeToString()


@pytest.mark.parametrize("codec", [_codec, _refcodec], ids=["cython", "reference"])
def test_serving_from_memory_entries_answers_what_the_python_lookup_answers(codec):
    memory = MemoryEntries(2)
    half = [WriteCacheHalf(), WriteCacheHalf()]
    memory.set_write_halves(0, (half[0],))
    memory.set_write_halves(1, (half[1],))
    for ledger in (4, 5):
        for e in range(0, 6, 2):
            half[ledger % 2].put(ledger, e, b"%d:%d" % (ledger, e) * (e + 1))
    half[(7 ^ 3) % 2].put(SCOPED, 0, b"scoped")
    v2 = [codec.encode_read_request(led, e)[4:] for led, e in ((4, 0), (5, 2), (4, 1), (4, 2), (5, 4))]
    v3 = [_v3_read(led, e, 30 + i, s) for i, (led, e, s) in enumerate(((4, 0, 0), (3, 0, 7), (5, 1, 0), (5, 4, 0)))]
    lookup = memory.get
    for frames, serve in ((v2, lambda src, out, busy: codec.serve_v2_reads(v2, 0, out, src, busy)),
                          (v3, lambda src, out, busy: codec.serve_v3_reads(v3, 0, out, src, lambda s, led: 9, busy))):
        by_source, by_lookup = codec.FrameBuilder(), codec.FrameBuilder()
        busy_source: dict = {}
        busy_lookup: dict = {}
        answer_source = serve(memory, by_source, busy_source)
        answer_lookup = serve(lookup, by_lookup, busy_lookup)
        assert answer_source == answer_lookup and answer_source[0] == len(frames)
        assert busy_source == busy_lookup and busy_source       # a miss holds its ledger's later reads back
        assert bytes(by_source.take()) == bytes(by_lookup.take())


def test_db_ledger_storage_keeps_its_memory_entries_told_of_every_half_it_swaps(tmp_path):
    from bkfast.dbstorage.storage import DbLedgerStorage
    from tests.storage.test_dbstorage import conf, entry

    dirs = [tmp_path / "a", tmp_path / "b"]
    s = DbLedgerStorage.from_conf(dirs, dirs, conf(dbStorage_readAheadCacheBatchSize=4))
    try:
        memory = s.memory_entries
        for ledger in (10, 11):
            for e in range(8):
                s.add_entry(entry(ledger, e))
        assert memory.get(11, 7) == entry(11, 7)                     # the active halves
        s.flush()                                                     # swapped, written, dropped
        assert memory.get(10, 3) is None and memory.get(11, 3) is None
        assert s.get_entry(11, 2) == entry(11, 2)                     # a miss: the entry and 4 after it
        assert [e for e in range(8) if memory.get(11, e) is not None] == [2, 3, 4, 5, 6]
        s.add_entry(entry(10, 8))
        assert memory.get(10, 8) == entry(10, 8)                      # the fresh active half
        s.delete_ledger(11)
        assert memory.get(11, 3) is None
    finally:
        s.close()


@pytest.mark.parametrize("seed", range(4))
def test_the_read_ring_and_memory_entries_answer_what_a_fifo_model_holds(seed):
    """Random runs, deletes and lookups against a model: a list of segments (dicts), newest first, at
    most four, each within its byte limit; what the ring holds is what the model holds, and MemoryEntries
    answers exactly that."""
    import random

    rng = random.Random(seed)
    segment = 16 * 1024
    ring = ReadCacheRing(4 * segment, segments=4)
    memory = MemoryEntries(1)
    ring.on_change = lambda halves: memory.set_read_halves(0, halves)
    memory.set_read_halves(0, ring.halves)
    model: list[dict] = [{}]
    sizes = [0]
    ledger_added = [set()]
    keys = [1, 2, SCOPED]
    for _ in range(600):
        key = rng.choice(keys)
        if rng.random() < 0.05:
            ring.delete_ledger(key)
            for seg in model:
                for k in [k for k in seg if k[0] == key]:
                    del seg[k]
            continue
        first = rng.randrange(200)
        run = [(e, 0, rng.randbytes(rng.randrange(0, 900))) for e in range(first, first + rng.randrange(1, 12))]
        ring.put_run(key, run)
        for entry_id, _, data in run:
            if any((key, entry_id) in seg for seg in model):
                continue
            need = len(data) + ENTRY_OVERHEAD + (0 if key in ledger_added[0] else LEDGER_OVERHEAD)
            if sizes[0] + need > segment:
                model.insert(0, {})
                sizes.insert(0, 0)
                ledger_added.insert(0, set())
                del model[4:], sizes[4:], ledger_added[4:]
                need = len(data) + ENTRY_OVERHEAD + LEDGER_OVERHEAD
            model[0][(key, entry_id)] = data
            sizes[0] += need
            ledger_added[0].add(key)
        for k in keys:
            for e in range(0, 220, 7):
                held = next((seg[(k, e)] for seg in model if (k, e) in seg), None)
                assert ring.get(k, e) == held
                assert memory.get(k & ((1 << 64) - 1), e, k >> 64) == held
    assert ring.count == sum(len(seg) for seg in model)


def test_reads_stay_correct_while_read_pool_threads_fill_and_rotate_the_ring():
    """Four threads put read-ahead runs (rotating the ring many times over) while this thread reads
    through MemoryEntries: every answer is the entry's own bytes or a miss, never another entry's."""
    import threading

    ring = ReadCacheRing(256 * 1024, segments=4)
    memory = MemoryEntries(1)
    ring.on_change = lambda halves: memory.set_read_halves(0, halves)
    memory.set_read_halves(0, ring.halves)

    def data_of(ledger: int, entry: int) -> bytes:
        return (b"%d:%d;" % (ledger, entry)) * (20 + entry % 50)

    stop = threading.Event()

    def fill(ledger: int) -> None:
        first = 0
        while not stop.is_set():
            ring.put_run(ledger, [(e, 0, data_of(ledger, e)) for e in range(first, first + 50)])
            first = (first + 50) % 5000

    threads = [threading.Thread(target=fill, args=(ledger,)) for ledger in range(4)]
    for t in threads:
        t.start()
    hits = 0
    try:
        for i in range(100000):
            ledger, entry = i % 4, (i * 7) % 5000
            data = memory.get(ledger, entry)
            if data is not None:
                assert data == data_of(ledger, entry)
                hits += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert hits > 0
