"""Durability helpers for the files of ledger and journal directories, shared by every storage layer.

Owns fsyncing a directory, so that a file created or renamed in it survives a crash. Must never decide
when something must be durable (its callers do).
"""

from __future__ import annotations

import os

__all__ = ["fsync_dir"]


def fsync_dir(path) -> None:
    """fsync the directory `path` (str or Path): makes the creation, rename or removal of its entries durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
