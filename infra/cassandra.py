"""One Apache Cassandra 5.0 node with CDC on, run from Maven Central jars as a child JVM.

Nodes of one cluster share port numbers and differ by loopback address (127.0.0.1, .2, .3), the way a
real cluster differs by host. Each node has its own folders: conf, data, commitlog, cdc_raw, hints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from infra.artifacts import ensure_cassandra, find_jar
from infra.process import ManagedProcess, can_connect, require_free_ports, wait_until_ready
from infra.secret_files import private_folder, write_private
from infra.secure import SecureLayout, ensure_cassandra_keystore, material
from infra.settings import InfraSettings
from infra.toolchain import find_java

MAIN_CLASS = "org.apache.cassandra.service.CassandraDaemon"
MAX_NODES = 3
_TOKEN_SPAN = 2**64

# From Cassandra 5.0's jvm17-server.options: the JDK internals it reaches into.
_JDK17_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    *(
        f"--add-exports={m}=ALL-UNNAMED"
        for m in (
            "java.base/jdk.internal.misc", "java.management.rmi/com.sun.jmx.remote.internal.rmi",
            "java.rmi/sun.rmi.registry", "java.rmi/sun.rmi.server", "java.sql/java.sql",
            "java.base/java.lang.ref", "jdk.unsupported/sun.misc", "jdk.compiler/com.sun.tools.javac.file",
            "jdk.attach/sun.tools.attach",
        )
    ),
    *(
        f"--add-opens={m}=ALL-UNNAMED"
        for m in (
            "java.base/java.lang.module", "java.base/jdk.internal.loader", "java.base/jdk.internal.ref",
            "java.base/jdk.internal.reflect", "java.base/jdk.internal.math", "java.base/jdk.internal.module",
            "java.base/jdk.internal.util.jar", "jdk.management/com.sun.management.internal",
            "java.base/sun.nio.ch", "java.base/java.io", "java.base/java.nio", "java.base/java.lang.reflect",
            "jdk.compiler/com.sun.tools.javac", "java.base/java.lang", "java.base/java.util",
        )
    ),
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]  # fmt: skip

_LOGBACK = """<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <logger name="org.apache.cassandra" level="INFO"/>
  <logger name="com.thinkaurelius.thrift" level="ERROR"/>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""


def ring_token(index: int) -> int:
    """Evenly spaced Murmur3 token of node `index` (1-based) in a ring of MAX_NODES, fixed at first start."""
    return -(2**63) + (index - 1) * (_TOKEN_SPAN // MAX_NODES)


@dataclass(slots=True, frozen=True)
class NodeSpec:
    """Everything that makes one node distinct: identity, address, ports, folders, yaml overrides."""

    name: str
    address: str
    cluster_name: str
    seeds: str
    initial_token: int
    root: Path
    log_file: Path
    cql_port: int = 9042
    storage_port: int = 7000
    jmx_port: int = 7199
    heap_mb: int = 1024
    commitlog_sync_period_ms: int = 100
    cdc_total_space_mb: int = 1024
    commitlog_segment_size_mb: int = 8
    extra_yaml: dict[str, object] = field(default_factory=dict)

    @property
    def cdc_raw(self) -> Path:
        return self.root / "cdc_raw"

    @property
    def commitlog(self) -> Path:
        return self.root / "commitlog"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def conf(self) -> Path:
        return self.root / "conf"


def _node_spec(
    settings: InfraSettings,
    name: str,
    *,
    address: str,
    cluster_name: str,
    seeds: str,
    initial_token: int,
    jmx_port: int,
    extra_yaml: dict[str, object] | None = None,
) -> NodeSpec:
    return NodeSpec(
        name=name,
        address=address,
        cluster_name=cluster_name,
        seeds=seeds,
        initial_token=initial_token,
        root=settings.home / "cassandra" / name,
        log_file=settings.logs / f"cassandra-{name}.log",
        cql_port=settings.cql_port,
        storage_port=settings.storage_port,
        jmx_port=jmx_port,
        heap_mb=settings.cassandra_heap_mb,
        commitlog_sync_period_ms=settings.commitlog_sync_period_ms,
        cdc_total_space_mb=settings.cdc_total_space_mb,
        commitlog_segment_size_mb=settings.commitlog_segment_size_mb,
        extra_yaml={**settings.extra_cassandra_yaml, **(extra_yaml or {})},
    )


def main_cluster_spec(settings: InfraSettings, index: int) -> NodeSpec:
    """Node `index` (1..3) of the local cluster: address 127.0.0.<index>, seed 127.0.0.1."""
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"node index {index} is outside 1..{MAX_NODES}")
    return _node_spec(
        settings,
        f"node{index}",
        address=f"127.0.0.{index}",
        cluster_name=settings.cluster_name,
        seeds=f"127.0.0.1:{settings.storage_port}",
        initial_token=ring_token(index),
        jmx_port=settings.jmx_base_port + 100 * (index - 1),
    )


