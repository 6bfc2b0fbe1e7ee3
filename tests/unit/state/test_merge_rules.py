"""Each merge rule of docs/ARCHITECTURE.md as a table (merge_cases.py): writes, then the rows SELECT shows.

Each case is also merged in reverse order and in shuffled orders with duplicates, which must give the
same state. The same table runs against a real Cassandra in tests/integration/test_merge_vs_cassandra.py.
"""

from __future__ import annotations

import random

import pytest

from testkit.event_builder import (
    EXCL_END_INCL_START,
    INCL_END,
    INCL_START,
    NOW,
    DeleteRange,
    EventBuilder,
    RangeMarkers,
    SetField,
    Write,
)
from tests.unit.state.merge_cases import CASES, Case, case_events, has_cql, ins, table
from tests.unit.state.support import decoded_rows, merged, shuffled_with_duplicates


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule(case: Case) -> None:
    schema = table(case.table)
    events = case_events(case, schema)
    state = merged(events, schema)
    for now, expected in case.reads().items():
        assert decoded_rows(state, schema, now) == expected, f"read at NOW+{now - NOW}"
    assert merged(events[::-1], schema) == state
    rng = random.Random(case.name)
    for _ in range(5):
        assert merged(shuffled_with_duplicates(events, rng), schema) == state


def test_boundary_markers_equal_two_separate_range_deletions() -> None:
    schema = table("kv")
    builder = EventBuilder(schema)
    rows = [builder.event(ins(ck, v=ck)) for ck in range(1, 6)]
    boundary = builder.event(
        RangeMarkers(1, [(INCL_START, (1,), 11), (EXCL_END_INCL_START, (3,), 11, 12), (INCL_END, (5,), 12)])
    )
    separate = [
        builder.event(DeleteRange(1, low=1, high=3, high_inclusive=False, ts=11)),
        builder.event(DeleteRange(1, low=3, high=5, ts=12)),
    ]
    assert merged([*rows, boundary], schema) == merged([*rows, *separate], schema)


def test_every_operation_renders_cql() -> None:
    schema = table("kv")
    assert (
        ins(1, ttl=5, v=1).cql(schema)
        == "INSERT INTO ks.kv (pk, ck, v) VALUES (1, 1, 1) USING TIMESTAMP 10 AND TTL 5"
    )
    assert DeleteRange(1, low=2, high=4, high_inclusive=False, ts=3).cql(schema) == (
        "DELETE FROM ks.kv USING TIMESTAMP 3 WHERE pk = 1 AND ck >= 2 AND ck < 4"
    )
    assert SetField(1, (1,), "a", "nr", 5, ts=2).cql(schema) == (
        "UPDATE ks.kv USING TIMESTAMP 2 SET a.nr = 5 WHERE pk = 1 AND ck = 1"
    )
    assert Write(1, (1,), {"a": {"street": "x"}}, ts=2, insert=True).cql(schema) == (
        "INSERT INTO ks.kv (pk, ck, a) VALUES (1, 1, {street: 'x'}) USING TIMESTAMP 2"
    )
    for case in CASES:
        for op in case.ops:
            if has_cql(op):
                assert op.cql(table(case.table)).startswith(("INSERT", "UPDATE", "DELETE", "BEGIN"))
