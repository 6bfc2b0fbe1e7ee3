"""Security overhead: the agent's backlog rate and the worker's rate over SASL_SSL against plaintext, in one run.

Starts services of its own in a temporary home: ONE Kafka broker in secure mode (its SASL_SSL listener on
127.0.0.1:29292, exactly as `cdc infra up --secure` configures it) with a PLAINTEXT listener added beside it
on 127.0.0.1:29294 (controller 29293), and ONE Cassandra node on 127.0.2.5:29242 with PasswordAuthenticator
and TLS that is optional on its CQL port. Then:
  input    --rows writes to `bench.readings` (--update-share of them UPDATEs, as bench/worker_pipeline.py
           writes them) with no agent running, until the `_cdc.idx` offsets cover them; the cdc_raw
           segments are copied aside: the snapshot every agent run reads
  warm-up  a plaintext and a secured agent (not counted); the plaintext one's raw events, each written
           --copies times shuffled within its partition, are the workers' input (bench/worker_pipeline.py's)
  agent    --rounds rounds of a plaintext and a secured agent (the order alternating: P S, S P, P S, ...),
           each on hard links to the snapshot with a fresh state directory and a raw topic of its own:
           bench/agent_pipeline.py's backlog run, timed from the agent's first cycle until
           `cdc_agent_events_published_total` covers the input; CPU of each process from /health ok to then
  worker   Cassandra is stopped; a plaintext and a secured warm-up worker (the broker's first passes over the
           input, not counted), then --rounds rounds of a plaintext and a secured worker (alternating) on
           that same input topic, each with a group of its own: bench/worker_pipeline.py's `one` run
A secured agent or worker connects to the SASL_SSL listener as user `cdc` with SCRAM-SHA-512, trusting the
local CA, and the agent to Cassandra as role `cdc` over TLS; a plaintext one to the PLAINTEXT listener, the
agent to Cassandra without TLS (the node asks every client for its password). The benchmark's own clients
(input, lag probes, record counts) use the PLAINTEXT listener in every run. Before each run the script waits
until the machine's other processes use at most --quiet-percent of a core (--quiet-budget seconds of waiting
in all), and reports their CPU during each run; a round during which they took more than that is run again
(--extra-rounds per phase at most) and reported as disturbed, not counted.

    .venv/bin/python bench/secured_overhead.py [--rows 100000] [--update-share 0.3] [--copies 3]
        [--rounds 6] [--quiet-percent 25] [--quiet-budget 240] [--extra-rounds 4] [--batch-max-events N]
        [--out bench/secured_overhead.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

from report_analysis import analysis_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agent_pipeline import AgentProcess, CpuWindow, say, topic_records  # noqa: E402
from worker_pipeline import PARTITIONS, RunResult, code_version, cpu_model, mem_total_gb, worker_defaults  # noqa: E402
from worker_pipeline import Bench as WorkerBench  # noqa: E402

from agents.cdc_raw import list_cdc_segments  # noqa: E402
from cdc.local_security import cassandra_yaml, with_security  # noqa: E402
from infra import cassandra_auth, kafka_sasl  # noqa: E402
from infra.cassandra import CassandraNode, standalone_spec  # noqa: E402
from infra.kafka import HOST, KafkaBroker, broker_spec  # noqa: E402
from infra.process import require_free_ports  # noqa: E402
from infra.secure import SecureLayout, SecureMaterial, ensure_cassandra_keystore, ensure_shared_material  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from infra.toolchain import find_java  # noqa: E402
from runtime.service_process import free_port  # noqa: E402

SECURED_PORT = 29292
CONTROLLER_PORT = 29293
PLAINTEXT_PORT = 29294
ADDRESS = "127.0.2.5"
CQL_PORT = 29242
STORAGE_PORT = 29270
JMX_PORT = 7651
PLAINTEXT, SECURED = "plaintext", "secured"
MODES = (PLAINTEXT, SECURED)
RAW_SOURCE = f"bench.agent-warmup-{PLAINTEXT}"
"""the raw topic of the plaintext warm-up agent: the source of the workers' input"""
ANALYSIS_HEADING = "## Analysis"
#: (CpuWindow name, label) of the processes in the CPU tables
AGENT_PROCESSES = [("agent", "agent"), ("Kafka", "Kafka broker"), ("Cassandra", "Cassandra"),
                   ("benchmark", "this script")]  # fmt: skip
WORKER_PROCESSES = [("worker", "worker"), ("Kafka", "Kafka broker"), ("benchmark", "this script")]


# -- services ----------------------------------------------------------------------------------------


