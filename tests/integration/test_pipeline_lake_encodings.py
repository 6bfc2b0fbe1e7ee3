"""The lake job reads every clean-topic encoding: JSON, Kafka Connect JSON (`json_schema`) and Avro with
the schema registry (Confluent wire format), into Delta tables equal to Cassandra's SELECT at ALL and to
each other.

One agent publishes a keyspace's writes; three workers read its raw topic, each writing the clean topics
of one encoding (the Avro one registering into the session's registry). Midway the table gains a column
(ALTER TABLE ADD), so the Avro topic's records carry two schema ids and every topic holds events of two
table schema versions. Bad input stops the job with an error naming the record, and nothing of the batch
reaches the lake: a topic in another encoding than configured, and a record whose schema id the registry
does not know.
"""

from __future__ import annotations

import asyncio
import decimal
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records, select_rows
from infra.cassandra import CassandraNode
from infra.registry import SchemaRegistry
from pipeline.errors import PipelineError
from pipeline.lake_job import LakeJob
from pipeline.lake_reader import collect_lake_images
from pipeline.lake_schema import KEY_COLUMN, OP_COLUMN, lake_table_path, normalize_json_form
from runtime.config import CdcConfig, KafkaConfig, PipelineConfig
from schemas.change_event import clean_topic_name
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, worker_config

RAW_PARTITIONS = 6
ENCODINGS = ("json", "json_schema", "avro")
TABLE = "kinds"


@dataclass(slots=True)
class Feed:
    keyspace: str
    bootstrap: str
    schema_topic: str
    registry_url: str
    prefixes: dict[str, str]
    """Clean topic prefix of each encoding's worker."""
    schema: TableSchema

    def config(self, lake: Path, encoding: str, *, prefix: str | None = None) -> CdcConfig:
        return CdcConfig(
            cluster="acceptance",
            kafka=KafkaConfig(bootstrap_servers=self.bootstrap, schema_topic=self.schema_topic),
            pipeline=PipelineConfig(
                lake_directory=lake,
                clean_topic_prefix=prefix or self.prefixes[encoding],
                encoding=encoding,  # type: ignore[arg-type]
                schema_registry_url=self.registry_url,
                max_offsets_per_trigger=150,
            ),
        )


def _write(session: Any, statement: str, args: tuple[Any, ...] = ()) -> None:
    session.execute(SimpleStatement(statement, consistency_level=ConsistencyLevel.ALL), args)


def _workload(session: Any, ks: str) -> None:
    table = f"{ks}.{TABLE}"
    for i in range(60):
        _write(
            session,
            f"INSERT INTO {table} (id, name, ratio, price, born, seen, raw, tags, attrs, pairs, ids, pos, addr) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, ({i}, 'x{i}'), {{street: %s, zip: %s}})",
            (
                i, f"n{i}", float("nan") if i % 9 == 0 else i / 7, decimal.Decimal(f"{i}.{i:02d}"), f"19{50 + i % 50}-0{1 + i % 9}-1{i % 9}",
                1_700_000_000_000 + i * 1000, bytes([i % 256, 0, 255]), {f"t{i % 4}", "all"}, {"a": i, "b": -i},
                {i: f"p{i}", -i - 1: "minus"}, {uuid.UUID(int=i + 1): i}, f"{i} Main St", i,
            ),
        )  # fmt: skip
    for step in range(80):
        i = (step * 7) % 60
        if step % 5 == 0:
            _write(session, f"DELETE FROM {table} WHERE id = %s", (i,))
        elif step % 5 == 1:
            _write(
                session,
                f"UPDATE {table} SET tags = tags + %s, attrs['c'] = %s WHERE id = %s",
                ({f"s{step}"}, step, i),
            )
        else:
            _write(
                session,
                f"UPDATE {table} SET name = %s, price = %s WHERE id = %s",
                (f"u{step}", decimal.Decimal(f"-{step}.5"), i),
            )


