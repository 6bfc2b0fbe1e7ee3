"""Run the node agent as `cdc agent` processes and read back what it published, for the acceptance tests.

The agent is only ever exercised the way an operator runs it: a YAML file, a child process, its HTTP
endpoints and its Kafka topics. Expected events are built from the writes a test issues (bound values and
the USING TIMESTAMP values it chose) in the same canonical form the published Avro events are reduced to,
so a comparison never trusts anything the agent produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2
from cassandra.concurrent import execute_concurrent_with_args
from prometheus_client.parser import text_string_to_metric_families

from cassandra_model.ddl_parser import load_schema_from_cql
from infra.cql import connect
from infra.settings import InfraSettings
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_admin, make_consumer
from runtime.service_process import ServiceProcess, free_port
from schemas.raw_event import decode_raw_event, decode_raw_key
from schemas.schema_event import SchemaEvent

# ---------------------------------------------------------------------------------------------------------
# waiting


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str | Callable[[], str], interval_s: float = 0.1
) -> float:
    """Poll `condition` until it holds; fail naming `what` (a callable is asked only on failure).

    Returns the seconds waited.
    """
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {detail}")
        time.sleep(interval_s)
    return time.monotonic() - started


def unique_name(prefix: str) -> str:
    """A name no other test or earlier run uses (topics, keyspaces)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------------------------------------------------
# the agent process


def agent_config(
    *,
    cdc_raw: Path,
    state_directory: Path,
    bootstrap: str,
    raw_topic: str,
    schema_topic: str,
    keyspaces: Sequence[str],
    node: str = "node1",
    contact_points: Sequence[str] = ("127.0.0.1",),
    archive_directory: Path | None = None,
    raw_partitions: int = 6,
    agent: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
    cassandra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A config for one agent; `archive_directory` switches processed segments from delete to archive.

    `agent`, `kafka` and `cassandra` add keys to their sections (`security`, `username`...). The CQL port is
    the session services' (CDC_CQL_PORT, as the conftest's InfraSettings), so an agent of services moved to
    other ports reads their schema, not that of whatever answers on 9042; `cassandra={"port": ...}` overrides.
    """
    agent_section: dict[str, Any] = {
        "cdc_raw_directory": str(cdc_raw),
        "state_directory": str(state_directory),
        "node": node,
        "metrics_port": free_port(),
        "poll_interval_ms": 50,
    }
    if archive_directory is not None:
        agent_section["processed_segments"] = "archive"
        agent_section["archive_directory"] = str(archive_directory)
    return {
        "cluster": "acceptance",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "raw_topic": raw_topic,
            "schema_topic": schema_topic,
            "raw_partitions": raw_partitions,
            **(kafka or {}),
        },
        "cassandra": {
            "contact_points": list(contact_points),
            "port": InfraSettings.from_env().cql_port,
            "keyspaces": list(keyspaces),
            **(cassandra or {}),
        },
        "agent": {**agent_section, **(agent or {})},
    }


class AgentProcess(ServiceProcess):
    """One `cdc agent --config FILE` child process, its endpoints and its log."""

    command = "agent"

    def __init__(
        self, workdir: Path, config: dict[str, Any], name: str = "agent", *, log_format: str = "text"
    ) -> None:
        super().__init__(self.command, name, config, workdir, self.http_port(config), log_format=log_format)
        self.state_directory = self.state_path(config)

    @staticmethod
    def http_port(config: dict[str, Any]) -> int:
        return config["agent"]["metrics_port"]

    @staticmethod
    def state_path(config: dict[str, Any]) -> Path:
        return Path(config["agent"]["state_directory"])

    @property
    def offsets_path(self) -> Path:
        return self.state_directory / "offsets.json"

    @property
    def raw_topic(self) -> str:
        return self.config["kafka"]["raw_topic"]

    @property
    def schema_topic(self) -> str:
        return self.config["kafka"]["schema_topic"]

    def start(self, env: dict[str, str] | None = None) -> None:
        assert not self.running, f"{self.name} is already running"
        super().start(env)

    def stop(self, timeout_s: float = 40.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code (kills and fails after `timeout_s`)."""
        assert self.process is not None, f"{self.name} was never started"
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"{self.name} did not exit within {timeout_s} s of SIGTERM; log:\n{self.log_tail()}"
                ) from None
        return self.process.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def health(self) -> dict[str, Any] | None:
        """The /health body with its HTTP status under "http_status"; None while nothing answers."""
        got = self.get("/health", 3.0)
        if got is None:
            return None
        return {**json.loads(got[1]), "http_status": got[0]}

    def metrics(self) -> Metrics:
        got = self.get("/metrics", 3.0)
        assert got is not None and got[0] == 200, f"{self.name}: /metrics does not answer ({got})"
        return Metrics.parse(got[1].decode())

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        def ok() -> bool:
            assert self.running, (
                f"{self.name} exited with {self.process and self.process.returncode}:\n{self.log_tail()}"
            )
            health = self.health()
            return health is not None and health["status"] == "ok"

        wait_until(
            ok, timeout_s, lambda: f"{self.name} to report ok (last {self.health()}):\n{self.log_tail()}"
        )


