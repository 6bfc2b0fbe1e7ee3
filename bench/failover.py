"""Failover: kill -9 the worker that holds the state, under a steady stream of raw events; how long until
its raw partitions emit again on the other worker, each leg of it, and that nothing is lost or repeated.

Starts a Kafka broker of its own (the project's infra code; CDC_KAFKA_PORT and CDC_KAFKA_CONTROLLER_PORT
move it) in a temporary home; Cassandra is not needed: the raw events are built with testkit and written
to the raw topic by this script. Then:
  seed      a real worker (`python -m cdc worker`, app `fo-seed`) merges --seed-rows INSERTs; every row it
            wrote to its changelog is compared, key and bytes, with what this script's row writer makes of
            the same row (state.store.keys / table_layout for the key, state.store.codec for the value):
            the state below is only written if they are identical
  state     --rows rows (and --odd-share as many again on the other partitions) written straight to the
            changelog topic of app `fo`, in the layout the worker writes, and into one prebuilt set of
            partition stores (PartitionStore.restore, the worker's own restore call) whose changelog
            offsets are the topic's ends; the raw topic is empty and the group has no offsets yet, which is
            consistent: the state is what events merged before the topic's retention would have left.
            Rows go to the even raw partitions (the victim's, see below) and a few to the odd ones
  run       two workers (`python -m cdc worker`, app `fo`) start with copies of the prebuilt stores (a
            restart with its data directory kept: nothing to restore); aiokafka's round-robin assignor
            gives one of them partitions 0, 2, 4, ... (the victim, holding --rows rows) and the other the
            odd ones (the survivor, whose copies of the victim's partitions are then deleted, so it has
            none of that state locally). Raw events (UPDATEs of one column of random stored rows) are
            produced at --rate per second; after --warm-s the victim is killed with SIGKILL; production
            goes on until the survivor has emitted for the victim's partitions for --after-s; then the clean
            topic is read read_committed until every raw event produced has its clean event
  standby   (--modes ... standby) the same again with worker.standby_replicas=1: both workers restart on
            fresh copies of the prebuilt stores (which catch up the tail the previous run added), the
            survivor keeps a warm copy of the victim's partitions by tailing their changelog, and the
            victim is killed again
The legs come from the survivor's JSON log (revoked, assigned, restored) and from this script's read of the
clean topic (the first clean event of a victim partition). Each clean event's `after.value` is the number of
the raw event that caused it (each UPDATE sets it), so every raw event is checked to give exactly one clean
event, and its `after.note` and `after.count` (never updated) to be the stored row's: the restored state was
merged with, not replaced.

    .venv/bin/python bench/failover.py [--rows 10000000] [--rate 500] [--modes plain standby]
        [--warm-s 20] [--after-s 30] [--out bench/failover.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agent_pipeline import cpu_seconds, proc_status, say  # noqa: E402
from report_analysis import analysis_of  # noqa: E402
from worker_pipeline import WorkerProcess, code_version, cpu_model, mem_total_gb, uptime  # noqa: E402

from app.partition_states import changelog_topic  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from runtime.config import KafkaConfig  # noqa: E402
from runtime.kafka_topics import TopicSpec, ensure_topics  # noqa: E402
from runtime.key_partition import key_partition  # noqa: E402
from runtime.service_process import free_port  # noqa: E402
from schemas.raw_event import encode_raw_event, encode_raw_key  # noqa: E402
from schemas.schema_event import schema_event  # noqa: E402
from state.row_state import RowState  # noqa: E402
from state.store.codec import decode_row_value, encode_row_value  # noqa: E402
from state.store.keys import ROW, row_key  # noqa: E402
from state.store.partition_store import PartitionStore, StoreOptions  # noqa: E402
from state.table_layout import clustering_key  # noqa: E402
from testkit.event_builder import EventBuilder, Write  # noqa: E402

KAFKA_PORT = 29092
KAFKA_CONTROLLER_PORT = 29093
PARTITIONS = 12
KEYSPACE = "fo"
TABLE = "readings"
TABLE_ID = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")
DDL = (
    f"CREATE TABLE {KEYSPACE}.{TABLE} (device uuid, at bigint, value double, count int, note text, "
    f"PRIMARY KEY (device, at)) WITH ID = {TABLE_ID}"
)
SCHEMA_TOPIC = "fo.schemas"
CLEAN_PREFIX = "clean"
ROWS_PER_DEVICE = 100
#: write times of the stored rows (2023) and of the raw events of the runs (now, much later)
STATE_TS = 1_700_000_000_000_000
TARGET_S = 60.0
#: where the hand-written part of the report begins (kept when a run remakes the tables)
ANALYSIS_HEADING = "## Reading"
RSS_TARGET_MB = 1000.0


def schema_of() -> Any:
    schema = load_schema_from_cql(DDL).by_name(KEYSPACE, TABLE)
    assert schema is not None
    return schema


# -- the rows of the state ---------------------------------------------------------------------------


def at_of(i: int) -> int:
    return 1_700_000_000_000 + i


def values_of(i: int) -> dict[str, Any]:
    return {"value": i * 0.25, "count": i % 2**31, "note": f"note number {i}"}


def raw_partition(device: uuid.UUID) -> int:
    return key_partition(encode_raw_key(KEYSPACE, TABLE, device.bytes), PARTITIONS)


def pick_devices(count: int, want: set[int], salt: int) -> list[tuple[uuid.UUID, int]]:
    """`count` device ids whose raw partition is in `want`, with it."""
    out: list[tuple[uuid.UUID, int]] = []
    k = 0
    while len(out) < count:
        device = uuid.UUID(int=(salt << 64) | k)
        p = raw_partition(device)
        if p in want:
            out.append((device, p))
        k += 1
    return out


class RowWriter:
    """Row i of the state as the worker stores it: its changelog key and value. The value is the seed
    worker's stored row with row i's clustering, write time and values (the cells' flags, TTL and
    deletion times as the merge wrote them), encoded by state.store.codec."""

    def __init__(self, schema: Any, template: bytes) -> None:
        self.schema = schema
        self.table = schema.table_id.bytes
        self.template = decode_row_value(template)

    def row(self, i: int, device: uuid.UUID) -> tuple[bytes, bytes]:
        at = struct.pack(">q", at_of(i))
        ts = STATE_TS + i
        values = values_of(i)
        encoded = {
            "value": struct.pack(">d", values["value"]),
            "count": struct.pack(">i", values["count"]),
            "note": values["note"].encode(),
        }
        tpl = self.template
        assert tpl.liveness is not None
        state = RowState(
            clustering=(at,),
            liveness=replace(tpl.liveness, timestamp=ts),
            cells={
                name: replace(cell, timestamp=ts, value=encoded[name]) for name, cell in tpl.cells.items()
            },
        )
        key = row_key(self.table, device.bytes, clustering_key(self.schema, [at]))
        return key, encode_row_value(state, None)


# -- Kafka helpers -----------------------------------------------------------------------------------


def producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            **extra,
        }
    )


def produce(prod: Any, topic: str, key: bytes, value: bytes, partition: int) -> None:
    while True:
        try:
            prod.produce(topic, value=value, key=key, partition=partition)
            return
        except BufferError:
            prod.poll(0.05)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, until: int, timeout_s: float) -> list[tuple[int, Any]]:
    """(partition, message) of `topic` from the start, read_committed, until `until` messages or timeout."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, Any]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            topics = consumer.list_topics(topic, timeout=10).topics
            if topic in topics and topics[topic].partitions:
                break
            time.sleep(0.5)
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        while len(out) < until and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    out.append((m.partition(), m))
        return out
    finally:
        consumer.close()


