"""Acceptance of `cdc pipeline lake`: a real agent and worker feed the clean topics, Spark (local[2]) merges
them into Delta tables, and Cassandra's `SELECT *` at ALL is the oracle.

Also: the job killed with -9 mid-stream and started again, and the whole topic replayed over a finished
table with a new checkpoint; no row of any Delta version may go back to an older change.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records, select_rows
from infra.cassandra import CassandraNode
from pipeline.lake_job import LakeJob
from pipeline.lake_reader import collect_lake_images, lake_json
from pipeline.lake_schema import (
    KEY_COLUMN,
    OFFSET_COLUMN,
    PARTITION_COLUMN,
    lake_table_path,
    normalize_json_form,
)
from runtime.config import CdcConfig, KafkaConfig, PipelineConfig
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, worker_config

RAW_PARTITIONS = 6  # the agent harness creates its raw topic with 6
TTL_S = 20
ROWS = 120


@dataclass(slots=True)
class Feed:
    """Clean topics of one keyspace, written by a real agent and worker."""

    keyspace: str
    bootstrap: str
    raw_topic: str
    schema_topic: str
    prefix: str
    schemas: dict[str, TableSchema]

    def config(self, lake: Path, **pipeline: Any) -> CdcConfig:
        return CdcConfig(
            cluster="acceptance",
            kafka=KafkaConfig(
                bootstrap_servers=self.bootstrap, raw_topic=self.raw_topic, schema_topic=self.schema_topic
            ),
            pipeline=PipelineConfig(lake_directory=lake, clean_topic_prefix=self.prefix, **pipeline),
        )


AUTO_COMPACT_MIN_FILES = "spark.databricks.delta.autoCompact.minNumFiles"


def _statements(ks: str) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Inserts, updates, deletes of every kind and TTLs on a table of many types and one with clustering
    and statics; some rows are written, deleted and written again."""
    for i in range(ROWS):
        ttl = f" USING TTL {TTL_S}" if i % 15 == 0 else ""
        yield (
            f"INSERT INTO {ks}.typed (id, name, score, ratio, born, seen, raw, tags, attrs, pairs, pos, addr) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, ({i}, 'x{i}'), {{street: %s, zip: %s}}){ttl}",
            (
                i, f"n{i}", i * 10, i / 7, f"19{50 + i % 50}-0{1 + i % 9}-1{i % 9}",
                1_700_000_000_000 + i * 1000, bytes([i % 256, 1, 2]), {f"t{i % 4}", "all"},
                {"a": i, "b": -i}, {i: f"p{i}"}, f"{i} Main St", i,
            ),
        )  # fmt: skip
    for pk in range(10):
        yield f"UPDATE {ks}.events SET s = %s WHERE pk = %s", (f"static{pk}", pk)
        for ck in range(12):
            yield f"INSERT INTO {ks}.events (pk, ck, v) VALUES (%s, %s, %s)", (pk, ck, f"v{pk}.{ck}")
    for step in range(400):
        i, pk, ck = (step * 37) % ROWS, step % 10, (step * 5) % 12
        kind = step % 8
        if kind == 0:
            yield f"UPDATE {ks}.typed SET name = %s, ratio = %s WHERE id = %s", (f"u{step}", float("nan"), i)
        elif kind == 1:
            yield f"UPDATE {ks}.typed SET tags = tags + %s, attrs[%s] = %s WHERE id = %s", (
                {f"s{step}"}, "c", step, i,
            )  # fmt: skip
        elif kind == 2:
            yield f"DELETE FROM {ks}.typed WHERE id = %s", (i,)
        elif kind == 3:
            yield f"INSERT INTO {ks}.typed (id, name) VALUES (%s, %s)", (i, f"again{step}")
        elif kind == 4:
            yield f"DELETE FROM {ks}.events WHERE pk = %s AND ck >= %s AND ck < %s", (pk, ck, ck + 3)
        elif kind == 5:
            yield f"UPDATE {ks}.events SET v = %s WHERE pk = %s AND ck = %s", (f"w{step}", pk, ck)
        elif kind == 6 and step % 48 == 6:
            yield f"DELETE FROM {ks}.events WHERE pk = %s", (pk,)
        else:
            yield f"UPDATE {ks}.typed USING TTL {TTL_S} SET score = %s WHERE id = %s", (step, i)


