"""Avro change events end to end through the real schema registry, read by a client we did not write.

One live pipeline for the module: a real Cassandra node, an agent publishing its CDC writes, and a worker
with `encoding: avro` registering into the session's Apicurio registry (its Confluent-compatible API),
with the default `schema_compatibility` (BACKWARD on the subjects it creates). Two tables:

- `kinds`: every kind of value a user meets (text, int, bigint, boolean, double with NaN and infinities,
  decimal beyond 28 digits, timestamp, date, uuid, blob, list, two maps, set, a non-frozen UDT) under
  inserts, updates of single columns, collection and UDT-field updates, column, row, range and partition
  deletes. confluent-kafka's DeserializingConsumer decodes every record and the last image per key equals
  Cassandra's SELECT at ALL (normalisation in tests/integration/confluent_reader.py).
- `evolving`: written, then ALTER TABLE ADD a column, written, then DROP a column, written, while the
  worker runs: the value subject gets versions 1, 2, 3 under BACKWARD, the key subject stays at 1, each
  phase's records carry the id of its version, and a consumer pinned to the newest version reads every
  event of the topic (that is what BACKWARD promises).

Subjects, versions, levels and schemas are read back with the registry's own REST API.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import random
import struct
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import (
    CleanEvent,
    by_key,
    chain_problems,
    compare,
    final_images,
    read_topic_records,
    select_rows,
)
from infra.cassandra import CassandraNode
from infra.registry import SchemaRegistry
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.confluent_reader import image_normaliser, read_with_confluent
from tests.integration.worker_harness import WorkerProcess, group_lag, topic_ends, worker_config

pytest.importorskip(
    "confluent_kafka.schema_registry.avro", reason='needs pip install "confluent-kafka[avro,schemaregistry]"'
)

RAW_PARTITIONS = 6
KINDS_KEYS = 24
EVOLVING_ROWS = 12
KINDS_COLUMNS = (
    "id int, ck int, t text, i int, b bigint, flag boolean, d double, dec decimal, ts timestamp, "
    "day date, u uuid, raw blob, nums list<int>, attrs map<text, int>, pairs map<int, text>, "
    "tags set<text>, addr address, PRIMARY KEY (id, ck)"
)
DECIMALS = ("12.50", "-0.001", "1E+3", "0", "-98765432109876543210.0123456789012345678901")
DOUBLES = (0.5, -1e300, 2.5e-308, float("nan"), float("inf"), float("-inf"))


# ---------------------------------------------------------------------------------------------------------
# the registry's own API


def registry_get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=10) as response:
        return json.loads(response.read())


def subject_path(subject: str) -> str:
    return "/subjects/" + urllib.parse.quote(subject, safe="")


def committed_records(bootstrap: str, topic: str) -> list[tuple[int, int, int, bytes, bytes | None]]:
    """(partition, offset, timestamp, key, value) of every committed record, read by our own reader."""
    return asyncio.run(read_topic_records(bootstrap, topic))


def schema_id_of(data: bytes) -> int:
    """The registry id in a record's Confluent frame (magic byte 0, 4-byte big-endian id)."""
    magic, schema_id = struct.unpack_from(">bI", data)
    assert magic == 0, f"not in the Confluent wire format: {data[:8]!r}"
    return int(schema_id)


# ---------------------------------------------------------------------------------------------------------
# the live pipeline


@dataclass(slots=True)
class Live:
    """The module's pipeline and what the workload did to it."""

    bootstrap: str
    registry_url: str
    keyspace: str
    prefix: str
    schemas: dict[str, TableSchema] = field(default_factory=dict)
    #: `evolving`'s clean topic ends (partition -> offset) after phase 1 and after phase 2
    phase_ends: list[dict[int, int]] = field(default_factory=list)
    statements: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=dict)

    def topic(self, table: str) -> str:
        return f"{self.prefix}.{self.keyspace}.{table}"


