"""Session fixtures: real Kafka and real Cassandra, each started once per test session and reused.

Services run under their own home folder (a temporary one, or CDC_TEST_HOME) so a test session never
disturbs a developer's `cdc infra up` services, and stop at the end unless CDC_KEEP_SERVICES=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.cassandra import CassandraNode
from infra.settings import InfraSettings
from infra.stack import LocalStack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run three-node tests last, so the single-node tests never wait for nodes 2 and 3 to start."""
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)


@pytest.fixture(scope="session")
def infra_settings(tmp_path_factory: pytest.TempPathFactory) -> InfraSettings:
    home = os.environ.get("CDC_TEST_HOME")
    return InfraSettings.from_env(home=Path(home) if home else tmp_path_factory.mktemp("cdc-home"))


@pytest.fixture(scope="session")
def local_stack(infra_settings: InfraSettings) -> Iterator[LocalStack]:
    stack = LocalStack(infra_settings)
    yield stack
    if os.environ.get("CDC_KEEP_SERVICES") != "1":
        stack.down(report=lambda _msg: None)


@pytest.fixture(scope="session")
def kafka_bootstrap(local_stack: LocalStack) -> str:
    """bootstrap.servers of the session's real Kafka broker."""
    local_stack.up(cassandra=False, report=lambda _msg: None)
    return local_stack.kafka.spec.bootstrap


@pytest.fixture(scope="session")
def cassandra_node(local_stack: LocalStack) -> CassandraNode:
    """Node 1 of the session's real Cassandra (CDC on)."""
    local_stack.up(kafka=False, report=lambda _msg: None)
    return local_stack.node(1)


@pytest.fixture(scope="session")
def cassandra_cluster(local_stack: LocalStack) -> list[CassandraNode]:
    """The three-node cluster (127.0.0.1-3); grows the single node the earlier tests used."""
    local_stack.up(nodes=3, kafka=False, report=lambda _msg: None)
    return [local_stack.node(i) for i in (1, 2, 3)]
