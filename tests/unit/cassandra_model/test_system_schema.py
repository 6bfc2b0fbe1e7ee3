"""The system_schema keyspace: table schemas read through a driver Session, its own hard-coded tables, and
the schema changes its mutations in the log stand for."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import namedtuple
from typing import Any

import pytest

from cassandra_model.cql_types import NATIVE_TYPES
from cassandra_model.errors import SchemaError
from cassandra_model.partition_update import (
    BoundKind,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    Row,
)
from cassandra_model.system_schema import (
    SchemaChange,
    load_schema_from_session,
    schema_changes,
    system_schema_tables,
    system_table_id,
)
from cassandra_model.table_schema import ClusteringOrder, ColumnKind, ColumnSchema, TableSchema

ORDERS_ID = uuid.UUID("5a1c395e-b41f-11e5-9f22-ba0be0483c18")
EVENTS_ID = uuid.UUID("0bd1e2b0-8f1a-11ee-b9d1-0242ac120002")


# ---------------------------------------------------------------------------------------------------------
# a driver Session (faked: the real one is exercised against Cassandra elsewhere)


class FakeSession:
    """Answers the system_schema queries with canned rows, like a driver Session with a row factory."""

    def __init__(self, tables: dict[str, list[Any]]) -> None:
        self.tables = tables
        self.queries: list[str] = []

    def execute(self, query: str) -> list[Any]:
        self.queries.append(query)
        table = query.split("FROM system_schema.")[1].split()[0]
        return self.tables.get(table, [])


TableRow = namedtuple("TableRow", "keyspace_name table_name id flags cdc gc_grace_seconds")
ViewRow = namedtuple("ViewRow", "keyspace_name view_name id base_table_id gc_grace_seconds")


def _col(ks: str, t: str, name: str, kind: str, pos: int, type_: str, order: str = "none") -> dict[str, Any]:
    return {
        "keyspace_name": ks,
        "table_name": t,
        "column_name": name,
        "clustering_order": order,
        "kind": kind,
        "position": pos,
        "type": type_,
    }


def _session() -> FakeSession:
    view_id = uuid.uuid4()
    compact_id = uuid.uuid4()
    return FakeSession(
        {
            "types": [
                {
                    "keyspace_name": "app",
                    "type_name": "point",
                    "field_names": ["x", "y"],
                    "field_types": ["int", "int"],
                },
                {
                    "keyspace_name": "app",
                    "type_name": "shape",
                    "field_names": ["p"],
                    "field_types": ["frozen<point>"],
                },
            ],
            "tables": [
                TableRow("app", "t", ORDERS_ID, {"compound"}, True, 10),
                TableRow("app", "legacy", compact_id, {"dense"}, False, 10),
                TableRow("other", "x", EVENTS_ID, {"compound"}, False, 10),
            ],
            "views": [ViewRow("app", "t_by_v", view_id, ORDERS_ID, 10)],
            "columns": [
                _col("app", "t", "k", "partition_key", 0, "text"),
                _col("app", "t", "c", "clustering", 0, "timeuuid", "desc"),
                _col("app", "t", "s", "static", -1, "frozen<shape>"),
                _col("app", "t", "v", "regular", -1, "map<text, frozen<point>>"),
                _col("app", "t_by_v", "v2", "partition_key", 0, "int"),
                _col("app", "t_by_v", "k", "clustering", 0, "text", "asc"),
                _col("app", "legacy", "k", "partition_key", 0, "text"),
                _col("other", "x", "k", "partition_key", 0, "int"),
            ],
            "dropped_columns": [
                {
                    "keyspace_name": "app",
                    "table_name": "t",
                    "column_name": "gone",
                    "dropped_time": dt.datetime(2023, 11, 6, 15, 44, 40, 44000),
                    "kind": "regular",
                    "type": "tuple<int, text>",
                }
            ],
        }
    )


def test_load_schema_from_session() -> None:
    session = _session()
    catalog = load_schema_from_session(session, keyspaces=["app"])
    t = catalog.lookup(ORDERS_ID)
    assert (t.cdc, t.gc_grace_seconds) == (True, 10)
    assert t.clustering[0].clustering_order == ClusteringOrder.DESC
    assert t.static_columns["s"].type.cql() == "frozen<shape>"
    assert t.regular_columns["v"].type.multi_cell
    gone = t.dropped_columns["gone"]
    assert gone.dropped_time == 1_699_285_480_044_000
    assert gone.type.multi_cell  # a dropped non-frozen UDT is recorded as a non-frozen tuple
    assert catalog.by_name("app", "t_by_v") is not None
    assert catalog.by_name("app", "legacy") is None  # COMPACT STORAGE: skipped
    assert catalog.get(EVENTS_ID) is None  # keyspace filter
    assert catalog.get(system_table_id("system_schema", "columns")) is not None
    assert all(q.startswith("SELECT ") for q in session.queries)


def test_load_schema_from_session_without_filter_or_system_schema() -> None:
    catalog = load_schema_from_session(_session(), with_system_schema=False)
    assert catalog.get(EVENTS_ID) is not None
    assert catalog.get(system_table_id("system_schema", "columns")) is None


class SchemaChangingSession(FakeSession):
    """A session on a node where ``ALTER TABLE app.t DROP v`` lands while the schema is read: the
    dropped_columns query of the first read already sees it, the columns query before it did not."""

    def __init__(self, lands_after_queries: int = 2) -> None:
        super().__init__(_session().tables)
        self.lands_after_queries = lands_after_queries

    def execute(self, query: str) -> list[Any]:
        if len(self.queries) == self.lands_after_queries:
            self.tables = {**self.tables}
            self.tables["columns"] = [c for c in self.tables["columns"] if c["column_name"] != "v"]
            self.tables["dropped_columns"] = [
                *self.tables["dropped_columns"],
                {**self.tables["dropped_columns"][0], "column_name": "v", "type": "map<text, frozen<point>>"},
            ]
        return super().execute(query)


def test_a_schema_change_landing_during_the_read_is_not_read_half_applied() -> None:
    """Read once, the table would have v both as a column and as dropped: a column dropped and added
    again, whose older cells are hidden but which still shows in every image."""
    session = SchemaChangingSession()
    t = load_schema_from_session(session, keyspaces=["app"]).lookup(ORDERS_ID)
    assert "v" not in t.regular_columns
    assert "v" in t.dropped_columns
    assert len(session.queries) == 3 * 5  # a torn read, then two that agree


class EverChangingSession(FakeSession):
    """A node whose schema changes between every two reads."""

    def execute(self, query: str) -> list[Any]:
        rows = super().execute(query)
        if "system_schema.tables" in query:
            return [row._replace(gc_grace_seconds=len(self.queries)) for row in rows]
        return rows


def test_a_schema_that_never_settles_is_an_error_not_a_guess() -> None:
    with pytest.raises(SchemaError, match="changed during each of 5 reads"):
        load_schema_from_session(EverChangingSession(_session().tables))


# ---------------------------------------------------------------------------------------------------------
# system_schema


def test_system_table_ids_are_name_based_md5_uuids() -> None:
    # values from the format notes §7.15, checked there against the fixtures
    assert system_table_id("system_schema", "columns") == uuid.UUID("24101c25-a2ae-3af7-87c1-b40ee1aca33f")
    assert system_table_id("system", "local") == uuid.UUID("7ad54392-bcdd-35a6-8417-4e047860b377")
    tables = {t.table: t for t in system_schema_tables()}
    assert {"keyspaces", "tables", "columns", "dropped_columns", "types", "views"} <= set(tables)
    columns = tables["columns"]
    assert [c.name for c in columns.partition_key] == ["keyspace_name"]
    assert [c.name for c in columns.clustering] == ["table_name", "column_name"]
    assert columns.regular_columns["position"].type.fixed_length == 4


def _update(table: str, key: str, rows: list[Row], **kwargs: Any) -> PartitionUpdate:
    schema = {t.table: t for t in system_schema_tables()}[table]
    return PartitionUpdate(
        schema, key.encode(), kwargs.get("deletion"), None, rows, kwargs.get("markers", [])
    )


def _row(*clustering: str) -> Row:
    types = (NATIVE_TYPES["text"],) * len(clustering)
    return Row(tuple(c.encode() for c in clustering), types, 1, 0, None, None, [])


def test_schema_changes_per_system_schema_table() -> None:
    update = _update("columns", "shop", [_row("orders", "a"), _row("orders", "b"), _row("carts", "x")])
    assert schema_changes(update) == [
        SchemaChange("shop", "orders", "columns"),
        SchemaChange("shop", "carts", "columns"),
    ]
    assert schema_changes(_update("keyspaces", "shop", [])) == [SchemaChange("shop", None, "keyspaces")]
    assert schema_changes(_update("types", "shop", [_row("address")])) == [
        SchemaChange("shop", None, "types", "address")
    ]
    dropped = _update("tables", "shop", [], deletion=DeletionTime(5, 6))
    assert schema_changes(dropped) == [SchemaChange("shop", None, "tables")]
    text = (NATIVE_TYPES["text"],)
    marker = RangeTombstoneBound(BoundKind.INCL_START_BOUND, (b"orders",), text, DeletionTime(1, 2))
    ranged = _update("dropped_columns", "shop", [], markers=[marker])
    assert schema_changes(ranged) == [SchemaChange("shop", "orders", "dropped_columns")]


def test_schema_changes_ignore_other_keyspaces() -> None:
    pk = (ColumnSchema("k", ColumnKind.PARTITION_KEY, 0, NATIVE_TYPES["int"]),)
    table = TableSchema("ks", "t", ORDERS_ID, pk)
    update = PartitionUpdate(table, b"\x00\x00\x00\x01", None, None, [], [])
    assert schema_changes(update) == []


def test_the_newest_timestamp_of_an_update_is_its_newest_write_or_deletion() -> None:
    """What tells the agent whether a reload already brought a schema change it reads in the log."""
    text = (NATIVE_TYPES["text"],)
    marker = RangeTombstoneBound(BoundKind.INCL_START_BOUND, (b"orders",), text, DeletionTime(70, 2))
    assert _update("columns", "shop", [_row("orders", "a")], markers=[marker]).newest_timestamp() == 70
    assert _update("tables", "shop", [], deletion=DeletionTime(90, 6)).newest_timestamp() == 90
    assert _update("columns", "shop", [_row("orders", "a")]).newest_timestamp() == 1
    assert _update("keyspaces", "shop", []).newest_timestamp() is None
