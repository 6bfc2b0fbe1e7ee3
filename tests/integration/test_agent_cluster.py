"""Acceptance of the node agents on the three-node cluster: one agent per node, one raw topic.

With RF=3 and writes at consistency ALL, every node's commit log holds every write, so the topic must
hold each write three times (once per node), in one Kafka partition, with one digest: what lets the
processor keep one copy.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel

from infra.cassandra import CassandraNode
from tests.integration.agent_harness import (
    AgentProcess,
    RawRecord,
    RawTopic,
    SchemaTopic,
    Signature,
    Write,
    cell,
    cql_session,
    create_keyspace,
    event_signature,
    execute_writes,
    expected_counter,
    int_bytes,
    mixed_writes,
    multiset_difference,
    new_agent,
    row,
    running_agents,
    schema_columns,
    text_bytes,
    unique_name,
    update,
    wait_until,
)

pytestmark = pytest.mark.cluster

CLUSTER_WRITES = 3000


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    with running_agents() as started:
        yield started


def added_column_write(keyspace: str, key: int, ts: int) -> Write:
    value = f"extra {key}"
    return Write(
        f"INSERT INTO {keyspace}.kv (id, v, extra) VALUES (?, ?, ?) USING TIMESTAMP ?",
        (key, "v", value, ts),
        [update(keyspace, "kv", int_bytes(key), rows=[row(
            liveness=(ts, 0), cells=[cell("v", text_bytes("v"), ts), cell("extra", text_bytes(value), ts)]
        )])],
    )  # fmt: skip


def test_rf3_every_write_is_published_once_per_replica_in_one_partition_with_one_digest(
    cassandra_cluster: list[CassandraNode], kafka_bootstrap: str, agents: list[AgentProcess], tmp_path: Path
) -> None:
    """3000 mixed writes at ALL, then 200 to a column added while the agents run, then that column
    dropped: three copies of each write, and no agent publishes a schema read half before a change."""
    ks = unique_name("agent_rf3")
    first = cassandra_cluster[0].spec
    raw_topic, schema_topic = unique_name("cdc_raw"), unique_name("cdc_schemas")
    with (
        cql_session(first.address, first.cql_port, consistency=ConsistencyLevel.ALL) as session,
        RawTopic(kafka_bootstrap, raw_topic) as topic,
        SchemaTopic(kafka_bootstrap, schema_topic) as schemas,
    ):
        create_keyspace(session, ks, replication_factor=3)
        for node in cassandra_cluster:
            new_agent(
                agents, tmp_path / node.spec.name, cdc_raw=node.spec.cdc_raw, bootstrap=kafka_bootstrap,
                keyspaces=[ks], name=node.spec.name, node=node.spec.name, contact_points=[node.spec.address],
                raw_topic=raw_topic, schema_topic=schema_topic,
            )  # fmt: skip
        for agent in agents:
            agent.start()
        for agent in agents:
            agent.wait_healthy()
        ts = int(time.time() * 1e6)
        writes = mixed_writes(ks, CLUSTER_WRITES, seed=3, first_timestamp=ts)
        execute_writes(session, writes, concurrency=32)
        caught_up_s = topic.wait_for(
            expected_counter(writes), 180, what="each write from all nodes", copies=3
        )

        # each agent reloads the schema from its own node; the writes are read before the drop that follows
        session.execute(f"ALTER TABLE {ks}.kv ADD extra text")
        added = [added_column_write(ks, i, ts + CLUSTER_WRITES + i) for i in range(200)]
        execute_writes(session, added, concurrency=32)
        topic.wait_for(expected_counter(added), 60, what="the writes to the added column", copies=3)
        writes += added
        session.execute(f"ALTER TABLE {ks}.kv DROP extra")

        def kv_versions() -> list[tuple[set[str], set[str]]]:
            return [schema_columns(e) for e in schemas.events() if (e.keyspace, e.table) == (ks, "kv")]

        wait_until(
            lambda: sum(1 for _, dropped in kv_versions() if dropped == {"extra"}) >= 3,
            60,
            lambda: (
                f"kv with extra dropped from each of the three agents: (columns, dropped) {kv_versions()}"
            ),
        )
        mixed = [(current, dropped) for current, dropped in kv_versions() if current & dropped]
        assert not mixed, f"kv published with columns both current and dropped (a mixed schema read): {mixed}"

        topic.drain(quiet_s=1.5)
        expected = expected_counter(writes)
        three_each = Counter({signature: 3 * n for signature, n in expected.items()})
        difference = multiset_difference(three_each, topic.signatures())
        assert not difference, f"the raw topic differs from three copies of each write: {difference}"
        topic.check_partitioning()
        records = list(topic.records)

    copies: dict[Signature, list[RawRecord]] = defaultdict(list)
    for r in records:
        copies[event_signature(r.event)].append(r)
    nodes = {node.spec.name for node in cassandra_cluster}
    for signature, found in copies.items():
        where = f"{signature[1]} key {signature[2].hex()}"
        assert {r.node for r in found} == nodes, f"{where}: copies from {sorted(r.node for r in found)}"
        assert len({r.partition for r in found}) == 1, (
            f"{where}: copies in partitions {[r.partition for r in found]}"
        )
        assert len({r.digest for r in found}) == 1, (
            f"{where}: copies with digests {[r.digest.hex() for r in found]}"
        )
    digests = {found[0].digest for found in copies.values()}
    assert len(digests) == len(copies), f"{len(copies) - len(digests)} different writes share a digest"
    for agent in agents:
        assert agent.stop() == 0, f"{agent.name}: exit code on SIGTERM; log:\n{agent.log_tail()}"
    print(
        f"{CLUSTER_WRITES} writes at ALL: three copies of each on the topic {caught_up_s:.1f} s after the last"
    )
