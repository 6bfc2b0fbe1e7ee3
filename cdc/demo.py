"""`cdc demo`: the whole pipeline on real local services, as a newcomer first sees it.

Starts Kafka and Cassandra (when they are not running), one node agent per Cassandra node and one worker
as child processes, creates `demo.readings WITH cdc = true` and writes a small workload in rounds:
inserts, updates, a collection change, a delete and a row with a short TTL. Meanwhile it tails the clean
topic with a read_committed consumer, as a downstream service would, and prints every change event as it
arrives (before -> after, write-to-event latency), and after each round one row as the worker's REST
endpoint serves it.

Every run starts from a clean slate that earlier runs cannot disturb: the demo's topics are recreated,
the worker starts from an empty state folder with a consumer group of its own, and demo processes a
killed run left behind are stopped. The agents keep their offsets: those describe the nodes' `cdc_raw`
folders, not the run, and keep an agent from publishing what an earlier run already captured.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import random
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session

from infra.cassandra import CassandraNode
from infra.errors import PortInUseError, ServiceStartError
from infra.process import ManagedProcess, port_is_free
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.kafka_topics import TopicSpec, ensure_topics
from runtime.service_process import ServiceProcess
from schemas.change_codec import JsonChangeCodec

KEYSPACE = "demo"
TABLE = "readings"
COLUMNS = {"sensor": "text", "at": "timestamp", "value": "double", "status": "text", "tags": "set<text>"}
KEY_COLUMNS = ("sensor", "at")
RAW_TOPIC = "demo.raw"
SCHEMA_TOPIC = "demo.schemas"
CLEAN_PREFIX = "demo"
CLEAN_TOPIC = f"{CLEAN_PREFIX}.{KEYSPACE}.{TABLE}"
APP_PREFIX = "cdc-demo-"
"""Each run's worker app id (consumer group, changelog topics) starts with this; older runs' topics go."""
PARTITIONS = 3
AGENT_PORT = 9465
"""Health and metrics of the agent of node N on AGENT_PORT + N - 1 (an operator's agent keeps 9464)."""
WORKER_PORT = 6067
TTL_S = 5
SHOWN_CREATES_PER_ROUND = 8
"""Creates beyond this many per round are counted, not printed, so `--rows 500` stays readable."""
ROUND_TIMEOUT_S = 20.0
DEFAULT_ROWS = 6
DEFAULT_ROUNDS = 4


class DemoError(ServiceStartError):
    """The demo cannot run or its pipeline did not come up; the message says where to look."""


# -- what the workload wrote and what came back ---------------------------------------------------------


@dataclass(slots=True)
class Row:
    sensor: str
    at: int
    """Epoch milliseconds, as the clean topic and the REST key spell a timestamp."""
    value: float
    tags: set[str]
    deleted: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.sensor, self.at)


@dataclass(slots=True)
class Write:
    """One CQL write, known by the client timestamp it carried (USING TIMESTAMP): the change event's
    `source.write_time_us` names it exactly."""

    op: str
    key: tuple[str, int]
    round_no: int
    with_ttl: bool = False
    acked: float | None = None
    """Wall-clock time Cassandra acknowledged the write; None while in flight."""


@dataclass(slots=True)
class Tally:
    pending: dict[int, Write] = field(default_factory=dict)
    """Writes whose change event has not arrived yet, by write timestamp (µs)."""
    pending_expiries: set[tuple[str, int]] = field(default_factory=set)
    ttl_created: set[tuple[str, int]] = field(default_factory=set)
    ops: Counter[str] = field(default_factory=Counter)
    expired: int = 0
    unexpected: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    shown: Counter[int] = field(default_factory=Counter)
    hidden: Counter[int] = field(default_factory=Counter)

    def waiting(self, round_no: int | None = None) -> int:
        """Events still expected: of one round (its TTL row aside, which may expire first), or all."""
        if round_no is None:
            return len(self.pending) + len(self.pending_expiries)
        return sum(1 for w in self.pending.values() if w.round_no == round_no and not w.with_ttl)

    def percentile(self, q: float) -> float | None:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


