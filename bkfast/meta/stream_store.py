"""Stream CRUD for both metadata drivers: where a stream's versioned record lives and how it is CAS-written.

ZooKeeper: one persistent znode per stream, ``<root>/streams/<name>``, whose znode version is the CAS
version. Embedded: one RocksDB key per stream, ``b"S" + name``, holding version (8 bytes, big endian) +
the record; written with fsync. The record itself is `bkfast.meta.streams` JSON. These mixins use the
drivers' own plumbing (the ZooKeeper driver's pool and bounded retries; the embedded store), and are
mixed into `ZkMetadataDriver` and `EmbeddedMetadataDriver`; nothing else lives here.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from rocksdict import Rdict, ReadOptions, WriteOptions

from bkfast.errors import BKMetadataVersionException, NoSuchStreamError, StreamExistsError

from .streams import StreamMetadata, VersionedStream, check_stream_name, parse_stream, serialize_stream

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from twisted.internet import defer

__all__ = ["ZkStreamStore", "EmbeddedStreamStore", "STREAMS"]

log = logging.getLogger(__name__)

STREAMS = "streams"
_PREFIX = b"S"
_VERSION = struct.Struct(">q")


class _RawStore(Protocol):
    """What EmbeddedStreamStore uses of the embedded driver's store."""
    db: Rdict
    sync: WriteOptions


def _checked(fn, name, *args):
    try:
        check_stream_name(name)
    except Exception as e:
        from twisted.internet import defer

        return defer.fail(e)
    return fn(name, *args)


class ZkStreamStore:
    """Mixin for ZkMetadataDriver (uses its _in_pool, _call, zk and root)."""

    # The host driver's: declared here, set and defined there.
    root: str
    _in_pool: Callable[..., defer.Deferred]
    _call: Callable[..., Any]
    _zk: Callable[[], KazooClient]

    def _stream_path(self, name: str) -> str:
        return f"{self.root}/{STREAMS}/{name}"

    def create_stream(self, metadata: StreamMetadata):
        return _checked(lambda n: self._in_pool(self._create_stream_blocking, metadata), metadata.name)

    def _create_stream_blocking(self, metadata: StreamMetadata) -> VersionedStream:
        path = self._stream_path(metadata.name)
        try:
            self._call(f"create stream {metadata.name}", self._zk().create_async, path, serialize_stream(metadata),
                       makepath=True)
        except NodeExistsError:
            raise StreamExistsError(f"stream {metadata.name!r} already exists") from None
        log.info("stream %s created at %s", metadata.name, path)
        return VersionedStream(metadata, 0)

    def read_stream(self, name: str):
        return _checked(lambda n: self._in_pool(self._read_stream_blocking, n), name)

    def _read_stream_blocking(self, name: str) -> VersionedStream:
        path = self._stream_path(name)
        try:
            data, stat = self._call(f"read stream {name}", self._zk().get_async, path)
        except NoNodeError:
            raise NoSuchStreamError(f"stream {name!r} does not exist") from None
        return VersionedStream(parse_stream(data, path), stat.version)

    def write_stream(self, metadata: StreamMetadata, expected_version: int):
        return _checked(lambda n: self._in_pool(self._write_stream_blocking, metadata, expected_version),
                        metadata.name)

    def _write_stream_blocking(self, metadata: StreamMetadata, expected_version: int) -> VersionedStream:
        path = self._stream_path(metadata.name)
        try:
            stat = self._call(f"write stream {metadata.name}", self._zk().set_async, path, serialize_stream(metadata),
                              version=expected_version)
        except NoNodeError:
            raise NoSuchStreamError(f"stream {metadata.name!r} does not exist") from None
        except BadVersionError:
            raise BKMetadataVersionException(
                f"stream {metadata.name!r} is no longer at version {expected_version}") from None
        return VersionedStream(metadata, stat.version)

    def delete_stream(self, name: str, expected_version: int = -1):
        return _checked(lambda n: self._in_pool(self._delete_stream_blocking, n, expected_version), name)

    def _delete_stream_blocking(self, name: str, expected_version: int) -> None:
        path = self._stream_path(name)
        try:
            self._call(f"delete stream {name}", self._zk().delete_async, path, version=expected_version)
        except NoNodeError:
            raise NoSuchStreamError(f"stream {name!r} does not exist") from None
        except BadVersionError:
            raise BKMetadataVersionException(f"stream {name!r} is no longer at version {expected_version}") from None
        except NotEmptyError:
            raise BKMetadataVersionException(f"stream {name!r} has children at {path}") from None
        log.info("stream %s deleted", name)

    def list_streams(self):
        return self._in_pool(self._list_streams_blocking)

    def _list_streams_blocking(self) -> list[str]:
        base = f"{self.root}/{STREAMS}"
        try:
            return sorted(self._call(f"list {base}", self._zk().get_children_async, base))
        except NoNodeError:
            return []


