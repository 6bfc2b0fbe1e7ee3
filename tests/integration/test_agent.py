"""Acceptance of the node agent on node1 and the session's Kafka: what reaches the raw and schema topics.

Each test runs its own `cdc agent` process on node1's cdc_raw with topics and a keyspace of its own, and
compares what the topics hold with what the test wrote (bound values and USING TIMESTAMP values it
chose). Processed segments are archived into the test's temporary folder, never deleted.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agents.commitlog.cdc_index import read_cdc_index
from agents.commitlog.log_reader import decode_segment
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import SchemaCatalog
from infra.cassandra import CassandraNode
from runtime.service_process import environment_without_cdc_overrides
from schemas.schema_event import SchemaEvent
from tests.integration.agent_harness import (
    AgentProcess,
    RawTopic,
    SchemaTopic,
    Write,
    bigint_bytes,
    cell,
    create_keyspace,
    event_signature,
    execute_writes,
    expected_counter,
    int_bytes,
    mixed_writes,
    multiset_difference,
    new_agent,
    row,
    schema_columns,
    text_bytes,
    unique_name,
    update,
    wait_until,
)

MIXED_WRITES = 10_000


def table_ids(session: Any, keyspace: str) -> dict[str, uuid.UUID]:
    rows = session.execute(
        "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s", [keyspace]
    )
    return {r.table_name: r.id for r in rows}


def latest_schemas(events: list[SchemaEvent]) -> dict[str, SchemaEvent]:
    """The last schema event of each table id (what a compacted topic keeps)."""
    latest: dict[str, SchemaEvent] = {}
    for event in events:
        latest[event.table_id] = event
    return latest


# ---------------------------------------------------------------------------------------------------------


def test_10k_mixed_writes_are_published_exactly_once_partitioned_by_key(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """Every CDC write becomes exactly one raw event with the content written; nothing else is published.

    The workload mixes inserts (TTL or not), updates, cell/row/range/partition deletions, static cells,
    empty values, a composite partition key, non-CDC writes and batches across a CDC and a non-CDC table.
    """
    keyspace = unique_name("agent_mixed")
    create_keyspace(session, keyspace)
    agent = new_agent(
        agents, tmp_path, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[keyspace]
    )
    agent.start()
    agent.wait_healthy()

    writes = mixed_writes(keyspace, MIXED_WRITES, seed=4, first_timestamp=int(time.time() * 1e6))
    started = time.monotonic()
    execute_writes(session, writes)
    written_s = time.monotonic() - started
    expected = expected_counter(writes)
    assert 0.85 * MIXED_WRITES < sum(expected.values()) < MIXED_WRITES, "the workload lost its non-CDC writes"

    with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
        caught_up_s = topic.wait_for(expected, 120, what=f"{sum(expected.values())} events of the workload")
        topic.drain(quiet_s=1.5)
        difference = multiset_difference(expected, topic.signatures())
        assert not difference, f"the raw topic differs from the workload: {difference}"
        assert topic.partitions == 6, f"raw topic has {topic.partitions} partitions, config says 6"
        topic.check_partitioning()

        ids = table_ids(session, keyspace)
        digests = Counter(r.digest for r in topic.records)
        assert len(digests) == len(topic.records), (
            f"{len(topic.records) - len(digests)} events share a digest with another write"
        )
        for r in topic.records:
            source = r.event["source"]
            assert r.event["table_id"] == str(ids[r.table]), f"{r.table}: table id {r.event['table_id']}"
            assert (source["node"], source["descriptor_version"]) == ("node1", 7), f"source {source}"
            assert source["entry_offset"] < source["position"], (
                f"source {source}: entry ends before it starts"
            )
            assert r.event["is_counter"] is False
    metrics = agent.metrics()
    published = metrics.value("cdc_agent_events_published_total")
    assert published == sum(expected.values()), f"events_published_total {published}"
    assert metrics.value("cdc_agent_segments_quarantined_total") == 0

    with SchemaTopic(kafka_bootstrap, agent.schema_topic) as schema_topic:
        wait_until(lambda: len(schema_topic.events()) >= 2, 30, "two schema events")
        schema_topic.drain(quiet_s=0.5)
        latest = latest_schemas(schema_topic.events())
    published_tables = {(e.keyspace, e.table) for e in latest.values()}
    assert published_tables == {(keyspace, "kv"), (keyspace, "events")}, (
        f"schema topic holds {published_tables}: the CDC tables kv and events, and not plain, were expected"
    )
    for event in latest.values():
        table = load_schema_from_cql(event.cql).by_name(event.keyspace, event.table)
        assert table is not None and str(table.table_id) == event.table_id == str(ids[event.table])
        assert table.cdc and not event.dropped, f"{event.table}: {event}"

    health = agent.health()
    assert health is not None and health["status"] == "ok" and health["kafka_connected"], f"health {health}"
    assert agent.stop() == 0, f"exit code on SIGTERM; log:\n{agent.log_tail()}"
    print(f"{MIXED_WRITES} writes in {written_s:.1f} s; all on the topic {caught_up_s:.1f} s after the last")


# ---------------------------------------------------------------------------------------------------------


def non_captured_updates_since(
    folders: list[Path], catalog: SchemaCatalog, keyspace: str, after: tuple[int, int]
) -> int:
    """Updates of tables the agent does not capture, logged after (segment id, position) `after`.

    Read from cdc_raw and the archive up to what is durable now: an upper bound of what an agent that
    had read up to `after` can have skipped since.
    """
    count = 0
    for folder in folders:
        for path in sorted(folder.glob("CommitLog-*.log")):
            segment_id = int(path.stem.split("-")[-1])
            if segment_id < after[0]:
                continue
            index = read_cdc_index(path.with_name(path.stem + "_cdc.idx"))
            if index is None:
                continue
            updates, _ = decode_segment(path, catalog, limit=index.read_limit, completed=index.completed)
            for u in updates:
                if (segment_id, u.position or 0) <= after:
                    continue
                if not (u.keyspace == keyspace and u.schema.cdc):
                    count += 1
    return count


def test_batch_across_cdc_and_plain_tables_publishes_the_cdc_part_and_counts_the_rest(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """One mutation holding a CDC and a non-CDC update publishes the CDC one; every non-CDC update is
    counted in cdc_agent_mutations_skipped_total{reason="not_captured"}."""
    keyspace = unique_name("agent_batch")
    create_keyspace(session, keyspace)
    agent = new_agent(
        agents, tmp_path, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[keyspace]
    )
    agent.start()
    agent.wait_healthy()
    ts = int(time.time() * 1e6)

    def kv_insert(key: int, value: str, at: int) -> Write:
        w = Write(
            f"INSERT INTO {keyspace}.kv (id, v, n) VALUES (?, ?, ?) USING TIMESTAMP ?", (key, value, key, at)
        )
        w.expected.append(update(keyspace, "kv", int_bytes(key), rows=[row(
            liveness=(at, 0), cells=[cell("v", text_bytes(value), at), cell("n", bigint_bytes(key), at)]
        )]))  # fmt: skip
        return w

    with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
        fence = kv_insert(-1, "fence before", ts)
        execute_writes(session, [fence])
        topic.wait_for(fence.expected, 60, what="the first fence")
        before = agent.metrics().value("cdc_agent_mutations_skipped_total", reason="not_captured")

        writes = [fence]
        plain = "INSERT INTO {ks}.plain (id, v) VALUES (?, ?) USING TIMESTAMP ?"
        same_key = "BEGIN UNLOGGED BATCH {cdc}; " + plain + "; APPLY BATCH"
        logged = "BEGIN BATCH {cdc}; " + plain + "; APPLY BATCH"
        plain_updates = 0
        for i in range(60):  # one partition key in both tables: one commit-log mutation, two updates
            at = ts + 1 + i
            w = kv_insert(i, f"batched {i}", at)
            writes.append(
                Write(
                    same_key.format(cdc=w.statement, ks=keyspace),
                    (*w.params, i, f"plain {i}", at),
                    w.expected,
                )
            )
            plain_updates += 1
        for i in range(60, 90):  # a logged batch over two partitions: two mutations
            at = ts + 1 + i
            w = kv_insert(i, f"logged {i}", at)
            writes.append(
                Write(
                    logged.format(cdc=w.statement, ks=keyspace),
                    (*w.params, 1000 + i, "other", at),
                    w.expected,
                )
            )
            plain_updates += 1
        for i in range(90, 120):
            writes.append(
                Write(
                    f"INSERT INTO {keyspace}.plain (id, v) VALUES (?, ?) USING TIMESTAMP ?",
                    (i, "x", ts + 1 + i),
                )
            )
            plain_updates += 1
        last = kv_insert(-2, "fence after", ts + 500)
        execute_writes(session, writes[1:])
        execute_writes(session, [last])
        writes.append(last)
        expected = expected_counter(writes)
        topic.wait_for(expected, 60, what="the CDC part of the batches")
        after = agent.metrics().value("cdc_agent_mutations_skipped_total", reason="not_captured")
        topic.drain(quiet_s=1.0)
        difference = multiset_difference(expected, topic.signatures())
        assert not difference, f"the raw topic differs from the CDC part of the writes: {difference}"
        topic.check_partitioning()
        fence_source = next(
            r.event["source"] for r in topic.records if event_signature(r.event) == fence.expected[0]
        )

    catalog = load_schema_from_session(session)
    bound = non_captured_updates_since(
        [cassandra_node.spec.cdc_raw, tmp_path / "agent-archive"],
        catalog,
        keyspace,
        (fence_source["segment_id"], fence_source["position"]),
    )
    skipped = after - before
    assert plain_updates <= skipped <= bound, (
        f"not_captured grew by {skipped} over {plain_updates} non-CDC updates written (at most {bound} "
        "non-captured updates were logged since the first fence)"
    )


# ---------------------------------------------------------------------------------------------------------


def test_schema_changes_and_new_tables_are_picked_up_while_running(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """ALTER ADD/DROP, a new CDC table, a table switched to cdc=true and DROP TABLE, all while the agent
    runs: writes after each change are published with the new columns, and the schema topic gets each
    new definition (with the dropped column) and the dropped table."""
    ks = unique_name("agent_ddl")
    create_keyspace(session, ks, ["CREATE TABLE {ks}.t1 (id int PRIMARY KEY, a text) WITH cdc = true"])
    agent = new_agent(
        agents, tmp_path, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks]
    )
    agent.start()
    agent.wait_healthy()
    ts = int(time.time() * 1e6)
    counter = iter(range(10**6))
    seen: list[Write] = []

    def phase(what: str, writes: list[Write]) -> None:
        execute_writes(session, writes)
        seen.extend(writes)
        topic.wait_for(expected_counter(writes), 60, what=f"events written {what}")

    def insert(table: str, columns: dict[str, str | int], key: int) -> Write:
        at = ts + next(counter)
        names = ", ".join(["id", *columns])
        marks = ", ".join("?" * (len(columns) + 1))
        cells = [
            cell(c, text_bytes(v) if isinstance(v, str) else int_bytes(v), at) for c, v in columns.items()
        ]
        return Write(
            f"INSERT INTO {ks}.{table} ({names}) VALUES ({marks}) USING TIMESTAMP ?",
            (key, *columns.values(), at),
            [update(ks, table, int_bytes(key), rows=[row(liveness=(at, 0), cells=cells)])],
        )

    def schema_of(table: str) -> SchemaEvent | None:
        events = [e for e in schemas.events() if e.keyspace == ks and e.table == table]
        return events[-1] if events else None

    with (
        RawTopic(kafka_bootstrap, agent.raw_topic) as topic,
        SchemaTopic(kafka_bootstrap, agent.schema_topic) as schemas,
    ):
        phase("before any change", [insert("t1", {"a": f"a{i}"}, i) for i in range(20)])

        session.execute(f"ALTER TABLE {ks}.t1 ADD b int")
        phase("after ADD b", [insert("t1", {"a": f"a{i}", "b": i}, i) for i in range(20, 40)])
        wait_until(
            lambda: (e := schema_of("t1")) is not None and "b" in columns_of(e),
            30,
            "t1 with b on the schema topic",
        )

        session.execute(f"ALTER TABLE {ks}.t1 DROP a")
        phase("after DROP a", [insert("t1", {"b": i}, i) for i in range(40, 60)])
        wait_until(
            lambda: (e := schema_of("t1")) is not None and "a" not in columns_of(e) and "a" in dropped_of(e),
            30,
            lambda: f"t1 without a (dropped) on the schema topic; last: {schema_of('t1')}",
        )

        session.execute(f"CREATE TABLE {ks}.t2 (id int PRIMARY KEY, c text) WITH cdc = true")
        phase("to a new CDC table", [insert("t2", {"c": f"c{i}"}, i) for i in range(20)])

        session.execute(f"CREATE TABLE {ks}.t3 (id int PRIMARY KEY, d text) WITH cdc = false")
        execute_writes(session, [insert("t3", {"d": "not captured"}, i) for i in range(10)])
        # the agent must read those before the switch: it decodes with the schema it has when it reads
        phase("after the writes to t3 while cdc = false", [insert("t1", {"b": 100}, 100)])
        session.execute(f"ALTER TABLE {ks}.t3 WITH cdc = true")
        phase("after t3 switched to cdc = true", [insert("t3", {"d": f"d{i}"}, i) for i in range(10, 30)])

        t2_id = str(table_ids(session, ks)["t2"])
        session.execute(f"DROP TABLE {ks}.t2")
        wait_until(
            lambda: (e := schema_of("t2")) is not None and e.dropped,
            60,
            lambda: f"t2 marked dropped on the schema topic; last: {schema_of('t2')}",
        )
        topic.drain(quiet_s=1.0)
        expected = expected_counter(seen)
        difference = multiset_difference(expected, topic.signatures())
        assert not difference, f"the raw topic differs from the writes to CDC tables: {difference}"
        topic.check_partitioning()
        timeline: dict[str, list[tuple[bool, bool, tuple[str, ...]]]] = {}
        for e in schemas.events():
            if e.keyspace == ks:
                timeline.setdefault(e.table, []).append((e.dropped, e.cdc, tuple(sorted(columns_of(e)))))
        t2_event = schema_of("t2")

    assert t2_event is not None and t2_event.table_id == t2_id, (
        f"t2 dropped as {t2_event}, its id was {t2_id}"
    )
    assert timeline == {
        "t1": [(False, True, ("a", "id")), (False, True, ("a", "b", "id")), (False, True, ("b", "id"))],
        "t2": [(False, True, ("c", "id")), (True, True, ("c", "id"))],
        "t3": [(False, True, ("d", "id"))],
    }, f"schema topic history (dropped, cdc, columns) per table: {timeline}"


def columns_of(event: SchemaEvent) -> set[str]:
    return schema_columns(event)[0]


def dropped_of(event: SchemaEvent) -> set[str]:
    return schema_columns(event)[1]


# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_extra", "env", "expected"),
    [
        ("  poll_interval_ms: fast\n", {}, ["agent.poll_interval_ms", "file {config}", "whole number"]),
        (
            "",
            {"CDC__KAFKA__RAW_PARTITIONS": "many"},
            ["kafka.raw_partitions", "environment variable CDC__KAFKA__RAW_PARTITIONS", "whole number"],
        ),
        (
            "",
            {"CDC__AGENT__METRICS_PORT": "70000"},
            [
                "agent.metrics_port",
                "environment variable CDC__AGENT__METRICS_PORT",
                "70000 is not a TCP port",
            ],
        ),
        ("  processed_segments: archive\n", {}, ["agent.archive_directory is required", "file {config}"]),
    ],
    ids=["file-value", "env-value", "env-range", "file-missing-dependency"],
)
def test_config_errors_name_the_key_and_its_source(
    tmp_path: Path, yaml_extra: str, env: dict[str, str], expected: list[str]
) -> None:
    """`cdc agent` refuses a bad config before doing anything, naming the key and where the value came from."""
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"agent:\n  cdc_raw_directory: {tmp_path / 'cdc_raw'}\n  state_directory: {tmp_path}\n{yaml_extra}"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cdc", "agent", "--config", str(config)],
        env={**environment_without_cdc_overrides(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, f"exit code {done.returncode}; stderr:\n{done.stderr}"
    message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    for part in expected:
        assert part.format(config=config) in message, (
            f"error {message!r} does not say {part.format(config=config)!r}"
        )
    assert not (tmp_path / "offsets.json").exists()
