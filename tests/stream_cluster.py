"""The fixtures the stream and Spark tests share: a real 3-bookie cluster (on the session's ZooKeeper)
and a stream namespace over it, one of each per test module that imports them."""

from __future__ import annotations

import pytest

from bkfast.streams import Namespace
from tests.cluster_factory import cluster_fixture

cluster = cluster_fixture(bookies=3)


@pytest.fixture(scope="module")
def ns(cluster):
    with Namespace(cluster.metadata_uri, timeout=60) as namespace:
        yield namespace