class DualListenerBroker(KafkaBroker):
    """The broker of secure mode (SASL_SSL on spec.port, as `cdc infra up --secure` has it) with a PLAINTEXT
    listener added on `plaintext_port`: both modes of a run meet the same JVM, log files and page cache."""

    def __init__(self, settings: InfraSettings, plaintext_port: int) -> None:
        super().__init__(broker_spec(settings), settings)
        self.plaintext_port = plaintext_port

    @property
    def plaintext_bootstrap(self) -> str:
        return f"{HOST}:{self.plaintext_port}"

    def start(self) -> float | None:
        """KafkaBroker.start with infra's SASL_SSL listener properties plus the PLAINTEXT listener (infra
        has no option for a second listener; the properties function is swapped for this call only)."""
        require_free_ports("Kafka PLAINTEXT listener", [(HOST, self.plaintext_port)])
        secure_only = kafka_sasl.listener_properties

        def both(host: str, port: int, controller_port: int, layout: SecureLayout) -> dict[str, str]:
            props = secure_only(host, port, controller_port, layout)
            plain = f"PLAINTEXT://{host}:{self.plaintext_port}"
            props["listeners"] += f",{plain}"
            props["advertised.listeners"] += f",{plain}"
            props["listener.security.protocol.map"] += ",PLAINTEXT:PLAINTEXT"
            return props

        kafka_sasl.listener_properties = both
        try:
            return super().start()
        finally:
            kafka_sasl.listener_properties = secure_only