@dataclass(slots=True)
class Metrics:
    """One scrape of /metrics: sample name and labels to value."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    @classmethod
    def parse(cls, text: str) -> Metrics:
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return cls(samples)

    def value(self, name: str, **labels: str) -> float:
        """A sample's value; 0 for a labelled counter child never incremented (absent until then)."""
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            assert labels, f"metric {name} is not exported; names: {sorted({n for n, _ in self.samples})}"
            return 0.0
        return self.samples[key]


def new_agent(
    agents: list[AgentProcess],
    workdir: Path,
    *,
    cdc_raw: Path,
    bootstrap: str,
    keyspaces: Sequence[str],
    name: str = "agent",
    archive: bool = True,
    raw_topic: str | None = None,
    schema_topic: str | None = None,
    **config: Any,
) -> AgentProcess:
    """An agent (not started) on topics of its own, its processed segments archived under `workdir`.

    It is added to `agents`, the list `running_agents` stops at the end of the test.
    """
    agent = AgentProcess(
        workdir,
        agent_config(
            cdc_raw=cdc_raw,
            state_directory=workdir / f"{name}-state",
            bootstrap=bootstrap,
            raw_topic=raw_topic or unique_name("cdc_raw"),
            schema_topic=schema_topic or unique_name("cdc_schemas"),
            keyspaces=keyspaces,
            node=config.pop("node", "node1"),
            archive_directory=workdir / f"{name}-archive" if archive else None,
            **config,
        ),
        name,
    )
    agents.append(agent)
    return agent


@contextlib.contextmanager
def cql_session(address: str, port: int = 9042, *, consistency: int | None = None) -> Iterator[Any]:
    """A session pinned to one node (infra.cql.connect), optionally with a default consistency level."""
    cluster = connect(address, port)
    if consistency is not None:
        cluster.profile_manager.default.consistency_level = consistency
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


@contextlib.contextmanager
def running_agents() -> Iterator[list[AgentProcess]]:
    """Collects every agent a test starts and stops them all when it ends, whatever happened."""
    agents: list[AgentProcess] = []
    try:
        yield agents
    finally:
        for agent in agents:
            agent.ensure_stopped()


# ---------------------------------------------------------------------------------------------------------
# offsets.json, watched