def standalone_spec(
    settings: InfraSettings,
    name: str,
    *,
    address: str,
    jmx_port: int,
    extra_yaml: dict[str, object] | None = None,
) -> NodeSpec:
    """A one-node cluster of its own on `address`, beside the main cluster (e.g. another commit-log format).

    It seeds itself and owns the whole ring; `extra_yaml` overrides cassandra.yaml keys, such as
    `storage_compatibility_mode` or `commitlog_compression`.
    """
    return _node_spec(
        settings,
        name,
        address=address,
        cluster_name=f"{settings.cluster_name}-{name}",
        seeds=f"{address}:{settings.storage_port}",
        initial_token=ring_token(1),
        jmx_port=jmx_port,
        extra_yaml=extra_yaml,
    )


def render_yaml(spec: NodeSpec, security: dict[str, object] | None = None) -> dict[str, object]:
    """cassandra.yaml for the node: CDC on, periodic commit-log sync, loopback only, small memtables.

    `security` (secure mode: passwords, TLS-only CQL; see infra.cassandra_auth) goes in before the
    node's own `extra_yaml`.
    """
    config: dict[str, object] = {
        "cluster_name": spec.cluster_name,
        "num_tokens": 1,
        "initial_token": str(spec.initial_token),
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "endpoint_snitch": "SimpleSnitch",
        "seed_provider": [
            {
                "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                "parameters": [{"seeds": spec.seeds}],
            }
        ],
        "listen_address": spec.address,
        "rpc_address": spec.address,
        "storage_port": spec.storage_port,
        "native_transport_port": spec.cql_port,
        "start_native_transport": True,
        "data_file_directories": [str(spec.data)],
        "commitlog_directory": str(spec.commitlog),
        "hints_directory": str(spec.root / "hints"),
        "saved_caches_directory": str(spec.root / "saved_caches"),
        "cdc_raw_directory": str(spec.cdc_raw),
        "cdc_enabled": True,
        "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
        "cdc_block_writes": True,
        "commitlog_sync": "periodic",
        "commitlog_sync_period": f"{spec.commitlog_sync_period_ms}ms",
        "commitlog_segment_size": f"{spec.commitlog_segment_size_mb}MiB",
        "memtable_heap_space": "64MiB",
        "memtable_offheap_space": "64MiB",
        "concurrent_reads": 8,
        "concurrent_writes": 8,
        "concurrent_counter_writes": 4,
        "authenticator": "AllowAllAuthenticator",
        "authorizer": "AllowAllAuthorizer",
        "disk_failure_policy": "stop",
        "commit_failure_policy": "stop",
        "auto_snapshot": False,
        "hinted_handoff_enabled": True,
        "storage_compatibility_mode": "CASSANDRA_4",
    }
    config.update(security or {})
    config.update(spec.extra_yaml)
    return config


