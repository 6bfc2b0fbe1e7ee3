"""`cdc verify`: a seeded workload on the three-node cluster (RF=3) with one agent per node and several
workers, faults while it runs, then Cassandra's `SELECT` at ALL against the workers' state and the clean
topics, table by table, with a JSON report.

The run owns its topics, consumer group and keyspace (all named after the run id), so runs never see each
other's events; the local services are shared and left running.

With secured local services (`cdc infra up --secure`, settings.secure) the run's own clients log in over
TLS, and the configs it writes for agents and workers carry `kafka.security` and the cassandra login and
TLS, their passwords as `file:` references (cdc/local_security.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.local_security import cassandra_config, kafka_config, local_material, with_security
from cdc.verify.faults import (
    FaultInjector,
    FaultPlan,
    Supervisor,
    replicate_logins,
    wait_for_schema_agreement,
)
from cdc.verify.oracle import by_key, chain_problems, compare, final_images, read_clean_topic, select_rows
from cdc.verify.workload.operation import Operation
from cdc.verify.workload.seeded_workload import Workload
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.cassandra_session import cassandra_cluster
from runtime.config import CassandraConfig, KafkaConfig
from runtime.kafka_clients import make_admin, make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from runtime.service_process import ServiceProcess, free_port
from schemas.change_json import JsonChangeCodec
from schemas.driver_rows import key_text

log = logging.getLogger(__name__)

RAW_PARTITIONS = 12


@dataclass(slots=True)
class VerifyOptions:
    workdir: Path
    seed: int = 1
    operations: int = 2000
    clients: int = 4
    workers: int = 2
    faults: list[str] = field(default_factory=list)
    fault_count: int | None = None
    """How many faults in all (default: one of each kind asked for)."""
    ttl_range_s: tuple[int, int] = (3, 15)
    idle_timeout_s: float = 600.0
    report_path: Path | None = None


@dataclass(slots=True)
class ClientStats:
    acks_ms: dict[int, float] = field(default_factory=dict)
    """Write timestamp (µs) -> when Cassandra acknowledged the write (epoch ms)."""
    errors: Counter[str] = field(default_factory=Counter)
    #: the first message of each kind of client error, with its statement, for the report
    error_examples: dict[str, str] = field(default_factory=dict)
    done: int = 0


def connect_cluster(cassandra: CassandraConfig) -> Cluster:
    """The run's own driver Cluster: the config's contact points, port, login and TLS."""
    profile = ExecutionProfile(request_timeout=30.0, consistency_level=ConsistencyLevel.QUORUM)
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    return cassandra_cluster(
        cassandra, protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile}
    )


class VerifyRun:
    def __init__(
        self, settings: InfraSettings, options: VerifyOptions, say: Callable[[str], None] = print
    ) -> None:
        self.settings = settings
        self.options = options
        self.say = say
        self.run_id = f"{int(time.time())}_{options.seed}_{uuid.uuid4().hex[:6]}"
        self.keyspace = f"verify_{self.run_id}"
        self.raw_topic = f"verify.{self.run_id}.raw"
        self.schema_topic = f"verify.{self.run_id}.schemas"
        self.app_id = f"verify-{self.run_id}"
        self.prefix = f"verify_{self.run_id}"
        self.stack = LocalStack(settings)
        self.material: SecureMaterial | None = None
        """Secure mode's files once the services are up (None in plaintext mode)."""
        self.kafka = KafkaConfig(bootstrap_servers=self.stack.kafka.spec.bootstrap, raw_topic=self.raw_topic)
        """The run's own Kafka clients' config; with the services' security once they are up."""
        self.agents: list[ServiceProcess] = []
        self.workers: list[ServiceProcess] = []

    # -- processes

    def _agent(self, index: int) -> ServiceProcess:
        node = self.stack.node(index)
        port = free_port()
        workdir = self.options.workdir / f"agent-{index}"
        config = {
            "cluster": "verify",
            "kafka": self._kafka_section(),
            "cassandra": {
                "contact_points": [node.spec.address],
                "port": node.spec.cql_port,
                "keyspaces": [self.keyspace],
            },
            "agent": {
                "cdc_raw_directory": str(node.spec.cdc_raw),
                "state_directory": str(workdir / "state"),
                "node": node.spec.name,
                "metrics_port": port,
                "poll_interval_ms": 50,
            },
        }
        return ServiceProcess(
            "agent", f"agent-{node.spec.name}", with_security(config, self.material), workdir, port
        )

    def _worker(self, index: int) -> ServiceProcess:
        port = free_port()
        workdir = self.options.workdir / f"worker-{index}"
        config = {
            "cluster": "verify",
            "kafka": self._kafka_section(),
            "worker": {
                "data_directory": str(workdir / "data"),
                "app_id": self.app_id,
                "worker_id": f"worker-{index}",
                "clean_topic_prefix": self.prefix,
                "web_port": port,
                "transaction_timeout_ms": 10_000,
            },
        }
        return ServiceProcess(
            "worker", f"worker-{index}", with_security(config, self.material), workdir, port
        )

    def _kafka_section(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.stack.kafka.spec.bootstrap,
            "raw_topic": self.raw_topic,
            "schema_topic": self.schema_topic,
            "raw_partitions": RAW_PARTITIONS,
        }

    # -- the run

    def run(self) -> dict[str, Any]:
        options = self.options
        started = time.monotonic()
        self.say(f"verify run {self.run_id}: seed {options.seed}, {options.operations} operations, "
                 f"{options.clients} clients, {options.workers} workers, faults {options.faults or 'none'}")  # fmt: skip
        self.stack.up(nodes=3, report=self.say)
        self.material = local_material(self.stack)
        self.kafka = kafka_config(
            self.material, bootstrap_servers=self.kafka.bootstrap_servers, raw_topic=self.raw_topic
        )
        nodes = [self.stack.node(i) for i in (1, 2, 3)]
        cluster = connect_cluster(
            cassandra_config(
                self.material, contact_points=[n.spec.address for n in nodes], port=nodes[0].spec.cql_port
            )
        )
        session = cluster.connect()
        supervisor: Supervisor | None = None
        try:
            if self.material is not None and replicate_logins(session, cluster, len(nodes)):
                self.say(
                    f"secure mode: system_auth replicated to all {len(nodes)} nodes (a stopped node keeps no role)"
                )
            workload = Workload(
                self.keyspace,
                options.seed,
                replication_factor=3,
                base_time_us=int(time.time() * 1_000_000),
                ttl_range_s=options.ttl_range_s,
            )
            for statement in workload.setup_statements():
                session.execute(SimpleStatement(statement, consistency_level=ConsistencyLevel.ALL))
            wait_for_schema_agreement(cluster)
            self.agents = [self._agent(i) for i in (1, 2, 3)]
            self.workers = [self._worker(i) for i in range(1, options.workers + 1)]
            for process in (*self.agents, *self.workers):
                process.start()
            for process in (*self.agents, *self.workers):
                process.wait_healthy(180)
            self.say(f"3 agents and {len(self.workers)} workers are up")

            count = options.fault_count if options.fault_count is not None else len(options.faults)
            injector = FaultInjector(
                self.stack,
                self.agents,
                self.workers,
                FaultPlan.spread(options.faults, count, options.operations, options.seed),
                options.seed,
                say=self.say,
            )
            injector.start()
            supervisor = Supervisor([*self.agents, *self.workers], injector, say=self.say)
            supervisor.start()
            workload_started = time.monotonic()
            stats = self._drive(session, cluster, workload, injector)
            injector.finish()
            workload_s = time.monotonic() - workload_started
            self.say(
                f"workload done: {stats.done} operations in {workload_s:.1f} s, errors {dict(stats.errors)}"
            )
            idle_s = self._wait_idle(workload_ended_s=time.monotonic())
            catalog = load_schema_from_session(session, [self.keyspace], with_system_schema=False)
            schemas = {t.table: t for t in catalog.tables() if t.keyspace == self.keyspace}
            report = self._compare(session, schemas, stats)
            supervisor.stop()
            report.update(
                {
                    "run_id": self.run_id,
                    "seed": options.seed,
                    "operations": stats.done,
                    "clients": options.clients,
                    "workers": options.workers,
                    "workload_s": round(workload_s, 1),
                    "idle_wait_s": round(idle_s, 1),
                    "total_s": round(time.monotonic() - started, 1),
                    "faults": [r.as_dict() for r in injector.records],
                    "client_errors": dict(stats.errors),
                    "client_error_examples": stats.error_examples,
                    "unexpected_exits": supervisor.restarts,
                }
            )
        finally:
            if supervisor is not None:
                supervisor.stop()
            for process in (*self.workers, *self.agents):
                process.ensure_stopped()
            cluster.shutdown()
        if options.report_path is not None:
            options.report_path.parent.mkdir(parents=True, exist_ok=True)
            options.report_path.write_text(json.dumps(report, indent=2, default=str))
        return report

    def _drive(
        self, session: Any, cluster: Cluster, workload: Workload, injector: FaultInjector
    ) -> ClientStats:
        """Run every phase with the clients; schema changes happen between phases, all clients paused."""
        stats = ClientStats()
        lock = threading.Lock()
        phases = workload.phases(self.options.operations)
        for number, phase in enumerate(phases):
            work: queue.Queue[Operation | None] = queue.Queue()
            for op in phase.operations:
                work.put(op)
            threads = [
                threading.Thread(
                    target=self._client, args=(session, work, stats, lock, injector), daemon=True
                )
                for _ in range(self.options.clients)
            ]
            for _ in threads:
                work.put(None)
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for statement in phase.schema_change_after:
                session.execute(SimpleStatement(statement, consistency_level=ConsistencyLevel.ALL))
                wait_for_schema_agreement(cluster)
                self.say(f"after phase {number + 1}: {statement}")
        return stats

    @staticmethod
    def _client(
        session: Any,
        work: queue.Queue[Operation | None],
        stats: ClientStats,
        lock: threading.Lock,
        injector: FaultInjector,
    ) -> None:
        while (op := work.get()) is not None:
            consistency = ConsistencyLevel.QUORUM
            statement = SimpleStatement(op.cql, consistency_level=consistency)
            if op.timestamp is None and op.kind.startswith("lwt"):
                statement.serial_consistency_level = ConsistencyLevel.SERIAL
            error, message = None, ""
            for _attempt in range(3):
                try:
                    session.execute(statement, op.params)
                    error = None
                    break
                except Exception as exc:  # a timed-out write may or may not be applied: Cassandra decides
                    error, message = type(exc).__name__, f"{exc} ({op.cql[:200]})"
                    time.sleep(0.5)
            acked = time.time() * 1000
            with lock:
                stats.done += 1
                if error is not None:
                    stats.errors[error] += 1
                    stats.error_examples.setdefault(error, message)
                elif op.timestamp is not None:
                    stats.acks_ms.setdefault(op.timestamp, acked)
                done = stats.done
            injector.progress(done)

    # -- waiting for the pipeline

    def _wait_idle(self, *, workload_ended_s: float) -> float:
        """Until every TTL written has expired (and its change had time to go out), the agents have
        nothing left to send, the raw topic stops growing and the workers' group has consumed it all."""
        began = time.monotonic()
        expiry_done = workload_ended_s + self.options.ttl_range_s[1] + 3.0
        deadline = began + self.options.idle_timeout_s
        stable_since: float | None = None
        last_end: int | None = None
        while True:
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"the pipeline is not idle after {self.options.idle_timeout_s:.0f} s")
            end, lag = asyncio.run(_raw_end_and_lag(self.kafka, self.raw_topic, self.app_id))
            agents_idle = all(_agent_lag(a) == 0 for a in self.agents)
            if end != last_end or not agents_idle or lag:
                stable_since, last_end = None, end
            elif stable_since is None:
                stable_since = now
            if stable_since is not None and now - stable_since >= 3.0 and now >= expiry_done:
                return now - began
            time.sleep(0.5)

    # -- comparing

    def _compare(self, session: Any, schemas: dict[str, TableSchema], stats: ClientStats) -> dict[str, Any]:
        codec = JsonChangeCodec()
        kafka = self.kafka
        tables: dict[str, Any] = {}
        totals = Counter[str]()
        latencies: list[float] = []
        for name, schema in sorted(schemas.items()):
            expected = select_rows(session, schema)
            events = read_clean_topic(kafka, f"{self.prefix}.{self.keyspace}.{name}", codec)
            problems = [p for history in by_key(events).values() for p in chain_problems(history)]
            columns = [c.name for c in schema.all_columns()]
            clean = compare(expected, final_images(events), columns)
            state = compare(expected, self._state_rows(schema, expected, events))
            changes = sum(1 for e in events if e.value is not None)
            tables[name] = {
                "rows": len(expected),
                "change_events": changes,
                "clean_topic": clean.summary(),
                "worker_state": state.summary(),
                "history_problems": len(problems),
                "history_examples": problems[:5],
            }
            totals["lost"] += len(clean.lost) + len(state.lost)
            totals["phantom"] += len(clean.phantom) + len(state.phantom)
            totals["wrong"] += len(clean.wrong) + len(state.wrong)
            totals["duplicate_or_spurious"] += len(problems)
            totals["change_events"] += changes
            first_seen: dict[int, int] = {}
            for event in events:
                if event.value is None:
                    continue
                written = event.value["source"].get("write_time_us")
                if written is not None and (
                    written not in first_seen or event.timestamp_ms < first_seen[written]
                ):
                    first_seen[written] = event.timestamp_ms
            latencies.extend(first_seen[t] - ack for t, ack in stats.acks_ms.items() if t in first_seen)
        latencies.sort()
        ok = not (totals["lost"] or totals["phantom"] or totals["wrong"] or totals["duplicate_or_spurious"])
        return {
            "ok": ok,
            "lost": totals["lost"],
            "phantom": totals["phantom"],
            "wrong_values": totals["wrong"],
            "duplicate_or_spurious_events": totals["duplicate_or_spurious"],
            "change_events": totals["change_events"],
            "events_per_operation": round(totals["change_events"] / max(1, stats.done), 3),
            "latency_ms": _percentiles(latencies),
            "tables": tables,
        }

    def _state_rows(
        self, schema: TableSchema, expected: dict[str, dict[str, Any]], events: list[Any]
    ) -> dict[str, dict[str, Any]]:
        """The rows the workers hold for every key Cassandra or the clean topic knows, read over REST."""
        keys = set(expected) | {e.key_text for e in events}
        worker = next((w for w in self.workers if w.healthy()), self.workers[0])
        names = [c.name for c in schema.partition_key]
        out: dict[str, dict[str, Any]] = {}
        for text in sorted(keys):
            key = json.loads(text)
            static_only = any(key[c.name] is None for c in schema.clustering)
            asked = {n: key[n] for n in names} if static_only else key
            got = worker.get_json(
                f"/rows/{schema.keyspace}/{schema.table}?key={quote(json.dumps(asked), safe='')}",
                timeout_s=15,
            )
            if got is None or got[0] != 200:
                raise RuntimeError(f"REST row {text} of {schema.table} failed: {got}")
            for row in got[1]["rows"]:
                values = row["values"]
                if static_only and any(values[c.name] is not None for c in schema.clustering):
                    continue
                out[key_text({k: values[k] for k in key})] = values
        return out


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"samples": 0, "p50": None, "p90": None, "p99": None, "max": None}

    def at(p: float) -> float:
        return round(values[min(len(values) - 1, int(p * len(values)))], 1)

    return {
        "samples": len(values),
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "max": round(values[-1], 1),
        "mean": round(statistics.fmean(values), 1),
    }


def _agent_lag(agent: ServiceProcess) -> float | None:
    got = agent.get("/metrics", 3.0)
    if got is None or got[0] != 200:
        return None
    for line in got[1].decode().splitlines():
        if line.startswith("cdc_agent_lag_bytes "):
            return float(line.split()[1])
    return None


async def _raw_end_and_lag(kafka: KafkaConfig, topic: str, group: str) -> tuple[int, int]:
    consumer = make_consumer(kafka, enable_auto_commit=False)
    admin = make_admin(kafka)
    await start_kafka_client(consumer, kafka)
    await start_kafka_client(admin, kafka)
    try:
        tps = await topic_partitions(consumer, topic)
        ends = await consumer.end_offsets(tps) if tps else {}
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await consumer.stop()
        await admin.close()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
    return sum(ends.values()), lag
