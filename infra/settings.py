"""Where local services keep their files, which versions they run and how they are sized.

Every value has a default that works on a 2-core, 24 GB machine, and an environment override so CI and
users can move the folders or resize the JVMs without editing code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

CASSANDRA_VERSION = "5.0.8"
KAFKA_VERSION = "3.9.2"
#: the PySpark release pinned in pyproject.toml; the Kafka connector jars must match it exactly
SPARK_VERSION = "4.2.0"
#: Delta Lake built for that Spark line (artifact delta-spark_4.2_2.13)
DELTA_VERSION = "4.4.0"
#: Apicurio Registry, a Confluent-compatible schema registry (infra/registry.py). The 2.6 line runs on
#: Java 17, the project's JDK; 3.x is built for Java 21.
REGISTRY_VERSION = "2.6.13.Final"
#: Debezium's JDBC sink connector, a Kafka Connect plugin (infra/connect.py); runs in a Connect worker of
#: KAFKA_VERSION. The registry's Connect converter is taken at REGISTRY_VERSION.
JDBC_SINK_VERSION = "3.3.1.Final"
#: Debezium's Cassandra 5 connector, a standalone JVM beside a node (its jar-with-dependencies bundles its own
#: Cassandra and Kafka clients): the Java tool `bench/agent_vs_debezium.py` measures our agent against.
DEBEZIUM_CASSANDRA_VERSION = "3.4.1.Final"


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser().resolve() if value else default


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"environment variable {name}={value!r} must be 1 or 0 (true/false)")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be a whole number") from None


@dataclass(slots=True, frozen=True)
class InfraSettings:
    """Settings for one set of local services (one Kafka broker, one Cassandra cluster)."""

    home: Path
    """Run-time state: data, logs and pid files of every service."""
    cache: Path
    """Downloaded jars, shared by every checkout on the machine."""
    cassandra_version: str = CASSANDRA_VERSION
    kafka_version: str = KAFKA_VERSION
    spark_version: str = SPARK_VERSION
    delta_version: str = DELTA_VERSION
    registry_version: str = REGISTRY_VERSION
    jdbc_sink_version: str = JDBC_SINK_VERSION
    debezium_cassandra_version: str = DEBEZIUM_CASSANDRA_VERSION
    cassandra_heap_mb: int = 1024
    kafka_heap_mb: int = 512
    registry_heap_mb: int = 256
    commitlog_sync_period_ms: int = 100
    cdc_total_space_mb: int = 1024
    commitlog_segment_size_mb: int = 8
    start_timeout_s: int = 240
    cluster_name: str = "cdc-local"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    cql_port: int = 9042
    storage_port: int = 7000
    jmx_base_port: int = 7199
    registry_port: int = 8081
    registry: bool = False
    """Also start the schema registry with `up` (`cdc infra up --registry`, CDC_REGISTRY=1)."""
    spark_master_port: int = 7077
    spark_master_ui_port: int = 8080
    spark_worker_port: int = 7078
    """RPC port of Spark worker 1; worker N takes this + N - 1."""
    spark_worker_ui_port: int = 8091
    """Web UI port of Spark worker 1; worker N takes this + N - 1 (8081, Spark's own default, is the
    schema registry's)."""
    spark_workers: int = 2
    spark_worker_cores: int = 1
    spark_worker_memory_mb: int = 1024
    """What each worker offers its executors (pipeline.executor_memory must fit in it)."""
    spark_daemon_heap_mb: int = 256
    spark: bool = False
    """Also start the Spark standalone cluster with `up` (`cdc infra up --spark`, CDC_SPARK=1)."""
    extra_cassandra_yaml: dict[str, object] = field(default_factory=dict)
    secure: bool = False
    """Kafka on SASL_SSL (SCRAM, PLAIN) and Cassandra with passwords and client TLS, instead of plaintext."""

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def tls(self) -> Path:
        """The local certificate authority, server keystores and the client certificate (secure mode)."""
        return self.home / "tls"

    @property
    def secrets(self) -> Path:
        """Generated passwords, one 0600 file each (secure mode)."""
        return self.home / "secure"

    @property
    def cassandra_lib(self) -> Path:
        return self.cache / f"cassandra-{self.cassandra_version}" / "lib"

    @property
    def kafka_libs(self) -> Path:
        return self.cache / f"kafka-{self.kafka_version}" / "libs"

    @property
    def registry_dist(self) -> Path:
        """The unpacked Apicurio Registry distribution: the runner jar and its lib/ folder."""
        return self.cache / f"apicurio-registry-{self.registry_version}"

    @property
    def connect_libs(self) -> Path:
        """The Kafka Connect worker's classpath (connect-runtime, connect-json, a logging backend)."""
        return self.cache / f"kafka-connect-{self.kafka_version}" / "libs"

    @property
    def jdbc_sink_plugin(self) -> Path:
        """A Connect plugin.path entry holding Debezium's JDBC sink (its debezium-connector-jdbc/ folder)."""
        return self.cache / f"debezium-connector-jdbc-{self.jdbc_sink_version}"

    @property
    def debezium_cassandra_dist(self) -> Path:
        """The folder holding Debezium's Cassandra 5 connector as one runnable jar (jar-with-dependencies)."""
        return self.cache / f"debezium-connector-cassandra-5-{self.debezium_cassandra_version}"

    @property
    def apicurio_converter_plugin(self) -> Path:
        """A Connect plugin.path entry holding the registry's converters (its apicurio-converter/ folder)."""
        return self.cache / f"apicurio-converter-{self.registry_version}"

    @property
    def spark_connector_jars(self) -> Path:
        return self.cache / f"spark-{self.spark_version}-connectors-delta-{self.delta_version}"

    @classmethod
    def from_env(cls, **overrides: object) -> InfraSettings:
        """Defaults, then CDC_* environment variables, then explicit overrides (from the command line)."""
        values: dict[str, object] = {
            "home": _env_path("CDC_HOME", Path.home() / ".local" / "state" / "cassandra-cdc"),
            "cache": _env_path("CDC_CACHE_DIR", Path.home() / ".cache" / "cassandra-cdc"),
            "cassandra_heap_mb": _env_int("CDC_CASSANDRA_HEAP_MB", 1024),
            "kafka_heap_mb": _env_int("CDC_KAFKA_HEAP_MB", 512),
            "commitlog_sync_period_ms": _env_int("CDC_COMMITLOG_SYNC_PERIOD_MS", 100),
            "start_timeout_s": _env_int("CDC_START_TIMEOUT_S", 240),
            # Ports move together with CDC_HOME when a second set of services must run beside the first.
            "kafka_port": _env_int("CDC_KAFKA_PORT", 9092),
            "kafka_controller_port": _env_int("CDC_KAFKA_CONTROLLER_PORT", 9093),
            "cql_port": _env_int("CDC_CQL_PORT", 9042),
            "storage_port": _env_int("CDC_STORAGE_PORT", 7000),
            "jmx_base_port": _env_int("CDC_JMX_BASE_PORT", 7199),
            "registry_port": _env_int("CDC_REGISTRY_PORT", 8081),
            "registry_heap_mb": _env_int("CDC_REGISTRY_HEAP_MB", 256),
            "registry": _env_flag("CDC_REGISTRY"),
            "spark_master_port": _env_int("CDC_SPARK_MASTER_PORT", 7077),
            "spark_master_ui_port": _env_int("CDC_SPARK_MASTER_UI_PORT", 8080),
            "spark_worker_port": _env_int("CDC_SPARK_WORKER_PORT", 7078),
            "spark_worker_ui_port": _env_int("CDC_SPARK_WORKER_UI_PORT", 8091),
            "spark_workers": _env_int("CDC_SPARK_WORKERS", 2),
            "spark_worker_cores": _env_int("CDC_SPARK_WORKER_CORES", 1),
            "spark_worker_memory_mb": _env_int("CDC_SPARK_WORKER_MEMORY_MB", 1024),
            "spark": _env_flag("CDC_SPARK"),
            "secure": _env_flag("CDC_SECURE"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)  # type: ignore[arg-type]
        settings.validate()
        return settings

    def validate(self) -> None:
        if not 1 <= self.commitlog_sync_period_ms <= 10_000:
            raise ValueError(
                f"commitlog_sync_period_ms={self.commitlog_sync_period_ms} is out of range 1..10000 "
                "(CDC latency follows it; 100 ms is the default)"
            )
        for name in (
            "kafka_port",
            "kafka_controller_port",
            "cql_port",
            "storage_port",
            "jmx_base_port",
            "registry_port",
            "spark_master_port",
            "spark_master_ui_port",
            "spark_worker_port",
            "spark_worker_ui_port",
        ):
            port = getattr(self, name)
            if not 1 <= port <= 65_535:
                raise ValueError(f"{name}={port} is not a TCP port (set CDC_{name.upper()} to 1..65535)")
        if self.cassandra_heap_mb < 256 or self.kafka_heap_mb < 128:
            raise ValueError("cassandra_heap_mb must be >= 256 and kafka_heap_mb >= 128")
        if not 1 <= self.spark_workers <= 8 or self.spark_worker_cores < 1:
            raise ValueError(
                f"spark_workers={self.spark_workers} must be 1..8 and spark_worker_cores="
                f"{self.spark_worker_cores} at least 1 (CDC_SPARK_WORKERS, CDC_SPARK_WORKER_CORES)"
            )
        if self.spark_worker_memory_mb < 512:
            raise ValueError(
                f"spark_worker_memory_mb={self.spark_worker_memory_mb} must be >= 512 (CDC_SPARK_WORKER_MEMORY_MB)"
            )
        if self.registry_heap_mb < 128:
            raise ValueError(
                f"registry_heap_mb={self.registry_heap_mb} must be >= 128 (CDC_REGISTRY_HEAP_MB)"
            )
