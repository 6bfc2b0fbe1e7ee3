"""The local set of services as one unit: `cdc infra up | down | status`.

Services start one after another (two cores: a JVM warming up competes with the next one), each only if
it is not already running, and each is declared up only once it answers its own protocol.

Secure mode (settings.secure, `cdc infra up --secure`, CDC_SECURE=1) runs the same services with Kafka
on SASL_SSL and Cassandra with passwords and TLS; the mode of the last `up` is recorded in the home
folder so `status` reports it and an `up` in the other mode is refused while services run.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra.cassandra import MAX_NODES, CassandraNode, main_cluster_spec
from infra.errors import InfraError
from infra.kafka import KafkaBroker, broker_spec
from infra.kafka_sasl import require_scram_storage
from infra.process import ephemeral_port_warnings
from infra.registry import SchemaRegistry, registry_spec
from infra.secure import SecureMaterial, ensure_shared_material, material
from infra.settings import InfraSettings
from infra.spark_cluster import SparkCluster, spark_cluster_spec

Report = Callable[[str], None]


SECURE = "secure"
PLAINTEXT = "plaintext"


@dataclass(slots=True)
class ServiceStatus:
    service: str
    running: bool
    pid: int | None
    endpoint: str
    data: str
    log: str
    security: str = PLAINTEXT
    """`plaintext`, or how clients must connect: `SASL_SSL` (Kafka), `TLS+password` (Cassandra)."""
    credentials: dict[str, str] = field(default_factory=dict)
    """Secure mode: the user and the files a client needs (CA, password file, client certificate)."""
    cdc_raw: str | None = None
    """A Cassandra node's cdc_raw folder: the agent.cdc_raw_directory of its agent."""


