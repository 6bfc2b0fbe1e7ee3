"""Node agent under load: write-ack to raw event latency, throughput, CPU and RSS.

Starts services of its own in a temporary home (Kafka on 127.0.0.1:19092, a one-node Cassandra on
127.0.2.1), runs the agent (`python -m cdc agent`) as a subprocess on the node's cdc_raw and measures:
  latency   rows written one at a time at --rate for --seconds, each a new partition; a consumer thread
            stamps each row's raw event on arrival: latency = arrival - Cassandra's acknowledgement (both
            time.time() in this process); the first --warmup seconds are not counted
  backlog   --backlog rows written with the agent stopped, until the `_cdc.idx` offsets cover them; then
            the agent is started and timed from its first cycle until `cdc_agent_events_published_total`
            covers them
  steady    right after, the same agent while rows are written as fast as the node takes them for
            --steady-seconds: agent events/s, and CPU of every process from /proc/<pid>/stat
The agent's VmRSS is sampled every 0.5 s throughout. `--profile` adds a backlog run of an agent under
cProfile (this script's `--agent-profile` mode runs `NodeAgent.run` in-process).

    .venv/bin/python bench/agent_pipeline.py [--rate 200] [--seconds 30] [--backlog 100000]
        [--steady-seconds 30] [--keyspaces KS ...] [--profile] [--agent-log FILE]
        [--out bench/agent_pipeline.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.cdc_raw import list_cdc_segments  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from runtime.config import AgentConfig, KafkaConfig  # noqa: E402
from runtime.service_process import START_MARKER, ServiceProcess, free_port  # noqa: E402

ADDRESS = "127.0.2.1"
JMX_PORT = 7601
KAFKA_PORT = 19092
RSS_TARGET_MB = 150.0
LATENCY_MARGIN_MS = 200.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
PUBLISHED = "cdc_agent_events_published_total"

TABLE_DDL = """CREATE TABLE bench.readings (
    device uuid, at timestamp, kind text, value double, count int, total bigint,
    ok boolean, note text, price decimal, tags text,
    PRIMARY KEY (device, at)) WITH cdc = true"""
INSERT = (
    "INSERT INTO bench.readings (device, at, kind, value, count, total, ok, note, price, tags) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_t0 = time.monotonic()


def say(message: str) -> None:
    """Progress on stderr, with seconds since start."""
    print(f"[{time.monotonic() - _t0:7.1f}s] {message}", file=sys.stderr, flush=True)


def row(i: int, device: uuid.UUID) -> tuple[Any, ...]:
    """Values of row `i` of `bench.readings`."""
    return (device, 1_700_000_000_000 + i, f"kind-{i % 7}", i * 0.25, i, i * 1000, i % 2 == 0,
            f"note number {i}", Decimal(i) / 100, "a,b,c")  # fmt: skip


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


# -- /proc -------------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/<pid>/status (VmRSS, VmHWM, ...); empty once the process is gone."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                values[name] = int(parts[0])
    return values


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 if it is gone."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def system_busy_seconds() -> float:
    """CPU seconds spent busy by the whole machine (all cores) since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLK_TCK


class CpuWindow:
    """CPU % (of one core) of named processes, and of everything else, between start() and stop()."""

    def __init__(self, pids: dict[str, Callable[[], int | None]]) -> None:
        self.pids = pids
        self.percent: dict[str, float] = {}
        self._start: tuple[float, float, dict[str, float]] = (0.0, 0.0, {})

    def _snapshot(self) -> tuple[float, float, dict[str, float]]:
        return time.monotonic(), system_busy_seconds(), {n: cpu_seconds(p()) for n, p in self.pids.items()}

    def start(self) -> None:
        self._start = self._snapshot()

    def stop(self) -> dict[str, float]:
        (t0, busy0, cpu0), (t1, busy1, cpu1) = self._start, self._snapshot()
        wall = max(t1 - t0, 1e-9)
        self.percent = {n: 100 * (cpu1[n] - cpu0[n]) / wall for n in cpu1}
        self.percent["other processes"] = max(0.0, 100 * (busy1 - busy0) / wall - sum(self.percent.values()))
        return self.percent


@dataclass(slots=True)
class RssSample:
    at: float
    phase: str
    rss_kb: int
    load1: float


