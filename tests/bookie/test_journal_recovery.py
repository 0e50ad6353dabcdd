"""Reading journals back: torn tails, corruption, old formats, replay, meta records, lastMark, Java's journal.

Expected values come from the spec-only helpers of test_journal.py (`spec_*`), from hand-built bytes,
or from the manifest of a journal written by a real Java bookie (tests/vectors/java_bookie_dirs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import struct
import tarfile
from pathlib import Path

import pytest

from bkfast.bookie import journal as jm
from bkfast.errors import InvalidLedgerIdError, JournalCorruptionError
from tests import VECTORS_DIR
from tests.bookie.test_journal import Sink, make_conf, spec_batch, spec_header, spec_read

VECTORS = VECTORS_DIR / "java_bookie_dirs"
JAVA_JOURNAL = "db_clean/journal/current/1a1fb75b41b.txn"
KEY = bytes(range(20))


def write_with_journal(journal_dir: Path, records: list[bytes], **overrides) -> int:
    """Write `records` through a Journal (a few batches); return the journal id."""
    sink = Sink()
    j = jm.Journal(journal_dir, make_conf(**overrides), sink, sink.error)
    j.start()
    for i, r in enumerate(records):
        j.log_record(r, i)
        if i % 7 == 6:
            sink.wait_for(i + 1)
    j.stop()
    assert sink.tokens == list(range(len(records)))
    return j.current_journal_id


def put_file(journal_dir: Path, journal_id: int, data: bytes) -> Path:
    path = journal_dir / "current" / f"{journal_id:x}.txn"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def scan(journal_dir: Path, journal_id: int, **kw) -> list[bytes]:
    return [r for _, r in jm.scan_journal(journal_dir, journal_id, **kw)]


def some_records(n: int, seed: int = 7) -> list[bytes]:
    rnd = random.Random(seed)
    return [struct.pack(">qq", 3, i) + rnd.randbytes(rnd.randint(1, 3000)) for i in range(n)]


# --- torn and zero tails ----------------------------------------------------------------------------


def test_a_torn_tail_at_any_offset_yields_a_prefix_never_garbage(tmp_path):
    records = some_records(40)
    journal_id = write_with_journal(tmp_path / "j", records)
    data = (tmp_path / "j" / "current" / f"{journal_id:x}.txn").read_bytes()
    parsed = spec_read(data)
    assert [r for _, r in parsed.records] == records
    rnd = random.Random(1234)
    offsets = set(rnd.sample(range(parsed.end + 600), 200))
    for off, r in parsed.records[::5]:                  # around length fields and record ends too
        offsets.update(range(off - 2, off + 6))
        offsets.update(range(off + 4 + len(r) - 2, off + 4 + len(r) + 3))
    torn = tmp_path / "torn"
    for cut in sorted(offsets):
        put_file(torn, journal_id, data[:cut])
        expected = [r for o, r in parsed.records if o + 4 + len(r) <= cut]
        assert scan(torn, journal_id) == expected, f"cut at {cut}"
        seen = []
        jm.replay(torn, jm.LogMark(journal_id, 0), seen.append)
        assert seen == expected


def test_the_preallocated_zero_tail_ends_the_log(tmp_path):
    records = some_records(5)
    journal_id = write_with_journal(tmp_path / "j", records)
    path = tmp_path / "j" / "current" / f"{journal_id:x}.txn"
    data = path.read_bytes()
    assert len(data) == 1024 * 1024 and spec_read(data).why == "zero"
    out = list(jm.scan_journal(tmp_path / "j", journal_id))
    assert [r for _, r in out] == records
    assert out[-1][0] == spec_read(data).records[-1][0] + 4 + len(records[-1])   # offsets just past each


# --- corruption -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_length", [-5, jm.PADDING_MASK + 1, 0x7FFFFFF0, 6 * 1024 * 1024])
def test_a_bad_length_in_the_middle_is_corruption_naming_file_and_offset(tmp_path, bad_length, caplog):
    records = some_records(20)
    journal_id = write_with_journal(tmp_path / "j", records)
    path = tmp_path / "j" / "current" / f"{journal_id:x}.txn"
    data = bytearray(path.read_bytes())
    offset = spec_read(bytes(data)).records[7][0]
    data[offset:offset + 4] = struct.pack(">i", bad_length)
    path.write_bytes(data)
    with pytest.raises(JournalCorruptionError) as info:
        scan(tmp_path / "j", journal_id)
    assert info.value.path == str(path) and info.value.offset == offset
    assert str(path) in str(info.value) and f"offset {offset}" in str(info.value)
    with caplog.at_level(logging.WARNING):
        assert scan(tmp_path / "j", journal_id, skip_invalid=True) == records[:7]
    assert "skipInvalidJournalRecord" in caplog.text


def test_max_record_size_bounds_a_record(tmp_path):
    records = [bytes(16) + b"x" * 300, bytes(16) + b"y" * 50]
    journal_id = write_with_journal(tmp_path / "j", records)
    with pytest.raises(JournalCorruptionError):
        scan(tmp_path / "j", journal_id, max_record_size=100)
    assert scan(tmp_path / "j", journal_id, max_record_size=316) == records


def test_a_bad_length_followed_only_by_zeros_is_a_clean_end(tmp_path):
    records = some_records(6)
    journal_id = write_with_journal(tmp_path / "j", records)
    path = tmp_path / "j" / "current" / f"{journal_id:x}.txn"
    data = bytearray(path.read_bytes())
    end = spec_read(bytes(data)).end
    data[end:end + 4] = struct.pack(">i", -7)
    path.write_bytes(data)
    assert scan(tmp_path / "j", journal_id) == records


def test_skip_invalid_replay_skips_the_rest_of_a_file_and_goes_on(tmp_path):
    jd = tmp_path / "j"
    first, second = some_records(10, seed=1), some_records(10, seed=2)
    put_file(jd, 0x100, spec_header() + spec_batch(512, first))
    put_file(jd, 0x101, spec_header() + spec_batch(512, second))
    data = bytearray((jd / "current" / "100.txn").read_bytes())
    offset = spec_read(bytes(data)).records[3][0]
    data[offset:offset + 4] = struct.pack(">i", -1000)
    (jd / "current" / "100.txn").write_bytes(data)
    with pytest.raises(JournalCorruptionError):
        jm.replay(jd, (0x100, 0), lambda r: None)
    seen = []
    reached = jm.replay(jd, (0x100, 0), seen.append, skip_invalid=True)
    assert seen == first[:3] + second and reached.journal_id == 0x101


# --- formats ----------------------------------------------------------------------------------------


def test_older_formats_v1_to_v4_and_v5_padding_with_zero_length(tmp_path):
    jd = tmp_path / "j"
    records = some_records(4)
    put_file(jd, 1, spec_batch(0, records, pad=False))                        # V1: no header at all
    for version in (2, 3, 4):
        put_file(jd, version, spec_header(version) + spec_batch(8, records, pad=False))
    v5 = spec_header(5) + spec_batch(512, records[:1]) + struct.pack(">ii", jm.PADDING_MASK, 0)
    v5 += spec_batch(len(v5), records[1:])
    put_file(jd, 5, v5)
    for journal_id in (1, 2, 3, 4, 5):
        assert scan(jd, journal_id) == records, journal_id
    # A padding record is a V5 feature: in a V4 file it is an invalid length with data after it.
    put_file(jd, 6, spec_header(4) + struct.pack(">ii", jm.PADDING_MASK, 4) + bytes(4)
             + spec_batch(24, records, pad=False))
    with pytest.raises(JournalCorruptionError):
        scan(jd, 6)


def test_unknown_format_version_is_an_error_or_skipped(tmp_path, caplog):
    put_file(tmp_path / "j", 7, b"BKLG" + struct.pack(">i", 9) + bytes(600))
    with pytest.raises(JournalCorruptionError, match="version 9"):
        scan(tmp_path / "j", 7)
    assert scan(tmp_path / "j", 7, skip_invalid=True) == []


def test_scan_from_an_offset_and_replay_from_a_mark(tmp_path):
    jd = tmp_path / "j"
    a, b = some_records(9, seed=3), some_records(5, seed=4)
    journal_a = write_with_journal(jd, a)
    journal_b = write_with_journal(jd, b)
    assert journal_b == journal_a + 1 and jm.list_journal_ids(jd) == [journal_a, journal_b]
    offsets = [off for off, _ in jm.scan_journal(jd, journal_a)]
    assert scan(jd, journal_a, start_offset=offsets[2]) == a[3:]
    seen = []
    reached = jm.replay(jd, jm.LogMark(journal_a, offsets[2]), seen.append)
    assert seen == a[3:] + b
    assert reached == (journal_b, [off for off, _ in jm.scan_journal(jd, journal_b)][-1])
    with pytest.raises(JournalCorruptionError, match="missing"):
        jm.replay(jd, (journal_a - 5, 0), seen.append)
    assert jm.replay(tmp_path / "empty", (0, 0), seen.append) == (0, 0)


# --- meta records -----------------------------------------------------------------------------------


def test_meta_record_layouts_classic_and_scoped():
    lac = struct.pack(">qq", 5, 41) + b"digest"
    assert jm.master_key_record(5, KEY) == struct.pack(">qqi", 5, -4096, 20) + KEY
    assert jm.fence_record(5) == struct.pack(">qq", 5, -8192)
    assert jm.explicit_lac_record(5, lac) == struct.pack(">qqi", 5, -32768, len(lac)) + lac
    scope = 2**64 - 1
    prefix = b"\x80" + struct.pack(">Qq", scope, 5)
    assert jm.master_key_record(5, KEY, scope) == prefix + struct.pack(">qi", -4096, 20) + KEY
    assert jm.fence_record(5, scope) == prefix + struct.pack(">q", -8192)
    assert jm.explicit_lac_record(5, lac, scope) == prefix + struct.pack(">qi", -32768, len(lac)) + lac
    with pytest.raises(InvalidLedgerIdError):
        jm.fence_record(-1)
    with pytest.raises(InvalidLedgerIdError):
        jm.fence_record(1, 2**64)


@pytest.mark.parametrize("scope", [0, 7, 2**64 - 1])
def test_parse_record_kinds(scope):
    lac = b"L" * 20
    R = jm.RecordKind
    assert jm.parse_record(jm.master_key_record(9, KEY, scope)) == (R.MASTER_KEY, scope, 9, -4096, KEY)
    assert jm.parse_record(jm.fence_record(9, scope)) == (R.FENCE, scope, 9, -8192, b"")
    assert jm.parse_record(jm.explicit_lac_record(9, lac, scope)) == (R.EXPLICIT_LAC, scope, 9, -32768, lac)
    if scope:
        entry = bytes([0x80 | 3]) + struct.pack(">Qqqqq", scope, 9, 4, 3, 100) + b"digest+payload"
        unknown = b"\x80" + struct.pack(">Qqq", scope, 9, -1234) + b"??"
    else:
        entry = struct.pack(">qqqq", 9, 4, 3, 100) + b"digest+payload"
        unknown = struct.pack(">qq", 9, -1234) + b"??"
    assert jm.parse_record(entry) == (R.ENTRY, scope, 9, 4, entry)
    assert jm.parse_record(unknown) == (R.UNKNOWN_META, scope, 9, -1234, b"??")


def test_parse_record_rejects_short_or_inconsistent_records():
    assert jm.parse_record(b"\x80" + struct.pack(">Qqq", 1, 2, 3)).kind == jm.RecordKind.UNKNOWN_META
    for bad in (b"short", b"\x83" + bytes(20), jm.master_key_record(1, KEY)[:-1],
                jm.explicit_lac_record(1, b"abc", 5)[:-4]):
        with pytest.raises(JournalCorruptionError):
            jm.parse_record(bad)


def test_meta_records_round_trip_through_the_journal(tmp_path):
    records = [jm.master_key_record(1, KEY), jm.master_key_record(1, KEY, 99), jm.fence_record(1, 99),
               struct.pack(">qqqq", 1, 0, -1, 3) + b"abc", jm.explicit_lac_record(1, b"lac-buffer", 99),
               jm.fence_record(1)]
    write_with_journal(tmp_path / "j", records)
    parsed = []
    jm.replay(tmp_path / "j", (0, 0), lambda r: parsed.append(jm.parse_record(r)))
    assert [(p.kind, p.scope_id) for p in parsed] == [
        (jm.RecordKind.MASTER_KEY, 0), (jm.RecordKind.MASTER_KEY, 99), (jm.RecordKind.FENCE, 99),
        (jm.RecordKind.ENTRY, 0), (jm.RecordKind.EXPLICIT_LAC, 99), (jm.RecordKind.FENCE, 0)]
    assert parsed[4].body == b"lac-buffer"


# --- lastMark ---------------------------------------------------------------------------------------


def test_last_mark_write_read_greatest_and_damaged_copies(tmp_path):
    dirs = [tmp_path / "l1", tmp_path / "l2"]
    assert jm.read_last_mark(dirs) == (0, 0)
    jm.write_last_mark(dirs, (0x1A2B, 4096))
    for d in dirs:
        assert (d / "current" / "lastMark").read_bytes() == struct.pack(">qq", 0x1A2B, 4096)
        assert sorted(p.name for p in (d / "current").iterdir()) == ["lastMark"]
    assert jm.read_last_mark(dirs) == (0x1A2B, 4096)
    (dirs[1] / "current" / "lastMark").write_bytes(struct.pack(">qq", 0x1A2B, 8192))
    assert jm.read_last_mark(dirs) == (0x1A2B, 8192)                # same id: the greater offset
    (dirs[0] / "current" / "lastMark").write_bytes(struct.pack(">qq", 0x1A2C, 0))
    assert jm.read_last_mark(dirs) == (0x1A2C, 0)                   # a greater id wins over any offset
    (dirs[0] / "current" / "lastMark").write_bytes(b"short")
    assert jm.read_last_mark(dirs) == (0x1A2B, 8192)                # a damaged copy is skipped
    jm.write_last_mark(dirs, (5, 6), journal_index=1)
    assert jm.read_last_mark(dirs, journal_index=1) == (5, 6)
    assert (dirs[0] / "current" / "lastMark.1").exists()


# --- a journal written by a real Java bookie ------------------------------------------------------------


@pytest.fixture(scope="module")
def java_journal(tmp_path_factory):
    root = tmp_path_factory.mktemp("java")
    with tarfile.open(VECTORS / "db_clean.tar.gz") as tf:
        tf.extract(tf.getmember(JAVA_JOURNAL), root, filter="data")
    manifest = json.loads((VECTORS / "db_clean.manifest.json").read_text())
    return root / "db_clean" / "journal", manifest


def test_java_journal_entries_and_meta_records_match_the_manifest(java_journal):
    journal_dir, manifest = java_journal
    assert jm.list_journal_ids(journal_dir) == [0x1A1FB75B41B]
    stored = {(led["ledgerId"], e["entryId"]): e["storedSha256"]
              for led in manifest["ledgers"] for e in led["entries"]}
    entries, keys, fenced, lacs = {}, {}, set(), {}
    for record in scan(journal_dir, 0x1A1FB75B41B):
        r = jm.parse_record(record)
        assert r.scope_id == 0
        if r.kind == jm.RecordKind.ENTRY:
            entries[(r.ledger_id, r.entry_id)] = hashlib.sha256(record).hexdigest()
        elif r.kind == jm.RecordKind.MASTER_KEY:
            keys[r.ledger_id] = r.body.hex()
        elif r.kind == jm.RecordKind.FENCE:
            fenced.add(r.ledger_id)
        elif r.kind == jm.RecordKind.EXPLICIT_LAC:
            lacs[r.ledger_id] = struct.unpack_from(">qq", r.body)
    assert entries and set(entries) <= set(stored)
    assert all(entries[k] == stored[k] for k in entries)
    assert len(entries) == 2000                      # this journal happens to hold every entry
    assert keys == {led["ledgerId"]: led["masterKey"] for led in manifest["ledgers"]}
    assert fenced == {led["ledgerId"] for led in manifest["ledgers"] if led["fenced"]} != set()
    with_lac = [led for led in manifest["ledgers"] if led["explicitLac"] is not None]
    assert with_lac and all(lacs[led["ledgerId"]] == (led["ledgerId"], led["explicitLac"]) for led in with_lac)


def test_java_journal_agrees_with_the_spec_reader(java_journal):
    journal_dir, _ = java_journal
    data = (journal_dir / "current" / "1a1fb75b41b.txn").read_bytes()
    parsed = spec_read(data)
    assert parsed.version == 6 and parsed.why == "zero" and parsed.paddings
    assert all((off + 8 + n) % 512 == 0 for off, n in parsed.paddings)   # Java pads every flush
    assert [r for _, r in parsed.records] == scan(journal_dir, 0x1A1FB75B41B)
