"""Proof with real Kafka Connect: Cassandra -> agent -> worker -> clean topic -> Debezium's JDBC sink -> PostgreSQL.

Nothing here is ours past the clean topic: Kafka Connect's own worker, Debezium's JDBC sink (upserts
keyed by the record key, deletes, tables created and widened from the events' schemas, committed records
only) and PostgreSQL. The clean topic is written once as Kafka Connect JSON (`encoding: json_schema`, read
by Connect's JsonConverter) and once as Avro through the real schema registry (read by Apicurio's
AvroConverter). A workload of inserts, updates, nulls, column, row, range and partition deletes, a row
that lives by one cell, and TTLs of rows and of cells runs through the live pipeline, on a table with a
composite partition key, two clustering columns (one DESC), one column of each scalar CQL type and the
collections the sink stores (lists and sets as arrays, a text-keyed map as hstore). The PostgreSQL table
must then equal Cassandra's `SELECT` at consistency ALL: once while the TTL'd rows live, and again after
they expired.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import random
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.util import uuid_from_time

from cassandra_model.cql_types import CqlType, MapType
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import compare, select_rows
from infra.cassandra import CassandraNode
from infra.connect import Connector, ConnectWorker, apicurio_avro_converters
from infra.postgres import PostgresServer
from infra.registry import SchemaRegistry
from schemas.driver_rows import key_text
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.connect_fixtures import (
    column_types,
    create_extension,
    postgres_fixture,  # noqa: F401 (the postgres fixture)
    sink_into,
    start_connect_fixture,  # noqa: F401 (the start_connect fixture)
    table_name,
    table_rows,
)
from tests.integration.worker_harness import WorkerProcess, worker_config

RAW_PARTITIONS = 6
#: long enough for the whole workload to reach PostgreSQL before the TTL'd cells expire
TTL_S = int(os.environ.get("CDC_TEST_SINK_TTL_S", "45"))
CONVERGE_S = 120

TABLE = "items"
#: one column of each scalar CQL type, and the collections the sink stores. Not here, because the sink
#: cannot store them: duration, tuples and UDTs (Connect structs: "Failed to resolve column type for
#: schema: STRUCT (cdc.change.Duration)"), maps with non-text keys, and nested collections ("Unable to
#: find server array type for provided name integer[]")
COLUMNS = {
    "name": "text",
    "code": "ascii",
    "qty": "int",
    "small": "smallint",
    "tiny": "tinyint",
    "big": "bigint",
    "flag": "boolean",
    "ratio": "double",
    "score": "float",
    "price": "decimal",
    "huge": "varint",
    "at": "timestamp",
    "born": "date",
    "tod": "time",
    "id": "uuid",
    "tid": "timeuuid",
    "addr": "inet",
    "data": "blob",
    # collections the sink stores: lists and sets as PostgreSQL arrays, text-keyed maps as hstore
    "tags": "list<text>",
    "nums": "set<int>",
    "attrs": "map<text, int>",
}
#: Under ``decimal_handling: precise`` Avro writes a CQL decimal as the record cdc.change.Decimal {unscaled,
#: scale}, a Connect struct the sink has no column type for ("Failed to resolve column type for schema:
#: STRUCT (cdc.change.Decimal)"): the Avro runs use ``string`` (exact, stored as text) and ``double``
#: (stored as double precision, the nearest double); ``json_schema`` writes strings under ``precise``.
DECIMAL_FORMS: dict[str, Callable[[str], Any]] = {
    "precise": lambda text: text,
    "string": lambda text: format(Decimal(text), "f"),
    "double": lambda text: float(Decimal(text)),
}
REGIONS = ("eu", "us")
SHARDS = (0, 1, 2)
DAYS = (datetime.date(1900, 1, 1), datetime.date(2024, 2, 29), datetime.date(2999, 12, 31))
SEQS = range(5)


def _create_table(session: Any, keyspace: str, columns: dict[str, str]) -> TableSchema:
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    regular = "".join(f"{name} {cql}, " for name, cql in columns.items())
    session.execute(
        f"CREATE TABLE {keyspace}.{TABLE} (region text, shard int, day date, seq bigint, {regular}"
        "PRIMARY KEY ((region, shard), day, seq)) WITH CLUSTERING ORDER BY (day DESC, seq ASC) "
        "AND cdc = true AND gc_grace_seconds = 3600"
    )
    catalog = load_schema_from_session(session, [keyspace], with_system_schema=False)
    return next(t for t in catalog.tables() if t.table == TABLE)


def _values(rng: random.Random, i: int) -> dict[str, Any]:
    """Values of every regular column, edge cases included (pre-1970 instants, exponent decimals, IPv6).

    Timestamps stay within 1901-2038: the oracle reads Cassandra through cassandra-driver, which turns
    milliseconds into a datetime through a float and, for instants centuries away, lands a millisecond
    short (9272786517366 ms reads as ...365). PostgreSQL holds the exact value.
    """
    millis = rng.choice([-1, 0, 1_700_000_000_123, rng.randrange(-(2**31) * 1000, 2**31 * 1000)])
    return {
        "name": rng.choice(["tea", "naïve ☕ ", "", 'O\'Reilly "q"']) + str(i),
        "code": f"A-{i}",
        "qty": rng.randint(-(2**31), 2**31 - 1),
        "small": rng.randint(-(2**15), 2**15 - 1),
        "tiny": rng.randint(-128, 127),
        "big": rng.randint(-(2**63), 2**63 - 1),
        "flag": rng.random() < 0.5,
        "ratio": rng.uniform(-1e9, 1e9),
        "score": rng.randint(-4000, 4000) / 8,  # exact in float32: PostgreSQL's real prints it back exactly
        "price": Decimal(rng.choice(["1.50", "-0.001", "12345678901234567890.123456789", "1E+3", "0"])),
        "huge": rng.randint(-(10**30), 10**30),
        "at": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=millis),
        "born": rng.choice([datetime.date(1, 1, 1), datetime.date(1969, 12, 31), datetime.date(2100, 6, 15)]),
        # nanoseconds, in whole microseconds: the json_schema column is PostgreSQL's `time` (microseconds)
        "tod": rng.randrange(0, 86_400_000_000) * 1000,
        "id": uuid.UUID(int=rng.getrandbits(128), version=4),
        "tid": uuid_from_time(1_700_000_000 + rng.random() * 1000),
        "addr": rng.choice(["10.0.0.1", "::1", "2001:db8::7", "192.168.255.254"]),
        "data": rng.randbytes(rng.randrange(0, 17)),
        "tags": rng.choice([["a", "b", "a"], ["é"], None]),
        "nums": set(rng.sample(range(-5, 50), rng.randrange(0, 4))) or None,
        "attrs": {f"k{j}": rng.randint(-9, 9) for j in range(rng.randrange(0, 3))} or None,
    }


Statement = tuple[str, tuple[Any, ...]]


def _workload(keyspace: str, columns: dict[str, str], seed: int) -> tuple[list[Statement], list[Statement]]:
    """(the main workload, the TTL'd writes that come last); every kind of write the sink must follow."""
    rng = random.Random(seed)
    table = f"{keyspace}.{TABLE}"
    names = list(columns)
    where = "region = ? AND shard = ? AND day = ? AND seq = ?"
    insert = f"INSERT INTO {table} (region, shard, day, seq, {', '.join(names)}) VALUES (?, ?, ?, ?{', ?' * len(names)})"
    keys = [(r, s, d, q) for r in REGIONS for s in SHARDS for d in DAYS for q in SEQS]
    main: list[Statement] = []

    def values(i: int) -> tuple[Any, ...]:
        row = _values(rng, i)
        return tuple(row[n] for n in names)

    for i, key in enumerate(keys):
        main.append((insert, (*key, *values(i))))
    updatable = [n for n in ("name", "price", "at", "ratio", "tod", "data") if n in columns]
    for step in range(60):
        key = rng.choice(keys)
        kind = step % 6
        if kind in (0, 1, 2):  # update some columns
            chosen = rng.sample(updatable, 2)
            row = _values(rng, 1000 + step)
            sets = ", ".join(f"{n} = ?" for n in chosen)
            main.append((f"UPDATE {table} SET {sets} WHERE {where}", (*(row[n] for n in chosen), *key)))
        elif kind == 3:  # set to null (cell tombstones); change collection elements
            main.append((f"UPDATE {table} SET qty = null, data = null WHERE {where}", key))
            if "tags" in columns:
                main.append(
                    (
                        f"UPDATE {table} SET tags = tags + ?, nums = nums - ? WHERE {where}",
                        (["z"], {1, 2}, *key),
                    )
                )
                main.append((f"UPDATE {table} SET attrs[?] = ? WHERE {where}", (f"s{step}", step, *key)))
        elif kind == 4:  # delete columns
            main.append((f"DELETE name, tod FROM {table} WHERE {where}", key))
        else:  # delete the row
            main.append((f"DELETE FROM {table} WHERE {where}", key))
    for region, shard in (("eu", 0), ("us", 1), ("eu", 2)):  # range deletes within one day
        low = rng.randrange(0, 3)
        main.append(
            (
                f"DELETE FROM {table} WHERE region = ? AND shard = ? AND day = ? AND seq >= ? AND seq < ?",
                (region, shard, rng.choice(DAYS), low, low + 2),
            )
        )
    main.append((f"DELETE FROM {table} WHERE region = ? AND shard = ? AND day = ?", ("eu", 1, DAYS[0])))
    main.append((f"DELETE FROM {table} WHERE region = ? AND shard = ?", ("us", 2)))  # a partition
    main.append((insert, ("us", 2, DAYS[1], 7, *values(2000))))  # back, newer than the deletion
    # a row that lives by one cell (UPDATE sets no row marker) and dies with it; another that stays
    main.append((f"UPDATE {table} SET name = ? WHERE {where}", ("one cell", "eu", 0, DAYS[2], 90)))
    main.append((f"UPDATE {table} SET name = ? WHERE {where}", ("one cell", "eu", 0, DAYS[2], 91)))
    main.append((f"DELETE name FROM {table} WHERE {where}", ("eu", 0, DAYS[2], 90)))

    ttl: list[Statement] = []
    for q in range(4):  # whole rows that expire
        ttl.append((insert + f" USING TTL {TTL_S}", ("us", 0, DAYS[1], 100 + q, *values(3000 + q))))
    for key in keys[:3]:  # cells that expire in rows that stay (the INSERT's row marker keeps them)
        ttl.append((f"UPDATE {table} USING TTL {TTL_S} SET name = ? WHERE {where}", ("fading", *key)))
    ttl.append(
        (f"UPDATE {table} USING TTL {TTL_S} SET code = ? WHERE {where}", ("fading", "eu", 0, DAYS[2], 92))
    )
    return main, ttl


def _execute(session: Any, statements: list[Statement]) -> None:
    """Each statement prepared (the driver then binds every type by its column, dates of year 1 included),
    at consistency ALL, in order."""
    prepared: dict[str, Any] = {}
    for text, args in statements:
        if text not in prepared:
            prepared[text] = session.prepare(text)
            prepared[text].consistency_level = ConsistencyLevel.ALL
        session.execute(prepared[text], args)


# ---------------------------------------------------------------------------------------------------------
# PostgreSQL rows in the clean topics' JSON form (the form select_rows gives Cassandra's rows in)

_EPOCH = datetime.datetime(1970, 1, 1)


def _json_form(value: Any) -> Any:
    """A value psycopg read, in the change events' JSON form: the sink's column types decide the Python
    type (date, timestamp without time zone holding UTC, time, uuid, bytea)."""
    if isinstance(value, datetime.datetime):
        return (value.replace(tzinfo=None) - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.date):
        return (value - _EPOCH.date()).days
    if isinstance(value, datetime.time):
        return (((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond) * 1000
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list):
        return [_json_form(v) for v in value]
    return value


def _column_form(cql: CqlType, value: Any) -> Any:
    """`_json_form`, and for a map column (hstore: text values) its values back to their CQL type's form."""
    if isinstance(cql, MapType) and isinstance(value, dict):
        return {
            k: None if v is None else int(v) if cql.value.cql() in _INTEGERS else v for k, v in value.items()
        }
    return _json_form(value)


_INTEGERS = frozenset({"tinyint", "smallint", "int", "bigint"})


def _key_text(region: str, shard: int, day: datetime.date, seq: int) -> str:
    """A primary key of the test table in the comparable form of `select_rows`."""
    return key_text({"region": region, "shard": shard, "day": (day - _EPOCH.date()).days, "seq": seq})


def postgres_images(
    postgres: PostgresServer, table: str, schema: TableSchema
) -> dict[str, dict[str, Any]] | None:
    rows = table_rows(postgres, table)
    if rows is None:
        return None
    keys = [c.name for c in (*schema.partition_key, *schema.clustering)]
    images = {}
    for row in rows:
        image = {c.name: _column_form(c.type, row.get(c.name)) for c in schema.all_columns()}
        images[key_text({k: image[k] for k in keys})] = image
    return images


def wait_until_equal(
    session: Any,
    schema: TableSchema,
    postgres: PostgresServer,
    table: str,
    connect_worker: ConnectWorker,
    connector: str,
    worker: WorkerProcess,
    *,
    timeout_s: float,
    decimal_handling: str = "precise",
) -> tuple[dict[str, dict[str, Any]], float]:
    """Poll until the PostgreSQL table equals Cassandra's SELECT at ALL; Cassandra's rows then, and the
    seconds it took.

    Fails at once if the sink task failed, and on timeout with the difference (lost, phantom and wrong
    rows with both sides' values), the connector's state and the worker's log tail.
    """
    last: dict[str, Any] = {}

    def converged() -> bool:
        failures = connect_worker.failures(connector)
        assert not failures, "the JDBC sink failed:\n" + "\n".join(failures)
        assert worker.running, f"the worker exited:\n{worker.log_tail()}"
        expected = _decimals_as(select_rows(session, schema), schema, decimal_handling)
        got = postgres_images(postgres, table, schema)
        difference = compare(expected, got or {})
        last.update(expected=expected, difference=difference, created=got is not None)
        return difference.clean

    def detail() -> str:
        summary = json.dumps(last["difference"].summary(3), indent=1, default=str)
        return (
            f"PostgreSQL table {table} to equal {schema.name} at ALL ({len(last['expected'])} rows; table "
            f"{'created' if last['created'] else 'not created yet'}); difference:\n{summary}\n"
            f"connector: {connect_worker.status(connector)}\nworker log:\n{worker.log_tail(15)}"
        )

    waited = wait_until(converged, timeout_s, detail, interval_s=0.5)
    return last["expected"], waited


def _decimals_as(
    rows: dict[str, dict[str, Any]], schema: TableSchema, mode: str
) -> dict[str, dict[str, Any]]:
    """Cassandra's rows (decimals as ``str(Decimal)``) with each decimal as ``decimal_handling`` writes it."""
    form = DECIMAL_FORMS[mode]
    decimals = [c.name for c in schema.all_columns() if c.type.cql() == "decimal"]
    return {
        key: {**row, **{c: form(row[c]) for c in decimals if row[c] is not None}} for key, row in rows.items()
    }


# ---------------------------------------------------------------------------------------------------------
# the pipeline


def _registry_ids(registry: SchemaRegistry, subject: str) -> tuple[int, int, int]:
    """(ccompat id, content id, global id) of the latest version of a subject."""
    with urllib.request.urlopen(
        f"{registry.spec.ccompat_url}/subjects/{subject}/versions/latest", timeout=10
    ) as r:
        ccompat_id = json.load(r)["id"]
    meta_url = f"{registry.spec.base_url}/apis/registry/v2/groups/default/artifacts/{subject}/meta"
    with urllib.request.urlopen(meta_url, timeout=10) as r:
        meta = json.load(r)
    return ccompat_id, meta["contentId"], meta["globalId"]


class Pipeline:
    """Agent and worker for one keyspace, writing the clean topics under a prefix of their own."""

    def __init__(
        self,
        cassandra_node: CassandraNode,
        bootstrap: str,
        workdir: Path,
        keyspace: str,
        worker: dict[str, Any],
    ) -> None:
        self.prefix = unique_name("sink")
        self.cassandra_node = cassandra_node
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.keyspace = keyspace
        self.worker_settings = worker

    def topic(self, table: str) -> str:
        return f"{self.prefix}.{self.keyspace}.{table}"

    @contextmanager
    def running(self) -> Iterator[WorkerProcess]:
        """The agent and the worker started (the worker healthy); both stopped when the block ends."""
        with running_agents() as agents:
            agent = new_agent(
                agents,
                self.workdir,
                cdc_raw=self.cassandra_node.spec.cdc_raw,
                bootstrap=self.bootstrap,
                keyspaces=[self.keyspace],
                raw_partitions=RAW_PARTITIONS,
            )
            agent.start()
            agent.wait_healthy()
            worker = WorkerProcess(
                self.workdir,
                worker_config(
                    bootstrap=self.bootstrap,
                    raw_topic=agent.raw_topic,
                    schema_topic=agent.schema_topic,
                    raw_partitions=RAW_PARTITIONS,
                    data_directory=self.workdir / "worker-data",
                    app_id=unique_name("sinkw"),
                    worker_id="w1",
                    topic_prefix=self.prefix,
                    worker=self.worker_settings,
                ),
                "worker",
            )
            try:
                worker.start()
                worker.wait_healthy(90)
                yield worker
            finally:
                worker.ensure_stopped()


@pytest.mark.parametrize(
    ("encoding", "decimal_handling"), [("json_schema", "precise"), ("avro", "string"), ("avro", "double")]
)
def test_postgres_table_equals_cassandra_through_kafka_connect(
    encoding: str,
    decimal_handling: str,
    request: pytest.FixtureRequest,
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    start_connect: Callable[[Sequence[Connector]], ConnectWorker],
    postgres: PostgresServer,
    tmp_path: Path,
) -> None:
    keyspace = unique_name(f"sink_{encoding}")
    columns = COLUMNS
    schema = _create_table(session, keyspace, columns)
    worker_settings: dict[str, Any] = {"encoding": encoding, "decimal_handling": decimal_handling}
    converters: dict[str, str] = {}
    registry: SchemaRegistry | None = None
    if encoding == "avro":
        registry = request.getfixturevalue("schema_registry")
        worker_settings["schema_registry_url"] = registry.spec.ccompat_url
        converters = apicurio_avro_converters(registry.spec.base_url)
    main, ttl = _workload(keyspace, columns, seed=26)
    pipeline = Pipeline(cassandra_node, kafka_bootstrap, tmp_path, keyspace, worker_settings)
    topic = pipeline.topic(TABLE)
    table = table_name(topic)
    connector = unique_name(f"sink-{encoding}")
    with pipeline.running() as worker:
        create_extension(postgres, "hstore")
        connect_worker = start_connect([sink_into(postgres, connector, [topic], **converters)])
        _execute(session, main)
        _execute(session, ttl)
        expires_at = time.monotonic() + TTL_S
        rows, live_s = wait_until_equal(
            session,
            schema,
            postgres,
            table,
            connect_worker,
            connector,
            worker,
            timeout_s=CONVERGE_S,
            decimal_handling=decimal_handling,
        )
        assert time.monotonic() < expires_at - 1, (
            "converged only after the TTLs ran out: raise CDC_TEST_SINK_TTL_S"
        )
        expiring = [k for k, v in rows.items() if v["seq"] >= 100]
        fading = [k for k, v in rows.items() if v["name"] == "fading"]
        assert len(expiring) == 4 and len(fading) == 3, (expiring, fading)
        assert len(rows) > 60, f"the workload left only {len(rows)} rows"

        time.sleep(max(0.0, expires_at - time.monotonic()) + 1)
        rows, expired_s = wait_until_equal(
            session,
            schema,
            postgres,
            table,
            connect_worker,
            connector,
            worker,
            timeout_s=CONVERGE_S,
            decimal_handling=decimal_handling,
        )
        assert not set(expiring) & set(rows), "rows whose TTL ran out are still in Cassandra"
        assert all(rows.get(k, {}).get("name") is None for k in fading), "cells whose TTL ran out still read"
        one_cell = [_key_text("eu", 0, DAYS[2], seq) for seq in (90, 91, 92)]
        assert [k in rows for k in one_cell] == [False, True, False], "rows that live by one cell"

    types = column_types(postgres, table)
    assert types["price"] == ("double precision" if decimal_handling == "double" else "text"), types
    print(
        f"\n{encoding}: {len(main) + len(ttl)} writes; PostgreSQL equal to Cassandra {live_s:.1f} s after the "
        f"last write, and at most {expired_s + 1:.1f} s after the TTLs ran out; column types: "
        f"{json.dumps(types, sort_keys=True)}"
    )
    if registry is not None:
        for part in ("key", "value"):
            ccompat_id, content_id, global_id = _registry_ids(registry, f"{topic}-{part}")
            # the frames carry the Confluent-compatible API's ids: content ids, as the converter reads them
            # (Apicurio 2.6's in-memory storage draws both ids from one sequence, so a fresh schema's global
            # id is the same number and use-id=globalId would read these frames too; other storages differ)
            assert ccompat_id == content_id, (part, ccompat_id, content_id, global_id)
