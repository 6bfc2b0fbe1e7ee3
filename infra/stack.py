"""The local set of services as one unit: `cdc infra up | down | status`.

Services start one after another (two cores: a JVM warming up competes with the next one), each only if
it is not already running, and each is declared up only once it answers its own protocol.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from infra.cassandra import MAX_NODES, CassandraNode, main_cluster_spec
from infra.kafka import KafkaBroker, broker_spec
from infra.settings import InfraSettings

Report = Callable[[str], None]


@dataclass(slots=True)
class ServiceStatus:
    service: str
    running: bool
    pid: int | None
    endpoint: str
    data: str
    log: str


class LocalStack:
    def __init__(self, settings: InfraSettings) -> None:
        self.settings = settings
        self.kafka = KafkaBroker(broker_spec(settings), settings)

    def node(self, index: int) -> CassandraNode:
        return CassandraNode(main_cluster_spec(self.settings, index), self.settings)

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
        self, *, nodes: int = 1, kafka: bool = True, cassandra: bool = True, report: Report = print
    ) -> dict[str, float | None]:
        """Start what is missing; returns seconds each start took (None: it was already running)."""
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
        timings: dict[str, float | None] = {}
        with self._lock():
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
        return timings

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
        """Stop every node (highest first, so the seed goes last) and then the broker."""
        with self._lock():
            for node in reversed(self.known_nodes()):
                if node.stop():
                    report(f"stopped cassandra {node.spec.name}")
            if self.kafka.stop():
                report("stopped kafka")

    def status(self) -> list[ServiceStatus]:
        rows = [
            ServiceStatus(
                service="kafka",
                running=self.kafka.is_running(),
                pid=self.kafka.process.pid(),
                endpoint=f"{self.kafka.spec.bootstrap} (controller :{self.kafka.spec.controller_port})",
                data=str(self.kafka.spec.data),
                log=str(self.kafka.spec.log_file),
            )
        ]
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
                )
            )
        return rows


def format_status(rows: list[ServiceStatus], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(r) for r in rows], indent=2)
    header = ("SERVICE", "STATE", "PID", "ENDPOINT", "DATA", "LOG")
    table = [header] + [
        (r.service, "running" if r.running else "stopped", str(r.pid or "-"), r.endpoint, r.data, r.log)
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
    )
