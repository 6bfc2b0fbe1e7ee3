"""The native core's stored rows against the Python codec, which is their specification.

``cdc_native.encode_row_value`` must write exactly the bytes ``python_row_value`` writes for every row it
takes (rows of simple cells), and leave every other row to Python (return None): for the rows of random
histories and of every merge case, for random rows with odd fields (null clustering values, names that
sort differently as bytes and as UTF-16, extreme timestamps, TTLs and flags), and for rows the format
cannot hold, whose error Python names. ``cdc_native.RowReader`` must read those bytes back into rows equal
to ``python_row_state``'s, and leave to Python (None) every value it does not take whole: rows with
collections, and damaged bytes, whose error Python names.
"""

from __future__ import annotations

import random
import struct
from collections import defaultdict
from typing import Any

import pytest

from app.worker_core import AVAILABLE
from state.cell_merge import EXPIRED_LIVENESS_TTL, NO_DELETION_TIME, Cell, Deletion, Liveness
from state.errors import StoreError
from state.row_state import RowState
from state.store import codec
from testkit.event_builder import NOW
from tests.unit.state.merge_cases import CASES, Case, case_events
from tests.unit.state.merge_cases import table as case_table
from tests.unit.state.random_history import SCHEMA as PROP
from tests.unit.state.random_history import random_history
from tests.unit.state.support import merged

pytestmark = pytest.mark.skipif(AVAILABLE != "native", reason="the native core is not installed (make setup)")

if AVAILABLE == "native":
    from cdc_native import RowReader
    from cdc_native import encode_row_value as native_row_value

    native_row_state = RowReader(RowState, Cell, Liveness, Deletion).decode


def simple(row: RowState) -> bool:
    return not row.complex_cells and not row.complex_deletions


def same_bytes(row: RowState, due: int | None) -> bool:
    """Native and Python bytes of ``row`` are equal where native writes it; True when it did."""
    native = native_row_value(row, due or 0)
    if native is None:
        assert not simple(row), f"native refused a row of simple cells: {row}"
        return False
    assert native == codec.python_row_value(row, due), row
    assert_read_back(native, row)
    return True


def assert_read_back(data: bytes, row: RowState) -> None:
    """The native reader reads a value of simple cells back as Python does: into ``row``."""
    read = native_row_state(data)
    assert read is not None, f"native refused to read a row of simple cells: {row}"
    assert read == codec.python_row_state(data) == row
    assert type(read) is RowState and all(type(c) is Cell for c in read.cells.values())


@pytest.mark.parametrize("seed", range(80))
def test_the_rows_of_random_histories(seed: int) -> None:
    state = merged(random_history(seed), PROP)
    rows = [*state.rows.values(), *([state.static_row] if state.static_row is not None else [])]
    for i, row in enumerate(rows):
        same_bytes(row, None if i % 2 else NOW + seed)


def partitions(case: Case) -> list[list[dict[str, Any]]]:
    by_key: dict[bytes, list[dict[str, Any]]] = defaultdict(list)
    for event in case_events(case, case_table(case.table)):
        by_key[event["partition_key"]].append(event)
    return list(by_key.values())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_rows_of_every_merge_case(case: Case) -> None:
    schema = case_table(case.table)
    for events in partitions(case):
        state = merged(events, schema)
        for row in [*state.rows.values(), *([state.static_row] if state.static_row is not None else [])]:
            same_bytes(row, None)


def test_merge_cases_give_the_native_writer_rows_it_takes() -> None:
    """The comparisons above are not all refusals: most merge cases' rows are of simple cells."""
    written = 0
    for case in CASES:
        for events in partitions(case):
            written += sum(
                same_bytes(row, None) for row in merged(events, case_table(case.table)).rows.values()
            )
    assert written > len(CASES)


NAMES = ["a", "b", "ä", "z", "A", "\U0001f600", "\uffff", "col_1", "x" * 300, ""]


def random_row(rng: random.Random) -> RowState:
    def big() -> int:
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**62), 2**62), NOW * 10**6])

    clustering = tuple(rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(rng.randrange(9)))])
                       for _ in range(rng.randrange(4)))  # fmt: skip
    liveness = rng.choice([
        None,
        Liveness(big()),
        Liveness(big(), rng.choice([1, 30, 2**31 - 1]), rng.choice([None, NOW + 30, 0])),
        Liveness(big(), 0, NOW),
        Liveness(big(), EXPIRED_LIVENESS_TTL, NOW),
    ])  # fmt: skip
    deletion = rng.choice([None, Deletion(big(), rng.choice([NOW, NO_DELETION_TIME, -1]))])
    cells = {}
    for name in rng.sample(NAMES, rng.randrange(len(NAMES))):
        ttl = rng.choice([0, 0, 20, 2**31 - 1, -5])
        ldt = rng.choice([NO_DELETION_TIME, NO_DELETION_TIME, NOW, 2**32 - 1, -(2**40)])
        value = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4, 8, 40])))
        cells[name] = Cell(big(), ttl, ldt, rng.randrange(16), value)
    return RowState(clustering, liveness, deletion, cells)


