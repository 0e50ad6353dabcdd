"""Ledger ids: (scope_id, ledger_id) pairs, their qualified names and UUID mapping (spec/scope-ids.md)."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkfast.errors import BKIncorrectParameterException, InvalidBookieIdError, InvalidLedgerIdError, MetadataError
from bkfast.ids import (
    MAX_LEDGER_ID,
    MAX_SCOPE_ID,
    LedgerId,
    scope_field,
    scope_from_field,
    split_bookie_id,
    validate_entry_id,
)

scopes = st.integers(min_value=0, max_value=MAX_SCOPE_ID)
ledgers = st.integers(min_value=0, max_value=MAX_LEDGER_ID)


def test_limits_are_unsigned_64_bit_scope_and_signed_long_ledger():
    assert MAX_SCOPE_ID == 2**64 - 1
    assert MAX_LEDGER_ID == 2**63 - 1
    LedgerId(MAX_SCOPE_ID, MAX_LEDGER_ID)
    LedgerId(0, 0)


def test_qualified_name_is_32_lower_case_hex_digits_scope_first():
    assert LedgerId(0, 1).qualified_name == "0" * 31 + "1"
    assert LedgerId(0xABC, 0xDEF).qualified_name == "0000000000000abc0000000000000def"
    assert LedgerId(MAX_SCOPE_ID, MAX_LEDGER_ID).qualified_name == "f" * 16 + "7" + "f" * 15


@given(scopes, ledgers)
def test_qualified_name_round_trips(scope_id, ledger_id):
    lid = LedgerId(scope_id, ledger_id)
    name = lid.qualified_name
    assert len(name) == 32 and name == name.lower()
    assert LedgerId.parse_qualified_name(name) == lid
    assert LedgerId.parse_qualified_name(name.upper()) == lid
    assert LedgerId.parse_qualified_name("0x" + name) == lid
    assert LedgerId.parse_qualified_name("0X" + name.upper()) == lid


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0x",
        "1",
        "0" * 31,
        "0" * 33,
        "0x" + "0" * 31,
        "g" + "0" * 31,
        " " + "0" * 32,
        "0" * 32 + "\n",
        "-" + "0" * 31,
        "0x0x" + "0" * 28,
        "0" * 16 + "_" + "0" * 15,
    ],
)
def test_parse_rejects_anything_but_32_hex_digits(text):
    with pytest.raises(InvalidLedgerIdError, match="32 hex digits"):
        LedgerId.parse_qualified_name(text)


def test_parse_rejects_a_ledger_half_with_the_top_bit_set():
    with pytest.raises(InvalidLedgerIdError, match="ledger_id"):
        LedgerId.parse_qualified_name("0" * 16 + "8" + "0" * 15)


def test_parse_rejects_non_strings():
    with pytest.raises(InvalidLedgerIdError):
        LedgerId.parse_qualified_name(b"0" * 32)


def test_uuid_maps_high_half_to_scope_and_low_half_without_top_bit_to_ledger():
    u = uuid.UUID("0123456789abcdef" "fedcba9876543210")
    lid = LedgerId.from_uuid(u)
    assert lid.scope_id == 0x0123456789ABCDEF
    assert lid.ledger_id == 0xFEDCBA9876543210 & (2**63 - 1) == 0x7EDCBA9876543210


def test_to_uuid_inverts_from_uuid_when_bit_63_is_clear():
    u = uuid.UUID("0123456789abcdef" "7edcba9876543210")
    assert LedgerId.from_uuid(u).to_uuid() == u


@given(st.uuids())
def test_uuid_round_trip_loses_only_bit_63(u):
    lid = LedgerId.from_uuid(u)
    assert lid.to_uuid().int == u.int & ~(1 << 63)
    assert LedgerId.from_uuid(lid.to_uuid()) == lid


def test_from_uuid_rejects_non_uuids():
    with pytest.raises(InvalidLedgerIdError):
        LedgerId.from_uuid("0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize(
    ("scope_id", "ledger_id", "field", "shown"),
    [
        (-1, 0, "scope_id", "-1"),
        (2**64, 0, "scope_id", str(2**64)),
        (0, -1, "ledger_id", "-1"),
        (0, 2**63, "ledger_id", str(2**63)),
        (True, 0, "scope_id", "True"),
        (0, False, "ledger_id", "False"),
        (0, 1.0, "ledger_id", "1.0"),
        ("1", 0, "scope_id", "'1'"),
        (0, None, "ledger_id", "None"),
    ],
)
def test_out_of_range_or_non_int_ids_name_the_field_and_value(scope_id, ledger_id, field, shown):
    with pytest.raises(InvalidLedgerIdError) as info:
        LedgerId(scope_id, ledger_id)
    assert field in str(info.value)
    assert shown in str(info.value)


def test_invalid_ids_are_incorrect_parameter_errors_and_value_errors():
    with pytest.raises(BKIncorrectParameterException):
        LedgerId(0, -5)
    with pytest.raises(ValueError):
        LedgerId(0, -5)


def test_str_is_plain_decimal_for_scope_0_and_qualified_name_otherwise():
    assert str(LedgerId(0, 12345)) == "12345"
    assert str(LedgerId(1, 12345)) == "0000000000000001" + "0000000000003039"


def test_is_scoped_only_outside_scope_0():
    assert not LedgerId(0, 7).is_scoped
    assert LedgerId(1, 7).is_scoped
    assert LedgerId.classic(7) == LedgerId(0, 7)


def test_ids_are_frozen_hashable_values():
    lid = LedgerId(3, 4)
    assert lid == LedgerId(3, 4)
    assert len({lid, LedgerId(3, 4), LedgerId(4, 3)}) == 2
    with pytest.raises(AttributeError):
        lid.ledger_id = 5  # type: ignore[misc]


@given(scopes, ledgers, scopes, ledgers)
def test_ordering_is_scope_first_like_the_qualified_name(s1, l1, s2, l2):
    a, b = LedgerId(s1, l1), LedgerId(s2, l2)
    assert (a < b) == (a.qualified_name < b.qualified_name)


def test_repr_is_readable_and_evaluable():
    lid = LedgerId(0x10, 5)
    assert repr(lid) == "LedgerId(scope_id=0x10, ledger_id=5)"
    assert eval(repr(lid)) == lid


@pytest.mark.parametrize("entry_id", [0, 1, 2**63 - 1])
def test_entry_ids_are_non_negative_longs(entry_id):
    assert validate_entry_id(entry_id) == entry_id


@pytest.mark.parametrize("entry_id", [-1, -2, 2**63, True, 1.0, "0", None])
def test_bad_entry_ids_are_rejected_naming_the_value(entry_id):
    with pytest.raises(InvalidLedgerIdError) as info:
        validate_entry_id(entry_id)
    assert "entry_id" in str(info.value)
    assert repr(entry_id) in str(info.value) or str(entry_id) in str(info.value)


def test_minus_one_means_last_add_confirmed_only_when_allowed():
    assert validate_entry_id(-1, allow_last=True) == -1
    with pytest.raises(InvalidLedgerIdError):
        validate_entry_id(-2, allow_last=True)
    with pytest.raises(InvalidLedgerIdError):
        validate_entry_id(-1)


def test_scope_travels_as_the_int64_twos_complement_of_the_unsigned_scope():
    assert scope_field(0) == 0
    assert scope_field(2**63 - 1) == 2**63 - 1
    assert scope_field(2**63) == -(2**63)
    assert scope_field(MAX_SCOPE_ID) == -1
    assert scope_from_field(-1) == MAX_SCOPE_ID
    assert scope_from_field(-(2**63)) == 2**63


@given(scopes)
def test_scope_field_round_trips(scope_id):
    field = scope_field(scope_id)
    assert -(2**63) <= field < 2**63
    assert scope_from_field(field) == scope_id


@pytest.mark.parametrize("bad", [-1, MAX_SCOPE_ID + 1])
def test_scope_field_refuses_a_scope_outside_64_unsigned_bits(bad):
    with pytest.raises(BKIncorrectParameterException, match="outside 0..2"):
        scope_field(bad)


def test_split_bookie_id_takes_host_and_port_and_unbrackets_ipv6():
    assert split_bookie_id("127.0.0.1:3181") == ("127.0.0.1", 3181)
    assert split_bookie_id("bookie-1.example:65535") == ("bookie-1.example", 65535)
    assert split_bookie_id("[::1]:3181") == ("::1", 3181)


@pytest.mark.parametrize("bad", ["127.0.0.1", "127.0.0.1:", ":3181", "host:port", "host:0", "host:65536"])
def test_split_bookie_id_refuses_what_is_not_host_colon_port(bad):
    # Callers of either kind catch it: the metadata side (MetadataError) and resolvers (ValueError).
    with pytest.raises(InvalidBookieIdError, match="is not host:port") as info:
        split_bookie_id(bad)
    assert isinstance(info.value, MetadataError) and isinstance(info.value, ValueError)