def tls_session(host: str, port: int, context: ssl.SSLContext) -> str:
    """The TLS version and cipher suite a client of `context` gets at host:port (one handshake)."""
    try:
        with (
            socket.create_connection((host, port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            cipher = tls.cipher()
            return f"{tls.version()} {cipher[0] if cipher else '?'}"
    except (OSError, ssl.SSLError) as exc:
        return f"handshake failed: {exc}"


class LoadSampler(threading.Thread):
    """The 1-minute load average every second, tagged with the run going on."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="load-sampler")
        self.phase = "idle"
        self.samples: list[tuple[str, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(1.0):
            self.samples.append((self.phase, os.getloadavg()[0]))

    def halt(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(2)

    def of(self, prefix: str) -> list[float]:
        return [load for phase, load in self.samples if phase.startswith(prefix)]


# -- results -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class AgentRun:
    """One agent over the snapshot."""

    name: str
    mode: str
    round: int
    """0 = warm-up"""
    events: int = 0
    seconds: float = 0.0
    """from the first cycle until every event was acknowledged"""
    healthy_s: float = 0.0
    startup_s: float = 0.0
    window_s: float = 0.0
    window_events: int = 0
    """the CPU window: from /health ok until every event was acknowledged"""
    cpu: dict[str, float] = field(default_factory=dict)
    records: int = 0
    problems: list[str] = field(default_factory=list)
    first: str = PLAINTEXT
    """the mode that ran first in its round"""
    disturbed: bool = False
    """other processes took more than --quiet-percent of a core during its round: not counted, repeated"""

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else math.nan

    @property
    def other(self) -> float:
        """CPU % (of one core) of every process but ours during the run"""
        return self.cpu["other processes"]

    def us_per_event(self, process: str) -> float:
        if not self.window_events:
            return math.nan
        return self.cpu[process] / 100 * self.window_s / self.window_events * 1e6


@dataclass(slots=True)
class WorkerRun:
    mode: str
    round: int
    result: RunResult
    first: str = PLAINTEXT
    disturbed: bool = False

    @property
    def name(self) -> str:
        return self.result.name

    @property
    def worker(self) -> str:
        return self.result.workers[0]

    @property
    def rate(self) -> float:
        return self.result.rate

    @property
    def events(self) -> int:
        return sum(self.result.events_in.values())

    @property
    def other(self) -> float:
        return self.result.cpu["other processes"]

    @property
    def batches(self) -> int:
        return int(self.result.metrics[self.worker].get("cdc_worker_batch_seconds_count", 0))

    @property
    def batch_s(self) -> float:
        """seconds the worker spent merging batches and committing their transactions"""
        return self.result.metrics[self.worker].get("cdc_worker_batch_seconds_sum", math.nan)

    def us_per_event(self, process: str) -> float:
        process = self.worker if process == "worker" else process
        r = self.result
        return r.cpu[process] / 100 * r.seconds / self.events * 1e6 if self.events else math.nan


# -- the benchmark -----------------------------------------------------------------------------------


def order(counted: int) -> tuple[str, ...]:
    """The modes of the counted round `counted` (from 1) in their order: P S, S P, P S, ..., so that each
    mode goes first in half of the rounds."""
    return MODES if counted % 2 == 1 else MODES[::-1]


class OverheadBench(WorkerBench):
    """bench/worker_pipeline.py's Bench (input writes, raw copies, worker runs) on the dual-listener broker
    and a secured node, plus agent backlog runs over a snapshot of cdc_raw."""

    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        super().__init__(args, home)  # its services are only described there, not started: replaced here
        self.settings = InfraSettings.from_env(
            home=home / "services",
            kafka_port=SECURED_PORT,
            kafka_controller_port=CONTROLLER_PORT,
            cql_port=CQL_PORT,
            storage_port=STORAGE_PORT,
            secure=True,
        )
        self.material: SecureMaterial = ensure_shared_material(self.settings)
        self.broker = DualListenerBroker(self.settings, PLAINTEXT_PORT)
        ensure_cassandra_keystore(self.settings, ADDRESS)
        overrides = cassandra_auth.yaml_overrides(SecureLayout.of(self.settings), ADDRESS)
        optional_tls = {**cast(dict[str, Any], overrides["client_encryption_options"]), "optional": True}
        spec = standalone_spec(
            self.settings,
            "overhead",
            address=ADDRESS,
            jmx_port=JMX_PORT,
            extra_yaml={"client_encryption_options": optional_tls},
        )
        self.node = CassandraNode(spec, self.settings)
        self.bootstrap = self.broker.plaintext_bootstrap  # the benchmark's own clients, in every run
        self.snapshot = home / "cdc_raw-snapshot"
        self.events = 0
        self.agents: list[AgentProcess] = []
        self.agent_runs: list[AgentRun] = []
        self.worker_runs: list[WorkerRun] = []
        self.loads = LoadSampler()
        self.quiet: dict[str, tuple[float, float]] = {}
        """run -> (seconds waited for a quiet machine before it, other processes' CPU % when it started)"""

    # -- configuration of the clients under test

    def client_config(self, mode: str, config: dict[str, Any]) -> dict[str, Any]:
        """`config` (a child's YAML data) connected in `mode`: secured, the SASL_SSL listener and Cassandra
        over TLS (cdc/local_security.py); plaintext, the PLAINTEXT listener and Cassandra without TLS."""
        if mode == SECURED:
            config["kafka"]["bootstrap_servers"] = self.broker.spec.bootstrap
            return with_security(config, self.material)
        config["kafka"]["bootstrap_servers"] = self.broker.plaintext_bootstrap
        if "cassandra" in config:
            login = {k: v for k, v in cassandra_yaml(self.material).items() if k != "tls"}
            config["cassandra"].update(login)
        return config

    def cql_cluster(self) -> Any:
        from infra.cql import connect

        return connect(ADDRESS, CQL_PORT, login=cassandra_auth.cdc_login(self.material))

    # -- set-up and tear-down

    def up(self) -> None:
        self.env["code"] = code_version()
        self.env["load_before"] = os.getloadavg()
        self.env["java"] = find_java().version
        say(f"load average before start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        say(f"starting Kafka: SASL_SSL on {self.broker.spec.bootstrap}, PLAINTEXT on {self.bootstrap}")
        self.broker.start()
        say(f"starting Cassandra {self.settings.cassandra_version} on {ADDRESS}:{CQL_PORT} (password, TLS)")
        self.node.start()
        context = self.material.ssl_context()
        self.env["tls"] = {
            "Kafka": tls_session(HOST, SECURED_PORT, context),
            "Cassandra": tls_session(ADDRESS, CQL_PORT, context),
        }
        say(f"TLS: {self.env['tls']}")
        self.loads.start()

    def down(self) -> None:
        self.loads.halt()
        for agent in self.agents:
            with contextlib.suppress(Exception):
                agent.stop(10)
        super().down()

    # -- input

    def durable(self) -> dict[int, int]:
        cdc_raw = self.node.spec.cdc_raw
        return {s.name.segment_id: s.index.offset for s in list_cdc_segments(cdc_raw) if s.index is not None}

    def wait_durable(self) -> dict[int, int]:
        """Until the `_cdc.idx` offsets stop moving (as bench/agent_pipeline.py waits for them)."""
        period = self.settings.commitlog_sync_period_ms / 1000
        time.sleep(max(1.0, 5 * period))
        offsets = self.durable()
        while True:
            time.sleep(max(0.5, 3 * period))
            again = self.durable()
            if again == offsets:
                return offsets
            offsets = again

    def make_input(self) -> None:
        self.loads.phase = "input"
        say(
            f"input: writing {self.args.rows:,} rows ({self.args.update_share:.0%} updates), no agent running"
        )
        inserts, updates = self.write_rows()
        self.events = inserts + updates
        offsets = self.wait_durable()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        self.snapshot.mkdir()
        for segment in list_cdc_segments(self.node.spec.cdc_raw):
            if segment.index is None:
                continue
            # the index first: the offset it holds never passes the end of the log copied after it
            shutil.copyfile(segment.index_path, self.snapshot / segment.index_path.name)
            shutil.copyfile(segment.path, self.snapshot / segment.path.name)
        self.input.update(segments=len(offsets), segment_mb=sum(offsets.values()) / 1e6)
        say(f"  {self.input['segment_mb']:.1f} MB of durable segment data in {len(offsets)} segment(s) "
            f"copied to the snapshot")  # fmt: skip

    # -- runs

    def wait_quiet(self, name: str) -> None:
        """Before run `name`: until every process but ours (Kafka, Cassandra, this script) used at most
        --quiet-percent of a core over 2 s, within what is left of --quiet-budget seconds for the run."""
        waited = sum(w for w, _ in self.quiet.values())
        started = time.monotonic()
        while True:
            window = CpuWindow({
                "Kafka": self.broker.process.pid,
                "Cassandra": self.node.process.pid,
                "benchmark": os.getpid,
            })  # fmt: skip
            window.start()
            time.sleep(2.0)
            other = window.stop()["other processes"]
            spent = time.monotonic() - started
            if other <= self.args.quiet_percent or waited + spent >= self.args.quiet_budget:
                break
            if spent < 3:
                say(f"{name}: waiting for a quiet machine (other processes use {other:.0f}% of a core)")
        if spent > 3.0:
            say(f"{name}: waited {spent:.0f} s; other processes now at {other:.0f}% of a core")
        self.quiet[name] = (spent - 2.0, other)  # beyond the first 2 s sample

    def agent_run(self, mode: str, round_: int) -> AgentRun:
        """bench/agent_pipeline.py's backlog run in `mode`, over hard links to the snapshot."""
        name = f"agent-{round_ or 'warmup'}-{mode}"
        run = AgentRun(name, mode, round_)
        folder = self.home / name
        cdc_raw = folder / "cdc_raw"
        cdc_raw.mkdir(parents=True)
        for path in self.snapshot.iterdir():
            os.link(path, cdc_raw / path.name)  # the agent deletes what it has read: links, not the snapshot
        port = free_port()
        spec = self.node.spec
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {
                "raw_topic": f"bench.{name}",
                "schema_topic": "cdc.schemas",
                "raw_partitions": PARTITIONS,
            },
            "cassandra": {"contact_points": [ADDRESS], "port": CQL_PORT, "keyspaces": ["bench"]},
            "agent": {
                "cdc_raw_directory": str(cdc_raw),
                "state_directory": str(folder / "state"),
                "node": spec.name,
                "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
                "metrics_port": port,
            },
        }
        agent = AgentProcess(self.client_config(mode, config), folder, port)
        self.agents.append(agent)
        self.wait_quiet(name)
        self.loads.phase = name
        say(f"{name}: {self.events:,} events to publish")
        agent.start()
        run.healthy_s = agent.wait_healthy()
        cpu = CpuWindow({
            "agent": lambda: agent.pid,
            "Kafka": self.broker.process.pid,
            "Cassandra": self.node.process.pid,
            "benchmark": os.getpid,
        })  # fmt: skip
        base = agent.published()
        window_start = time.monotonic()
        cpu.start()
        done = agent.wait_published(self.events, timeout_s=max(300.0, self.events / 200))
        run.cpu = cpu.stop()
        run.window_s = time.monotonic() - window_start
        run.window_events = self.events - base
        first_cycle = agent.first_cycle_at() or agent.started_at + run.healthy_s
        run.startup_s = first_cycle - agent.started_at
        run.seconds = done - first_cycle
        run.events = agent.published()
        run.problems = [
            f"{name} {e.get('level')} {e.get('logger', '')}: {e.get('message')}".replace(str(folder), "<tmp>")
            for e in agent.log_entries()
            if e.get("level") in ("WARNING", "ERROR", "CRITICAL", "OUTPUT")
        ]
        agent.stop()
        self.loads.phase = "idle"
        run.records = asyncio.run(topic_records(self.bootstrap, f"bench.{name}"))
        say(f"{name}: {run.events:,} events in {run.seconds:.1f} s from the first cycle: {run.rate:,.0f}/s; "
            f"agent {run.us_per_event('agent'):.1f} CPU-µs per event, Kafka {run.us_per_event('Kafka'):.1f}; "
            f"{run.records:,} records in its topic")  # fmt: skip
        self.agent_runs.append(run)
        return run

    def worker_run(self, mode: str, round_: int) -> WorkerRun:
        """bench/worker_pipeline.py's `one` run in `mode`, with a group (app_id) of its own."""
        name = f"worker-{round_ or 'warmup'}-{mode}"
        kafka = self.client_config(mode, {"kafka": {}})["kafka"]
        worker = self.worker(name, f"bench-{name}", "bench.raw-copies", kafka=kafka)
        self.wait_quiet(name)
        self.loads.phase = name
        run = WorkerRun(mode, round_, self.run(name, [worker], "bench.raw-copies", f"bench-{name}"))
        self.loads.phase = "idle"
        say(f"{name}: worker {run.us_per_event('worker'):.1f} CPU-µs per event, Kafka "
            f"{run.us_per_event('Kafka'):.1f}")  # fmt: skip
        self.worker_runs.append(run)
        return run

    def rounds(self, run: Callable[[str, int], Any]) -> None:
        """--rounds counted rounds of `run` in both modes, the first mode alternating; a round during which
        other processes took more than --quiet-percent of a core is marked disturbed and run again (at most
        --extra-rounds times per phase), in the same order."""
        counted, round_, extra = 0, 0, self.args.extra_rounds
        while counted < self.args.rounds:
            round_ += 1
            first = order(counted + 1)
            pair = [run(mode, round_) for mode in first]
            for r in pair:
                r.first = first[0]
            loudest = max(r.other for r in pair)
            if loudest > self.args.quiet_percent and extra > 0:
                extra -= 1
                for r in pair:
                    r.disturbed = True
                say(f"round {round_}: other processes took {loudest:.0f}% of a core during it; run again")
                continue
            counted += 1

    def go(self) -> None:
        started = time.monotonic()
        self.up()
        self.make_input()
        for mode in MODES:
            self.agent_run(mode, 0)
        self.write_copies(RAW_SOURCE)
        self.rounds(self.agent_run)
        # the workers need only Kafka (as in bench/worker_pipeline.py)
        if self.node.stop():
            say("stopped Cassandra (the workers' input is on Kafka)")
        for mode in MODES:
            self.worker_run(mode, 0)
        self.rounds(self.worker_run)
        self.env["minutes"] = (time.monotonic() - started) / 60


# -- the report --------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:+.1f}%"


def counted(runs: list[Any], mode: str) -> list[Any]:
    """The runs of `mode` in counted rounds (no warm-up, no disturbed round)."""
    return [r for r in runs if r.round > 0 and not r.disturbed and r.mode == mode]


def rounds_of(runs: list[Any]) -> Iterator[tuple[int, Any, Any]]:
    """(round, plaintext run, secured run) of every counted round."""
    by_round: dict[int, dict[str, Any]] = {}
    for run in runs:
        if run.round > 0 and not run.disturbed:
            by_round.setdefault(run.round, {})[run.mode] = run
    for round_, pair in sorted(by_round.items()):
        if PLAINTEXT in pair and SECURED in pair:
            yield round_, pair[PLAINTEXT], pair[SECURED]


def losses(runs: list[Any]) -> list[float]:
    """Per round: 1 - secured rate / plaintext rate (the share of throughput the security costs)."""
    return [1 - s.rate / p.rate for _, p, s in rounds_of(runs)]


def ratio_table(runs: list[Any]) -> list[str]:
    lines = [
        "| round (order) | plaintext events/s | secured events/s | secured / plaintext | overhead |",
        "|---|---:|---:|---:|---:|",
    ]
    for round_, p, s in rounds_of(runs):
        first = "P S" if p.first == PLAINTEXT else "S P"
        lines.append(
            f"| {round_} ({first}) | {p.rate:,.0f} | {s.rate:,.0f} | {s.rate / p.rate:.3f} | "
            f"{pct(1 - s.rate / p.rate)} |"
        )
    return [*lines, ""]


def cpu_table(runs: list[Any], processes: list[tuple[str, str]]) -> list[str]:
    """Median CPU µs per event of each process in each mode (counted rounds), and the difference."""
    lines = [
        "| process | plaintext CPU-µs per event | secured CPU-µs per event | difference | relative |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in processes:
        p = median([r.us_per_event(key) for r in counted(runs, PLAINTEXT)])
        s = median([r.us_per_event(key) for r in counted(runs, SECURED)])
        lines.append(f"| {label} | {p:.1f} | {s:.1f} | {s - p:+.1f} | {pct(s / p - 1 if p else math.nan)} |")
    return [*lines, ""]


def summary_row(what: str, runs: list[Any], own: str) -> str:
    p = median([r.rate for r in counted(runs, PLAINTEXT)])
    s = median([r.rate for r in counted(runs, SECURED)])
    lost = losses(runs)
    own_p = median([r.us_per_event(own) for r in counted(runs, PLAINTEXT)])
    own_s = median([r.us_per_event(own) for r in counted(runs, SECURED)])
    kafka_p = median([r.us_per_event("Kafka") for r in counted(runs, PLAINTEXT)])
    kafka_s = median([r.us_per_event("Kafka") for r in counted(runs, SECURED)])
    spread = f"{pct(min(lost))} .. {pct(max(lost))}" if lost else "-"
    return (
        f"| {what} | {p:,.0f} | {s:,.0f} | **{pct(median(lost))}** ({spread}) | "
        f"{own_p:.1f} → {own_s:.1f} ({pct(own_s / own_p - 1)}) | "
        f"{kafka_p:.1f} → {kafka_s:.1f} ({pct(kafka_s / kafka_p - 1)}) |"
    )


def quiet_lines(bench: OverheadBench) -> list[str]:
    """How quiet the machine was: the waits before the runs, and the overhead of the quietest rounds."""
    args = bench.args
    waits = [w for w, _ in bench.quiet.values()]
    loud = [name for name, (_, other) in bench.quiet.items() if other > args.quiet_percent]
    lines = [
        f"Before each run (warm-ups included) the script waited until the other processes on the machine used "
        f"at most {args.quiet_percent:.0f}% of a core over 2 s (at most {args.quiet_budget:.0f} s of waiting "
        f"in all): {sum(waits):.0f} s waited, the longest wait {max(waits, default=0):.0f} s"
        + (
            f"; {len(loud)} run(s) started above it: {', '.join(loud)}."
            if loud
            else "; every run started below it."
        ),
        "",
    ]
    for what, runs in (("agent", bench.agent_runs), ("worker", bench.worker_runs)):
        rounds = list(rounds_of(runs))
        quiet = [1 - s.rate / p.rate for _, p, s in rounds if max(p.other, s.other) <= args.quiet_percent]
        repeated = sorted({r.round for r in runs if r.disturbed})
        lines.append(
            f"- {what}: "
            + (
                f"disturbed, not counted and run again: round(s) {', '.join(map(str, repeated))} (other processes "
                f"above {args.quiet_percent:.0f}% of a core while one of its runs ran); "
                if repeated
                else "no round was disturbed; "
            )
            + f"{len(quiet)} of the {len(rounds)} counted rounds had both runs at most "
            f"{args.quiet_percent:.0f}% of a core of other processes"
            + (f" (median overhead of those: {pct(median(quiet))})." if quiet else ".")
        )
    return [*lines, ""]


def report(bench: OverheadBench, command: str, analysis: str) -> str:
    args, env, inp = bench.args, bench.env, bench.input
    agents, workers = bench.agent_runs, bench.worker_runs
    loads = [load for phase, load in bench.loads.samples if phase.startswith(("agent-", "worker-"))]
    loads = loads or [math.nan]
    lines = [
        "# Security overhead: agent backlog and worker rates over SASL_SSL against plaintext",
        "",
        f"Command: `.venv/bin/python {command}` (the whole run took {env.get('minutes', math.nan):.1f} min)",
        "",
        f"Machine: {os.cpu_count()} cores ({cpu_model()}, AES-NI "
        f"{'yes' if ' aes ' in Path('/proc/cpuinfo').read_text() else 'no'}), {mem_total_gb():.0f} GB RAM, "
        f"measured {time.strftime('%Y-%m-%d')}. Kafka, Cassandra (agent runs only), the agent or worker under "
        "test and this script share those cores. 1-minute load average before the services started: "
        f"{env['load_before'][0]:.2f}; during the runs (sampled every second, our own processes included): "
        f"median {median(loads):.2f}, max {max(loads):.2f}. `other` in the tables is the CPU of every other "
        "process on the machine during that run.",
        "",
        f"Versions: Python {sys.version.split()[0]} with {ssl.OPENSSL_VERSION}, Java {env.get('java', '?')}, "
        f"Kafka {bench.settings.kafka_version} (one KRaft broker), Cassandra {env.get('cassandra', '?')} (one "
        f"node, CDC on), aiokafka {version('aiokafka')}, faust-streaming {version('faust-streaming')}, "
        f"cassandra-driver {version('cassandra-driver')}. Code: {env['code']}. Agent: `python -m cdc agent`, "
        "default settings (raw topic of 12 partitions, acks=all, idempotent producer). Workers: `python -m cdc "
        f"worker`, settings ({worker_defaults(args.batch_max_events)}).",
        "",
        f"TLS as negotiated by the clients' context (local CA, host name checked): Kafka SASL_SSL listener "
        f"{env['tls']['Kafka']}; Cassandra CQL {env['tls']['Cassandra']}. Kafka login: SCRAM-SHA-512, once per "
        "connection.",
        "",
        "## How",
        "",
        "One run, one set of services, the two modes alternating, so that machine drift (two shared cores, "
        "other jobs) hits both alike; each round runs both modes back to back, the order alternating "
        "(P S, S P, ...), and the overhead is taken per round, then its median over the rounds. Before each "
        "run the script waits for the machine's other processes to be quiet, and a round during which they "
        "took more than that anyway is run again and listed as disturbed (not counted).",
        "",
        "- **One broker, two listeners.** The broker is secure mode's (`cdc infra up --secure`: SASL_SSL with "
        "SCRAM users, a certificate of the local CA; inter-broker traffic, i.e. its own transaction markers, "
        "over SASL_SSL) with a PLAINTEXT listener added on another port. Plaintext and secured clients write "
        "to and read from the same JVM, log directory and page cache; only the listener differs. Two brokers "
        "would each have had their own JIT, heap and cache state, and a broker restarted between modes its "
        "cold first pass (see the worker warm-ups).",
        "- **One Cassandra node** with PasswordAuthenticator and TLS optional on its CQL port: the secured "
        "agent logs in over TLS, the plaintext one in plain CQL (the node asks everyone for a password). "
        "The agent reads Cassandra only to load the schema before its first cycle, so this shows in "
        "start-up times only, not in the timed window.",
        f"- **Same input bytes.** The agent runs read hard links to one snapshot of cdc_raw ({inp['segments']} "
        f"segments, {inp['segment_mb']:.1f} MB of durable data for {bench.events:,} writes: "
        f"{inp['inserts']:,} INSERTs and {inp['updates']:,} UPDATEs of 3 columns of an earlier row, "
        "1000 partition keys), each with a fresh state directory and raw topic of its own; the node gets "
        "no writes while they run. The worker runs all read the same input topic "
        f"(`bench.raw-copies`: the {inp['events']:,} raw events of the plaintext warm-up agent, "
        f"{inp['raw_mb']:.1f} MB of Avro, each written {args.copies} times shuffled within its partition: "
        f"{inp['records']:,} records in {PARTITIONS} partitions), each worker with a group, changelog and "
        "clean topics of its own; Cassandra is stopped by then, as in bench/worker_pipeline.py.",
        "- **Warm-ups.** One agent and one worker of each mode run first and are not counted: the broker's "
        "first pass over the input and the JIT of its TLS code happen there, not in a counted run.",
        "- **The benchmark's own clients** (input, lag probes, record counts) use the PLAINTEXT listener in "
        "every run, so the measuring costs the same in both modes.",
        f"- **Size.** {args.rows:,} writes (both benches' default is 100,000: --rows, --backlog) and "
        f"{args.rounds} counted rounds of each mode, for the agent and for the worker.",
        "",
        "Rates are the benches' own: the agent's from its first cycle until `cdc_agent_events_published_total` "
        "covers the input (bench/agent_pipeline.py's backlog run), the worker's from its first consumed record "
        "until its group's committed lag is 0 (bench/worker_pipeline.py's `one` run). CPU per event is each "
        "process's utime + stime over the run (the agent's from `/health` ok, i.e. after its start-up) divided "
        "by the events of that window. Overhead = 1 - secured rate / plaintext rate of the same round: the "
        "share of throughput the security costs.",
        "",
        "## Summary",
        "",
        "| run | plaintext events/s (median) | secured events/s (median) | overhead: median of rounds (range) | "
        "own CPU-µs per event, plaintext → secured | Kafka CPU-µs per event |",
        "|---|---:|---:|---:|---:|---:|",
        summary_row("agent backlog", agents, "agent"),
        summary_row("worker (`one`)", workers, "worker"),
        "",
        *quiet_lines(bench),
        "## Agent backlog runs",
        "",
        "| run | events | seconds | events/s | healthy after s | agent CPU % | agent µs/event | Kafka CPU % | "
        "Kafka µs/event | Cassandra CPU % | benchmark CPU % | other CPU % | records in its topic |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r.name}{' (disturbed)' if r.disturbed else ''} | {r.events:,} | {r.seconds:.1f} | {r.rate:,.0f} | {r.healthy_s:.1f} | "
            f"{r.cpu['agent']:.0f} | {r.us_per_event('agent'):.1f} | {r.cpu['Kafka']:.0f} | "
            f"{r.us_per_event('Kafka'):.1f} | {r.cpu['Cassandra']:.0f} | {r.cpu['benchmark']:.0f} | "
            f"{r.cpu['other processes']:.0f} | {r.records:,} |"
            for r in agents
        ),
        "",
        *ratio_table(agents),
        "## Worker runs (`one`)",
        "",
        "| run | raw events in | seconds | events/s | events/s 10-90% | worker CPU % | worker µs/event | "
        "Kafka CPU % | Kafka µs/event | benchmark CPU % | other CPU % | change events | batches | mean batch ms "
        "| time in batches | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {w.name}{' (disturbed)' if w.disturbed else ''} | {w.events:,} | {w.result.seconds:.1f} | {w.rate:,.0f} | "
            f"{w.result.middle_rate():,.0f} | {w.result.cpu[w.worker]:.0f} | {w.us_per_event('worker'):.1f} | "
            f"{w.result.cpu['Kafka']:.0f} | {w.us_per_event('Kafka'):.1f} | {w.result.cpu['benchmark']:.0f} | "
            f"{w.result.cpu['other processes']:.0f} | "
            f"{w.result.stats[w.worker].get('total', {}).get('emitted', 0):,} | {w.batches:,} | "
            f"{1000 * w.batch_s / w.batches if w.batches else math.nan:.0f} | {w.batch_s / w.result.seconds:.0%} | "
            f"{w.result.peak_rss_mb(w.worker):.0f} |"
            for w in workers
        ),
        "",
        "`batches`, `mean batch ms`: the worker's `cdc_worker_batch_seconds` (merging a batch and committing "
        "its transaction: about five round trips to the broker); `time in batches`: their sum over the run's "
        "seconds, the rest being the worker's wait for records (fetches) and the start of its first batch.",
        "",
        *ratio_table(workers),
        "## Where the secured runs' CPU goes",
        "",
        "Median CPU-µs per event of the counted rounds. The agent and the worker are single Python processes "
        "(one event loop): when one of them is near 100% of a core its rate follows its own CPU per event, "
        "while the broker's extra work runs on the other core.",
        "",
        "Agent backlog runs:",
        "",
        *cpu_table(agents, AGENT_PROCESSES),
        "Worker runs:",
        "",
        *cpu_table(workers, WORKER_PROCESSES),
    ]
    problems = summarize(
        [p for r in agents for p in r.problems] + [p for w in workers for p in w.result.problems]
    )
    if problems:
        lines += [
            "Agent and worker log warnings and errors, counted by mode (numbers and run names masked):",
            "",
        ]
        lines += ["```", *problems[:30], "```"]
        lines += [f"({len(problems) - 30} more)", ""] if len(problems) > 30 else [""]
    else:
        lines += ["The agents and workers logged no warnings or errors.", ""]
    text = "\n".join(lines)
    return text + analysis if analysis else text


def summarize(problems: list[str]) -> list[str]:
    """Log lines (`run message`) counted by the run's mode and the message, with numbers and the run's name
    masked: `N x in plaintext runs: message`."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in problems:
        run, _, message = line.partition(" ")
        mode = SECURED if run.endswith(SECURED) else PLAINTEXT
        counts[mode, re.sub(r"\d+", "N", message.replace(run, "<run>"))] += 1
    return [
        f"{n} x in {mode} runs: {text}" for (mode, text), n in sorted(counts.items(), key=lambda kv: kv[0][1])
    ]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="writes to Cassandra (default 100000)")
    parser.add_argument("--update-share", type=float, default=0.3, help="share of UPDATEs (default 0.3)")
    parser.add_argument("--copies", type=int, default=3, help="copies of every raw event (default 3)")
    parser.add_argument(
        "--rounds", type=int, default=6, help="counted rounds of each mode, for agent and worker (default 6)"
    )
    parser.add_argument(
        "--batch-max-events", type=int, help="workers' worker.batch_max_events (default: the config default)"
    )
    parser.add_argument(
        "--quiet-percent",
        type=float,
        default=25.0,
        help="before each run, wait until other processes use at most this %% of a core (default 25)",
    )
    parser.add_argument(
        "--extra-rounds",
        type=int,
        default=4,
        help="most rounds run again, per phase, because other processes disturbed them (default 4)",
    )
    parser.add_argument(
        "--quiet-budget", type=float, default=240.0, help="most seconds waited for that in all (default 240)"
    )
    parser.add_argument(
        "--out", type=Path, help="write the Markdown report here (its Analysis section is kept)"
    )
    args = parser.parse_args(argv)
    args.py_spy = None  # read by bench/worker_pipeline.py's Bench
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    command = " ".join(["bench/secured_overhead.py", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="cdc-bench-secured-") as tmp:
        bench = OverheadBench(args, Path(tmp))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill tears the services down too
        try:
            bench.go()
        finally:
            bench.down()
        text = report(bench, command, analysis_of(args.out, ANALYSIS_HEADING))
    print(text)
    if args.out:
        args.out.write_text(text)
        say(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