@pytest.fixture(scope="module")
def feed(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Feed]:
    ks = unique_name("lake")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TYPE {ks}.address (street text, zip int)")
    session.execute(
        f"CREATE TABLE {ks}.typed (id int PRIMARY KEY, name text, score bigint, ratio double, born date, "
        "seen timestamp, raw blob, tags set<text>, attrs map<text, int>, pairs map<int, text>, "
        f"pos frozen<tuple<int, text>>, addr frozen<address>) WITH cdc = true"
    )
    session.execute(
        f"CREATE TABLE {ks}.events (pk int, ck int, v text, s text static, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true AND gc_grace_seconds = 3600"
    )
    workdir = tmp_path_factory.mktemp("lake-feed")
    with running_agents() as agents:
        agent = new_agent(
            agents, workdir, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks]
        )
        agent.start()
        agent.wait_healthy()
        app_id, prefix = unique_name("lw"), unique_name("lakeclean")
        worker = WorkerProcess(
            workdir,
            worker_config(
                bootstrap=kafka_bootstrap,
                raw_topic=agent.raw_topic,
                schema_topic=agent.schema_topic,
                raw_partitions=RAW_PARTITIONS,
                data_directory=workdir / "worker-data",
                app_id=app_id,
                worker_id="lake-w1",
                topic_prefix=prefix,
                worker={"expiry_interval_ms": 500},
            ),
            "lake-w1",
        )
        try:
            worker.start()
            worker.wait_healthy(90)
            for text, args in _statements(ks):
                session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
            expires_by = time.time() + TTL_S + 2
            wait_until(
                lambda: group_lag(kafka_bootstrap, app_id, agent.raw_topic) == 0 and time.time() > expires_by,
                240,
                lambda: worker.log_tail(),
                interval_s=1.0,
            )
            time.sleep(3)  # the expiry timer's last round
            catalog = load_schema_from_session(session, [ks], with_system_schema=False)
            yield Feed(
                ks, kafka_bootstrap, agent.raw_topic, agent.schema_topic, prefix,
                {t.table: t for t in catalog.tables()},
            )  # fmt: skip
        finally:
            worker.ensure_stopped()


def _assert_lake_equals_cassandra(spark: Any, session: Any, feed: Feed, lake: Path) -> None:
    for table, schema in feed.schemas.items():
        expected = {k: normalize_json_form(schema, v) for k, v in select_rows(session, schema).items()}
        got = collect_lake_images(spark, lake_table_path(lake, feed.keyspace, table), schema)
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        wrong = [k for k in set(expected) & set(got) if expected[k] != got[k]]
        assert not (missing or extra or wrong), (
            f"{table}: {len(missing)} missing {missing[:3]}, {len(extra)} extra {extra[:3]}, "
            f"{len(wrong)} wrong, first: {[(expected[k], got[k]) for k in wrong[:2]]}"
        )
        assert expected, f"{table}: the workload left no rows; nothing was compared"


def _positions_never_go_back(spark: Any, path: Path) -> int:
    """Checks every Delta version against the previous one: a key present in both never moves to an
    earlier clean-topic position. Returns how many versions were checked."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    previous: dict[str, tuple[int, int]] = {}
    versions = sorted(r.version for r in history)
    for version in versions:
        frame = spark.read.format("delta").option("versionAsOf", version).load(str(path))
        now = {
            r[KEY_COLUMN]: (r[PARTITION_COLUMN], r[OFFSET_COLUMN])
            for r in frame.select(KEY_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN).collect()
        }
        regressed = [k for k, at in now.items() if k in previous and at < previous[k]]
        assert not regressed, (
            f"{path} version {version}: {len(regressed)} rows went back, e.g. {regressed[:3]}"
        )
        previous = now
    return len(versions)


def _compactions(spark: Any, path: Path) -> tuple[int, int]:
    """(auto compactions, data files the stream added) in a Delta table's history: the first micro-batch
    creates the table with a WRITE, the later ones MERGE."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    metric = {"MERGE": "numTargetFilesAdded", "WRITE": "numFiles"}
    added = sum(int(r.operationMetrics.get(metric.get(r.operation, ""), 0)) for r in history)
    return sum(1 for r in history if r.operation == "OPTIMIZE"), added


@pytest.fixture
def small_compactions(spark: Any) -> Iterator[None]:
    """Auto compaction from 2 small files on (50 by default), so a short stream compacts too: a small
    MERGE writes one file."""
    spark.conf.set(AUTO_COMPACT_MIN_FILES, "2")
    try:
        yield
    finally:
        spark.conf.unset(AUTO_COMPACT_MIN_FILES)