def topic_disk_bytes(kafka_data: Path, topic: str) -> int:
    total = 0
    for folder in kafka_data.glob(f"{topic}-*"):
        if folder.name.rsplit("-", 1)[0] == topic:
            total += sum(f.stat().st_size for f in folder.glob("*.log"))
    return total


# -- the live stream and the clean topic ---------------------------------------------------------------


@dataclass
class Produced:
    seq: int
    row: int
    partition: int
    at: float


class RawStream(threading.Thread):
    """UPDATEs of `value` of random stored rows at a steady rate; `value` is the event's number."""

    def __init__(self, bootstrap: str, topic: str, devices: list[tuple[uuid.UUID, int]], rate: int,
                 first_seq: int) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.prod = producer(bootstrap, acks="all", **{"linger.ms": 5})
        self.topic = topic
        self.devices = devices
        self.rate = rate
        self.builder = EventBuilder(schema_of())
        self.rng = random.Random(first_seq)
        self.seq = first_seq
        self.live_ts = int(time.time() * 1_000_000)
        self.produced: list[Produced] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        sent = 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while sent < due:
                row = self.rng.randrange(len(self.devices) * ROWS_PER_DEVICE)
                device, partition = self.devices[row // ROWS_PER_DEVICE]
                event = self.builder.event(
                    Write(device, (at_of(row),), {"value": float(self.seq)}, ts=self.live_ts + self.seq)
                )
                key = encode_raw_key(KEYSPACE, TABLE, device.bytes)
                produce(self.prod, self.topic, key, encode_raw_event(event), partition)
                self.produced.append(Produced(self.seq, row, partition, time.time()))
                self.seq += 1
                sent += 1
            self.prod.poll(0)
            time.sleep(0.01)
        self.prod.flush(30)


class CleanTail(threading.Thread):
    """Every clean event, read_committed, as it arrives: (arrival time, event number, after image)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.seen: list[tuple[float, int, dict[str, Any]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tail-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
        try:
            while not self.stopping.is_set():
                topics = consumer.list_topics(self.topic, timeout=10).topics
                if self.topic in topics and topics[self.topic].partitions and not topics[self.topic].error:
                    break
                time.sleep(0.2)
            parts = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            consumer.assign([TopicPartition(self.topic, p, 0) for p in parts])
            while not self.stopping.is_set():
                for m in consumer.consume(5000, 0.1):
                    if m.error() is None and m.value() is not None:
                        after = json.loads(m.value())["after"]
                        self.seen.append((time.time(), int(after["value"]), after))
        finally:
            consumer.close()


class RssSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.pids: dict[str, int] = {}
        self.samples: list[tuple[float, str, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for name, pid in list(self.pids.items()):
                rss = proc_status(pid).get("VmRSS")
                if rss:
                    self.samples.append((time.time(), name, rss / 1024))
            time.sleep(0.5)

    def peak(self, name: str, since: float = 0.0, until: float = float("inf")) -> float:
        return max((mb for t, n, mb in self.samples if n == name and since <= t <= until), default=0.0)

    def last(self, name: str) -> float:
        return next((mb for _, n, mb in reversed(self.samples) if n == name), 0.0)


# -- the worker's log ----------------------------------------------------------------------------------


def log_entries(path: Path) -> list[tuple[float, str]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "ts" in entry:
            at = datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
            out.append((at, str(entry.get("message", ""))))
    return out


def first_after(entries: list[tuple[float, str]], since: float, prefix: str) -> tuple[float, str] | None:
    return next(((t, m) for t, m in entries if t >= since and m.startswith(prefix)), None)


def partitions_in(message: str) -> set[int]:
    inside = message[message.index("[") + 1 : message.index("]")]
    return {int(p) for p in inside.split(",") if p.strip()}


# -- the benchmark -------------------------------------------------------------------------------------


@dataclass
class RunResult:
    mode: str
    victim: str
    victim_partitions: list[int]
    victim_rows: int
    victim_changelog_bytes: int
    legs: dict[str, float] = field(default_factory=dict)
    restored_records: int = 0
    restore_s: float = 0.0
    rss: dict[str, float] = field(default_factory=dict)
    #: CPU % of one core of each worker in the steady window before the kill, and the standby copies'
    #: changelog records applied per second in it
    cpu: dict[str, float] = field(default_factory=dict)
    produced: int = 0
    clean: int = 0
    lost: int = 0
    repeated: int = 0
    wrong_rows: int = 0
    rate: float = 0.0
    notes: list[str] = field(default_factory=list)


class Bench:
    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        from infra.kafka import KafkaBroker, broker_spec

        self.args = args
        self.home = home
        self.settings = InfraSettings.from_env(
            home=home / "services",
            kafka_port=int(os.environ.get("CDC_KAFKA_PORT", KAFKA_PORT)),
            kafka_controller_port=int(os.environ.get("CDC_KAFKA_CONTROLLER_PORT", KAFKA_CONTROLLER_PORT)),
        )
        self.broker = KafkaBroker(broker_spec(self.settings), self.settings)
        self.bootstrap = self.broker.spec.bootstrap
        self.schema = schema_of()
        self.workers: list[WorkerProcess] = []
        self.env: dict[str, Any] = {}
        self.state: dict[str, Any] = {}
        self.runs: list[RunResult] = []
        #: the devices of the state, in row order: row i is at_of(i) of devices[i // ROWS_PER_DEVICE]
        self.devices: list[tuple[uuid.UUID, int]] = []
        self.partition_rows: Counter[int] = Counter()
        self.partition_bytes: Counter[int] = Counter()
        self.next_seq = 0
        self.clean = CleanTail(self.bootstrap, f"{CLEAN_PREFIX}.{KEYSPACE}.{TABLE}")
        self.rss = RssSampler()

    # -- services

    def up(self) -> None:
        self.env["code"] = code_version()
        self.env["uptime_before"] = uptime()
        say(f"starting Kafka on {self.bootstrap}")
        self.broker.start()
        asyncio.run(self._topics())
        self.rss.start()

    async def _topics(self) -> None:
        await ensure_topics(
            KafkaConfig(bootstrap_servers=self.bootstrap),
            [
                TopicSpec("fo.raw", PARTITIONS, 1),
                TopicSpec("fo.seed", PARTITIONS, 1),
                TopicSpec(SCHEMA_TOPIC, 1, 1, {"cleanup.policy": "compact"}),
                TopicSpec(changelog_topic("fo"), PARTITIONS, 1, {"cleanup.policy": "compact"}),
            ],
        )
        event = schema_event("c", KEYSPACE, TABLE, str(TABLE_ID), cdc=True, dropped=False, cql=DDL)
        prod = producer(self.bootstrap, acks="all")
        produce(prod, SCHEMA_TOPIC, event.key, event.encode(), 0)
        prod.flush(30)

    def down(self) -> None:
        self.env["uptime_after"] = uptime()
        self.clean.stopping.set()
        self.rss.stopping.set()
        for worker in self.workers:
            with contextlib.suppress(Exception):
                worker.stop(10, signal_number=signal.SIGKILL)
        with contextlib.suppress(Exception):
            if self.broker.stop():
                say("stopped Kafka")

    def worker(self, name: str, app_id: str, topic: str, data: Path, extra: dict[str, Any]) -> WorkerProcess:
        config = {
            "cluster": "failover",
            "kafka": {
                "bootstrap_servers": self.bootstrap,
                "raw_topic": topic,
                "schema_topic": SCHEMA_TOPIC,
                "raw_partitions": PARTITIONS,
            },
            "worker": {
                "data_directory": str(data),
                "app_id": app_id,
                "worker_id": name,
                "clean_topic_prefix": CLEAN_PREFIX if app_id == "fo" else app_id,
                "web_port": free_port(),
                **extra,
            },
        }
        worker = WorkerProcess(self.home, name, config)
        self.workers.append(worker)
        return worker

    # -- seed: the worker's own rows, to check the row writer against

    def seed(self) -> bytes:
        n = self.args.seed_rows
        devices = pick_devices(max(1, n // ROWS_PER_DEVICE), set(range(PARTITIONS)), salt=0x5EED)
        builder = EventBuilder(self.schema)
        prod = producer(self.bootstrap, acks="all")
        expected: dict[bytes, uuid.UUID] = {}
        for i in range(n):
            device, p = devices[i // ROWS_PER_DEVICE]
            event = builder.event(Write(device, (at_of(i),), values_of(i), ts=STATE_TS + i, insert=True))
            produce(
                prod, "fo.seed", encode_raw_key(KEYSPACE, TABLE, device.bytes), encode_raw_event(event), p
            )
            expected[row_key(self.schema.table_id.bytes, device.bytes,
                             clustering_key(self.schema, [struct.pack(">q", at_of(i))]))] = device  # fmt: skip
        prod.flush(30)
        worker = self.worker("seed", "fo-seed", "fo.seed", self.home / "seed", {})
        worker.start()
        say(f"seed: a worker merges {n} INSERTs")
        deadline = time.monotonic() + 180
        found: dict[bytes, bytes] = {}
        kinds: Counter[str] = Counter()
        while time.monotonic() < deadline and len(found) < n:
            time.sleep(2)
            total = sum(end_offsets(self.bootstrap, changelog_topic("fo-seed")).values())
            records = read_committed(self.bootstrap, changelog_topic("fo-seed"), total, 20)
            found, kinds = {}, Counter()
            for _, m in records:
                kinds[m.key()[:1].decode()] += 1
                if m.key()[:1] == ROW and m.value() is not None:
                    found[m.key()] = m.value()
        worker.stop(20)
        self.workers.remove(worker)
        if set(found) != set(expected):
            raise SystemExit(f"seed: the worker stored {len(found)} rows, expected {n}: keys differ")
        template = next(iter(found.values()))
        writer = RowWriter(self.schema, template)
        same = 0
        for i in range(n):
            device = devices[i // ROWS_PER_DEVICE][0]
            key, value = writer.row(i, device)
            if found.get(key) != value:
                raise SystemExit(f"seed: row {i} differs from the worker's: {found.get(key)!r} != {value!r}")
            same += 1
        self.state.update(seed_rows=n, seed_same=same, seed_kinds=dict(kinds))
        say(
            f"seed: {same} of {n} rows byte-identical to the worker's changelog ({dict(kinds)} records by kind)"
        )
        return template

    # -- state

    def fill(self, template: bytes) -> Path:
        """The changelog of app `fo` and a prebuilt set of stores, from the same rows."""
        rows = self.args.rows
        odd = int(rows * self.args.odd_share)
        even_parts = set(range(0, PARTITIONS, 2))
        devices = pick_devices(rows // ROWS_PER_DEVICE, even_parts, salt=0xFA11) + pick_devices(
            max(1, odd // ROWS_PER_DEVICE), set(range(PARTITIONS)) - even_parts, salt=0x0DD
        )
        self.devices = devices
        writer = RowWriter(self.schema, template)
        prebuilt = self.home / "prebuilt"
        options = StoreOptions()
        stores = {
            p: PartitionStore(prebuilt / "state" / f"partition-{p}", p, options) for p in range(PARTITIONS)
        }
        prod = producer(self.bootstrap, acks="all")
        topic = changelog_topic("fo")
        pending: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        started = time.monotonic()
        total = len(devices) * ROWS_PER_DEVICE
        say(f"state: writing {total:,} rows to {topic} and to the prebuilt stores")
        for d, (device, p) in enumerate(devices):
            for i in range(d * ROWS_PER_DEVICE, (d + 1) * ROWS_PER_DEVICE):
                key, value = writer.row(i, device)
                produce(prod, topic, key, value, p)
                pending[p].append((key, value))
                self.partition_rows[p] += 1
                self.partition_bytes[p] += len(key) + len(value)
            if len(pending[p]) >= 5000:
                stores[p].restore(pending.pop(p), self.partition_rows[p])
            if d % 100 == 0:
                prod.poll(0)
            if d and d % 20_000 == 0:
                say(f"  {d * ROWS_PER_DEVICE:,} rows")
        for p, items in pending.items():
            stores[p].restore(items, self.partition_rows[p])
        left = prod.flush(120)
        for store in stores.values():
            store.flush()
            store.close()
        took = time.monotonic() - started
        ends = end_offsets(self.bootstrap, topic)
        if left or any(ends[p] != self.partition_rows[p] for p in range(PARTITIONS)):
            raise SystemExit(
                f"state: the changelog ends at {ends}, not at the rows written {self.partition_rows}"
            )
        self.state.update(
            rows_total=total,
            fill_s=took,
            changelog_records=sum(ends.values()),
            changelog_bytes=sum(self.partition_bytes.values()),
            prebuilt_mb=dir_mb(prebuilt),
        )
        say(f"state: {total:,} rows in {took:.0f} s; changelog ends {ends}")
        return prebuilt

    # -- a failover run

    def run(self, mode: str, prebuilt: Path) -> RunResult:
        args = self.args
        extra: dict[str, Any] = {"session_timeout_ms": args.session_timeout_ms}
        if mode == "standby":
            extra["standby_replicas"] = 1
        names = [f"{mode}-a", f"{mode}-b"]
        workers = []
        for name in names:
            data = self.home / name
            copy_stores(prebuilt, data)
            workers.append(self.worker(name, "fo", "fo.raw", data, extra))
        since = time.time()
        for w in workers:
            w.start()
        owned = self.wait_stable(workers, since)
        victim = next(w for w in workers if 0 in owned[w.name])
        survivor = next(w for w in workers if w is not victim)
        vparts = sorted(owned[victim.name])
        # the survivor keeps no copy of the victim's partitions, unless its standbys keep one
        if mode != "standby":
            for p in vparts:
                shutil.rmtree(Path(survivor.config["worker"]["data_directory"]) / "state" / f"partition-{p}")
        result = RunResult(
            mode=mode,
            victim=victim.name,
            victim_partitions=vparts,
            victim_rows=sum(self.partition_rows[p] for p in vparts),
            victim_changelog_bytes=sum(self.partition_bytes[p] for p in vparts),
        )
        say(f"{mode}: {victim.name} owns {vparts} ({result.victim_rows:,} rows), {survivor.name} the rest")
        self.rss.pids = {"victim": victim.pid or 0, "survivor": survivor.pid or 0}
        if mode == "standby":
            self.wait_standby_warm(survivor, vparts)
        stream = RawStream(self.bootstrap, "fo.raw", self.devices, args.rate, self.next_seq)
        stream.start()
        time.sleep(min(5.0, args.warm_s / 2))  # the stream under way, then the steady window
        applied = "cdc_worker_standby_applied_changelog_records_total"
        before = {w.name: cpu_seconds(w.pid) for w in workers}
        copied = (survivor.metric_values() or {}).get(applied, 0.0)
        window = time.monotonic()
        time.sleep(max(args.warm_s - min(5.0, args.warm_s / 2), 1.0))
        took = time.monotonic() - window
        result.cpu["survivor"] = (cpu_seconds(survivor.pid) - before[survivor.name]) / took * 100
        result.cpu["victim"] = (cpu_seconds(victim.pid) - before[victim.name]) / took * 100
        result.cpu["standby_records_per_s"] = (
            (survivor.metric_values() or {}).get(applied, 0.0) - copied
        ) / took
        result.rss["survivor_before_mb"] = self.rss.last("survivor")
        result.rss["victim_before_mb"] = self.rss.last("victim")
        killed = time.time()
        os.kill(victim.pid or 0, signal.SIGKILL)
        assert victim.process is not None
        victim.process.wait(10)
        say(f"{mode}: killed {victim.name} (kill -9)")
        vset = set(vparts)
        first_emit = None
        deadline = time.monotonic() + args.max_wait_s
        while time.monotonic() < deadline:
            produced_at = {p.seq: p for p in stream.produced[-5 * args.rate :]}
            emitted = [
                t for t, seq, _ in self.clean.seen[-20_000:]
                if t > killed and seq in produced_at and produced_at[seq].partition in vset
                and produced_at[seq].at > killed
            ]  # fmt: skip
            if emitted and first_emit is None:
                first_emit = min(emitted)
                say(f"{mode}: the victim's partitions emit again {first_emit - killed:.1f} s after the kill")
            if first_emit is not None and time.time() - first_emit >= args.after_s:
                break
            time.sleep(0.5)
        stream.stopping.set()
        stream.join(60)
        self.next_seq = stream.seq
        result.produced = len(stream.produced)
        result.rate = result.produced / max(stream.produced[-1].at - stream.produced[0].at, 1e-9)
        self.settle(stream, result, killed, first_emit, survivor, vset)
        survivor.stop(30)
        result.rss["survivor_end_mb"] = self.rss.last("survivor")
        self.runs.append(result)
        return result

    def wait_stable(self, workers: list[WorkerProcess], since: float) -> dict[str, set[int]]:
        """Each worker's partitions once the group is stable: every partition owned once and restored."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(1)
            owned: dict[str, set[int]] = {}
            ready = True
            for w in workers:
                entries = [(t, m) for t, m in log_entries(w.log_path) if t >= since]
                assigned = [(t, m) for t, m in entries if m.startswith("assigned raw partitions")]
                revoked = [(t, m) for t, m in entries if m.startswith("revoked raw partitions")]
                if not assigned or (revoked and revoked[-1][0] > assigned[-1][0]):
                    ready = False
                    continue
                owned[w.name] = partitions_in(assigned[-1][1])
                restored = [
                    t for t, m in entries if m.startswith("restored partitions") and t >= assigned[-1][0]
                ]
                ready = ready and bool(restored)
            if ready and len(owned) == len(workers):
                every = sorted(p for parts in owned.values() for p in parts)
                if every == list(range(PARTITIONS)) and all(owned.values()):
                    time.sleep(3)  # no rebalance right behind
                    return owned
        raise SystemExit(f"the group did not settle: {[w.log_tail(20) for w in workers]}")

    def wait_standby_warm(self, survivor: WorkerProcess, vparts: list[int]) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            got = survivor.get_json("/stats", 10.0)
            if got is not None and got[0] == 200:
                standby = got[1].get("standby", {})
                lag = standby.get("lag")
                if standby.get("partitions") == vparts and lag == 0:
                    return
            time.sleep(1)
        raise SystemExit(f"the standby of {vparts} on {survivor.name} did not catch up")

    def settle(self, stream: RawStream, result: RunResult, killed: float, first_emit: float | None,
               survivor: WorkerProcess, vset: set[int]) -> None:  # fmt: skip
        """Wait until every raw event produced has its clean event; count; read the legs from the log."""
        wanted = {p.seq for p in stream.produced}
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if wanted <= {seq for _, seq, _ in self.clean.seen}:
                break
            time.sleep(1)
        time.sleep(3)  # anything repeated after the last one would show by now
        counts = Counter(seq for _, seq, _ in self.clean.seen if seq in wanted)
        by_seq = {p.seq: p for p in stream.produced}
        result.clean = sum(counts.values())
        result.lost = len(wanted - set(counts))
        result.repeated = sum(c - 1 for c in counts.values() if c > 1)
        wrong = 0
        for _, seq, after in self.clean.seen:
            if seq in by_seq:
                i = by_seq[seq].row
                want = values_of(i)
                if after.get("note") != want["note"] or after.get("count") != want["count"]:
                    wrong += 1
        result.wrong_rows = wrong
        entries = log_entries(survivor.log_path)
        revoked = first_after(entries, killed, "revoked raw partitions")
        assigned = first_after(entries, revoked[0] if revoked else killed, "assigned raw partitions")
        restored = first_after(entries, assigned[0] if assigned else killed, "restored partitions")
        legs = result.legs
        if revoked and assigned and restored:
            message = restored[1]
            result.restored_records = int(message.split(": ")[-1].split(" changelog records")[0])
            result.restore_s = float(message.rsplit(" in ", 1)[1].split(" s")[0])
            restore_began = restored[0] - result.restore_s
            legs["failure noticed (session timeout)"] = revoked[0] - killed
            # the batch loop may begin the takeover before `assigned` is logged (that line waits for the
            # owners' announcement): the rebalance ends at whichever came first
            rebalanced = min(assigned[0], restore_began)
            legs["rebalance"] = rebalanced - revoked[0]
            legs["fencing (transactional ids registered)"] = restore_began - rebalanced
            legs["restore"] = result.restore_s
            if first_emit is not None:
                legs["first transaction committed"] = first_emit - restored[0]
        if first_emit is not None:
            legs["total: kill to clean events again"] = first_emit - killed
            last_before = max((p for p in stream.produced if p.partition in vset and p.at < first_emit),
                              key=lambda p: p.seq, default=None)  # fmt: skip
            if last_before is not None:
                arrivals = [t for t, seq, _ in self.clean.seen if seq == last_before.seq]
                if arrivals:
                    legs["backlog of the victim's partitions emitted"] = min(arrivals) - killed
        result.rss["survivor_peak_after_kill_mb"] = self.rss.peak("survivor", since=killed)
        say(f"{result.mode}: {result.produced:,} raw events, {result.clean:,} clean events, lost "
            f"{result.lost}, repeated {result.repeated}, wrong images {wrong}; legs {legs}")  # fmt: skip


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def copy_stores(source: Path, target: Path) -> None:
    """A copy of a closed set of stores: SST files hard-linked (RocksDB never changes one), the rest copied
    (the MANIFEST and the logs are appended to)."""

    def link_or_copy(src: str, dst: str) -> None:
        if src.endswith(".sst"):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=link_or_copy)


