# Type stub of the Cython extension bkfast/bookie/_admission.pyx: what Python code calls.
from collections.abc import Callable
from typing import Any

class AddAdmission:
    lacs: dict[tuple[int, int], int]
    indices: list[int]
    entries: list[bytes]
    high_priority: list[bool]
    ledgers: list[int]
    recovery: list[bool]
    recoveries: int
    def __init__(self, bookie: Any) -> None: ...
    def admit(self, index: int, entry: Any, master_key: bytes, recovery: bool, high_priority: bool) -> None: ...
    def admit_all(self, adds: list, failures: list,
                  unexpected: Callable[[int, Exception], BaseException]) -> None: ...
    def store(self, storage: Any, failures: list, n_adds: int,
              unexpected: Callable[[int, Exception], BaseException]) -> None: ...
    def journals(self, n_journals: int) -> list[int] | None: ...
    def store_one(self, storage: Any) -> tuple[int, bytes]: ...
