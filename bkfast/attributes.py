"""Attributes whose value lives elsewhere, each declared in one line of a class body.

`forwarded("_core.lac")`: the attribute `lac` of the object in `self._core` (read-only, or read/write
with `writable=True`), as a write handle keeps its LAC in its add tracker and the blocking handle shows
its async handle's state. `Summed("journals")`: the sum of the attribute of the same name over the items
of `self.journals` (a bookie's counters over its journals, a stream's records over its segments).

Neither can be written unless asked for (`writable=True`): a write raises AttributeError, as a property
without a setter does.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, overload

__all__ = ["Summed", "forwarded"]


def forwarded(path: str, *, writable: bool = False) -> property:
    """`self.<holder>.<name>` for `path` ``"<holder>.<name>"`` (such as ``"_core.lac"``), read-only unless
    `writable`. The read is one C call (attrgetter), as quick as a plain property's."""
    holder, name = path.split(".")
    if not writable:
        return property(attrgetter(path))

    def set_(self, value) -> None:
        setattr(getattr(self, holder), name, value)

    return property(attrgetter(path), set_)


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
