"""Write-ack -> clean event latency on the three-node cluster (RF=3), and where the time goes.

Starts (or finds) the local services with three Cassandra nodes, a keyspace with replication factor 3, one
agent per node and the workers, then writes rows at steady rates at QUORUM and times each row from
Cassandra's acknowledgement to its change event on the clean topic (read_committed, as consumers read):

  <rate>/s          --rates, each for --seconds (after --warmup seconds not counted)
  schema change     --schema-rate for --seconds; half way an ALTER TABLE ADD, and the rows after it write
                    the new column (the workers wait for its schema)
  worker restart    --schema-rate for --seconds; half way worker 1 is stopped (SIGTERM) and started again

Every row is a new partition written once, so its first raw copy is the one the workers merge. Along the
path each row leaves timestamps, all on this machine's clock: the client's acknowledgement (ack), the
first raw record of it on the raw topic (its Kafka timestamp, set by the agent's producer when it sent it:
Cassandra's commit-log sync, the agent's poll, read and publish), the envelope's ``ts_ms`` (when the worker
began the batch: Kafka, the worker's fetch and batch wait), the clean record's Kafka timestamp (when the
worker sent it: merge and encode), and its arrival here (the transaction's commit and the consumer's
fetch). The report gives p50/p90/p99/max per phase and the median and p99 of each leg, with the CPU of
every process over each phase (2 cores: starvation shows there).

With --compare-tree DIR each phase runs twice, alternating which checkout's agents and workers run first
(`python -m cdc` started in that folder), so the two are measured side by side on the same services.

    .venv/bin/python bench/latency_rf3.py [--rates 100,300,1000] [--seconds 30] [--workers 2]
        [--compare-tree DIR] [--out bench/latency_rf3.md]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cassandra import ConsistencyLevel  # noqa: E402
from cassandra.cluster import Cluster  # noqa: E402
from cassandra.query import SimpleStatement  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cdc.verify.faults import wait_for_schema_agreement  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from infra.stack import LocalStack  # noqa: E402
from runtime.service_process import ServiceProcess, free_port  # noqa: E402
from schemas.raw_event import decode_raw_key  # noqa: E402

RAW_PARTITIONS = 12
CLK_TCK = os.sysconf("SC_CLK_TCK")
LEGS = ("agent", "to_worker", "merge", "commit_and_read")
LEG_NAMES = {
    "agent": "ack -> raw record (commit-log sync, agent poll, read, publish)",
    "to_worker": "raw record -> worker batch start (Kafka, fetch, batch wait)",
    "merge": "batch start -> clean record sent (merge, encode)",
    "commit_and_read": "clean record sent -> read here (transaction commit, consumer fetch)",
}
_t0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _t0:7.1f}s] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def cpu_wait_seconds(pid: int | None) -> float:
    """How long the process's threads, all together, were ready to run and waited for a CPU (the run
    delay of /proc/<pid>/task/*/schedstat): CPU starvation, measured rather than guessed."""
    if pid is None:
        return 0.0
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(task.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def renice_threads(pid: int | None, nice: int) -> None:
    """Every thread of a process at ``nice`` (Linux keeps a nice value per thread; new threads take
    their creator's)."""
    if pid is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def system_busy_seconds() -> float:
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(parts) - parts[3] - parts[4]) / CLK_TCK


@dataclass(slots=True)
class Row:
    sent: float
    ack: float | None = None
    raw: float | None = None
    emitted: float | None = None
    clean_sent: float | None = None
    seen: float | None = None


@dataclass(slots=True)
class Phase:
    name: str
    tree: str
    rate: int
    rows: dict[int, Row] = field(default_factory=dict)
    warm_from: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    #: per process, ms its threads waited for a CPU per second of the phase
    cpu_wait: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    errors: int = 0

    def latencies_ms(self) -> list[float]:
        return [
            (r.seen - r.ack) * 1000 for i, r in self.rows.items() if i >= self.warm_from and r.seen and r.ack
        ]

    def legs_ms(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {leg: [] for leg in LEGS}
        for i, r in self.rows.items():
            if i < self.warm_from or None in (r.ack, r.raw, r.emitted, r.clean_sent, r.seen):
                continue
            assert r.ack and r.raw and r.emitted and r.clean_sent and r.seen
            out["agent"].append((r.raw - r.ack) * 1000)
            out["to_worker"].append((r.emitted - r.raw) * 1000)
            out["merge"].append((r.clean_sent - r.emitted) * 1000)
            out["commit_and_read"].append((r.seen - r.clean_sent) * 1000)
        return out


class Tap:
    """Reads the raw topic and the clean topic from their ends, stamping each row's timestamps."""

    def __init__(self, bootstrap: str, raw_topic: str, clean_topic: str) -> None:
        self.rows: dict[int, Row] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        common = {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "auto.offset.reset": "latest"}
        self.raw = Consumer({**common, "group.id": f"lat-raw-{uuid.uuid4().hex[:8]}"})
        self.clean = Consumer(
            {**common, "group.id": f"lat-clean-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed",
             "fetch.wait.max.ms": 10}
        )  # fmt: skip
        self.raw_topic, self.clean_topic = raw_topic, clean_topic
        self.threads = [threading.Thread(target=self._run, args=(c, f), daemon=True)
                        for c, f in ((self.raw, self._on_raw), (self.clean, self._on_clean))]  # fmt: skip

    def start(self) -> None:
        for consumer, topic in ((self.raw, self.raw_topic), (self.clean, self.clean_topic)):
            parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            ends = []
            for p in parts:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                ends.append(TopicPartition(topic, p, high))
            consumer.assign(ends)
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(10)
        self.raw.close()
        self.clean.close()

    def _run(self, consumer: Consumer, handle: Any) -> None:
        while not self._stop.is_set():
            for message in consumer.consume(500, 0.05):
                if message.error() is None:
                    handle(message, time.time())

    def _on_raw(self, message: Any, now: float) -> None:
        _, _, partition_key = decode_raw_key(message.key())
        row_id = int.from_bytes(partition_key, "big", signed=True)
        stamp = message.timestamp()[1] / 1000
        with self.lock:
            row = self.rows.get(row_id)
            if row is not None and (row.raw is None or stamp < row.raw):
                row.raw = stamp

    def _on_clean(self, message: Any, now: float) -> None:
        if message.value() is None:
            return
        row_id = json.loads(message.key())["id"]
        value = json.loads(message.value())
        with self.lock:
            row = self.rows.get(row_id)
            if row is not None and row.seen is None:
                row.seen = now
                row.emitted = value["ts_ms"] / 1000
                row.clean_sent = message.timestamp()[1] / 1000


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.settings = InfraSettings.from_env()
        self.stack = LocalStack(self.settings)
        self.run_id = uuid.uuid4().hex[:8]
        self.keyspace = f"latbench_{self.run_id}"
        self.raw_topic, self.schema_topic = f"lat-raw-{self.run_id}", f"lat-schemas-{self.run_id}"
        self.prefix = f"lat{self.run_id}"
        self.workdir = Path(args.workdir or self.settings.home / "latency-bench") / self.run_id
        self.trees = {
            "this": REPO,
            **({"compared": Path(args.compare_tree).resolve()} if args.compare_tree else {}),
        }
        self.agents: list[ServiceProcess] = []
        self.workers: list[ServiceProcess] = []
        self.next_id = 0
        self.added_columns = 0
        self.phases: list[Phase] = []

    # -- processes

    def _start_processes(self, tree: str) -> None:
        app_id = f"lat-{self.run_id}"  # one group for both trees: a switch is a rolling upgrade
        for index in (1, 2, 3):
            node = self.stack.node(index)
            port = free_port()
            config = {
                "cluster": "latency",
                "kafka": self._kafka(),
                "cassandra": {"contact_points": [node.spec.address], "port": node.spec.cql_port,
                              "keyspaces": [self.keyspace]},
                "agent": {"cdc_raw_directory": str(node.spec.cdc_raw),
                          "state_directory": str(self.workdir / f"agent-{index}"), "node": node.spec.name,
                          "metrics_port": port},
            }  # fmt: skip
            self.agents.append(ServiceProcess("agent", f"agent-{index}", config, self.workdir, port))
        for index in range(1, self.args.workers + 1):
            port = free_port()
            config = {
                "cluster": "latency",
                "kafka": self._kafka(),
                "worker": {"data_directory": str(self.workdir / f"{tree}-worker-{index}"), "app_id": app_id,
                           "worker_id": f"{tree}-{index}", "clean_topic_prefix": self.prefix,
                           "web_port": port},
            }  # fmt: skip
            self.workers.append(
                ServiceProcess("worker", f"{tree}-worker-{index}", config, self.workdir, port)
            )
        for process in (*self.agents, *self.workers):
            process.start(cwd=self.trees[tree])
        for process in (*self.agents, *self.workers):
            process.wait_healthy(180)

    def _stop_processes(self) -> None:
        for process in (*self.workers, *self.agents):
            process.ensure_stopped()
        self.agents, self.workers = [], []

    def _kafka(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.stack.kafka.spec.bootstrap, "raw_topic": self.raw_topic,
                "schema_topic": self.schema_topic, "raw_partitions": RAW_PARTITIONS}  # fmt: skip

    def _pids(self) -> dict[str, int | None]:
        pids: dict[str, int | None] = {f"cassandra {i}": self.stack.node(i).process.pid() for i in (1, 2, 3)}
        pids["kafka"] = self.stack.kafka.process.pid()
        pids.update({p.name: p.pid for p in (*self.agents, *self.workers)})
        pids["bench"] = os.getpid()
        return pids

    # -- writing

    def _write_phase(self, session: Any, phase: Phase, tap: Tap, action: Any = None) -> None:
        columns = "id, v, n" + "".join(f", extra{k}" for k in range(self.added_columns))
        insert = session.prepare(
            f"INSERT INTO {self.keyspace}.t ({columns}) VALUES ({', '.join('?' * (2 + 1 + self.added_columns))})"
        )
        insert.consistency_level = ConsistencyLevel.QUORUM
        total = phase.rate * (self.args.seconds + self.args.warmup)
        phase.warm_from = self.next_id + phase.rate * self.args.warmup
        pids = self._pids()
        if self.args.cassandra_nice:
            for i in (1, 2, 3):
                renice_threads(pids[f"cassandra {i}"], self.args.cassandra_nice)
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wait_before = {name: cpu_wait_seconds(pid) for name, pid in pids.items()}
        busy_before, started = system_busy_seconds(), time.monotonic()
        acted = False
        for n in range(total):
            due = started + n / phase.rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if action is not None and not acted and n >= total // 2:
                acted = True
                insert = action(session) or insert
            row_id = self.next_id
            self.next_id += 1
            row = Row(time.time())
            with tap.lock:
                tap.rows[row_id] = row
                phase.rows[row_id] = row
            values = [row_id, "x" * 40, n, *([n] * (insert.query_string.count("?") - 3))]
            future = session.execute_async(insert, values)
            future.add_callbacks(self._acked(row), self._failed(phase))
        time.sleep(2.0)
        phase.seconds = time.monotonic() - started
        wall = phase.seconds
        phase.cpu = {
            name: (cpu_seconds(pid) - cpu_before.get(name, 0.0)) / wall * 100
            for name, pid in self._pids().items()
        }
        phase.cpu["machine"] = (system_busy_seconds() - busy_before) / wall * 100
        phase.cpu_wait = {
            name: (cpu_wait_seconds(pid) - wait_before.get(name, 0.0)) / wall * 1000
            for name, pid in self._pids().items()
        }

    @staticmethod
    def _acked(row: Row) -> Any:
        def done(_result: Any) -> None:
            row.ack = time.time()

        return done

    @staticmethod
    def _failed(phase: Phase) -> Any:
        def failed(_exc: Exception) -> None:
            phase.errors += 1

        return failed

    def _wait_seen(self, phase: Phase, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(r.seen is not None for r in phase.rows.values() if r.ack is not None):
                return
            time.sleep(0.5)
        missing = sum(1 for r in phase.rows.values() if r.ack is not None and r.seen is None)
        say(
            f"{phase.name} ({phase.tree}): {missing} acknowledged rows without a change event after {timeout_s:.0f} s"
        )

    # -- the run

    def run(self) -> list[Phase]:
        self.stack.up(nodes=3, report=say)
        nodes = [self.stack.node(i) for i in (1, 2, 3)]
        cluster = Cluster([n.spec.address for n in nodes], port=nodes[0].spec.cql_port, protocol_version=5)
        session = cluster.connect()
        try:
            session.execute(
                f"CREATE KEYSPACE {self.keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
            )
            session.execute(
                f"CREATE TABLE {self.keyspace}.t (id bigint PRIMARY KEY, v text, n int) WITH cdc = true"
            )
            wait_for_schema_agreement(cluster)
            self._create_clean_topic()
            plan: list[tuple[str, int, Any]] = [(f"{rate}/s", rate, None) for rate in self.args.rates]
            plan.append(("schema change", self.args.schema_rate, self._add_column(cluster)))
            plan.append(("worker restart", self.args.schema_rate, self._restart_worker))
            order = list(self.trees)
            for round_number, (name, rate, action) in enumerate(plan):
                trees = order if round_number % 2 == 0 else order[::-1]
                for tree in trees:
                    self._start_processes(tree)
                    tap = Tap(
                        self.stack.kafka.spec.bootstrap, self.raw_topic, f"{self.prefix}.{self.keyspace}.t"
                    )
                    tap.start()
                    try:
                        time.sleep(3.0)  # the workers' first fetch, the consumers' positions
                        phase = Phase(name, tree, rate)
                        say(f"phase {name} on {tree}: {rate} writes/s for {self.args.seconds} s")
                        self._write_phase(session, phase, tap, action)
                        self._wait_seen(phase)
                        self.phases.append(phase)
                        lat = phase.latencies_ms()
                        say(f"  p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms, max "
                            f"{max(lat, default=float('nan')):.0f} ms over {len(lat)} rows")  # fmt: skip
                    finally:
                        tap.stop()
                        self._stop_processes()
        finally:
            cluster.shutdown()
        return self.phases

    def _create_clean_topic(self) -> None:
        """The clean topic exists before the first worker commits, so the tap can follow it from the start."""
        admin = AdminClient({"bootstrap.servers": self.stack.kafka.spec.bootstrap})
        topic = NewTopic(f"{self.prefix}.{self.keyspace}.t", 12, 1, config={"cleanup.policy": "compact"})
        for future in admin.create_topics([topic]).values():
            future.result(30)

    def _add_column(self, cluster: Cluster) -> Any:
        def add(session: Any) -> Any:
            column = f"extra{self.added_columns}"
            session.execute(SimpleStatement(f"ALTER TABLE {self.keyspace}.t ADD {column} int",
                                            consistency_level=ConsistencyLevel.ALL))  # fmt: skip
            wait_for_schema_agreement(cluster)
            self.added_columns += 1
            columns = "id, v, n" + "".join(f", extra{k}" for k in range(self.added_columns))
            marks = ", ".join("?" * (3 + self.added_columns))
            insert = session.prepare(f"INSERT INTO {self.keyspace}.t ({columns}) VALUES ({marks})")
            insert.consistency_level = ConsistencyLevel.QUORUM
            return insert

        return add

    def _restart_worker(self, _session: Any) -> None:
        worker = self.workers[0]
        tree = worker.name.split("-worker-")[0]
        worker.stop()
        worker.start(cwd=self.trees[tree])
        worker.wait_healthy(180)


def report(phases: list[Phase], args: argparse.Namespace, command: str, load: str) -> str:
    lines = [
        "# Write-ack -> clean event latency on three nodes (RF=3)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores; load average before the run: {load}; measured "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Commit-log sync period: "
        f"{InfraSettings.from_env().commitlog_sync_period_ms} ms. Writes at QUORUM, each a new partition; "
        f"{args.workers} workers, one agent per node; latency is the change event's arrival on the clean topic "
        "(read_committed) minus Cassandra's acknowledgement, on this machine's clock."
        + (f" Cassandra's threads at nice {args.cassandra_nice}." if args.cassandra_nice else ""),
        "",
        "| phase | tree | writes/s | rows | p50 ms | p90 ms | p99 ms | max ms | client errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in phases:
        lat = phase.latencies_ms()
        lines.append(
            f"| {phase.name} | {phase.tree} | {phase.rate} | {len(lat)} | {percentile(lat, 50):.0f} | "
            f"{percentile(lat, 90):.0f} | {percentile(lat, 99):.0f} | {max(lat, default=float('nan')):.0f} | "
            f"{phase.errors} |"
        )
    lines += ["", "Where the time goes, per leg (median / p99, ms):", "",
              "| phase | tree | " + " | ".join(LEGS) + " |", "|---|---|" + "---:|" * len(LEGS)]  # fmt: skip
    for phase in phases:
        legs = phase.legs_ms()
        cells = [f"{percentile(legs[leg], 50):.0f} / {percentile(legs[leg], 99):.0f}" for leg in LEGS]
        lines.append(f"| {phase.name} | {phase.tree} | " + " | ".join(cells) + " |")
    lines += ["", *(f"- `{leg}`: {LEG_NAMES[leg]}" for leg in LEGS), "",
              "CPU over each phase, % of one core (the machine has 200 %):", ""]  # fmt: skip
    names = sorted({n for p in phases for n in p.cpu})
    lines += ["| phase | tree | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for phase in phases:
        lines.append(
            f"| {phase.name} | {phase.tree} | "
            + " | ".join(f"{phase.cpu.get(n, 0):.0f}" for n in names)
            + " |"
        )
    waited = sorted({n for p in phases for n in p.cpu_wait})
    lines += ["", "Waiting for a CPU over each phase: ms per second that the process's threads were ready to run "
              "and not running (run delay, /proc/<pid>/task/*/schedstat; summed over threads, so a JVM's "
              "can pass 1000):", "",
              "| phase | tree | " + " | ".join(waited) + " |", "|---|---|" + "---:|" * len(waited)]  # fmt: skip
    for phase in phases:
        lines.append(
            f"| {phase.name} | {phase.tree} | "
            + " | ".join(f"{phase.cpu_wait.get(n, 0):.0f}" for n in waited)
            + " |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=[100, 300, 1000])
    parser.add_argument(
        "--schema-rate", type=int, default=300, help="writes/s of the schema and restart phases"
    )
    parser.add_argument("--seconds", type=int, default=30, help="seconds counted per phase (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="seconds not counted at each phase's start")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare-tree", help="another checkout, measured beside this one")
    parser.add_argument("--workdir", help="agents' and workers' folders (default under CDC_HOME)")
    parser.add_argument("--out", type=Path, help="write the report here (markdown)")
    parser.add_argument(
        "--cassandra-nice",
        type=int,
        default=0,
        help="run the three Cassandra nodes' threads at this nice value (they stay so after the run): "
        "what the pipeline's latency is when Cassandra gives way on the shared cores",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    phases = Bench(args).run()
    text = report(phases, args, "python bench/latency_rf3.py " + " ".join(argv), load)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
