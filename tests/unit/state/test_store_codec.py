"""Stored rows and headers come back equal, in canonical bytes, and damaged or foreign values are refused."""

from __future__ import annotations

import random
from typing import Any

import pytest

from state.cell_merge import EXPIRED_LIVENESS_TTL, NO_DELETION_TIME, Cell, Deletion, Liveness
from state.errors import StoreError
from state.partition_state import PartitionState
from state.row_state import RowState
from state.store.codec import (
    VERSION,
    decode_header_value,
    decode_row_value,
    encode_header_value,
    encode_row_value,
    stored_due,
)
from testkit.event_builder import NOW, AddElements, CounterShard, EventBuilder, SetField, Write
from tests.unit.state.random_history import SCHEMA as PROP
from tests.unit.state.random_history import random_history
from tests.unit.state.support import merged, shuffled_with_duplicates, table


def round_trip_row(row: RowState, due: int | None = None) -> None:
    data = encode_row_value(row, due)
    assert data[0] == VERSION
    assert decode_row_value(data) == row
    assert stored_due(data) == due
    assert encode_row_value(decode_row_value(data), due) == data


def round_trip_header(state: PartitionState, due: int | None = None) -> None:
    data = encode_header_value(state.partition_deletion, state.static_row, state.range_tombstones, due)
    back = decode_header_value(state.partition_key, data)
    assert back.partition_deletion == state.partition_deletion
    assert back.static_row == state.static_row
    assert back.range_tombstones == state.range_tombstones
    assert stored_due(data) == due


@pytest.mark.parametrize("seed", range(80))
def test_every_row_and_header_of_random_histories_round_trips(seed: int) -> None:
    """Cells, TTLs, tombstones, lists/sets/maps, row and complex deletions, static rows, range deletions."""
    state = merged(random_history(seed), PROP)
    for key, row in state.rows.items():
        round_trip_row(row, due=None if len(key) % 2 else NOW + seed)
    round_trip_header(state, due=NOW + 7)


@pytest.mark.parametrize("seed", range(30))
def test_equal_states_encode_to_equal_bytes(seed: int) -> None:
    events = random_history(seed)
    state = merged(events, PROP)
    other = merged(shuffled_with_duplicates(events, random.Random(seed)), PROP)
    assert state == other
    for key, row in state.rows.items():
        assert encode_row_value(row, 5) == encode_row_value(other.rows[key], 5)
    encoded = encode_header_value(state.partition_deletion, state.static_row, state.range_tombstones, None)
    assert encoded == encode_header_value(
        other.partition_deletion, other.static_row, other.range_tombstones, None
    )


def test_udt_fields_counters_and_null_clustering_values_round_trip() -> None:
    kv = table("kv")
    builder = EventBuilder(kv)
    state = merged(
        [
            builder.event(SetField(1, (1,), "a", "street", "Main", ts=10, ttl=30)),
            builder.event(SetField(1, (1,), "a", "nr", 7, ts=11)),
            builder.event(AddElements(1, (1,), "m", {"k": 3}, ts=12)),
            builder.event(Write(1, (), {"s": 4}, ts=13)),
        ],
        kv,
    )
    for row in state.rows.values():
        round_trip_row(row)
    round_trip_header(state)
    cnt = table("cnt")
    counters = merged([EventBuilder(cnt).event(CounterShard(1, (1,), "c", 1, 2, 5, ts=3))], cnt)
    for row in counters.rows.values():
        round_trip_row(row)
    round_trip_row(RowState((None, b"", b"\x00\x01"), Liveness(5)))


