# Type stub of the Cython extension bkfast/_journal.pyx (+ _journal_read.pxi): what Python code calls.
import enum
from typing import Any, NamedTuple

PADDING_MASK: int
METAENTRY_ID_LEDGER_KEY: int
METAENTRY_ID_FENCE_KEY: int
METAENTRY_ID_FORCE_LEDGER: int
METAENTRY_ID_LEDGER_EXPLICITLAC: int
SCOPED_META_FLAGS: int
SCAN_NEED_MORE: int
SCAN_END: int
SCAN_INVALID: int
DEFAULT_COPY_BELOW: int

class RecordKind(enum.Enum):
    ENTRY = "entry"
    MASTER_KEY = "master_key"
    FENCE = "fence"
    EXPLICIT_LAC = "explicit_lac"
    UNKNOWN_META = "unknown_meta"

class JournalRecord(NamedTuple):
    kind: RecordKind
    scope_id: int
    ledger_id: int
    entry_id: int
    body: Any

def parse_record(record: Any) -> JournalRecord: ...
def padding_record_size(position: int, align: int) -> int: ...
def set_thread_timer_slack(nanoseconds: int) -> None: ...
def scan_records(buf: Any, start: int = 0, padding_allowed: bool = True, max_record_size: int = ...) -> Any: ...
def find_nonzero(buf: Any, start: int = 0) -> int: ...

class FramedRecords:
    owner: bytes
    offset: int
    nbytes: int
    count: int
    def __init__(self, owner: bytes, offset: int, nbytes: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def records(self) -> list[bytes]: ...

class JournalWriter:
    def __init__(self, fd: int, position: int, alignment: int, prealloc_step: int, *args: Any,
                 **kwargs: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