# -- output ----------------------------------------------------------------------------------------------


class Display:
    """Event lines scroll; on a terminal one progress line stays below them and is redrawn in place."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.tty = out.isatty()
        self.status = ""

    def line(self, text: str = "") -> None:
        if self.tty and self.status:
            self.out.write("\r\x1b[K")
        self.out.write(text + "\n")
        if self.tty and self.status:
            self.out.write(self.status)
        self.out.flush()

    def progress(self, text: str) -> None:
        self.status = text
        if self.tty:
            self.out.write("\r\x1b[K" + text)
            self.out.flush()

    def clear(self) -> None:
        if self.tty and self.status:
            self.out.write("\r\x1b[K")
            self.out.flush()
        self.status = ""


def _clock(epoch_ms: float) -> str:
    return dt.datetime.fromtimestamp(epoch_ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):  # the set column
        return "{" + ", ".join(_show(v) for v in value) + "}"
    return str(value)


def _in_table_order(image: dict[str, Any]) -> list[str]:
    return [c for c in COLUMNS if c in image and c not in KEY_COLUMNS] + [
        c for c in image if c not in COLUMNS
    ]


def _columns(image: dict[str, Any]) -> str:
    return " ".join(f"{c}={_show(image[c])}" for c in _in_table_order(image) if image[c] is not None)


def describe_event(key: dict[str, Any], value: dict[str, Any]) -> str:
    """`op  key  change`: a create's after image, an update's changed columns, a delete's before image."""
    op, before, after = value["op"], value.get("before") or {}, value.get("after") or {}
    at = key.get("at")
    where = f"{key.get('sensor')} @ {_clock(at) if isinstance(at, int) else at}"
    if op == "u":
        change = ", ".join(
            f"{c}: {_show(before.get(c))} -> {_show(after.get(c))}"
            for c in _in_table_order(after)
            if before.get(c) != after.get(c)
        )
    elif op == "d":
        reason = "expired (TTL)" if (value.get("source") or {}).get("expired") else "deleted"
        change = f"{reason}, before: {_columns(before)}"
    else:
        change = _columns(after)
    return f"{op}  {where:<25} {change}"


def describe_rest(document: Any) -> list[str]:
    """A row's REST document in two lines: its values, then each cell's write time and TTL."""
    if not isinstance(document, dict):
        return [f"no answer: {document!r}"]
    if document.get("error"):
        return [f"error: {document['error']}"]
    rows = document.get("rows") or []
    if not rows:
        return [f"no live row (served by {document.get('served_by')})"]
    values, cells = rows[0]["values"], rows[0]["cells"]
    parts = []
    for column in _in_table_order(cells):
        infos = cells[column] if isinstance(cells[column], list) else [cells[column]]
        if not infos:
            continue
        count = f"[{len(infos)}]" if isinstance(cells[column], list) else ""
        text = f"{column}{count} writetime {_clock(max(i['writetime'] for i in infos) / 1000)}"
        if infos[0].get("ttl"):
            text += f" ttl {infos[0]['ttl']} s ({infos[0].get('remaining_ttl')} s left)"
        parts.append(text)
    return [
        f"values: {_columns(values)}   (served by {document.get('served_by')})",
        "cells:  " + "; ".join(parts),
    ]


