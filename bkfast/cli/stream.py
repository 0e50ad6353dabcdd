"""`bkfast stream`: list, create, describe, append, tail, truncate and delete named log streams.

Thin click commands over `bkfast.streams.Namespace` (blocking). The metadata service comes from
`--metadata-uri` or $BKFAST_METADATA_URI (a ``zk+...`` URI; an embedded store is only reachable from
the process that holds it). Errors a user can make (missing stream, bad position) print one line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys

import click

from bkfast.errors import BKError


@contextlib.contextmanager
def _namespace(metadata_uri: str):
    from bkfast.streams import Namespace

    try:
        ns = Namespace(metadata_uri, timeout=30)
    except BKError as e:
        raise click.ClickException(f"cannot connect to {metadata_uri}: {e}") from None
    try:
        yield ns
    except BKError as e:
        raise click.ClickException(str(e)) from None
    finally:
        with contextlib.suppress(Exception):
            ns.close()


def _uri_option(f):
    return click.option("--metadata-uri", "metadata_uri", envvar="BKFAST_METADATA_URI", required=True,
                        metavar="URI", help="Metadata service, e.g. zk+hierarchical://127.0.0.1:2181/ledgers "
                                            "(or $BKFAST_METADATA_URI).")(f)


@click.group()
def stream() -> None:
    """Named log streams (DistributedLog-style logs over ledgers)."""


@stream.command("list")
@_uri_option
def list_cmd(metadata_uri) -> None:
    """Print the stream names, one a line."""
    with _namespace(metadata_uri) as ns:
        for name in ns.list_streams():
            click.echo(name)


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--retention-ms", default=0, type=click.IntRange(0), help="Drop sealed segments older than this.")
@click.option("--retention-bytes", default=0, type=click.IntRange(0), help="Keep at most about this many bytes.")
def create(metadata_uri, name, retention_ms, retention_bytes) -> None:
    """Create an empty stream."""
    with _namespace(metadata_uri) as ns:
        ns.create_stream(name, retention_ms, retention_bytes)
        click.echo(f"created stream {name}")


def _ts(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the stored metadata as JSON.")
def describe(metadata_uri, name, as_json) -> None:
    """Settings and segments of a stream."""
    from bkfast.meta.streams import serialize_stream

    with _namespace(metadata_uri) as ns:
        md = ns.describe(name)
        if as_json:
            click.echo(serialize_stream(md).decode())
            return
        click.echo(f"stream {md.name}: {len(md.segments)} segments, {md.records} records in sealed segments, "
                   f"{md.bytes} bytes; writer epoch {md.writer_epoch}; retention "
                   f"{md.retention_ms or '-'} ms / {md.retention_bytes or '-'} bytes; "
                   f"{md.truncated_records} records truncated")
        for s in md.segments:
            last = s.last_entry if not s.is_open else "?"
            click.echo(f"  segment {s.seq:>5}  ledger {s.ledger:>8}  {s.state:<6}  entries 0..{last}  "
                       f"{s.records} records  {s.bytes} bytes  {_ts(s.first_ts)} .. {_ts(s.last_ts)}  {s.origin}")


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--key", default=None, help="Key of every record.")
def append(metadata_uri, name, key) -> None:
    """Append each line of standard input as one record (takes the stream's writer over)."""
    lines = [line.rstrip(b"\n") for line in sys.stdin.buffer]
    keys = [key.encode()] * len(lines) if key else None
    with _namespace(metadata_uri) as ns:
        # before the writer: taking the stream over already adds a segment and a ledger
        ns.check_records(lines, keys)
        w = ns.open_writer(name)
        try:
            last = w.write_many(lines, keys) if lines else None
        except BKError:
            with contextlib.suppress(BKError):
                w.close()
            raise
        w.close()
        click.echo(f"appended {len(lines)} records; last at {last}")


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--from", "start", default="earliest", show_default=True,
              help="earliest, latest, a position seg:entry:slot, or a timestamp in ms.")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Keep waiting for new records (Ctrl-C to stop), or stop at the current end.")
@click.option("--max", "max_records", default=0, type=click.IntRange(0), help="Stop after this many (0: no limit).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line (value as UTF-8 or repr).")
def tail(metadata_uri, name, start, follow, max_records, as_json) -> None:
    """Print records as they arrive: position, timestamp, key, value."""
    if start.isdigit():
        start = int(start)
    count = 0
    with _namespace(metadata_uri) as ns:
        reader = ns.open_reader(name, start)
        try:
            for rec in reader.tail(poll_ms=500, stop_at_end=not follow):
                value = rec.value.decode("utf-8", "backslashreplace")
                key = rec.key.decode("utf-8", "backslashreplace") if rec.key is not None else None
                if as_json:
                    click.echo(json.dumps({"position": str(rec.position), "timestamp": rec.timestamp, "key": key,
                                           "value": value}))
                else:
                    click.echo(f"{rec.position}\t{_ts(rec.timestamp)}\t{key if key is not None else '-'}\t{value}")
                count += 1
                if max_records and count >= max_records:
                    break
        except KeyboardInterrupt:
            pass


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--before", default=None, help="Delete whole segments before this position (seg:entry:slot).")
@click.option("--retention", is_flag=True, help="Also apply the stream's retention settings now.")
def truncate(metadata_uri, name, before, retention) -> None:
    """Delete the sealed segments (and their ledgers) before a position."""
    if before is None and not retention:
        raise click.UsageError("give --before POSITION and/or --retention")
    with _namespace(metadata_uri) as ns:
        cut = ns.truncate(name, before, retention)
        click.echo(f"deleted {len(cut)} segments: {[s.seq for s in cut]}")


@stream.command()
@_uri_option
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(metadata_uri, name, yes) -> None:
    """Delete a stream and its ledgers."""
    if not yes:
        click.confirm(f"delete stream {name} and all its records?", abort=True)
    with _namespace(metadata_uri) as ns:
        ns.delete_stream(name)
        click.echo(f"deleted stream {name}")