class OffsetsWatcher:
    """Reads an agent's offsets.json every `interval_s` in a thread, keeping every value each segment had.

    A segment leaving the file (released) is fine; a value lower than one seen before for the same
    segment, at any time and across restarts, is a violation.
    """

    def __init__(self, path: Path, interval_s: float = 0.05) -> None:
        self.path = path
        self.interval_s = interval_s
        self.history: dict[int, list[int]] = {}
        self.violations: list[str] = []
        self.reads = 0
        self.last: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offsets-watcher", daemon=True)

    def __enter__(self) -> OffsetsWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> dict[int, int]:
        """Read the file now; returns its offsets (the last ones read if it is not there yet)."""
        with self._lock:
            try:
                data = json.loads(self.path.read_text())
            except (FileNotFoundError, ValueError):
                return dict(self.last)  # not written yet (it is replaced atomically, never half-written)
            self.reads += 1
            self.last = {int(k): v for k, v in data["segments"].items()}
            for segment, value in self.last.items():
                seen = self.history.setdefault(segment, [])
                if seen and value < max(seen):
                    self.violations.append(
                        f"segment {segment}: {value} after {max(seen)} (history {seen[-5:]})"
                    )
                if not seen or seen[-1] != value:
                    seen.append(value)
            return dict(self.last)


