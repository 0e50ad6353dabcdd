"""bkfast.attributes: forwarded and summed attributes."""

from types import SimpleNamespace

import pytest

from bkfast.attributes import Summed, forwarded


class _Holder:
    total = Summed("parts")
    lac = forwarded("core.lac", writable=True)
    name = forwarded("core.name")

    def __init__(self, parts, core):
        self.parts = parts
        self.core = core


def test_summed_adds_the_same_named_attribute_of_every_item_and_refuses_a_write():
    h = _Holder([SimpleNamespace(total=2), SimpleNamespace(total=5)], None)
    assert h.total == 7
    h.parts.append(SimpleNamespace(total=1))
    assert h.total == 8
    assert _Holder([], None).total == 0
    with pytest.raises(AttributeError, match="total"):
        h.total = 3
    assert isinstance(_Holder.total, Summed)


def test_forwarded_reads_and_writes_the_other_objects_attribute():
    core = SimpleNamespace(lac=4, name="x")
    h = _Holder([], core)
    assert (h.lac, h.name) == (4, "x")
    h.lac = 9
    assert core.lac == 9
    h.core = SimpleNamespace(lac=1, name="y")
    assert (h.lac, h.name) == (1, "y")
    with pytest.raises(AttributeError):
        h.name = "z"
