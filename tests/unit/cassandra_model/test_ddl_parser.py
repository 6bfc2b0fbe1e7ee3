"""Table schemas from CQL DDL files and text, and the SchemaCatalog they fill."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cassandra_model.cql_types import NATIVE_TYPES, parse_cql_type
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.errors import SchemaError, UnknownTableError
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


def test_before_drops_gives_the_dropped_columns_back_where_they_were() -> None:
    catalog = load_schema_from_cql(
        "CREATE TABLE ks.t (pk int, ck int, a int, b text, c int, s int static, PRIMARY KEY (pk, ck))"
        " WITH ID = 00000000-0000-0000-0000-0000000000aa;\n"
        "ALTER TABLE ks.t DROP b USING TIMESTAMP 10;\n"
        "ALTER TABLE ks.t DROP s USING TIMESTAMP 20;\n"
        "ALTER TABLE ks.t DROP c USING TIMESTAMP 30;\n"
        "ALTER TABLE ks.t ADD c int;"
    )
    now = catalog.by_name("ks", "t")
    assert now is not None and list(now.regular_columns) == ["a", "c"] and not now.static_columns
    before = now.before_drops(["b", "s", "c"])
    assert list(before.regular_columns) == ["a", "b", "c"] and list(before.static_columns) == ["s"]
    assert before.regular_columns["b"].type.cql() == "text" and before.table_id == now.table_id
    assert before.dropped_columns == {} and now.dropped_time("c") == 30
    assert list(now.before_drops(["b"]).dropped_columns) == ["s", "c"]
    with pytest.raises(SchemaError, match="has no dropped column a"):
        now.before_drops(["a"])