# ---------------------------------------------------------------------------------------------------------
# topics


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One raw-topic record, key and value decoded."""

    partition: int
    offset: int
    key: bytes
    keyspace: str
    table: str
    partition_key: bytes
    event: dict[str, Any]

    @property
    def digest(self) -> bytes:
        return self.event["digest"]

    @property
    def node(self) -> str:
        return self.event["source"]["node"]


#: murmur2 of a few keys as Kafka's Java client computes them (Utils.murmur2, a signed int): the oracle
#: must agree with it, or the partition checks would say nothing about Kafka's (and Faust's) partitioner
JAVA_MURMUR2 = {b"1": -1993445489, b"12": 126087238, b"123": -267702483, b"1234": -1614185708}


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (Java client and aiokafka alike): positive murmur2 of the key, mod n."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class TopicReader:
    """Consumes one topic from its beginning (no consumer group) on an event loop of its own.

    `poll()` takes what arrived into `raw` (partition, offset, key, value). The topic may not exist yet: the agent
    creates it, so partitions are assigned on the first poll that finds it. `kafka` gives the clients'
    security (a secured broker); by default they are plaintext clients of `bootstrap`.
    """

    def __init__(
        self, bootstrap: str, topic: str, *, read_committed: bool = False, kafka: KafkaConfig | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.kafka = kafka or KafkaConfig(bootstrap_servers=bootstrap)
        self.topic = topic
        self.read_committed = read_committed
        self.partitions = 0
        self._raw: list[tuple[int, int, bytes, bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._consumer: AIOKafkaConsumer | None = None

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._consumer.stop())
            self._consumer = None
        self._loop.close()

    async def _poll(self, timeout_s: float) -> int:
        if self._consumer is None:
            consumer = make_consumer(
                self.kafka,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed" if self.read_committed else "read_uncommitted",
                max_partition_fetch_bytes=4 * 2**20,
                request_timeout_ms=15_000,
            )
            await consumer.start()
            self._consumer = consumer
        consumer = self._consumer
        if not self.partitions:
            found = await self._find_partitions()
            if not found:
                await asyncio.sleep(min(timeout_s, 0.2))
                return 0
            consumer.assign([TopicPartition(self.topic, p) for p in found])
            await consumer.seek_to_beginning()
            self.partitions = len(found)
        batches = await consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=20_000)
        count = 0
        for tp, messages in batches.items():
            for m in messages:
                self._raw.append((tp.partition, m.offset, m.key, m.value))
                count += 1
        return count

    async def _find_partitions(self) -> list[int]:
        admin = make_admin(self.kafka, request_timeout_ms=10_000)
        await admin.start()
        try:
            if self.topic not in await admin.list_topics():
                return []
            described = await admin.describe_topics([self.topic])
        finally:
            await admin.close()
        return sorted(p["partition"] for p in described[0]["partitions"])

    def poll(self, timeout_s: float = 0.5) -> int:
        """Fetch for up to `timeout_s`; returns how many records arrived."""
        try:
            return self._loop.run_until_complete(self._poll(timeout_s))
        except (KafkaError, OSError, TimeoutError):  # broker away (outage test): nothing this time
            time.sleep(timeout_s)
            return 0

    def drain(self, quiet_s: float = 1.0) -> None:
        """Poll until a poll of `quiet_s` brings nothing."""
        while self.poll(quiet_s):
            pass

    @property
    def raw(self) -> list[tuple[int, int, bytes, bytes]]:
        return self._raw


class RawTopic(TopicReader):
    """The raw topic, each record decoded with the project's Avro codecs (schemas/raw_event.py)."""

    def __init__(self, bootstrap: str, topic: str, *, kafka: KafkaConfig | None = None) -> None:
        super().__init__(bootstrap, topic, kafka=kafka)
        self.records: list[RawRecord] = []
        self._counts: Counter[Signature] = Counter()
        self._decoded = 0

    def poll(self, timeout_s: float = 0.5) -> int:
        count = super().poll(timeout_s)
        for partition, offset, key, value in self.raw[self._decoded :]:
            keyspace, table, partition_key = decode_raw_key(key)
            event = decode_raw_event(value)
            self.records.append(RawRecord(partition, offset, key, keyspace, table, partition_key, event))
            self._counts[event_signature(event)] += 1
        self._decoded = len(self.raw)
        return count

    def signatures(self) -> Counter[Signature]:
        """How many times each event (in canonical form) was read so far."""
        return Counter(self._counts)

    def wait_for(
        self,
        expected: Iterable[Signature],
        timeout_s: float,
        *,
        what: str = "the expected events",
        copies: int = 1,
    ) -> float:
        """Poll until every expected signature was read at least `copies` times; fails saying what lacks."""
        missing = set(expected)
        total = len(missing)

        def arrived() -> bool:
            self.poll(0.5)
            missing.difference_update([s for s in missing if self._counts[s] >= copies])
            return not missing

        return wait_until(
            arrived,
            timeout_s,
            lambda: (
                f"{what}: {len(missing)} of {total} not read {copies} time(s) after {len(self.records)} "
                f"records, e.g. {sorted(missing, key=repr)[:2]}"
            ),
            interval_s=0,
        )

    def check_partitioning(self) -> None:
        """Every record sits in the partition Kafka's default partitioner gives its key, and all records of
        one key (replica copies, redeliveries) share it."""
        assert self.partitions, f"topic {self.topic} was never found"
        disagree = {k: murmur2(k) for k, v in JAVA_MURMUR2.items() if murmur2(k) != v & 0xFFFFFFFF}
        assert not disagree, f"aiokafka's murmur2 differs from Kafka's Java client: {disagree}"
        wrong = [
            (r.keyspace, r.table, r.partition_key.hex(), r.partition, kafka_partition(r.key, self.partitions))
            for r in self.records
            if r.partition != kafka_partition(r.key, self.partitions)
        ]
        assert not wrong, (
            f"{len(wrong)} of {len(self.records)} records are not in murmur2's partition, "
            f"e.g. (keyspace, table, key, partition, expected) {wrong[:3]}"
        )
        by_key: dict[bytes, set[int]] = {}
        for r in self.records:
            by_key.setdefault(r.key, set()).add(r.partition)
        split = {k.hex(): sorted(p) for k, p in by_key.items() if len(p) > 1}
        assert not split, f"keys spread over several partitions: {list(split.items())[:3]}"
        for r in self.records:
            assert (r.keyspace, r.table, r.partition_key) == (
                r.event["keyspace"],
                r.event["table"],
                r.event["partition_key"],
            ), f"record key {(r.keyspace, r.table, r.partition_key)} does not name its event's partition"


class SchemaTopic(TopicReader):
    def events(self) -> list[SchemaEvent]:
        self.poll(0.2)
        return [SchemaEvent.decode(value) for _, _, _, value in self.raw]


