"""Schemas and helpers shared by the merge-core tests."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from state.partition_state import PartitionState
from state.row_image import decode_row, partition_images

_DDL = """
CREATE TYPE ks.addr (street text, nr int);
CREATE TABLE ks.kv (pk int, ck int, v int, w text, s int static, l list<int>, st set<int>,
    m map<text, int>, a addr, PRIMARY KEY (pk, ck)) WITH ID = 00000000-0000-0000-0000-000000000001;
CREATE TABLE ks.two (pk int, c1 int, c2 text, v int, PRIMARY KEY (pk, c1, c2))
    WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC) AND ID = 00000000-0000-0000-0000-000000000002;
CREATE TABLE ks.desc1 (pk int, ck int, v int, PRIMARY KEY (pk, ck))
    WITH CLUSTERING ORDER BY (ck DESC) AND ID = 00000000-0000-0000-0000-000000000003;
CREATE TABLE ks.prop (pk int, c1 int, c2 text, s int static, v1 int, v2 text, l list<int>, st set<text>,
    m map<int, text>, PRIMARY KEY (pk, c1, c2))
    WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC) AND ID = 00000000-0000-0000-0000-000000000004;
CREATE TABLE ks.cnt (pk int, ck int, c counter, d counter, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-000000000005;
CREATE TABLE ks.single (pk int PRIMARY KEY, v int, w text) WITH ID = 00000000-0000-0000-0000-000000000006;
CREATE TABLE ks.readd (pk int, ck int, v int, w int, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-000000000007;
ALTER TABLE ks.readd DROP w USING TIMESTAMP 100;
ALTER TABLE ks.readd ADD w int;
CREATE TABLE ks.dec (pk int, ck decimal, v int, PRIMARY KEY (pk, ck))
    WITH ID = 00000000-0000-0000-0000-000000000008;
CREATE TABLE ks.gc (pk int, ck int, v int, PRIMARY KEY (pk, ck)) WITH gc_grace_seconds = 100
    AND ID = 00000000-0000-0000-0000-000000000009;
"""

CATALOG = load_schema_from_cql(_DDL)


def table(name: str) -> TableSchema:
    schema = CATALOG.by_name("ks", name)
    assert schema is not None, name
    return schema


def merged(events: Sequence[dict[str, Any]], schema: TableSchema) -> PartitionState:
    """A fresh partition state with the events applied in the given order."""
    state = PartitionState(events[0]["partition_key"])
    for event in events:
        state.apply(event, schema)
    return state


def shuffled_with_duplicates(events: Sequence[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """The events in a random order, each one to three times (replica copies, redeliveries)."""
    out = [e for e in events for _ in range(rng.randint(1, 3))]
    rng.shuffle(out)
    return out


def decoded_rows(state: PartitionState, schema: TableSchema, now: int) -> list[dict[str, Any]]:
    """Visible rows as SELECT shows them, keeping only non-null columns (keys included)."""
    return [
        {k: v for k, v in decode_row(image, schema).items() if v is not None}
        for image in partition_images(state, schema, now)
    ]


def visible_raw(state: PartitionState, schema: TableSchema, now: int) -> dict[Any, dict[str, Any]]:
    """Visible rows in the reference model's form: decoded clustering -> raw column values."""
    out: dict[Any, dict[str, Any]] = {}
    for image in partition_images(state, schema, now):
        key = (
            None
            if image.clustering is None
            else tuple(
                None if v is None else c.type.decode(v)
                for c, v in zip(schema.clustering, image.clustering, strict=True)
            )
        )
        columns: dict[str, Any] = {}
        for name, column in (*image.static.items(), *image.regular.items()):
            if isinstance(column, tuple):
                columns[name] = tuple((c.path, c.value) for c in column)
            else:
                columns[name] = column.value
        out[key] = columns
    return out
