"""Picks and builds the metadata driver for a metadata service URI (docs/architecture.md, "Metadata").

The one place that knows every `MetadataDriver` implementation: `bkfast.meta.driver` is the interface the
drivers import, so it must not import them back. Must never: start the driver (the caller does).
"""

from __future__ import annotations

from bkfast.errors import MetadataError

from .driver import MetadataDriver

__all__ = ["open_metadata_driver"]


def open_metadata_driver(uri: str, **options) -> MetadataDriver:
    """A driver for ``zk://``, ``zk+<layout>://``, ``etcd[+http|+https]://`` or ``embedded:///path``; call
    ``start()`` on it. Option `stats` (a StatsLogger) is for a ZooKeeper session's stats: the others have none."""
    scheme = uri.split(":", 1)[0].lower()
    if scheme == "embedded":
        from .embedded import EmbeddedMetadataDriver

        options.pop("stats", None)
        return EmbeddedMetadataDriver(uri, **options)
    if scheme in ("etcd", "etcd+http", "etcd+https"):
        from .etcd_driver import EtcdMetadataDriver

        options.pop("stats", None)
        options.pop("client", None)       # a ZooKeeper session: an etcd driver holds its own client
        return EtcdMetadataDriver(uri, **options)
    if scheme == "zk" or scheme.startswith("zk+"):
        from .zk_driver import ZkMetadataDriver

        return ZkMetadataDriver(uri, **options)
    raise MetadataError(f"unsupported metadata service URI {uri!r}: expected zk+hierarchical://host:port/ledgers, "
                        "zk://..., zk+flat://..., zk+longhierarchical://..., etcd://host:port/scope or embedded:///path")