class RssSampler(threading.Thread):
    """Every 0.5 s: the agent's VmRSS (tagged with the current phase) and the 1-minute load average."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.pid: int | None = None
        self.phase = "idle"
        self.samples: list[RssSample] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.5):
            pid = self.pid
            if pid is None:
                continue
            rss = proc_status(pid).get("VmRSS")
            if rss is not None:
                self.samples.append(RssSample(time.monotonic(), self.phase, rss, os.getloadavg()[0]))

    def halt(self) -> None:
        self._halt.set()
        self.join(2)

    def of(self, phase: str) -> list[RssSample]:
        return [s for s in self.samples if s.phase == phase]


# -- the agent subprocess ----------------------------------------------------------------------------


class BenchProcess(ServiceProcess):
    """A `cdc` child of a benchmark: JSON logs (read back for warnings), its /metrics values, and its VmHWM
    kept when it stops."""

    def __init__(self, command: str, name: str, config: dict[str, Any], home: Path, port: int) -> None:
        super().__init__(command, name, config, home, port, log_format="json")
        self.hwm_kb = 0

    def metric_values(self) -> dict[str, float] | None:
        """Every /metrics sample by name (labels included); None while nothing answers. The timeout is
        long because a busy agent answers only between reads."""
        got = self.get("/metrics", 60.0)
        if got is None:
            return None
        values = {}
        for line in got[1].decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def stop(self, timeout_s: float = 30.0, *, signal_number: int = signal.SIGTERM) -> int | None:
        """Stop it (its VmHWM is kept in `hwm_kb`); its exit code."""
        if self.pid is not None:
            self.hwm_kb = proc_status(self.pid).get("VmHWM", 0)
        code = super().stop(timeout_s, signal_number=signal_number)
        if code == -signal.SIGKILL and signal_number != signal.SIGKILL:
            say(f"{self.name} ignored signal {signal_number} for {timeout_s:.0f} s; killed it")
        return code


class AgentProcess(BenchProcess):
    """`python -m cdc agent` (or this script's --agent-profile mode) as a child process, JSON logs."""

    def __init__(self, config: dict[str, Any], home: Path, metrics_port: int) -> None:
        super().__init__("agent", "agent", config, home, metrics_port)
        self.longest_reply_s = 0.0
        self._log_offset = 0

    def command_line(self, profile_to: Path | None = None) -> list[str]:
        """Profiled, the agent runs in this script's --agent-profile mode (`NodeAgent.run` only, no start)."""
        if profile_to is None:
            return super().command_line()
        return [sys.executable, str(Path(__file__).resolve()), "--agent-profile", str(self.config_path),
                str(profile_to)]  # fmt: skip

    def start(
        self, env: dict[str, str] | None = None, *, profile_to: Path | None = None, cwd: Path | None = None
    ) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start(env, profile_to=profile_to, cwd=cwd)
        self.longest_reply_s = 0.0

    def wait_healthy(self, timeout_s: float = 120.0, *, poll_s: float = 0.05) -> float:
        """Seconds from start until /health says ok (schema loaded, Kafka connected)."""
        return super().wait_healthy(timeout_s, poll_s=poll_s)

    def metrics(self) -> dict[str, float]:
        asked = time.monotonic()
        values = self.metric_values()
        self.longest_reply_s = max(self.longest_reply_s, time.monotonic() - asked)
        if values is None:
            raise RuntimeError(f"agent does not answer /metrics:\n{self.log_tail()}")
        return values

    def published(self) -> int:
        return int(self.metrics().get(PUBLISHED, 0))

    def wait_published(self, count: int, timeout_s: float) -> float:
        """Poll /metrics every 0.1 s until `count` events are acknowledged; the time it saw them."""
        deadline = time.monotonic() + timeout_s
        last_report = time.monotonic()
        while time.monotonic() < deadline:
            self.check_alive()
            done = self.published()
            now = time.monotonic()
            if done >= count:
                return now
            if now - last_report >= 5:
                say(f"  agent: {done:,} of {count:,} events acknowledged")
                last_report = now
            time.sleep(0.1)
        raise RuntimeError(
            f"agent acknowledged only {self.published():,} of {count:,} events in {timeout_s:.0f} s"
        )

    def wait_caught_up(self, timeout_s: float = 60.0) -> None:
        """Until nothing durable in cdc_raw is waiting and nothing is in flight."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = self.metrics()
            if m.get("cdc_agent_lag_bytes", 1) == 0 and m.get("cdc_agent_in_flight_bytes", 1) == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("agent did not catch up with cdc_raw")

    def log_entries(self, *, this_run: bool = True) -> list[dict[str, Any]]:
        """The agent's JSON log lines (of the current process only by default); other lines as messages."""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset if this_run else 0)
            lines = f.read().decode(errors="replace").splitlines()
        entries = []
        for line in lines:
            if not line or line.startswith(START_MARKER):  # ServiceProcess's own lines
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"level": "OUTPUT", "message": line}
            if isinstance(entry, dict):
                entries.append(entry)
        return entries

    def first_cycle_at(self) -> float | None:
        """time.monotonic() of the agent's first cycle: its "publishing schema" lines come right before it."""
        for entry in self.log_entries():
            if str(entry.get("message", "")).startswith("publishing schema"):
                logged = datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
                return time.monotonic() - (time.time() - logged.timestamp())
        return None


# -- the raw-topic consumer --------------------------------------------------------------------------


class RawConsumer(threading.Thread):
    """Reads the raw topic from its end in an event loop of its own, stamping arrivals with time.time()."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name="raw-consumer")
        self.bootstrap = bootstrap
        self.topic = topic
        self.arrivals: dict[bytes, tuple[float, float]] = {}
        """partition key -> (arrival, the event's published_at)"""
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._consume())
        except BaseException as exc:
            self.error = exc
        finally:
            self.ready.set()

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from schemas.raw_event import decode_raw_event

        partitions = [TopicPartition(self.topic, p) for p in await partition_ids(self.bootstrap, self.topic)]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        await consumer.start()
        try:
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            for tp in partitions:
                await consumer.position(tp)
            self.ready.set()
            while not self._halt.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                now = time.time()
                for messages in batches.values():
                    for message in messages:
                        event = decode_raw_event(message.value)
                        published = event["source"]["published_at_ms"] / 1000
                        self.arrivals.setdefault(event["partition_key"], (now, published))
        finally:
            await consumer.stop()

    def halt(self) -> None:
        self._halt.set()
        self.join(10)


async def partition_ids(bootstrap: str, topic: str) -> list[int]:
    """The partition ids of `topic`."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    ids = sorted(p["partition"] for p in described[0].get("partitions", [])) if described else []
    if not ids:
        raise RuntimeError(f"topic {topic} has no partitions")
    return ids


async def topic_records(bootstrap: str, topic: str) -> int:
    """Records in every partition of `topic` (end minus beginning offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in await partition_ids(bootstrap, topic)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        end = await consumer.end_offsets(tps)
        begin = await consumer.beginning_offsets(tps)
        return sum(end[tp] - begin[tp] for tp in tps)
    finally:
        await consumer.stop()


# -- the benchmark -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Results:
    latency: dict[str, Any] = field(default_factory=dict)
    backlog: dict[str, Any] = field(default_factory=dict)
    steady: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    rss: dict[str, dict[str, float]] = field(default_factory=dict)
    import_rss_mb: float = 0.0
    env: dict[str, Any] = field(default_factory=dict)
    agent_log: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)