def rest_path(row_key: tuple[str, int]) -> tuple[str, str]:
    """The row's REST path as shown (readable JSON) and as requested (URL-encoded)."""
    key = json.dumps({"sensor": row_key[0], "at": row_key[1]}, separators=(",", ":"))
    return f"/rows/{KEYSPACE}/{TABLE}?key={key}", f"/rows/{KEYSPACE}/{TABLE}?key={quote(key)}"


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width if total <= 0 else min(width, done * width // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


# -- services --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class DemoRun:
    """Names, folders and child processes of one demo run."""

    settings: InfraSettings
    stack: LocalStack
    nodes: list[CassandraNode]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    agents: list[ServiceProcess] = field(default_factory=list)
    worker: ServiceProcess | None = None

    @property
    def home(self) -> Path:
        return self.settings.home / "demo"

    @property
    def bootstrap(self) -> str:
        return self.stack.kafka.spec.bootstrap

    @property
    def processes(self) -> list[ServiceProcess]:
        return [*self.agents, *([self.worker] if self.worker else [])]

    def agent_port(self, node: CassandraNode) -> int:
        return AGENT_PORT + int(node.spec.name.removeprefix("node")) - 1

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
        for what, port in [*wanted, ("worker REST", WORKER_PORT)]:
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
                ServiceProcess("agent", f"agent-{spec.name}", agent, self.home, self.agent_port(node))
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
                "web_port": WORKER_PORT,
                "expiry_interval_ms": 500,
                "transaction_timeout_ms": 10_000,
            },
        }
        self.worker = ServiceProcess("worker", "worker", worker, self.home, WORKER_PORT)
        began = time.monotonic()
        for process in self.processes:
            process.start()
            assert process.process is not None
            (self.home / f"{process.name}.pid").write_text(f"{process.process.pid}\n")
        ports = ", ".join(f"{a.name} (:{a.port})" for a in self.agents)
        print(f"starting {ports} and the worker (REST :{WORKER_PORT}) ...")
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


# -- Cassandra and Kafka ---------------------------------------------------------------------------------


def connect_cluster(nodes: list[CassandraNode]) -> Cluster:
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    return Cluster(
        [n.spec.address for n in nodes],
        port=nodes[0].spec.cql_port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(request_timeout=30.0)},
        connect_timeout=10,
    )


def prepare_table(session: Session, cluster: Cluster) -> str:
    """Keyspace (RF 1) and table WITH cdc = true; a table of another shape (an older demo's) is replaced."""
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} "
        "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    where = "WHERE keyspace_name = %s AND table_name = %s"
    found = {
        r.column_name: r.type
        for r in session.execute(
            f"SELECT column_name, type FROM system_schema.columns {where}", (KEYSPACE, TABLE)
        )
    }
    what = "existing"
    if found and found != COLUMNS:
        session.execute(f"DROP TABLE {KEYSPACE}.{TABLE}")
        what, found = "recreated: an older demo's had other columns", {}
    if not found:
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} ({columns}, PRIMARY KEY (sensor, at)) WITH cdc = true"
        )
        what = "created" if what == "existing" else what
    elif not session.execute(f"SELECT cdc FROM system_schema.tables {where}", (KEYSPACE, TABLE)).one().cdc:
        session.execute(f"ALTER TABLE {KEYSPACE}.{TABLE} WITH cdc = true")
    cluster.control_connection.wait_for_schema_agreement()
    return what