def schema_columns(event: SchemaEvent) -> tuple[set[str], set[str]]:
    """The current and the dropped columns of a schema event's table, read as a worker reads them."""
    table = load_schema_from_cql(event.cql).by_name(event.keyspace, event.table)
    assert table is not None, f"schema event of {event.table} does not define it: {event.cql}"
    return {c.name for c in table.all_columns()}, set(table.dropped_columns)


# ---------------------------------------------------------------------------------------------------------
# canonical form of a partition update

Signature = tuple[Any, ...]
"""A partition update reduced to what the client decided: keyspace, table, key, rows, cells, timestamps,
TTLs and deletions. Node-chosen values (local deletion times, positions, publish times) are left out."""


def cell(column: str, value: bytes | None, timestamp: int, ttl: int = 0, path: bytes | None = None) -> tuple:
    """A cell; `value` None is a tombstone."""
    return (column, path, timestamp, ttl, value is None, value or b"")


def row(
    clustering: Sequence[bytes | None] = (),
    *,
    liveness: tuple[int, int] | None = None,
    deletion: int | None = None,
    cells: Iterable[tuple] = (),
    complex_deletions: Iterable[tuple[str, int]] = (),
) -> tuple:
    """A row: `liveness` is (timestamp, ttl) of an INSERT, `deletion` a row tombstone's timestamp."""
    return (tuple(clustering), liveness, deletion, tuple(sorted(cells)), tuple(sorted(complex_deletions)))


def bound(kind: int, clustering: Sequence[bytes | None], timestamp: int, opens: int | None = None) -> tuple:
    """A range tombstone marker (ClusteringPrefix.Kind ordinal); `opens` is a boundary's next deletion."""
    return (kind, tuple(clustering), timestamp, opens)


def update(
    keyspace: str,
    table: str,
    partition_key: bytes,
    *,
    partition_deletion: int | None = None,
    static: tuple | None = None,
    rows: Iterable[tuple] = (),
    bounds: Iterable[tuple] = (),
) -> Signature:
    return (keyspace, table, partition_key, partition_deletion, static, tuple(rows), tuple(bounds))


def _event_row(r: dict[str, Any]) -> tuple:
    liveness = r["liveness"]
    return row(
        r["clustering"],
        liveness=None if liveness is None else (liveness["timestamp"], liveness["ttl"]),
        deletion=None if r["deletion"] is None else r["deletion"]["timestamp"],
        cells=[
            cell(c["column"], None if c["flags"] & 1 else c["value"], c["timestamp"], c["ttl"], c["path"])
            for c in r["cells"]
        ],
        complex_deletions=[(d["column"], d["deletion"]["timestamp"]) for d in r["complex_deletions"]],
    )


def event_signature(event: dict[str, Any]) -> Signature:
    """The canonical form of a decoded raw event."""
    deletion = event["partition_deletion"]
    return update(
        event["keyspace"],
        event["table"],
        event["partition_key"],
        partition_deletion=None if deletion is None else deletion["timestamp"],
        static=None if event["static_row"] is None else _event_row(event["static_row"]),
        rows=[_event_row(r) for r in event["rows"]],
        bounds=[
            bound(
                m["kind"],
                m["clustering"],
                m["deletion"]["timestamp"],
                None if m["start_deletion"] is None else m["start_deletion"]["timestamp"],
            )
            for m in event["range_tombstones"]
        ],
    )


def multiset_difference(expected: Counter[Signature], actual: Counter[Signature]) -> str:
    """'' when equal; otherwise counts and examples of what is missing and what is unexpected."""
    missing = expected - actual
    extra = actual - expected
    if not missing and not extra:
        return ""
    return (
        f"{sum(missing.values())} expected events missing (e.g. {list(missing)[:2]}), "
        f"{sum(extra.values())} unexpected (e.g. {list(extra)[:2]})"
    )