def _kinds_statements(ks: str, seed: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """A randomized history of every write kind on `kinds`, every column's type among its values."""
    rng = random.Random(seed)
    table = f"{ks}.kinds"
    epoch = datetime.datetime(1970, 1, 1)

    def row_values(i: int) -> tuple[Any, ...]:
        return (
            rng.choice([f"text {i}", "ünïcode ✓", ""]),
            rng.randrange(-(2**31), 2**31),
            rng.randrange(-(2**63), 2**63),
            rng.random() < 0.5,
            rng.choice(DOUBLES),
            decimal.Decimal(rng.choice(DECIMALS)),
            epoch + datetime.timedelta(milliseconds=rng.randrange(-(6 * 10**11), 4 * 10**12)),
            datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randrange(-20_000, 40_000)),
            uuid.UUID(int=rng.getrandbits(128), version=4),
            rng.randbytes(rng.randrange(0, 12)),
            [rng.randrange(100) for _ in range(rng.randrange(1, 4))],
            {f"k{j}": rng.randrange(1000) for j in range(rng.randrange(1, 3))},
            {rng.randrange(-50, 50): f"p{j}" for j in range(rng.randrange(1, 3))},
            {f"tag{rng.randrange(9)}" for _ in range(rng.randrange(1, 4))},
            f"{i} Main St",
            rng.randrange(10_000, 99_999),
        )

    insert = (
        f"INSERT INTO {table} (id, ck, t, i, b, flag, d, dec, ts, day, u, raw, nums, attrs, pairs, tags, addr) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, {street: %s, zip: %s})"
    )
    for key in range(KINDS_KEYS):
        for ck in range(3):
            yield insert, (key, ck, *row_values(key))
    where = "WHERE id = %s AND ck = %s"
    for step in range(240):
        key, ck = rng.randrange(KINDS_KEYS), rng.randrange(3)
        at = (key, ck)
        kind = step % 16
        if kind == 0:
            yield f"UPDATE {table} SET t = %s, i = %s {where}", (f"step {step}", step, *at)
        elif kind == 1:
            yield f"UPDATE {table} SET nums = nums + %s {where}", ([step, step + 1], *at)
        elif kind == 2:
            yield f"UPDATE {table} SET attrs[%s] = %s {where}", (f"k{step % 4}", step, *at)
        elif kind == 3:
            yield f"DELETE attrs[%s] FROM {table} {where}", (f"k{step % 3}", *at)
        elif kind == 4:
            yield f"UPDATE {table} SET tags = tags + %s {where}", ({f"tag{step % 11}"}, *at)
        elif kind == 5:
            yield f"UPDATE {table} SET tags = tags - %s {where}", ({f"tag{step % 9}"}, *at)
        elif kind == 6:
            yield f"UPDATE {table} SET pairs = pairs + %s {where}", ({step % 60 - 30: f"s{step}"}, *at)
        elif kind == 7:
            yield f"UPDATE {table} SET addr.zip = %s {where}", (step, *at)
        elif kind == 8:
            yield f"UPDATE {table} SET addr = {{street: %s, zip: %s}} {where}", (f"{step} Elm St", step, *at)
        elif kind == 9:
            values = row_values(key)
            yield (
                f"UPDATE {table} SET b = %s, flag = %s, d = %s, dec = %s, ts = %s, day = %s, u = %s, "
                f"raw = %s {where}",
                (*values[2:10], *at),
            )
        elif kind == 10:
            yield f"DELETE t, nums, addr FROM {table} {where}", at
        elif kind == 11:
            yield f"UPDATE {table} SET d = null, dec = null {where}", at
        elif kind == 12:
            yield f"DELETE FROM {table} {where}", at
        elif kind == 13:
            yield f"DELETE FROM {table} WHERE id = %s AND ck >= %s", at
        elif kind == 14 and step % 32 == 14:
            yield f"DELETE FROM {table} WHERE id = %s", (key,)
        else:
            yield insert, (*at, *row_values(key))