async def reset_topics(bootstrap: str) -> None:
    """Delete the demo's topics and earlier runs' worker topics, wait until Kafka has forgotten them, and
    create the demo's topics again: this run's consumer reads this run's events and nothing else."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        await admin.start()
    except KafkaError as exc:
        await admin.close()
        raise DemoError(
            f"Kafka at {bootstrap} does not answer ({exc}); `.venv/bin/cdc infra status` shows it"
        ) from exc
    try:
        fixed = {RAW_TOPIC, SCHEMA_TOPIC, CLEAN_TOPIC}
        doomed = {t for t in await admin.list_topics() if t in fixed or t.startswith(APP_PREFIX)}
        if doomed:
            await admin.delete_topics(sorted(doomed))
        deadline = time.monotonic() + 60
        while doomed & set(await admin.list_topics()):
            if time.monotonic() > deadline:
                raise DemoError(
                    f"Kafka at {bootstrap} did not delete the demo topics {sorted(doomed)} in 60 s"
                )
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    specs = [
        TopicSpec(RAW_TOPIC, PARTITIONS),
        TopicSpec(SCHEMA_TOPIC, 1, configs={"cleanup.policy": "compact"}),
        TopicSpec(CLEAN_TOPIC, PARTITIONS, configs={"cleanup.policy": "compact"}),
    ]
    counts: dict[str, int] = {}
    for _ in range(50):  # Kafka may refuse a just-deleted name for a moment
        counts = await ensure_topics(bootstrap, specs)
        if all(counts.get(s.name) == s.partitions for s in specs):
            return
        await asyncio.sleep(0.2)
    raise DemoError(f"Kafka at {bootstrap} did not create the demo topics (partitions: {counts})")


# -- the workload ----------------------------------------------------------------------------------------


class Workload:
    """Rounds of writes: new readings, then updates, a tag and a delete on the previous round's rows."""

    def __init__(self, session: Session, tally: Tally, rows: int, seed: int = 7) -> None:
        self.session = session
        self.tally = tally
        self.rows = rows
        self.random = random.Random(seed)
        self.previous: list[Row] = []
        self.ttl_row: Row | None = None
        self._last_us = 0
        table = f"{KEYSPACE}.{TABLE}"
        insert = f"INSERT INTO {table} (sensor, at, value, status, tags) VALUES (?, ?, ?, ?, ?)"
        key = "WHERE sensor = ? AND at = ?"
        self.statements = {
            "insert": session.prepare(f"{insert} USING TIMESTAMP ?"),
            "insert_ttl": session.prepare(f"{insert} USING TTL {TTL_S} AND TIMESTAMP ?"),
            "update": session.prepare(f"UPDATE {table} USING TIMESTAMP ? SET value = ?, status = ? {key}"),
            "add_tag": session.prepare(f"UPDATE {table} USING TIMESTAMP ? SET tags = tags + ? {key}"),
            "delete": session.prepare(f"DELETE FROM {table} USING TIMESTAMP ? {key}"),
        }

    def plan(self, round_no: int) -> list[tuple[str, Row]]:
        base_ms = int(time.time() * 1000)
        new = [
            Row(f"sensor-{i % 4 + 1}", base_ms + i, round(self.random.uniform(15.0, 30.0), 1), {"celsius"})
            for i in range(self.rows)
        ]
        steps: list[tuple[str, Row]] = []
        if round_no == 1:  # first, so it expires well before the demo ends
            self.ttl_row = Row("sensor-9", base_ms + self.rows, 99.9, {"probe"})
            steps.append(("insert_ttl", self.ttl_row))
        steps += [("insert", r) for r in new]
        targets = [r for r in (self.previous if round_no > 1 else new) if not r.deleted]
        steps += [("update", r) for r in targets[:2]]
        if targets:
            steps += [("add_tag", targets[0]), ("delete", targets[-1])]
        self.previous = new
        return steps

    def _values(self, step: str, row: Row, round_no: int, ts: int) -> tuple[Any, ...]:
        if step == "insert":
            return (row.sensor, row.at, row.value, "ok", row.tags, ts)
        if step == "insert_ttl":
            return (row.sensor, row.at, row.value, "transient", row.tags, ts)
        if step == "update":
            row.value = round(row.value + 1.5, 1)
            return (ts, row.value, "checked", row.sensor, row.at)
        if step == "add_tag":
            row.tags.add(f"calibrated-{round_no}")
            return (ts, {f"calibrated-{round_no}"}, row.sensor, row.at)
        row.deleted = True
        return (ts, row.sensor, row.at)

    async def write(self, round_no: int, step: str, row: Row) -> None:
        self._last_us = ts = max(int(time.time() * 1_000_000), self._last_us + 1)
        op = {"insert": "c", "insert_ttl": "c", "delete": "d"}.get(step, "u")
        write = Write(op, row.key, round_no, with_ttl=step == "insert_ttl")
        self.tally.pending[ts] = write  # before the write: its event may beat the acknowledgement here
        if write.with_ttl:
            self.tally.pending_expiries.add(row.key)
        values = self._values(step, row, round_no, ts)

        def execute() -> None:
            self.session.execute(self.statements[step], values)
            write.acked = time.time()

        await asyncio.to_thread(execute)


# -- tailing the clean topic -----------------------------------------------------------------------------


