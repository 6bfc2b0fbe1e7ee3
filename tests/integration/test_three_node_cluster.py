"""The local three-node cluster: RF=3 writes at consistency ALL reach every node's cdc_raw."""

from __future__ import annotations

import uuid

import pytest
from cassandra import ConsistencyLevel

from infra.cassandra import CassandraNode
from infra.cql import connect
from tests.integration.cdc_raw_view import markers_found, wait_for

pytestmark = pytest.mark.cluster


def test_rf3_write_at_all_lands_in_every_nodes_cdc_raw(cassandra_cluster: list[CassandraNode]) -> None:
    first = cassandra_cluster[0].spec
    cluster = connect(first.address, first.cql_port)
    try:
        session = cluster.connect()
        peers = {row.peer for row in session.execute("SELECT peer FROM system.peers")}
        assert peers == {node.spec.address for node in cassandra_cluster[1:]}

        keyspace = f"rf3_{uuid.uuid4().hex[:8]}"
        session.execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
        )
        session.execute(f"CREATE TABLE {keyspace}.t (id int PRIMARY KEY, v text) WITH cdc = true")
        insert = session.prepare(f"INSERT INTO {keyspace}.t (id, v) VALUES (?, ?)")
        insert.consistency_level = ConsistencyLevel.ALL
        markers = [f"rf3-{uuid.uuid4().hex}".encode() for _ in range(50)]
        for i, marker in enumerate(markers):
            session.execute(insert, (i, marker.decode()))
    finally:
        cluster.shutdown()

    for node in cassandra_cluster:
        cdc_raw = node.spec.cdc_raw
        wait_for(
            lambda cdc_raw=cdc_raw: markers_found(cdc_raw, markers) == set(markers),
            10,
            f"all 50 rows durable in {node.spec.name}'s cdc_raw",
        )
