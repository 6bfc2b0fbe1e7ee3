"""Fixtures shared by the agent tests: agent processes stopped at teardown, a CQL session on node1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cassandra import ConsistencyLevel

from infra.cassandra import CassandraNode
from tests.integration.agent_harness import AgentProcess, cql_session, running_agents


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    """Agents a test starts; every one is stopped when the test ends, whatever happened."""
    with running_agents() as started:
        yield started


@pytest.fixture(scope="module")
def session(cassandra_node: CassandraNode) -> Iterator[Any]:
    """A session on node1 writing at consistency ALL (test modules may define their own)."""
    with cql_session(
        cassandra_node.spec.address, cassandra_node.spec.cql_port, consistency=ConsistencyLevel.ALL
    ) as s:
        yield s


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local[2] SparkSession (Delta and the Kafka connector loaded) shared by every pipeline test:
    a JVM start costs 10-20 s on this machine."""
    from pipeline.spark_session import build_spark_session
    from runtime.config import PipelineConfig

    config = PipelineConfig(lake_directory=tmp_path_factory.mktemp("lake"), shuffle_partitions=2)
    session = build_spark_session(config, "cdc-tests")
    yield session
    session.stop()
