"""Attributes whose value lives elsewhere, each declared in one line of a class body.

`Summed("journals")`: the sum of the attribute of the same name over the items of `self.journals` (a
bookie's counters over its journals, a stream's records over its segments). It cannot be written: a write
raises AttributeError, as a property without a setter does.
"""

from __future__ import annotations

from typing import Any, overload

__all__ = ["Summed"]


class Summed:
    """The sum of the attribute of this one's own name over the items of `self.<over>`."""

    def __init__(self, over: str):
        self.over = over
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Summed: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> int: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Summed | int:
        if obj is None:
            return self
        return sum(getattr(item, self.name) for item in getattr(obj, self.over))

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(f"{type(obj).__name__}.{self.name} is the sum over its {self.over}: it cannot be set")
