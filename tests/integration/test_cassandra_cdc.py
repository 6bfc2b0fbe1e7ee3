"""A real Cassandra 5.0 node with CDC on: writes reach cdc_raw and its durable offset without a flush."""

from __future__ import annotations

import os
import uuid

import pytest

from agents.cdc_raw import list_cdc_segments
from infra.cassandra import CassandraNode
from infra.cql import connect
from tests.integration.cdc_raw_view import markers_found, wait_for


@pytest.fixture(scope="module")
def session(cassandra_node: CassandraNode):
    cluster = connect(cassandra_node.spec.address, cassandra_node.spec.cql_port)
    session = cluster.connect()
    yield session
    cluster.shutdown()


def test_writes_reach_cdc_raw_and_durable_offset_without_flush(
    cassandra_node: CassandraNode, session
) -> None:
    spec = cassandra_node.spec
    keyspace = f"cdc_{uuid.uuid4().hex[:8]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.events (id int PRIMARY KEY, payload text) WITH cdc = true")
    before = {seg.path.name: seg.index.offset for seg in list_cdc_segments(spec.cdc_raw) if seg.index}

    markers = [f"row-{uuid.uuid4().hex}".encode() for _ in range(200)]
    insert = session.prepare(f"INSERT INTO {keyspace}.events (id, payload) VALUES (?, ?)")
    for i, marker in enumerate(markers):
        session.execute(insert, (i, marker.decode()))

    # Every written value must become readable below a durable offset: no nodetool flush is issued.
    wait_for(
        lambda: markers_found(spec.cdc_raw, markers) == set(markers), 10, "all rows below the _cdc.idx offset"
    )

    holding = [seg for seg in list_cdc_segments(spec.cdc_raw) if markers[-1] in seg.durable_bytes()]
    assert holding, "the last row is in no durable segment"
    segment = holding[0]
    assert segment.index.offset > before.get(segment.path.name, 0), "the durable offset did not grow"
    assert not segment.index.completed, "the live segment must not be COMPLETED (nothing was flushed)"
    # cdc_raw holds a hard link to the live commit-log segment, not a copy.
    original = spec.commitlog / segment.path.name
    assert original.exists(), f"{segment.path.name} is not in the commitlog folder"
    assert os.stat(original).st_ino == os.stat(segment.path).st_ino
    assert os.stat(segment.path).st_nlink >= 2
    # The offset is a position inside the (uncompressed, preallocated) segment file.
    assert segment.index.offset <= segment.path.stat().st_size


def test_batch_across_cdc_and_plain_table_reaches_cdc_raw_whole(
    cassandra_node: CassandraNode, session
) -> None:
    """One partition key, two tables, one batch: Cassandra logs one mutation holding both updates.

    cdc_raw therefore carries the non-CDC table's data too; consumers must filter by table.
    """
    spec = cassandra_node.spec
    keyspace = f"mixed_{uuid.uuid4().hex[:8]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.plain (id int PRIMARY KEY, v text) WITH cdc = false")
    session.execute(f"CREATE TABLE {keyspace}.tracked (id int PRIMARY KEY, v text) WITH cdc = true")
    plain, tracked = (f"{kind}-{uuid.uuid4().hex}".encode() for kind in ("plain", "tracked"))
    session.execute(
        f"BEGIN UNLOGGED BATCH "
        f"INSERT INTO {keyspace}.plain (id, v) VALUES (7, '{plain.decode()}'); "
        f"INSERT INTO {keyspace}.tracked (id, v) VALUES (7, '{tracked.decode()}'); "
        f"APPLY BATCH"
    )
    wait_for(
        lambda: markers_found(spec.cdc_raw, [plain, tracked]) == {plain, tracked}, 10, "both updates durable"
    )