class CassandraNode:
    """Start, check and stop one node described by a NodeSpec; secure mode follows settings.secure."""

    def __init__(self, spec: NodeSpec, settings: InfraSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.process = ManagedProcess(
            name=f"cassandra {spec.name}",
            pid_file=spec.root / "cassandra.pid",
            log_file=spec.log_file,
            marker=f"-Dcassandra.config=file://{spec.conf / 'cassandra.yaml'}",
        )

    def is_running(self) -> bool:
        return self.process.is_running()

    def cql_answers(self) -> bool:
        """A CQL query answers on this node (not just an open port); over TLS with a login in secure mode."""
        if not can_connect(self.spec.address, self.spec.cql_port):
            return False
        if self.settings.secure:
            from infra import cassandra_auth

            return cassandra_auth.answers(self.spec.address, self.spec.cql_port, material(self.settings))
        from infra.cql import query_release_version

        return query_release_version(self.spec.address, self.spec.cql_port) is not None

    def start(self) -> float | None:
        """Start the node and wait until it answers CQL; None if it was already running."""
        if self.is_running():
            wait_until_ready(
                self.process, self.cql_answers, timeout_s=self.settings.start_timeout_s, what=self._what()
            )
            self._ensure_login_role()
            return None
        spec = self.spec
        require_free_ports(
            self._what(),
            [(spec.address, spec.cql_port), (spec.address, spec.storage_port), ("127.0.0.1", spec.jmx_port)],
        )
        java = find_java()
        lib = ensure_cassandra(self.settings)
        for folder in (spec.conf / "triggers", spec.data, spec.commitlog, spec.cdc_raw, spec.root / "hints"):
            folder.mkdir(parents=True, exist_ok=True)
        config_file = spec.conf / "cassandra.yaml"
        if self.settings.secure:
            from infra import cassandra_auth

            private_folder(spec.root)  # data and config: system_auth holds the password hashes
            ensure_cassandra_keystore(self.settings, spec.address)
            security = cassandra_auth.yaml_overrides(SecureLayout.of(self.settings), spec.address)
            write_private(config_file, yaml.safe_dump(render_yaml(spec, security), sort_keys=False))
        else:
            config_file.write_text(yaml.safe_dump(render_yaml(spec), sort_keys=False))
        (spec.conf / "logback.xml").write_text(_LOGBACK)
        argv = [
            str(java.executable),
            f"-Xms{spec.heap_mb}m", f"-Xmx{spec.heap_mb}m", "-Xss256k",
            "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1", "-XX:MaxGCPauseMillis=300",
            "-XX:+UseTLAB", "-XX:+ResizeTLAB", "-XX:+PerfDisableSharedMem", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.net.preferIPv4Stack=true",
            *_JDK17_FLAGS,
            f"-javaagent:{find_jar(lib, 'jamm-')}",
            f"-Dcassandra.config=file://{spec.conf / 'cassandra.yaml'}",
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.storagedir={spec.root}",
            f"-Dcassandra.logdir={spec.log_file.parent}",
            f"-Dlogback.configurationFile={spec.conf / 'logback.xml'}",
            f"-Dcassandra.jmx.local.port={spec.jmx_port}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Djava.rmi.server.hostname=127.0.0.1",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=5000",
            "-Dcassandra.superuser_setup_delay_ms=0",
            f"-Dcassandra.triggers_dir={spec.conf / 'triggers'}",
            "-Dchronicle.analytics.disable=true",
            "-Dchronicle.announcer.disable=true",
            "-cp", f"{lib}/*",
            MAIN_CLASS,
        ]  # fmt: skip
        env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
        self.process.start(argv, env=env, cwd=spec.root)
        took = wait_until_ready(
            self.process, self.cql_answers, timeout_s=self.settings.start_timeout_s, what=self._what()
        )
        self._ensure_login_role()
        return took

    def _ensure_login_role(self) -> None:
        """Secure mode: role `cdc` exists and the default superuser cannot log in (a no-op once done)."""
        if self.settings.secure:
            from infra import cassandra_auth

            cassandra_auth.ensure_cdc_role(self.spec.address, self.spec.cql_port, material(self.settings))

    def stop(self) -> bool:
        return self.process.stop()

    def kill(self) -> bool:
        """kill -9: the node dies without flushing; its commit log is replayed when it starts again."""
        return self.process.kill()

    def _what(self) -> str:
        tls = "TLS " if self.settings.secure else ""
        return f"Cassandra {self.spec.name} ({tls}{self.spec.address}:{self.spec.cql_port})"
