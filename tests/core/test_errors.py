"""The one table of wire codes: every error maps to its v2 and v3 code and back."""

import pytest

from bkfast import errors
from bkfast.errors import (
    ERROR_TABLE,
    BKError,
    BKLedgerFencedException,
    ClientCode,
    DigestMismatchError,
    FrameTooLargeError,
    V2Rc,
    V3Status,
    error_for_v2_rc,
    error_for_v3_status,
    v2_rc_for,
    v2_rc_to_v3,
    v3_status_for,
    v3_status_to_v2,
)

# spec bookkeeper-formats.md §1.7: v2 rc -> v3 StatusCode
SPEC_PAIRS = {0: 0, 1: 402, 2: 403, 100: 404, 101: 501, 102: 502, 103: 503, 104: 504, 105: 505, 106: 506,
              107: 507}


def test_v2_and_v3_code_numbers_follow_the_spec():
    assert {int(rc): int(v2_rc_to_v3(rc)) for rc in V2Rc} == SPEC_PAIRS
    assert {int(v3_status_to_v2(s)) for s in V3Status} == set(SPEC_PAIRS)


def test_every_non_ok_wire_code_has_exactly_one_error_class():
    assert sorted(int(v2) for _, v2, _ in ERROR_TABLE) == sorted(k for k in SPEC_PAIRS if k)
    for cls, v2, v3 in ERROR_TABLE:
        assert isinstance(error_for_v2_rc(v2), cls)
        assert isinstance(error_for_v3_status(v3), cls)
        assert v2_rc_for(cls) == v2 and v3_status_for(cls()) == v3


def test_ok_is_not_an_error_and_unknown_codes_are_unexpected():
    assert error_for_v2_rc(0) is None and error_for_v3_status(0) is None
    err = error_for_v2_rc(999, "ledger 5 entry 2")
    assert isinstance(err, errors.BKUnexpectedConditionException)
    assert "999" in str(err) and "ledger 5 entry 2" in str(err)


def test_errors_without_a_wire_code_are_reported_as_eio():
    assert v2_rc_for(DigestMismatchError) == V2Rc.EIO
    assert v3_status_for(RuntimeError("boom")) == V3Status.EIO


def test_frame_errors_are_bad_requests():
    assert v2_rc_for(FrameTooLargeError()) == V2Rc.EBADREQ


def test_client_codes_follow_java_bkexception():
    assert BKLedgerFencedException.code == ClientCode.LedgerFencedException == -101
    assert errors.BKNoSuchLedgerExists is errors.BKNoSuchLedgerExistsException
    assert errors.BKNoSuchLedgerExistsException.code == -7
    assert errors.BKDigestMatchException.code == -5
    assert errors.BKNotEnoughBookies.code == -6


@pytest.mark.parametrize("cls", [c for c in vars(errors).values()
                                 if isinstance(c, type) and issubclass(c, BKError)])
def test_every_error_has_a_default_message(cls):
    assert str(cls()).strip()
