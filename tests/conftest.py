"""Session fixtures: real Kafka and real Cassandra, each started once per test session and reused.

Services run under their own home folder (a temporary one, or CDC_TEST_HOME) so a test session never
disturbs a developer's `cdc infra up` services, and stop at the end unless CDC_KEEP_SERVICES=1.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from infra.cassandra import CassandraNode, standalone_spec
from infra.registry import SchemaRegistry
from infra.settings import InfraSettings
from infra.spark_cluster import SparkCluster
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


@pytest.fixture(scope="session")
def registry_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack that runs only the schema registry (Apicurio, in memory), started on first use.

    Its own home and port (CDC_TEST_REGISTRY_PORT, default 23081: below the ephemeral range and away
    from a developer's 8081), so `cdc infra status` of the Kafka/Cassandra stack never lists it and a
    developer's registry is never touched. Plaintext in every mode, as the registry always is.
    """
    home = os.environ.get("CDC_TEST_HOME")
    settings = InfraSettings.from_env(
        home=Path(home) / "registry-only" if home else tmp_path_factory.mktemp("cdc-registry-home"),
        registry_port=int(os.environ.get("CDC_TEST_REGISTRY_PORT", "23081")),
        secure=False,
    )
    stack = LocalStack(settings)
    try:
        stack.up(kafka=False, cassandra=False, registry=True, report=lambda _msg: None)
        yield stack
    finally:
        if os.environ.get("CDC_KEEP_SERVICES") != "1":
            stack.down(report=lambda _msg: None)


@pytest.fixture(scope="session")
def schema_registry(registry_stack: LocalStack) -> SchemaRegistry:
    """The session's real schema registry; `schema_registry.spec.ccompat_url` is the Confluent-compatible
    API that the worker, our client and confluent-kafka's client are given. Schemas live in memory for the
    session, so tests keep to subjects of their own (unique topic prefixes)."""
    return registry_stack.registry


def _free_port_block(start: int, size: int) -> int:
    """The first port from ``start`` on that begins ``size`` consecutive free loopback ports."""
    from infra.process import port_is_free

    port = start
    while not all(port_is_free("127.0.0.1", p) for p in range(port, port + size)):
        port += size
    return port


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone cluster (master and two 1-core workers from the installed PySpark), started on
    first use and shared by the session's cluster tests. Its own home, and six consecutive ports from
    CDC_TEST_SPARK_PORT (default 23077) on that are free: master, its UI, two workers and their UIs."""
    home = os.environ.get("CDC_TEST_HOME")
    base = _free_port_block(int(os.environ.get("CDC_TEST_SPARK_PORT", "23077")), 6)
    settings = InfraSettings.from_env(
        home=Path(home) / "spark-cluster" if home else tmp_path_factory.mktemp("cdc-spark-home"),
        spark_master_port=base,
        spark_master_ui_port=base + 1,
        spark_worker_port=base + 2,
        spark_worker_ui_port=base + 4,
        spark_workers=2,
        spark_worker_cores=1,
        spark_worker_memory_mb=1024,
        secure=False,
    )
    stack = LocalStack(settings)
    try:
        stack.up(kafka=False, cassandra=False, registry=False, spark=True, report=lambda _msg: None)
        yield stack.spark
    finally:
        stack.down(report=lambda _msg: None)


StandaloneFactory = Callable[[str, dict[str, object]], AbstractContextManager[CassandraNode]]


@pytest.fixture(scope="session")
def standalone_cassandra(infra_settings: InfraSettings) -> StandaloneFactory:
    """Start a one-node cluster with its own cassandra.yaml overrides (on 127.0.1.x) for one `with` block.

    Used for other commit-log formats (descriptor 8, compressed segments); stopped when the block ends
    so the two cores are not shared with idle JVMs.
    """
    numbers = itertools.count(1)

    @contextmanager
    def start(name: str, extra_yaml: dict[str, object]) -> Iterator[CassandraNode]:
        n = next(numbers)
        spec = standalone_spec(
            infra_settings, name, address=f"127.0.1.{n}", jmx_port=7500 + n, extra_yaml=extra_yaml
        )
        node = CassandraNode(spec, infra_settings)
        try:
            node.start()
            yield node
        finally:
            node.stop()

    return start
