"""bkfast: Apache BookKeeper-compatible log storage for Python shops.

Bookies that speak BookKeeper's v2 and v3 wire protocols, a ledger client, metadata on ZooKeeper or an
embedded store, and operations tools. Hot paths live in Cython extensions (`bkfast._codec`, ...).
"""

__version__ = "0.1.0"
