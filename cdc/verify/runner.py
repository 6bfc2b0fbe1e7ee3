"""`cdc verify`: a seeded workload on the three-node cluster (RF=3) with one agent per node and several
workers, faults while it runs, then Cassandra's `SELECT` at ALL against the workers' state and the clean
topics, table by table, with a JSON report.

This module runs it: services, clients (each operation recorded with its timing in a WriteLedger), the
faults, the waits. The checks live beside it: live TTLs before they expire (ttl_check), the converged
tables, every image explained and the event counts (table_checks, image_audit, event_counts), what was
set aside (swept_aside, agent_counters), and the verdict (verdict).

The run owns its topics, consumer group and keyspace (all named after the run id), so runs never see each
other's events; the local services are shared and left running.

With secured local services (`cdc infra up --secure`, settings.secure) the run's own clients log in over
TLS, and the configs it writes for agents and workers carry `kafka.security` and the cassandra login and
TLS, their passwords as `file:` references (cdc/local_security.py).
"""

from __future__ import annotations

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

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import FallthroughRetryPolicy
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.local_security import cassandra_config, kafka_config, local_material, with_security
from cdc.verify.agent_counters import AgentCounters
from cdc.verify.cdc_raw_fill import CdcRawFiller
from cdc.verify.commit_cut import CommitCutter, available
from cdc.verify.faults import (
    FaultInjector,
    FaultPlan,
    Supervisor,
    replicate_logins,
    wait_for_schema_agreement,
)
from cdc.verify.ledger_index import LedgerIndex
from cdc.verify.pipeline_wait import PipelineStalled, wait_caught_up, wait_idle
from cdc.verify.state_scan import StateScanError
from cdc.verify.swept_aside import AgentSource, decode_gaps, read_records, swept_aside_report
from cdc.verify.table_checks import TableChecks, check_tables
from cdc.verify.ttl_check import TtlCheck, check_live_ttls
from cdc.verify.verdict import FAILED, INVALID, judged
from cdc.verify.workload.operation import ONE, Operation
from cdc.verify.workload.seeded_workload import Workload
from cdc.verify.write_ledger import WriteLedger
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.cassandra_session import cassandra_cluster
from runtime.config import CassandraConfig, KafkaConfig
from runtime.service_process import ServiceProcess, free_port

log = logging.getLogger(__name__)

RAW_PARTITIONS = 12
#: how long the live TTL check waits for the pipeline to catch up after the workload
CATCH_UP_TIMEOUT_S = 60.0


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


#: the execution profile of the clients' operations: the driver never retries one by itself, so every
#: execution is an attempt the ledger counts (a list append applies anew at each execution)
WORKLOAD_PROFILE = "workload"


def connect_cluster(cassandra: CassandraConfig) -> Cluster:
    """The run's own driver Cluster: the config's contact points, port, login and TLS."""
    profile = ExecutionProfile(request_timeout=30.0, consistency_level=ConsistencyLevel.QUORUM)
    workload = ExecutionProfile(
        request_timeout=30.0,
        consistency_level=ConsistencyLevel.QUORUM,
        retry_policy=FallthroughRetryPolicy(),
    )
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    return cassandra_cluster(
        cassandra,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile, WORKLOAD_PROFILE: workload},
    )


#: the counts of a judged run (cdc/verify/verdict.py), null in a run that cannot be judged
COUNTS = (
    "lost",
    "phantom",
    "wrong_values",
    "duplicate_or_spurious_events",
    "explained_images",
    "unexplained_images",
    "keys_over_bound",
    "noop_events",
    "duplicate_events",
    "dead_letters",
    "swept_aside_unexplained",
    "ttl_compared",
    "ttl_wrong",
    "events_per_operation",
    "latency_ms",
)


