"""Table definitions survive the trip through CQL text, as they do on the schema topic."""

from __future__ import annotations

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.schema_cql import catalog_from_cql, table_to_cql
from cassandra_model.table_schema import TableSchema

DDL = """
CREATE TYPE shop.address (street text, "Zip" int);
CREATE TYPE shop.customer (name text, home frozen<address>, tags set<text>);
CREATE TABLE shop."Orders" (
    region text, id timeuuid, at timestamp, note text static,
    items map<text, frozen<list<int>>>, buyer customer, extra text, embedding vector<float, 3>,
    pair tuple<int, text>, "Mixed Case" int,
    PRIMARY KEY ((region, id), at)
) WITH CLUSTERING ORDER BY (at DESC) AND ID = 5a1c3a8e-7c1b-11ee-9858-c9aa1eb53e69
  AND cdc = true AND gc_grace_seconds = 3600;
ALTER TABLE shop."Orders" DROP extra USING TIMESTAMP 1700000000000000;
CREATE TABLE shop.plain (k int PRIMARY KEY, v counter) WITH ID = 6b1c3a8e-7c1b-11ee-9858-c9aa1eb53e69;
"""


def _signature(table: TableSchema) -> tuple:
    return (
        table.keyspace,
        table.table,
        table.table_id,
        [(c.name, c.kind, c.position, c.type.cql(), c.clustering_order) for c in table.all_columns()],
        {k: (d.type.cql(), d.dropped_time, d.kind) for k, d in table.dropped_columns.items()},
        table.cdc,
        table.gc_grace_seconds,
        table.is_counter,
    )


def test_every_table_round_trips() -> None:
    catalog = load_schema_from_cql(DDL)
    for table in catalog.tables():
        again = load_schema_from_cql(table_to_cql(table)).tables()
        assert len(again) == 1
        assert _signature(again[0]) == _signature(table), table_to_cql(table)


def test_catalog_from_several_definitions() -> None:
    catalog = load_schema_from_cql(DDL)
    rebuilt = catalog_from_cql([table_to_cql(t) for t in catalog.tables()])
    assert sorted(_signature(t) for t in rebuilt.tables()) == sorted(_signature(t) for t in catalog.tables())
