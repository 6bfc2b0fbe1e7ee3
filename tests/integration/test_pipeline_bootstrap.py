"""Acceptance of `cdc pipeline bootstrap` against real Cassandra, Kafka, a real agent and a real worker.

Rows are written while the table has cdc = false (so no commit-log event will ever describe them), then
CDC is switched on and an agent and a worker run. The bootstrap must bring every such row to the clean
topic as an `r` event whose image is Cassandra's `SELECT *`, a later UPDATE must carry that image as its
before image, a second run must publish nothing new, and a snapshot older than a live write must lose.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import CleanEvent, by_key, chain_problems, read_clean_topic, select_rows
from infra.cassandra import CassandraNode
from pipeline import bootstrap_job
from pipeline.cassandra_scan import scan_raw_pages, scan_spec, scan_table, token_ranges
from pipeline.snapshot_core import AVAILABLE, snapshot_encoder
from pipeline.snapshot_events import table_events
from pipeline.table_catalog import load_table_schemas
from runtime.config import CassandraConfig, CdcConfig, KafkaConfig, PipelineConfig
from schemas.change_json import JsonChangeCodec
from schemas.driver_rows import key_text
from schemas.raw_event import decode_raw_event, is_snapshot_source
from tests.integration.agent_harness import RawTopic, new_agent, running_agents, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, worker_config
from tests.unit.without_native import HIDE_NATIVE_CORE

RAW_PARTITIONS = 6
TABLE = "items"


@dataclass(slots=True)
class Deployment:
    bootstrap: str
    keyspace: str
    config: CdcConfig
    schema: TableSchema
    worker: WorkerProcess
    app_id: str
    prefix: str

    @property
    def clean_topic(self) -> str:
        return f"{self.prefix}.{self.keyspace}.{TABLE}"

    def events(self) -> list[CleanEvent]:
        return read_clean_topic(self.bootstrap, self.clean_topic, JsonChangeCodec())

    def idle(self) -> None:
        """Wait until the worker consumed everything on the raw topic."""
        wait_until(
            lambda: group_lag(self.bootstrap, self.app_id, self.config.kafka.raw_topic) == 0,
            120,
            self.worker.log_tail,
            interval_s=0.5,
        )


def _write_rows_before_cdc(session: Any, keyspace: str) -> None:
    """Every shape the bootstrap must rebuild, on a table whose writes never reach a commit-log reader."""
    table = f"{keyspace}.{TABLE}"
    session.execute(f"CREATE TYPE {keyspace}.addr (street text, zip int)")
    session.execute(
        f"CREATE TABLE {table} (pk int, ck text, s text static, v int, tags set<text>, attrs map<text, int>, "
        "home addr, nums list<int>, fixed frozen<addr>, PRIMARY KEY (pk, ck)) WITH cdc = false"
    )
    for pk in range(6):
        for ck in ("a", "b", "c"):
            # UDT values as CQL literals: the shared session has no class registered for the type
            session.execute(
                f"INSERT INTO {table} (pk, ck, s, v, tags, attrs, home, nums, fixed) VALUES (%s, %s, %s, %s, "
                f"%s, %s, {{street: 'street {pk}', zip: {1000 + pk}}}, %s, {{street: '{ck}', zip: null}})",
                (pk, ck, f"static{pk}", pk * 10, {f"t{pk}", ck, "z"}, {ck: pk, "m": 1}, [3, 1, 2]),
            )
    # element writes at other times: set/map additions, a UDT field, list append and prepend
    session.execute(
        f"UPDATE {table} SET tags = tags + {{'late'}}, attrs['late'] = 7 WHERE pk = 1 AND ck = 'a'"
    )
    session.execute(f"UPDATE {table} SET home.zip = 42, nums = nums + [9] WHERE pk = 1 AND ck = 'b'")
    session.execute(f"UPDATE {table} SET nums = [0] + nums WHERE pk = 2 AND ck = 'a'")
    # explicit timestamps, older and newer than the other writes
    session.execute(f"UPDATE {table} USING TIMESTAMP 1000 SET v = 7 WHERE pk = 7 AND ck = 'old'")
    session.execute(
        f"INSERT INTO {table} (pk, ck, v) VALUES (3, 'future', 1) USING TIMESTAMP {int(time.time() * 1e6) + 10**9}"
    )
    # TTL'd cells: one column of a row, and a whole row written with a TTL
    session.execute(f"UPDATE {table} USING TTL 3600 SET v = 11 WHERE pk = 0 AND ck = 'a'")
    session.execute(f"INSERT INTO {table} (pk, ck, v, tags) VALUES (4, 'ttl', 5, {{'x'}}) USING TTL 7200")
    # a row with only its primary key, a partition with only a static column, a UDT with a null field
    session.execute(f"INSERT INTO {table} (pk, ck) VALUES (8, 'bare')")
    session.execute(f"UPDATE {table} SET s = 'only static' WHERE pk = 9")
    session.execute(f"INSERT INTO {table} (pk, ck, home) VALUES (10, 'partial', {{street: 'no zip'}})")


@pytest.fixture(scope="module")
def deployment(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    keyspace = unique_name("boot")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    workdir = tmp_path_factory.mktemp("bootstrap")
    app_id, prefix = unique_name("boot_w"), unique_name("boot_clean")
    with running_agents() as agents:
        agent = new_agent(
            agents,
            workdir,
            cdc_raw=cassandra_node.spec.cdc_raw,
            bootstrap=kafka_bootstrap,
            keyspaces=[keyspace],
            raw_topic=unique_name("boot_raw"),
            schema_topic=unique_name("boot_schemas"),
            agent={"schema_refresh_interval_s": 2},
        )
        agent.start()
        agent.wait_healthy()
        # the agent must read these writes while the table still has cdc = false (it then skips them):
        # a write to a CDC table after them, once published, proves the agent read past them
        _write_rows_before_cdc(session, keyspace)
        session.execute(f"CREATE TABLE {keyspace}.pacer (id int PRIMARY KEY) WITH cdc = true")
        session.execute(f"INSERT INTO {keyspace}.pacer (id) VALUES (1)")
        with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
            wait_until(
                lambda: topic.poll(0.5) >= 0 and any(r.table == "pacer" for r in topic.records),
                90,
                "the agent to publish the write after the pre-CDC rows",
            )
        session.execute(f"ALTER TABLE {keyspace}.{TABLE} WITH cdc = true")
        config = CdcConfig(
            cluster="acceptance",
            kafka=KafkaConfig(
                bootstrap_servers=kafka_bootstrap,
                raw_topic=agent.raw_topic,
                schema_topic=agent.schema_topic,
                raw_partitions=RAW_PARTITIONS,
            ),
            cassandra=CassandraConfig(
                contact_points=[cassandra_node.spec.address], port=cassandra_node.spec.cql_port
            ),
            pipeline=PipelineConfig(lake_directory=workdir / "lake", bootstrap_splits=8, scan_page_size=7),
        )
        wait_until(
            lambda: (keyspace, TABLE) in load_table_schemas(config.kafka),
            60,
            "the agent to publish the table's schema",
            interval_s=1.0,
        )
        schema = load_table_schemas(config.kafka)[(keyspace, TABLE)]
        worker = WorkerProcess(
            workdir,
            worker_config(
                bootstrap=kafka_bootstrap,
                raw_topic=agent.raw_topic,
                schema_topic=agent.schema_topic,
                raw_partitions=RAW_PARTITIONS,
                data_directory=workdir / "worker-data",
                app_id=app_id,
                worker_id="boot1",
                topic_prefix=prefix,
            ),
            "worker",
        )
        try:
            worker.start()
            worker.wait_healthy(90)
            yield Deployment(kafka_bootstrap, keyspace, config, schema, worker, app_id, prefix)
        finally:
            worker.ensure_stopped()


def _republished_unchanged(deployment: Deployment, publish: Callable[[], int], what: str) -> list[CleanEvent]:
    """Runs ``publish``, which publishes snapshot events again and returns how many, and checks that the
    worker dropped them: no clean event, and their digests counted as duplicates, all but three (pk 0 and
    4 hold TTL'd cells, whose computed expiry may move by a second between runs, and one partition may have
    been updated since). Returns the clean events after it."""
    deployment.idle()
    before = deployment.events()
    _, stats = deployment.worker.rest("/stats")
    duplicates = stats["total"]["duplicates"]
    published = publish()
    deployment.idle()
    after = deployment.events()
    known = {(e.partition, e.offset) for e in before}
    assert len(after) == len(before), (
        f"{what} emitted {[e.value for e in after if (e.partition, e.offset) not in known]}"
    )
    _, stats = deployment.worker.rest("/stats")
    assert stats["total"]["duplicates"] >= duplicates + published - 3, stats["total"]
    return after


def _keyed(events: list[CleanEvent]) -> dict[str, list[CleanEvent]]:
    return {k: [e for e in h if e.value is not None] for k, h in by_key(events).items()}


def test_bootstrap_reads_every_row_then_updates_carry_its_image_and_a_rerun_adds_nothing(
    deployment: Deployment, session: Any, spark: Any
) -> None:
    expected = select_rows(session, deployment.schema)

    assert (
        bootstrap_job.run(deployment.config, argparse.Namespace(tables=f"{deployment.keyspace}.{TABLE}")) == 0
    )
    wait_until(lambda: len(deployment.events()) >= len(expected), 120, deployment.worker.log_tail, 0.5)
    deployment.idle()
    histories = _keyed(deployment.events())

    # one r event per pre-existing row, its image exactly Cassandra's row
    assert set(histories) == set(expected), f"keys differ: {set(histories) ^ set(expected)}"
    for key, history in histories.items():
        assert [e.value["op"] for e in history] == ["r"], f"{key}: {[e.value for e in history]}"
        (read,) = history
        assert read.value["before"] is None and read.value["source"]["snapshot"] == "true"
        assert read.value["after"] == expected[key], f"{key}: {read.value['after']} != {expected[key]}"

    # the snapshot events went to the partition the agents' events of the same key use
    with RawTopic(deployment.bootstrap, deployment.config.kafka.raw_topic) as topic:
        topic.drain(quiet_s=1.0)
        snapshots = [
            (p, k, v) for p, _, k, v in topic.raw if is_snapshot_source(decode_raw_event(v)["source"])
        ]
    assert snapshots, "no snapshot event on the raw topic"
    partitioner = DefaultPartitioner()
    everything = list(range(RAW_PARTITIONS))
    for partition, key, _ in snapshots:
        assert partition == partitioner(key, everything, everything), "snapshot event in another partition"

    # a later update of a pre-existing row: op u, before = the bootstrap image, after = Cassandra's row
    pk, ck = next(
        (e.value["after"]["pk"], e.value["after"]["ck"])
        for h in histories.values()
        for e in h
        if e.value["op"] == "r" and e.value["after"]["ck"] is not None and e.value["after"]["tags"]
    )
    key = {"pk": pk, "ck": ck}
    session.execute(
        f"UPDATE {deployment.keyspace}.{TABLE} SET v = 99, tags = tags - {{'z', 'q'}} WHERE pk = %s AND ck = %s",
        (pk, ck),
    )
    wanted = key_text(key)
    wait_until(
        lambda: len(_keyed(deployment.events()).get(wanted, [])) >= 2, 60, deployment.worker.log_tail, 0.5
    )
    read, update = _keyed(deployment.events())[wanted]
    assert read.value["op"] == "r"
    assert update.value["op"] == "u" and update.value["source"]["snapshot"] == "false"
    assert update.value["before"] == read.value["after"]
    assert update.value["after"] == select_rows(session, deployment.schema)[wanted]

    # a second run publishes the same digests: the worker drops them, no clean event
    def second_run() -> int:
        tables = f"{deployment.keyspace}.{TABLE}"
        assert bootstrap_job.run(deployment.config, argparse.Namespace(tables=tables)) == 0
        return len(snapshots)

    after = _republished_unchanged(deployment, second_run, "a second run")
    problems = [p for h in by_key(after).values() for p in chain_problems(h)]
    assert not problems, problems


@pytest.mark.skipif(AVAILABLE != "native", reason="the native core (cdc_native) is not installed: make setup")
def test_the_native_encoder_builds_the_python_encoders_events_from_cassandras_rows(
    deployment: Deployment,
) -> None:
    spec = scan_spec(deployment.config, deployment.schema, with_write_times=True)
    pages = list(scan_raw_pages(spec, token_ranges(3)))  # the Python encoder reads their rows
    built = {
        core: list(
            snapshot_encoder(
                deployment.schema, core=core, cluster="c", published_at_ms=1, max_rows=2
            ).events_of_pages(pages)
        )
        for core in ("python", "native")
    }
    assert built["native"] == built["python"]
    assert sum(len(events) for _, events in built["native"]) > len(built["native"]), "no partition was cut"


def test_a_snapshot_older_than_a_live_write_loses_whatever_the_arrival_order(
    deployment: Deployment, session: Any, spark: Any
) -> None:
    """The snapshot is read, then a live write changes a row and reaches the worker first; the snapshot
    events arrive afterwards, as they would from a bootstrap racing the stream. The newer value stays."""
    table = f"{deployment.keyspace}.{TABLE}"
    pk = 5
    # a value the worker knows from the stream, so the snapshot below differs from any earlier one
    seen = len(deployment.events())
    session.execute(f"UPDATE {table} SET v = 500 WHERE pk = {pk} AND ck = 'b'")
    wait_until(lambda: len(deployment.events()) > seen, 60, deployment.worker.log_tail, 0.5)
    rows = scan_table(spark, deployment.config, deployment.schema, with_write_times=True, splits=4).collect()
    mine = [r for r in rows if r["pk"] == pk]
    assert mine, "the scan found no row of the partition"
    events = [
        e
        for _, evs in table_events(deployment.schema, mine, cluster="acceptance", published_at_ms=1)
        for e in evs
    ]

    seen = len(deployment.events())
    session.execute(f"UPDATE {table} SET v = 555 WHERE pk = {pk} AND ck = 'b'")
    wait_until(lambda: len(deployment.events()) > seen, 60, deployment.worker.log_tail, 0.5)
    deployment.idle()

    async def publish() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=deployment.bootstrap, acks="all")
        await producer.start()
        try:
            for event in events:
                await producer.send_and_wait(deployment.config.kafka.raw_topic, event.value, key=event.key)
        finally:
            await producer.stop()

    asyncio.run(publish())
    deployment.idle()
    expected = select_rows(session, deployment.schema)
    histories = _keyed(deployment.events())
    for ck in ("a", "b", "c"):
        wanted = key_text({"pk": pk, "ck": ck})
        last = histories[wanted][-1].value
        assert last["after"] == expected[wanted], f"{wanted}: {last['after']} != {expected[wanted]}"
    assert expected[key_text({"pk": pk, "ck": "b"})]["v"] == 555
    late = histories[key_text({"pk": pk, "ck": "b"})][-1].value
    assert late["source"]["snapshot"] == "false", "the older snapshot changed the row after the live write"


@pytest.mark.skipif(AVAILABLE != "native", reason="needs the native core on the driver")
def test_executors_without_the_native_core_publish_the_same_events_and_the_job_says_so(
    deployment: Deployment, tmp_path: Path
) -> None:
    """`cdc pipeline bootstrap` whose executors' Python cannot import the native core: the tasks build the
    events with the Python encoder, the job's summary warns with the count of those rows, and the events
    are byte for byte the native ones: the worker finds every digest known and emits nothing."""
    hider = tmp_path / "no-native"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(HIDE_NATIVE_CORE)
    executor_python = tmp_path / "python-without-native-core"
    executor_python.write_text(
        f'#!/bin/sh\nPYTHONPATH="{hider}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n'
    )
    executor_python.chmod(0o755)
    config = deployment.config
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": config.cluster,
                "kafka": {
                    "bootstrap_servers": config.kafka.bootstrap_servers,
                    "raw_topic": config.kafka.raw_topic,
                    "schema_topic": config.kafka.schema_topic,
                    "raw_partitions": config.kafka.raw_partitions,
                },
                "cassandra": {
                    "contact_points": config.cassandra.contact_points,
                    "port": config.cassandra.port,
                },
                "pipeline": {
                    "lake_directory": str(tmp_path / "lake"),
                    "bootstrap_splits": 8,
                    "executor_python": str(executor_python),
                },
            }
        )
    )
    table = f"{deployment.keyspace}.{TABLE}"

    def without_native_core() -> int:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "cdc"),
                "pipeline",
                "bootstrap",
                "--config",
                str(path),
                "--tables",
                table,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "events built by the native core" in done.stdout, done.stdout
        counts = re.search(
            rf"bootstrap {re.escape(table)}: \d+/\d+ ranges, (\d+) rows, (\d+) events", done.stdout
        )
        assert counts, done.stdout
        rows, events = int(counts[1]), int(counts[2])
        assert rows > 0
        assert f"warning: {table}: {rows} rows built by the Python encoder on executors" in done.stdout, (
            done.stdout
        )
        return events

    _republished_unchanged(deployment, without_native_core, "a run on executors without the native core")
