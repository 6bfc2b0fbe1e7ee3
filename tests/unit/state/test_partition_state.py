"""The partition state's API: what an apply reports, row lookup by clustering, clear errors."""

from __future__ import annotations

import pytest

from cassandra_model.errors import ClusteringValueError
from state import PartitionState, StateError, clustering_key, decode_row, row_image
from testkit.event_builder import (
    NOW,
    DeletePartition,
    DeleteRange,
    EventBuilder,
    RangeMarkers,
    Write,
)
from tests.unit.state.support import table

SCHEMA = table("kv")
BUILDER = EventBuilder(SCHEMA)


def test_apply_reports_what_changed_in_the_state() -> None:
    state = PartitionState(BUILDER.partition_key(1))
    result = state.apply(BUILDER.event(Write(1, (1,), {"v": 1, "s": 2}, ts=10, insert=True)), SCHEMA)
    key = clustering_key(SCHEMA, BUILDER.clustering([1]))
    assert result.rows == {key} and result.static and result.changed
    result = state.apply(BUILDER.event(DeleteRange(1, low=0, ts=11)), SCHEMA)
    assert result.range_tombstones and result.rows == {key} and not result.static
    result = state.apply(BUILDER.event(DeletePartition(1, ts=12)), SCHEMA)
    assert result.partition_deletion and result.static and result.range_tombstones
    assert not state.rows and state.static_row is None and not state.range_tombstones  # all superseded


def test_row_lookup_by_clustering() -> None:
    state = PartitionState(BUILDER.partition_key(1))
    state.apply(BUILDER.event(Write(1, (7,), {"w": "x"}, ts=10)), SCHEMA)
    image = row_image(state, clustering_key(SCHEMA, BUILDER.clustering([7])), SCHEMA, NOW)
    assert image is not None and decode_row(image, SCHEMA)["w"] == "x"
    assert row_image(state, clustering_key(SCHEMA, BUILDER.clustering([8])), SCHEMA, NOW) is None


def test_an_event_of_another_partition_is_refused() -> None:
    state = PartitionState(BUILDER.partition_key(1))
    with pytest.raises(StateError, match="applied to partition"):
        state.apply(BUILDER.event(Write(2, (1,), {"v": 1}, ts=10)), SCHEMA)


def test_unbalanced_range_markers_are_refused() -> None:
    state = PartitionState(BUILDER.partition_key(1))
    with pytest.raises(StateError, match="left open"):
        state.apply(BUILDER.event(RangeMarkers(1, [(1, (1,), 5)])), SCHEMA)
    with pytest.raises(StateError, match="closes nothing"):
        state.apply(BUILDER.event(RangeMarkers(1, [(6, (1,), 5)])), SCHEMA)


def test_a_clustering_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(ClusteringValueError, match="clustering values"):
        clustering_key(SCHEMA, [b"\x00\x00\x00\x01", b"\x00\x00\x00\x02"])