@pytest.mark.parametrize("seed", range(40))
def test_random_rows_with_odd_fields(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        assert same_bytes(random_row(rng), rng.choice([None, 1, NOW, 2**64 - 1]))


@pytest.mark.parametrize(
    "row, error",
    [
        (RowState((b"k",), cells={"v": Cell(1, 0, NO_DELETION_TIME, 0x10, b"")}), StoreError),
        (RowState(tuple([b""] * 256), Liveness(1)), StoreError),
        (RowState((b"k",), Liveness(2**63)), struct.error),
        (RowState((b"k",), cells={"v": Cell(1, 2**31, NO_DELETION_TIME, 0, b"")}), struct.error),
        (RowState((b"k",), cells={"n" * 70000: Cell(1, 0, NO_DELETION_TIME, 0, b"")}), StoreError),
    ],
    ids=["unknown cell flags", "256 clustering values", "timestamp past i64", "TTL past i32", "long name"],
)
def test_rows_the_format_cannot_hold_are_left_to_python_which_names_the_fault(
    row: RowState, error: type[Exception]
) -> None:
    assert native_row_value(row, 0) is None
    codec.use_native_row_encoder(native_row_value)
    try:
        with pytest.raises(error):
            codec.encode_row_value(row, None)
    finally:
        codec.use_native_row_encoder(None)


def test_rows_with_collections_are_left_to_python() -> None:
    element = Cell(3, 0, NO_DELETION_TIME, 0, b"x", b"\x00\x01")
    row = RowState((b"k",), Liveness(1), complex_cells={"m": {b"\x00\x01": element}})
    assert native_row_value(row, 0) is None
    codec.use_native_row_encoder(native_row_value)
    try:
        assert codec.encode_row_value(row, 5) == codec.python_row_value(row, 5)
    finally:
        codec.use_native_row_encoder(None)


def agreeing_reads(data: bytes) -> bool:
    """Native and Python read ``data`` alike: the native row equals Python's, or native left it to
    Python (None), as it must whenever Python refuses it. True when native read it."""
    try:
        expected: RowState | None = codec.python_row_state(data, b"k")
    except StoreError:
        expected = None
    read = native_row_state(data)
    if read is None:
        return False
    assert read == expected, data.hex()
    return True


@pytest.mark.parametrize("seed", range(20))
def test_damaged_values_are_read_alike_or_left_to_python(seed: int) -> None:
    rng = random.Random(seed)
    taken = 0
    for _ in range(10):
        data = codec.python_row_value(random_row(rng), rng.choice([None, NOW]))
        for size in range(len(data)):  # every truncation
            assert not agreeing_reads(data[:size]), "a truncated value was read whole"
        assert not agreeing_reads(data + b"\x00"), "a value with a byte after its end was read"
        for _ in range(40):  # flipped bytes: some still read (a timestamp's byte), the rest refused
            damaged = bytearray(data)
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            taken += agreeing_reads(bytes(damaged))
    assert taken > 0


def test_values_with_collections_are_left_to_python() -> None:
    element = Cell(3, 0, NO_DELETION_TIME, 0, b"x", b"\x00\x01")
    row = RowState((b"k",), Liveness(1), complex_cells={"m": {b"\x00\x01": element}})
    data = codec.python_row_value(row, 5)
    assert native_row_state(data) is None
    codec.use_native_row_decoder(native_row_state)
    try:
        assert codec.decode_row_value(data) == row
        with pytest.raises(StoreError, match="is truncated or damaged"):
            codec.decode_row_value(data[:-1], b"k")
    finally:
        codec.use_native_row_decoder(None)


def test_values_of_another_format_version_are_left_to_python_which_names_it() -> None:
    data = b"\x02" + codec.python_row_value(RowState((b"k",), Liveness(1)), None)[1:]
    assert native_row_state(data) is None
    with pytest.raises(StoreError, match="store format version 2"):
        codec.python_row_state(data, b"k")
