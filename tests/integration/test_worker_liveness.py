"""Liveness for consumers, from `cdc worker` processes on the session's real Kafka: heartbeats and lag.

Raw events are built with testkit (no Cassandra): a table whose schema is on the schema topic, and one
whose schema never comes, which holds the worker inside a batch for SCHEMA_WAIT_S (a stalled pipeline, as
a consumer sees one). Heartbeats are read back with read_committed isolation, as consumers must; the lag
is read from the worker's `/stats` and `/metrics`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from app.batch_loop import SCHEMA_WAIT_S
from app.heartbeat import heartbeat_topic
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from runtime.service_process import START_MARKER
from schemas.schema_event import schema_event
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, publish_schema_event, worker_config
from tests.unit.app.support import raw_record

RAW_PARTITIONS = 2
INTERVAL_MS = 500


@dataclass(slots=True)
class Deployment:
    """A worker deployment's topics, with the schema of ``users`` published and that of ``unknown`` not."""

    bootstrap: str
    workdir: Path
    raw_topic: str
    schema_topic: str
    app_id: str
    prefix: str
    users: TableSchema
    unknown: TableSchema

    def worker(self, worker_id: str = "w1", **extra: Any) -> WorkerProcess:
        return WorkerProcess(
            self.workdir,
            worker_config(
                bootstrap=self.bootstrap,
                raw_topic=self.raw_topic,
                schema_topic=self.schema_topic,
                raw_partitions=RAW_PARTITIONS,
                data_directory=self.workdir / f"{worker_id}-data",
                app_id=self.app_id,
                worker_id=worker_id,
                topic_prefix=self.prefix,
                worker=extra,
            ),
            worker_id,
        )

    def produce(self, partition: int, schema: TableSchema, keys: list[int], write_time_us: int) -> int:
        """INSERTs of ``keys`` written at ``write_time_us``, as one record batch (a fetch sees all of them
        or none) to ``partition`` of the raw topic; the offset of the first."""
        builder = EventBuilder(schema)
        records = [
            raw_record(
                partition,
                0,
                schema,
                builder.event(
                    Write(key, (), {"v": key}, ts=write_time_us, insert=True), now=write_time_us // 1_000_000
                ),
            )
            for key in keys
        ]

        async def send() -> int:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
            await producer.start()
            try:
                batch = producer.create_batch()
                for record in records:
                    assert batch.append(key=record.key, value=record.value, timestamp=None) is not None
                meta = await (await producer.send_batch(batch, self.raw_topic, partition=partition))
            finally:
                await producer.stop()
            return int(meta.offset)

        return asyncio.run(send())

    def heartbeats(self) -> list[dict[str, Any]]:
        """Every committed heartbeat so far, oldest first (its key checked on the way)."""
        records = asyncio.run(read_topic_records(self.bootstrap, heartbeat_topic(self.prefix)))
        for _, _, _, key, _ in records:
            assert json.loads(key) == {"serverName": self.prefix}, key
        return [json.loads(value) for _, _, _, _, value in records if value is not None]

    def committed_offsets(self) -> dict[str, int]:
        """The worker group's committed raw offsets, by partition as a string (the heartbeat's form)."""

        async def read() -> dict[str, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(self.app_id)
            finally:
                await admin.close()
            return {
                str(tp.partition): meta.offset for tp, meta in offsets.items() if tp.topic == self.raw_topic
            }

        return asyncio.run(read())


def deploy(bootstrap: str, workdir: Path) -> Deployment:
    keyspace = unique_name("live")
    ddl = {
        name: f"CREATE TABLE {keyspace}.{name} (id int PRIMARY KEY, v int) WITH ID = {uuid.uuid4()}"
        for name in ("users", "unknown")
    }
    schemas = {name: load_schema_from_cql(text).by_name(keyspace, name) for name, text in ddl.items()}
    users, unknown = schemas["users"], schemas["unknown"]
    assert users is not None and unknown is not None
    dep = Deployment(
        bootstrap,
        workdir,
        unique_name("raw"),
        unique_name("schemas"),
        unique_name("app"),
        unique_name("clean"),
        users,
        unknown,
    )

    async def prepare() -> None:
        await ensure_topics(
            KafkaConfig(bootstrap_servers=bootstrap),
            [
                TopicSpec(dep.raw_topic, RAW_PARTITIONS, 1),
                TopicSpec(dep.schema_topic, 1, 1, {"cleanup.policy": "compact"}),
            ],
        )
        event = schema_event(
            "c", keyspace, "users", str(users.table_id), cdc=True, dropped=False, cql=ddl["users"]
        )
        await publish_schema_event(bootstrap, dep.schema_topic, event)

    asyncio.run(prepare())
    return dep


def now_us() -> int:
    return time.time_ns() // 1000


def lag_of(worker: WorkerProcess) -> dict[str, Any]:
    status, stats = worker.rest("/stats")
    assert status == 200, stats
    return stats["lag"]  # type: ignore[no-any-return]


def test_an_idle_worker_beats_at_the_interval_in_committed_transactions_until_it_stops(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    dep = deploy(kafka_bootstrap, tmp_path)
    worker = dep.worker(heartbeat_interval_ms=INTERVAL_MS)
    try:
        worker.start()
        worker.wait_healthy(90)
        # no raw event at all: the heartbeats alone say the pipeline is alive, and caught up
        wait_until(
            lambda: sum(1 for b in dep.heartbeats() if b["records_behind"] == 0) >= 6,
            60,
            lambda: f"six heartbeats saying nothing waits; log:\n{worker.log_tail()}",
            interval_s=1.0,
        )
        beats = dep.heartbeats()
        gaps = [b["ts_ms"] - a["ts_ms"] for a, b in pairwise(beats)]
        assert min(gaps) >= INTERVAL_MS - 20, f"heartbeats closer than the interval: {gaps}"
        assert sorted(gaps)[len(gaps) // 2] <= 3 * INTERVAL_MS, (
            f"an idle worker beats at the interval: {gaps}"
        )
        last = beats[-1]
        assert last == {
            "ts_ms": last["ts_ms"],
            "app_id": dep.app_id,
            "worker_id": "w1",
            "raw_partitions": [0, 1],
            "offsets": {"0": 0, "1": 0},
            "records_behind": 0,
            "ms_behind": 0,
            "source_ts_ms": None,
        }
        assert abs(last["ts_ms"] - time.time() * 1000) < 30_000

        # a write ten minutes old: its write time rides on the heartbeat committed with it or after it
        written_us = now_us() - 600_000_000
        offset = dep.produce(1, dep.users, [7], written_us)
        wait_until(
            lambda: any(b["source_ts_ms"] == written_us // 1000 for b in dep.heartbeats()),
            60,
            lambda: f"a heartbeat with source_ts_ms {written_us // 1000}; log:\n{worker.log_tail()}",
            interval_s=1.0,
        )
        beats, committed = dep.heartbeats(), dep.committed_offsets()
        merged = [b for b in beats if b["source_ts_ms"] is not None]
        assert merged[0]["offsets"]["1"] == offset + 1
        assert all(b["source_ts_ms"] == written_us // 1000 for b in merged)
        assert merged[-1]["records_behind"] == 0 and merged[-1]["ms_behind"] == 0, (
            "an idle worker is not behind, however old its newest write"
        )
        for beat in beats:  # a heartbeat never says more than what is committed
            assert all(off <= committed.get(p, 0) for p, off in beat["offsets"].items()), (beat, committed)
        metrics = worker.metrics()
        assert metrics.value("cdc_worker_heartbeats_total") >= len(beats)
        assert metrics.value("cdc_worker_newest_write_timestamp_seconds") == (written_us // 1000) / 1000

        assert worker.stop() == 0
        after_stop = len(dep.heartbeats())
        time.sleep(4 * INTERVAL_MS / 1000)
        assert len(dep.heartbeats()) == after_stop, "heartbeats went on after the worker stopped"
    finally:
        worker.ensure_stopped()


def test_lag_grows_while_the_worker_is_stopped_or_stuck_and_returns_to_zero_once_it_caught_up(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    dep = deploy(kafka_bootstrap, tmp_path)
    # batches of one event, so the worker commits the first before it gets stuck on the second
    worker = dep.worker(heartbeat_interval_ms=INTERVAL_MS, batch_max_events=1)
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(
            lambda: lag_of(worker)["records_behind"] == 0 and lag_of(worker)["ms_behind"] == 0,
            30,
            lambda: f"an idle worker with nothing behind (last {lag_of(worker)})",
        )
        assert worker.stop() == 0

        # written while the worker is stopped: five minutes old, then one whose table has no schema
        # (the worker waits SCHEMA_WAIT_S for it inside a batch), then two more
        old_us = now_us() - 300_000_000
        dep.produce(0, dep.users, [1], old_us)
        dep.produce(0, dep.unknown, [2], now_us())
        dep.produce(0, dep.users, [3, 4], now_us() - 60_000_000)
        assert group_lag(kafka_bootstrap, dep.app_id, dep.raw_topic) == 4

        worker.start()
        worker.wait_healthy(90)
        wait_until(
            lambda: lag_of(worker)["records_behind_by_partition"].get("0") == 3,
            60,
            lambda: (
                f"the stuck worker to count 3 records behind (last {lag_of(worker)}):\n{worker.log_tail()}"
            ),
        )
        lag = lag_of(worker)
        assert lag["newest_write_ms"] == old_us // 1000
        assert lag["ms_behind"] >= time.time() * 1000 - old_us // 1000 - 5_000, (
            f"records wait and nothing has been caught up since the start: now - the newest write ({lag})"
        )
        metrics = worker.metrics()
        assert metrics.value("cdc_worker_lag_records", partition="0") == 3
        assert metrics.value("cdc_worker_lag_ms") >= 300_000
        assert metrics.value("cdc_worker_newest_write_timestamp_seconds") == (old_us // 1000) / 1000

        # more records while stuck, on the quiet partition: its figure grows from the fetch responses
        dep.produce(1, dep.users, [5, 6], now_us())
        wait_until(
            lambda: lag_of(worker)["records_behind"] == 5,
            10,
            lambda: f"5 records behind on both partitions (last {lag_of(worker)})",
        )
        # a stuck worker commits nothing, so it writes no heartbeat: consumers see the stall
        beats = len(dep.heartbeats())
        time.sleep(4 * INTERVAL_MS / 1000)
        assert len(dep.heartbeats()) == beats, "heartbeats while the worker was stuck in a batch"
        assert lag_of(worker)["records_behind_by_partition"]["0"] == 3, (
            f"the checks above took longer than the stall ({SCHEMA_WAIT_S:.0f} s)"
        )

        # the unknown table's event is dead-lettered, the rest merged: nothing behind any more
        wait_until(
            lambda: lag_of(worker)["records_behind"] == 0,
            SCHEMA_WAIT_S + 60,
            lambda: f"the worker to catch up (last {lag_of(worker)}):\n{worker.log_tail()}",
        )
        lag = lag_of(worker)
        assert lag["ms_behind"] == 0
        assert lag["committed_offsets"] == {"0": 4, "1": 2}
        metrics = worker.metrics()
        assert metrics.value("cdc_worker_lag_records", partition="0") == 0
        assert metrics.value("cdc_worker_lag_records", partition="1") == 0
        assert metrics.value("cdc_worker_lag_ms") == 0
        assert group_lag(kafka_bootstrap, dep.app_id, dep.raw_topic) == 0
        wait_until(
            lambda: (
                (beat := dep.heartbeats()[-1])["records_behind"] == 0 and beat["offsets"] == {"0": 4, "1": 2}
            ),
            10,
            "a heartbeat saying the worker caught up",
            interval_s=0.5,
        )
    finally:
        worker.ensure_stopped()


def test_the_worker_log_holds_json_lines_only_and_a_clean_start_on_new_topics_writes_no_error(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Faust's start-up spinner wrote terminal control bytes (``\\b\\x1b[?25h``) before the first JSON
    line of a log file; and a start on topics just created (the changelog, the owners and dead-letter
    topics) met partition leaders not elected yet, which the Kafka client logged at ERROR while retrying."""
    dep = deploy(kafka_bootstrap, tmp_path)
    config = worker_config(
        bootstrap=kafka_bootstrap,
        raw_topic=dep.raw_topic,
        schema_topic=dep.schema_topic,
        raw_partitions=RAW_PARTITIONS,
        data_directory=tmp_path / "w1-data",
        app_id=dep.app_id,
        worker_id="w1",
        topic_prefix=dep.prefix,
    )
    worker = WorkerProcess(tmp_path, config, "w1", log_format="json")
    try:
        worker.start()
        worker.wait_healthy(90)
        dep.produce(0, dep.users, [1], now_us())
        wait_until(lambda: lag_of(worker)["committed_offsets"].get("0") == 1, 60, worker.log_tail)
        assert worker.stop() == 0
    finally:
        worker.ensure_stopped()
    lines = [line for line in worker.log_text().splitlines() if line and not line.startswith(START_MARKER)]
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line of the worker's log is not JSON: {line!r}") from None
    assert entries, "the worker wrote nothing"
    assert [e for e in entries if e["level"] in ("ERROR", "CRITICAL")] == []
