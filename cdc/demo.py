"""`cdc demo`: the main job a newcomer runs first, on real local services.

Brings up Kafka and a Cassandra node with CDC on, starts the node agent, creates a table WITH cdc = true
and writes rows in rounds. After each round it shows the commit-log segment's durable `_cdc.idx` offset
growing (no flush) and the raw events the agent published to Kafka for exactly those rows, with the
write-to-event latency.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import yaml
from aiokafka import AIOKafkaConsumer

from agents.cdc_raw import list_cdc_segments
from infra.cql import connect
from infra.process import ManagedProcess, wait_until_ready
from infra.settings import InfraSettings
from infra.stack import LocalStack
from schemas.raw_event import decode_raw_event

KEYSPACE = "demo"
TABLE = "readings"
RAW_TOPIC = "demo.raw"
METRICS_PORT = 9465


def _offsets(cdc_raw: Path) -> dict[str, int]:
    return {s.path.name: s.index.offset for s in list_cdc_segments(cdc_raw) if s.index is not None}


def _start_agent(settings: InfraSettings, stack: LocalStack) -> ManagedProcess:
    """The node agent as a background process, with its config, offsets and log under CDC_HOME/demo."""
    home = settings.home / "demo"
    home.mkdir(parents=True, exist_ok=True)
    spec = stack.node(1).spec
    config = {
        "cluster": settings.cluster_name,
        "kafka": {
            "bootstrap_servers": stack.kafka.spec.bootstrap,
            "raw_topic": RAW_TOPIC,
            "raw_partitions": 3,
        },
        "cassandra": {"contact_points": [spec.address], "port": spec.cql_port, "keyspaces": [KEYSPACE]},
        "agent": {
            "cdc_raw_directory": str(spec.cdc_raw),
            "state_directory": str(home / "agent-state"),
            "node": spec.name,
            "cdc_total_space": f"{spec.cdc_total_space_mb}MiB",
            "metrics_port": METRICS_PORT,
        },
    }
    config_path = home / "cdc.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    agent = ManagedProcess(
        "agent", home / "agent.pid", settings.logs / "agent-demo.log", f"--config {config_path}"
    )
    if not agent.is_running():
        agent.start([sys.executable, "-m", "cdc", "agent", "--config", str(config_path)])

    def healthy() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/health", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

    wait_until_ready(agent, healthy, timeout_s=60, what="node agent")
    return agent


async def _collect(consumer: AIOKafkaConsumer, wanted: set[str], timeout_s: float) -> dict[str, float]:
    """Arrival time of the raw event of each wanted row (by its note), until all arrived or timeout."""
    arrived: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(arrived) < len(wanted) and time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=200)
        now = time.time()
        for messages in batch.values():
            for message in messages:
                event = decode_raw_event(message.value)
                for row in event["rows"]:
                    for cell in row["cells"]:
                        note = cell["value"].decode(errors="replace") if cell["column"] == "note" else None
                        if note in wanted:
                            arrived.setdefault(note, now)
    return arrived


async def _rounds(settings: InfraSettings, stack: LocalStack, rows: int, rounds: int) -> int:
    spec = stack.node(1).spec
    cluster = connect(spec.address, spec.cql_port)
    consumer = AIOKafkaConsumer(
        RAW_TOPIC,
        bootstrap_servers=stack.kafka.spec.bootstrap,
        auto_offset_reset="latest",
        enable_auto_commit=False,
    )
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} "
            "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} "
            "(sensor text, at timestamp, value double, note text, PRIMARY KEY (sensor, at)) WITH cdc = true"
        )
        cluster.control_connection.wait_for_schema_agreement()
        print(f"table {KEYSPACE}.{TABLE} WITH cdc = true; raw events on Kafka topic {RAW_TOPIC}\n")
        await consumer.start()
        await consumer.getmany(timeout_ms=500)  # join: position at the topic's end before writing
        insert = session.prepare(
            f"INSERT INTO {KEYSPACE}.{TABLE} (sensor, at, value, note) VALUES (?, ?, ?, ?)"
        )
        missing_total = 0
        for round_no in range(1, rounds + 1):
            before = _offsets(spec.cdc_raw)
            acked: dict[str, float] = {}
            started = time.monotonic()
            for i in range(rows):
                note = f"r{round_no}-{uuid.uuid4().hex[:12]}"
                session.execute(insert, (f"sensor-{i % 10}", int(time.time() * 1000) + i, i * 0.5, note))
                acked[note] = time.time()
            took = time.monotonic() - started
            arrived = await _collect(consumer, set(acked), timeout_s=10)
            after = _offsets(spec.cdc_raw)
            print(f"round {round_no}: wrote {rows} rows in {took:.2f} s")
            for name, new in sorted(after.items()):
                old = before.get(name, 0)
                growth = f"+{new - old:,} bytes durable" if new > old else "unchanged"
                print(f"  {name}  _cdc.idx offset {old:>10,} -> {new:>10,}  ({growth})")
            latencies = sorted((arrived[n] - acked[n]) * 1000 for n in arrived)
            missing = len(acked) - len(arrived)
            missing_total += missing
            if latencies:
                p50 = statistics.median(latencies)
                p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                print(
                    f"  raw events on {RAW_TOPIC}: {len(arrived)}/{rows}, write->event p50 {p50:.0f} ms, p99 {p99:.0f} ms"
                )
            if missing:
                print(f"  {missing} rows have no raw event yet")
        return 1 if missing_total else 0
    finally:
        await consumer.stop()
        cluster.shutdown()


def run_demo(settings: InfraSettings, *, rows: int, rounds: int) -> int:
    stack = LocalStack(settings)
    stack.up(nodes=1)
    agent = _start_agent(settings, stack)
    print(f"\nnode agent running (pid {agent.pid()}); metrics http://127.0.0.1:{METRICS_PORT}/metrics")
    print(f"logs: {settings.logs}\ncdc_raw: {stack.node(1).spec.cdc_raw}\n")
    try:
        status = asyncio.run(_rounds(settings, stack, rows, rounds))
    finally:
        agent.stop(timeout_s=30)
        print("\nnode agent stopped")
    print(
        "No flush was issued: the offsets moved with Cassandra's periodic commit-log sync and the agent\n"
        "published each row as it became durable. Services keep running: `.venv/bin/cdc infra status` shows\n"
        "them, `.venv/bin/cdc infra down` stops them."
    )
    return status
