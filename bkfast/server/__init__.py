"""Builds and runs a bookie process from a configuration: one lifecycle for all of its parts.

`BookieService` (service.py) wires the metadata session (metadata.py: cookies, registration), the
Bookie (journal, ledger storage, GC), the Twisted listener of `bkfast.net.server`, the admin HTTP server
and its metrics, and the process's signal handling, and starts and stops them in order. `bkfast bookie`
(bkfast.cli.bookie) only parses flags and calls it. Must never: parse command-line flags or print help.
"""

from .metadata import MetadataSession
from .service import BookieService, log_slow_gc

__all__ = ["BookieService", "MetadataSession", "log_slow_gc"]