class EventTail:
    """A read_committed consumer of the clean topic: each event is matched to its write and printed."""

    def __init__(self, bootstrap: str, tally: Tally, display: Display) -> None:
        self.consumer = AIOKafkaConsumer(
            CLEAN_TOPIC,
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self.codec = JsonChangeCodec()
        self.tally = tally
        self.display = display
        self.print_all = False

    async def run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100)
            arrived = time.time()
            for records in batch.values():
                for record in records:
                    if record.value is not None:  # None: the tombstone that follows a delete
                        key = self.codec.decode_key(record.key)
                        self.on_event(key, self.codec.decode_value(record.value), arrived)

    def on_event(self, key: dict[str, Any], value: dict[str, Any], arrived: float) -> None:
        tally = self.tally
        source = value.get("source") or {}
        row_key = (key.get("sensor"), key.get("at"))
        tally.ops[value["op"]] += 1
        write = tally.pending.pop(source.get("write_time_us") or -1, None)
        round_no, latency = None, ""
        if write is not None:
            round_no = write.round_no
            ms = max(0.0, (arrived - (write.acked or arrived)) * 1000)
            tally.latencies_ms.append(ms)
            latency = f"+{ms:.0f} ms"
            if write.with_ttl:
                tally.ttl_created.add(write.key)
        elif source.get("expired") and row_key in tally.pending_expiries:
            tally.pending_expiries.discard(row_key)
            tally.expired += 1
            latency = f"TTL {TTL_S} s"
        else:
            tally.unexpected += 1
        if value["op"] == "c" and round_no is not None and not self.print_all:
            if tally.shown[round_no] >= SHOWN_CREATES_PER_ROUND:
                tally.hidden[round_no] += 1
                return
            tally.shown[round_no] += 1
        self.display.line(f"  {describe_event(key, value):<88} {latency}".rstrip())


# -- the run ---------------------------------------------------------------------------------------------