@pytest.fixture(scope="module")
def live(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    schema_registry: SchemaRegistry,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    ks = unique_name("avro")
    run = Live(kafka_bootstrap, schema_registry.spec.ccompat_url, ks, unique_name("avroclean"))
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TYPE {ks}.address (street text, zip int)")
    session.execute(f"CREATE TABLE {ks}.kinds ({KINDS_COLUMNS}) WITH cdc = true")
    session.execute(f"CREATE TABLE {ks}.evolving (id int PRIMARY KEY, name text, score int) WITH cdc = true")
    workdir = tmp_path_factory.mktemp("avro-registry")
    began = time.monotonic()
    with running_agents() as agents:
        agent = new_agent(
            agents, workdir, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks]
        )
        agent.start()
        agent.wait_healthy()
        app_id = unique_name("avro-w")
        worker = WorkerProcess(
            workdir,
            worker_config(
                bootstrap=kafka_bootstrap,
                raw_topic=agent.raw_topic,
                schema_topic=agent.schema_topic,
                raw_partitions=RAW_PARTITIONS,
                data_directory=workdir / "worker-data",
                app_id=app_id,
                worker_id="avro-w1",
                topic_prefix=run.prefix,
                worker={"encoding": "avro", "schema_registry_url": run.registry_url},
            ),
            "avro-w1",
        )

        def execute(table: str, text: str, args: tuple[Any, ...] = ()) -> None:
            session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
            run.statements[table] += 1

        def settle() -> None:
            """Until the agent published a raw event per statement and the worker committed them all."""
            total = sum(run.statements.values())
            wait_until(
                lambda: sum(topic_ends(kafka_bootstrap, agent.raw_topic).values()) >= total,
                120,
                lambda: f"the agent to publish {total} raw events:\n{agent.log_tail()}",
                interval_s=0.5,
            )
            wait_until(
                lambda: group_lag(kafka_bootstrap, app_id, agent.raw_topic) == 0,
                120,
                lambda: f"the worker to commit every raw event:\n{worker.log_tail()}",
                interval_s=0.5,
            )

        try:
            worker.start()
            worker.wait_healthy(90)
            run.seconds["started"] = time.monotonic() - began
            for text, args in _kinds_statements(ks, seed=26):
                execute("kinds", text, args)
            evolving = f"{ks}.evolving"
            for i in range(EVOLVING_ROWS):
                execute(
                    "evolving",
                    f"INSERT INTO {evolving} (id, name, score) VALUES (%s, %s, %s)",
                    (i, f"a{i}", i),
                )
            for i in range(0, EVOLVING_ROWS, 3):
                execute("evolving", f"UPDATE {evolving} SET score = %s WHERE id = %s", (100 + i, i))
            settle()
            run.phase_ends.append(topic_ends(kafka_bootstrap, run.topic("evolving")))

            session.execute(f"ALTER TABLE {evolving} ADD email text")
            for i in range(0, EVOLVING_ROWS, 2):
                execute(
                    "evolving", f"UPDATE {evolving} SET email = %s WHERE id = %s", (f"b{i}@example.org", i)
                )
            for i in range(EVOLVING_ROWS, EVOLVING_ROWS + 4):
                execute(
                    "evolving",
                    f"INSERT INTO {evolving} (id, name, score, email) VALUES (%s, %s, %s, %s)",
                    (i, f"b{i}", i, f"b{i}@example.org"),
                )
            execute("evolving", f"DELETE FROM {evolving} WHERE id = %s", (1,))
            settle()
            run.phase_ends.append(topic_ends(kafka_bootstrap, run.topic("evolving")))

            session.execute(f"ALTER TABLE {evolving} DROP score")
            for i in range(0, EVOLVING_ROWS + 4, 3):
                execute("evolving", f"UPDATE {evolving} SET name = %s WHERE id = %s", (f"c{i}", i))
            execute("evolving", f"INSERT INTO {evolving} (id, name) VALUES (%s, %s)", (99, "c99"))
            execute("evolving", f"DELETE FROM {evolving} WHERE id = %s", (2,))
            settle()
            run.seconds["workload"] = time.monotonic() - began - run.seconds["started"]
            catalog = load_schema_from_session(session, [ks], with_system_schema=False)
            run.schemas = {t.table: t for t in catalog.tables()}
            yield run
        finally:
            worker.ensure_stopped()


