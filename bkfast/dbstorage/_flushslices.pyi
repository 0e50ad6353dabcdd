# Type stub of the Cython extension bkfast/dbstorage/_flushslices.pyx: what Python code calls.

from collections.abc import Callable, Iterator

from bkfast._writecache import WriteCacheHalf

class FlushSlice:
    framed: bytes
    count: int
    nbytes: int
    min_length: int
    max_length: int
    scoped: bool
    ledgers: list[tuple[int, int, int, int]]
    def runs(self) -> list[tuple[int, int, list[int], list[memoryview]]]: ...
    def put_locations(self, put: Callable[[bytes, bytes], object], log_id: int, offset: int) -> None: ...

class FlushSlices:
    max_entries: int
    max_bytes: int
    def __init__(self, half: WriteCacheHalf, max_entries: int, max_bytes: int) -> None: ...
    def __iter__(self) -> Iterator[FlushSlice]: ...
    def __next__(self) -> FlushSlice: ...
