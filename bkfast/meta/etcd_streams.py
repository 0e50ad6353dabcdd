"""Stream CRUD on etcd: one key per stream, ``<scope>/streams/<name>``, holding the `bkfast.meta.streams` JSON
record; its version for CAS is etcd's put count of the key minus one (0 after the create, as a znode's).

A mixin of `EtcdMetadataDriver` (uses its pool and its EtcdKV); nothing else lives here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bkfast.errors import BKMetadataVersionException, NoSuchStreamError, StreamExistsError

from .etcd_kv import EtcdKV, cmp_absent, cmp_present, cmp_put_count, op_delete, op_get, op_put
from .etcd_layout import EtcdKeys
from .streams import StreamMetadata, VersionedStream, check_stream_name, parse_stream, serialize_stream

if TYPE_CHECKING:
    from twisted.internet import defer

__all__ = ["EtcdStreamStore"]

log = logging.getLogger(__name__)


def _checked(run: Callable, name: str):
    try:
        check_stream_name(name)
    except Exception as e:
        from twisted.internet import defer

        return defer.fail(e)
    return run()


def _at_version(key: bytes, version: int) -> dict:
    """Our version is the znode-like one: etcd's put count minus one."""
    return cmp_put_count(key, version + 1)


class EtcdStreamStore:
    """Mixin for EtcdMetadataDriver."""

    # The host driver's: declared here, set and defined there.
    keys: EtcdKeys
    _in_pool: Callable[..., defer.Deferred]
    _kv: Callable[[], EtcdKV]

    def create_stream(self, metadata: StreamMetadata):
        return _checked(lambda: self._in_pool(self._create_stream_blocking, metadata), metadata.name)

    def _create_stream_blocking(self, metadata: StreamMetadata) -> VersionedStream:
        key = self.keys.stream(metadata.name)
        result = self._kv().txn([cmp_absent(key)], [op_put(key, serialize_stream(metadata))],
                                what=f"create stream {metadata.name}")
        if not result.succeeded:
            raise StreamExistsError(f"stream {metadata.name!r} already exists")
        log.info("stream %s created at %s", metadata.name, key.decode())
        return VersionedStream(metadata, 0)

    def read_stream(self, name: str):
        return _checked(lambda: self._in_pool(self._read_stream_blocking, name), name)

    def _read_stream_blocking(self, name: str) -> VersionedStream:
        kv = self._kv().get(self.keys.stream(name))
        if kv is None:
            raise NoSuchStreamError(f"stream {name!r} does not exist")
        return VersionedStream(parse_stream(kv.value, kv.key.decode()), kv.version - 1)

    def write_stream(self, metadata: StreamMetadata, expected_version: int):
        return _checked(lambda: self._in_pool(self._write_stream_blocking, metadata, expected_version),
                        metadata.name)

    def _write_stream_blocking(self, metadata: StreamMetadata, expected_version: int) -> VersionedStream:
        key = self.keys.stream(metadata.name)
        result = self._kv().txn([_at_version(key, expected_version)], [op_put(key, serialize_stream(metadata))],
                                [op_get(key)], what=f"write stream {metadata.name}")
        if not result.succeeded:
            self._refuse(metadata.name, result.ranges()[0], expected_version)
        return VersionedStream(metadata, expected_version + 1)

    @staticmethod
    def _refuse(name: str, found: list, expected_version: int):
        if not found:
            raise NoSuchStreamError(f"stream {name!r} does not exist")
        raise BKMetadataVersionException(f"stream {name!r} is no longer at version {expected_version}")

    def delete_stream(self, name: str, expected_version: int = -1):
        return _checked(lambda: self._in_pool(self._delete_stream_blocking, name, expected_version), name)

    def _delete_stream_blocking(self, name: str, expected_version: int) -> None:
        key = self.keys.stream(name)
        compare = _at_version(key, expected_version) if expected_version >= 0 else cmp_present(key)
        result = self._kv().txn([compare], [op_delete(key)], [op_get(key)], what=f"delete stream {name}")
        if not result.succeeded:
            self._refuse(name, result.ranges()[0], expected_version)
        log.info("stream %s deleted", name)

    def list_streams(self):
        return self._in_pool(self._list_streams_blocking)

    def _list_streams_blocking(self) -> list[str]:
        start, end = EtcdKeys.children(self.keys.streams_dir)
        kvs, _ = self._kv().range(start, end, keys_only=True)
        return sorted(kv.key[len(start):].decode() for kv in kvs)
