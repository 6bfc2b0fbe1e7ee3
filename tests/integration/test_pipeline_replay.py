"""Acceptance of `cdc pipeline replay`: the raw topic merged again in Spark gives the workers' images.

A real agent publishes what node 1 logged for a workload of inserts, updates, collection changes, static
columns, row, range and partition deletes and TTLs (some expire before the replay, one does not); every raw
event goes twice, shuffled, to the raw topic of a real worker. Once the worker is idle and the short TTLs
are past the settle window, replay (local Spark) must give exactly the worker's final clean-topic images
and Cassandra's `SELECT *`, and a raw topic missing one partition's events must be reported.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import select_rows
from infra.cassandra import CassandraNode
from pipeline import replay_job
from pipeline.lake_reader import collect_lake_images
from pipeline.lake_schema import lake_table_path, normalize_json_form
from pipeline.replay_job import ReplayJob
from pipeline.row_diff import differing_columns
from pipeline.table_catalog import load_table_schemas, select_tables
from runtime.config import CdcConfig, KafkaConfig, PipelineConfig
from tests.integration.agent_harness import unique_name, wait_until
from tests.integration.worker_harness import (
    WorkerProcess,
    copy_shuffled,
    group_lag,
    publish_through_agent,
    worker_config,
)

RAW_PARTITIONS = 6
SHORT_TTL_S = 6
SETTLE_S = 4


@dataclass(slots=True)
class Replayed:
    keyspace: str
    config: CdcConfig
    schemas: dict[str, TableSchema]
    raw_records: list[tuple[int, int, bytes, bytes]]


def _statements(ks: str) -> Iterator[tuple[str, tuple[Any, ...]]]:
    rng = random.Random(5)
    for i in range(40):
        ttl = f" USING TTL {SHORT_TTL_S}" if i % 8 == 0 else ""
        yield (
            f"INSERT INTO {ks}.items (id, name, score, tags, attrs) VALUES (%s, %s, %s, %s, %s){ttl}",
            (i, f"item{i}", i + 0.1, {f"t{i % 3}"}, {"a": i}),
        )
    for pk in range(6):
        yield f"UPDATE {ks}.events SET s = %s WHERE pk = %s", (f"static{pk}", pk)
        for ck in range(8):
            yield f"INSERT INTO {ks}.events (pk, ck, v, l) VALUES (%s, %s, %s, %s)", (pk, ck, f"v{ck}", [ck])
    yield f"UPDATE {ks}.events SET s = %s WHERE pk = %s", ("static only", 99)
    for step in range(150):
        i, pk, ck = rng.randrange(40), rng.randrange(6), rng.randrange(8)
        kind = step % 10
        if kind == 0:
            yield f"UPDATE {ks}.items SET name = %s, score = %s WHERE id = %s", (f"n{step}", step / 3, i)
        elif kind == 1:
            yield f"UPDATE {ks}.items SET tags = tags + %s WHERE id = %s", ({f"x{step % 4}"}, i)
        elif kind == 2:
            yield f"UPDATE {ks}.items SET attrs[%s] = %s WHERE id = %s", (f"k{step % 3}", step, i)
        elif kind == 3:
            yield f"DELETE FROM {ks}.items WHERE id = %s", (i,)
        elif kind == 4:
            yield (
                f"UPDATE {ks}.events SET v = %s, l = l + %s WHERE pk = %s AND ck = %s",
                (f"u{step}", [step], pk, ck),
            )
        elif kind == 5:
            yield f"DELETE FROM {ks}.events WHERE pk = %s AND ck = %s", (pk, ck)
        elif kind == 6:
            yield f"DELETE FROM {ks}.events WHERE pk = %s AND ck >= %s AND ck < %s", (pk, ck, ck + 3)
        elif kind == 7:
            yield f"UPDATE {ks}.events SET s = %s WHERE pk = %s", (f"s{step}", pk)
        elif kind == 8 and step % 3 == 0:
            yield f"DELETE FROM {ks}.events WHERE pk = %s", (pk,)
        else:
            yield (
                f"INSERT INTO {ks}.items (id, name) VALUES (%s, %s) USING TTL {SHORT_TTL_S}",
                (i, f"ttl{step}"),
            )
    yield f"INSERT INTO {ks}.items (id, name) VALUES (%s, %s) USING TTL 3600", (500, "long ttl")


@pytest.fixture(scope="module")
def replayed(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replayed]:
    """The workload written, published by a real agent, merged by a real worker until idle."""
    ks = unique_name("rep")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(
        f"CREATE TABLE {ks}.items (id int PRIMARY KEY, name text, score float, tags set<text>, "
        "attrs map<text, int>) WITH cdc = true"
    )
    session.execute(
        f"CREATE TABLE {ks}.events (pk int, ck int, v text, l list<int>, s text static, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true"
    )
    workdir = tmp_path_factory.mktemp("replay")
    expires_by = 0.0

    def write() -> int:
        nonlocal expires_by
        count = 0
        for text, args in _statements(ks):
            session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
            count += 1
        expires_by = time.time() + SHORT_TTL_S
        return count

    records, schema_topic = publish_through_agent(cassandra_node, kafka_bootstrap, workdir, ks, write)
    raw_topic, app_id, prefix = unique_name("rep_raw"), unique_name("rep_w"), unique_name("rep_clean")
    copy_shuffled(kafka_bootstrap, records, raw_topic, RAW_PARTITIONS, copies=2, seed=3)
    worker = WorkerProcess(
        workdir,
        worker_config(
            bootstrap=kafka_bootstrap,
            raw_topic=raw_topic,
            schema_topic=schema_topic,
            raw_partitions=RAW_PARTITIONS,
            data_directory=workdir / "worker-data",
            app_id=app_id,
            worker_id="w1",
            topic_prefix=prefix,
        ),
        "w1",
    )
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: group_lag(kafka_bootstrap, app_id, raw_topic) == 0, 120, lambda: worker.log_tail())
        # the short TTLs have run out, the worker has emitted their expiry and they left the settle window
        time.sleep(max(0.0, expires_by - time.time()) + SETTLE_S + 3)
        config = CdcConfig(
            cluster="acceptance",
            kafka=KafkaConfig(
                bootstrap_servers=kafka_bootstrap,
                raw_topic=raw_topic,
                schema_topic=schema_topic,
                raw_partitions=RAW_PARTITIONS,
            ),
            pipeline=PipelineConfig(
                lake_directory=workdir / "lake", clean_topic_prefix=prefix, shuffle_partitions=2
            ),
        )
        catalog = load_schema_from_session(session, [ks], with_system_schema=False)
        yield Replayed(ks, config, {t.table: t for t in catalog.tables()}, records)
    finally:
        worker.ensure_stopped()


def _tables(run: Replayed) -> list[TableSchema]:
    return select_tables(
        load_table_schemas(run.config.kafka), [f"{run.keyspace}.items", f"{run.keyspace}.events"]
    )


def test_replay_equals_the_workers_images_and_cassandra(
    spark: Any, session: Any, replayed: Replayed, tmp_path: Path
) -> None:
    tables = _tables(replayed)
    summary = ReplayJob(spark, replayed.config, tables, settle_s=SETTLE_S).run(output=tmp_path, compare=True)
    print(summary.describe())

    assert summary.events == 2 * len(replayed.raw_records)
    assert summary.undecodable == summary.skipped_events == 0
    assert [d.table for d in summary.compared] == [t.name for t in tables]
    for diff in summary.compared:
        assert diff.clean, diff.describe("replay", "clean topic")
        assert diff.skipped == 0, "a short TTL still in the settle window: the test waited too little"
        assert diff.expected_rows == diff.actual_rows == summary.rows[diff.table] > 0

    # the --output Delta tables hold exactly Cassandra's rows
    for schema in tables:
        expected = {
            k: normalize_json_form(schema, row)
            for k, row in select_rows(session, replayed.schemas[schema.table]).items()
        }
        got = collect_lake_images(spark, lake_table_path(tmp_path, schema.keyspace, schema.table), schema)
        assert set(got) == set(expected), f"{schema.name}: keys differ: {set(got) ^ set(expected)}"
        wrong = {k: differing_columns(schema, expected[k], got[k]) for k in expected}
        assert not any(wrong.values()), f"{schema.name}: {[(k, c) for k, c in wrong.items() if c][:5]}"
    items = select_rows(session, replayed.schemas["items"])
    assert '{"id": 500}' in items, "the row with a long TTL is live on every side"
    assert not any(r["name"].startswith("ttl") for r in items.values() if r["name"]), "short TTLs expired"
    events = next(t for t in tables if t.table == "events")
    assert '{"ck": null, "pk": 99}' in collect_lake_images(
        spark, lake_table_path(tmp_path, replayed.keyspace, "events"), events
    ), "the static-only row"


def test_a_partition_missing_from_the_raw_topic_is_reported(
    spark: Any, session: Any, replayed: Replayed, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replay of a raw topic without the events of one partition of `events` against the worker's clean
    topic: the CLI entry point must exit 1 and name exactly that partition's rows."""
    import json

    from schemas.raw_event import decode_raw_key

    rows = select_rows(session, replayed.schemas["events"])
    pk = min(json.loads(k)["pk"] for k in rows)
    lost = sorted(k for k in rows if json.loads(k)["pk"] == pk)
    dropped = [
        r for r in replayed.raw_records if decode_raw_key(r[2])[1:] == ("events", pk.to_bytes(4, "big"))
    ]
    assert dropped, f"the workload wrote partition {pk} of events"
    kept = [r for r in replayed.raw_records if r not in dropped]
    topic = unique_name("rep_raw_cut")
    copy_shuffled(kafka_bootstrap, kept, topic, RAW_PARTITIONS, copies=1, seed=9)
    config = CdcConfig(
        cluster="acceptance",
        kafka=KafkaConfig(
            bootstrap_servers=kafka_bootstrap,
            raw_topic=topic,
            schema_topic=replayed.config.kafka.schema_topic,
        ),
        pipeline=replayed.config.pipeline,
    )
    args = argparse.Namespace(tables=f"{replayed.keyspace}.events", output=None, compare=True)
    assert replay_job.run(config, args) == 1
    out = capsys.readouterr().out
    assert f"extra in clean topic {len(lost):,}" in out, out
    assert "missing in clean topic 0" in out and "different 0" in out, out
    assert lost[0] in out, out
    assert "DIFFERENCES found" in out
