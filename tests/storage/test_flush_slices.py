"""A write-cache half flushed in framed slices (bkfast.dbstorage._flushslices): the same bytes in the
entry log and the same location records as the per-ledger path, slices within their limits and never
mixing scope 0 with scoped ledgers, and the entry logger's framed append (EntryLogger.add_framed)."""

from __future__ import annotations

import random
import struct

import pytest

from bkfast._writecache import WriteCacheHalf
from bkfast.dbstorage._flushslices import FlushSlices
from bkfast.storage.entrylogger import EntryLogger, EntryLoggerSettings
from tests.storage.test_dbstorage_many_ledgers import _conf

SCOPED = (7 << 64) | 3                      # a 128-bit ledger: scope 7, ledger 3
LOC_KEY, LONG = struct.Struct(">qq"), struct.Struct(">q")


def _half(seed: int) -> tuple[WriteCacheHalf, dict]:
    """A half with ledgers of one entry, long ledgers, a scoped ledger, sizes from 16 bytes to 200 KiB."""
    rng = random.Random(seed)
    half, model = WriteCacheHalf(), {}
    ledgers = [1, 2, 5, 900, 10**9, 2**62, SCOPED, (9 << 64) | 1]
    for _ in range(3000):
        key = rng.choice(ledgers)
        entry_id = rng.randrange(0, 5000)
        size = rng.choice([16, 40, 1024, 1024, 4000, 200_000]) if rng.random() < 0.01 else rng.choice([16, 100, 1024])
        # as stored: a scope-0 entry starts with its ids, a scoped one with the scoped layout's flag byte
        head = LOC_KEY.pack(key, entry_id) if key < 1 << 64 else b"\x80"
        data = head + rng.randbytes(size - len(head))
        half.put(key, entry_id, data)
        model[(key, entry_id)] = data
    return half, model


def _sorted_entries(model: dict) -> list[tuple[int, int, int, bytes]]:
    rows = [((key >> 64), key & ((1 << 64) - 1), entry_id, data) for (key, entry_id), data in model.items()]
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


@pytest.mark.parametrize("seed", range(3))
def test_slices_frame_every_entry_in_flush_order_within_their_limits(seed):
    half, model = _half(seed)
    max_entries, max_bytes = 100, 64 * 1024
    pieces = list(FlushSlices(half, max_entries, max_bytes))
    expected = _sorted_entries(model)
    assert b"".join(p.framed for p in pieces) == b"".join(len(d).to_bytes(4, "big") + d for *_, d in expected)
    assert sum(p.count for p in pieces) == len(model) == half.count
    got = [(scope, ledger, entry_id, bytes(view)) for p in pieces for scope, ledger, ids, views in p.runs()
           for entry_id, view in zip(ids, views, strict=True)]
    assert got == expected, "runs() gives every entry back, in flush order"
    for p in pieces:
        assert 1 <= p.count <= max_entries
        assert p.nbytes <= max_bytes or p.count == 1, "only a single entry may pass the byte limit"
        assert len(p.framed) == p.nbytes + 4 * p.count
        assert p.min_length == min(len(bytes(v)) for *_, views in p.runs() for v in views)
        scopes = {scope for scope, *_ in p.ledgers}
        assert scopes == ({0} if not p.scoped else scopes - {0}), "scope 0 and scoped never share a slice"
        assert [(s, lid, n) for s, lid, n, _ in p.ledgers] == \
            [(s, lid, len(ids)) for s, lid, ids, _ in p.runs()]
        assert sum(nbytes for *_, nbytes in p.ledgers) == len(p.framed)


def test_put_locations_writes_the_index_records_of_the_per_entry_path():
    half, model = _half(5)
    log_id, offset = 0x1234, 1024
    for piece in FlushSlices(half, 1000, 1 << 20):
        if piece.scoped:
            with pytest.raises(ValueError):
                piece.put_locations(lambda k, v: None, log_id, offset)
            continue
        records: list = []
        piece.put_locations(lambda k, v, out=records: out.append((k, v)), log_id, offset)
        expected, at = [], offset
        for _, ledger_id, ids, views in piece.runs():
            for entry_id, view in zip(ids, views, strict=True):
                expected.append((LOC_KEY.pack(ledger_id, entry_id), LONG.pack((log_id << 32) | (at + 4))))
                at += 4 + len(view)
        assert records == expected
        offset += len(piece.framed)


def test_an_entry_logger_takes_framed_slices_as_it_takes_runs(tmp_path):
    """The same entries through add_framed and through add_runs: identical log bytes (ledgers maps
    included) and locations, the logs rolled at the same entries: a slice that does not fit the current log
    is refused (None) and add_runs splits it as it always did; so is one larger than a whole log."""
    half, model = _half(7)
    conf = _conf(tmp_path)
    conf.set("logSizeLimit", 256 * 1024)
    pieces = [p for p in FlushSlices(half, 64, 32 * 1024) if not p.scoped]

    def write(dirname, framed: bool):
        logger = EntryLogger([tmp_path / dirname], EntryLoggerSettings.from_conf(conf))
        locations, refused = [], 0
        for p in pieces:
            placed = logger.add_framed(p.framed, p.ledgers, p.max_length) if framed else None
            if placed is None:
                refused += framed
                locations += logger.add_runs([(lid, views) for _, lid, _, views in p.runs()])
                continue
            log_id, offset = placed
            for _, _, _, views in p.runs():
                for view in views:
                    locations.append((log_id << 32) | (offset + 4))
                    offset += 4 + len(view)
        logger.flush()
        logger.close()
        files = sorted((tmp_path / dirname / "current").glob("*.log"))
        return locations, [f.read_bytes() for f in files], refused

    framed, by_runs = write("framed", True), write("runs", False)
    assert framed[0] == by_runs[0], "the same location for every entry"
    assert framed[1] == by_runs[1], "the same log files, byte for byte"
    assert len(framed[1]) > 1, "the slices rolled the log"
    assert 0 < framed[2] < len(pieces) / 4, "add_runs took only the slices at a roll"
    logger = EntryLogger([tmp_path / "big"], EntryLoggerSettings.from_conf(conf))
    try:
        assert logger.add_framed(b"\0" * (256 * 1024), [(0, 1, 1, 256 * 1024)], 256 * 1024 - 4) is None
    finally:
        logger.close()
