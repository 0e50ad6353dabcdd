"""What the full-disk tests share: one 64 KiB entry per ledger added and read over v2 by a raw client
(or entries of any id and size: add_at / read_at), and the entries a journal directory holds."""

from __future__ import annotations

import collections

from bkfast._journal import RecordKind, parse_record
from bkfast.bookie import journal_files
from bkfast.codec import FLAG_DO_FENCING, DigestType, decode_response, encode_add_request, encode_read_request
from bkfast.errors import V2Rc
from tests.server_support import Client

ENTRY_SIZE = 64 * 1024


def payload(lid: int) -> bytes:
    return bytes([lid % 251]) * ENTRY_SIZE


def add_entry(key: bytes, client: Client, lid: int) -> int:
    """Add entry 0 of ledger `lid`; the v2 rc."""
    client.send_raw(encode_add_request(key, lid, 0, -1, ENTRY_SIZE, payload(lid), DigestType.CRC32C))
    return decode_response(client.recv_frame()[4:]).rc


def read_entry(client: Client, lid: int):
    client.send_raw(encode_read_request(lid, 0))
    return decode_response(client.recv_frame()[4:])


def payload_at(lid: int, eid: int, size: int) -> bytes:
    return bytes([(lid * 31 + eid) % 251]) * size


def add_at(key: bytes, client: Client, lid: int, eid: int, size: int, flags: int = 0) -> int:
    """Add entry `eid` of ledger `lid` (payload_at, LAC eid - 1 piggy-backed); the v2 rc."""
    client.send_raw(encode_add_request(key, lid, eid, eid - 1, size, payload_at(lid, eid, size),
                                       DigestType.CRC32C, flags=flags))
    return decode_response(client.recv_frame()[4:]).rc


def read_at(client: Client, lid: int, eid: int, fence_key: bytes | None = None):
    """Read entry `eid` of ledger `lid` (-1: the last one); with `fence_key`, a fencing read."""
    if fence_key is None:
        client.send_raw(encode_read_request(lid, eid))
    else:
        client.send_raw(encode_read_request(lid, eid, FLAG_DO_FENCING, fence_key))
    return decode_response(client.recv_frame()[4:])


def assert_readable(bookie, lids) -> None:
    with Client(bookie.host, bookie.port) as client:
        for lid in lids:
            r = read_entry(client, lid)
            assert r.rc == V2Rc.EOK, (lid, r.rc)
            assert bytes(r.data)[-ENTRY_SIZE:] == payload(lid)


def journal_entry_counts(journal_dir) -> collections.Counter:
    """(ledger, entry) -> how many times the journals of `journal_dir` hold it."""
    counts: collections.Counter = collections.Counter()
    for journal_id in journal_files.list_journal_ids(journal_dir):
        for _, record in journal_files.scan_journal(journal_dir, journal_id):
            r = parse_record(record)
            if r.kind == RecordKind.ENTRY:
                counts[(r.ledger_id, r.entry_id)] += 1
    return counts