class Demo:
    """The workload in rounds, the tail of the clean topic and the REST views, on one event loop: writes
    run in threads, so events print the moment they arrive."""

    def __init__(self, run: DemoRun, session: Session, rows: int, rounds: int) -> None:
        assert run.worker is not None
        self.run = run
        self.worker = run.worker
        self.rounds = rounds
        self.display = Display()
        self.tally = Tally()
        self.tail = EventTail(run.bootstrap, self.tally, self.display)
        self.workload = Workload(session, self.tally, rows)

    def _progress(self, round_no: int, done: int, total: int) -> None:
        p50 = self.tally.percentile(0.5)
        self.display.progress(
            f"round {round_no}/{self.rounds} {_bar(done, total)} writes {done}/{total}"
            f" | events {sum(self.tally.ops.values())} | awaited {self.tally.waiting()}"
            + (f" | p50 {p50:.0f} ms" if p50 is not None else "")
        )

    async def _wait(self, done: Callable[[], bool], timeout_s: float, tick: Callable[[], None]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            tick()
            await asyncio.sleep(0.05)
        self.display.clear()

    async def show_rest(self, row_key: tuple[str, int]) -> None:
        shown, path = rest_path(row_key)
        got: tuple[int, Any] | None = None
        for _ in range(25):  # 503 while the worker restores a partition
            got = await asyncio.to_thread(self.worker.get_json, path, 5.0)
            if got is not None and got[0] != 503:
                break
            await asyncio.sleep(0.2)
        self.display.line(f"  REST GET http://127.0.0.1:{self.worker.port}{shown}")
        for text in describe_rest(got[1] if got else None):
            self.display.line(f"       {text}")

    async def one_round(self, round_no: int) -> None:
        steps = self.workload.plan(round_no)
        kinds = Counter(step for step, _ in steps)
        self.display.line(
            f"round {round_no}/{self.rounds}: {kinds['insert']} inserts"
            + (f" and 1 with TTL {TTL_S} s" if kinds["insert_ttl"] else "")
            + f", {kinds['update']} updates, {kinds['add_tag']} tag added, {kinds['delete']} delete"
        )
        for done, (step, row) in enumerate(steps, 1):
            await self.workload.write(round_no, step, row)
            self._progress(round_no, done, len(steps))
        await self._wait(
            lambda: self.tally.waiting(round_no) == 0,
            ROUND_TIMEOUT_S,
            lambda: self._progress(round_no, len(steps), len(steps)),
        )
        if self.tally.hidden[round_no]:
            self.display.line(f"  ... and {self.tally.hidden[round_no]} more c events of round {round_no}")
        if self.tally.waiting(round_no):
            self.display.line(
                f"  {self.tally.waiting(round_no)} writes of round {round_no} have no event yet"
            )
        ttl_row = self.workload.ttl_row
        if round_no == 1 and ttl_row is not None and ttl_row.key in self.tally.ttl_created:
            await self.show_rest(ttl_row.key)
        elif updated := next((r for s, r in steps if s == "update" and not r.deleted), None):
            await self.show_rest(updated.key)

    def _settled(self) -> bool:
        """Every event arrived; or all but the TTL row's, and it expired before the worker saw it (then
        it never gives an event: a row nobody could read changes nothing)."""
        tally = self.tally
        if tally.waiting() == 0:
            return True
        ttl_writes = [w for w in tally.pending.values() if w.with_ttl]
        if len(ttl_writes) != tally.waiting() - len(tally.pending_expiries) or not ttl_writes:
            return False
        acked = ttl_writes[0].acked
        return acked is not None and time.time() > acked + TTL_S + 2

    async def main(self, keep_running: bool) -> Tally:
        await self.tail.consumer.start()
        tail_task = asyncio.create_task(self.tail.run())
        try:
            began = time.monotonic()
            self.display.line(f"\nchange events on {CLEAN_TOPIC} as they arrive (op, key, change, latency):")
            for round_no in range(1, self.rounds + 1):
                await self.one_round(round_no)
            await self._wait(
                self._settled,
                TTL_S + ROUND_TIMEOUT_S,
                lambda: self.display.progress(
                    f"waiting for the TTL row to expire ... {self.tally.waiting()} events awaited"
                ),
            )
            ttl_row = self.workload.ttl_row
            if ttl_row is not None and ttl_row.key in self.tally.ttl_created:
                self.display.line(f"the TTL row after its {TTL_S} s:")
                await self.show_rest(ttl_row.key)
            got = await asyncio.to_thread(self.worker.get_json, "/stats", 5.0)
            stats = got[1].get("total") if got and isinstance(got[1], dict) else None
            summarize(self.tally, ttl_row, time.monotonic() - began, stats if isinstance(stats, dict) else {})
            where_to_look(self.run, keep_running)
            if keep_running:
                self.tail.print_all = True
                await asyncio.Event().wait()  # until Ctrl-C
            return self.tally
        finally:
            self.display.clear()
            tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tail_task
            await self.tail.consumer.stop()


async def play(run: DemoRun, session: Session, rows: int, rounds: int, keep_running: bool) -> Tally:
    return await Demo(run, session, rows, rounds).main(keep_running)  # aiokafka wants the running loop


def summarize(tally: Tally, ttl_row: Row | None, took_s: float, stats: dict[str, Any]) -> None:
    events = sum(tally.ops.values())
    per_op = ", ".join(f"{op} {tally.ops[op]}" for op in ("c", "u", "d") if tally.ops[op])
    print(f"\nsummary: {events} change events in {took_s:.1f} s ({per_op}; {tally.expired} d by TTL expiry)")
    p50, top = tally.percentile(0.5), max(tally.latencies_ms, default=None)
    if p50 is not None and top is not None:
        print(f"write acknowledged -> event on the clean topic: p50 {p50:.0f} ms, max {top:.0f} ms")
    if stats:
        print(
            f"worker /stats: {stats.get('in')} raw events in, {stats.get('duplicates')} replica copies dropped, "
            f"{stats.get('noops')} no-ops, {stats.get('emitted')} change events emitted"
        )
    late_ttl = (
        ttl_row is not None and ttl_row.key not in tally.ttl_created and ttl_row.key in tally.pending_expiries
    )
    if late_ttl and (stats.get("noops") or 0) >= 1:
        print(
            f"the TTL row gave no events: its write reached the worker after its {TTL_S} s TTL (lag that high)"
        )
        tally.pending = {ts: w for ts, w in tally.pending.items() if not w.with_ttl}
        tally.pending_expiries.clear()
    if tally.waiting() or tally.unexpected:
        print(
            f"{tally.waiting()} writes have no event yet, {tally.unexpected} events match no write of this run"
        )
    else:
        print("every write gave exactly its change event")


def where_to_look(run: DemoRun, keep_running: bool) -> None:
    assert run.worker is not None
    print(f"\nwhere to look{'' if keep_running else ' (agent and worker URLs answer while they run)'}:")
    for agent in run.agents:
        url = f"http://127.0.0.1:{agent.port}"
        print(f"  {agent.name:<12} log {agent.log_path}  health {url}/health  metrics {url}/metrics")
    url = f"http://127.0.0.1:{run.worker.port}"
    print(
        f"  {'worker':<12} log {run.worker.log_path}  health {url}/health  metrics {url}/metrics  {url}/stats"
    )
    print(f'  {"REST":<12} {url}/rows/{KEYSPACE}/{TABLE}?key={{"sensor":"sensor-1","at":<epoch ms>}}')
    print(f"  {'topics':<12} clean {CLEAN_TOPIC}, raw {RAW_TOPIC} on {run.bootstrap}")
    print(f"  {'services':<12} logs in {run.settings.logs}; `.venv/bin/cdc infra status` lists them")
    if keep_running:
        node = run.nodes[0].spec
        print(
            f"\nagent and worker keep running: write to {KEYSPACE}.{TABLE} with any CQL client "
            f"({node.address}:{node.cql_port}) and watch the events here.\n"
            "Ctrl-C stops agent and worker; Kafka and Cassandra keep running (`.venv/bin/cdc infra down` stops them)."
        )


def run_demo(
    settings: InfraSettings,
    *,
    rows: int = DEFAULT_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    keep_running: bool = False,
) -> int:
    """Exit code 0 when every write gave its change event (1 otherwise; 130 on Ctrl-C mid-run)."""
    if rows < 1 or rounds < 1:
        raise ValueError("--rows and --rounds must be at least 1")
    began = time.monotonic()
    logging.getLogger("runtime.kafka_topics").setLevel(logging.WARNING)  # the demo says what it does itself
    stack = LocalStack(settings)
    stack.up(nodes=1)
    run = DemoRun(settings, stack, [n for n in stack.known_nodes() if n.is_running()])
    run.reset_folder()
    cluster = connect_cluster(run.nodes)
    status = 1
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as exc:
            raise DemoError(f"Cassandra does not answer CQL: {exc} (logs in {settings.logs})") from exc
        what = prepare_table(session, cluster)
        print(
            f"table {KEYSPACE}.{TABLE} WITH cdc = true ({what}); keyspace RF 1 over {len(run.nodes)} node(s)"
        )
        asyncio.run(reset_topics(run.bootstrap))
        print(f"topics {RAW_TOPIC}, {SCHEMA_TOPIC}, {CLEAN_TOPIC} recreated; configs and logs in {run.home}")
        print("Ctrl-C stops the demo at any time.")
        try:
            run.start()
            tally = asyncio.run(play(run, session, rows, rounds, keep_running))
            status = 0 if tally.waiting() == 0 and not tally.unexpected else 1
        except KafkaError as exc:
            raise DemoError(
                f"Kafka at {run.bootstrap} failed the demo: {exc!r} (logs in {settings.logs})"
            ) from exc
        except KeyboardInterrupt:
            print("\ninterrupted")
            status = 0 if keep_running else 130
        finally:
            run.stop()
    finally:
        cluster.shutdown()
    print(
        f"agent and worker stopped; the demo took {time.monotonic() - began:.0f} s. Kafka and Cassandra keep "
        "running: `.venv/bin/cdc infra status` shows them, `.venv/bin/cdc infra down` stops them.\n"
        "`.venv/bin/cdc demo --keep-running` keeps agent and worker running to show your own writes."
    )
    return status
