"""The one cluster fixture factory of the test suite: a real ZooKeeper (the session's `zookeeper_server`), a
fresh ledgers root in it, and N `bkfast bookie` processes with a module's configuration overrides, started
and stopped by pid (tests.client_cluster.Cluster does the work).

A module that needs a cluster for all its tests writes one line::

    cluster = cluster_fixture(bookies=5, httpServerEnabled="true")

and one whose cluster depends on other fixtures (a PKI, say) opens `running_cluster` in its own fixture.
Either way the bookies are stopped (SIGTERM, then SIGKILL) and the root deleted when the fixture ends, even
if a test killed or paused some of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.client_cluster import Cluster

__all__ = ["Cluster", "cluster_fixture", "running_cluster"]


@contextmanager
def running_cluster(zk_connect: str, data_dir: Path | None, bookies: int, store: str = "zk",
                    **bookie_conf: str) -> Iterator[Cluster]:
    """A started cluster of `bookies` bookies (0: only the initialized root) under `data_dir`; stopped on exit.
    `store` "etcd": `zk_connect` is etcd's host:port and the cluster lives in a fresh etcd scope."""
    cluster = Cluster(zk_connect, data_dir, bookies, store, **bookie_conf)
    try:
        yield cluster
    finally:
        cluster.stop()


def cluster_fixture(bookies: int, *, scope: str = "module", prepare: Callable[[Cluster], None] | None = None,
                    store: str = "zk", **bookie_conf: str):
    """A pytest fixture yielding a running cluster of `bookies` bookies with `bookie_conf` overrides, one per
    `scope` (its data under a temp dir named after the test module); `prepare(cluster)` runs once it is up.
    `store` "etcd": the metadata lives in the session's real etcd (`etcd_server`) instead of ZooKeeper."""

    @pytest.fixture(scope=scope)
    def cluster(tmp_path_factory, request):
        server = request.getfixturevalue("etcd_server").endpoint if store == "etcd" else \
            request.getfixturevalue("zookeeper_server")
        data_dir = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) if bookies else None
        with running_cluster(server, data_dir, bookies, store, **bookie_conf) as started:
            if prepare is not None:
                prepare(started)
            yield started

    return cluster