class LocalStack:
    def __init__(self, settings: InfraSettings) -> None:
        self.settings = settings
        self.kafka = KafkaBroker(broker_spec(settings), settings)
        self.registry = SchemaRegistry(registry_spec(settings), settings)
        self.spark = SparkCluster(spark_cluster_spec(settings), settings)

    def node(self, index: int) -> CassandraNode:
        return CassandraNode(main_cluster_spec(self.settings, index), self.settings)

    @property
    def mode_file(self) -> Path:
        return self.settings.home / "mode"

    def recorded_mode(self) -> str | None:
        """The mode of the last `up` under this home (None before the first)."""
        try:
            return self.mode_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def secure_material(self) -> SecureMaterial:
        """The CA, client certificate and credential files of secure mode, made on first use."""
        if not self.settings.secure:
            raise InfraError(
                "secure mode is off for these services: run `cdc infra up --secure` or set CDC_SECURE=1"
            )
        with self._lock():
            return ensure_shared_material(self.settings)

    def known_nodes(self) -> list[CassandraNode]:
        """Nodes that exist on disk or run: node1 always, others once created."""
        nodes = [self.node(1)]
        for index in range(2, MAX_NODES + 1):
            node = self.node(index)
            if node.spec.root.exists():
                nodes.append(node)
        return nodes

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """One `up`/`down` at a time per home folder, so two callers never start the same node twice."""
        self.settings.home.mkdir(parents=True, exist_ok=True)
        with (self.settings.home / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def up(
        self,
        *,
        nodes: int = 1,
        kafka: bool = True,
        cassandra: bool = True,
        registry: bool | None = None,
        spark: bool | None = None,
        report: Report = print,
    ) -> dict[str, float | None]:
        """Start what is missing; returns seconds each start took (None: it was already running).

        The schema registry and the Spark cluster start only when asked (`registry=True`, `spark=True`,
        else settings.registry, settings.spark), last.
        """
        if registry is None:
            registry = self.settings.registry
        if spark is None:
            spark = self.settings.spark
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
        timings: dict[str, float | None] = {}
        for warning in ephemeral_port_warnings(
            self._ports(kafka=kafka, cassandra=cassandra, registry=registry, spark=spark)
        ):
            report(warning)
        with self._lock():
            self._switch_mode(report, kafka=kafka)
            existing = len(self.known_nodes())
            if cassandra and existing > nodes:
                # Nodes 2..N own token ranges: a cluster once grown cannot answer with fewer members.
                report(f"the local cluster has {existing} nodes; starting all of them")
                nodes = existing
            if kafka:
                timings["kafka"] = self._start("kafka", self.kafka.start, report)
            if cassandra:
                for index in range(1, nodes + 1):
                    node = self.node(index)
                    timings[f"cassandra-{node.spec.name}"] = self._start(
                        f"cassandra {node.spec.name} ({node.spec.address})", node.start, report
                    )
            if registry:
                timings["registry"] = self._start(
                    f"schema registry ({self.registry.spec.ccompat_url})", self.registry.start, report
                )
            if spark:
                spec = self.spark.spec
                timings["spark"] = self._start(
                    f"spark master {spec.master_url} and {spec.workers} workers "
                    f"({spec.worker_cores} cores, {spec.worker_memory_mb} MB each)",
                    self.spark.start,
                    report,
                )
        return timings

    def _ports(self, *, kafka: bool, cassandra: bool, registry: bool, spark: bool = False) -> dict[str, int]:
        """The ports ``up`` is about to bind, by the setting that chooses each."""
        settings = self.settings
        ports: dict[str, int] = {}
        if kafka:
            ports |= {
                "kafka_port": settings.kafka_port,
                "kafka_controller_port": settings.kafka_controller_port,
            }
        if cassandra:
            ports |= {
                "cql_port": settings.cql_port,
                "storage_port": settings.storage_port,
                "jmx_base_port": settings.jmx_base_port,
            }
        if registry:
            ports["registry_port"] = settings.registry_port
        if spark:
            ports |= {
                "spark_master_port": settings.spark_master_port,
                "spark_master_ui_port": settings.spark_master_ui_port,
                "spark_worker_port": settings.spark_worker_port,
                "spark_worker_ui_port": settings.spark_worker_ui_port,
            }
        return ports

    def _switch_mode(self, report: Report, *, kafka: bool) -> None:
        """Record the requested mode; refuse to mix modes while services of the other one run.

        Checks that can fail without starting anything run first, so a refused `up` records nothing.
        """
        wanted = SECURE if self.settings.secure else PLAINTEXT
        recorded = self.recorded_mode() or PLAINTEXT
        running = [name for name, up in self._running().items() if up]
        if running and recorded != wanted:
            raise InfraError(
                f"{', '.join(running)} already run in {recorded} mode under {self.settings.home}; stop them "
                f"first with `cdc infra down`, then start them again in {wanted} mode"
            )
        if self.settings.secure:
            if kafka and not self.kafka.is_running():
                require_scram_storage(self.kafka.spec.root, self.kafka.spec.data)
            secure = ensure_shared_material(self.settings)
            report(f"secure mode: CA {secure.ca_file}, credentials in {secure.kafka_password_file.parent}")
        self.mode_file.write_text(f"{wanted}\n")

    def _running(self) -> dict[str, bool]:
        services = {"kafka": self.kafka.is_running()}
        services.update({f"cassandra {n.spec.name}": n.is_running() for n in self.known_nodes()})
        return services

    @staticmethod
    def _start(what: str, start: Callable[[], float | None], report: Report) -> float | None:
        report(f"starting {what} ...")
        began = time.monotonic()
        took = start()
        if took is None:
            report(f"{what}: already running")
        else:
            report(f"{what}: ready in {time.monotonic() - began:.1f} s")
        return took

    def down(self, *, report: Report = print) -> None:
        """Stop the Spark cluster, the registry, every node (highest first, so the seed goes last) and
        then the broker."""
        with self._lock():
            for name in self.spark.stop():
                report(f"stopped {name}")
            if self.registry.stop():
                report("stopped schema registry")
            for node in reversed(self.known_nodes()):
                if node.stop():
                    report(f"stopped cassandra {node.spec.name}")
            if self.kafka.stop():
                report("stopped kafka")

    def status(self) -> list[ServiceStatus]:
        """Every service, with the security of the recorded mode (the mode its files were made for)."""
        secure = self.recorded_mode() == SECURE
        rows = [
            ServiceStatus(
                service="kafka",
                running=self.kafka.is_running(),
                pid=self.kafka.process.pid(),
                endpoint=f"{self.kafka.spec.bootstrap} (controller :{self.kafka.spec.controller_port})",
                data=str(self.kafka.spec.data),
                log=str(self.kafka.spec.log_file),
                **(self._kafka_security() if secure else {}),
            )
        ]
        rows.extend(self._registry_status())
        rows.extend(self._spark_status())
        for node in self.known_nodes():
            spec = node.spec
            rows.append(
                ServiceStatus(
                    service=f"cassandra-{spec.name}",
                    running=node.is_running(),
                    pid=node.process.pid(),
                    endpoint=f"{spec.address}:{spec.cql_port} (storage :{spec.storage_port}, jmx :{spec.jmx_port})",
                    data=str(spec.root),
                    log=str(spec.log_file),
                    cdc_raw=str(spec.cdc_raw),
                    **(self._cassandra_security() if secure else {}),
                )
            )
        return rows

    def _registry_status(self) -> list[ServiceStatus]:
        """The registry's row, once it was asked for (settings) or has run under this home."""
        registry = self.registry
        if not (self.settings.registry or registry.spec.root.exists() or registry.is_running()):
            return []
        return [
            ServiceStatus(
                service="registry",
                running=registry.is_running(),
                pid=registry.process.pid(),
                endpoint=registry.spec.ccompat_url,
                data="(in memory)",
                log=str(registry.spec.log_file),
            )
        ]

    def _spark_status(self) -> list[ServiceStatus]:
        """The master's and each worker's row, once the cluster was asked for or has run under this home."""
        cluster = self.spark
        spec = cluster.spec
        if not (self.settings.spark or spec.root.exists()):
            return []
        alive = cluster.alive_workers() if cluster.is_running() else set()
        rows = [
            ServiceStatus(
                service="spark-master",
                running=cluster.master.is_running(),
                pid=cluster.master.pid(),
                endpoint=f"{spec.master_url} (ui {spec.master_ui}, {len(alive)} workers alive)",
                data=str(spec.root),
                log=str(spec.master_log),
            )
        ]
        for index in cluster.known_workers():
            worker = cluster.worker(index)
            port = spec.worker_port + index - 1
            registered = "registered" if port in alive else "not registered"
            rows.append(
                ServiceStatus(
                    service=f"spark-worker-{index}",
                    running=worker.is_running(),
                    pid=worker.pid(),
                    endpoint=f"127.0.0.1:{port} (ui :{spec.worker_ui_port + index - 1}, "
                    f"{spec.worker_cores} cores, {spec.worker_memory_mb} MB, {registered})",
                    data=str(spec.worker_dir(index)),
                    log=str(spec.worker_log(index)),
                )
            )
        return rows

    def _client_files(self) -> dict[str, str]:
        files = material(self.settings)
        return {
            "ca_file": str(files.ca_file),
            "client_cert": str(files.client_cert),
            "client_key": str(files.client_key),
            "key_password_file": str(files.key_password_file),
        }

    def _kafka_security(self) -> dict[str, object]:
        files = material(self.settings)
        return {
            "security": files.kafka_security_protocol,
            "credentials": {
                "sasl_mechanisms": ",".join(files.kafka_sasl_mechanisms),
                "user": files.kafka_user,
                "password_file": str(files.kafka_password_file),
                **self._client_files(),
            },
        }

    def _cassandra_security(self) -> dict[str, object]:
        files = material(self.settings)
        return {
            "security": "TLS+password",
            "credentials": {
                "user": files.cassandra_user,
                "password_file": str(files.cassandra_password_file),
                **self._client_files(),
            },
        }


def format_status(rows: list[ServiceStatus], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(r) for r in rows], indent=2)
    header = ("SERVICE", "STATE", "PID", "ENDPOINT", "SECURITY", "DATA", "LOG")
    table = [header] + [
        (
            r.service,
            "running" if r.running else "stopped",
            str(r.pid or "-"),
            r.endpoint,
            r.security,
            r.data,
            r.log,
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    nodes = [r for r in rows if r.cdc_raw]
    if nodes:
        lines += ["", "cdc_raw (an agent's agent.cdc_raw_directory):"]
        lines += [f"  {r.service.removeprefix('cassandra-')}  {r.cdc_raw}" for r in nodes]
    return "\n".join(lines + _credential_lines(rows))


def _credential_lines(rows: list[ServiceStatus]) -> list[str]:
    """Secure mode: where a client finds the CA and each service's credentials (files, never secrets)."""
    secured = [r for r in rows if r.credentials]
    if not secured:
        return []
    first = secured[0].credentials
    lines = [
        "",
        f"secure mode: clients trust the CA {first['ca_file']}",
        f"  client certificate {first['client_cert']}, key {first['client_key']} "
        f"(password in {first['key_password_file']})",
    ]
    seen: set[str] = set()
    for row in secured:
        kind = row.service.split("-", 1)[0]
        if kind in seen:
            continue
        seen.add(kind)
        mechanisms = f" {row.credentials['sasl_mechanisms']}" if "sasl_mechanisms" in row.credentials else ""
        lines.append(
            f"  {kind}: {row.security}{mechanisms}, user {row.credentials['user']}, "
            f"password in {row.credentials['password_file']}"
        )
    return lines
