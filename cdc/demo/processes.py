"""The agents and the worker of one demo run as child processes: their configs, start, readiness, stop.

With secured local services (settings.secure) the configs carry `kafka.security` and the cassandra login
and TLS, passwords as `file:` references (cdc/local_security.py).
"""

from __future__ import annotations

import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc.demo.errors import DemoError
from cdc.demo.table import KEYSPACE
from cdc.demo.topics import APP_PREFIX, CLEAN_PREFIX, PARTITIONS, RAW_TOPIC, SCHEMA_TOPIC
from cdc.local_security import cassandra_config, kafka_config, with_security
from infra.cassandra import CassandraNode
from infra.errors import PortInUseError
from infra.process import ManagedProcess, port_is_free
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.config import CassandraConfig, KafkaConfig
from runtime.service_process import ServiceProcess

AGENT_PORT = 9465
"""Health and metrics of the agent of node N on AGENT_PORT + N - 1 (an operator's agent keeps 9464);
``cdc demo --agent-port`` or CDC_DEMO_AGENT_PORT move it."""
WORKER_PORT = 6067
"""The worker's REST, health and metrics; ``cdc demo --worker-port`` or CDC_DEMO_WORKER_PORT move it."""


@dataclass(slots=True)
class DemoRun:
    """Names, folders and child processes of one demo run."""

    settings: InfraSettings
    stack: LocalStack
    nodes: list[CassandraNode]
    material: SecureMaterial | None = None
    """Secure mode's files (None: plaintext services)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    agents: list[ServiceProcess] = field(default_factory=list)
    worker: ServiceProcess | None = None
    agent_base_port: int = AGENT_PORT
    """The agent of node N listens on this + N - 1."""
    worker_port: int = WORKER_PORT

    @property
    def home(self) -> Path:
        return self.settings.home / "demo"

    @property
    def bootstrap(self) -> str:
        return self.stack.kafka.spec.bootstrap

    @property
    def kafka(self) -> KafkaConfig:
        """The demo's own Kafka clients' config, with the services' security."""
        return kafka_config(self.material, bootstrap_servers=self.bootstrap)

    @property
    def cassandra(self) -> CassandraConfig:
        """The demo's own driver config: every running node, with the services' login and TLS."""
        return cassandra_config(
            self.material,
            contact_points=[n.spec.address for n in self.nodes],
            port=self.nodes[0].spec.cql_port,
        )

    @property
    def processes(self) -> list[ServiceProcess]:
        return [*self.agents, *([self.worker] if self.worker else [])]

    def agent_port(self, node: CassandraNode) -> int:
        return self.agent_base_port + int(node.spec.name.removeprefix("node")) - 1

    def reset_folder(self) -> None:
        """Stop what a killed run left behind, check the ports, and clear the worker's state and the logs."""
        self.home.mkdir(parents=True, exist_ok=True)
        names = [f"agent-{n.spec.name}" for n in self.stack.known_nodes()] + ["worker"]
        leftovers = [
            ManagedProcess(
                n, self.home / f"{n}.pid", self.home / f"{n}.log", f"--config {self.home / n}.yaml"
            )
            for n in names
        ]
        # the agent of the earlier, agent-only demo
        leftovers.append(
            ManagedProcess(
                "agent",
                self.home / "agent.pid",
                self.home / "agent.log",
                f"--config {self.home / 'cdc.yaml'}",
            )
        )
        for leftover in leftovers:
            if leftover.stop(timeout_s=20):
                print(f"stopped the {leftover.name} an earlier demo left running")
        wanted = [(f"agent of {n.spec.name}", self.agent_port(n)) for n in self.nodes]
        for what, port in [*wanted, ("worker REST", self.worker_port)]:
            if not port_is_free("127.0.0.1", port):
                raise PortInUseError(
                    f"the demo needs 127.0.0.1:{port} for its {what}, but another process listens there "
                    f"(another `cdc demo --keep-running`? `ss -ltnp | grep :{port}` shows which); stop it and retry"
                )
        shutil.rmtree(self.home / "worker-data", ignore_errors=True)
        for log in [*self.home.glob("agent-*.log"), self.home / "worker.log"]:
            log.unlink(missing_ok=True)

    def _kafka(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "raw_topic": RAW_TOPIC,
            "schema_topic": SCHEMA_TOPIC,
            "raw_partitions": PARTITIONS,
        }

    def start(self) -> None:
        """One agent per running node (an RF 1 keyspace spreads rows over all of them) and one worker."""
        for node in self.nodes:
            spec = node.spec
            agent = {
                "cluster": self.settings.cluster_name,
                "kafka": self._kafka(),
                "cassandra": {
                    "contact_points": [spec.address],
                    "port": spec.cql_port,
                    "keyspaces": [KEYSPACE],
                },
                "agent": {
                    "cdc_raw_directory": str(spec.cdc_raw),
                    "state_directory": str(self.home / f"agent-{spec.name}-state"),
                    "node": spec.name,
                    "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
                    "metrics_port": self.agent_port(node),
                },
            }
            self.agents.append(
                ServiceProcess(
                    "agent",
                    f"agent-{spec.name}",
                    with_security(agent, self.material),
                    self.home,
                    self.agent_port(node),
                )
            )
        worker = {
            "cluster": self.settings.cluster_name,
            "kafka": self._kafka(),
            "worker": {
                "data_directory": str(self.home / "worker-data"),
                "app_id": f"{APP_PREFIX}{self.run_id}",
                "worker_id": f"demo-{self.run_id}",
                "clean_topic_prefix": CLEAN_PREFIX,
                "clean_partitions": PARTITIONS,
                "web_port": self.worker_port,
                "expiry_interval_ms": 500,
                "transaction_timeout_ms": 10_000,
            },
        }
        self.worker = ServiceProcess(
            "worker", "worker", with_security(worker, self.material), self.home, self.worker_port
        )
        began = time.monotonic()
        for process in self.processes:
            process.start()
            assert process.process is not None
            (self.home / f"{process.name}.pid").write_text(f"{process.process.pid}\n")
        ports = ", ".join(f"{a.name} (:{a.port})" for a in self.agents)
        print(f"starting {ports} and the worker (REST :{self.worker_port}) ...")
        try:
            for process in self.processes:
                process.wait_healthy(90)
            self._wait_worker_ready(self.worker, 90)
        except RuntimeError as exc:
            raise DemoError(
                f"the pipeline did not come up: {exc}\n(configs and logs in {self.home})"
            ) from exc
        print(f"agent{'s' * (len(self.agents) > 1)} and worker ready in {time.monotonic() - began:.1f} s")

    @staticmethod
    def _wait_worker_ready(worker: ServiceProcess, timeout_s: float) -> None:
        """Healthy is not enough: until the worker owns every raw partition and knows the table, the first
        events would wait for a rebalance and the latencies shown would mislead."""
        deadline = time.monotonic() + timeout_s
        health: Any = None
        while time.monotonic() < deadline and worker.running:
            got = worker.get_json("/health", 2.0)
            health = got[1] if got else None
            if (
                isinstance(health, dict)
                and len(health.get("partitions_assigned", ())) == PARTITIONS
                and health.get("tables_known", 0) >= 1
            ):
                return
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready (last health: {health}):\n{worker.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to all at once, then wait: they drain and save their offsets in parallel."""
        if not self.processes:
            return
        print("stopping agent and worker ...")
        with ThreadPoolExecutor(max_workers=len(self.processes)) as pool:
            list(pool.map(lambda p: p.ensure_stopped(), self.processes))
        for process in self.processes:
            (self.home / f"{process.name}.pid").unlink(missing_ok=True)
