"""Worker under load: raw events/s at three copies per change, scaling to two workers, CPU and RSS.

Starts services of its own in a temporary home (Kafka on 127.0.0.1:29092, a one-node Cassandra on
127.0.3.1; CDC_KAFKA_PORT, CDC_KAFKA_CONTROLLER_PORT, CDC_CQL_PORT, CDC_STORAGE_PORT and CDC_JMX_BASE_PORT
move them, for a machine where another set of services runs), then:
  input     --rows writes to `bench.readings` (a CDC table of narrow 10-column rows; --update-share of them
            UPDATEs of rows written before, the rest INSERTs of new rows), published by a real agent
            (`python -m cdc agent`); every raw event is then written --copies times, shuffled within its
            partition, to the topic the workers read (12 partitions): what RF=3 replicas look like;
            then Cassandra is stopped (the runs below need only Kafka)
  cold      one worker on the input right after it was written, on a broker that has just started and
            has not served these segments yet; reported next to the target's figure
  one       one worker (`python -m cdc worker --config`) on the same input, with a group of its own, once
            the broker has served it (as a long-running broker has); timed from its first consumed record
            (/stats `total.in` polled every 0.1 s) until its consumer group's committed lag is 0
  two       two workers (new app_id, own data directories and worker ids) started together on the same
            input: aggregate events/s and each one's share
  profile   (--profile) another worker under cProfile (`python -m cProfile -o FILE -m cdc worker`) for at
            most --profile-seconds, stopped with SIGINT
  state     --state-rows new rows (INSERTs cloned from a real raw event, one copy each, --rows-per-partition
            rows per partition key) produced to another topic and merged by one worker; its VmRSS as the
            state grows (RocksDB memory is bounded by the block cache and memtables, not by row count)
Every worker's VmRSS is sampled every 0.5 s; CPU of each process comes from /proc/<pid>/stat. `--py-spy EXE`
also samples the `one` worker with py-spy (not a project dependency) and splits its CPU time by part.

    .venv/bin/python bench/worker_pipeline.py [--rows 100000] [--update-share 0.3] [--copies 3]
        [--phases cold one two profile state] [--profile] [--profile-seconds 60] [--py-spy EXE [--keep-spy FILE]]
        [--state-rows 1000000] [--rows-per-event 1] [--batch-max-events N]
        [--compare-tree DIR [--ab-rounds 3]]   (DIR: another checkout, e.g. `git worktree add DIR main
        --detach`; its workers run with PYTHONPATH=DIR, alternating with this checkout's, one worker and
        then two per round; `--phases none` runs only those)
        [--out bench/worker_pipeline.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import math
import os
import pstats
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agent_pipeline import (  # noqa: E402
    INSERT,
    TABLE_DDL,
    AgentProcess,
    BenchProcess,
    CpuWindow,
    cpu_seconds,
    proc_status,
    row,
    say,
    system_busy_seconds,
)

from infra.settings import InfraSettings  # noqa: E402
from runtime.kafka_topics import topic_partitions  # noqa: E402
from runtime.service_process import free_port  # noqa: E402
from schemas.raw_event import decode_raw_event, encode_raw_event, encode_raw_key  # noqa: E402

ADDRESS = "127.0.3.1"
JMX_PORT = 7801
KAFKA_PORT = 29092
KAFKA_CONTROLLER_PORT = 29093
PARTITIONS = 12
DEVICES = 1000
EPS_TARGET = 50_000
#: the figure this report replaces (the worker of commit 3888aa3, measured 2026-11-26): raw events/s of
#: one worker, its CPU-µs per raw event, and two workers' rate over one's
EARLIER_FIGURE = (31_793, 29, 1.30)
RSS_TARGET_MB = 1000.0
STATE_TARGET_ROWS = 10_000_000
UPDATE = "UPDATE bench.readings SET value = ?, count = ?, note = ? WHERE device = ? AND at = ?"


# -- Kafka helpers -----------------------------------------------------------------------------------


async def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` and wait until every partition has a leader (no retried sends right after)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
        for _ in range(100):
            described = await admin.describe_topics([topic])
            found = described[0].get("partitions", []) if described else []
            if len(found) == partitions and all(p.get("leader", -1) >= 0 for p in found):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of `topic`: (partition, offset, key, value)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5000)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[int, int, bytes, bytes]] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                out.extend((tp.partition, m.offset, m.key, m.value) for m in messages)
        return out
    finally:
        await consumer.stop()


async def _produce(
    bootstrap: str, topic: str, records: Iterable[tuple[int | None, bytes, bytes]], partitions: int
) -> int:
    """Create `topic` and write (partition or None for the key's murmur2 partition, key, value) records."""
    from aiokafka import AIOKafkaProducer

    await _create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024
    )
    await producer.start()
    sent = 0
    pending: list[asyncio.Future[Any]] = []
    try:
        for partition, key, value in records:
            pending.append(await producer.send(topic, value=value, key=key, partition=partition))
            sent += 1
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
                if sent % 500_000 == 0:
                    say(f"  {sent:,} records produced to {topic}")
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent


class LagProbe:
    """Committed lag of a consumer group on a topic that no longer grows, with clients kept open."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.bootstrap = bootstrap
        self.topic = topic
        self.ends: dict[Any, int] = {}
        self.admin: Any = None
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.admin import AIOKafkaAdminClient

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await consumer.start()
        try:
            self.ends = await consumer.end_offsets(await topic_partitions(consumer, self.topic))
        finally:
            await consumer.stop()
        self.admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await self.admin.start()

    @property
    def total(self) -> int:
        return sum(self.ends.values())

    def lag(self, group: str) -> int:
        committed = self.loop.run_until_complete(self.admin.list_consumer_group_offsets(group))
        lag = 0
        for tp, end in self.ends.items():
            meta = committed.get(tp)
            lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
        return lag

    def close(self) -> None:
        self.loop.run_until_complete(self.admin.close())
        self.loop.close()


# -- synthetic raw events for the state run ----------------------------------------------------------


def synthetic_events(
    template: dict[str, Any], rows: int, rows_per_partition: int, rows_per_event: int, seed: int
) -> Iterator[tuple[None, bytes, bytes]]:
    """Raw events INSERTing `rows` new rows, `rows_per_event` of one partition per event (one INSERT, or an
    unlogged batch to one partition), each row a copy of the row of the real raw event `template` (one
    INSERT of one row) with its own clustering, write time and values (value, count, total, note)."""
    base_row = template["rows"][0]
    write_base = int(time.time() * 1_000_000)
    values = {
        "value": lambda i: struct.pack(">d", i * 0.25),
        "count": lambda i: struct.pack(">i", i % 2**31),
        "total": lambda i: struct.pack(">q", i * 1000),
        "note": lambda i: f"note number {i}".encode(),
    }

    def new_row(i: int) -> dict[str, Any]:
        ts = write_base + i
        return {
            **base_row,
            "clustering": [struct.pack(">q", 1_700_000_000_000 + i)],
            "liveness": {**base_row["liveness"], "timestamp": ts},
            "cells": [
                {
                    **c,
                    "timestamp": ts,
                    "value": values[c["column"]](i) if c["column"] in values else c["value"],
                }
                for c in base_row["cells"]
            ],
        }

    for first in range(0, rows, rows_per_event):
        device = uuid.UUID(int=(seed << 96) | (first // rows_per_partition)).bytes
        event = {
            **template,
            "source": {**template["source"], "entry_offset": first, "position": first + 1},
            "partition_key": device,
            "digest": hashlib.md5(f"{seed}/{first}".encode()).digest(),
            "rows": [new_row(i) for i in range(first, min(rows, first + rows_per_event))],
        }
        yield None, encode_raw_key(template["keyspace"], template["table"], device), encode_raw_event(event)


# -- worker processes --------------------------------------------------------------------------------


class WorkerProcess(BenchProcess):
    """One `python -m cdc worker --config FILE` child (optionally under cProfile), JSON logs to a file."""

    def __init__(self, home: Path, name: str, config: dict[str, Any]) -> None:
        super().__init__("worker", name, config, home, config["worker"]["web_port"])
        self.data = Path(config["worker"]["data_directory"])
        self.last_stats: dict[str, Any] = {}
        self.last_metrics: dict[str, float] = {}

    def events_in(self) -> int | None:
        """/stats `total.in`, or None while the web server does not answer yet."""
        got = self.get_json("/stats", 60.0)
        if got is None or got[0] != 200:
            return None
        self.last_stats = got[1]
        return int(self.last_stats["total"]["in"])

    def metrics(self) -> dict[str, float]:
        self.last_metrics = self.metric_values() or {}
        return self.last_metrics

    def log_problems(self) -> list[str]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"level": "OUTPUT", "message": line}
            if isinstance(entry, dict) and entry.get("level") in ("WARNING", "ERROR", "CRITICAL"):
                out.append(
                    f"{self.name} {entry.get('level')} {entry.get('logger', '')}: {entry.get('message')}"
                )
        return out


class Spy:
    """py-spy (a sampling profiler, not a project dependency) attached to a running worker: its collapsed
    stacks of the worker's Python threads while they run (idle waits in epoll are not sampled)."""

    def __init__(self, exe: Path, out: Path) -> None:
        self.exe = exe
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int) -> None:
        argv = [str(self.exe), "record", "-p", str(pid), "-r", "100", "-F", "--nonblocking", "-f", "raw",
                "-o", str(self.out)]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _frame_name(frame: str) -> str:
    """`function (path:line)` with the path cut to its package part (no machine paths in reports)."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")")
    for marker in ("site-packages/", f"{REPO}/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name


#: frames that every sample of the event loop shares; left out of the inclusive table
_TRUNK = ("_run_module_as_main", "_run_code", "<module>", "main (", "_cmd_worker", "run_worker",
          "Worker.execute_from_commandline", "BaseEventLoop.run_forever", "BaseEventLoop.run_until_complete",
          "BaseEventLoop._run_once", "Handle._run")  # fmt: skip

#: where a sample's CPU goes: the first bucket, in this order, with a frame on the sample's stack
_OWN_BUCKETS = (
    ("decode_raw_event", "decode raw events (cavro)"),
    ("peek_raw_event", "read raw event heads (digest, table)"),
    ("key_partition", "clean record partitions (murmur2)"),
    ("BatchLoop._commit", "Kafka transaction: send clean + changelog records, commit"),
    ("ChangeProcessor._emit", "build and encode change events (JSON)"),
    ("app/worker_stats", "stats and Prometheus counters"),
    ("state/store/", "state store: RocksDB reads/writes, row encoding"),
    ("state/", "merge (prepare, apply, diff)"),
    ("BatchLoop.process", "batch loop, other"),
    ("RawConsumer", "raw consumer: getmany batches"),
    ("merge_raw_events", "worker task: hand batches to the loop"),
)
_LIBRARY_BUCKETS = (
    ("aiokafka/consumer", "aiokafka consumer: fetch, parse record batches"),
    ("aiokafka/producer", "aiokafka producer: batches, network"),
    ("aiohttp", "web server (the benchmark's /stats polls)"),
    ("faust/", "Faust and mode services (timers, web, signals)"),
    ("mode/", "Faust and mode services (timers, web, signals)"),
    ("aiokafka/", "aiokafka client, other"),
)


def _bucket(frames: list[str]) -> str:
    """The first bucket (own code first, then libraries) with a frame anywhere on the stack."""
    frames = [f for f in frames if not f.startswith(_TRUNK)]
    for marker, name in (*_OWN_BUCKETS, *_LIBRARY_BUCKETS):
        if any(marker in frame for frame in frames):
            return name
    return "event loop (asyncio) and other"


def spy_tables(path: Path, top: int) -> dict[str, Any]:
    """Self and inclusive shares of the samples in a py-spy raw (collapsed stacks) file, top `top` each,
    and the shares of the buckets above."""
    own: dict[str, int] = defaultdict(int)
    inclusive: dict[str, int] = defaultdict(int)
    buckets: dict[str, int] = defaultdict(int)
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        buckets[_bucket(frames)] += count
        for frame in set(frames):
            if not frame.startswith(_TRUNK):
                inclusive[frame] += count

    def table(values: dict[str, int], limit: int) -> str:
        rows = sorted(values.items(), key=lambda kv: -kv[1])[:limit]
        return "\n".join(f"{100 * n / total:5.1f}%  {name}" for name, n in rows)

    return {
        "samples": total,
        "self": table(own, top),
        "inclusive": table(inclusive, top),
        "buckets": sorted(((name, n / total) for name, n in buckets.items()), key=lambda kv: -kv[1]),
    }


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


@dataclass(slots=True)
class RunResult:
    """One run of one or more workers over one input topic."""

    name: str
    workers: list[str]
    total: int
    seconds: float = 0.0
    startup_s: float = 0.0
    events_in: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[float, int]] = field(default_factory=list)
    cpu_samples: list[tuple[float, int, float, float, float]] = field(default_factory=list)
    """every second: (seconds since the first record, events in, CPU seconds of the workers, of Kafka, of
    the whole machine)"""
    """(seconds since the first record, events in summed over workers)"""
    cpu: dict[str, float] = field(default_factory=dict)
    rss: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    """worker -> (seconds since the first record, its events in, VmRSS kB)"""
    hwm_mb: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    state_mb: dict[str, float] = field(default_factory=dict)
    stopped_early: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return sum(self.events_in.values()) / self.seconds if self.seconds else math.nan

    def middle_rate(self, low: float = 0.1, high: float = 0.9) -> float:
        """events/s between the samples nearest low and high fractions of the input (no start or tail)."""
        points = self.timeline
        if len(points) < 3:
            return math.nan
        a = next((p for p in points if p[1] >= low * self.total), None)
        b = next((p for p in points if p[1] >= high * self.total), None)
        if a is None or b is None or b[0] <= a[0]:
            return math.nan
        return (b[1] - a[1]) / (b[0] - a[0])

    def windows(self, count: int = 12) -> list[tuple[float, float, float, float, float]]:
        """About `count` equal windows of the run: (start s, events/s, workers', Kafka's and everything
        else's CPU % of one core)."""
        samples = self.cpu_samples
        if len(samples) < 2:
            return []
        width = max(1.0, round(samples[-1][0] / count))
        out, start = [], samples[0]
        for sample in samples[1:]:
            if sample[0] - start[0] >= width or sample is samples[-1]:
                wall = sample[0] - start[0]
                workers, kafka, busy = (100 * (sample[i] - start[i]) / wall for i in (2, 3, 4))
                out.append(
                    (
                        start[0],
                        (sample[1] - start[1]) / wall,
                        workers,
                        kafka,
                        max(0.0, busy - workers - kafka),
                    )
                )
                start = sample
        return out

    def cpu_us_per_event(self, worker: str) -> float:
        """CPU time the worker spent per raw event it took in (start-up excluded)."""
        events = self.events_in.get(worker, 0)
        return self.cpu[worker] / 100 * self.seconds / events * 1e6 if events else math.nan

    def peak_rss_mb(self, worker: str) -> float:
        samples = [kb for _, _, kb in self.rss.get(worker, [])]
        return max([max(samples, default=0) / 1000, self.hwm_mb.get(worker, 0.0)])


def worker_defaults(batch_max_events: int | None = None) -> str:
    """The worker settings that shape throughput and memory, as the config defaults give them."""
    from dataclasses import fields

    from runtime.config import WorkerConfig

    default = {f.name: f.default for f in fields(WorkerConfig)}
    if batch_max_events is not None:
        default["batch_max_events"] = batch_max_events
    return (
        f"batches of up to {default['batch_max_events']:,} events / {default['batch_max_wait_ms']} ms, "
        f"{default['encoding'].upper()} change events, {default['block_cache_size'] >> 20} MiB shared block "
        f"cache, {default['write_buffer_size'] >> 20} MiB write buffers within a "
        f"{default['memtable_budget'] >> 20} MiB memtable budget"
    )


# -- the benchmark -----------------------------------------------------------------------------------


class Bench:
    """Services, input topics and worker runs; `down()` stops everything this script started."""

    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        from infra.cassandra import CassandraNode, standalone_spec
        from infra.kafka import KafkaBroker, broker_spec

        self.args = args
        self.home = home
        self.settings = InfraSettings.from_env(
            home=home / "services",
            kafka_port=int(os.environ.get("CDC_KAFKA_PORT", KAFKA_PORT)),
            kafka_controller_port=int(os.environ.get("CDC_KAFKA_CONTROLLER_PORT", KAFKA_CONTROLLER_PORT)),
        )
        jmx_port = int(os.environ.get("CDC_JMX_BASE_PORT", JMX_PORT))
        self.broker = KafkaBroker(broker_spec(self.settings), self.settings)
        self.node = CassandraNode(
            standalone_spec(self.settings, "bench", address=ADDRESS, jmx_port=jmx_port), self.settings
        )
        self.bootstrap = self.broker.spec.bootstrap
        self.cluster: Any = None
        self.agent: AgentProcess | None = None
        self.workers: list[WorkerProcess] = []
        self.env: dict[str, Any] = {}
        self.input: dict[str, Any] = {}
        self.runs: dict[str, RunResult] = {}
        self.profile: dict[str, Any] = {}
        self.template: dict[str, Any] | None = None
        self.spy: dict[str, Any] = {}
        #: the `--compare-tree` runs: (round, "base" or "this", "one" or "two" workers, result)
        self.ab: list[tuple[int, str, str, RunResult]] = []

    # -- set-up and tear-down

    def up(self) -> None:
        self.env["code"] = code_version()
        self.env["load_before"] = os.getloadavg()
        self.env["uptime_before"] = uptime()
        say(f"load average before start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        say(f"starting Kafka on {self.bootstrap}")
        self.broker.start()
        say(f"starting Cassandra {self.settings.cassandra_version} on {ADDRESS}")
        self.node.start()

    def down(self) -> None:
        self.env["uptime_after"] = uptime()
        for worker in self.workers:
            with contextlib.suppress(Exception):
                worker.stop(10, signal_number=signal.SIGKILL if worker.pid else signal.SIGTERM)
        if self.agent is not None:
            self.agent.stop()
        if self.cluster is not None:
            self.cluster.shutdown()
        for name, service in (("Cassandra", self.node), ("Kafka", self.broker)):
            try:
                if service.stop():
                    say(f"stopped {name}")
            except Exception as exc:
                say(f"stopping {name} failed: {exc}")

    # -- input: real writes, a real agent, shuffled copies

    def cql_cluster(self) -> Any:
        """A driver Cluster on the node (bench/secured_overhead.py logs in over TLS instead)."""
        from infra.cql import connect

        return connect(self.node.spec.address, self.node.spec.cql_port)

    def write_rows(self) -> tuple[int, int]:
        """--rows writes (inserts and updates) to bench.readings; (inserts, updates) acknowledged."""
        from cassandra.concurrent import execute_concurrent

        self.cluster = self.cql_cluster()
        session = self.cluster.connect()
        session.execute(
            "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute(TABLE_DDL)
        self.env["cassandra"] = session.execute("SELECT release_version FROM system.local").one()[0]
        insert, update = session.prepare(INSERT), session.prepare(UPDATE)
        rng = random.Random(5)
        devices = [uuid.uuid4() for _ in range(DEVICES)]
        inserted = updated = failed = 0
        rows_so_far = 0
        statements: list[tuple[Any, tuple[Any, ...]]] = []
        started = time.monotonic()
        for n in range(self.args.rows):
            if rows_so_far and rng.random() < self.args.update_share:
                i = rng.randrange(rows_so_far)
                statements.append((update, (i * 0.5 + n, n, f"updated {n}", devices[i % DEVICES],
                                            1_700_000_000_000 + i)))  # fmt: skip
            else:
                statements.append((insert, row(rows_so_far, devices[rows_so_far % DEVICES])))
                rows_so_far += 1
            if len(statements) == 5000 or n == self.args.rows - 1:
                results = execute_concurrent(session, statements, concurrency=64, raise_on_first_error=False)
                for (statement, _), (ok, _) in zip(statements, results, strict=True):
                    if not ok:
                        failed += 1
                    elif statement is insert:
                        inserted += 1
                    else:
                        updated += 1
                statements = []
        took = time.monotonic() - started
        say(f"  {inserted:,} inserts and {updated:,} updates acknowledged in {took:.1f} s "
            f"({(inserted + updated) / took:,.0f}/s), {failed} failed")  # fmt: skip
        self.input.update(inserts=inserted, updates=updated, failed=failed, write_s=took)
        return inserted, updated

    def publish_raw(self) -> None:
        """Run the agent while the rows are written and until it published all of them; keep its events."""
        spec = self.node.spec
        metrics_port = free_port()
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {"bootstrap_servers": self.bootstrap, "raw_partitions": PARTITIONS},
            "cassandra": {"contact_points": [spec.address], "port": spec.cql_port, "keyspaces": ["bench"]},
            "agent": {
                "cdc_raw_directory": str(spec.cdc_raw),
                "state_directory": str(self.home / "agent-state"),
                "node": spec.name,
                "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
                "metrics_port": metrics_port,
            },
        }
        self.agent = AgentProcess(config, self.home, metrics_port)
        self.agent.start()
        self.agent.wait_healthy()
        say(
            f"input: writing {self.args.rows:,} rows ({self.args.update_share:.0%} updates) with the agent on"
        )
        inserts, updates = self.write_rows()
        self.agent.wait_published(inserts + updates, timeout_s=600)
        self.agent.wait_caught_up()
        self.agent.stop()
        self.write_copies("cdc.raw")

    def write_copies(self, source: str) -> None:
        """The raw events of topic `source`, --copies times each, shuffled within their partition, to
        bench.raw-copies (the topic the workers read); a single-row INSERT among them is the state run's
        template."""
        raw = asyncio.run(_read_topic(self.bootstrap, source))
        say(f"  the agent published {len(raw):,} raw events ({sum(len(r[3]) for r in raw) / 1e6:.1f} MB)")
        self.input.update(events=len(raw), raw_mb=sum(len(r[3]) for r in raw) / 1e6)
        for _, _, _, value in raw:
            event = decode_raw_event(value)
            rows = event["rows"]
            if len(rows) == 1 and rows[0]["liveness"] is not None and len(rows[0]["cells"]) == 8:
                self.template = event
                break
        copies = self.args.copies
        per_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        for partition, _, key, value in raw:
            per_partition[partition].extend([(key, value)] * copies)
        rng = random.Random(7)
        for items in per_partition.values():
            rng.shuffle(items)
        shuffled = ((p, k, v) for p, items in sorted(per_partition.items()) for k, v in items)
        started = time.monotonic()
        sent = asyncio.run(_produce(self.bootstrap, "bench.raw-copies", shuffled, PARTITIONS))
        say(f"  {sent:,} records ({copies} copies, shuffled within each partition) written to "
            f"bench.raw-copies in {time.monotonic() - started:.1f} s")  # fmt: skip
        self.input["records"] = sent

    # -- worker runs

    def worker(
        self,
        name: str,
        app_id: str,
        topic: str,
        worker_id: str | None = None,
        *,
        kafka: dict[str, Any] | None = None,
    ) -> WorkerProcess:
        """A worker (not started) on `topic`; `kafka` replaces keys of its kafka section (e.g. another
        listener's bootstrap_servers and its `security`)."""
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {
                "bootstrap_servers": self.bootstrap,
                "raw_topic": topic,
                "schema_topic": "cdc.schemas",
                "raw_partitions": PARTITIONS,
                **(kafka or {}),
            },
            "worker": {
                "data_directory": str(self.home / name),
                "app_id": app_id,
                "worker_id": worker_id or name,
                "clean_topic_prefix": app_id,
                "web_port": free_port(),
                **(
                    {}
                    if self.args.batch_max_events is None
                    else {"batch_max_events": self.args.batch_max_events}
                ),
            },
        }
        worker = WorkerProcess(self.home, name, config)
        self.workers.append(worker)
        return worker

    def run(
        self,
        name: str,
        workers: list[WorkerProcess],
        topic: str,
        group: str,
        *,
        profile_to: Path | None = None,
        max_seconds: float | None = None,
        checkpoints: Iterable[int] = (),
        spy: Spy | None = None,
        tree: Path | None = None,
    ) -> RunResult:
        """Start `workers` together; time them from the first record until the group's lag is 0."""
        probe = LagProbe(self.bootstrap, topic)
        result = RunResult(name, [w.name for w in workers], probe.total)
        say(f"{name}: {len(workers)} worker(s) on {topic} ({probe.total:,} records)")
        pids = {w.name: (lambda w=w: w.pid) for w in workers}
        cpu = CpuWindow({**pids, "Kafka": self.broker.process.pid, "benchmark": os.getpid})
        started = time.monotonic()
        for w in workers:
            if tree is None:
                w.start(profile_to=profile_to)
            else:
                w.start({"PYTHONPATH": str(tree)}, profile_to=profile_to, cwd=tree)
            result.rss[w.name] = []
        first: float | None = None
        last_rss = last_lag = last_report = 0.0
        pending = sorted(checkpoints)
        timeout = max(600.0, probe.total / 500)
        try:
            while True:
                now = time.monotonic()
                if now - started > timeout:
                    raise RuntimeError(f"{name}: not done after {timeout:.0f} s")
                for w in workers:
                    w.check_alive()
                counts = {w.name: w.events_in() for w in workers}
                done = sum(c or 0 for c in counts.values())
                if first is None and done > 0:
                    first = time.monotonic()
                    cpu.start()
                    result.startup_s = first - started
                    if spy is not None and workers[0].pid is not None:
                        spy.start(workers[0].pid)
                    say(f"  first records consumed {result.startup_s:.1f} s after start")
                if first is None:
                    time.sleep(0.1)
                    continue
                at = time.monotonic() - first
                result.timeline.append((at, done))
                if not result.cpu_samples or at - result.cpu_samples[-1][0] >= 1.0:
                    result.cpu_samples.append((at, done, sum(cpu_seconds(w.pid) for w in workers),
                                               cpu_seconds(self.broker.process.pid()), system_busy_seconds()))  # fmt: skip
                if now - last_rss >= 0.5 or (pending and done >= pending[0]):
                    for w in workers:
                        rss = proc_status(w.pid).get("VmRSS") if w.pid else None
                        if rss is not None:
                            result.rss[w.name].append((at, counts[w.name] or 0, rss))
                    while pending and done >= pending[0]:
                        pending.pop(0)
                    last_rss = now
                if now - last_report >= 10:
                    say(
                        f"  {done:,} of {probe.total:,} records in after {at:.0f} s ({done / max(at, 1e-9):,.0f}/s)"
                    )
                    last_report = now
                if max_seconds is not None and at >= max_seconds:
                    result.stopped_early = True
                    break
                if done >= probe.total or now - last_lag >= 2:
                    last_lag = now
                    if probe.lag(group) == 0:
                        break
                time.sleep(0.1)
            end = time.monotonic()
            result.cpu = cpu.stop()
            if spy is not None:
                spy.stop()
            result.seconds = end - first
            for w in workers:
                result.events_in[w.name] = w.events_in() or 0
                result.stats[w.name] = w.last_stats
                result.metrics[w.name] = w.metrics()
        finally:
            probe.close()
        for w in workers:
            w.stop(90, signal_number=signal.SIGINT if profile_to is not None else signal.SIGTERM)
            result.hwm_mb[w.name] = w.hwm_kb / 1000
            result.state_mb[w.name] = dir_mb(w.data / "state") if (w.data / "state").exists() else 0.0
            result.problems += w.log_problems()
        say(f"{name}: {sum(result.events_in.values()):,} records in {result.seconds:.1f} s: "
            f"{result.rate:,.0f} events/s ({result.middle_rate():,.0f}/s from 10% to 90%); "
            + ", ".join(f"{w.name} {result.events_in[w.name]:,} in, CPU {result.cpu[w.name]:.0f}%, "
                        f"peak RSS {result.peak_rss_mb(w.name):.0f} MB" for w in workers))  # fmt: skip
        self.runs[name] = result
        return result

    def run_cold(self) -> None:
        self.run(
            "cold", [self.worker("w0", "bench-cold", "bench.raw-copies")], "bench.raw-copies", "bench-cold"
        )

    def run_one(self) -> None:
        worker = self.worker("w1", "bench-one", "bench.raw-copies")
        spy = None if self.args.py_spy is None else Spy(self.args.py_spy, self.home / "w1.spy")
        self.run("one", [worker], "bench.raw-copies", "bench-one", spy=spy)
        if spy is not None and spy.out.exists():
            self.spy = spy_tables(spy.out, self.args.profile_top)
            if self.args.keep_spy is not None:
                shutil.copyfile(spy.out, self.args.keep_spy)

    def run_two(self) -> None:
        workers = [self.worker(f"w2{c}", "bench-two", "bench.raw-copies") for c in "ab"]
        self.run("two", workers, "bench.raw-copies", "bench-two")

    def run_profile(self) -> None:
        stats_path = self.home / "worker.prof"
        worker = self.worker("wp", "bench-profile", "bench.raw-copies")
        result = self.run(
            "profile",
            [worker],
            "bench.raw-copies",
            "bench-profile",
            profile_to=stats_path,
            max_seconds=self.args.profile_seconds,
        )
        if not stats_path.exists():
            raise RuntimeError(f"the profiled worker wrote no stats:\n{worker.log_tail()}")
        if self.args.keep_profile is not None:
            shutil.copyfile(stats_path, self.args.keep_profile)
        stats = pstats.Stats(str(stats_path))
        stats.strip_dirs()
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            stats.stream = text  # type: ignore[attr-defined]
            stats.sort_stats(order).print_stats(self.args.profile_top)
            body = text.getvalue()
            self.profile[order] = body[body.find("ncalls") :].rstrip()
        self.profile["rate"] = result.rate
        self.profile["seconds"] = result.seconds
        self.profile["events"] = sum(result.events_in.values())

    def run_ab(self) -> None:
        """`one` and `two` again, alternating workers of `--compare-tree` (another checkout, e.g. the commit
        before a change) with workers of this checkout, `--ab-rounds` times each on the same input, each
        run with a group of its own: the two codes compared as a ratio in one run, on a machine whose
        speed drifts."""
        other = self.args.compare_tree.resolve()
        self.env["base_code"] = code_version(other)
        for index in range(self.args.ab_rounds):
            order = [("base", other), ("this", None)]
            for tag, tree in order if index % 2 == 0 else reversed(order):
                for kind, suffixes in (("one", [""]), ("two", ["a", "b"])):
                    self.ab.append(
                        (index + 1, tag, kind, self._ab_run(f"ab{index + 1}-{tag}-{kind}", suffixes, tree))
                    )

    def _ab_run(self, name: str, suffixes: list[str], tree: Path | None) -> RunResult:
        """One run of `run_ab`, once more with a new group when a worker stopped (e.g. fenced in the
        rebalance of two workers starting together); the report lists such runs."""
        for attempt in range(2):
            run_name = name if attempt == 0 else f"{name}-again"
            workers = [self.worker(run_name + c, f"bench-{run_name}", "bench.raw-copies") for c in suffixes]
            try:
                return self.run(run_name, workers, "bench.raw-copies", f"bench-{run_name}", tree=tree)
            except RuntimeError as exc:
                if attempt:
                    raise
                first_line = str(exc).splitlines()[0]
                say(f"{run_name} failed ({first_line}); running it again with a new group")
                self.env.setdefault("ab_retries", []).append(f"{run_name}: {first_line}")
        raise AssertionError("unreachable")

    def run_state(self) -> None:
        if self.template is None:
            raise RuntimeError("no single-row INSERT among the raw events to clone")
        rows, per_partition, per_event = (
            self.args.state_rows,
            self.args.rows_per_partition,
            self.args.rows_per_event,
        )
        say(f"state: producing {rows:,} new-row INSERTs ({per_partition} rows per partition, {per_event} per "
            "raw event) to bench.state")  # fmt: skip
        started = time.monotonic()
        events = synthetic_events(self.template, rows, per_partition, per_event, seed=11)
        count = asyncio.run(_produce(self.bootstrap, "bench.state", events, PARTITIONS))
        self.input["state_produce_s"] = time.monotonic() - started
        step = 500_000 if rows >= 2_000_000 else max(1, rows // 5)
        checkpoints = [*range(step, rows, step), rows]
        self.run("state", [self.worker("ws", "bench-state", "bench.state")], "bench.state", "bench-state",
                 checkpoints=[math.ceil(c / per_event) for c in checkpoints])  # fmt: skip
        self.input.update(state_checkpoints=checkpoints, state_events=count)

    def go(self) -> None:
        phases = self.args.phases
        self.up()
        self.publish_raw()
        # the workers need only Kafka: Cassandra's flushes and compactions after the writes would
        # otherwise take CPU from the runs being timed
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        if self.node.stop():
            say("stopped Cassandra (the input is on Kafka)")
        if "cold" in phases:
            self.run_cold()
        if "one" in phases:
            self.run_one()
        if "two" in phases:
            self.run_two()
        if "profile" in phases or self.args.profile:
            self.run_profile()
        if self.args.compare_tree is not None:
            self.run_ab()
        if "state" in phases and self.args.state_rows > 0:
            self.run_state()


# -- the report --------------------------------------------------------------------------------------


def uptime() -> str:
    """`uptime`'s line (the machine's load, recorded with the report), or the load averages alone."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def code_version(tree: Path = REPO) -> str:
    """The commit measured in checkout ``tree``, and whether the worker's code had uncommitted changes."""
    packages = ["app", "state", "schemas", "cdc", "cassandra_model", "runtime"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *packages], cwd=tree,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {head}" + (" with uncommitted changes in the worker's packages" if dirty else "")


def mem_total_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            return int(line.split()[1]) / 1e6
    return math.nan


def state_curve(bench: Bench) -> list[tuple[int, float]]:
    """(rows in state, VmRSS MB) of the state run at each checkpoint."""
    state = bench.runs.get("state")
    if state is None:
        return []
    per_event, rows = bench.args.rows_per_event, bench.args.state_rows
    curve = []
    for point in bench.input["state_checkpoints"]:
        at = next((s for s in state.rss["ws"] if s[1] * per_event >= point), None)
        if at is not None:
            curve.append((min(rows, at[1] * per_event), at[2] / 1000))
    return curve


def extrapolate(curve: list[tuple[int, float]], rows: int) -> tuple[float, float]:
    """(MB per million rows, RSS MB at `rows`): a least-squares line through the last two thirds of the curve."""
    points = [p for p in curve if p[0] >= curve[-1][0] / 3] if curve else []
    if len(points) < 2:
        return math.nan, math.nan
    mean_x = statistics.fmean(p[0] for p in points)
    mean_y = statistics.fmean(p[1] for p in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return slope * 1e6, curve[-1][1] + slope * (rows - curve[-1][0])


def targets(bench: Bench) -> list[str]:
    """The acceptance targets and what this run measured against them."""
    cold, one, two, state = (bench.runs.get(n) for n in ("cold", "one", "two", "state"))
    lines = ["## Against the targets", "", "| target | measured | holds |", "|---|---|---|"]
    if one is not None:
        dedicated = 1e6 / one.cpu_us_per_event("w1")
        lines.append(
            f"| raw events/s per worker at {bench.args.copies} copies per change >= {EPS_TARGET:,} | "
            f"{one.rate:,.0f}/s (one worker, first record to lag 0; {one.middle_rate():,.0f}/s from 10% to "
            f"90%); {one.cpu_us_per_event('w1'):.0f} CPU-µs per raw event, i.e. at most {dedicated:,.0f}/s "
            f"on a core of its own"
            + (
                ""
                if cold is None
                else f". The `cold` run before it, the broker's first pass over the input: {cold.rate:,.0f}/s"
            )
            + f" | {'**yes**' if one.rate >= EPS_TARGET else '**no**'} |"
        )
    if one is not None and two is not None:
        lines.append(
            f"| scaling with two workers | {two.rate:,.0f}/s together ({two.rate / one.rate:.2f}x one worker; "
            + ", ".join(f"{w} {two.events_in[w] / sum(two.events_in.values()):.0%}" for w in two.workers)
            + f") on {os.cpu_count()} cores shared with Kafka | "
            f"{'**yes**' if two.rate > 1.1 * one.rate else '**no**'} (see below) |"
        )
    medians = ab_medians(bench)
    if "one" in medians:
        m, (rate, cpu, _) = medians["one"], EARLIER_FIGURE
        lines.append(
            f"| raw events/s per worker at {bench.args.copies} copies per change >= {EPS_TARGET:,} "
            f"(about {1e6 / EPS_TARGET:.0f} CPU-µs per raw event), alternating runs | this checkout "
            f"{m['this rate']:,.0f}/s at {m['this cpu']:.1f} CPU-µs per raw event, the base "
            f"{m['base rate']:,.0f}/s at {m['base cpu']:.1f} (median of {bench.args.ab_rounds} rounds; this / base "
            f"{m['ratio']:.3f}, CPU per event {m['this cpu'] / m['base cpu']:.2f}x). The earlier report: "
            f"{rate:,}/s at {cpu} CPU-µs | {'**yes**' if m['this rate'] >= EPS_TARGET else '**no**'} |"
        )
    if "one" in medians and "two" in medians:
        one_m, two_m = medians["one"], medians["two"]
        lines.append(
            f"| scaling with two workers, alternating runs | this checkout {two_m['this rate']:,.0f}/s together "
            f"({two_m['this rate'] / one_m['this rate']:.2f}x one worker), the base "
            f"{two_m['base rate']:,.0f}/s ({two_m['base rate'] / one_m['base rate']:.2f}x); the earlier "
            f"report {EARLIER_FIGURE[2]:.2f}x | see the CPU tables below |"
        )
    curve = state_curve(bench)
    if state is not None and curve:
        rows, rss = curve[-1]
        peak = state.peak_rss_mb("ws")
        if rows >= STATE_TARGET_ROWS:
            lines.append(
                f"| RSS at {STATE_TARGET_ROWS:,} rows of state <= {RSS_TARGET_MB:.0f} MB | measured {rss:.0f} MB "
                f"(peak {peak:.0f} MB) | {'**yes**' if peak <= RSS_TARGET_MB else '**no**'} |"
            )
        else:
            slope, at_target = extrapolate(curve, STATE_TARGET_ROWS)
            lines.append(
                f"| RSS at {STATE_TARGET_ROWS:,} rows of state <= {RSS_TARGET_MB:.0f} MB | measured {rss:.0f} MB "
                f"at {rows:,} rows (peak {peak:.0f} MB); extrapolated {at_target:.0f} MB at "
                f"{STATE_TARGET_ROWS:,} ({slope:+.1f} MB per million rows, linear) | "
                f"{'**yes** (extrapolated)' if at_target <= RSS_TARGET_MB else '**no** (extrapolated)'} |"
            )
    return [*lines, ""]


def timeline_table(run: RunResult) -> list[str]:
    """The run in windows: how fast, and who had the CPU (other processes starve the worker)."""
    rows = run.windows()
    if not rows:
        return []
    return [
        f"Run `{run.name}` over time (CPU % of one core; `others` is everything else on the machine, this script included):",
        "",
        "| from s | events/s | workers CPU % | Kafka CPU % | others CPU % |",
        "|---:|---:|---:|---:|---:|",
        *(f"| {t:.0f} | {rate:,.0f} | {w:.0f} | {k:.0f} | {o:.0f} |" for t, rate, w, k, o in rows),
        "",
    ]


def workers_cpu_us_per_event(result: RunResult) -> float:
    """CPU time all of a run's workers spent per raw event they took in together."""
    events = sum(result.events_in.values())
    cpu = sum(result.cpu.get(w, 0.0) for w in result.workers)
    return cpu / 100 * result.seconds / events * 1e6 if events else math.nan


def workers_cpu(result: RunResult) -> float:
    """The CPU of a run's workers together, % of one core."""
    return sum(result.cpu.get(w, 0.0) for w in result.workers)


def ab_rounds(bench: Bench) -> dict[tuple[str, int], dict[str, RunResult]]:
    """The `--compare-tree` runs by (one or two workers, round), then base or this."""
    rounds: dict[tuple[str, int], dict[str, RunResult]] = {}
    for index, tag, kind, result in bench.ab:
        rounds.setdefault((kind, index), {})[tag] = result
    return rounds


def ab_medians(bench: Bench) -> dict[str, dict[str, float]]:
    """Per number of workers ("one", "two"): the medians over the rounds of base's and this checkout's
    rate and CPU-µs per raw event, and of the ratio this / base."""
    medians: dict[str, dict[str, float]] = {}
    for kind in ("one", "two"):
        figures: dict[str, list[float]] = defaultdict(list)
        for (k, _), pair in sorted(ab_rounds(bench).items()):
            base, this = pair.get("base"), pair.get("this")
            if k != kind or base is None or this is None:
                continue
            figures["ratio"].append(this.rate / base.rate)
            for tag, r in (("base", base), ("this", this)):
                figures[f"{tag} rate"].append(r.rate)
                figures[f"{tag} cpu"].append(workers_cpu_us_per_event(r))
        if figures:
            medians[kind] = {name: statistics.median(v) for name, v in figures.items()}
    return medians


def ab_table(bench: Bench) -> list[str]:
    """The `--compare-tree` runs: each round's base and this checkout's rates, their ratio and the CPU
    each spent per raw event, for one worker and for two."""
    rounds = ab_rounds(bench)
    medians = ab_medians(bench)
    lines = [
        "## This checkout against the base (alternating runs)",
        "",
        f"Base: DIR, a checkout of {bench.env.get('base_code', '?')}; this: {bench.env['code']}. "
        "Each round runs the base's workers and this checkout's on the same input (one worker, then two "
        "together), each run with a group of its own, the order of base and this alternating per round. "
        "`CPU µs` is the workers' CPU per raw event (summed over both workers for `two`); `Kafka %` and "
        "`other %` are the broker's and every other process's CPU during the run, % of one core.",
        "",
    ]
    for kind in ("one", "two"):
        lines += [
            f"### {'One worker' if kind == 'one' else 'Two workers together'}",
            "",
            "| round | base events/s | this events/s | this / base | base CPU µs | this CPU µs | "
            "base workers % | this workers % | base Kafka % | this Kafka % | base other % | this other % |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for (k, index), pair in sorted(rounds.items()):
            base, this = pair.get("base"), pair.get("this")
            if k != kind or base is None or this is None:
                continue
            lines.append(
                f"| {index} | {base.rate:,.0f} | {this.rate:,.0f} | {this.rate / base.rate:.3f} | "
                f"{workers_cpu_us_per_event(base):.1f} | {workers_cpu_us_per_event(this):.1f} | "
                f"{workers_cpu(base):.0f} | {workers_cpu(this):.0f} | "
                f"{base.cpu.get('Kafka', 0):.0f} | {this.cpu.get('Kafka', 0):.0f} | "
                f"{base.cpu.get('other processes', 0):.0f} | {this.cpu.get('other processes', 0):.0f} |"
            )
        if kind in medians:
            m = medians[kind]
            lines += [
                "",
                f"Medians: base {m['base rate']:,.0f}/s at {m['base cpu']:.1f} CPU-µs per raw event, this "
                f"{m['this rate']:,.0f}/s at {m['this cpu']:.1f}; ratio this / base {m['ratio']:.3f}.",
                "",
            ]
    if "one" in medians and "two" in medians:
        lines += [
            "Scaling to two workers (median rates): base "
            f"{medians['two']['base rate'] / medians['one']['base rate']:.2f}x, this "
            f"{medians['two']['this rate'] / medians['one']['this rate']:.2f}x.",
            "",
        ]
    retries = bench.env.get("ab_retries", [])
    if retries:
        lines += [
            "Runs repeated with a new group because a worker stopped: "
            + "; ".join(f"`{r}`" for r in retries)
            + " (the log line of each worker's exit is in the benchmark's output).",
            "",
        ]
    return [*lines, *ab_reading(bench)]


def ab_reading(bench: Bench) -> list[str]:
    """What the alternating runs say, in numbers: CPU per event against the target, what the machine's
    load did to the rates, and why two workers scale as they do (from the CPU of each process)."""
    medians = ab_medians(bench)
    if "one" not in medians:
        return []
    runs = {(kind, tag): [r for i, t, k, r in bench.ab if t == tag and k == kind] for kind in ("one", "two")
            for tag in ("base", "this")}  # fmt: skip

    def median_of(kind: str, tag: str, figure: Any) -> float:
        return statistics.median(figure(r) for r in runs[(kind, tag)])

    one = medians["one"]
    rate, cpu, scaling = EARLIER_FIGURE
    target_cpu = 1e6 / EPS_TARGET
    lines = [
        "## What the numbers say",
        "",
        f"- CPU per raw event (one worker): this checkout {one['this cpu']:.1f} µs against the base's "
        f"{one['base cpu']:.1f} µs in the same run ({one['this cpu'] / one['base cpu']:.2f}x); a worker on a "
        f"core of its own would then take about {1e6 / one['this cpu']:,.0f} raw events/s (base "
        f"{1e6 / one['base cpu']:,.0f}). The target, {EPS_TARGET:,}/s, needs about {target_cpu:.0f} µs: "
        + (
            "met."
            if one["this cpu"] <= target_cpu
            else f"not met ({one['this cpu'] / target_cpu:.2f}x too much)."
        )
        + f" The earlier report measured {rate:,}/s at {cpu} µs on a quiet machine.",
        f"- The machine: other processes used a median {median_of('one', 'this', lambda r: r.cpu['other processes']):.0f}% "
        f"of the 200% during this checkout's one-worker runs, the worker "
        f"{median_of('one', 'this', workers_cpu):.0f}%: the events/s above are what the worker's share of "
        "the cores allowed, not its speed; CPU per event (inflated too when the cores are contended: caches "
        "and hyper-threads are shared) and the ratio in one run are the figures to compare.",
    ]
    if "two" in medians:
        two = medians["two"]
        lines.append(
            f"- Two workers: {two['this rate']:,.0f}/s together, {two['this rate'] / one['this rate']:.2f}x one "
            f"worker (base {two['base rate'] / one['base rate']:.2f}x; the earlier report {scaling:.2f}x). They "
            f"used {median_of('two', 'this', workers_cpu):.0f}% of a core together against "
            f"{median_of('one', 'this', workers_cpu):.0f}% for one, Kafka "
            f"{median_of('two', 'this', lambda r: r.cpu['Kafka']):.0f}% against "
            f"{median_of('one', 'this', lambda r: r.cpu['Kafka']):.0f}%, other processes "
            f"{median_of('two', 'this', lambda r: r.cpu['other processes']):.0f}%; their CPU per raw event "
            f"({two['this cpu']:.1f} µs against {one['this cpu']:.1f}) says what a second worker costs: the "
            "rate grows with the CPU the workers get, so on two cores shared with Kafka (and here with "
            "other processes) two workers scale by the CPU left to them, not by their number."
        )
    return [*lines, ""]


def report(bench: Bench, command: str) -> str:
    args, runs, inp = bench.args, bench.runs, bench.input
    lines = [
        "# Worker: raw events/s at three copies per change, two workers, CPU and RSS",
        "",
        f"Command: `.venv/bin/python {command}`",
        "",
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), {mem_total_gb():.0f} GB RAM, measured "
        f"{time.strftime('%Y-%m-%d')}. Kafka, the worker(s) and this script share those cores (Cassandra and "
        "the agent are stopped once the input is written). 1-minute load average before the services "
        f"started: {bench.env['load_before'][0]:.2f}; the CPU tables below show what other processes on "
        "the machine used during each run. `uptime` before: "
        f"`{bench.env.get('uptime_before', '?')}`; after: `{bench.env.get('uptime_after', '?')}`.",
        "",
        f"Versions: Python {sys.version.split()[0]}, Cassandra {bench.env.get('cassandra', '?')} (one node, "
        f"CDC on), Kafka {bench.settings.kafka_version} (one KRaft broker), faust-streaming "
        f"{version('faust-streaming')}, aiokafka {version('aiokafka')}, rocksdict {version('rocksdict')}, "
        f"cavro {version('cavro')}. Code: {bench.env['code']}. Workers: `python -m cdc worker`, "
        f"settings ({worker_defaults(bench.args.batch_max_events)}).",
        "",
        *targets(bench),
        "## Input",
        "",
        f"{inp['inserts'] + inp['updates']:,} writes to `bench.readings` (10 columns: uuid, timestamp, text, "
        "double, int, bigint, boolean, text, decimal, text; 1000 partition keys): "
        f"{inp['inserts']:,} INSERTs of new rows and {inp['updates']:,} UPDATEs of 3 columns of a random "
        f"earlier row. A real agent published them as {inp['events']:,} raw events ({inp['raw_mb']:.1f} MB "
        f"of Avro); each was then written {args.copies} times, shuffled within its partition, to the topic "
        f"the workers read ({PARTITIONS} partitions, {inp['records']:,} records): what {args.copies} "
        "replicas with different arrival orders look like. A worker drops the copies by digest.",
        "",
    ]
    throughput = [runs[n] for n in ("cold", "one", "two") if n in runs]
    if throughput:
        lines += [
            "## Throughput",
            "",
            "Timed from the first consumed record (/stats `total.in` polled every 0.1 s) until the consumer "
            "group's committed lag was 0 (checked with an admin client). `10-90%` is the rate between the "
            "samples at 10% and 90% of the input, without start-up and tail.",
            "",
            "| run | worker | raw events in | share | seconds | events/s | events/s 10-90% | CPU % | "
            "CPU µs per event | peak RSS MB |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in throughput:
            total_in = sum(r.events_in.values())
            for w in r.workers:
                lines.append(
                    f"| {r.name} | {w} | {r.events_in[w]:,} | {r.events_in[w] / total_in:.0%} | "
                    f"{r.seconds:.1f} | {r.events_in[w] / r.seconds:,.0f} | - | {r.cpu[w]:.0f} | "
                    f"{r.cpu_us_per_event(w):.0f} | {r.peak_rss_mb(w):.0f} |"
                )
            if len(r.workers) > 1:
                lines.append(
                    f"| {r.name} | **all** | {total_in:,} | 100% | {r.seconds:.1f} | {r.rate:,.0f} | "
                    f"{r.middle_rate():,.0f} | {sum(r.cpu[w] for w in r.workers):.0f} | - | - |"
                )
            else:
                lines[-1] = lines[-1].replace("| - |", f"| {r.middle_rate():,.0f} |", 1)
        lines += [
            "",
            "CPU of each process over each run, % of one core (the machine has "
            f"{(os.cpu_count() or 1) * 100}%; `other` is every other process on the machine):",
            "",
            "| run | "
            + " | ".join(f"{k}" for k in ("workers", "Kafka", "benchmark", "other processes"))
            + " |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in throughput:
            lines.append(
                f"| {r.name} | {sum(r.cpu[w] for w in r.workers):.0f} | {r.cpu['Kafka']:.0f} | "
                f"{r.cpu['benchmark']:.0f} | {r.cpu['other processes']:.0f} |"
            )
        lines += ["", "What each worker did with the raw events (its /stats at the end):", ""]
        lines += ["| run | worker | in | duplicates | late | no-ops | applied | change events | batches | "
                  "mean batch ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in throughput:
            for w in r.workers:
                t = r.stats[w].get("total", {})
                m = r.metrics[w]
                batches = m.get("cdc_worker_batch_seconds_count", 0)
                mean_ms = 1000 * m.get("cdc_worker_batch_seconds_sum", 0) / batches if batches else math.nan
                lines.append(
                    f"| {r.name} | {w} | {t.get('in', 0):,} | {t.get('duplicates', 0):,} | {t.get('late', 0):,} "
                    f"| {t.get('noops', 0):,} | {t.get('applied', 0):,} | {t.get('emitted', 0):,} | "
                    f"{batches:,.0f} | {mean_ms:.0f} |"
                )
        lines.append("")
        for r in throughput:
            lines += timeline_table(r)
    if bench.ab:
        lines += ab_table(bench)
    state = runs.get("state")
    if state is not None:
        lines += [
            "## Memory as the state grows",
            "",
            f"{args.state_rows:,} INSERTs of new rows ({args.rows_per_partition} rows per partition key, "
            f"{args.rows_per_event} per raw event), each a copy of a real raw event of `bench.readings` with its own key, clustering, write time, digest "
            "and values, one copy each (copies add no state: a duplicate is dropped by its digest), produced "
            f"to a topic of {PARTITIONS} partitions in {inp['state_produce_s']:.0f} s before the worker "
            f"started; one worker merged them in {state.seconds:.0f} s ({state.rate:,.0f} events/s, CPU "
            f"{state.cpu['ws']:.0f}%). Its VmRSS when the state held:",
            "",
            "| rows in state | VmRSS MB |",
            "|---:|---:|",
        ]
        lines += [f"| {rows:,} | {rss:.0f} |" for rows, rss in state_curve(bench)]
        lines += [
            "",
            f"Peak VmRSS {state.peak_rss_mb('ws'):.0f} MB (VmHWM at stop {state.hwm_mb['ws']:.0f} MB); "
            f"RocksDB directories {state.state_mb['ws']:.0f} MB on disk.",
            "",
            *timeline_table(state),
        ]
    if bench.profile:
        prof = bench.profile
        lines += [
            "## Profile",
            "",
            f"One worker under cProfile (`python -m cProfile -o FILE -m cdc worker --config ...`, stopped "
            f"with SIGINT) for {prof['seconds']:.0f} s of the input above: {prof['events']:,} raw events, "
            f"{prof['rate']:,.0f} events/s under the profiler. cProfile sees the event-loop thread only "
            "(RocksDB's own threads are not in it); C code (cavro, rocksdict, json) counts as its own "
            "entries or as its Python caller's time. Top functions by own time:",
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
    if bench.spy:
        spy = bench.spy
        lines += [
            "## Sampled profile of the `one` worker (py-spy)",
            "",
            f"py-spy (`record -r 100 -F --nonblocking`, attached to the worker of the `one` run from its first "
            f"record to the end): {spy['samples']:,} samples of its Python threads while they ran (waits in "
            "epoll are not sampled, so shares are of the worker's CPU time, with little profiler overhead). "
            "Own time (the sampled frame itself, C calls included):",
            "",
            "```",
            spy["self"],
            "```",
            "",
            "Inclusive (the frame anywhere on the stack; the event loop's own trunk left out):",
            "",
            "```",
            spy["inclusive"],
            "```",
            "",
            "Where the worker's CPU goes (a sample goes to the first of these parts with a frame on its stack, "
            "in the order of `_OWN_BUCKETS` then `_LIBRARY_BUCKETS` in the script: the worker's own code "
            "first, so that a send made by the batch loop counts as the transaction's):",
            "",
            "| part | share of worker CPU | µs per raw event |",
            "|---|---:|---:|",
            *(
                f"| {name} | {share:.0%} | {share * runs['one'].cpu_us_per_event('w1'):.0f} |"
                for name, share in spy["buckets"]
            ),
            "",
        ]
    problems = [p for r in runs.values() for p in r.problems]
    if problems:
        lines += ["Worker log warnings and errors:", "", "```", *problems[:15], "```", ""]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="writes to Cassandra (default 100000)")
    parser.add_argument("--update-share", type=float, default=0.3, help="share of UPDATEs (default 0.3)")
    parser.add_argument("--copies", type=int, default=3, help="copies of every raw event (default 3)")
    parser.add_argument(
        "--phases",
        nargs="+",
        default=["cold", "one", "two", "state"],
        choices=["cold", "one", "two", "profile", "state", "none"],
        help="runs after the input is ready (default: cold one two state; none: only --compare-tree's)",
    )
    parser.add_argument("--profile", action="store_true", help="add the profiled run")
    parser.add_argument("--profile-seconds", type=float, default=60, help="longest profiled run (default 60)")
    parser.add_argument(
        "--py-spy", type=Path, metavar="EXE", help="also sample the `one` worker with this py-spy executable"
    )
    parser.add_argument("--keep-profile", type=Path, metavar="FILE", help="copy the cProfile stats here")
    parser.add_argument(
        "--keep-spy",
        type=Path,
        metavar="FILE",
        help="copy py-spy's collapsed stacks of the `one` worker here",
    )
    parser.add_argument("--profile-top", type=int, default=15, help="functions listed per order (default 15)")
    parser.add_argument(
        "--state-rows",
        type=int,
        default=1_000_000,
        help="rows of the state run (default 1000000; 0 skips it)",
    )
    parser.add_argument("--rows-per-partition", type=int, default=100, help="state run (default 100)")
    parser.add_argument(
        "--rows-per-event", type=int, default=1, help="state run: rows per raw event (default 1)"
    )
    parser.add_argument(
        "--batch-max-events", type=int, help="workers' worker.batch_max_events (default: the config default)"
    )
    parser.add_argument(
        "--compare-tree",
        type=Path,
        metavar="DIR",
        help="another checkout of this repository: after the phases, run its worker and this one's "
        "alternately on the same input (e.g. `git worktree add DIR <commit>`)",
    )
    parser.add_argument("--ab-rounds", type=int, default=3, help="runs of each worker (default 3)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.rows_per_partition % args.rows_per_event:
        raise SystemExit("--rows-per-partition must be a multiple of --rows-per-event")
    # the other checkout is DIR in the report (its path says nothing of the code; the report names its commit)
    argv = [
        "DIR" if args.compare_tree is not None and a == str(args.compare_tree) else a for a in sys.argv[1:]
    ]
    command = " ".join(["bench/worker_pipeline.py", *argv])
    with tempfile.TemporaryDirectory(prefix="cdc-bench-worker-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            bench.go()
        finally:
            bench.down()
        text = report(bench, command)
    print(text)
    if args.out:
        args.out.write_text(text)
        say(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
