"""The key layout: byte order is numeric order, partitions never prefix each other, keys parse back."""

from __future__ import annotations

import uuid

import pytest

from state.errors import StoreError
from state.store.keys import (
    digest_age_key,
    digest_age_until,
    due_key,
    due_until,
    header_key,
    parse_digest_age_key,
    parse_due_key,
    parse_row_key,
    prefix_end,
    row_group,
    row_key,
    row_prefix,
)

TABLE = uuid.UUID("00000000-0000-0000-0000-000000000042")
TID = TABLE.bytes


def test_due_keys_sort_by_time_first_and_parse_back() -> None:
    times = [0, 1, 255, 256, 2**31 - 1, 2**32 + 5]
    keys = [due_key(t, TID, b"\xff" * 3, b"ck") for t in times]
    assert keys == sorted(keys)
    for t in times:
        assert due_key(t, TID, b"pk", None) < due_until(t) <= due_key(t + 1, TID, b"", None)
        assert parse_due_key(due_key(t, TID, b"pk", None)) == (t, TABLE, b"pk", None)
        assert parse_due_key(due_key(t, TID, b"pk", b"")) == (t, TABLE, b"pk", b"")
        assert parse_due_key(due_key(t, TID, b"", b"\x00ck")) == (t, TABLE, b"", b"\x00ck")


def test_the_rows_of_one_partition_are_one_key_range_of_their_own() -> None:
    partitions = [b"", b"a", b"a\x00", b"ab", b"b", b"\xff"]
    for pk in partitions:
        prefix = row_prefix(TID, pk)
        lo, hi = prefix, prefix_end(prefix)
        assert lo == row_key(TID, pk, b"") < row_key(TID, pk, b"\xff" * 10) < hi
        assert row_group(row_key(TID, pk, b"\x20\x01")) == prefix
        assert parse_row_key(row_key(TID, pk, b"ck")) == (TABLE, pk, b"ck")
        for other in partitions:
            if other != pk:
                assert not lo <= row_key(TID, other, b"") < hi
                assert not lo <= row_key(TID, other, b"\xff") < hi
    assert header_key(TID, b"a") != header_key(TID, b"a\x00")


def test_digest_ages_sort_by_time_and_parse_back() -> None:
    digest = bytes(range(16))
    assert digest_age_key(5, digest) < digest_age_until(6) <= digest_age_key(6, b"")
    assert parse_digest_age_key(digest_age_key(2**40, digest)) == (2**40, digest)


def test_prefix_end_skips_trailing_ff_bytes() -> None:
    assert prefix_end(b"R\x01") == b"R\x02"
    assert prefix_end(b"R\x01\xff\xff") == b"R\x02"
    with pytest.raises(StoreError):
        prefix_end(b"\xff")


def test_malformed_keys_are_refused() -> None:
    with pytest.raises(StoreError, match="table id"):
        row_key(b"short", b"pk", b"")
    with pytest.raises(StoreError, match="not a row key"):
        parse_row_key(b"X")
    with pytest.raises(StoreError, match="not a due-index key"):
        parse_due_key(b"R" + b"\x00" * 40)
    bad_flag = bytearray(due_key(1, TID, b"pk", b"ck"))
    bad_flag[1 + 8 + 16 + 4 + 2] = 7
    with pytest.raises(StoreError, match="unknown flag 7"):
        parse_due_key(bytes(bad_flag))
