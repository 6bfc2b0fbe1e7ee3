"""A row keeps its clustering in canonical form: equal-comparing spellings, in any order, give one state."""

from __future__ import annotations

import itertools
from decimal import Decimal

from state.partition_state import PartitionState
from state.row_state import RowState
from state.table_layout import layout_for
from testkit.event_builder import DeleteRow, EventBuilder, Write
from tests.unit.state.support import merged, table

DEC = table("dec")  # pk int, ck decimal, v int
SPELLINGS = [Decimal("1.0"), Decimal("1.00"), Decimal("1"), Decimal("0.1E+1")]


def test_every_order_of_spellings_gives_the_same_state_with_the_canonical_bytes() -> None:
    builder = EventBuilder(DEC)
    events = [
        builder.event(Write(1, (d,), {"v": i}, ts=10 + i, insert=True)) for i, d in enumerate(SPELLINGS)
    ]
    events.append(builder.event(DeleteRow(1, (Decimal("1.000"),), ts=12)))
    states = [merged(list(order), DEC) for order in itertools.permutations(events)]
    assert all(state == states[0] for state in states[1:])
    [row] = states[0].rows.values()
    assert row.clustering == (builder.clustering([Decimal("1")])[0],)


def test_a_stored_row_with_another_spelling_takes_the_canonical_one_at_its_next_write() -> None:
    builder = EventBuilder(DEC)
    stored = tuple(builder.clustering([Decimal("1.00")]))
    key = layout_for(DEC).clustering.key(stored)
    state = PartitionState(builder.partition_key(1), rows={key: RowState(stored)})
    result = state.apply(builder.event(Write(1, (Decimal("1.0"),), {"v": 1}, ts=10)), DEC)
    assert result.rows == {key}
    assert state.rows[key].clustering == tuple(builder.clustering([Decimal("1")]))
