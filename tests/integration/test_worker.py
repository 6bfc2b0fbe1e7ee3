"""Acceptance of the worker (`cdc worker`) against real Kafka and a real Cassandra as the oracle.

The raw events are the real ones: a real agent publishes what Cassandra wrote to its commit log for a
randomized workload. The test then writes every raw event three times, shuffled within each partition,
to the topic the worker reads, which is what three replicas with different arrival orders look like.
Checked against Cassandra's own `SELECT` at ALL and against the history of every key on the clean
topics (read_committed): each event's before image is the previous after image, nothing is repeated,
nothing is a no-op, and the last image per key is the row Cassandra returns.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import by_key, chain_problems, compare, final_images, read_clean_topic, select_rows
from infra.cassandra import CassandraNode
from infra.registry import SchemaRegistry
from schemas.change_avro import AvroChangeCodec
from schemas.change_codec import ChangeCodec
from schemas.change_json import JsonChangeCodec
from schemas.registry_client import HttpSchemaRegistryClient
from tests.integration.agent_harness import (
    Metrics,
    execute_writes,
    unique_name,
    wait_until,
)
from tests.integration.agent_harness import Write as AgentWrite
from tests.integration.worker_harness import (
    WorkerProcess,
    copy_shuffled,
    group_lag,
    publish_through_agent,
    worker_config,
)

RAW_PARTITIONS = 6
#: long enough that the TTL'd rows are still live when the worker first merges them (the agent alone can
#: take 20 s to publish the workload), so their expiry is the timer's to emit
TTL_S = 60
USERS = 150
EVENT_PARTITIONS = 12


@dataclass(slots=True)
class Workload:
    keyspace: str
    raw_records: list[tuple[int, int, bytes, bytes]]
    schema_topic: str
    schemas: dict[str, TableSchema]
    expires_by: float


def _statements(keyspace: str, seed: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """A randomized mix of every write kind on a table without and one with clustering and statics, and
    counter increments (merged shards, not last-write-wins)."""
    rng = random.Random(seed)
    users = f"{keyspace}.users"
    events = f"{keyspace}.events"
    for i in range(USERS):
        ttl = f" USING TTL {TTL_S}" if i % 10 == 0 else ""
        yield (
            f"INSERT INTO {users} (id, name, score, tags, attrs) VALUES (%s, %s, %s, %s, %s){ttl}",
            (i, f"user{i}", i, {f"t{i % 3}"}, {"a": i}),
        )
    for pk in range(EVENT_PARTITIONS):
        yield f"UPDATE {events} SET s = %s WHERE pk = %s", (f"static{pk}", pk)
        for ck in range(20):
            yield f"INSERT INTO {events} (pk, ck, v) VALUES (%s, %s, %s)", (pk, ck, f"v{pk}.{ck}")
    for step in range(900):
        if step % 9 == 0:
            yield (
                f"UPDATE {keyspace}.hits SET n = n + %s WHERE id = %s",
                (rng.randrange(1, 50), rng.randrange(10)),
            )
            continue
        i = rng.randrange(USERS)
        pk, ck = rng.randrange(EVENT_PARTITIONS), rng.randrange(20)
        kind = rng.randrange(12)
        if kind == 0:
            yield f"UPDATE {users} SET name = %s WHERE id = %s", (f"name{step}", i)
        elif kind == 1:
            yield f"UPDATE {users} SET score = %s WHERE id = %s", (step, i)
        elif kind == 2:
            yield f"UPDATE {users} SET tags = tags + %s WHERE id = %s", ({f"x{step % 7}"}, i)
        elif kind == 3:
            yield f"UPDATE {users} SET attrs[%s] = %s WHERE id = %s", (f"k{step % 5}", step, i)
        elif kind == 4:
            yield f"DELETE FROM {users} WHERE id = %s", (i,)
        elif kind == 5:
            yield f"DELETE name FROM {users} WHERE id = %s", (i,)
        elif kind == 6:
            yield f"INSERT INTO {events} (pk, ck, v) VALUES (%s, %s, %s)", (pk, ck, f"w{step}")
        elif kind == 7:
            yield f"UPDATE {events} SET v = %s WHERE pk = %s AND ck = %s", (f"u{step}", pk, ck)
        elif kind == 8:
            yield f"DELETE FROM {events} WHERE pk = %s AND ck = %s", (pk, ck)
        elif kind == 9:
            low = rng.randrange(20)
            yield f"DELETE FROM {events} WHERE pk = %s AND ck >= %s AND ck < %s", (pk, low, low + 4)
        elif kind == 10:
            yield f"UPDATE {events} SET s = %s WHERE pk = %s", (f"s{step}", pk)
        elif step % 3 == 0:
            yield f"DELETE FROM {events} WHERE pk = %s", (pk,)
        else:
            yield f"INSERT INTO {users} (id, name) VALUES (%s, %s) USING TTL {TTL_S}", (i, f"ttl{step}")


@pytest.fixture(scope="module")
def workload(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Workload:
    keyspace = unique_name("worker")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(
        f"CREATE TABLE {keyspace}.users (id int PRIMARY KEY, name text, score int, tags set<text>, "
        "attrs map<text, int>) WITH cdc = true"
    )
    session.execute(
        f"CREATE TABLE {keyspace}.events (pk int, ck int, v text, s text static, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true AND gc_grace_seconds = 3600"
    )
    session.execute(f"CREATE TABLE {keyspace}.hits (id int PRIMARY KEY, n counter) WITH cdc = true")
    expires_by = 0.0

    def write() -> int:
        nonlocal expires_by
        count = 0
        for text, args in _statements(keyspace, seed=11):
            session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
            count += 1
        expires_by = time.time() + TTL_S + 1
        return count

    workdir = tmp_path_factory.mktemp("worker-agent")
    records, schema_topic = publish_through_agent(cassandra_node, kafka_bootstrap, workdir, keyspace, write)
    catalog = load_schema_from_session(session, [keyspace], with_system_schema=False)
    schemas = {t.table: t for t in catalog.tables()}
    return Workload(keyspace, records, schema_topic, schemas, expires_by)


def check_clean_topics(
    kafka_bootstrap: str, session: Any, workload: Workload, prefix: str, codec: ChangeCodec | None = None
) -> dict[str, int]:
    """Every key's history is a clean chain and ends at Cassandra's row; returns change events per table."""
    counts = {}
    for table, schema in workload.schemas.items():
        events = read_clean_topic(
            kafka_bootstrap, f"{prefix}.{workload.keyspace}.{table}", codec or JsonChangeCodec()
        )
        problems = [p for history in by_key(events).values() for p in chain_problems(history)]
        assert not problems, f"{table}: {len(problems)} broken histories, first: {problems[:5]}"
        difference = compare(select_rows(session, schema), final_images(events))
        assert difference.clean, f"{table}: {difference.summary(3)}"
        counts[table] = sum(1 for e in events if e.value is not None)
    return counts


@dataclass(slots=True, frozen=True)
class Pipeline:
    """One worker deployment under test: its raw topic, consumer group and clean topic prefix."""

    bootstrap: str
    workload: Workload
    raw_topic: str
    app_id: str
    prefix: str
    workdir: Path

    def worker(self, worker_id: str, **extra: Any) -> WorkerProcess:
        """A worker of this deployment (not started) with a data folder of its own."""
        return WorkerProcess(
            self.workdir,
            worker_config(
                bootstrap=self.bootstrap,
                raw_topic=self.raw_topic,
                schema_topic=self.workload.schema_topic,
                raw_partitions=RAW_PARTITIONS,
                data_directory=self.workdir / f"{worker_id}-data",
                app_id=self.app_id,
                worker_id=worker_id,
                topic_prefix=self.prefix,
                worker=extra,
            ),
            worker_id,
        )

    def lag(self) -> int:
        return group_lag(self.bootstrap, self.app_id, self.raw_topic)


def pipeline(kafka_bootstrap: str, workload: Workload, tmp_path: Path, *, copies: int, seed: int) -> Pipeline:
    """Every raw event of the workload `copies` times, shuffled per partition, on a topic of its own."""
    raw_topic = unique_name("cdc_raw")
    copy_shuffled(kafka_bootstrap, workload.raw_records, raw_topic, RAW_PARTITIONS, copies=copies, seed=seed)
    return Pipeline(kafka_bootstrap, workload, raw_topic, unique_name("w"), unique_name("clean"), tmp_path)


def test_three_shuffled_copies_give_one_event_per_change_and_cassandras_rows(
    kafka_bootstrap: str, session: Any, workload: Workload, tmp_path: Path
) -> None:
    run = pipeline(kafka_bootstrap, workload, tmp_path, copies=3, seed=7)
    sent = len(workload.raw_records) * 3
    worker = run.worker("w1")
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: run.lag() == 0, 120, lambda: worker.log_tail())
        # TTLs written during the workload expire now: the timer must tell consumers
        time.sleep(max(0.0, workload.expires_by - time.time()) + 3)
        counts = check_clean_topics(kafka_bootstrap, session, workload, run.prefix)

        status, stats = worker.rest("/stats")
        assert status == 200
        total = stats["total"]
        assert total["in"] == sent, f"/stats counted {total['in']} raw events, {sent} were sent"
        assert total["duplicates"] >= 2 * len(workload.raw_records), (
            f"copies not dropped as duplicates: {total}"
        )
        assert total["emitted"] == sum(counts.values()), f"/stats says {total['emitted']} emitted: {counts}"
        assert total["emitted"] < sent / 3, "more change events than raw events: copies were emitted"
        metrics = worker.metrics()
        assert metrics.value("cdc_worker_expiry_changes_total") > 0, "no TTL expiry was emitted"

        # REST: rows with and without clustering equal Cassandra's, write times equal WRITETIME()
        users = select_rows(session, workload.schemas["users"])
        for key in [{"id": i} for i in range(0, USERS, 7)]:
            expected = users.get(json.dumps(key, sort_keys=True))
            status, body = worker.row(workload.keyspace, "users", key)
            assert status == 200, body
            got = body["rows"][0]["values"] if body["rows"] else None
            assert got == expected, f"REST users {key}: {got} != {expected}"
            if expected is not None and expected["name"] is not None:
                written = session.execute(
                    f"SELECT WRITETIME(name) AS w FROM {workload.keyspace}.users WHERE id = %s", (key["id"],)
                ).one()
                assert body["rows"][0]["cells"]["name"]["writetime"] == written.w, body
        events = select_rows(session, workload.schemas["events"])
        for key in [{"pk": pk, "ck": ck} for pk in range(EVENT_PARTITIONS) for ck in (0, 9)]:
            expected = events.get(json.dumps(key, sort_keys=True))
            status, body = worker.row(workload.keyspace, "events", key)
            assert status == 200, body
            got = body["rows"][0]["values"] if body["rows"] else None
            assert got == expected, f"REST events {key}: {got} != {expected}"
        status, body = worker.row(workload.keyspace, "events", {"pk": 1})
        partition = sorted((v for v in events.values() if v["pk"] == 1), key=lambda v: v["ck"])
        assert [r["values"] for r in body["rows"]] == partition, body
        status, body = worker.row(workload.keyspace, "events", {"pk": "x"})
        assert status == 400 and "pk" in body["error"], body
    finally:
        worker.ensure_stopped()


def test_kill_9_and_a_new_worker_on_an_empty_folder_lose_and_repeat_nothing(
    kafka_bootstrap: str, session: Any, workload: Workload, tmp_path: Path
) -> None:
    run = pipeline(kafka_bootstrap, workload, tmp_path, copies=3, seed=5)

    first = run.worker("first", batch_max_events=20)
    second = run.worker("second", web_token="s3cret")
    try:
        first.start()
        total = len(workload.raw_records) * 3
        wait_until(lambda: run.lag() < total * 0.6, 120, lambda: first.log_tail())
        first.kill()
        lag_at_kill = run.lag()
        assert lag_at_kill > 0, "the first worker finished before it was killed; nothing was tested"

        second.start()
        second.wait_healthy(90)
        wait_until(lambda: run.lag() == 0, 180, lambda: second.log_tail())
        time.sleep(max(0.0, workload.expires_by - time.time()) + 3)
        check_clean_topics(kafka_bootstrap, session, workload, run.prefix)
        status, body = second.rest("/stats")
        assert status == 401, f"/stats without the bearer token answered {status}"
        status, body = second.rest("/stats", token="s3cret")
        assert status == 200 and body["total"]["in"] > 0, body
        assert second.rest("/health")[0] == 200, "/health must stay open without a token"
        status, metrics = second.rest_text("/metrics", token="s3cret")
        restored = Metrics.parse(metrics).value("cdc_worker_restored_changelog_records_total")
        assert restored > 0, "the new worker did not restore the state from the changelog"
    finally:
        first.ensure_stopped()
        second.ensure_stopped()


def test_avro_clean_topics_in_the_confluent_wire_format_decode_to_cassandras_rows(
    kafka_bootstrap: str, session: Any, workload: Workload, tmp_path: Path, schema_registry: SchemaRegistry
) -> None:
    """encoding: avro registers each table's key and value schemas in the real registry and frames every
    record with its id."""
    url = schema_registry.spec.ccompat_url
    run = pipeline(kafka_bootstrap, workload, tmp_path, copies=2, seed=3)
    worker = run.worker("avro", encoding="avro", schema_registry_url=url)
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: run.lag() == 0, 120, lambda: worker.log_tail())
        time.sleep(max(0.0, workload.expires_by - time.time()) + 3)
        codec = AvroChangeCodec(HttpSchemaRegistryClient(url), run.prefix)
        counts = check_clean_topics(kafka_bootstrap, session, workload, run.prefix, codec)
    finally:
        worker.ensure_stopped()
    with urllib.request.urlopen(f"{url}/subjects", timeout=10) as response:
        subjects = {s for s in json.loads(response.read()) if s.startswith(f"{run.prefix}.")}
    expected = {f"{run.prefix}.{workload.keyspace}.{t}-{part}" for t in counts for part in ("key", "value")}
    assert subjects == expected, f"registered subjects {sorted(subjects)}"


#: rows of the wide partition: its static write and its deletion each emit more change records than
#: the batch loop holds before it sends them into the open transaction
WIDE_ROWS = 12_000


def test_a_wide_partition_streams_one_event_per_row_for_a_static_write_and_a_partition_deletion(
    cassandra_node: CassandraNode, kafka_bootstrap: str, session: Any, tmp_path: Path
) -> None:
    keyspace = unique_name("wide")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(
        f"CREATE TABLE {keyspace}.rows (pk int, ck int, v text, s text static, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true"
    )

    def write() -> int:
        insert = f"INSERT INTO {keyspace}.rows (pk, ck, v) VALUES (?, ?, ?)"
        execute_writes(session, [AgentWrite(insert, (1, ck, f"v{ck}")) for ck in range(WIDE_ROWS)])
        session.execute(f"UPDATE {keyspace}.rows SET s = 'static' WHERE pk = 1")  # every row's image
        session.execute(f"DELETE FROM {keyspace}.rows WHERE pk = 1")  # every row goes
        for ck in (3, 7):
            session.execute(f"INSERT INTO {keyspace}.rows (pk, ck, v) VALUES (1, {ck}, 'after')")
        return WIDE_ROWS + 4

    records, schema_topic = publish_through_agent(
        cassandra_node, kafka_bootstrap, tmp_path / "agent", keyspace, write
    )
    schemas = {
        t.table: t for t in load_schema_from_session(session, [keyspace], with_system_schema=False).tables()
    }
    workload = Workload(keyspace, records, schema_topic, schemas, expires_by=0.0)
    raw_topic = unique_name("cdc_raw")
    copy_shuffled(kafka_bootstrap, records, raw_topic, RAW_PARTITIONS, copies=1, seed=None)  # in order
    run = Pipeline(kafka_bootstrap, workload, raw_topic, unique_name("w"), unique_name("clean"), tmp_path)
    worker = run.worker("wide")
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: run.lag() == 0, 180, lambda: worker.log_tail())
        events = read_clean_topic(kafka_bootstrap, f"{run.prefix}.{keyspace}.rows", JsonChangeCodec())
        ops = Counter(e.value["op"] for e in events if e.value is not None)
        assert ops == {"c": WIDE_ROWS + 2, "u": WIDE_ROWS, "d": WIDE_ROWS}, ops
        check_clean_topics(kafka_bootstrap, session, workload, run.prefix)
        assert worker.metrics().value("cdc_worker_sent_early_records_total") >= 2 * WIDE_ROWS
    finally:
        worker.ensure_stopped()


def test_worker_config_errors_name_the_key(tmp_path: Path) -> None:
    """Bad config and an unreachable broker end the worker at once, with the key to fix in the message."""
    cases = {
        f"worker:\n  data_directory: {tmp_path}\n  encoding: avro\n": "worker.schema_registry_url",
        f"worker:\n  data_directory: {tmp_path}\n  app_id: 'a b'\n": "worker.app_id",
        "worker:\n  web_port: 80\n": "worker.data_directory",
        (
            "kafka:\n  bootstrap_servers: 127.0.0.1:9\n  request_timeout_ms: 3000\n"
            f"worker:\n  data_directory: {tmp_path}\n  startup_timeout_s: 1\n"
        ): "kafka.bootstrap_servers",
    }
    for text, key in cases.items():
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "cdc", "worker", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, f"{key}: exit {done.returncode}\n{done.stderr[-2000:]}"
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("cdc: error:") and key in last, f"{key} not named: {last}"
