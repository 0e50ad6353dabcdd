"""bkfast: Apache BookKeeper-compatible log storage for Python shops.

Bookies that speak BookKeeper's v2 and v3 wire protocols, a ledger client, metadata on ZooKeeper or an
embedded store, and operations tools. Hot paths live in Cython extensions (`bkfast._codec`, ...).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # `from bkfast import BookKeeper` without importing Twisted/crochet for users of the codec alone.
    if name in ("BookKeeper", "AsyncBookKeeper"):
        from bkfast import client

        return getattr(client, name)
    raise AttributeError(f"module 'bkfast' has no attribute {name!r}")
