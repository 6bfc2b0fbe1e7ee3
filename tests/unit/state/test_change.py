"""Change events: one per row whose visible image changed, none for duplicates, losers and no-ops."""

from __future__ import annotations

from typing import Any

from state.change import apply_with_changes, expiry_changes, next_expiry
from state.partition_state import PartitionState
from state.row_image import cell_metadata, decode_row, row_image
from testkit.event_builder import (
    NOW,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    Operation,
    Write,
)
from tests.unit.state.support import table

SCHEMA = table("kv")
BUILDER = EventBuilder(SCHEMA)


def run(ops: list[Operation], now: int = NOW) -> tuple[PartitionState, list[list[tuple[str, Any]]]]:
    """Apply operations one by one; per operation the (op, ck) of the changes it emitted."""
    state = PartitionState(BUILDER.partition_key(1))
    out = []
    for op in ops:
        _, changes = apply_with_changes(state, BUILDER.event(op), SCHEMA, now)
        out.append([(c.op, None if c.after is None and c.before is None else _ck(c)) for c in changes])
    return state, out


def _ck(change: Any) -> Any:
    image = change.after if change.after is not None else change.before
    return decode_row(image, SCHEMA)["ck"]


def test_create_update_delete() -> None:
    _, changes = run(
        [
            Write(1, (1,), {"v": 1}, ts=10, insert=True),
            Write(1, (1,), {"v": 2}, ts=11),
            DeleteRow(1, (1,), ts=12),
        ]
    )
    assert changes == [[("c", 1)], [("u", 1)], [("d", 1)]]


def test_nothing_for_duplicates_losers_and_no_ops() -> None:
    write = Write(1, (1,), {"v": 1, "w": "x"}, ts=10, insert=True)
    _, changes = run(
        [
            write,
            write,  # a replica copy / redelivery
            Write(1, (1,), {"v": 5}, ts=9),  # loses last-write-wins
            Write(1, (1,), {"v": 1}, ts=11),  # same value, newer timestamp
            DeleteRow(1, (2,), ts=12),  # deletes a row that does not exist
            DeleteRange(1, low=5, high=9, ts=12),  # deletes nothing visible
        ]
    )
    assert changes == [[("c", 1)], [], [], [], [], []]


def test_before_and_after_are_full_images() -> None:
    state = PartitionState(BUILDER.partition_key(1))
    apply_with_changes(
        state, BUILDER.event(Write(1, (1,), {"v": 1, "w": "x"}, ts=10, insert=True)), SCHEMA, NOW
    )
    _, changes = apply_with_changes(state, BUILDER.event(Write(1, (1,), {"v": 2}, ts=11)), SCHEMA, NOW)
    (change,) = changes
    assert change.before is not None and change.after is not None
    assert decode_row(change.before, SCHEMA) == {**_nulls(), "pk": 1, "ck": 1, "v": 1, "w": "x"}
    assert decode_row(change.after, SCHEMA) == {**_nulls(), "pk": 1, "ck": 1, "v": 2, "w": "x"}
    assert cell_metadata(change.after, NOW)["v"] == {
        "writetime": 11,
        "ttl": None,
        "expires_at": None,
        "remaining_ttl": None,
    }


def _nulls() -> dict[str, None]:
    return dict.fromkeys([*SCHEMA.static_columns, *SCHEMA.regular_columns])


def test_a_static_change_updates_every_row() -> None:
    _, changes = run(
        [
            Write(1, (1,), {"v": 1}, ts=10, insert=True),
            Write(1, (2,), {"v": 2}, ts=10, insert=True),
            Write(1, (), {"s": 7}, ts=11),
            Write(1, (), {"s": 7}, ts=12),  # same static value: nothing
        ]
    )
    assert changes == [[("c", 1)], [("c", 2)], [("u", 1), ("u", 2)], []]


def test_the_static_only_row_comes_and_goes() -> None:
    state, changes = run(
        [
            Write(1, (), {"s": 7}, ts=10),
            Write(1, (1,), {"v": 1}, ts=11),
            DeleteRow(1, (1,), ts=12),
            DeletePartition(1, ts=13),
        ]
    )
    assert changes == [[("c", None)], [("d", None), ("c", 1)], [("c", None), ("d", 1)], [("d", None)]]
    assert row_image(state, None, SCHEMA, NOW) is None


def test_range_and_partition_deletions_report_each_row() -> None:
    _, changes = run(
        [
            *[Write(1, (ck,), {"v": ck}, ts=10, insert=True) for ck in (1, 2, 3)],
            DeleteRange(1, low=2, ts=11),
            DeletePartition(1, ts=12),
        ]
    )
    assert changes[3:] == [[("d", 2), ("d", 3)], [("d", 1)]]


def test_expiry_changes_and_timer() -> None:
    state, _ = run(
        [
            Write(1, (1,), {"v": 1}, ts=10, ttl=100, insert=True),
            Write(1, (2,), {"v": 2}, ts=10, insert=True),
            Write(1, (2,), {"w": "x"}, ts=11, ttl=50),
        ]
    )
    assert next_expiry(state, NOW) == NOW + 50
    assert expiry_changes(state, SCHEMA, NOW, NOW + 49) == []
    (change,) = expiry_changes(state, SCHEMA, NOW + 49, NOW + 50)
    assert change.op == "u" and decode_row(change.after, SCHEMA)["w"] is None
    assert next_expiry(state, NOW + 50) == NOW + 100
    (change,) = expiry_changes(state, SCHEMA, NOW + 50, NOW + 1000)
    assert change.op == "d" and decode_row(change.before, SCHEMA)["ck"] == 1
    assert next_expiry(state, NOW + 100) is None


def test_an_expiring_static_column_updates_every_row() -> None:
    state, _ = run(
        [
            Write(1, (1,), {"v": 1}, ts=10, insert=True),
            Write(1, (), {"s": 1}, ts=10, ttl=10),
        ]
    )
    changes = expiry_changes(state, SCHEMA, NOW, NOW + 10)
    assert [(c.op, decode_row(c.after, SCHEMA)["s"]) for c in changes] == [("u", None)]


def test_a_list_rewritten_with_the_same_values_is_no_change() -> None:
    """``SET l = [1, 2]`` over ``[1, 2]`` writes elements under new timeuuid paths; readers see the
    same list, so there is no event. Sets and maps are identified by their elements, so the same holds
    for them; a list with other values or another order is a change."""
    _, changes = run(
        [
            Write(1, (1,), {"l": [1, 2], "st": {3}, "m": {"a": 1}}, ts=10, insert=True),
            Write(1, (1,), {"l": [1, 2]}, ts=11),
            Write(1, (1,), {"st": {3}, "m": {"a": 1}}, ts=12),
            Write(1, (1,), {"l": [2, 1]}, ts=13),
            Write(1, (1,), {"l": [2, 1, 1]}, ts=14),
        ]
    )
    assert changes == [[("c", 1)], [], [], [("u", 1)], [("u", 1)]]