@pytest.fixture(scope="module")
def feed(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    schema_registry: SchemaRegistry,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Feed]:
    ks = unique_name("lakeenc")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TYPE {ks}.address (street text, zip int)")
    session.execute(
        f"CREATE TABLE {ks}.{TABLE} (id int PRIMARY KEY, name text, ratio double, price decimal, born date, "
        "seen timestamp, raw blob, tags set<text>, attrs map<text, int>, pairs map<int, text>, "
        "ids map<uuid, int>, pos frozen<tuple<int, text>>, addr address) WITH cdc = true"
    )
    workdir = tmp_path_factory.mktemp("lake-encodings")
    registry_url = schema_registry.spec.ccompat_url
    with running_agents() as agents:
        agent = new_agent(
            agents, workdir, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks],
            agent={"schema_refresh_interval_s": 1},
        )  # fmt: skip
        agent.start()
        agent.wait_healthy()
        workers, prefixes, groups = [], {}, []
        for encoding in ENCODINGS:
            prefix, app_id = unique_name(f"enc_{encoding}"), unique_name(f"encw_{encoding}")
            prefixes[encoding] = prefix
            groups.append(app_id)
            extra: dict[str, Any] = {"encoding": encoding}
            if encoding == "avro":
                extra["schema_registry_url"] = registry_url
            workers.append(
                WorkerProcess(
                    workdir,
                    worker_config(
                        bootstrap=kafka_bootstrap,
                        raw_topic=agent.raw_topic,
                        schema_topic=agent.schema_topic,
                        raw_partitions=RAW_PARTITIONS,
                        data_directory=workdir / f"data-{encoding}",
                        app_id=app_id,
                        worker_id=f"enc-{encoding}",
                        topic_prefix=prefix,
                        worker=extra,
                    ),
                    f"worker-{encoding}",
                )
            )
        try:
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.wait_healthy(120)
            _workload(session, ks)
            _write(session, f"ALTER TABLE {ks}.{TABLE} ADD grade int")
            wait_until(
                lambda: _idle(kafka_bootstrap, groups, agent.raw_topic), 180, workers[-1].log_tail, 1.0
            )
            for i in range(0, 60, 3):  # a change after the table gained its column, on every topic
                _write(
                    session, f"UPDATE {ks}.{TABLE} SET grade = %s, name = %s WHERE id = %s", (i, f"g{i}", i)
                )
            wait_until(
                lambda: _idle(kafka_bootstrap, groups, agent.raw_topic), 180, workers[-1].log_tail, 1.0
            )
            catalog = load_schema_from_session(session, [ks], with_system_schema=False)
            schema = catalog.by_name(ks, TABLE)
            assert schema is not None and "grade" in schema.regular_columns
            yield Feed(ks, kafka_bootstrap, agent.schema_topic, registry_url, prefixes, schema)
        finally:
            for worker in workers:
                worker.ensure_stopped()


def _idle(bootstrap: str, groups: list[str], raw_topic: str) -> bool:
    return all(group_lag(bootstrap, group, raw_topic) == 0 for group in groups)


def _lake_rows(spark: Any, lake: Path, schema: TableSchema) -> set[tuple[Any, ...]]:
    """Every row of a lake table with its key and op, without the clean-topic positions (each encoding's
    topic has its own partitions and offsets)."""
    frame = spark.read.format("delta").load(str(lake_table_path(lake, schema.keyspace, schema.table)))
    names = [c.name for c in schema.all_columns()] + [KEY_COLUMN, OP_COLUMN]
    return {tuple(repr(r[n]) for n in names) for r in frame.select(*names).collect()}