# serialized CQL values (native protocol v4/v5): what the commit log and the raw events hold


def int_bytes(value: int) -> bytes:
    return struct.pack(">i", value)


def bigint_bytes(value: int) -> bytes:
    return struct.pack(">q", value)


def text_bytes(value: str) -> bytes:
    return value.encode()


def composite_key(*components: bytes) -> bytes:
    """A multi-column partition key: per component a u16 length, the bytes and an end-of-component 0."""
    return b"".join(struct.pack(">H", len(c)) + c + b"\0" for c in components)


# ---------------------------------------------------------------------------------------------------------
# writing


@dataclass(slots=True)
class Write:
    """One statement execution and the partition updates it must publish (none for a non-CDC table)."""

    statement: str
    params: tuple[Any, ...]
    expected: list[Signature] = field(default_factory=list)


def execute_writes(
    session: Any, writes: Sequence[Write], *, concurrency: int = 48, prepared: dict[str, Any] | None = None
) -> None:
    """Run the writes with one prepared statement per distinct CQL text; every execution must succeed.

    `prepared` caches statements across calls.
    """
    cache = {} if prepared is None else prepared
    by_statement: dict[str, list[tuple[Any, ...]]] = {}
    for w in writes:
        by_statement.setdefault(w.statement, []).append(w.params)
    for text, params in by_statement.items():
        if text not in cache:
            cache[text] = session.prepare(text)
        prepared_statement = cache[text]
        results = execute_concurrent_with_args(
            session, prepared_statement, params, concurrency=concurrency, raise_on_first_error=True
        )
        failed = [r for r in results if not r.success]
        assert not failed, f"{len(failed)} writes of {text!r} failed, first: {failed[0].result_or_exc}"


class LoadThread(threading.Thread):
    """Runs writes in the background, in chunks, optionally paced; `progress` counts the writes done.

    `stop()` ends it after the current chunk: `writes[:progress]` is then exactly what was written. As a
    context manager it starts on entry and is stopped on exit, so a failing test leaves no load behind.
    """

    def __init__(
        self, session: Any, writes: Sequence[Write], *, chunk: int = 500, per_second: float | None = None
    ) -> None:
        super().__init__(name="cql-load", daemon=True)
        self.session = session
        self.writes = writes
        self.chunk = chunk
        self.per_second = per_second
        self.progress = 0
        self.error: BaseException | None = None
        self.started_at = self.finished_at = 0.0
        self._stop_requested = threading.Event()

    def run(self) -> None:
        prepared: dict[str, Any] = {}
        self.started_at = time.monotonic()
        try:
            for first in range(0, len(self.writes), self.chunk):
                if self._stop_requested.is_set():
                    break
                batch = self.writes[first : first + self.chunk]
                execute_writes(self.session, batch, prepared=prepared)
                self.progress += len(batch)
                if self.per_second:
                    ahead = self.started_at + self.progress / self.per_second - time.monotonic()
                    if ahead > 0:
                        self._stop_requested.wait(ahead)
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished_at = time.monotonic()

    def __enter__(self) -> LoadThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.join(60)

    @property
    def done(self) -> bool:
        return not self.is_alive()

    def stop(self) -> None:
        self._stop_requested.set()

    def finish(self, timeout_s: float = 300) -> list[Write]:
        """Wait for the end; the writes done (fails if a write failed)."""
        self.join(timeout_s)
        assert not self.is_alive(), f"the load did not end within {timeout_s} s ({self.progress} writes done)"
        assert self.error is None, f"the load failed after {self.progress} writes: {self.error!r}"
        return list(self.writes[: self.progress])


def expected_counter(writes: Iterable[Write]) -> Counter[Signature]:
    return Counter(sig for w in writes for sig in w.expected)


# ---------------------------------------------------------------------------------------------------------
# a mixed workload: every kind of write a CDC table sees, each with the update it must publish

