"""bkfast.attributes: summed attributes."""

from types import SimpleNamespace

import pytest

from bkfast.attributes import Summed


class _Holder:
    total = Summed("parts")

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