@pytest.mark.usefixtures("small_compactions")
def test_lake_tables_equal_cassandra_and_replays_never_regress_a_row(
    spark: Any, session: Any, feed: Feed, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    config = feed.config(lake, max_offsets_per_trigger=400)
    summary = LakeJob(spark, config, once=True).run()
    assert summary.batches > 1, f"one micro-batch took everything; batching was not exercised: {summary}"
    _assert_lake_equals_cassandra(spark, session, feed, lake)
    assert summary.deleted > 0 and summary.updated > 0, summary
    for table in feed.schemas:  # the stream's small files were compacted, and the rows stayed right
        path = lake_table_path(lake, feed.keyspace, table)
        compactions, added = _compactions(spark, path)
        files = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().numFiles
        assert compactions and files < added, f"{table}: {compactions} compactions, {files} files of {added}"

    # the whole topic again, with a new checkpoint, over the finished tables: older changes arrive after
    # newer ones were applied (including upserts of rows deleted since) and must change nothing
    again = feed.config(lake, max_offsets_per_trigger=300, checkpoint_directory=tmp_path / "fresh-checkpoint")
    replayed = LakeJob(spark, again, once=True).run()
    assert replayed.changes == summary.changes, (replayed, summary)
    assert replayed.inserted == 0 and replayed.updated == 0 and replayed.deleted == 0, replayed.describe()
    _assert_lake_equals_cassandra(spark, session, feed, lake)
    for table in feed.schemas:
        assert _positions_never_go_back(spark, lake_table_path(lake, feed.keyspace, table)) > 2


def test_lake_job_killed_mid_stream_and_restarted_leaves_the_tables_correct(
    spark: Any, session: Any, feed: Feed, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    config = feed.config(lake, max_offsets_per_trigger=250, trigger_interval_s=1)
    config_file = tmp_path / "cdc.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "cluster": "acceptance",
                "kafka": {
                    "bootstrap_servers": feed.bootstrap,
                    "raw_topic": feed.raw_topic,
                    "schema_topic": feed.schema_topic,
                },
                "pipeline": {
                    "lake_directory": str(lake),
                    "clean_topic_prefix": feed.prefix,
                    "max_offsets_per_trigger": 250,
                    "trigger_interval_s": 1,
                    "shuffle_partitions": 2,
                },
            }
        )
    )
    log = (tmp_path / "lake.log").open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "cdc", "pipeline", "lake", "--config", str(config_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        path = lake_table_path(lake, feed.keyspace, "typed")
        commits = lake / "_checkpoints" / "lake" / "commits"
        wait_until(
            lambda: commits.is_dir() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 1,
            300,
            lambda: (tmp_path / "lake.log").read_text()[-3000:],
            interval_s=0.5,
        )
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        log.close()
    done_before = len([p for p in commits.iterdir() if p.name.isdigit()])
    summary = LakeJob(spark, config, once=True).run()
    assert summary.batches > 0, (
        f"the killed job had taken everything ({done_before} batches); nothing resumed"
    )
    _assert_lake_equals_cassandra(spark, session, feed, lake)
    for table in feed.schemas:
        _positions_never_go_back(spark, lake_table_path(lake, feed.keyspace, table))
    frame = lake_json(spark, path, feed.schemas["typed"])
    assert frame.count() == len(select_rows(session, feed.schemas["typed"]))
    assert json.loads(frame.first().json), "lake rows read back as JSON"


async def _copy_without_delete_events(bootstrap: str, source: str, target: str) -> int:
    """Every record of ``source`` to the same partition of ``target``, in order, except the ``d`` events:
    what a reader finds once log compaction has kept only the tombstone of a delete."""
    records = await read_topic_records(bootstrap, source)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(target, max(p for p, *_ in records) + 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    dropped = 0
    try:
        for partition, _, _, key, value in records:
            if value is not None and json.loads(value)["op"] == "d":
                dropped += 1
                continue
            await producer.send_and_wait(target, value, key=key, partition=partition)
    finally:
        await producer.stop()
    return dropped


def test_a_delete_known_only_by_its_tombstone_deletes_the_row(
    spark: Any, session: Any, feed: Feed, tmp_path: Path
) -> None:
    """Compaction may remove a delete's ``d`` event and keep the tombstone after it."""
    prefix = unique_name("compacted")
    dropped = asyncio.run(
        _copy_without_delete_events(
            feed.bootstrap,
            f"{feed.prefix}.{feed.keyspace}.events",
            f"{prefix}.{feed.keyspace}.events",
        )
    )
    assert dropped > 0, "the workload deleted no events row; nothing was tested"
    lake = tmp_path / "lake"
    config = feed.config(lake)
    config = CdcConfig(
        cluster=config.cluster,
        kafka=config.kafka,
        pipeline=PipelineConfig(lake_directory=lake, clean_topic_prefix=prefix),
    )
    LakeJob(spark, config, tables=f"{feed.keyspace}.events", once=True).run()
    schema = feed.schemas["events"]
    expected = {k: normalize_json_form(schema, v) for k, v in select_rows(session, schema).items()}
    got = collect_lake_images(spark, lake_table_path(lake, feed.keyspace, "events"), schema)
    assert got == expected, f"{len(set(got) - set(expected))} deleted rows stayed in the lake"
