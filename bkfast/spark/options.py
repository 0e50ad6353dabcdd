"""The options of the "bkfast" Spark data source, checked on the driver at analysis time.

Every mistake a Spark user can make with the options (no or embedded `metadataServiceUri`, no
`stream`, a stream that does not exist, a malformed position, a bad number) raises
`BkfastSparkError` with one line saying what to do; Spark shows it when `load()` / `save()` /
`start()` is analysed, before any task runs. Option names are case-insensitive (Spark's rule);
any ledger client key (BookKeeper's ClientConfiguration names, e.g. `useV2WireProtocol`,
`addEntryTimeout`) is passed to the executors' clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bkfast.conf import ClientConfiguration
from bkfast.errors import BkfastSparkError, StreamError

__all__ = ["BkfastSparkError", "COLUMNS", "SourceOptions", "parse_options", "projected_columns"]

SCHEMA = ("key binary, value binary, stream string, segment long, entry long, slot int, position string, "
          "timestamp timestamp")

COLUMNS = ("key", "value", "stream", "segment", "entry", "slot", "position", "timestamp")
_COLUMN_TYPES = dict(zip(COLUMNS, ("binary", "binary", "string", "long", "long", "integer", "string", "timestamp"),
                         strict=True))


def projected_columns(schema) -> tuple[str, ...]:
    """The columns a read returns, in order: all of them when `schema` is the source's own, else the
    user's schema (`spark.read.format("bkfast").schema("value binary")`), which must name only the
    source's columns with their types. Python data sources get no column pruning from Spark; a narrower
    schema is how a job reads only what it needs (the columns it leaves out are never built)."""
    fields = [(f.name, f.dataType.typeName()) for f in schema.fields]
    names = [name for name, _ in fields]
    if len(set(names)) != len(names):
        raise BkfastSparkError(f"bkfast: the read schema names a column twice: {names}")
    for name, type_name in fields:
        if name not in _COLUMN_TYPES:
            raise BkfastSparkError(f"bkfast: the read schema has a column {name!r}, which the source does not have "
                                   f"(its columns: {', '.join(COLUMNS)})")
        if type_name != _COLUMN_TYPES[name]:
            raise BkfastSparkError(f"bkfast: column {name!r} is {_COLUMN_TYPES[name]}, not {type_name}")
    if not names:
        raise BkfastSparkError("bkfast: the read schema has no column")
    return tuple(names)


_CLIENT_KEYS = {name.lower(): name for name in ClientConfiguration._BY_NAME}


@dataclass(frozen=True)
class SourceOptions:
    metadata_uri: str
    stream: str
    password: bytes = b""
    starting: str = "earliest"
    ending: str = "latest"
    max_entries_per_partition: int = 2000
    max_records_per_trigger: int = 0
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    write_id: str = ""
    create_stream: bool = False
    truncate_on_commit: bool = False
    checkpoint: str = ""
    client_conf: dict = field(default_factory=dict)


def _int(opts, name: str, default: int, minimum: int = 0) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BkfastSparkError(f"bkfast option {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise BkfastSparkError(f"bkfast option {name}={value} must be >= {minimum}")
    return value


def _bool(opts, name: str) -> bool:
    raw = str(opts.get(name.lower(), "false")).strip().lower()
    if raw not in ("true", "false"):
        raise BkfastSparkError(f"bkfast option {name}={raw!r}: expected true or false")
    return raw == "true"


def _position(opts, name: str, default: str) -> str:
    from bkfast.streams.position import DLSN

    raw = str(opts.get(name.lower(), default)).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        return str(DLSN.parse(raw))
    except StreamError:
        raise BkfastSparkError(f"bkfast option {name}={raw!r}: expected earliest, latest or a position "
                               "segment:entry:slot") from None


def parse_options(options) -> SourceOptions:
    """SourceOptions from Spark's (case-insensitive) option map; BkfastSparkError on any mistake."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    uri = opts.get("metadataserviceuri")
    if not uri:
        raise BkfastSparkError("bkfast: set option metadataServiceUri, e.g. "
                               ".option('metadataServiceUri', 'zk+hierarchical://zk1:2181/ledgers')")
    if not uri.lower().startswith(("zk", "etcd")):
        raise BkfastSparkError(f"bkfast: metadataServiceUri {uri!r} is not a ZooKeeper or etcd URI; Spark executors "
                               "are other processes and need a shared metadata store (zk+hierarchical://host:port/path "
                               "or etcd://host:port/scope)")
    stream = opts.get("stream")
    if not stream:
        raise BkfastSparkError("bkfast: set option stream (the name of the log stream to read or write)")
    try:
        from bkfast.meta.streams import check_stream_name

        check_stream_name(stream)
    except StreamError as e:
        raise BkfastSparkError(f"bkfast: {e}") from None
    client_conf = {_CLIENT_KEYS[k]: v for k, v in opts.items() if k in _CLIENT_KEYS and k != "metadataserviceuri"}
    try:
        ClientConfiguration(client_conf)
    except Exception as e:
        raise BkfastSparkError(f"bkfast: {e}") from None
    password = opts.get("password", "")
    ens, w, a = (_int(opts, "ensembleSize", 3, 1), _int(opts, "writeQuorumSize", 2, 1),
                 _int(opts, "ackQuorumSize", 2, 1))
    if not ens >= w >= a:
        raise BkfastSparkError(f"bkfast: need ensembleSize >= writeQuorumSize >= ackQuorumSize, got {ens}/{w}/{a}")
    return SourceOptions(
        metadata_uri=uri, stream=stream, password=password.encode() if isinstance(password, str) else password,
        starting=_position(opts, "startingPositions", "earliest"),
        ending=_position(opts, "endingPositions", "latest"),
        max_entries_per_partition=_int(opts, "maxEntriesPerPartition", 2000, 1),
        max_records_per_trigger=_int(opts, "maxRecordsPerTrigger", 0, 0),
        ensemble_size=ens, write_quorum=w, ack_quorum=a,
        write_id=str(opts.get("writeid", "")),
        create_stream=_bool(opts, "createStream"),
        truncate_on_commit=_bool(opts, "truncateOnCommit"),
        checkpoint=str(opts.get("checkpointlocation", "")),
        client_conf=client_conf)