@pytest.fixture(scope="module")
def lakes(spark: Any, feed: Feed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each encoding's topics through the lake job once, into a lake of its own."""
    out = {}
    for encoding in ENCODINGS:
        lake = tmp_path_factory.mktemp(f"lake-{encoding}")
        summary = LakeJob(spark, feed.config(lake, encoding), once=True).run()
        assert summary.batches > 1 and summary.changes > 0, summary.describe()
        out[encoding] = lake
    return out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_lake_of_each_encoding_equals_cassandra(
    encoding: str, spark: Any, session: Any, feed: Feed, lakes: dict[str, Path]
) -> None:
    expected = {k: normalize_json_form(feed.schema, v) for k, v in select_rows(session, feed.schema).items()}
    path = lake_table_path(lakes[encoding], feed.keyspace, TABLE)
    got = collect_lake_images(spark, path, feed.schema)
    wrong = [k for k in set(expected) & set(got) if expected[k] != got[k]]
    assert set(got) == set(expected) and not wrong, (
        f"{len(set(expected) - set(got))} missing, {len(set(got) - set(expected))} extra, {len(wrong)} wrong: "
        f"{[(expected[k], got[k]) for k in wrong[:2]]}"
    )
    assert any(row["grade"] is not None for row in got.values()), "the column added midway reached the lake"
    if encoding != "json":
        assert _lake_rows(spark, lakes[encoding], feed.schema) == _lake_rows(
            spark, lakes["json"], feed.schema
        )


def test_the_avro_topic_changed_schema_midway(feed: Feed) -> None:
    topic = clean_topic_name(feed.prefixes["avro"], feed.keyspace, TABLE)
    records = asyncio.run(read_topic_records(feed.bootstrap, topic))
    ids = {struct.unpack(">bI", value[:5])[1] for *_, value in records if value}
    assert len(ids) == 2, f"value schema ids on {topic}: {ids}"


@pytest.mark.parametrize(
    ("written", "configured"), [("avro", "json"), ("json", "json_schema"), ("json", "avro")]
)
def test_a_topic_in_another_encoding_stops_the_job_and_writes_nothing(
    written: str, configured: str, spark: Any, feed: Feed, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    config = feed.config(lake, configured, prefix=feed.prefixes[written])
    with pytest.raises(PipelineError) as failure:
        LakeJob(spark, config, once=True).run()
    topic = clean_topic_name(feed.prefixes[written], feed.keyspace, TABLE)
    message = str(failure.value)
    assert f"{topic} partition " in message and " offset " in message, message
    assert f"not a change event of encoding {configured!r}" in message, message
    assert f"set pipeline.encoding to {written!r}" in message, message
    assert not lake_table_path(lake, feed.keyspace, TABLE).exists(), "a table was written"


def test_a_schema_id_the_registry_does_not_know_stops_the_job_and_writes_nothing(
    spark: Any, feed: Feed, tmp_path: Path
) -> None:
    """A clean topic of a known table whose second record carries schema id 987654321: the first is a
    good record copied from the Avro topic, so nothing may be written for it either."""
    prefix = unique_name("enc_badid")
    topic = clean_topic_name(prefix, feed.keyspace, TABLE)
    source = clean_topic_name(feed.prefixes["avro"], feed.keyspace, TABLE)
    _, _, _, key, value = next(r for r in asyncio.run(read_topic_records(feed.bootstrap, source)) if r[4])
    assert value is not None
    unknown = struct.pack(">bI", 0, 987_654_321) + value[5:]

    async def publish() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=feed.bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, value, key=key, partition=0)
            await producer.send_and_wait(topic, unknown, key=key[:5] + b"\x02", partition=0)
        finally:
            await producer.stop()

    asyncio.run(publish())
    lake = tmp_path / "lake"
    with pytest.raises(PipelineError) as failure:
        LakeJob(spark, feed.config(lake, "avro", prefix=prefix), once=True).run()
    message = str(failure.value)
    assert f"{topic} partition 0 offset 1" in message, message
    assert "schema id 987654321" in message and feed.registry_url in message, message
    assert "pipeline.schema_registry_url" in message, message
    assert not lake_table_path(lake, feed.keyspace, TABLE).exists(), "a table was written"
