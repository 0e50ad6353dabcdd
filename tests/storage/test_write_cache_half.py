"""The C write cache half (bkfast._writecache): every operation against a dict model, the room limit, the
flush's order (128-bit keys, long ledgers over several slices: bkfast.dbstorage._flushslices), and slices
that are copies, which outlive the half while its segments go back to the pool."""

from __future__ import annotations

import gc
import random
import threading

import pytest

from bkfast._writecache import (
    ENTRY_OVERHEAD,
    LEDGER_OVERHEAD,
    PUT_ENTRIES_DONE,
    PUT_ENTRIES_MALFORMED,
    PUT_ENTRIES_NO_ROOM,
    SEGMENT_BYTES,
    SegmentPool,
    WriteCacheHalf,
    put_entries,
)
from bkfast.dbstorage._flushslices import FlushSlices

SCOPED = (7 << 64) | 3                      # a 128-bit ledger: scope 7, ledger 3


def _runs(half: WriteCacheHalf, max_entries: int = 1 << 30) -> list[tuple[int, list[int], list[memoryview]]]:
    """(ledger key, entry ids, their bytes) per ledger of each flush slice, in flush order."""
    return [((scope << 64) | ledger, ids, views) for piece in FlushSlices(half, max_entries, 1 << 40)
            for scope, ledger, ids, views in piece.runs()]


def _flat(half: WriteCacheHalf) -> list[tuple[int, int, bytes]]:
    return [(key, entry_id, bytes(view)) for key, ids, views in _runs(half)
            for entry_id, view in zip(ids, views, strict=True)]


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_match_a_dict_model(seed):
    rng = random.Random(seed)
    half, model, deleted = WriteCacheHalf(), {}, set()
    keys = [0, 1, 2, 99, SCOPED, (1 << 64), (1 << 64) + 1, 2**63 + 5] + [10**9 + i for i in range(40)]
    size = 0
    for _ in range(20000):
        action = rng.random()
        key = rng.choice(keys)
        if action < 0.9:
            entry_id = rng.randrange(2000)
            data = rng.randbytes(rng.choice([0, 1, 17, 300, 1024]))
            new_ledger = not any(k == key for k, _ in model) and key not in deleted
            new_entry = (key, entry_id) not in model
            half.put(key, entry_id, data)
            size += len(data) + (ENTRY_OVERHEAD if new_entry else 0) + (LEDGER_OVERHEAD if new_ledger else 0)
            model[(key, entry_id)] = data
        elif action < 0.99:
            entry_id = rng.randrange(2000)
            assert half.get(key, entry_id) == model.get((key, entry_id))
        else:
            half.delete_ledger(key)
            deleted.add(key)
            model = {k: v for k, v in model.items() if k[0] != key}
    assert half.count == len(model)
    assert half.size == size                    # arena bytes: overwrites and deletes do not shrink it
    for key in keys:
        ids = sorted(e for k, e in model if k == key)
        assert sorted(half.entry_ids(key)) == ids
        assert half.last_entry(key) == (ids[-1] if ids else -1)
    assert _flat(half) == sorted((k, e, d) for (k, e), d in model.items())


def test_try_put_refuses_past_the_limit_and_stores_nothing():
    half = WriteCacheHalf()
    first = 100 + ENTRY_OVERHEAD + LEDGER_OVERHEAD
    assert half.try_put(1, 0, bytes(100), first)
    assert not half.try_put(1, 1, bytes(100), first + 100 + ENTRY_OVERHEAD - 1)
    assert (half.count, half.size, half.get(1, 1), half.last_entry(1)) == (1, first, None, 0)
    assert half.try_put(1, 1, bytes(100), first + 100 + ENTRY_OVERHEAD)     # the same ledger: no ledger charge
    assert not half.try_put(2, 0, b"", half.size + ENTRY_OVERHEAD + LEDGER_OVERHEAD - 1)
    assert half.try_put(2, 0, b"", -1)                                       # no limit
    assert half.get(2, 0) == b""


def test_runs_come_by_scope_then_ledger_then_entry_and_a_long_ledger_in_consecutive_runs():
    half = WriteCacheHalf()
    slice_entries = 1024
    n = slice_entries * 2 + 5
    for entry_id in reversed(range(n)):
        half.put(5, entry_id, entry_id.to_bytes(4, "big"))
    for key in (SCOPED, (2 << 64) | 9, 2**64 - 1, 4):
        half.put(key, 0, b"x")
    runs = _runs(half, slice_entries)
    assert [k for k, _, _ in runs] == [4, 5, 5, 5, 2**64 - 1, (2 << 64) | 9, SCOPED]
    long = [r for r in runs if r[0] == 5]
    assert [len(ids) for _, ids, _ in long] == [slice_entries - 1, slice_entries, 6]
    ids = [i for _, chunk, _ in long for i in chunk]
    assert ids == list(range(n))
    assert all(bytes(v) == i.to_bytes(4, "big") for _, chunk, views in long for i, v in zip(chunk, views, strict=True))


