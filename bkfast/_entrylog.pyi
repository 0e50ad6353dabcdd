# Type stub of the Cython extension bkfast/_entrylog.pyx (+ _entrylog_scan.pxi): what Python code calls.
from typing import Any

LOGFILE_HEADER_SIZE: int
DIRECT_BLOCK: int
INVALID_LID: int
LEDGERS_MAP_ENTRY_ID: int
MIN_ENTRY_SIZE: int

class BufferedChannel:
    def __init__(self, fd: int, log_id: int, file_size: int, buffer_size: int = 65536, *args: Any,
                 **kwargs: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

def parse_run(data: Any, base: int, location_base: int, want_scope: int, want_ledger: int, *args: Any) -> Any: ...
