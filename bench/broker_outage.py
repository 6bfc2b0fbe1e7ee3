"""The pipeline through a Kafka outage: the broker stopped for N minutes under a steady write rate.

Starts services of its own in a temporary home, on the ports of the environment (CDC_KAFKA_PORT,
CDC_KAFKA_CONTROLLER_PORT, CDC_CQL_PORT, CDC_STORAGE_PORT, CDC_JMX_BASE_PORT: export a set of your own
when other services run on the machine), a one-node Cassandra on --address; then runs one agent
(`python -m cdc agent`) and one worker of this tree (`python -m cdc worker`, default settings), and with
--compare-tree DIR a worker of that checkout beside it (another app id, the same raw topic), so both meet
the same outage. For each --outages N (seconds):

  writes   INSERTs of new rows of `bench.readings` at --rate per second, from --lead seconds before the
           outage until --tail seconds after the broker is back
  outage   the broker stopped (SIGTERM) for N s; every 5 s each worker's /health is read and whether it
           still runs; a worker that stopped (its outage_timeout_s passed) is started again once the
           broker answers, as a supervisor does
  recovery timed from the moment the broker answers again: until the agent has published its backlog
           (cdc_agent_lag_bytes 0, nothing in flight), and until each worker's group has committed the
           raw topic up to where it ended then; once the writes stopped, until each group has committed
           all of it
  logs     lines and bytes each process wrote from the broker's stop until the broker answered again
  exactly  each worker's clean topic holds one `c` event per row written so far, none missing, none
           repeated (read_committed, once everything is caught up); the same workers run through every
           outage, one after the other

    .venv/bin/python bench/broker_outage.py [--outages 60 240 600] [--rate 50] [--lead 20] [--tail 30]
        [--compare-tree DIR] [--address 127.0.26.1] [--out bench/broker_outage.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agent_pipeline import INSERT, TABLE_DDL, AgentProcess, BenchProcess, row, say  # noqa: E402

from cdc.verify.oracle import read_topic_records  # noqa: E402
from cdc.verify.pipeline_wait import raw_end_and_lag  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from runtime.config import KafkaConfig  # noqa: E402
from runtime.service_process import START_MARKER, free_port  # noqa: E402

RAW_TOPIC = "cdc.raw"
SCHEMA_TOPIC = "cdc.schemas"
PARTITIONS = 12
#: a worker's /stats saying 0 records behind while its group had this many or more uncommitted is wrong,
#: whatever the delay between the two looks (the writes add 50 a second)
FALSE_ZERO_RECORDS = 200


class Writer(threading.Thread):
    """INSERTs of new rows at ``rate`` per second (each a new partition key), until stopped; the keys
    Cassandra acknowledged."""

    def __init__(self, session: Any, rate: float) -> None:
        super().__init__(daemon=True, name="writer")
        self.session = session
        self.rate = rate
        self.insert = session.prepare(INSERT)
        self.written: list[uuid.UUID] = []
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._halt.is_set():
            device = uuid.uuid4()
            try:
                self.session.execute(self.insert, row(len(self.written), device))
                self.written.append(device)
            except Exception:
                self.failed += 1
            next_at += 1 / self.rate
            self._halt.wait(max(0.0, next_at - time.monotonic()))

    def halt(self) -> None:
        self._halt.set()
        self.join(30)


class WorkerProcess(BenchProcess):
    def __init__(self, home: Path, name: str, config: dict[str, Any], tree: Path | None) -> None:
        super().__init__("worker", name, config, home, config["worker"]["web_port"])
        self.tree = tree
        self.exits: list[tuple[float, int | None]] = []

    def start_here(self) -> None:
        self.start(cwd=self.tree)

    def lines_and_bytes(self) -> tuple[int, int]:
        text = self.log_path.read_bytes() if self.log_path.exists() else b""
        lines = [ln for ln in text.splitlines() if ln and not ln.startswith(START_MARKER.encode())]
        return len(lines), len(text)


@dataclass(slots=True)
class Outage:
    seconds: int
    writes_before: int = 0
    writes_total: int = 0
    stop_took_s: float = 0.0
    start_took_s: float = 0.0
    agent_published_s: float | None = None
    caught_up_s: dict[str, float | None] = field(default_factory=dict)
    settled_s: dict[str, float | None] = field(default_factory=dict)
    health: dict[str, Counter[str]] = field(default_factory=dict)
    stopped_at_s: dict[str, float | None] = field(default_factory=dict)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    log_lines: dict[str, int] = field(default_factory=dict)
    log_bytes: dict[str, int] = field(default_factory=dict)
    #: looks at /stats after the return, and those that said 0 records behind while the group had
    #: FALSE_ZERO_RECORDS or more uncommitted
    looks_after: Counter[str] = field(default_factory=Counter)
    false_zero: Counter[str] = field(default_factory=Counter)
    missing: dict[str, int] = field(default_factory=dict)
    repeated: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


class Bench:
    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        from infra.cassandra import CassandraNode, standalone_spec
        from infra.kafka import KafkaBroker, broker_spec

        self.args = args
        self.home = home
        self.settings = InfraSettings.from_env(home=home / "services")
        self.broker = KafkaBroker(broker_spec(self.settings), self.settings)
        self.node = CassandraNode(
            standalone_spec(
                self.settings, "outage", address=args.address, jmx_port=self.settings.jmx_base_port
            ),
            self.settings,
        )
        self.bootstrap = self.broker.spec.bootstrap
        self.kafka = KafkaConfig(bootstrap_servers=self.bootstrap)
        self.cluster: Any = None
        self.session: Any = None
        self.agent: AgentProcess | None = None
        self.workers: list[WorkerProcess] = []
        self.by_label: dict[str, WorkerProcess] = {}
        #: every row written so far (the workers' clean topics hold all of them)
        self.written: list[uuid.UUID] = []

    def up(self) -> None:
        say(f"starting Kafka on {self.bootstrap} and Cassandra on {self.args.address}")
        self.broker.start()
        self.node.start()
        from infra.cql import connect

        self.cluster = connect(self.args.address, self.node.spec.cql_port)
        self.session = self.cluster.connect()
        self.session.execute(
            "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        self.session.execute(TABLE_DDL)
        metrics_port = free_port()
        spec = self.node.spec
        self.agent = AgentProcess(
            {
                "cluster": self.settings.cluster_name,
                "kafka": {
                    "bootstrap_servers": self.bootstrap,
                    "raw_topic": RAW_TOPIC,
                    "raw_partitions": PARTITIONS,
                },
                "cassandra": {
                    "contact_points": [spec.address],
                    "port": spec.cql_port,
                    "keyspaces": ["bench"],
                },
                "agent": {
                    "cdc_raw_directory": str(spec.cdc_raw),
                    "state_directory": str(self.home / "agent-state"),
                    "node": spec.name,
                    "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
                    "metrics_port": metrics_port,
                },
            },
            self.home,
            metrics_port,
        )
        self.agent.start()
        self.agent.wait_healthy(180)

    def down(self) -> None:
        for process in [*self.workers, self.agent]:
            if process is not None:
                process.stop(20)
        if self.cluster is not None:
            self.cluster.shutdown()
        for service in (self.node, self.broker):
            try:
                service.stop()
            except Exception as exc:
                say(f"stopping failed: {exc}")

    def worker(self, name: str, app_id: str, tree: Path | None) -> WorkerProcess:
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {
                "bootstrap_servers": self.bootstrap,
                "raw_topic": RAW_TOPIC,
                "schema_topic": SCHEMA_TOPIC,
                "raw_partitions": PARTITIONS,
            },
            "worker": {
                "data_directory": str(self.home / app_id),
                "app_id": app_id,
                "worker_id": name,
                "clean_topic_prefix": app_id,
                "web_port": free_port(),
            },
        }
        worker = WorkerProcess(self.home, f"{app_id}-{name}", config, tree)
        self.workers.append(worker)
        return worker

    def group_lag(self, group: str) -> int | None:
        try:
            return asyncio.run(raw_end_and_lag(self.kafka, RAW_TOPIC, group))[1]
        except Exception:
            return None

    def agent_idle(self) -> bool:
        assert self.agent is not None
        values = self.agent.metric_values() or {}
        return values.get("cdc_agent_lag_bytes", 1) == 0 and values.get("cdc_agent_in_flight_bytes", 1) == 0

    def start_workers(self) -> None:
        """One worker of this tree and, with --compare-tree, one of that checkout: kept for every outage."""
        trees = {"new": None, **({"old": self.args.compare_tree} if self.args.compare_tree else {})}
        self.by_label = {label: self.worker(label, f"outage-{label}", tree) for label, tree in trees.items()}
        for worker in self.by_label.values():
            worker.start_here()
        for worker in self.by_label.values():
            worker.wait_healthy(180)

    def committed_and_end(self, group: str) -> tuple[int, int] | None:
        """(records the group has committed, the raw topic's end), summed over the partitions."""
        try:
            end, lag = asyncio.run(raw_end_and_lag(self.kafka, RAW_TOPIC, group))
        except Exception:
            return None
        return end - lag, end

    def run_outage(self, seconds: int) -> Outage:
        result = Outage(seconds)
        workers = self.by_label
        writer = Writer(self.session, self.args.rate)
        writer.start()
        time.sleep(self.args.lead)
        result.writes_before = len(writer.written)
        sizes = {label: w.lines_and_bytes() for label, w in workers.items()}
        assert self.agent is not None
        agent_before = _lines_and_bytes(self.agent.log_path)
        say(f"outage of {seconds} s: stopping Kafka ({result.writes_before} rows written so far)")
        began = time.monotonic()
        self.broker.stop()
        result.stop_took_s = time.monotonic() - began
        result.health = {label: Counter() for label in workers}
        result.stopped_at_s = dict.fromkeys(workers)
        while time.monotonic() - began < seconds:
            for label, worker in workers.items():
                if worker.running:
                    got = worker.get_json("/health", 3.0)
                    result.health[label][
                        got[1]["status"] if got and isinstance(got[1], dict) else "no answer"
                    ] += 1
                elif result.stopped_at_s[label] is None:
                    result.stopped_at_s[label] = time.monotonic() - began
                    result.exit_codes[label] = worker.stop()
                    say(f"worker {label} stopped {result.stopped_at_s[label]:.0f} s into the outage")
            time.sleep(5.0)
        restart = time.monotonic()
        self.broker.start()
        back = time.monotonic()
        result.start_took_s = back - restart
        say(f"Kafka answers again ({result.start_took_s:.1f} s to start)")
        result.log_lines["agent"], result.log_bytes["agent"] = (
            a - b for a, b in zip(_lines_and_bytes(self.agent.log_path), agent_before, strict=True)
        )
        for label, worker in workers.items():
            lines, size = worker.lines_and_bytes()
            result.log_lines[label], result.log_bytes[label] = lines - sizes[label][0], size - sizes[label][1]
            if not worker.running:
                worker.start_here()  # a supervisor's restart
        # the backlog: what the agent published once Kafka was back; each worker caught up once its
        # group has committed the raw topic up to where it ended then
        backlog_end: int | None = None
        pending = dict(workers)
        result.caught_up_s = dict.fromkeys(workers)
        deadline = back + 900
        while pending and time.monotonic() < deadline:
            if backlog_end is None and self.agent_idle():
                result.agent_published_s = time.monotonic() - back
                found = self.committed_and_end(self.by_label["new"].config["worker"]["app_id"])
                backlog_end = None if found is None else found[1]
            for label, worker in list(pending.items()):
                claimed = worker.get_json("/stats", 3.0)
                found = self.committed_and_end(worker.config["worker"]["app_id"])
                if claimed is not None and found is not None and isinstance(claimed[1], dict):
                    result.looks_after[label] += 1
                    behind = claimed[1]["lag"]["records_behind"]
                    if behind == 0 and found[1] - found[0] >= FALSE_ZERO_RECORDS:
                        result.false_zero[label] += 1
                if backlog_end is not None and found is not None and found[0] >= backlog_end:
                    result.caught_up_s[label] = time.monotonic() - back
                    del pending[label]
            time.sleep(0.5)
        time.sleep(max(0.0, self.args.tail - (time.monotonic() - back)))
        writer.halt()
        self.written.extend(writer.written)
        result.writes_total = len(writer.written)
        stopped = time.monotonic()
        result.settled_s = dict.fromkeys(workers)
        while time.monotonic() - stopped < 300 and None in result.settled_s.values():
            if self.agent_idle():
                for label, worker in workers.items():
                    if (
                        result.settled_s[label] is None
                        and self.group_lag(worker.config["worker"]["app_id"]) == 0
                    ):
                        result.settled_s[label] = time.monotonic() - stopped
            time.sleep(0.5)
        written = Counter(str(device) for device in self.written)
        for label, worker in workers.items():
            events = clean_devices(self.kafka, worker.config["worker"]["clean_topic_prefix"])
            result.missing[label] = sum(1 for d in written if events[d] == 0)
            result.repeated[label] = sum(n - 1 for n in events.values() if n > 1) + sum(
                n for d, n in events.items() if d not in written
            )
        result.load = os.getloadavg()
        return result


def _lines_and_bytes(path: Path) -> tuple[int, int]:
    text = path.read_bytes() if path.exists() else b""
    return sum(1 for ln in text.splitlines() if ln and not ln.startswith(START_MARKER.encode())), len(text)


def clean_devices(kafka: KafkaConfig, prefix: str) -> Counter[str]:
    """Per partition key (device), the `c` events of the clean topic of `bench.readings`."""
    found: Counter[str] = Counter()
    for _, _, _, _, value in asyncio.run(read_topic_records(kafka, f"{prefix}.bench.readings")):
        if value is not None:
            event = json.loads(value)
            if event["op"] == "c":
                found[str(event["after"]["device"])] += 1
    return found


def code_version(tree: Path) -> str:
    """The tree's commit, "+" when files differ from it (as the workers start: they import it then)."""
    commit = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return (commit or "?") + ("+" if changed else "")


def render(
    args: argparse.Namespace, results: list[Outage], command: str, load_before: tuple[float, ...], code: str
) -> str:
    labels = ["new", *(["old"] if args.compare_tree else [])]
    names = {"new": f"this tree ({code})"}
    if args.compare_tree:
        names["old"] = f"before ({args.compare_label or code_version(args.compare_tree)})"
    out = [
        "# Through a broker outage (bench/broker_outage.py)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores, shared; 1-minute load average {load_before[0]:.2f} before the run, "
        + ", ".join(f"{r.load[0]:.2f}" for r in results)
        + " after each outage. One Kafka broker and one Cassandra node of the script's own, one agent, "
        f"{' and '.join(f'one worker of {names[label]}' for label in labels)} on the same raw topic "
        f"({PARTITIONS} partitions), every setting at its default (a worker's `outage_timeout_s` is 180 s). "
        f"Writes: new rows at {args.rate:g}/s from {args.lead} s before the broker stopped until about "
        f"{args.tail} s after it answered again.",
        "",
        "Times are seconds from the moment the broker answered again (its start took the time in the "
        "`start` column): `published` until the agent had sent its backlog, `caught up` until the worker's "
        "group had committed the raw topic up to where it ended then (writes went on meanwhile), `settled` "
        "from the end of the writes until it had committed all of it. Log lines and MB: what each process "
        "wrote from the broker's stop until it answered again. `lag 0 while behind`: looks at the worker's "
        f"`/stats` until it caught up that said 0 records behind while its group had {FALSE_ZERO_RECORDS} or "
        "more raw records uncommitted. `missing` and `repeated`: rows written so far without a `c` event in "
        "the worker's clean topic, and events beyond one per row.",
        "",
        "| outage s | rows written | start s | published s | worker | health during the outage "
        "(5 s looks) | stopped at s (exit) | caught up s | lag 0 while behind (looks) | settled s | "
        "log lines | log MB | missing | repeated |",
        "|---:|---:|---:|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for i, label in enumerate(labels):
            stopped = r.stopped_at_s.get(label)
            health = ", ".join(f"{k} {v}" for k, v in sorted(r.health.get(label, Counter()).items()))
            first = (
                [str(r.seconds), f"{r.writes_total:,}", f"{r.start_took_s:.1f}", _s(r.agent_published_s)]
                if i == 0
                else ["", "", "", ""]
            )
            out.append(
                "| "
                + " | ".join(
                    [
                        *first,
                        names[label],
                        health or "-",
                        "-" if stopped is None else f"{stopped:.0f} ({r.exit_codes.get(label)})",
                        _s(r.caught_up_s.get(label)),
                        f"{r.false_zero[label]} of {r.looks_after[label]}",
                        _s(r.settled_s.get(label)),
                        f"{r.log_lines.get(label, 0):,}",
                        f"{r.log_bytes.get(label, 0) / 1e6:.2f}",
                        str(r.missing.get(label)),
                        str(r.repeated.get(label)),
                    ]
                )
                + " |"
            )
        out.append(
            f"| | | | | agent | | | | | | {r.log_lines.get('agent', 0):,} | "
            f"{r.log_bytes.get('agent', 0) / 1e6:.2f} | | |"
        )
    return "\n".join(out) + "\n"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--outages", type=int, nargs="+", default=[60, 240, 600], help="seconds, one run each"
    )
    parser.add_argument("--rate", type=float, default=50.0, help="rows written per second")
    parser.add_argument("--lead", type=int, default=20, help="seconds of writes before the outage")
    parser.add_argument("--tail", type=int, default=30, help="seconds of writes after the broker is back")
    parser.add_argument("--compare-tree", type=Path, help="a checkout whose worker runs beside this one's")
    parser.add_argument("--compare-label", help="what the report calls that checkout (default: its commit)")
    parser.add_argument("--address", default="127.0.26.1", help="the Cassandra node's loopback address")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shown = ["DIR" if args.compare_tree and arg == str(args.compare_tree) else arg for arg in sys.argv[1:]]
    command = ".venv/bin/python bench/broker_outage.py " + " ".join(shown)
    load_before = os.getloadavg()
    code = code_version(REPO)
    results: list[Outage] = []
    with tempfile.TemporaryDirectory(prefix="broker-outage-") as home:
        bench = Bench(args, Path(home))
        try:
            bench.up()
            bench.start_workers()
            for seconds in args.outages:
                results.append(bench.run_outage(seconds))
                say(f"outage {seconds} s: {results[-1]}")
        finally:
            bench.down()
    report = render(args, results, command, load_before, code)
    print(report)
    if args.out is not None:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
