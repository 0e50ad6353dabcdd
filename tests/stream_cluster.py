"""The fixtures the stream and Spark tests share: a real 3-bookie cluster (on the session's ZooKeeper)
and a stream namespace over it, one of each per test module that imports them."""

from __future__ import annotations

import pytest

from bkfast.streams import Namespace
from tests.client_cluster import Cluster


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory, request):
    c = Cluster(zookeeper_server, tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]), bookies=3)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def ns(cluster):
    with Namespace(cluster.metadata_uri, timeout=60) as namespace:
        yield namespace
