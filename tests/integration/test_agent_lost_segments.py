"""Acceptance of the agent's gap report: segments a Cassandra 5.0 node deleted from cdc_raw unread.

A node of its own runs with `cdc_block_writes: false`, 1 MiB segments and a 4 MiB `cdc_total_space`. The
agent reads a first round of writes and is stopped; a second round fills cdc_raw far past its limit, so
Cassandra deletes the oldest segments, the agent's unfinished one among them. Started again, the agent must
publish one gap record naming the node, the lost segments and window and the CDC tables, count the lost
segments, answer /health "degraded" (still 200: it keeps going) until the gap is acknowledged, and
publish every write of the segments that are left. The window must hold exactly the writes that never
reached the raw topic: the writes go one at a time, so their timestamps follow the commit-log order.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from agents.cdc_raw import list_cdc_segments
from agents.metrics import AgentMetrics
from agents.schema_source import SchemaSource
from infra.cassandra import CassandraNode, standalone_spec
from infra.settings import InfraSettings
from runtime.config import CassandraConfig
from tests.integration.agent_harness import (
    AgentProcess,
    RawTopic,
    TopicReader,
    Write,
    cell,
    cql_session,
    create_keyspace,
    execute_writes,
    expected_counter,
    int_bytes,
    new_agent,
    row,
    text_bytes,
    unique_name,
    update,
    wait_until,
)

SEGMENT_MIB = 1
CDC_TOTAL_MIB = 4
NODE_YAML: dict[str, object] = {
    "cdc_block_writes": False,
    "cdc_total_space": f"{CDC_TOTAL_MIB}MiB",
    "commitlog_segment_size": f"{SEGMENT_MIB}MiB",
}
TABLE = ["CREATE TABLE {ks}.t (id int PRIMARY KEY, v text) WITH cdc = true"]
PAD = 900
#: about 12 segments of writes while the agent is stopped: three times cdc_total_space
FILL_WRITES = 12_000
#: the agent's HTTP port is taken from here (tests keep below the kernel's ephemeral range)
PORT_RANGE = range(21430, 21470)


def free_port_in(ports: range) -> int:
    for port in ports:
        with contextlib.suppress(OSError), socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
            return port
    raise AssertionError(f"no free port in {ports.start}-{ports.stop - 1}")


def writes(keyspace: str, first_id: int, count: int, first_timestamp: int) -> list[Write]:
    out = []
    for i in range(count):
        key, ts, value = first_id + i, first_timestamp + i, f"{first_id + i:09d}-" + "x" * PAD
        out.append(
            Write(
                f"INSERT INTO {keyspace}.t (id, v) VALUES (?, ?) USING TIMESTAMP ?",
                (key, value, ts),
                [
                    update(
                        keyspace,
                        "t",
                        int_bytes(key),
                        rows=[row(liveness=(ts, 0), cells=[cell("v", text_bytes(value), ts)])],
                    )
                ],
            )
        )
    return out


def listing(cdc_raw: Path) -> dict[int, str | None]:
    """Segment id -> its `_cdc.idx` content (None: no index), for segments and indexes alike."""
    seen: dict[int, str | None] = {s.name.segment_id: None for s in list_cdc_segments(cdc_raw)}
    for index in cdc_raw.glob("CommitLog-*_cdc.idx"):
        sid = int(index.name.split("-")[2].split("_")[0])
        with contextlib.suppress(FileNotFoundError):
            text = index.read_text().replace("\n", " ")
            seen[sid] = text if sid in seen else f"{text} (no segment)"
    return dict(sorted(seen.items()))


def post(agent: AgentProcess, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{agent.port}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def gap_records(reader: TopicReader) -> list[tuple[bytes, dict[str, Any]]]:
    reader.drain(quiet_s=1.0)
    return [(key, json.loads(value)) for _, _, key, value in reader.raw]


def test_segments_deleted_unread_are_reported_as_a_gap_with_its_window_and_tables(
    infra_settings: InfraSettings, kafka_bootstrap: str, agents: list[AgentProcess], tmp_path: Path
) -> None:
    name = unique_name("lost-segments").replace("_", "-")
    spec = standalone_spec(
        infra_settings,
        name,
        address="127.0.1.27",
        jmx_port=infra_settings.jmx_base_port + 327,
        extra_yaml=NODE_YAML,
    )
    node = CassandraNode(spec, infra_settings)
    node.start()
    try:
        # what the agent asks before it calls ids it never saw a possible gap
        source = SchemaSource(
            CassandraConfig(contact_points=[spec.address], port=spec.cql_port),
            cluster_name="c",
            metrics=AgentMetrics(),
        )
        try:
            assert source.cdc_block_writes() is False
        finally:
            source.close()
        ks = unique_name("lost")
        agent = new_agent(
            agents, tmp_path, cdc_raw=spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks],
            contact_points=[spec.address], node=name, archive=False,
            agent={"metrics_port": free_port_in(PORT_RANGE), "cdc_total_space": f"{CDC_TOTAL_MIB}MiB"},
        )  # fmt: skip
        gap_topic = f"{agent.raw_topic}.gaps"
        t0 = int(time.time() * 1e6)
        first = writes(ks, 0, 300, t0)
        fill = writes(ks, 300, FILL_WRITES, t0 + 300)
        with cql_session(spec.address, spec.cql_port) as session:
            create_keyspace(session, ks, TABLE, replication_factor=1)

            # 1. the agent reads a first round; nothing is missing, so nothing is reported
            agent.start()
            agent.wait_healthy(timeout_s=90)
            execute_writes(session, first, concurrency=1)
            with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
                topic.wait_for(expected_counter(first), 60, what="the first round")
            metrics = agent.metrics()
            assert metrics.value("cdc_agent_lost_segments_total") == 0
            with TopicReader(kafka_bootstrap, gap_topic) as reader:
                assert gap_records(reader) == [], "a gap reported while nothing was missing"
            health = agent.health()
            assert health is not None and health["status"] == "ok", health
            assert agent.stop() == 0, agent.log_tail()
            before = listing(spec.cdc_raw)
            offsets = {int(k): v for k, v in json.loads(agent.offsets_path.read_text())["segments"].items()}
            known_cdc = {sid for sid, idx in before.items() if idx is not None}
            assert known_cdc, f"no segment with a _cdc.idx after the first round: {before}"

            # 2. with the agent away, three times cdc_total_space of writes: Cassandra deletes segments
            execute_writes(session, fill, concurrency=1)
        after = listing(spec.cdc_raw)
        print(f"cdc_raw when the agent stopped: {before}\ncdc_raw after the fill: {after}")
        vanished = sorted(known_cdc - set(after))
        assert vanished, (
            f"Cassandra deleted none of the segments the agent had not finished ({sorted(known_cdc)}): "
            f"cdc_raw before {before}, after {after}"
        )

        # 3. started again, the agent reports the gap once and goes on with what is left
        agent.start()
        wait_until(lambda: (agent.health() or {}).get("status") == "degraded", 90,
                   lambda: f"/health to say degraded (last {agent.health()}):\n{agent.log_tail()}")  # fmt: skip
        health = agent.health()
        assert health is not None and health["http_status"] == 200, health
        with TopicReader(kafka_bootstrap, gap_topic) as reader:
            wait_until(
                lambda: bool(gap_records(reader)), 30, lambda: f"a record on {gap_topic}:\n{agent.log_tail()}"
            )
            records = gap_records(reader)
        assert len(records) == 1, records
        key, gap = records[0]
        print(f"gap record: {json.dumps(gap, indent=1)}")
        assert key == name.encode() and gap["node"] == name and gap["cluster"] == "acceptance"
        assert gap["certain"] is True
        assert gap["tables"] == [f"{ks}.t"]
        assert f"--tables {ks}.t" in gap["recovery"]
        lost = {s["segment_id"]: s for s in gap["lost_segments"]}
        assert set(vanished) <= set(lost), f"lost segments {sorted(lost)}, vanished {vanished}"
        for sid in vanished:
            assert lost[sid]["acknowledged_position"] == offsets.get(sid, 0), (lost[sid], offsets)
            assert lost[sid]["cdc_index_offset"] >= lost[sid]["acknowledged_position"], lost[sid]
        metrics = agent.metrics()
        assert metrics.value("cdc_agent_lost_segments_total") == len(lost)
        assert metrics.value("cdc_agent_unacknowledged_gaps") == 1

        # the window holds exactly the writes that are not on the raw topic
        window = gap["window"]
        start = window["last_read_before"]["write_time_us"]
        end = window["first_after"]["first_event"]["write_time_us"]
        survivors = [w for w in fill if w.params[2] >= end]
        with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
            topic.wait_for(expected_counter(survivors), 120, what="the writes in the segments left")
            topic.drain(quiet_s=1.0)
            published = topic.signatures()
        missing = [w.params[2] for w in first + fill if published[w.expected[0]] == 0]
        assert missing, "every write was published, though segments were deleted unread"
        assert start < min(missing) and max(missing) < end, (
            f"writes missing from the raw topic with timestamps {min(missing)}..{max(missing)} lie outside "
            f"the reported window {start}..{end}"
        )
        assert len(missing) == sum(1 for w in first + fill if start < w.params[2] < end), (
            "a write inside the window reached the raw topic"
        )
        print(
            f"{len(missing)} writes lost in segments {sorted(lost)}; unaccounted {gap['unaccounted_segment_ids']}"
        )

        # 4. degraded survives a restart (no second record), until acknowledged
        assert agent.stop() == 0, agent.log_tail()
        agent.start()
        wait_until(
            lambda: (agent.health() or {}).get("status") == "degraded", 90, lambda: f"{agent.health()}"
        )
        status, body = post(agent, "/gaps/acknowledge")
        assert status == 200 and body["acknowledged"] == [gap["gap_id"]], body
        agent.wait_healthy(timeout_s=10)
        assert agent.metrics().value("cdc_agent_unacknowledged_gaps") == 0
        with TopicReader(kafka_bootstrap, gap_topic) as reader:
            assert len(gap_records(reader)) == 1, "the gap was published again after a restart"
        assert agent.stop() == 0, agent.log_tail()
    finally:
        for agent_process in agents:
            agent_process.ensure_stopped()
        node.stop()
        shutil.rmtree(spec.root, ignore_errors=True)
