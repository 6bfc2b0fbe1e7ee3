"""Which columns of a raw event its table schema cannot place (app/event_columns.py): the batch loop waits
for a newer schema while there are any."""

from __future__ import annotations

from typing import Any

from app.event_columns import unplaced_columns
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from testkit.event_builder import EventBuilder, Write

TABLE_ID = "00000000-0000-0000-0000-00000000000b"


def schema(ddl: str) -> TableSchema:
    found = load_schema_from_cql(ddl).by_name("ks", "t")
    assert found is not None
    return found


OLD = schema(
    f"CREATE TABLE ks.t (pk int, ck int, v int, s int static, PRIMARY KEY (pk, ck)) WITH ID = {TABLE_ID}"
)
NEW = schema(
    f"CREATE TABLE ks.t (pk int, ck int, v int, s int static, x int, m map<int, int>, t2 int static, "
    f"PRIMARY KEY (pk, ck)) WITH ID = {TABLE_ID}"
)
#: w dropped at 100 µs and added again
READDED = schema(
    f"CREATE TABLE ks.t (pk int, ck int, v int, w int, s int static, PRIMARY KEY (pk, ck)) WITH ID = {TABLE_ID};"
    "ALTER TABLE ks.t DROP w USING TIMESTAMP 100; ALTER TABLE ks.t ADD w int;"
)
#: w dropped at 100 µs, not back
DROPPED = schema(
    f"CREATE TABLE ks.t (pk int, ck int, v int, w int, s int static, PRIMARY KEY (pk, ck)) WITH ID = {TABLE_ID};"
    "ALTER TABLE ks.t DROP w USING TIMESTAMP 100;"
)


def write(table: TableSchema, values: dict[str, Any], ts: int = 10) -> dict[str, Any]:
    return EventBuilder(table).event(Write(1, (2,), values, ts=ts))


def test_an_event_of_known_columns_needs_nothing() -> None:
    assert unplaced_columns(write(OLD, {"v": 1, "s": 2}), OLD) == []


def test_regular_static_and_collection_columns_the_schema_lacks_are_named() -> None:
    event = write(NEW, {"v": 1, "x": 2, "m": {1: 2}, "t2": 3})
    assert unplaced_columns(event, OLD) == ["m", "t2", "x"]
    assert unplaced_columns(event, NEW) == []


def test_a_collection_overwrite_of_an_unknown_column_is_named_by_its_deletion_too() -> None:
    event = write(NEW, {"m": {1: 2}})
    assert event["rows"][0]["complex_deletions"], "the builder writes a whole map with its complex deletion"
    event["rows"][0]["cells"] = []
    assert unplaced_columns(event, OLD) == ["m"]


def test_a_dropped_column_places_cells_from_before_the_drop_only() -> None:
    before, after = write(READDED, {"w": 1}, ts=50), write(READDED, {"w": 1}, ts=150)
    assert unplaced_columns(before, DROPPED) == []  # hidden data, as Cassandra hides it
    assert unplaced_columns(after, DROPPED) == ["w"]  # written after the column came back
    assert unplaced_columns(after, READDED) == []