def invalid_run(reason: str) -> dict[str, Any]:
    """The report of a run that cannot be judged: its counts are null, not zero, so no summary can read
    them as a pass."""
    return {"ok": False, "verdict": INVALID, "reason": reason, **dict.fromkeys(COUNTS)}


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
        self.agent_sources: list[AgentSource] = []
        self.ledger = WriteLedger()
        self.cutter: CommitCutter | None = None
        """The proxy the workers reach Kafka through, in a run with the commit_cut fault."""

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
        process = ServiceProcess(
            "agent", f"agent-{node.spec.name}", with_security(config, self.material), workdir, port
        )
        self.agent_sources.append(AgentSource(process.name, node.spec.name, workdir / "state" / "quarantine"))
        return process

    def _worker(self, index: int) -> ServiceProcess:
        port = free_port()
        workdir = self.options.workdir / f"worker-{index}"
        kafka = self._kafka_section()
        if self.cutter is not None:
            kafka["bootstrap_servers"] = self.cutter.bootstrap
        config = {
            "cluster": "verify",
            "kafka": kafka,
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
        counters: AgentCounters | None = None
        faults = list(options.faults)
        if "commit_cut" in faults and not available(secure=self.material is not None):
            faults = [f for f in faults if f != "commit_cut"]
            self.say("commit_cut left out: its proxy reads Kafka's frames, and this run's Kafka speaks TLS")
        try:
            if "commit_cut" in faults:
                self.cutter = CommitCutter(self.stack.kafka.spec.bootstrap)
                self.cutter.start()
                self.say(f"the workers reach Kafka through a proxy on {self.cutter.bootstrap} (commit_cut)")
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
            replay = {"keyspace": self.keyspace, "seed": options.seed, "base_time_us": workload.base_time_us,
                      "operations": options.operations, "ttl_range_s": list(options.ttl_range_s)}  # fmt: skip
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
            counters = AgentCounters(self.agents)
            counters.start()

            count = options.fault_count if options.fault_count is not None else len(faults)
            injector = FaultInjector(
                self.stack,
                self.agents,
                self.workers,
                FaultPlan.spread(faults, count, options.operations, options.seed),
                options.seed,
                say=self.say,
                cutter=self.cutter,
                filler=CdcRawFiller(session, cluster, self.keyspace) if "cdc_raw_full" in faults else None,
            )
            injector.start()
            supervisor = Supervisor([*self.agents, *self.workers], injector, say=self.say)
            supervisor.start()
            workload_started = time.monotonic()
            stats = self._drive(session, cluster, workload, injector)
            injector.finish()
            workload_ended = time.monotonic()
            workload_s = workload_ended - workload_started
            self.say(
                f"workload done: {stats.done} operations in {workload_s:.1f} s, errors {dict(stats.errors)}"
            )
            idle_s = 0.0
            converged = False
            if injector.invalid is not None:
                report = invalid_run(injector.invalid)
            else:
                catalog = load_schema_from_session(session, [self.keyspace], with_system_schema=False)
                schemas = {t.table: t for t in catalog.tables() if t.keyspace == self.keyspace}
                ttl = self._live_ttls(session, schemas)
                try:
                    idle_s = wait_idle(
                        self.kafka, self.raw_topic, self.app_id, self.agents,
                        expiry_done_s=workload_ended + options.ttl_range_s[1] + 3.0,
                        timeout_s=options.idle_timeout_s,
                    )  # fmt: skip
                    report = self._compare(session, schemas, stats, ttl)
                    converged = True
                except (PipelineStalled, StateScanError) as exc:
                    report = {**invalid_run(str(exc)), "verdict": FAILED}
            counters.stop()
            if report.get("verdict") != INVALID:  # a stalled run's report says what was set aside too
                swept = self._swept_aside(counters, injector)
                report.update(
                    swept_aside=swept,
                    dead_letters=swept["dead_letters"],
                    swept_aside_unexplained=swept["unexplained"],
                )
            if converged:
                report = judged(report)
            supervisor.stop()
            report.update(
                {
                    "run_id": self.run_id,
                    "seed": options.seed,
                    "operations": stats.done,
                    "workload": replay,
                    "writes_at_one": self.ledger.at_consistency(ONE),
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
            if counters is not None:
                counters.stop()
            if supervisor is not None:
                supervisor.stop()
            for process in (*self.workers, *self.agents):
                process.ensure_stopped()
            if self.cutter is not None:
                self.cutter.stop()
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
            if phase.after_faults:
                injector.finish()
                if injector.invalid is not None:
                    break
            work: queue.Queue[Operation | None] = queue.Queue()
            for op in phase.operations:
                work.put(op)
            threads = [
                threading.Thread(
                    target=self._client,
                    args=(session, work, stats, lock, injector, self.ledger),
                    daemon=True,
                )
                for _ in range(self.options.clients)
            ]
            for _ in threads:
                work.put(None)
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if injector.invalid is not None:
                break
            for statement in phase.schema_change_after:
                sent_us = time.time_ns() // 1000
                session.execute(SimpleStatement(statement, consistency_level=ConsistencyLevel.ALL))
                self.ledger.record_schema_change(statement, sent_us=sent_us, done_us=time.time_ns() // 1000)
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
        ledger: WriteLedger,
    ) -> None:
        while (op := work.get()) is not None:
            if injector.invalid is not None:
                continue  # a service is gone for good: drain the queue, the run is void anyway
            consistency = getattr(ConsistencyLevel, op.consistency)
            statement = SimpleStatement(op.cql, consistency_level=consistency)
            if op.timestamp is None and op.kind.startswith("lwt"):
                statement.serial_consistency_level = ConsistencyLevel.SERIAL
            error, message = None, ""
            sent_us = time.time_ns() // 1000
            attempts = 0
            for _attempt in range(3):
                attempts += 1
                try:
                    session.execute(statement, op.params, execution_profile=WORKLOAD_PROFILE)
                    error = None
                    break
                except Exception as exc:  # a timed-out write may or may not be applied: Cassandra decides
                    error, message = type(exc).__name__, f"{exc} ({op.cql[:200]})"
                    time.sleep(0.5)
            done_us = time.time_ns() // 1000
            ledger.record(op, sent_us=sent_us, done_us=done_us, attempts=attempts, acknowledged=error is None)
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

    # -- checking

    def _live_ttls(self, session: Any, schemas: dict[str, TableSchema]) -> dict[str, Any]:
        """Live TTL cells against the workers' state, as soon as the pipeline has caught up."""
        waited = wait_caught_up(
            self.kafka, self.raw_topic, self.app_id, self.agents, timeout_s=CATCH_UP_TIMEOUT_S
        )
        if waited is None:
            self.say(f"live TTLs not compared: the pipeline did not catch up in {CATCH_UP_TIMEOUT_S:.0f} s")
            return {**TtlCheck().summary(), "skipped": f"not caught up in {CATCH_UP_TIMEOUT_S:.0f} s"}
        try:
            check = check_live_ttls(session, schemas, self.workers, RAW_PARTITIONS)
        except Exception as exc:  # a check that could not run must not pass: it counts as a wrong cell
            self.say(f"live TTLs could not be compared: {exc!r}")
            return {
                **TtlCheck().summary(),
                "wrong": 1,
                "examples": [{"problem": f"the check failed: {exc!r}"}],
            }
        self.say(f"live TTLs after catching up in {waited:.1f} s: {check.compared} cells compared, "
                 f"{len(check.wrong)} wrong, {check.expiring} too close to expiry")  # fmt: skip
        return {**check.summary(), "caught_up_after_s": round(waited, 1)}

    def _compare(
        self, session: Any, schemas: dict[str, TableSchema], stats: ClientStats, ttl: dict[str, Any]
    ) -> dict[str, Any]:
        index = LedgerIndex(self.ledger.issued(), schemas, self.ledger.schema_changes())
        results = check_tables(
            session,
            schemas,
            TableChecks(
                kafka=self.kafka,
                topic_of=lambda table: f"{self.prefix}.{self.keyspace}.{table}",
                workers=self.workers,
                raw_partitions=RAW_PARTITIONS,
                index=index,
                acks_ms=stats.acks_ms,
            ),
        )
        latencies = results.pop("latencies_ms")
        return {
            **results,
            "events_per_operation": round(results["change_events"] / max(1, stats.done), 3),
            "latency_ms": _percentiles(latencies),
            "ttl_compared": ttl["compared"],
            "ttl_wrong": ttl["wrong"],
            "ttl": ttl,
            "writes_unknown_tables": dict(index.unknown_tables),
        }

    def _swept_aside(self, counters: AgentCounters, injector: FaultInjector) -> dict[str, Any]:
        return swept_aside_report(
            dead_letters=read_records(self.kafka, f"{self.app_id}.dead-letter"),
            gaps=decode_gaps(read_records(self.kafka, f"{self.raw_topic}.gaps")),
            sources=self.agent_sources,
            counters=counters.totals(),
            faults=[r.as_dict() for r in injector.records],
        )


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