MIXED_TABLES = (
    "CREATE TABLE {ks}.kv (id int PRIMARY KEY, v text, n bigint) WITH cdc = true",
    "CREATE TABLE {ks}.events (tenant text, bucket int, ck int, s text static, payload blob, "
    "PRIMARY KEY ((tenant, bucket), ck)) WITH cdc = true",
    "CREATE TABLE {ks}.plain (id int PRIMARY KEY, v text) WITH cdc = false",
)

# ClusteringPrefix.Kind ordinals of range tombstone bounds
EXCL_END_BOUND = 0
INCL_START_BOUND = 1


def create_keyspace(
    session: Any,
    keyspace: str,
    tables: Iterable[str] = MIXED_TABLES,
    *,
    replication_factor: int | None = None,
) -> None:
    """The keyspace and its tables; by default replicated to every node, so the session's node (with
    writes at ALL) holds every write even when node1 has grown into the three-node cluster."""
    if replication_factor is None:
        replication_factor = 1 + len(list(session.execute("SELECT peer FROM system.peers")))
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}"
    )
    for statement in tables:
        session.execute(statement.format(ks=keyspace))


def mixed_writes(keyspace: str, count: int, *, seed: int, first_timestamp: int) -> list[Write]:
    """`count` writes over MIXED_TABLES: inserts (with and without TTL), updates, cell, row, range and
    partition deletions, static cells, empty values, non-CDC writes and batches mixing both kinds.

    Write i uses timestamp `first_timestamp + i`, so every expected update is distinct.
    """
    rng = random.Random(seed)
    ks = keyspace
    kinds = [
        ("kv_insert", 28), ("kv_insert_ttl", 5), ("kv_update", 14), ("kv_update_ttl", 4), ("kv_delete_cell", 3),
        ("kv_delete", 3), ("ev_insert", 24), ("ev_static", 5), ("ev_delete_row", 4), ("ev_delete_range", 3),
        ("ev_delete_partition", 2), ("plain_insert", 3), ("mixed_batch", 2),
    ]  # fmt: skip
    names = [k for k, _ in kinds]
    weights = [w for _, w in kinds]
    tenants = [f"tenant-{t}" for t in range(25)]
    writes = []
    for i in range(count):
        ts = first_timestamp + i
        kind = rng.choices(names, weights)[0]
        key = rng.randrange(3000)
        pk = int_bytes(key)
        if kind in ("kv_insert", "kv_insert_ttl", "mixed_batch"):
            v, n = f"v-{i}-{rng.randrange(10**6)}", rng.randrange(-(2**40), 2**40)
            ttl = rng.randint(600, 86_400) if kind == "kv_insert_ttl" else 0
            expected = update(ks, "kv", pk, rows=[row(
                liveness=(ts, ttl), cells=[cell("v", text_bytes(v), ts, ttl), cell("n", bigint_bytes(n), ts, ttl)]
            )])  # fmt: skip
            if kind == "kv_insert":
                w = Write(
                    f"INSERT INTO {ks}.kv (id, v, n) VALUES (?, ?, ?) USING TIMESTAMP ?", (key, v, n, ts)
                )
            elif kind == "kv_insert_ttl":
                w = Write(
                    f"INSERT INTO {ks}.kv (id, v, n) VALUES (?, ?, ?) USING TIMESTAMP ? AND TTL ?",
                    (key, v, n, ts, ttl),
                )
            else:  # one partition key, two tables, one mutation: only the CDC table's part is published
                w = Write(
                    f"BEGIN UNLOGGED BATCH INSERT INTO {ks}.kv (id, v, n) VALUES (?, ?, ?) USING TIMESTAMP ?; "
                    f"INSERT INTO {ks}.plain (id, v) VALUES (?, ?) USING TIMESTAMP ?; APPLY BATCH",
                    (key, v, n, ts, key, f"plain-{i}", ts),
                )
            w.expected.append(expected)
        elif kind == "kv_update":
            n = rng.randrange(-(2**62), 2**62)
            w = Write(f"UPDATE {ks}.kv USING TIMESTAMP ? SET n = ? WHERE id = ?", (ts, n, key))
            w.expected.append(update(ks, "kv", pk, rows=[row(cells=[cell("n", bigint_bytes(n), ts)])]))
        elif kind == "kv_update_ttl":
            v, ttl = f"ttl-{i}", rng.randint(60, 3600)
            w = Write(f"UPDATE {ks}.kv USING TIMESTAMP ? AND TTL ? SET v = ? WHERE id = ?", (ts, ttl, v, key))
            w.expected.append(update(ks, "kv", pk, rows=[row(cells=[cell("v", text_bytes(v), ts, ttl)])]))
        elif kind == "kv_delete_cell":
            w = Write(f"DELETE v FROM {ks}.kv USING TIMESTAMP ? WHERE id = ?", (ts, key))
            w.expected.append(update(ks, "kv", pk, rows=[row(cells=[cell("v", None, ts)])]))
        elif kind == "kv_delete":  # no clustering columns: deleting "the row" deletes the partition
            w = Write(f"DELETE FROM {ks}.kv USING TIMESTAMP ? WHERE id = ?", (ts, key))
            w.expected.append(update(ks, "kv", pk, partition_deletion=ts))
        elif kind == "plain_insert":
            w = Write(f"INSERT INTO {ks}.plain (id, v) VALUES (?, ?) USING TIMESTAMP ?", (key, f"p-{i}", ts))
        else:
            tenant, bucket = rng.choice(tenants), rng.randrange(8)
            epk = composite_key(text_bytes(tenant), int_bytes(bucket))
            where = "tenant = ? AND bucket = ?"
            if kind == "ev_insert":
                ck, payload = rng.randrange(200), rng.randbytes(rng.choice((0, 1, 16, 100, 400)))
                w = Write(
                    f"INSERT INTO {ks}.events (tenant, bucket, ck, payload) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
                    (tenant, bucket, ck, payload, ts),
                )
                w.expected.append(update(ks, "events", epk, rows=[
                    row([int_bytes(ck)], liveness=(ts, 0), cells=[cell("payload", payload, ts)])
                ]))  # fmt: skip
            elif kind == "ev_static":
                s = f"static-{i}"
                w = Write(
                    f"UPDATE {ks}.events USING TIMESTAMP ? SET s = ? WHERE {where}", (ts, s, tenant, bucket)
                )
                w.expected.append(update(ks, "events", epk, static=row(cells=[cell("s", text_bytes(s), ts)])))
            elif kind == "ev_delete_row":
                ck = rng.randrange(200)
                w = Write(
                    f"DELETE FROM {ks}.events USING TIMESTAMP ? WHERE {where} AND ck = ?",
                    (ts, tenant, bucket, ck),
                )
                w.expected.append(update(ks, "events", epk, rows=[row([int_bytes(ck)], deletion=ts)]))
            elif kind == "ev_delete_range":
                low = rng.randrange(190)
                high = low + rng.randint(1, 10)
                w = Write(
                    f"DELETE FROM {ks}.events USING TIMESTAMP ? WHERE {where} AND ck >= ? AND ck < ?",
                    (ts, tenant, bucket, low, high),
                )
                w.expected.append(update(ks, "events", epk, bounds=[
                    bound(INCL_START_BOUND, [int_bytes(low)], ts), bound(EXCL_END_BOUND, [int_bytes(high)], ts)
                ]))  # fmt: skip
            else:
                w = Write(f"DELETE FROM {ks}.events USING TIMESTAMP ? WHERE {where}", (ts, tenant, bucket))
                w.expected.append(update(ks, "events", epk, partition_deletion=ts))
        writes.append(w)
    return writes