# ---------------------------------------------------------------------------------------------------------
# reading back


def confluent_events(live: Live, table: str, *, reader_schema: str | None = None) -> list[CleanEvent]:
    """Every record of a table's clean topic as confluent-kafka decodes it, in the clean topics' JSON
    form; asserts that it read exactly the committed records our own reader sees."""
    topic = live.topic(table)
    records = read_with_confluent(live.bootstrap, live.registry_url, topic, reader_schema=reader_schema)
    committed = committed_records(live.bootstrap, topic)
    assert sorted((r.partition, r.offset) for r in records) == sorted((p, o) for p, o, *_ in committed), (
        f"{topic}: confluent-kafka read {len(records)} records, the topic holds {len(committed)} committed"
    )
    normalise = image_normaliser(live.schemas[table])
    events = []
    for r in records:
        value = None
        if r.value is not None:
            value = {
                **r.value,
                "before": normalise(r.value["before"]),
                "after": normalise(r.value["after"]),
            }
        key = normalise(r.key)
        assert key is not None
        events.append(CleanEvent(r.partition, r.offset, 0, key, value))
    return events


def assert_chains(events: list[CleanEvent], schema: TableSchema) -> None:
    """Each key's history is one event per change (cdc.verify.oracle.chain_problems), read with the
    writer's schemas: through a reader schema without a dropped column, a change of only that column
    reads as a no-op."""
    problems = [p for history in by_key(events).values() for p in chain_problems(history)]
    assert not problems, f"{schema.name}: {len(problems)} broken histories, first: {problems[:5]}"


def assert_final_images(events: list[CleanEvent], session: Any, schema: TableSchema) -> None:
    """The last image per key equals Cassandra's SELECT at ALL."""
    expected = select_rows(session, schema)
    difference = compare(expected, final_images(events))
    assert difference.clean, f"{schema.name}: {difference.summary(3)}"
    assert expected, f"{schema.name}: the workload left no rows; nothing was compared"


# ---------------------------------------------------------------------------------------------------------
# the tests


def test_subjects_follow_the_topic_name_strategy(live: Live) -> None:
    subjects = {s for s in registry_get(live.registry_url, "/subjects") if s.startswith(f"{live.prefix}.")}
    expected = {f"{live.topic(t)}-{part}" for t in ("kinds", "evolving") for part in ("key", "value")}
    assert subjects == expected, f"subjects in the registry: {sorted(subjects)}"
    for subject in expected:
        level = registry_get(live.registry_url, f"/config/{urllib.parse.quote(subject, safe='')}")
        assert level["compatibilityLevel"] == "BACKWARD", f"{subject}: {level}"
    # every record is framed with an id of its own topic's subject
    for table in ("kinds", "evolving"):
        topic = live.topic(table)
        ids = {
            part: {
                registry_get(live.registry_url, f"{subject_path(f'{topic}-{part}')}/versions/{v}")["id"]
                for v in registry_get(live.registry_url, f"{subject_path(f'{topic}-{part}')}/versions")
            }
            for part in ("key", "value")
        }
        for _, _, _, key, value in committed_records(live.bootstrap, topic):
            assert schema_id_of(key) in ids["key"], f"{topic}: key framed with id {schema_id_of(key)}: {ids}"
            if value is not None:
                assert schema_id_of(value) in ids["value"], f"{topic}: value id {schema_id_of(value)}: {ids}"