class Bench:
    """The services, the agent and the runs; `run()` does everything but tear-down (`down()`)."""

    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        from infra.cassandra import CassandraNode, standalone_spec
        from infra.kafka import KafkaBroker, broker_spec

        self.args = args
        self.home = home
        self.settings = InfraSettings.from_env(
            home=home / "services", kafka_port=args.kafka_port, kafka_controller_port=args.kafka_port + 1
        )
        self.broker = KafkaBroker(broker_spec(self.settings), self.settings)
        self.node = CassandraNode(
            standalone_spec(self.settings, "bench", address=ADDRESS, jmx_port=args.jmx_port), self.settings
        )
        self.kafka_config = KafkaConfig(bootstrap_servers=self.broker.spec.bootstrap)
        self.sampler = RssSampler()
        self.results = Results()
        metrics_port = free_port()
        self.agent = AgentProcess(self._config(metrics_port, args.keyspaces), home, metrics_port)
        self.rows_written = 0
        self.cluster: Any = None
        self.session: Any = None
        self.insert: Any = None
        self.consumer: RawConsumer | None = None
        self.compared_latency: dict[str, Any] = {}

    def _config(self, metrics_port: int, keyspaces: list[str] | None) -> dict[str, Any]:
        spec = self.node.spec
        cassandra: dict[str, Any] = {"contact_points": [spec.address], "port": spec.cql_port}
        if keyspaces:
            cassandra["keyspaces"] = keyspaces
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {"bootstrap_servers": self.kafka_config.bootstrap_servers},
            "cassandra": cassandra,
            "agent": {
                "cdc_raw_directory": str(spec.cdc_raw),
                "state_directory": str(self.home / "agent-state"),
                "node": spec.name,
                "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
                "metrics_port": metrics_port,
            },
        }
        return config

    # -- set-up and tear-down ------------------------------------------------------------------------

    def up(self) -> None:
        self.results.env["load_before"] = os.getloadavg()
        say(f"load average before start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        say(f"starting Kafka on {self.broker.spec.bootstrap}")
        self.broker.start()
        say(f"starting Cassandra {self.settings.cassandra_version} on {ADDRESS}")
        self.node.start()
        from infra.cql import connect

        self.cluster = connect(ADDRESS, self.node.spec.cql_port)
        self.session = self.cluster.connect()
        self.session.execute(
            "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        self.session.execute(TABLE_DDL)
        self.insert = self.session.prepare(INSERT)
        release = self.session.execute("SELECT release_version FROM system.local").one()
        self.results.env["cassandra"] = release[0]
        self.sampler.start()

    def down(self) -> None:
        if self.consumer is not None:
            self.consumer.halt()
        self.agent.stop()
        self.sampler.halt()
        if self.cluster is not None:
            self.cluster.shutdown()
        for name, service in (("Cassandra", self.node), ("Kafka", self.broker)):
            try:
                if service.stop():
                    say(f"stopped {name}")
            except Exception as exc:
                say(f"stopping {name} failed: {exc}")

    # -- helpers -------------------------------------------------------------------------------------

    def start_agent(self, phase: str, profile_to: Path | None = None) -> float:
        self.agent.start(profile_to=profile_to)
        self.sampler.pid = self.agent.pid
        self.sampler.phase = phase
        took = self.agent.wait_healthy()
        say(f"agent healthy after {took:.1f} s (pid {self.agent.pid})")
        return took

    def stop_agent(self) -> float:
        """Wait until it caught up, stop it; its VmHWM in MB."""
        self.agent.wait_caught_up()
        self.sampler.pid = None
        self.agent.stop()
        say(f"agent stopped (VmHWM {self.agent.hwm_kb / 1000:.1f} MB)")
        return self.agent.hwm_kb / 1000

    def durable(self) -> dict[int, int]:
        cdc_raw = self.node.spec.cdc_raw
        return {s.name.segment_id: s.index.offset for s in list_cdc_segments(cdc_raw) if s.index is not None}

    def wait_durable(self) -> dict[int, int]:
        """Until the `_cdc.idx` offsets stop moving (sync periods after the last acknowledged write)."""
        period = self.settings.commitlog_sync_period_ms / 1000
        time.sleep(max(1.0, 5 * period))
        offsets = self.durable()
        while True:
            time.sleep(max(0.5, 3 * period))
            again = self.durable()
            if again == offsets:
                return offsets
            offsets = again

    def write_concurrently(self, params: list[tuple[Any, ...]]) -> int:
        """Rows acknowledged of `params`, written 64 at a time."""
        from cassandra.concurrent import execute_concurrent_with_args

        results = execute_concurrent_with_args(
            self.session, self.insert, params, concurrency=64, raise_on_first_error=False
        )
        failed = sum(1 for ok, _ in results if not ok)
        if failed:
            say(f"  {failed} writes failed")
        return len(params) - failed

    def rss_summary(self, phase: str, hwm_mb: float) -> None:
        samples = [s.rss_kb / 1000 for s in self.sampler.of(phase)]
        self.results.rss[phase] = {
            "samples": len(samples),
            "median": statistics.median(samples) if samples else math.nan,
            "max": max(samples, default=math.nan),
            "hwm": hwm_mb,
        }

    def cpu_window(self, agent: AgentProcess | None = None) -> CpuWindow:
        watched = agent or self.agent
        return CpuWindow({
            "agent": lambda: watched.pid,
            "Cassandra": self.node.process.pid,
            "Kafka": self.broker.process.pid,
            "benchmark (writer, consumer)": os.getpid,
        })  # fmt: skip

    # -- runs ----------------------------------------------------------------------------------------

    def run_latency(
        self, agent: AgentProcess | None = None, topic: str | None = None, cwd: Path | None = None
    ) -> None:
        """Rows one at a time at --rate; each row's event stamped on arrival by a consumer thread. Another
        agent (`--compare`: of another tree, run from `cwd`, publishing to `topic`) leaves its result in
        `self.compared_latency` instead of the report's latency section."""
        args = self.args
        main = agent is None
        agent = agent or self.agent
        say(f"latency: {args.rate} rows/s for {args.seconds} s (+{args.warmup} s warm-up)")
        if main:
            self.start_agent("latency")
        else:
            agent.start(cwd=cwd)
            agent.wait_healthy()
        self.consumer = RawConsumer(self.kafka_config.bootstrap_servers, topic or self.kafka_config.raw_topic)
        self.consumer.start()
        self.consumer.ready.wait(60)
        if self.consumer.error is not None:
            raise RuntimeError(f"consumer failed: {self.consumer.error}")
        acks: dict[bytes, float] = {}
        warmup = int(args.rate * args.warmup)
        total = warmup + int(args.rate * args.seconds)
        cpu = self.cpu_window(agent)
        before: dict[str, float] = {}
        start = time.monotonic()
        for i in range(total):
            if i == warmup:
                cpu.start()
                before = agent.metrics()
            delay = start + i / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            device = uuid.uuid4()
            self.session.execute(self.insert, row(i, device))
            acked = time.time()
            if i >= warmup:
                acks[device.bytes] = acked
            if i % (args.rate * 5) == 0:
                say(f"  {i:,} of {total:,} rows written, {len(self.consumer.arrivals):,} events received")
        elapsed = time.monotonic() - start
        self.rows_written += total
        cpu_percent = cpu.stop()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(k not in self.consumer.arrivals for k in acks):
            time.sleep(0.2)
        after = agent.metrics()
        arrivals = self.consumer.arrivals
        received = [k for k in acks if k in arrivals]
        self.consumer.halt()
        self.consumer = None
        skipped = 'cdc_agent_mutations_skipped_total{reason="unknown_table"}'
        first_ack = min(acks.values(), default=0.0)
        windows: dict[int, list[float]] = {}
        for k in received:
            windows.setdefault(int((acks[k] - first_ack) // 5), []).append(1000 * (arrivals[k][0] - acks[k]))
        result = {
            "rows": len(acks),
            "received": len(received),
            "rate": (total - 1) / elapsed,
            "total": sorted(1000 * (arrivals[k][0] - acks[k]) for k in received),
            "agent": sorted(1000 * (arrivals[k][1] - acks[k]) for k in received),
            "kafka": sorted(1000 * (arrivals[k][0] - arrivals[k][1]) for k in received),
            "windows": {w: sorted(v) for w, v in sorted(windows.items())},
            "cpu": cpu_percent,
            "reloads": after.get("cdc_agent_schema_reloads_total", 0)
            - before.get("cdc_agent_schema_reloads_total", 0),
            "unknown": after.get(skipped, 0) - before.get(skipped, 0),
        }
        if not main:
            self.compared_latency = result
            agent.stop()
            return
        self.results.latency = result
        ms = result["total"]
        say(f"latency: p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms, max "
            f"{max(ms, default=math.nan):.0f} ms; {len(received):,}/{len(acks):,} events; "
            f"{result['reloads']:.0f} schema reloads")  # fmt: skip
        self.rss_summary("latency", self.stop_agent())

    def run_backlog(
        self, rows: int, phase: str = "backlog", profile_to: Path | None = None
    ) -> dict[str, Any]:
        """Write `rows` with the agent stopped; time it from its first cycle until all are acknowledged."""
        before = self.durable()
        say(f"{phase}: writing {rows:,} rows with the agent stopped")
        devices = [uuid.uuid4() for _ in range(1000)]
        started = time.monotonic()
        written = 0
        for chunk in range(0, rows, 10_000):
            params = [row(i, devices[i % 1000]) for i in range(chunk, min(rows, chunk + 10_000))]
            written += self.write_concurrently(params)
        write_s = time.monotonic() - started
        self.rows_written += rows
        say(
            f"  {written:,} rows acknowledged in {write_s:.1f} s ({written / write_s:,.0f}/s); "
            "waiting for the _cdc.idx offsets"
        )
        after = self.wait_durable()
        data = sum(offset - before.get(sid, 0) for sid, offset in after.items())
        say(f"  {data / 1e6:.1f} MB of segment data durable in {len(after)} segment(s); starting the agent")
        self.agent.start(profile_to=profile_to)
        self.sampler.pid = self.agent.pid
        self.sampler.phase = phase
        cpu = self.cpu_window()
        cpu.start()
        healthy = self.agent.wait_healthy()
        done = self.agent.wait_published(written, timeout_s=max(300.0, written / 200))
        cpu_percent = cpu.stop()
        first_cycle = self.agent.first_cycle_at() or self.agent.started_at + healthy
        seconds = done - first_cycle
        result = {
            "rows": written,
            "bytes": data,
            "write_s": write_s,
            "startup_s": first_cycle - self.agent.started_at,
            "healthy_s": healthy,
            "seconds": seconds,
            "events_per_s": written / seconds,
            "mb_per_s": data / seconds / 1e6,
            "cpu": cpu_percent,
            "cpu_s": cpu_percent["agent"] / 100 * (done - self.agent.started_at),
            "longest_reply_s": self.agent.longest_reply_s,
        }
        say(f"{phase}: {written:,} events in {seconds:.1f} s from the first cycle: "
            f"{result['events_per_s']:,.0f} events/s, {result['mb_per_s']:.1f} MB/s; agent CPU "
            f"{cpu_percent['agent']:.0f}% since its start; slowest /metrics reply "
            f"{result['longest_reply_s']:.2f} s")  # fmt: skip
        return result

    # -- --compare: another tree's agent beside this one -------------------------------------------------

    def compare_agent(
        self, tree: Path | None, run: str, cdc_raw: Path, state: Path
    ) -> tuple[AgentProcess, str]:
        """An agent of this tree (None) or another on `cdc_raw`, starting from a copy of the agent state
        `state` (offsets and ledger: it goes on where the last agent stopped), publishing to a topic of its own."""
        home = self.home / "compare" / run
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        shutil.copytree(state, home / "agent-state")
        port = free_port()
        config = self._config(port, self.args.keyspaces)
        topic = f"bench.compare.{run}.raw"
        config["kafka"] = {
            **config["kafka"],
            "raw_topic": topic,
            "schema_topic": f"bench.compare.{run}.schemas",
        }
        config["agent"] = {**config["agent"], "cdc_raw_directory": str(cdc_raw),
                           "state_directory": str(home / "agent-state")}  # fmt: skip
        return AgentProcess(config, home, port), topic

    def compare(self) -> None:
        """This tree's agent and the --compare tree's, alternating: latency runs on the live node, then
        backlog runs on byte-identical copies of one cdc_raw snapshot, each from the same offsets."""
        args = self.args
        other = args.compare.resolve()
        state = self.home / "agent-state"
        latency: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
        for pair in range(args.compare_pairs):
            order = (
                [("other", other), ("this", None)] if pair % 2 == 0 else [("this", None), ("other", other)]
            )
            for label, tree in order:
                agent, topic = self.compare_agent(
                    tree, f"latency-{label}-{pair}", self.node.spec.cdc_raw, state
                )
                say(f"compare: latency run of {label} tree ({tree or REPO})")
                self.run_latency(agent, topic, cwd=tree)
                latency[label].append(self.compared_latency)
                state = agent.config_path.parent / "agent-state"
        before = self.durable()
        rows = args.compare_backlog
        say(f"compare: writing {rows:,} rows with no agent running")
        devices = [uuid.uuid4() for _ in range(1000)]
        written = 0
        for chunk in range(0, rows, 10_000):
            written += self.write_concurrently(
                [row(i, devices[i % 1000]) for i in range(chunk, min(rows, chunk + 10_000))]
            )
        self.rows_written += rows
        after = self.wait_durable()
        data = sum(offset - before.get(sid, 0) for sid, offset in after.items())
        pristine = self.home / "compare" / "pristine"
        shutil.copytree(self.node.spec.cdc_raw, pristine)
        backlog: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
        for pair in range(args.compare_pairs):
            order = (
                [("this", None), ("other", other)] if pair % 2 == 0 else [("other", other), ("this", None)]
            )
            for label, tree in order:
                run = f"backlog-{label}-{pair}"
                copy = self.home / "compare" / f"{run}-cdc_raw"
                shutil.copytree(pristine, copy)
                agent, _ = self.compare_agent(tree, run, copy, state)
                self.wait_quiet()
                agent.start(cwd=tree)
                agent.wait_healthy()
                done = agent.wait_published(written, timeout_s=max(300.0, written / 200))
                cpu_s = cpu_seconds(agent.pid)
                wall = done - agent.started_at
                agent.wait_caught_up()
                agent.stop()
                result = {"events": written, "wall_s": wall, "cpu_s": cpu_s, "us_per_event": 1e6 * cpu_s / written,
                          "events_per_s": written / wall, "hwm_mb": agent.hwm_kb / 1000, "load": os.getloadavg()[0]}  # fmt: skip
                backlog[label].append(result)
                say(f"compare: backlog run of {label} tree: {written:,} events, {wall:.1f} s, CPU {cpu_s:.1f} s "
                    f"({result['us_per_event']:.0f} us/event), VmHWM {result['hwm_mb']:.0f} MB")  # fmt: skip
                shutil.rmtree(copy, ignore_errors=True)
        self.results.compare = {"tree": str(other), "latency": latency, "backlog": backlog, "bytes": data,
                                "rows": written}  # fmt: skip

    def wait_quiet(self, limit_s: float = 60.0) -> None:
        """Until the machine was under 50 % busy over 2 s (other jobs share it), at most `limit_s`."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            busy0, t0 = system_busy_seconds(), time.monotonic()
            time.sleep(2)
            if (system_busy_seconds() - busy0) / (time.monotonic() - t0) / (os.cpu_count() or 1) < 0.5:
                return

    def run_steady(self) -> None:
        """The agent running (after the backlog) while rows are written as fast as the node accepts."""
        args = self.args
        say(f"steady load: writing as fast as the node accepts for {args.steady_seconds} s")
        self.sampler.phase = "steady"
        devices = [uuid.uuid4() for _ in range(1000)]
        base = self.agent.published()
        self.agent.longest_reply_s = 0.0
        cpu = self.cpu_window()
        started = time.monotonic()
        cpu.start()
        written = 0
        i = 0
        while time.monotonic() - started < args.steady_seconds:
            params = [row(j, devices[j % 1000]) for j in range(i, i + 2000)]
            i += len(params)
            written += self.write_concurrently(params)
            if i % 20_000 == 0:
                say(f"  {written:,} rows written, {self.agent.published() - base:,} events acknowledged")
        ended = time.monotonic()
        cpu_percent = cpu.stop()
        published = self.agent.published() - base
        self.rows_written += i
        seconds = ended - started
        done = self.agent.wait_published(base + written, timeout_s=max(120.0, written / 200))
        self.results.steady = {
            "rows": written,
            "seconds": seconds,
            "rows_per_s": written / seconds,
            "events": published,
            "events_per_s": published / seconds,
            "lag_at_end": written - published,
            "drain_s": done - ended,
            "cpu": cpu_percent,
            "longest_reply_s": self.agent.longest_reply_s,
        }
        say(f"steady: {written / seconds:,.0f} rows/s written, agent {published / seconds:,.0f} events/s, "
            f"{written - published:,} behind at the end (drained in {done - ended:.1f} s), "
            f"agent CPU {cpu_percent['agent']:.0f}%")  # fmt: skip

    def run_profile(self) -> None:
        """Another backlog, read by an agent under cProfile (`NodeAgent.run` in-process)."""
        stats_path = self.home / "agent.prof"
        result = self.run_backlog(self.args.profile_rows, phase="profile", profile_to=stats_path)
        self.rss_summary("profile", self.stop_agent())
        stats = pstats.Stats(str(stats_path))
        stats.strip_dirs()
        for order, count in (("tottime", 18), ("cumulative", 25)):
            text = io.StringIO()
            stats.stream = text  # type: ignore[attr-defined]
            stats.sort_stats(order).print_stats(count)
            body = text.getvalue()
            result[order] = body[body.find("ncalls") :].rstrip()
        self.results.profile = result

    def run(self) -> Results:
        self.results.import_rss_mb = import_rss_mb()
        say(f"RSS of a Python process that only imports the agent: {self.results.import_rss_mb:.1f} MB")
        self.up()
        self.run_latency()
        self.results.backlog = self.run_backlog(self.args.backlog)
        self.run_steady()
        self.rss_summary("backlog", 0.0)
        self.rss_summary("steady", self.stop_agent())
        if self.args.compare is not None:
            self.compare()
        if self.args.profile:
            self.run_profile()
        bootstrap, topic = self.kafka_config.bootstrap_servers, self.kafka_config.raw_topic
        self.results.records = {
            "rows": self.rows_written,
            "events": asyncio.run(topic_records(bootstrap, topic)),
        }
        self.results.agent_log = [
            f"{e.get('level')} {e.get('logger', '')}: {e.get('message')}".replace(str(self.home), "<tmp>")
            for e in self.agent.log_entries(this_run=False)
            if e.get("level") in ("WARNING", "ERROR", "CRITICAL", "OUTPUT")
        ]
        self.results.env["loads"] = [s.load1 for s in self.sampler.samples if s.phase != "profile"]
        return self.results


def import_rss_mb() -> float:
    """VmRSS of a fresh interpreter after importing what `cdc agent` imports (no agent work done)."""
    code = (
        "import pathlib, agents.node_agent, cdc.cli, runtime.config, runtime.logs\n"
        "status = pathlib.Path('/proc/self/status').read_text().splitlines()\n"
        "print([line for line in status if line.startswith('VmRSS')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[1]) / 1000


# -- the report --------------------------------------------------------------------------------------


def report(results: Results, args: argparse.Namespace, settings: InfraSettings, command: str) -> str:
    """The Markdown report."""
    lat, back, steady = results.latency, results.backlog, results.steady
    sync_ms = settings.commitlog_sync_period_ms
    target_ms = sync_ms + LATENCY_MARGIN_MS
    p99 = percentile(lat["total"], 99)
    measured = [r for k, r in results.rss.items() if k != "profile"]
    peak_rss = max(
        [v for r in measured for v in (r["max"], r["hwm"]) if v and not math.isnan(v)], default=math.nan
    )
    steady_rss = results.rss.get("steady", {}).get("median", math.nan)
    poll_ms = AgentConfig.__dataclass_fields__["poll_interval_ms"].default
    loads = results.env["loads"] or [math.nan]
    cpu_total = (os.cpu_count() or 1) * 100

    def ms_row(label: str, values: list[float]) -> str:
        cells = " | ".join(f"{percentile(values, p):.0f}" for p in (50, 90, 99))
        return f"| {label} | {cells} | {max(values, default=math.nan):.0f} |"

    def holds(ok: bool) -> str:
        return "**yes**" if ok else "**no**"

    lines = [
        "# Node agent: write-to-event latency, throughput, CPU and RSS",
        "",
        f"Command: `.venv/bin/python {command}`",
        "",
        f"Machine: {os.cpu_count()} cores, measured {time.strftime('%Y-%m-%d')}. Cassandra, Kafka, the agent "
        "and this script (writer and consumer) share those cores. 1-minute load average before the services "
        f"started: {results.env['load_before'][0]:.2f}; during the measured runs (sampled every 0.5 s, our "
        f"own processes included): median {statistics.median(loads):.2f}, max {max(loads):.2f}.",
        "",
        f"Versions: Python {sys.version.split()[0]}, Cassandra {results.env['cassandra']} (one node, CDC on, "
        f"`commitlog_sync: periodic`, `commitlog_sync_period: {sync_ms}ms`, "
        f"{settings.commitlog_segment_size_mb} MiB segments), Kafka {settings.kafka_version} (one KRaft "
        f"broker), aiokafka {version('aiokafka')}, cassandra-driver {version('cassandra-driver')}, cavro "
        f"{version('cavro')}. Agent: `python -m cdc agent`, default settings (poll interval {poll_ms} ms, "
        "16 MiB in flight, raw topic of 12 partitions, acks=all, idempotent producer), "
        f"`cassandra.keyspaces: {args.keyspaces or []}`.",
        "",
        "Table `bench.readings`: 10 columns (uuid, timestamp, text, double, int, bigint, boolean, text, "
        "decimal, text), one row per mutation, one raw event per row. MB = 10^6 bytes.",
        "",
        "## Latency: Cassandra acknowledgement to raw event in Kafka",
        "",
        f"{lat['rows']:,} rows written one at a time at {lat['rate']:.0f} rows/s for {args.seconds} s (after "
        f"a {args.warmup} s warm-up), each a new partition. A consumer thread in the same process stamps "
        "each event on arrival; both ends use this process's `time.time()`. The split uses the event's "
        "`source.published_at_ms`, stamped by the agent when it built the event (same machine clock).",
        "",
        "| ms | p50 | p90 | p99 | max |",
        "|---|---:|---:|---:|---:|",
        ms_row("acknowledged -> event received", lat["total"]),
        ms_row("acknowledged -> agent built the event", lat["agent"]),
        ms_row("agent built the event -> received (produce, ack, fetch)", lat["kafka"]),
        "",
        f"Events received: {lat['received']:,} of {lat['rows']:,}. Target: p99 <= commitlog_sync_period + "
        f"{LATENCY_MARGIN_MS:.0f} ms = {target_ms:.0f} ms. p99 is {p99:.0f} ms: holds "
        f"{holds(p99 <= target_ms)}. Agent CPU during the run: {lat['cpu']['agent']:.1f}% of one core; "
        f"schema reloads: {lat['reloads']:.0f}; mutations skipped as of unknown tables: "
        f"{lat['unknown']:.0f}.",
        "",
        "Total latency by 5-second window of the run:",
        "",
        "| seconds | rows | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {5 * w}-{5 * w + 5} | {len(v)} | {percentile(v, 50):.0f} | {percentile(v, 99):.0f} | "
            f"{v[-1]:.0f} |"
            for w, v in lat["windows"].items()
        ),
        "",
        "## Throughput and CPU",
        "",
        "| run | events | MB of segments | seconds | events/s | MB/s | agent CPU % |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| backlog: {back['rows']:,} rows in cdc_raw, agent started | {back['rows']:,} | "
        f"{back['bytes'] / 1e6:.1f} | {back['seconds']:.1f} | {back['events_per_s']:,.0f} | "
        f"{back['mb_per_s']:.1f} | {back['cpu']['agent']:.0f} |",
        f"| steady: writes as fast as the node takes them | {steady['events']:,} | - | "
        f"{steady['seconds']:.1f} | {steady['events_per_s']:,.0f} | - | {steady['cpu']['agent']:.0f} |",
        "",
        f"Backlog: {back['rows']:,} rows written with the agent stopped ({back['write_s']:.1f} s, "
        f"{back['rows'] / back['write_s']:,.0f} rows/s) until the `_cdc.idx` offsets covered them, then the "
        "agent was started. Timed from its first cycle (the time stamp of its `publishing schema` log line, "
        f"{back['startup_s']:.1f} s after the process started) until `{PUBLISHED}` on `/metrics` reached "
        f"{back['rows']:,} (polled every 0.1 s). Its CPU % is over its whole life, start-up included "
        f"({back['cpu_s']:.1f} CPU-seconds). `/health` first answered ok {back['healthy_s']:.1f} s after "
        f"start; the slowest `/metrics` reply while it read took {back['longest_reply_s']:.2f} s.",
        "",
        "Steady: right after the backlog, the same agent process while this script wrote as fast as the "
        f"node acknowledged ({steady['rows_per_s']:,.0f} rows/s, {steady['rows']:,} rows, 64 writes in "
        f"flight). The agent was {steady['lag_at_end']:,} events behind when writing stopped and caught up "
        f"{steady['drain_s']:.1f} s later; slowest `/metrics` reply {steady['longest_reply_s']:.2f} s.",
        "",
        f'CPU of each process over each run, % of one core (the machine has {cpu_total}%; "other" is the '
        "rest of the machine's busy time, e.g. concurrent jobs):",
        "",
        "| process | latency run | backlog run | steady run |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {lat['cpu'][name]:.0f} | {back['cpu'][name]:.0f} | {steady['cpu'][name]:.0f} |"
            for name in steady["cpu"]
        ),
        "",
        "## Agent memory (VmRSS, sampled every 0.5 s)",
        "",
        "| run | samples | median MB | max MB | VmHWM at stop MB |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {phase} | {r['samples']} | {r['median']:.1f} | {r['max']:.1f} | "
            + (f"{r['hwm']:.1f} |" if r["hwm"] else "(one process with steady) |")
            for phase, r in results.rss.items()
        ),
        "",
        f"A Python process that only imports what `cdc agent` imports: {results.import_rss_mb:.1f} MB. "
        f"Target: RSS <= {RSS_TARGET_MB:.0f} MB. Peak {peak_rss:.1f} MB (profiled run excluded), steady "
        f"{steady_rss:.1f} MB (median under load): holds {holds(peak_rss <= RSS_TARGET_MB)}.",
        "",
        f"Raw topic after all runs: {results.records['events']:,} records for {results.records['rows']:,} "
        "rows written (one event per row expected; the agent had caught up before each stop).",
        "",
    ]
    if results.agent_log:
        shown = results.agent_log[:10]
        more = len(results.agent_log) - len(shown)
        lines += ["Agent log warnings and errors (all runs):", "", "```", *shown, "```"]
        lines += [f"({more} more)", ""] if more else [""]
    else:
        lines += ["The agent logged no warnings or errors.", ""]
    if results.compare:
        lines += compare_report(results.compare, args)
    if results.profile:
        prof = results.profile
        lines += [
            "## Profile of a backlog run (cProfile, the agent run in-process by `--agent-profile`)",
            "",
            f"{prof['rows']:,} rows ({prof['bytes'] / 1e6:.1f} MB); under the profiler "
            f"{prof['events_per_s']:,.0f} events/s. cProfile sees the event-loop thread only; Cython code "
            "(cavro, aiokafka's record builder) counts as its Python caller's own time. Top functions by "
            "own time:",
            "",
            "```",
            prof["tottime"],
            "```",
            "",
            "By cumulative time:",
            "",
            "```",
            prof["cumulative"],
            "```",
            "",
        ]
    return "\n".join(lines)


def compare_report(compare: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The --compare section: both trees' latency and backlog runs, and the ratios of their medians."""
    other = Path(compare["tree"]).name
    names = {"this": "this tree", "other": f"`{other}`"}

    def med(label: str, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in compare[kind][label])

    lines = [
        f"## This tree's agent beside `{other}`'s (--compare), alternating",
        "",
        f"Each tree's agent ran {args.compare_pairs} latency runs (as above, {args.rate} rows/s for {args.seconds} s, "
        "each agent starting from the offsets the previous one saved) and then "
        f"{args.compare_pairs} backlog runs, each on its own byte-identical copy of one cdc_raw snapshot holding "
        f"{compare['rows']:,} new rows ({compare['bytes'] / 1e6:.1f} MB), from the same offsets; order alternating. "
        "Backlog CPU is the agent process's utime + stime from its start (start-up included) to the poll that saw "
        "the last event acknowledged; each backlog run waited for a quiet machine first (under 50 % busy over 2 s, "
        "at most 60 s).",
        "",
        "| run | tree | p50 ms | p99 ms | max ms | agent CPU % |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind_label in ("this", "other"):
        for i, r in enumerate(compare["latency"][kind_label]):
            lines.append(f"| latency {i + 1} | {names[kind_label]} | {percentile(r['total'], 50):.0f} | "
                         f"{percentile(r['total'], 99):.0f} | {max(r['total'], default=math.nan):.0f} | "
                         f"{r['cpu']['agent']:.1f} |")  # fmt: skip
    lines += [
        "",
        "| run | tree | events | wall s | events/s | CPU s | CPU µs/event | VmHWM MB | load1 after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind_label in ("this", "other"):
        for i, r in enumerate(compare["backlog"][kind_label]):
            lines.append(f"| backlog {i + 1} | {names[kind_label]} | {r['events']:,} | {r['wall_s']:.1f} | "
                         f"{r['events_per_s']:,.0f} | {r['cpu_s']:.2f} | {r['us_per_event']:.1f} | {r['hwm_mb']:.0f} | "
                         f"{r['load']:.2f} |")  # fmt: skip
    this_us, other_us = med("this", "backlog", "us_per_event"), med("other", "backlog", "us_per_event")
    p99 = {
        k: statistics.median(percentile(r["total"], 99) for r in compare["latency"][k])
        for k in ("this", "other")
    }
    lines += [
        "",
        f"Medians: backlog CPU {this_us:.1f} µs/event (this tree) against {other_us:.1f} ({other}): "
        f"{other_us / this_us:.1f}x less CPU per event; events/s {med('this', 'backlog', 'events_per_s'):,.0f} "
        f"against {med('other', 'backlog', 'events_per_s'):,.0f}; peak RSS {med('this', 'backlog', 'hwm_mb'):.0f} "
        f"against {med('other', 'backlog', 'hwm_mb'):.0f} MB; latency p99 {p99['this']:.0f} ms against "
        f"{p99['other']:.0f} ms.",
        "",
    ]
    return lines


def profile_agent(config: Path, out: Path) -> int:
    """Run the agent in this process under cProfile until SIGTERM; dump the stats to `out`."""
    from agents.node_agent import NodeAgent
    from runtime.config import load_config
    from runtime.logs import configure_logging

    configure_logging(json_lines=True)
    agent = NodeAgent(load_config(config))
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(agent.run())
    finally:
        profiler.disable()
        profiler.dump_stats(out)
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=200, help="latency run: rows per second (default 200)")
    parser.add_argument("--seconds", type=int, default=30, help="latency run: seconds counted (default 30)")
    parser.add_argument("--warmup", type=int, default=2, help="latency run: seconds not counted (default 2)")
    parser.add_argument("--backlog", type=int, default=100_000, help="rows written with the agent stopped")
    parser.add_argument(
        "--steady-seconds", type=int, default=30, help="seconds of writes as fast as possible"
    )
    parser.add_argument(
        "--keyspaces", nargs="+", metavar="KS", help="the agent's cassandra.keyspaces (default all)"
    )
    parser.add_argument("--profile", action="store_true", help="add a backlog run of an agent under cProfile")
    parser.add_argument("--compare", type=Path, metavar="TREE",
                        help="also run the agent of another checkout (e.g. a worktree of an older commit) beside "
                        "this one, alternating: latency runs, then backlog runs on copies of one snapshot")  # fmt: skip
    parser.add_argument("--compare-pairs", type=int, default=2, help="runs of each tree per kind (default 2)")
    parser.add_argument("--compare-backlog", type=int, default=100_000, help="rows of the compared backlog")
    parser.add_argument(
        "--kafka-port", type=int, default=KAFKA_PORT, help=f"the bench's broker (default {KAFKA_PORT})"
    )
    parser.add_argument(
        "--jmx-port", type=int, default=JMX_PORT, help=f"the bench node's JMX (default {JMX_PORT})"
    )
    parser.add_argument("--profile-rows", type=int, default=50_000, help="rows of the profiled backlog")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--agent-log", type=Path, help="keep a copy of the agent's log (JSON lines) here")
    parser.add_argument(
        "--agent-profile", nargs=2, type=Path, metavar=("CONFIG", "STATS"), help=argparse.SUPPRESS
    )
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.agent_profile:
        return profile_agent(*args.agent_profile)
    command = " ".join(["bench/agent_pipeline.py", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="cdc-bench-agent-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            results = bench.run()
        finally:
            bench.down()
            if args.agent_log and bench.agent.log_path.exists():
                shutil.copyfile(bench.agent.log_path, args.agent_log)
        text = report(results, args, bench.settings, command)
    print(text)
    if args.out:
        args.out.write_text(text)
        say(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
