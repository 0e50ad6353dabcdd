"""The bkfast ledger client: `AsyncBookKeeper` (Twisted, Deferreds) and `BookKeeper` (blocking)."""

from .blocking import BlockingLedgerHandle, BookKeeper
from .bookkeeper import AsyncBookKeeper
from .entries import LedgerEntry
from .handle import LedgerHandle
from .write_handle import WriteHandle, WriteHandleAdv

__all__ = ["AsyncBookKeeper", "BookKeeper", "BlockingLedgerHandle", "LedgerEntry", "LedgerHandle", "WriteHandle",
           "WriteHandleAdv"]
