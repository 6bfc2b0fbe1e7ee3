"""Schema sources: CQL DDL files, a driver Session over system_schema, and schema changes in the log."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.cql_types import NATIVE_TYPES, parse_cql_type
from cassandra_model.errors import SchemaError, UnknownTableError
from cassandra_model.partition_update import (
    BoundKind,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    Row,
)
from cassandra_model.schema_loader import (
    SchemaChange,
    load_schema_from_cql,
    load_schema_from_session,
    schema_changes,
    system_schema_tables,
    system_table_id,
)
from cassandra_model.table_schema import (
    ClusteringOrder,
    ColumnKind,
    ColumnSchema,
    SchemaCatalog,
    TableSchema,
)

ORDERS_ID = uuid.UUID("5a1c395e-b41f-11e5-9f22-ba0be0483c18")
EVENTS_ID = uuid.UUID("0bd1e2b0-8f1a-11ee-b9d1-0242ac120002")

DDL = f"""
-- a snapshot-style schema file
CREATE KEYSPACE IF NOT EXISTS shop WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}
    AND durable_writes = true;

CREATE TYPE IF NOT EXISTS shop.address (street text, "Zip" int, tags frozen<set<text>>);
CREATE TYPE shop.customer (name text, home frozen<address>);

/* orders: composite partition key, two clustering columns, a static column */
CREATE TABLE IF NOT EXISTS shop.orders (
    region text,
    bucket int,
    placed timestamp,
    "Order Id" uuid,
    note text static,
    items map<text, int>,
    who frozen<customer>,
    lines list<frozen<tuple<text, decimal>>>,
    legacy blob,
    PRIMARY KEY ((region, bucket), placed, "Order Id")
) WITH CLUSTERING ORDER BY (placed DESC, "Order Id" ASC)
    AND ID = {ORDERS_ID}
    AND cdc = true
    AND gc_grace_seconds = 3600
    AND compaction = {{'class': 'org.apache.cassandra.db.compaction.LeveledCompactionStrategy',
                      'sstable_size_in_mb': '160'}}
    AND comment = 'it''s; fine'
    AND speculative_retry = '99p';
ALTER TABLE shop.orders DROP legacy USING TIMESTAMP 1700000000000000;

