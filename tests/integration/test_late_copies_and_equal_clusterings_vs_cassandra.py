"""Late copies on a gc_grace_seconds = 0 table, and clusterings spelled several ways, against Cassandra.

The same statements run as CQL on node 1 and, as the raw events the event builder makes for them,
through the worker's own path (``BatchDriver``: ChangeProcessor on a real store, the worker config's
defaults). Cassandra's SELECT is the oracle: the last image per key the worker emitted must equal it,
compared as the verifier and the reconcile job compare (``driver_row_image``).

A late copy reaches Cassandra as a hint or a repair does: the statement runs again on the node that
missed it. Cassandra still holds the tombstone (nothing was compacted), so the row stays deleted; the
worker sees that copy an hour later by its own clock, long past gc_grace_seconds, and must answer the
same. Cassandra itself would bring the row back if compaction had dropped the tombstone first; the
worker keeps tombstones for its tombstone floor (the digest horizon) because its copies come late by
design (README, "Tombstones and late copies").

Equal clusterings: Cassandra keeps one row for ``1.00``, ``1.0`` and ``1.000`` and shows one of the
spellings; the worker emits every change of the row under one key, in the canonical spelling.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from schemas.driver_rows import driver_row_image, key_text
from testkit.event_builder import DeleteRow, EventBuilder, Write
from tests.integration.agent_harness import unique_name
from tests.unit.app.batch_driver import BatchDriver

TABLES = {
    "late": "(pk int, ck int, v int, PRIMARY KEY (pk, ck)) WITH gc_grace_seconds = 0",
    "equal": "(pk int, ck decimal, v int, PRIMARY KEY (pk, ck))",
}

Operation = Write | DeleteRow


@pytest.fixture(scope="module")
def keyspace(session: Any) -> Iterator[dict[str, TableSchema]]:
    """A keyspace with TABLES, and their schemas as the worker knows them."""
    name = unique_name("late_equal")
    session.execute(
        f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}",
        timeout=60,
    )
    ddl = [f"CREATE TABLE {name}.{table} {spec}" for table, spec in TABLES.items()]
    for statement in ddl:
        session.execute(statement, timeout=60)
    catalog = load_schema_from_session(session, [name], with_system_schema=False)
    schemas = {}
    for table in TABLES:
        schema = catalog.by_name(name, table)
        assert schema is not None
        schemas[table] = schema
    yield schemas
    session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)


def run(session: Any, schema: TableSchema, op: Operation) -> None:
    session.execute(op.cql(schema))


def selected(session: Any, schema: TableSchema) -> dict[str, dict[str, Any]]:
    """SELECT * at ALL, by key, in the clean topics' JSON form (canonical clusterings)."""
    return dict(
        driver_row_image(schema, row._asdict()) for row in session.execute(f"SELECT * FROM {schema.name}")
    )


class Emitted:
    """What the clean topic holds per key: the last image, a delete removing the key."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.rows: dict[str, dict[str, Any]] = {}
        self.keys: list[bytes] = []

    def add(self, worker: BatchDriver, now_s: int, *events: dict[str, Any]) -> list[str]:
        ops = []
        for record in worker.batch(now_s, *events):
            if record.value is None:
                continue
            self.keys.append(record.key)
            value = worker.codec.decode_value(record.value)
            key = key_text(worker.codec.decode_key(record.key))
            if value["after"] is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = value["after"]
            ops.append(value["op"])
        return ops


def test_late_copies_of_older_writes_leave_deleted_rows_and_expired_values_as_cassandra_shows(
    session: Any, keyspace: dict[str, TableSchema], tmp_path: Path
) -> None:
    schema = keyspace["late"]
    node1, node2 = EventBuilder(schema, node="n1"), EventBuilder(schema, node="n2")
    emitted = Emitted(schema)
    with BatchDriver(tmp_path / "p0", [schema]) as worker:
        now = int(time.time())
        first: list[tuple[Operation, EventBuilder]] = [
            (Write(1, (1,), {"v": 1}, ts=10, insert=True), node1),
            (DeleteRow(1, (1,), ts=20), node1),
            (Write(2, (1,), {"v": 1}, ts=10), node1),
            (Write(2, (1,), {"v": 2}, ts=20, ttl=1), node1),
        ]
        for op, builder in first:
            run(session, schema, op)
            emitted.add(worker, now, builder.event(op, now=now))
        time.sleep(max(0.0, now + 2.1 - time.time()))  # the TTL ran out on the node
        assert emitted.add(worker, now + 2) == ["d"], "the expiry of row 2"

        late: list[Operation] = [Write(1, (1,), {"v": 2}, ts=15), Write(2, (1,), {"v": 3}, ts=15)]
        for op in late:
            run(session, schema, op)  # a hint: node 2's copy applied on node 1
            assert emitted.add(worker, now + 3600, node2.event(op, now=now)) == [], f"{op} changed a row"
    assert selected(session, schema) == {} == emitted.rows


def test_a_row_whose_clustering_is_spelled_several_ways_is_one_row_under_one_key(
    session: Any, keyspace: dict[str, TableSchema], tmp_path: Path
) -> None:
    schema = keyspace["equal"]
    node1, node2 = EventBuilder(schema, node="n1"), EventBuilder(schema, node="n2")
    emitted = Emitted(schema)
    # the CQL spells each decimal as written (cassandra-driver's literals would all read 1.0)
    steps: list[tuple[str, Operation, EventBuilder, list[str]]] = [
        ("INSERT INTO {t} (pk, ck, v) VALUES (1, 1.00, 1) USING TIMESTAMP 10",
         Write(1, (Decimal("1.00"),), {"v": 1}, ts=10, insert=True), node1, ["c"]),
        ("UPDATE {t} USING TIMESTAMP 20 SET v = 2 WHERE pk = 1 AND ck = 1.0",
         Write(1, (Decimal("1.0"),), {"v": 2}, ts=20), node2, ["u"]),
        ("UPDATE {t} USING TIMESTAMP 25 SET v = 2 WHERE pk = 1 AND ck = 1",  # only the spelling differs
         Write(1, (Decimal("1"),), {"v": 2}, ts=25), node1, []),
        ("DELETE FROM {t} USING TIMESTAMP 30 WHERE pk = 1 AND ck = 1.000",
         DeleteRow(1, (Decimal("1.000"),), ts=30), node1, ["d"]),
        ("INSERT INTO {t} (pk, ck, v) VALUES (1, 1.0, 3) USING TIMESTAMP 40",
         Write(1, (Decimal("1.0"),), {"v": 3}, ts=40, insert=True), node2, ["c"]),
    ]  # fmt: skip
    with BatchDriver(tmp_path / "p0", [schema]) as worker:
        now = int(time.time())
        for cql, op, builder, ops in steps:
            session.execute(cql.format(t=schema.name))
            assert emitted.add(worker, now, builder.event(op, now=now)) == ops, cql
            cassandra = selected(session, schema)
            assert len(session.execute(f"SELECT * FROM {schema.name}").all()) == len(cassandra) <= 1
            assert cassandra == emitted.rows, cql
    assert len(set(emitted.keys)) == 1, "the row was emitted under several keys"
    assert emitted.rows == {key_text({"pk": 1, "ck": "1"}): {"pk": 1, "ck": "1", "v": 3}}