LIVENESSES = [
    Liveness(1),
    Liveness(-(2**62)),
    Liveness(2, 30, NOW + 30),
    Liveness(3, 30, None),
    Liveness(4, EXPIRED_LIVENESS_TTL, NOW),
]
CELLS = [
    Cell(1, 0, NO_DELETION_TIME, 0, b""),
    Cell(2, 0, NOW, 1, b""),  # tombstone
    Cell(3, 20, NOW + 20, 2, b"\x00\x00\x00\x05"),  # expiring
    Cell(4, 0, NOW, 0, b"x"),  # live with an odd deletion time (counter merges keep the first one's)
    Cell(2**63 - 1, 2**31 - 1, 2**32 - 1, 3, b"\xff" * 300),
]


@pytest.mark.parametrize("liveness", [None, *LIVENESSES])
def test_liveness_variants_round_trip(liveness: Liveness | None) -> None:
    round_trip_row(RowState((b"k",), liveness, Deletion(9, NOW)))


@pytest.mark.parametrize("cell", CELLS)
def test_cell_variants_round_trip_as_simple_and_complex_cells(cell: Cell) -> None:
    element = Cell(cell.timestamp, cell.ttl, cell.local_deletion_time, cell.flags, cell.value, b"\x00\x01")
    round_trip_row(
        RowState(
            (b"k",),
            cells={"ä": cell, "b": cell},
            complex_cells={"m": {b"\x00\x01": element}},
            complex_deletions={"m": Deletion(1, NOW), "z": Deletion(2, NOW)},
        )
    )


def test_an_element_key_other_than_its_path_is_kept() -> None:
    """Elements of types whose equal values differ in bytes (decimal set) are keyed by the canonical form."""
    cell = Cell(5, 0, NO_DELETION_TIME, 0, b"", b"\x00\x00\x00\x01\x0a")
    round_trip_row(RowState((b"k",), complex_cells={"st": {b"canonical": cell}}))


def test_a_header_with_everything_round_trips() -> None:
    state = PartitionState(b"pk")
    state.partition_deletion = Deletion(3, NOW)
    state.static_row = RowState((), cells={"s": CELLS[2]})
    state.range_tombstones.add(b"\x20a\x08", b"\x20b\x30", Deletion(5, NOW))
    state.range_tombstones.add(b"\x20c\x08", b"\x20d\x30", Deletion(6, NOW + 1))
    round_trip_header(state, due=NOW + 99)
    round_trip_header(PartitionState(b""))


def damaged(data: bytes) -> list[tuple[str, bytes]]:
    return [
        ("another version", bytes((VERSION + 1,)) + data[1:]),
        ("truncated", data[:-3]),
        ("extra bytes", data + b"\x00"),
        ("empty", b""),
    ]


@pytest.mark.parametrize("what", ["another version", "truncated", "extra bytes", "empty"])
def test_damaged_or_foreign_values_are_refused(what: str) -> None:
    row = RowState((b"k",), Liveness(1), cells={"v": CELLS[2]})
    bad_row = dict(damaged(encode_row_value(row, None)))[what]
    with pytest.raises(StoreError, match="row 6b"):
        decode_row_value(bad_row, b"k")
    header = encode_header_value(Deletion(1, NOW), row, PartitionState(b"").range_tombstones, None)
    bad_header = dict(damaged(header))[what]
    with pytest.raises(StoreError, match="partition 706b"):
        decode_header_value(b"pk", bad_header)


def test_cells_with_unknown_flags_are_refused() -> None:
    with pytest.raises(StoreError, match="flags"):
        encode_row_value(RowState((b"k",), cells={"v": Cell(1, 0, NO_DELETION_TIME, 0x10, b"")}), None)


def sizes() -> dict[str, Any]:
    """Bytes of a narrow row as the benchmark's (for the record in the docstring)."""
    row = RowState(
        (b"\x00\x00\x00\x07",),
        Liveness(1_700_000_000_000_000),
        cells={n: Cell(1_700_000_000_000_000, 0, NO_DELETION_TIME, 0, b"\x00" * 8) for n in "abc"},
    )
    return {"narrow": len(encode_row_value(row, None))}


def test_a_narrow_row_is_small() -> None:
    assert sizes()["narrow"] <= 103