def test_flush_slices_are_read_only_copies_that_outlive_the_half():
    half = WriteCacheHalf()
    payloads = {e: random.Random(e).randbytes(700) for e in range(3000)}    # several 1 MiB segments
    for e, data in payloads.items():
        half.put(11, e, data)
    views = [v for _, _, chunk in _runs(half) for v in chunk]
    del half
    gc.collect()
    assert [bytes(v) for v in views] == [payloads[e] for e in range(3000)]
    assert views[0].readonly
    with pytest.raises(TypeError):
        views[0][0] = 1


def test_an_entry_larger_than_a_quarter_segment_gets_its_own_segment_and_small_ones_keep_filling():
    half = WriteCacheHalf()
    big = random.Random(1).randbytes(SEGMENT_BYTES * 2 + 3)
    half.put(1, 0, b"a" * 10)
    half.put(1, 1, big)
    half.put(1, 2, memoryview(b"b" * 10))
    assert (half.get(1, 0), half.get(1, 1), half.get(1, 2)) == (b"a" * 10, big, b"b" * 10)
    assert "2 segments" in repr(half)


def test_puts_from_several_threads_lose_nothing():
    half = WriteCacheHalf()

    def writer(key):
        for entry_id in range(5000):
            half.put(key, entry_id, key.to_bytes(16, "big") + entry_id.to_bytes(8, "big"))

    threads = [threading.Thread(target=writer, args=(key,)) for key in (1, 2, 3, SCOPED)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert half.count == 20000
    assert all(half.get(k, e) == k.to_bytes(16, "big") + e.to_bytes(8, "big") for k in (1, 2, 3, SCOPED)
               for e in (0, 4999))


def test_negative_keys_and_oversized_keys_are_refused():
    half = WriteCacheHalf()
    with pytest.raises(OverflowError):
        half.put(-1, 0, b"x")
    with pytest.raises(OverflowError):
        half.put(1 << 128, 0, b"x")
    assert half.count == 0


def test_a_dropped_half_hands_its_segments_to_the_pool_and_the_next_half_takes_them():
    pool = SegmentPool(3)
    half = WriteCacheHalf(pool)
    for entry_id in range(4 * SEGMENT_BYTES // 1000):          # 4 full segments, and one big entry of its own
        half.put(1, entry_id, bytes(1000))
    half.put(2, 0, bytes(SEGMENT_BYTES))
    views = [v for _, _, chunk in _runs(half) for v in chunk]
    del half
    gc.collect()
    assert pool.kept == 3, "flush slices are copies: the half's segments go back at once (at most max_segments)"
    assert bytes(views[-1]) == bytes(SEGMENT_BYTES)
    again = WriteCacheHalf(pool)
    again.put(1, 0, b"reused")
    assert (pool.kept, again.get(1, 0)) == (2, b"reused")


def _stored(ledger: int, entry_id: int, payload: bytes = b"p" * 100, scope_id: int = 0) -> bytes:
    head = (b"\x80" + scope_id.to_bytes(8, "big")) if scope_id else b""
    return head + ledger.to_bytes(8, "big", signed=True) + entry_id.to_bytes(8, "big", signed=True) + payload


def test_put_entries_stores_a_batch_by_header_ids_and_stops_where_an_entry_is_malformed_or_has_no_room():
    half = WriteCacheHalf()
    batch = [_stored(1, 0), _stored(4, 7, scope_id=3), b"short", _stored(1, 1)]
    assert put_entries(half, batch, 0, -1) == (2, PUT_ENTRIES_MALFORMED)
    assert half.get(1, 0) == batch[0] and half.get((3 << 64) | 4, 7) == batch[1] and half.count == 2
    assert put_entries(half, batch, 3, -1) == (4, PUT_ENTRIES_DONE)
    for bad in (_stored(-1, 0, scope_id=3), _stored(1, -5), bytearray(_stored(1, 2))):
        assert put_entries(half, [bad], 0, -1) == (0, PUT_ENTRIES_MALFORMED)
    room = half.size + 2 * (116 + ENTRY_OVERHEAD)
    assert put_entries(half, [_stored(1, e) for e in range(2, 6)], 0, room) == (2, PUT_ENTRIES_NO_ROOM)
    assert half.last_entry(1) == 3 and half.count == 5
    assert put_entries(half, [], 0, -1) == (0, PUT_ENTRIES_DONE)