USE shop;
CREATE TABLE events (id timeuuid PRIMARY KEY, hits counter) WITH id = '{EVENTS_ID}';
CREATE INDEX IF NOT EXISTS orders_note ON shop.orders (note);
"""


def test_load_schema_from_cql_text() -> None:
    catalog = load_schema_from_cql(DDL)
    orders = catalog.lookup(ORDERS_ID)
    assert (orders.keyspace, orders.table, orders.cdc, orders.gc_grace_seconds) == (
        "shop",
        "orders",
        True,
        3600,
    )
    assert [c.name for c in orders.partition_key] == ["region", "bucket"]
    assert [c.type.cql() for c in orders.partition_key] == ["text", "int"]
    assert [(c.name, c.clustering_order) for c in orders.clustering] == [
        ("placed", ClusteringOrder.DESC),
        ("Order Id", ClusteringOrder.ASC),
    ]
    assert list(orders.static_columns) == ["note"]
    assert sorted(orders.regular_columns) == ["items", "lines", "who"]
    assert orders.regular_columns["items"].is_complex
    assert orders.regular_columns["who"].type.cql() == "frozen<customer>"
    who = orders.regular_columns["who"].type.field_types[1]
    assert who.field_names == ("street", "Zip", "tags")
    assert orders.regular_columns["lines"].type.cql() == "list<frozen<tuple<text, decimal>>>"
    assert orders.dropped_columns["legacy"].dropped_time == 1_700_000_000_000_000
    assert orders.dropped_columns["legacy"].type is NATIVE_TYPES["blob"]
    assert orders.header_column("legacy").is_dropped
    assert not orders.is_counter

    events = catalog.lookup(EVENTS_ID)
    assert events.keyspace == "shop" and events.is_counter and events.clustering == ()
    assert catalog.by_name("shop", "events") is events
    assert catalog.udts.names("shop") == ["address", "customer"]


def test_load_schema_from_cql_file(tmp_path: Path) -> None:
    path = tmp_path / "schema.cql"
    path.write_text(DDL, encoding="utf-8")
    assert len(load_schema_from_cql(path)) == 2
    assert len(load_schema_from_cql(str(path))) == 2
    with pytest.raises(SchemaError, match="cannot read"):
        load_schema_from_cql(tmp_path / "missing.cql")


def test_missing_table_id_names_the_table_and_the_fix() -> None:
    with pytest.raises(SchemaError, match=r"ks\.t .*add WITH ID = <uuid>"):
        load_schema_from_cql("CREATE TABLE ks.t (a int PRIMARY KEY, b text);")


@pytest.mark.parametrize(
    ("ddl", "match"),
    [
        ("CREATE TABLE t (a int PRIMARY KEY) WITH ID = " + str(ORDERS_ID) + ";", "no keyspace"),
        ("CREATE TABLE ks.t (a int, b nosuch, PRIMARY KEY (a)) WITH ID = " + str(ORDERS_ID) + ";", "nosuch"),
        ("CREATE TABLE ks.t (a int, b int) WITH ID = " + str(ORDERS_ID) + ";", "no PRIMARY KEY"),
        (
            "CREATE TABLE ks.t (a int, PRIMARY KEY (a, z)) WITH ID = " + str(ORDERS_ID) + ";",
            "'z' is not defined",
        ),
        (
            "CREATE TABLE ks.t (a int PRIMARY KEY, b int) WITH COMPACT STORAGE AND ID = " + str(ORDERS_ID),
            "COMPACT",
        ),
        ("CREATE TABLE ks.t (a int PRIMARY KEY, s int static) WITH ID = " + str(ORDERS_ID), "static"),
        ("CREATE TABLE ks.t (a int PRIMARY KEY) WITH ID = 'nope';", "not a UUID"),
        ("ALTER TABLE ks.nope DROP x;", "not created"),
    ],
)
def test_schema_file_errors(ddl: str, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        load_schema_from_cql(ddl)


def test_alter_table_add_after_drop_keeps_the_drop_time() -> None:
    catalog = load_schema_from_cql(
        f"""CREATE TABLE ks.t (k int, c int, v text, s set<int> static, PRIMARY KEY (k, c))
            WITH ID = {ORDERS_ID};
        ALTER TABLE ks.t DROP (v, s) USING TIMESTAMP 10;
        ALTER TABLE ks.t ADD v int;"""
    )
    table = catalog.lookup(ORDERS_ID)
    assert table.regular_columns["v"].type.cql() == "int"
    assert table.dropped_time("v") == 10
    assert table.dropped_columns["s"].kind == ColumnKind.STATIC
    assert table.dropped_columns["s"].type.multi_cell
    assert table.static_columns == {}


# ---------------------------------------------------------------------------------------------------------
# catalog


def _table(table_id: uuid.UUID, name: str = "t", extra: str | None = None) -> TableSchema:
    regular = {"v": ColumnSchema("v", ColumnKind.REGULAR, -1, NATIVE_TYPES["int"])}
    if extra:
        regular[extra] = ColumnSchema(extra, ColumnKind.REGULAR, -1, NATIVE_TYPES["text"])
    pk = (ColumnSchema("k", ColumnKind.PARTITION_KEY, 0, NATIVE_TYPES["int"]),)
    return TableSchema("ks", name, table_id, pk, regular_columns=regular)


def test_catalog_add_replace_history_and_unknown_ids() -> None:
    catalog = SchemaCatalog()
    first = _table(ORDERS_ID)
    catalog.add(first)
    with pytest.raises(SchemaError, match="already registered"):
        catalog.add(_table(ORDERS_ID))
    altered = _table(ORDERS_ID, extra="w")
    catalog.replace(altered)
    assert catalog.lookup(ORDERS_ID) is altered
    assert catalog.history(ORDERS_ID) == (first, altered)
    assert catalog.get_raw(ORDERS_ID.bytes) is altered
    recreated = _table(EVENTS_ID)  # same name, new id: the old id keeps resolving
    catalog.add(recreated)
    assert catalog.by_name("ks", "t") is recreated
    assert catalog.lookup(ORDERS_ID) is altered
    with pytest.raises(UnknownTableError) as info:
        catalog.lookup(uuid.UUID(int=7), segment="CommitLog-7-1.log", offset=99)
    assert info.value.table_id == str(uuid.UUID(int=7))
    assert "CommitLog-7-1.log" in str(info.value) and "offset 99" in str(info.value)
    catalog.remove(ORDERS_ID)
    assert catalog.get(ORDERS_ID) is None and catalog.history(ORDERS_ID) == ()


def test_table_schema_validation() -> None:
    pk = (ColumnSchema("k", ColumnKind.PARTITION_KEY, 0, NATIVE_TYPES["int"]),)
    with pytest.raises(SchemaError, match="no partition key"):
        TableSchema("ks", "t", ORDERS_ID, ())
    with pytest.raises(SchemaError, match="positions"):
        TableSchema(
            "ks", "t", ORDERS_ID, (ColumnSchema("k", ColumnKind.PARTITION_KEY, 1, NATIVE_TYPES["int"]),)
        )
    with pytest.raises(SchemaError, match="duplicate"):
        TableSchema("ks", "t", ORDERS_ID, pk, regular_columns={"k": pk[0]})
    bad_key = (ColumnSchema("k", ColumnKind.PARTITION_KEY, 0, parse_cql_type("list<int>")),)
    with pytest.raises(SchemaError, match="multi-cell"):
        TableSchema("ks", "t", ORDERS_ID, bad_key)


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
    table = _table(ORDERS_ID)
    update = PartitionUpdate(table, b"\x00\x00\x00\x01", None, None, [], [])
    assert schema_changes(update) == []
