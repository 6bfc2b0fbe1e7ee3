"""Real raw events (Cassandra 4.0.11's commit-log fixture): shuffled, they merge into the log-order images."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.digest import update_digest
from cassandra_model.table_schema import TableSchema
from schemas.raw_event import decode_raw_event, encode_raw_event, raw_event_record
from state.partition_state import PartitionState
from state.row_image import decode_row, partition_images
from tests.unit.legacy_fixtures import decode_fixture
from tests.unit.state.support import shuffled_with_duplicates

NOW = 1_700_000_000


@pytest.fixture(scope="module")
def fixture_events(legacy_commitlog_dir: Path) -> tuple[TableSchema, list[dict[str, Any]]]:
    updates, catalog = decode_fixture(legacy_commitlog_dir / "4.0.11-encrypted")
    schema = catalog.by_name("Keyspace1", "Standard1")
    assert schema is not None and updates
    events = [
        decode_raw_event(
            encode_raw_event(
                raw_event_record(
                    u,
                    cluster="c",
                    node="n1",
                    segment_id=1,
                    descriptor_version=7,
                    digest=update_digest(u),
                    published_at_ms=0,
                )
            )
        )
        for u in updates
        if u.table_id == schema.table_id
    ]
    return schema, events


def merge_all(events: list[dict[str, Any]], schema: TableSchema) -> dict[bytes, PartitionState]:
    states: dict[bytes, PartitionState] = {}
    for event in events:
        key = event["partition_key"]
        states.setdefault(key, PartitionState(key)).apply(event, schema)
    return states


def images(states: dict[bytes, PartitionState], schema: TableSchema) -> dict[bytes, list[dict[str, Any]]]:
    return {k: [decode_row(i, schema) for i in partition_images(s, schema, NOW)] for k, s in states.items()}


def test_shuffled_replica_copies_give_the_log_order_state(
    fixture_events: tuple[TableSchema, list[dict[str, Any]]],
) -> None:
    schema, events = fixture_events
    in_order = merge_all(events, schema)
    assert len(in_order) == len({e["partition_key"] for e in events})
    expected = images(in_order, schema)
    rng = random.Random(40)
    for _ in range(3):
        again = merge_all(shuffled_with_duplicates(events, rng), schema)
        assert again == in_order
        assert images(again, schema) == expected
    # every logged write is an INSERT of one row "name0": each partition shows it
    for event in events:
        (row,) = expected[event["partition_key"]]
        cell = event["rows"][0]["cells"][0]
        assert row["col"] == "name0" and row["val"] == cell["value"]


def test_all_writes_onto_one_row_keep_the_last_write(
    fixture_events: tuple[TableSchema, list[dict[str, Any]]],
) -> None:
    """The same real cells rebased onto one partition: 355 versions of one row, merged in any order."""
    schema, events = fixture_events
    key = events[0]["partition_key"]
    rebased = [{**e, "partition_key": key} for e in events]
    in_order = merge_all(rebased, schema)[key]
    winner = max((e["rows"][0]["cells"][0] for e in rebased), key=lambda c: (c["timestamp"], c["value"]))
    (row,) = [decode_row(i, schema) for i in partition_images(in_order, schema, NOW)]
    assert row["val"] == winner["value"]
    rng = random.Random(41)
    for _ in range(3):
        assert merge_all(shuffled_with_duplicates(rebased, rng), schema)[key] == in_order