# -- the report ----------------------------------------------------------------------------------------


def report(bench: Bench, command: str) -> str:
    args, st, env = bench.args, bench.state, bench.env
    out = [
        "# Worker failover: kill -9 of the worker that holds the state, under a steady stream",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), {mem_total_gb():.0f} GB RAM, measured "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Kafka, both workers and this script share "
        "those cores. `uptime` before the broker started: "
        f"`{env.get('uptime_before', '?')}`; after the runs: `{env.get('uptime_after', '?')}`.",
        "",
        f"Code: {env.get('code', '?')}. Workers: `python -m cdc worker`, defaults but "
        f"`worker.session_timeout_ms: {args.session_timeout_ms}`; one KRaft broker, {PARTITIONS} raw partitions.",
        "",
        "## How the state was made",
        "",
        f"- A real worker (app `fo-seed`) merged {st.get('seed_rows', 0)} INSERTs of `{KEYSPACE}.{TABLE}` "
        "(device uuid, at bigint, value double, count int, note text; PRIMARY KEY (device, at)) built with "
        "testkit; its changelog held these records by key kind (R row, D/E digest, M meta): "
        f"{st.get('seed_kinds', {})}. This script's row writer (the key from state.store.keys and "
        "state.table_layout, the value from state.store.codec with the flags of the worker's own stored row) "
        f"gave byte-identical keys and values for {st.get('seed_same', 0)} of {st.get('seed_rows', 0)} rows.",
        f"- Then it wrote {st.get('rows_total', 0):,} rows ({ROWS_PER_DEVICE} per device) with that writer to "
        f"the changelog of app `fo` ({st.get('changelog_records', 0):,} records, "
        f"{st.get('changelog_bytes', 0) / 1e6:,.0f} MB of keys and values, plain records as the worker's "
        "producers write them, no compression) and into one prebuilt set of partition stores "
        f"({st.get('prebuilt_mb', 0):,.0f} MB on disk) through `PartitionStore.restore`, the worker's restore "
        f"call, with each store's changelog offset at the topic's end ({st.get('fill_s', 0):.0f} s in all). "
        f"--rows {args.rows:,} of them on the even raw partitions (the victim's), {args.odd_share:.0%} as "
        "many on the odd ones (the survivor's).",
        "- What this state leaves out: the digest entries (D, E) a worker keeps for the raw events of the last "
        "`digest_horizon_s` (3 days): their number follows the event rate, not the row count. The raw topic "
        "starts empty and the group has no committed offset: what a worker would see after the raw events "
        "that made the state were merged and deleted by retention.",
        "- Both workers start with copies of the prebuilt stores (a restart that kept its data directory). "
        "Once the group is stable the survivor's copies of the victim's partitions are deleted (without "
        "standbys): it must restore them from the changelog.",
        f"- During each run, raw events are UPDATEs of `value` of random stored rows at {args.rate}/s "
        "(testkit events, each its own digest), to every partition.",
        "",
        "## Results",
        "",
    ]
    runs = bench.runs
    legs = list(dict.fromkeys(k for r in runs for k in r.legs))
    header = "| | " + " | ".join(r.mode for r in runs) + " |"
    out += [header, "|---|" + "---:|" * len(runs)]

    def line(name: str, cells: list[str]) -> None:
        out.append(f"| {name} | " + " | ".join(cells) + " |")

    line("victim's partitions", [", ".join(map(str, r.victim_partitions)) for r in runs])
    line("rows the victim held", [f"{r.victim_rows:,}" for r in runs])
    line("their changelog (keys + values)", [f"{r.victim_changelog_bytes / 1e6:,.0f} MB" for r in runs])
    for leg in legs:
        line(f"{leg}, s", [f"{r.legs[leg]:.1f}" if leg in r.legs else "-" for r in runs])
    line("changelog records the survivor restored", [f"{r.restored_records:,}" for r in runs])
    line(
        "restore rate",
        [
            f"{r.restored_records / r.restore_s:,.0f} rows/s, "
            f"{r.victim_changelog_bytes * (r.restored_records / max(r.victim_rows, 1)) / r.restore_s / 1e6:,.1f} MB/s"
            if r.restore_s > 0 and r.restored_records > 0
            else "-"
            for r in runs
        ],
    )
    line(f"total <= {TARGET_S:.0f} s", [
        ("**yes**" if r.legs.get("total: kill to clean events again", 1e9) <= TARGET_S else "**no**") for r in runs
    ])  # fmt: skip
    line("survivor RSS before the kill", [f"{r.rss.get('survivor_before_mb', 0):,.0f} MB" for r in runs])
    line(
        "survivor peak RSS after the kill",
        [f"{r.rss.get('survivor_peak_after_kill_mb', 0):,.0f} MB" for r in runs],
    )
    line("survivor CPU before the kill (% of a core)", [f"{r.cpu.get('survivor', 0):.0f}" for r in runs])
    line("victim CPU before the kill (% of a core)", [f"{r.cpu.get('victim', 0):.0f}" for r in runs])
    line(
        "changelog records/s the survivor's copies applied",
        [f"{r.cpu.get('standby_records_per_s', 0):,.0f}" for r in runs],
    )
    line("victim RSS before the kill", [f"{r.rss.get('victim_before_mb', 0):,.0f} MB" for r in runs])
    line("raw events produced (rate)", [f"{r.produced:,} ({r.rate:,.0f}/s)" for r in runs])
    line("clean events (read_committed) for them", [f"{r.clean:,}" for r in runs])
    line("lost / repeated", [f"{r.lost} / {r.repeated}" for r in runs])
    line("after images whose stored columns differ", [str(r.wrong_rows) for r in runs])
    out += [
        "",
        "Legs: `failure noticed` is from the kill to the survivor's `revoked raw partitions` (the group "
        "coordinator evicts the dead member after the session timeout); `rebalance` to its `assigned`; "
        "`fencing` from then (or from the start of the takeover, when the batch loop began it before that line) to the start of the restore (each partition's transactional id registered, which fences the "
        "dead worker and ends its open transaction); `restore` is what the survivor logs; `first transaction "
        "committed` from the end of the restore to the first clean event of a victim partition read here "
        "(read_committed); `backlog ... emitted` is when the clean event of the last raw event produced to a "
        "victim partition before that arrived.",
        "",
        f"Changelog topic of app `fo` on the broker's disk at the end: {st.get('changelog_disk_mb', 0):,.0f} MB "
        "(its .log segments; the rows are all distinct keys, so compaction removes only the rows the runs "
        "updated).",
        "",
    ]
    return "\n".join(out) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of state the victim holds")
    parser.add_argument("--odd-share", type=float, default=0.02, help="rows on the survivor's partitions, "
                        "as a share of --rows")  # fmt: skip
    parser.add_argument("--seed-rows", type=int, default=200)
    parser.add_argument("--rate", type=int, default=500, help="raw events per second during the runs")
    parser.add_argument("--modes", nargs="+", default=["plain"], choices=["plain", "standby"])
    parser.add_argument("--warm-s", type=float, default=20.0)
    parser.add_argument("--after-s", type=float, default=30.0)
    parser.add_argument("--max-wait-s", type=float, default=900.0)
    parser.add_argument("--session-timeout-ms", type=int, default=15_000)
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    command = ".venv/bin/python bench/failover.py " + " ".join(sys.argv[1:])
    home = Path(tempfile.mkdtemp(prefix="failover-", dir=os.environ.get("CDC_HOME")))
    bench = Bench(args, home)
    try:
        bench.up()
        bench.clean.start()
        template = bench.seed()
        prebuilt = bench.fill(template)
        for mode in args.modes:
            bench.run(mode, prebuilt)
        bench.state["changelog_disk_mb"] = (
            topic_disk_bytes(bench.broker.spec.data, changelog_topic("fo")) / 1e6
        )
    finally:
        bench.down()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    text = report(bench, command)
    print(text)
    if args.out is not None:
        args.out.write_text(text + analysis_of(args.out, ANALYSIS_HEADING))
    return 0


if __name__ == "__main__":
    sys.exit(main())