class EmbeddedStreamStore:
    """Mixin for EmbeddedMetadataDriver (uses its _db() store; runs in the reactor thread)."""

    # The host driver's: declared here, set and defined there.
    path: str
    _run_store: Callable[..., defer.Deferred]
    _db: Callable[[], _RawStore]

    def create_stream(self, metadata: StreamMetadata):
        return _checked(lambda n: self._run_store(self._create_stream, metadata), metadata.name)

    def _stream_get(self, name: str) -> VersionedStream | None:
        raw = self._db().db.get(_PREFIX + name.encode())
        if raw is None:
            return None
        return VersionedStream(parse_stream(raw[_VERSION.size:], f"{name} in {self.path}"),
                               _VERSION.unpack_from(raw)[0])

    def _stream_put(self, metadata: StreamMetadata, version: int) -> VersionedStream:
        store = self._db()
        store.db.put(_PREFIX + metadata.name.encode(), _VERSION.pack(version) + serialize_stream(metadata),
                     write_opt=store.sync)
        return VersionedStream(metadata, version)

    def _create_stream(self, metadata: StreamMetadata) -> VersionedStream:
        if self._stream_get(metadata.name) is not None:
            raise StreamExistsError(f"stream {metadata.name!r} already exists")
        log.info("stream %s created in %s", metadata.name, self.path)
        return self._stream_put(metadata, 0)

    def read_stream(self, name: str):
        return _checked(lambda n: self._run_store(self._read_stream, n), name)

    def _read_stream(self, name: str) -> VersionedStream:
        value = self._stream_get(name)
        if value is None:
            raise NoSuchStreamError(f"stream {name!r} does not exist")
        return value

    def write_stream(self, metadata: StreamMetadata, expected_version: int):
        return _checked(lambda n: self._run_store(self._write_stream, metadata, expected_version), metadata.name)

    def _write_stream(self, metadata: StreamMetadata, expected_version: int) -> VersionedStream:
        current = self._read_stream(metadata.name)
        if expected_version != -1 and current.version != expected_version:
            raise BKMetadataVersionException(
                f"stream {metadata.name!r} is at version {current.version}, not {expected_version}")
        return self._stream_put(metadata, current.version + 1)

    def delete_stream(self, name: str, expected_version: int = -1):
        return _checked(lambda n: self._run_store(self._delete_stream, n, expected_version), name)

    def _delete_stream(self, name: str, expected_version: int) -> None:
        current = self._read_stream(name)
        if expected_version != -1 and current.version != expected_version:
            raise BKMetadataVersionException(f"stream {name!r} is at version {current.version}, not {expected_version}")
        store = self._db()
        store.db.delete(_PREFIX + name.encode(), write_opt=store.sync)
        log.info("stream %s deleted from %s", name, self.path)

    def list_streams(self):
        return self._run_store(self._list_streams)

    def _list_streams(self) -> list[str]:
        ro = ReadOptions()
        ro.set_iterate_upper_bound(b"T")
        names = []
        for key in cast("Iterable[bytes]", self._db().db.keys(from_key=_PREFIX, read_opt=ro)):  # raw_mode: bytes
            if not key.startswith(_PREFIX):
                break
            names.append(key[1:].decode())
        return sorted(names)
