"""Random writes, deletes and TTLs over a small key space (seeded ``random``; no hypothesis here).

Checked for every history: the images equal the brute-force reference model's read at several times;
any permutation of the events, with any duplicates, gives an equal state; applying an event a second
time changes nothing; and the change stream emitted event by event, replayed onto a table, ends in the
rows the state shows.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from state.change import apply_with_changes
from state.partition_state import PartitionState
from state.row_image import partition_images
from state.table_layout import layout_for
from testkit.event_builder import NOW
from tests.unit.state.random_history import SCHEMA, random_history
from tests.unit.state.reference_model import ReferenceModel
from tests.unit.state.support import merged, shuffled_with_duplicates, visible_raw

READS = [NOW, NOW + 7, NOW + 30, NOW + 1000]
ORDER = layout_for(SCHEMA).clustering


def reference(events: list[dict[str, Any]]) -> ReferenceModel:
    model = ReferenceModel(SCHEMA)
    for event in events:
        model.add(event)
    return model


@pytest.mark.parametrize("seed", range(150))
def test_images_equal_the_reference_model(seed: int) -> None:
    events = random_history(seed)
    state = merged(events, SCHEMA)
    model = reference(events)
    for now in READS:
        assert visible_raw(state, SCHEMA, now) == model.visible(now), f"read at NOW+{now - NOW}"


@pytest.mark.parametrize("seed", range(100))
def test_any_order_and_duplicates_give_the_same_state(seed: int) -> None:
    events = random_history(seed)
    state = merged(events, SCHEMA)
    rng = random.Random(seed)
    for _ in range(4):
        other = merged(shuffled_with_duplicates(events, rng), SCHEMA)
        assert other == state
        for now in READS:
            assert visible_raw(other, SCHEMA, now) == visible_raw(state, SCHEMA, now)


@pytest.mark.parametrize("seed", range(60))
def test_applying_an_event_twice_changes_nothing(seed: int) -> None:
    events = random_history(seed)
    state = PartitionState(events[0]["partition_key"])
    for event in events:
        state.apply(event, SCHEMA)
        again, changes = apply_with_changes(state, event, SCHEMA, NOW)
        assert not again.changed and changes == []


@pytest.mark.parametrize("seed", range(60))
def test_replaying_the_change_stream_gives_the_visible_rows(seed: int) -> None:
    events = random_history(seed)
    rng = random.Random(seed)
    events = shuffled_with_duplicates(events, rng)
    now = NOW + 3
    state = PartitionState(events[0]["partition_key"])
    table_rows: dict[Any, Any] = {}
    for event in events:
        _, changes = apply_with_changes(state, event, SCHEMA, now)
        for change in changes:
            if change.op == "c":
                assert change.key not in table_rows
                table_rows[change.key] = change.after
            elif change.op == "u":
                assert change.before is not None and table_rows[change.key].same_values(change.before)
                table_rows[change.key] = change.after
            else:
                assert change.before is not None and table_rows.pop(change.key).same_values(change.before)
    images = partition_images(state, SCHEMA, now)
    assert len(images) == len(table_rows)
    for image in images:
        key = None if image.clustering is None else ORDER.key(image.clustering)
        assert table_rows[key].same_values(image)


@pytest.mark.parametrize("seed", range(20))
def test_state_survives_pickling(seed: int) -> None:
    """Spark ships states between processes."""
    state = merged(random_history(seed), SCHEMA)
    assert pickle.loads(pickle.dumps(state)) == state