def test_add_and_drop_column_register_backward_compatible_versions(live: Live, session: Any) -> None:
    url, topic = live.registry_url, live.topic("evolving")
    value, key = subject_path(f"{topic}-value"), subject_path(f"{topic}-key")
    assert registry_get(url, f"{value}/versions") == [1, 2, 3]
    assert registry_get(url, f"{key}/versions") == [1], "the key did not change, its subject must not"
    assert registry_get(url, f"/config/{urllib.parse.quote(f'{topic}-value', safe='')}") == {
        "compatibilityLevel": "BACKWARD"
    }
    versions = [registry_get(url, f"{value}/versions/{v}") for v in (1, 2, 3)]
    columns = [{f["name"] for f in _value_record(json.loads(v["schema"]))["fields"]} for v in versions]
    assert columns == [{"id", "name", "score"}, {"id", "name", "score", "email"}, {"id", "name", "email"}]

    # each phase's records carry the id of the version its schema registered, and only its columns
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    writer_schema_reader = AvroDeserializer(SchemaRegistryClient({"url": url}))
    context = SerializationContext(topic, MessageField.VALUE)
    ends = [*live.phase_ends, None]
    seen = Counter()
    for partition, offset, _, _, data in committed_records(live.bootstrap, topic):
        if data is None:
            continue
        phase = next(n for n, end in enumerate(ends) if end is None or offset < end.get(partition, 0))
        assert schema_id_of(data) == versions[phase]["id"], f"{partition}@{offset}: phase {phase + 1}"
        envelope = writer_schema_reader(data, context)
        for image in (envelope["before"], envelope["after"]):
            assert image is None or set(image) == columns[phase], f"phase {phase + 1}: {image}"
        seen[phase] += 1
    assert sorted(seen) == [0, 1, 2], f"change events per phase: {dict(seen)}"

    # BACKWARD in practice: a consumer pinned to the newest version reads every event of the topic,
    # older events with the added column as null and the dropped one ignored
    schema = live.schemas["evolving"]
    assert_chains(confluent_events(live, "evolving"), schema)
    pinned = confluent_events(live, "evolving", reader_schema=versions[2]["schema"])
    for event in pinned:
        for image in (event.value or {}).get("before"), (event.value or {}).get("after"):
            assert image is None or set(image) == columns[2], image
    assert_final_images(pinned, session, schema)


def _value_record(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row record inside an Envelope schema (the `before` field's non-null branch)."""
    before = next(f for f in envelope["fields"] if f["name"] == "before")
    return next(b for b in before["type"] if b != "null")


def test_confluent_deserializer_decodes_every_event_to_cassandras_rows(live: Live, session: Any) -> None:
    schema = live.schemas["kinds"]
    began = time.monotonic()
    events = confluent_events(live, "kinds")
    read_s = time.monotonic() - began
    ops = Counter(e.value["op"] if e.value is not None else "tombstone" for e in events)
    assert ops["c"] and ops["u"] and ops["d"], ops
    assert ops["tombstone"] == ops["d"], f"a tombstone follows each delete: {ops}"
    assert_chains(events, schema)
    assert_final_images(events, session, schema)
    assert {tuple(e.key) for e in events} == {("id", "ck")}, "keys must be the primary key columns"
    # every column came through non-null somewhere, so every type's decoding was compared
    columns = {c.name for c in schema.all_columns()}
    seen = {
        c
        for e in events
        if e.value and e.value["after"]
        for c, v in e.value["after"].items()
        if v is not None
    }
    assert seen == columns, f"columns never non-null: {sorted(columns - seen)}"
    print(
        f"\navro pipeline: worker up in {live.seconds['started']:.1f} s, {sum(live.statements.values())} writes "
        f"through agent + worker in {live.seconds['workload']:.1f} s; confluent-kafka decoded "
        f"{len(events)} records of {live.topic('kinds')} in {read_s:.1f} s ({dict(ops)})"
    )
