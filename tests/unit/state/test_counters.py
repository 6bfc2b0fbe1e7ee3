"""Counter cells merge shard by shard (per counter id the higher clock wins; the value is the sum)."""

from __future__ import annotations

import itertools
import random

import pytest

from state.cell_merge import Cell
from state.counter_merge import (
    counter_value,
    merge_counter_contexts,
    parse_counter_context,
    reconcile_counter,
)
from state.errors import CounterContextError
from testkit.event_builder import (
    CounterShard,
    DeleteColumns,
    DeleteRow,
    EventBuilder,
    counter_context,
)
from tests.unit.state.support import decoded_rows, merged, shuffled_with_duplicates, table


def shard(
    counter_id: int, clock: int, count: int, ts: int = 10, column: str = "c", ck: int = 1
) -> CounterShard:
    return CounterShard(1, (ck,), column, counter_id, clock, count, ts=ts)


# (rule, logged shards, expected value of column c)
CASES = [
    ("one leader: the latest running total", [shard(1, 1, 5), shard(1, 2, 8), shard(1, 3, 6)], 6),
    ("two leaders: their totals add up", [shard(1, 1, 5), shard(2, 1, 3), shard(1, 2, 7)], 10),
    ("the clock decides, not the timestamp", [shard(1, 2, 7, ts=5), shard(1, 1, 100, ts=50)], 7),
    ("equal clocks: the larger count", [shard(1, 4, 3), shard(1, 4, 9)], 9),
    ("negative totals", [shard(1, 1, -4), shard(2, 1, 1)], -3),
]


@pytest.mark.parametrize(("rule", "ops", "value"), CASES, ids=[c[0] for c in CASES])
def test_counter_value(rule: str, ops: list[CounterShard], value: int) -> None:
    schema = table("cnt")
    builder = EventBuilder(schema)
    events = [builder.event(op) for op in ops]
    state = merged(events, schema)
    assert decoded_rows(state, schema, 0) == [{"pk": 1, "ck": 1, "c": value}]
    rng = random.Random(rule)
    for _ in range(5):
        assert merged(shuffled_with_duplicates(events, rng), schema) == state


def test_a_counter_tombstone_beats_later_increments() -> None:
    schema = table("cnt")
    builder = EventBuilder(schema)
    events = [
        builder.event(op)
        for op in (shard(1, 1, 5), DeleteColumns(1, (1,), ("c",), ts=20), shard(1, 2, 6, ts=30))
    ]
    state = merged(events, schema)
    assert decoded_rows(state, schema, 0) == []
    assert merged(events[::-1], schema) == state


def test_a_row_deletion_shadows_counters_by_timestamp() -> None:
    schema = table("cnt")
    builder = EventBuilder(schema)
    events = [
        builder.event(op)
        for op in (
            shard(1, 1, 5, ts=10),
            shard(2, 1, 1, ts=10, column="d"),
            DeleteRow(1, (1,), ts=15),
            shard(1, 2, 7, ts=20),
        )
    ]
    state = merged(events, schema)
    # the delete removed both cells; the later update (running total 7 for leader 1) is what remains
    assert decoded_rows(state, schema, 0) == [{"pk": 1, "ck": 1, "c": 7}]


def test_counter_reconcile_is_commutative_associative_and_idempotent() -> None:
    rng = random.Random(5)
    cells = [
        Cell(
            rng.randint(1, 3),
            0,
            2**31 - 1,
            0,
            counter_context([(rng.randint(1, 3), rng.randint(1, 3), rng.randint(-5, 5))]),
        )
        for _ in range(8)
    ]
    cells = [
        Cell(c.timestamp, 0, c.local_deletion_time, 0, merge_counter_contexts(c.value, b"\0\0"))
        for c in cells
    ]
    cells.append(Cell(2, 0, 100, 0x01, b""))
    for a, b, c in itertools.product(cells, repeat=3):
        assert reconcile_counter(a, b) == reconcile_counter(b, a)
        assert reconcile_counter(reconcile_counter(a, b), c) == reconcile_counter(a, reconcile_counter(b, c))
        assert reconcile_counter(a, a) == a


def test_context_parsing() -> None:
    context = counter_context([(1, 3, 10), (2, 1, -4)])
    assert counter_value(context) == 6
    assert len(parse_counter_context(context)) == 2
    with pytest.raises(CounterContextError, match="local shard"):
        parse_counter_context(b"\x00\x01\x00\x00" + bytes(32))
    with pytest.raises(CounterContextError, match="not a counter context"):
        parse_counter_context(b"\x00\x00\x01")
