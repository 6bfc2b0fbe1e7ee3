"""Our node agent beside Debezium's Cassandra 5 connector, each on a byte-identical copy of one backlog.

Starts services of its own under --work (default $CDC_HOME/bench-agent-vs-debezium), on the CDC_* ports:
one Kafka broker and one Cassandra 5.0 node (CDC on, 8 MiB segments, periodic sync every 100 ms). For each
--backlog N (default 100,000, then 1,000,000: a stream long enough that the JVM's JIT warm-up no longer
counts):
  load     a fresh node; `bench.readings` (the 10-column table of the other benchmarks) WITH cdc = true;
           N rows written 64 at a time with no consumer running (row i as bench/agent_pipeline.py writes
           it); once the `_cdc.idx` offsets stop moving, cdc_raw is copied aside (indexes first, then
           segments) with its SHA-256: the snapshot
  runs     --rounds rounds of our agent (of --agent-tree, and of --compare-tree when given) and Debezium,
           the order alternating between rounds; each run gets a fresh copy of the snapshot (SHA-256
           checked), a fresh topic of 12 partitions created beforehand, and its copy is deleted after it.
           Before each run the script waits (at most --quiet-wait s) until the machine is under
           --quiet-percent busy, and reports the CPU other processes took during the run.
  measure  the topic's end offsets every 0.1 s: wall time from the process's start to the last event
           (events/s), its first event; the process's CPU (utime + stime, start-up included) when the last
           event showed, and once it went idle (under 20 ms of CPU in a second, 3 to 60 s after); its peak
           RSS (VmHWM) and CPU by thread just before SIGTERM; Kafka's and Cassandra's CPU over the run
  check    the whole topic read back: every event decoded, every row 0..N-1 present exactly once, every
           column equal to the value written (our raw events decoded with the driver's deserializers,
           Debezium's JSON as it is; its `price` decimal is a double by default)
Debezium runs as the standalone JVM of its jar-with-dependencies (io.debezium:debezium-connector-cassandra-5,
downloaded from Maven Central into the project's jar cache on first use) with the settings that worked in
earlier runs: Java 17 with two --add-exports, -Xmx1g, snapshot.mode=NEVER, real-time processing of the
live segment, JSON converters without schemas, offsets flushed every 200 ms (our agent's cadence);
--debezium-prop k=v adds or overrides a connector property.

    .venv/bin/python bench/agent_vs_debezium.py [--backlog 100000 --backlog 1000000] [--rounds 2]
        [--agent-tree DIR] [--compare-tree DIR] [--debezium-prop K=V ...] [--quiet-percent 25]
        [--quiet-wait 180] [--work DIR] [--keep-work] [--out bench/agent_vs_debezium.md]

A checkout's agent runs as `TREE/.venv/bin/python -m cdc agent` from TREE (this interpreter when TREE has
no .venv). Each run leaves its result.json, config and log under WORK/runs/; the snapshots and the services'
data are deleted at the end unless --keep-work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agent_pipeline import INSERT, cpu_seconds, proc_status, row, system_busy_seconds  # noqa: E402
from cassandra import cqltypes  # noqa: E402
from decoder_throughput import (  # noqa: E402
    JAVA_EXPORTS,
    JAVA_LOGBACK,
    Tree,
    analysis_of,
    cpu_model,
    create_bench_table,
    wait_quiet,
)

from runtime.service_process import ServiceProcess, free_port  # noqa: E402

PARTITIONS = 12
COLUMNS = ("device", "at", "kind", "value", "count", "total", "ok", "note", "price", "tags")
AT0 = 1_700_000_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: The driver's deserializers of bench.readings' regular columns (the check decodes our events with them)
DRIVER_TYPES = {
    "kind": cqltypes.UTF8Type, "value": cqltypes.DoubleType, "count": cqltypes.Int32Type,
    "total": cqltypes.LongType, "ok": cqltypes.BooleanType, "note": cqltypes.UTF8Type,
    "price": cqltypes.DecimalType, "tags": cqltypes.UTF8Type,
}  # fmt: skip
DEBEZIUM_HEAP = ("-Xmx1g",)
#: Connector settings that worked (see the module docstring); --debezium-prop adds to or overrides them.
DEBEZIUM_DEFAULTS = {
    "snapshot.mode": "NEVER",
    "commit.log.real.time.processing.enabled": "true",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "offset.flush.interval.ms": "200",
    "max.offset.flush.size": "1000000",
}

_t0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _t0:7.1f}s] {message}", file=sys.stderr, flush=True)


# -- what was written, and checking what came out ---------------------------------------------------


def expected_values(i: int, devices: list[uuid.UUID]) -> dict[str, Any]:
    """Row i of the backlog by column, as written."""
    return dict(zip(COLUMNS, row(i, devices[i % len(devices)]), strict=True))


def decode_agent_event(value: bytes) -> tuple[int, dict[str, Any]]:
    """(row number, column values) of one of our raw events of bench.readings; the values deserialized with
    the Cassandra driver's own codecs, not the project's."""
    from schemas.raw_event import decode_raw_event

    event = decode_raw_event(value)
    if len(event["rows"]) != 1:
        raise ValueError(f"{len(event['rows'])} rows in one event")
    body = event["rows"][0]
    if body["liveness"] is None:
        raise ValueError("an INSERT without row liveness")
    at = struct.unpack(">q", body["clustering"][0])[0]
    values: dict[str, Any] = {"device": uuid.UUID(bytes=event["partition_key"]), "at": at}
    for cell in body["cells"]:
        values[cell["column"]] = DRIVER_TYPES[cell["column"]].deserialize(cell["value"], 4)
    return at - AT0, values


def decode_debezium_event(value: bytes) -> tuple[int, dict[str, Any]]:
    """(row number, column values) of one of Debezium's JSON change events (converter without schemas)."""
    event = json.loads(value)
    if event.get("op") != "i":
        raise ValueError(f"op {event.get('op')!r}, not an insert")
    values = {
        c: cell["value"] for c, cell in event["after"].items() if isinstance(cell, dict) and c in COLUMNS
    }
    values["device"] = uuid.UUID(values["device"])
    return values["at"] - AT0, values


def same_value(written: Any, got: Any) -> bool:
    """Equal as written (a bool is not a number); a decimal that came out as a double (Debezium's default)
    compares as a double."""
    if isinstance(written, Decimal) and not isinstance(got, Decimal):
        return isinstance(got, int | float) and not isinstance(got, bool) and float(written) == got
    if isinstance(written, bool) or isinstance(got, bool):
        return type(written) is type(got) and written == got
    return bool(written == got)


@dataclass(slots=True)
class RowCheck:
    """Every row 0..rows-1 exactly once, every column as written: fed one decoded event at a time."""

    rows: int
    expected: Callable[[int], dict[str, Any]]
    seen: bytearray = field(init=False)
    records: int = 0
    undecodable: int = 0
    unknown_rows: int = 0
    duplicates: int = 0
    wrong_rows: int = 0
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seen = bytearray(self.rows)

    def _problem(self, text: str) -> None:
        if len(self.problems) < 10:
            self.problems.append(text)

    def add(self, decode: Callable[[bytes], tuple[int, dict[str, Any]]], value: bytes) -> None:
        self.records += 1
        try:
            i, got = decode(value)
        except Exception as exc:  # every way an event fails to decode is counted
            self.undecodable += 1
            self._problem(f"undecodable: {exc!r}")
            return
        if not 0 <= i < self.rows:
            self.unknown_rows += 1
            self._problem(f"row {i} was never written")
            return
        if self.seen[i]:
            self.duplicates += 1
            return
        self.seen[i] = 1
        want = self.expected(i)
        wrong = [c for c in COLUMNS if c not in got or not same_value(want[c], got[c])]
        if wrong:
            self.wrong_rows += 1
            self._problem(f"row {i}: {', '.join(f'{c}={got.get(c)!r} (wrote {want[c]!r})' for c in wrong)}")

    def summary(self) -> dict[str, Any]:
        missing = self.rows - sum(self.seen)
        faults = self.duplicates + self.wrong_rows + self.undecodable + self.unknown_rows
        return {
            "records": self.records,
            "rows_present": self.rows - missing,
            "missing": missing,
            "duplicates": self.duplicates,
            "wrong_rows": self.wrong_rows,
            "undecodable": self.undecodable,
            "unknown_rows": self.unknown_rows,
            "problems": self.problems,
            "complete_and_correct": missing == 0 and not faults,
        }


def check_text(check: dict[str, Any]) -> str:
    """One table cell: 'ok' or what is wrong."""
    if check["complete_and_correct"]:
        return f"ok: {check['rows_present']:,} rows, each once, all values as written"
    parts = [f"{check['rows_present']:,} rows"]
    for key in ("missing", "duplicates", "wrong_rows", "undecodable", "unknown_rows"):
        if check[key]:
            parts.append(f"{check[key]:,} {key.replace('_', ' ')}")
    return "FAILED: " + ", ".join(parts)


# -- /proc -------------------------------------------------------------------------------------------


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds by thread name (the JVM names its threads: C2 CompilerThre, GC Thread#0, ...)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, IndexError):
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(") ", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return dict(sorted(((k, round(v, 2)) for k, v in out.items() if v >= 0.05), key=lambda kv: -kv[1]))


# -- one measured run --------------------------------------------------------------------------------


@dataclass(slots=True)
class Watch:
    """What the topic and /proc showed while one consumer ran."""

    stop_reason: str = ""
    events: int = 0
    first_s: float | None = None
    last_s: float | None = None
    cpu_first_s: float = 0.0
    cpu_last_s: float = 0.0
    cpu_idle_s: float | None = None
    idle_at_s: float | None = None
    events_after_idle: int = 0
    services_cpu_s: dict[str, float] = field(default_factory=dict)
    machine_busy_s: float = 0.0
    timeline: list[tuple[float, int, float, int]] = field(default_factory=list)


async def watch(pid: int, exited: Callable[[], bool], bootstrap: str, topic: str, expect: int, started: float,
                services: dict[str, int | None], *, stall_s: float, timeout_s: float) -> Watch:  # fmt: skip
    """Poll the topic's end offsets every 0.1 s until `expect` records are there (or nothing new for
    stall_s after the first, the process exits, or timeout_s); then wait until the process is idle."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    w = Watch()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    services_cpu0 = {n: cpu_seconds(p) for n, p in services.items()}
    busy0 = system_busy_seconds()
    w.stop_reason = "timeout"
    try:
        while True:
            count = sum((await consumer.end_offsets(tps)).values())
            now = time.monotonic() - started
            cpu = cpu_seconds(pid)
            if count != w.events:
                w.events, w.last_s, w.cpu_last_s = count, now, cpu
                if w.first_s is None:
                    w.first_s, w.cpu_first_s = now, cpu
            if not w.timeline or now - w.timeline[-1][0] >= 1.0 or count >= expect:
                w.timeline.append((round(now, 2), count, cpu, proc_status(pid).get("VmRSS", 0)))
            if count >= expect:
                w.stop_reason = "all expected events"
                break
            if exited():
                w.stop_reason = "the process exited"
                break
            if w.last_s is not None and now - w.last_s > stall_s:
                w.stop_reason = f"no new event for {stall_s:.0f} s"
                break
            if now > timeout_s:
                break
            await asyncio.sleep(0.1)
        w.services_cpu_s = {n: cpu_seconds(p) - services_cpu0[n] for n, p in services.items()}
        w.machine_busy_s = system_busy_seconds() - busy0
        # Work after the last event (offset writes, clean-up): until under 20 ms of CPU in a second.
        previous = cpu_seconds(pid)
        for tick in range(60):
            await asyncio.sleep(1.0)
            if exited():
                break
            current = cpu_seconds(pid)
            w.cpu_idle_s = current
            if tick >= 2 and current - previous < 0.02:
                w.idle_at_s = time.monotonic() - started
                break
            previous = current
        w.events_after_idle = sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()
    return w


@dataclass(slots=True)
class Run:
    """One consumer over one copy of one backlog."""

    backlog: int
    round: int
    consumer: str
    kind: str
    tag: str
    watch: Watch = field(default_factory=Watch)
    peak_rss_mb: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    quiet_wait_s: float = 0.0
    busy_before_percent: float = 0.0
    check: dict[str, Any] = field(default_factory=dict)
    health: Any = None

    @property
    def events(self) -> int:
        return self.watch.events

    @property
    def wall_s(self) -> float:
        return self.watch.last_s or float("nan")

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.events else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return 1e6 * self.watch.cpu_last_s / self.events if self.events else float("nan")

    @property
    def streaming_cpu_us_per_event(self) -> float:
        """CPU from the first event to the last, per event: start-up (JVM, imports, connections) left out."""
        return (
            1e6 * (self.watch.cpu_last_s - self.watch.cpu_first_s) / self.events
            if self.events
            else float("nan")
        )

    @property
    def idle_cpu_us_per_event(self) -> float:
        cpu = self.watch.cpu_idle_s
        return 1e6 * cpu / self.events if self.events and cpu is not None else float("nan")

    @property
    def other_cpu_s(self) -> float:
        """Busy CPU of the whole machine during the run less the consumer, Kafka and Cassandra: this
        script's polling plus everything else on the machine."""
        w = self.watch
        return w.machine_busy_s - w.cpu_last_s - sum(w.services_cpu_s.values())


class TreeAgent(ServiceProcess):
    """`cdc agent` of one checkout, run by that checkout's interpreter from its folder."""

    def __init__(self, tree: Tree, config: dict[str, Any], workdir: Path, port: int) -> None:
        super().__init__("agent", "agent", config, workdir, port, log_format="json")
        self.tree = tree

    def command_line(self, profile_to: Path | None = None) -> list[str]:
        return [str(self.tree.python), *super().command_line(profile_to)[1:]]


# -- the benchmark -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Backlog:
    rows: int
    folder: Path
    devices: list[uuid.UUID]
    write_s: float
    segments: dict[str, int]
    indexes: dict[str, str]
    sha256: str
    table_id: str

    @property
    def bytes(self) -> int:
        return sum(self.segments.values())


def tree_digest(folder: Path) -> str:
    """SHA-256 over the folder's files in name order (name and bytes of each)."""
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        h.update(p.name.encode())
        with p.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def copy_backlog(src: Path, dst: Path) -> None:
    """Indexes first, then segments: a segment copied after its index holds at least the durable bytes."""
    dst.mkdir(parents=True)
    for p in sorted(src.glob("*_cdc.idx")):
        shutil.copyfile(p, dst / p.name)
    for p in sorted(src.glob("*.log")):
        shutil.copyfile(p, dst / p.name)


class Bench:
    def __init__(self, args: argparse.Namespace, trees: list[Tree]) -> None:
        from infra.cassandra import CassandraNode, main_cluster_spec
        from infra.kafka import KafkaBroker, broker_spec
        from infra.settings import InfraSettings

        self.args = args
        self.trees = trees
        self.work: Path = args.work
        self.settings = InfraSettings.from_env(home=self.work / "services")
        self.broker = KafkaBroker(broker_spec(self.settings), self.settings)
        self.node = CassandraNode(main_cluster_spec(self.settings, 1), self.settings)
        self.bootstrap = self.broker.spec.bootstrap
        self.runs: list[Run] = []
        self.backlogs: list[Backlog] = []
        self.debezium_jar: Path | None = None
        self.debezium_jar_sha1 = ""
        self.cassandra_version = ""
        from infra.toolchain import find_java

        self.java = str(find_java().executable)

    # -- services ------------------------------------------------------------------------------------

    def start_kafka(self) -> None:
        say(f"starting Kafka on {self.bootstrap}")
        self.broker.start()

    def fresh_node(self) -> None:
        """A node with no data: each backlog's segments hold its own rows only."""
        self.node.stop()
        shutil.rmtree(self.node.spec.root, ignore_errors=True)
        say(f"starting a fresh Cassandra node on {self.node.spec.address}:{self.node.spec.cql_port}")
        from infra.errors import PortInUseError

        deadline = time.monotonic() + 60
        while True:
            try:
                self.node.start()
                return
            except PortInUseError as exc:  # the stopped node's JVM (or a client of it) lets go of a port late
                if time.monotonic() > deadline:
                    raise
                say(f"  waiting for a port: {exc}")
                time.sleep(2)

    def down(self) -> None:
        for name, service in (("Cassandra", self.node), ("Kafka", self.broker)):
            try:
                if service.stop():
                    say(f"stopped {name}")
            except Exception as exc:  # keep stopping the others
                say(f"stopping {name} failed: {exc}")

    def service_pids(self) -> dict[str, int | None]:
        return {"Kafka": self.broker.process.pid(), "Cassandra": self.node.process.pid()}

    # -- the backlog ---------------------------------------------------------------------------------

    def load(self, rows: int) -> Backlog:
        from cassandra.concurrent import execute_concurrent_with_args

        from agents.cdc_raw import list_cdc_segments
        from infra.cql import connect

        self.fresh_node()
        cluster = connect(self.node.spec.address, self.node.spec.cql_port)
        try:
            session = cluster.connect()
            self.cassandra_version = session.execute("SELECT release_version FROM system.local").one()[0]
            table_id = create_bench_table(session)
            insert = session.prepare(INSERT)
            devices = [uuid.uuid4() for _ in range(1000)]
            say(f"writing {rows:,} rows (64 in flight, chunks of 10,000), no consumer running")
            started = time.monotonic()
            for chunk in range(0, rows, 10_000):
                params = [row(i, devices[i % 1000]) for i in range(chunk, min(rows, chunk + 10_000))]
                execute_concurrent_with_args(
                    session, insert, params, concurrency=64, raise_on_first_error=True
                )
                if chunk and chunk % 100_000 == 0:
                    say(f"  {chunk:,} rows written")
            write_s = time.monotonic() - started
        finally:
            cluster.shutdown()
        say(
            f"wrote {rows:,} rows in {write_s:.1f} s ({rows / write_s:,.0f}/s); waiting for the _cdc.idx offsets"
        )
        cdc_raw = self.node.spec.cdc_raw

        def offsets() -> dict[int, int]:
            return {
                s.name.segment_id: s.index.offset for s in list_cdc_segments(cdc_raw) if s.index is not None
            }

        time.sleep(2.0)  # 20 periodic syncs (100 ms): the indexes cover every acknowledged write
        seen = offsets()
        while True:
            time.sleep(1.0)
            again = offsets()
            if again == seen:
                break
            seen = again
        folder = self.work / f"backlog-{rows}"
        shutil.rmtree(folder, ignore_errors=True)
        copy_backlog(cdc_raw, folder / "snapshot")
        snapshot = folder / "snapshot"
        backlog = Backlog(
            rows=rows,
            folder=folder,
            devices=devices,
            write_s=write_s,
            segments={p.name: p.stat().st_size for p in sorted(snapshot.glob("*.log"))},
            indexes={p.name: " ".join(p.read_text().split()) for p in sorted(snapshot.glob("*_cdc.idx"))},
            sha256=tree_digest(snapshot),
            table_id=str(table_id),
        )
        (folder / "backlog.json").write_text(json.dumps({**asdict(backlog), "folder": str(folder),
                                                         "devices": [str(d) for d in devices]}, indent=1))  # fmt: skip
        say(f"snapshot: {backlog_line(backlog)}")
        return backlog

    def fresh_copy(self, backlog: Backlog, tag: str) -> Path:
        copy = backlog.folder / f"copy-{tag}"
        shutil.rmtree(copy, ignore_errors=True)
        copy_backlog(backlog.folder / "snapshot", copy)
        got = tree_digest(copy)
        if got != backlog.sha256:
            raise SystemExit(f"copy {copy} differs from the snapshot (sha256 {got} != {backlog.sha256})")
        return copy

    # -- runs ----------------------------------------------------------------------------------------

    def make_topic(self, topic: str) -> None:
        from runtime.config import KafkaConfig
        from runtime.kafka_topics import TopicSpec, ensure_topics

        counts = asyncio.run(
            ensure_topics(KafkaConfig(bootstrap_servers=self.bootstrap), [TopicSpec(topic, PARTITIONS)])
        )
        if counts.get(topic) != PARTITIONS:
            raise SystemExit(f"topic {topic} has {counts.get(topic)} partitions, not {PARTITIONS}")

    def drop_topic(self, topic: str) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        async def drop() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.delete_topics([topic])
            finally:
                await admin.close()

        try:
            asyncio.run(drop())
        except Exception as exc:  # only disk space is at stake
            say(f"  could not delete topic {topic}: {exc}")

    def run_dir(self, backlog: Backlog, tag: str) -> Path:
        folder = self.work / "runs" / f"{backlog.rows}" / tag
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def timeouts(self, backlog: Backlog) -> tuple[float, float]:
        """(stall, overall) seconds: generous on a loaded machine, bounded so a stuck run ends."""
        return 120.0, 300.0 + backlog.rows / 500

    def quiet(self, run: Run) -> None:
        run.quiet_wait_s, run.busy_before_percent = wait_quiet(self.args.quiet_percent, self.args.quiet_wait)
        if run.quiet_wait_s > 6:
            say(
                f"  waited {run.quiet_wait_s:.0f} s for the machine ({run.busy_before_percent:.0f}% busy at the start)"
            )

    def run_agent(self, backlog: Backlog, number: int, tree: Tree) -> Run:
        tag = f"agent-{'a' if tree is self.trees[0] else 'b'}-r{number}"
        run = Run(backlog.rows, number, f"agent ({tree.label})", "agent", tag)
        folder = self.run_dir(backlog, tag)
        copy = self.fresh_copy(backlog, tag)
        topic = f"bench.{backlog.rows}.{tag}.raw"
        port = free_port()
        config = {
            "cluster": self.settings.cluster_name,
            "kafka": {
                "bootstrap_servers": self.bootstrap,
                "raw_topic": topic,
                "schema_topic": f"{topic}.schemas",
            },
            "cassandra": {"contact_points": [self.node.spec.address], "port": self.node.spec.cql_port},
            "agent": {
                "cdc_raw_directory": str(copy),
                "state_directory": str(folder / "state"),
                "node": self.node.spec.name,
                "cdc_total_space": f"{self.node.spec.cdc_total_space_mb}MiB",
                "metrics_port": port,
            },
        }
        self.make_topic(topic)
        agent = TreeAgent(tree, config, folder, port)
        self.quiet(run)
        stall, timeout = self.timeouts(backlog)
        say(f"{backlog.rows:,} round {number}: {run.consumer} on its copy ({tree.commit})")
        agent.start(cwd=tree.path)
        pid = agent.process.pid if agent.process else 0
        try:
            run.watch = asyncio.run(watch(pid, lambda: not agent.running, self.bootstrap, topic, backlog.rows,
                                          agent.started_at, self.service_pids(), stall_s=stall, timeout_s=timeout))  # fmt: skip
            got = agent.get_json("/health", 10.0)
            run.health = got[1] if got else None
            run.peak_rss_mb = proc_status(pid).get("VmHWM", 0) / 1000
            run.threads = thread_cpu(pid)
        finally:
            run.exit_code = agent.stop(30.0)
        if run.watch.stop_reason != "all expected events":
            say(f"  the agent stopped short ({run.watch.stop_reason}):\n{agent.log_tail()}")
        self.finish(run, backlog, topic, decode_agent_event, [copy])
        return run

    def run_debezium(self, backlog: Backlog, number: int) -> Run:
        import yaml

        tag = f"debezium-r{number}"
        run = Run(
            backlog.rows, number, f"Debezium {self.settings.debezium_cassandra_version}", "debezium", tag
        )
        folder = self.run_dir(backlog, tag)
        copy = self.fresh_copy(backlog, tag)
        prefix = f"dbz_{backlog.rows}_{tag.replace('-', '_')}"
        topic = f"{prefix}.bench.readings"
        scratch = folder / "scratch"
        # The node's own cassandra.yaml, with cdc_raw at the copy and every folder the connector's offline
        # Cassandra classes create things in (system_schema and table folders, commitlog) in scratch space.
        node_yaml = yaml.safe_load((self.node.spec.conf / "cassandra.yaml").read_text())
        node_yaml.update({
            "cdc_raw_directory": str(copy),
            "commitlog_directory": str(scratch / "commitlog"),
            "data_file_directories": [str(scratch / "data")],
            "hints_directory": str(scratch / "hints"),
            "saved_caches_directory": str(scratch / "saved_caches"),
        })  # fmt: skip
        (folder / "cassandra.yaml").write_text(yaml.safe_dump(node_yaml, sort_keys=False))
        # The connector reads table schemas from the live node through the DataStax driver.
        (folder / "application.conf").write_text(
            "datastax-java-driver {\n"
            f'  basic.contact-points = ["{self.node.spec.address}:{self.node.spec.cql_port}"]\n'
            "  basic.load-balancing-policy.local-datacenter = datacenter1\n"
            "  basic.request.timeout = 20 seconds\n"
            "}\n"
        )
        props = {
            "topic.prefix": prefix,
            "cassandra.config": str(folder / "cassandra.yaml"),
            "cassandra.driver.config.file": str(folder / "application.conf"),
            "cassandra.cluster.name": self.settings.cluster_name,
            "cassandra.node.id": self.node.spec.name,
            "http.port": str(free_port()),
            "commit.log.relocation.dir": str(folder / "relocation"),
            "offset.backing.store.dir": str(folder / "offsets"),
            "kafka.producer.bootstrap.servers": self.bootstrap,
            **DEBEZIUM_DEFAULTS,
            **dict(p.split("=", 1) for p in self.args.debezium_prop),
        }
        (folder / "debezium.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.make_topic(topic)
        assert self.debezium_jar is not None
        argv = [self.java, *DEBEZIUM_HEAP, *JAVA_EXPORTS, f"-Dlogback.configurationFile={JAVA_LOGBACK}",
                "-jar", str(self.debezium_jar), str(folder / "debezium.properties")]  # fmt: skip
        (folder / "command.txt").write_text(" ".join(argv) + "\n")
        self.quiet(run)
        stall, timeout = self.timeouts(backlog)
        say(f"{backlog.rows:,} round {number}: {run.consumer} on its copy")
        with (folder / "debezium.log").open("wb") as log:
            started = time.monotonic()
            proc = subprocess.Popen(argv, cwd=folder, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        try:
            run.watch = asyncio.run(watch(proc.pid, lambda: proc.poll() is not None, self.bootstrap, topic,
                                          backlog.rows, started, self.service_pids(), stall_s=stall, timeout_s=timeout))  # fmt: skip
            run.peak_rss_mb = proc_status(proc.pid).get("VmHWM", 0) / 1000
            run.threads = thread_cpu(proc.pid)
        finally:
            # The standalone connector has no shutdown hook: SIGTERM ends the JVM (exit 143) at once.
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            run.exit_code = proc.returncode
        if run.watch.stop_reason != "all expected events":
            tail = (folder / "debezium.log").read_text(errors="replace").splitlines()[-30:]
            say(f"  Debezium stopped short ({run.watch.stop_reason}):\n" + "\n".join(tail))
        self.finish(run, backlog, topic, decode_debezium_event, [copy, scratch, folder / "relocation"])
        return run

    def finish(self, run: Run, backlog: Backlog, topic: str, decode: Callable[[bytes], tuple[int, dict[str, Any]]],
               scratch: Iterable[Path]) -> None:  # fmt: skip
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)
        say(f"  {run.events:,} events in {run.wall_s:.1f} s ({run.events_per_s:,.0f}/s), CPU {run.watch.cpu_last_s:.1f} s "
            f"({run.cpu_us_per_event:.0f} µs/event), peak RSS {run.peak_rss_mb:.0f} MB; reading the topic back")  # fmt: skip
        check = RowCheck(backlog.rows, lambda i: expected_values(i, backlog.devices))
        asyncio.run(read_topic(self.bootstrap, topic, lambda value: check.add(decode, value)))
        run.check = check.summary()
        say(f"  check: {check_text(run.check)}")
        self.drop_topic(topic)
        result = {**asdict(run), "derived": {
            "wall_s": run.wall_s, "events_per_s": run.events_per_s, "cpu_us_per_event": run.cpu_us_per_event,
            "streaming_cpu_us_per_event": run.streaming_cpu_us_per_event,
            "idle_cpu_us_per_event": run.idle_cpu_us_per_event, "other_cpu_s": run.other_cpu_s}}  # fmt: skip
        (self.work / "runs" / f"{backlog.rows}" / run.tag / "result.json").write_text(
            json.dumps(result, indent=1, default=str)
        )
        self.runs.append(run)


async def read_topic(bootstrap: str, topic: str, each: Callable[[bytes], None]) -> None:
    """Every record of the topic's partitions, from the beginning to the end offsets, to `each`."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 2**20, fetch_max_bytes=64 * 2**20)  # fmt: skip
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        while True:
            behind = [tp for tp in tps if await consumer.position(tp) < end[tp]]
            if not behind:
                return
            batches = await consumer.getmany(*behind, timeout_ms=1000, max_records=20_000)
            for messages in batches.values():
                for message in messages:
                    each(message.value or b"")
    finally:
        await consumer.stop()


# -- the report --------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    got = [v for v in values if v == v]  # NaN left out
    return statistics.median(got) if got else float("nan")


def span(values: list[float], fmt: str) -> str:
    """'median (min-max)', or the one value."""
    got = [v for v in values if v == v]
    if not got:
        return "-"
    if len(got) == 1:
        return format(got[0], fmt)
    return f"{format(statistics.median(got), fmt)} ({format(min(got), fmt)}-{format(max(got), fmt)})"


def cpu_ratios(runs: list[Run], top: str, bottom: str) -> list[float]:
    """Per round: consumer `top`'s CPU per event (until its last event) over consumer `bottom`'s."""
    out = []
    for number in sorted({r.round for r in runs}):
        a = [r for r in runs if r.round == number and r.consumer == top and r.events]
        b = [r for r in runs if r.round == number and r.consumer == bottom and r.events]
        if a and b:
            out.append(a[0].cpu_us_per_event / b[0].cpu_us_per_event)
    return out


def ratio_line(runs: list[Run], top: str, bottom: str) -> list[str]:
    ratios = cpu_ratios(runs, top, bottom)
    if not ratios:
        return []
    return [
        f"- {top} / {bottom}, CPU per event, same round: {', '.join(f'{x:.2f}' for x in ratios)} "
        f"(median {median(ratios):.2f})"
    ]


def run_rows(runs: list[Run]) -> list[str]:
    lines = [
        "| round | consumer | events | wall s | events/s | first event s | CPU s | CPU µs/event | streaming CPU "
        "µs/event | CPU s until idle | peak RSS MB | Kafka CPU s | Cassandra CPU s | other CPU s | check |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        w = r.watch
        idle = f"{w.cpu_idle_s:.1f}" if w.cpu_idle_s is not None else "-"
        if w.idle_at_s is None and w.cpu_idle_s is not None:
            idle += " (not idle)"
        lines.append(
            f"| {r.round} | {r.consumer} | {r.events:,} | {r.wall_s:.1f} | {r.events_per_s:,.0f} | "
            f"{w.first_s or float('nan'):.1f} | {w.cpu_last_s:.1f} | {r.cpu_us_per_event:.0f} | "
            f"{r.streaming_cpu_us_per_event:.0f} | {idle} | {r.peak_rss_mb:.0f} | "
            f"{w.services_cpu_s.get('Kafka', 0):.1f} | {w.services_cpu_s.get('Cassandra', 0):.1f} | "
            f"{r.other_cpu_s:.1f} | {check_text(r.check) if r.check else '-'} |"
        )
    return lines


def summary_rows(runs: list[Run]) -> list[str]:
    lines = [
        "| consumer | runs | events/s | CPU µs/event | streaming CPU µs/event | CPU µs/event until idle | "
        "peak RSS MB | all complete and correct |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for consumer in dict.fromkeys(r.consumer for r in runs):
        mine = [r for r in runs if r.consumer == consumer]
        ok = all(r.check.get("complete_and_correct") for r in mine)
        lines.append(
            f"| {consumer} | {len(mine)} | {span([r.events_per_s for r in mine], ',.0f')} | "
            f"{span([r.cpu_us_per_event for r in mine], '.0f')} | "
            f"{span([r.streaming_cpu_us_per_event for r in mine], '.0f')} | "
            f"{span([r.idle_cpu_us_per_event for r in mine], '.0f')} | {span([r.peak_rss_mb for r in mine], '.0f')} | "
            f"{'yes' if ok else 'NO'} |"
        )
    return lines


def backlog_line(backlog: Backlog) -> str:
    """How the backlog was made and what it holds."""
    durable = sum(int(v.split()[0]) for v in backlog.indexes.values() if v)
    completed = sum("COMPLETED" in v for v in backlog.indexes.values())
    spare = len(backlog.segments) - len(backlog.indexes)
    return (
        f"{backlog.rows:,} rows written in {backlog.write_s:.1f} s ({backlog.rows / backlog.write_s:,.0f}/s): "
        f"{durable / 1e6:.1f} MB of durable commit log in {len(backlog.indexes)} segments with a `_cdc.idx` "
        f"({completed} COMPLETED, the live one read up to its durable offset)"
        + (f", beside {spare} preallocated without one" if spare else "")
        + f"; {len(backlog.segments)} files, {backlog.bytes / 1e6:.1f} MB, SHA-256 `{backlog.sha256[:16]}`."
    )


def thread_lines(run: Run, top: int = 8) -> str:
    return ", ".join(f"{name} {cpu:.1f}" for name, cpu in list(run.threads.items())[:top])


def report(bench: Bench, meta: dict[str, Any]) -> str:
    s = bench.settings
    props = {
        **DEBEZIUM_DEFAULTS,
        **dict(p.split("=", 1) for p in bench.args.debezium_prop),
    }
    lines = [
        "# Our node agent beside Debezium's Cassandra 5 connector, on one backlog",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Measured {meta['date']} on a {meta['cores']}-core machine ({meta['cpu']}), shared with other work: "
        f"load average before {meta['load_before']}, after {meta['load_after']}; each run's `other CPU s` is what "
        "the rest of the machine (this script's polling included) used during it. Before each run the script "
        f"waited up to {bench.args.quiet_wait:.0f} s for the machine to be under {bench.args.quiet_percent:.0f}% busy.",
        "",
        "## Set-up",
        "",
        f"- **Services**, started by the benchmark: Cassandra {bench.cassandra_version}, one node, CDC on, "
        f"`commitlog_sync: periodic` every {s.commitlog_sync_period_ms} ms, {s.commitlog_segment_size_mb} MiB "
        f"segments, `storage_compatibility_mode: CASSANDRA_4`; Kafka {s.kafka_version}, one KRaft broker. A fresh "
        "node for each backlog.",
        "- **Backlog**: N rows into `bench.readings` (10 columns: uuid, timestamp, text, double, int, bigint, "
        "boolean, text, decimal, text; 1,000 partitions), 64 writes in flight, no consumer running; cdc_raw "
        "copied once when the `_cdc.idx` offsets stopped moving, and each run consumed its own byte-identical "
        "copy (SHA-256 checked). Both consumers wrote to a topic of 12 partitions created beforehand.",
        "- **Our agent**: `cdc agent` with default settings, run by each checkout's own interpreter:",
        "",
        "| checkout | commit | native core |",
        "|---|---|---|",
        *(f"| {t.label} | {t.commit} | {meta['native'].get(t.label, '-')} |" for t in bench.trees),
        "",
    ]
    if bench.debezium_jar is not None:
        lines += [
            f"- **Debezium**: `io.debezium:debezium-connector-cassandra-5:{s.debezium_cassandra_version}`, "
            f"jar-with-dependencies (sha1 `{bench.debezium_jar_sha1}`), the standalone JVM: `java "
            f"{' '.join(DEBEZIUM_HEAP)} {' '.join(JAVA_EXPORTS)} -jar ... debezium.properties` on Java "
            f"{meta['java']}, with the node's own cassandra.yaml (cdc_raw at the copy, data folders in scratch "
            "space), a DataStax driver config pointing at the node, and these properties beside the required ones "
            "(`topic.prefix`, `cassandra.*`, `http.port`, `commit.log.relocation.dir`, `offset.backing.store.dir`, "
            "`kafka.producer.bootstrap.servers`):",
            "",
            "```",
            *(f"{k}={v}" for k, v in props.items()),
            "```",
            "",
        ]
    lines += [
        "Columns: **wall s** from the process's start to the poll (every 0.1 s, the topic's end offsets) that saw "
        "the last event; **events/s** = events / wall; **CPU s** = utime + stime of the process at that poll, "
        "start-up included, and **CPU µs/event** = CPU s / events; **streaming CPU µs/event** counts only from "
        "the first event to the last; **CPU s until idle** once the process used under 20 ms of CPU in a "
        "second after the last event (Debezium's offset writer, our agent's clean-up); **peak RSS** = VmHWM "
        "before SIGTERM; **check** = the whole topic read back: each row once, every column as written.",
    ]
    for backlog in bench.backlogs:
        runs = [r for r in bench.runs if r.backlog == backlog.rows]
        lines += [
            "",
            f"## Backlog of {backlog.rows:,} rows",
            "",
            backlog_line(backlog),
            "",
            "Every run, in the order run:",
            "",
            *run_rows(runs),
            "",
            "Medians (range in brackets):",
            "",
            *summary_rows(runs),
            "",
        ]
        agents = [f"agent ({t.label})" for t in bench.trees]
        debezium = next((r.consumer for r in runs if r.kind == "debezium"), None)
        for consumer in agents:
            lines += ratio_line(runs, consumer, debezium) if debezium else []
        if len(agents) == 2:
            lines += ratio_line(runs, agents[1], agents[0])
        for kind in ("debezium", "agent"):
            last = [r for r in runs if r.kind == kind and r.threads]
            if last:
                lines.append(f"- CPU s by thread at the end, {last[-1].consumer} round {last[-1].round}: "
                             f"{thread_lines(last[-1])}")  # fmt: skip
    return "\n".join(lines) + "\n"


# -- main --------------------------------------------------------------------------------------------


def round_order(number: int, names: list[str]) -> list[str]:
    """As given in odd rounds, reversed in even ones: each consumer goes first as often as the others."""
    return list(names) if number % 2 == 1 else list(reversed(names))


def native_note(tree: Tree, module: str) -> str:
    """Whether the checkout's interpreter imports the native core's module."""
    done = subprocess.run([str(tree.python), "-c", f"import {module}"], cwd=tree.path, capture_output=True,
                          text=True)  # fmt: skip
    return f"`{module}` imports" if done.returncode == 0 else f"none (`import {module}` fails)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    default_work = Path(os.environ.get("CDC_HOME", str(Path.home() / ".local/state/cassandra-cdc")))
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backlog", type=int, action="append", help="rows of a backlog (repeatable; default "
                        "100000 and 1000000)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="rounds per backlog, the order alternating")
    parser.add_argument(
        "--agent-tree", type=Path, default=REPO, help="the checkout whose agent runs (default: this)"
    )
    parser.add_argument(
        "--compare-tree", type=Path, help="a second checkout whose agent runs in the same rounds"
    )
    parser.add_argument(
        "--no-debezium", action="store_true", help="only the agents (e.g. to compare two trees)"
    )
    parser.add_argument("--debezium-prop", action="append", default=[], metavar="K=V",
                        help="add or override a Debezium connector property")  # fmt: skip
    parser.add_argument(
        "--native-module", default="cdc_native", help="the native core's module, for the report"
    )
    parser.add_argument(
        "--quiet-percent", type=float, default=25.0, help="start a run when the machine is under this %% busy"
    )
    parser.add_argument("--quiet-wait", type=float, default=180.0, help="but wait at most this many seconds")
    parser.add_argument("--work", type=Path, default=default_work / "bench-agent-vs-debezium",
                        help="services, backlogs and run folders (default $CDC_HOME/bench-agent-vs-debezium)")  # fmt: skip
    parser.add_argument("--keep-work", action="store_true", help="keep the snapshots and the services' data")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    args = parser.parse_args(argv)
    args.backlog = args.backlog or [100_000, 1_000_000]
    if args.rounds < 1 or any(n < 1 for n in args.backlog):
        parser.error("--rounds and --backlog must be >= 1")
    for p in args.debezium_prop:
        if "=" not in p:
            parser.error(f"--debezium-prop {p!r}: expected KEY=VALUE")
    return args


def shown_command(argv: list[str], paths: dict[str, str]) -> str:
    text = " ".join([".venv/bin/python bench/agent_vs_debezium.py", *argv])
    for path, placeholder in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, placeholder)
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.work = args.work.resolve()
    trees = [Tree.of("this checkout" if args.agent_tree.resolve() == REPO else "agent tree", args.agent_tree)]
    if args.compare_tree is not None:
        trees.append(Tree.of("compare tree", args.compare_tree))
    placeholders = {str(args.agent_tree): "TREE", str(args.work): "WORK"}
    if args.compare_tree is not None:
        placeholders[str(args.compare_tree)] = "OTHER_TREE"
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    bench = Bench(args, trees)
    if not args.no_debezium:
        from infra.artifacts import ensure_debezium_cassandra

        bench.debezium_jar = ensure_debezium_cassandra(bench.settings)
        bench.debezium_jar_sha1 = hashlib.sha1(bench.debezium_jar.read_bytes()).hexdigest()
    java_version = subprocess.run([bench.java, "-version"], capture_output=True, text=True).stderr.split('"')[
        1
    ]
    args.work.mkdir(parents=True, exist_ok=True)
    say(f"work folder {args.work}; load average {load_before}")
    try:
        bench.start_kafka()
        for rows in args.backlog:
            backlog = bench.load(rows)
            bench.backlogs.append(backlog)
            names = [t.label for t in trees] + ([] if args.no_debezium else ["debezium"])
            for number in range(1, args.rounds + 1):
                for name in round_order(number, names):
                    if name == "debezium":
                        bench.run_debezium(backlog, number)
                    else:
                        bench.run_agent(backlog, number, next(t for t in trees if t.label == name))
            if not args.keep_work:
                shutil.rmtree(backlog.folder / "snapshot", ignore_errors=True)
    finally:
        bench.down()
        if not args.keep_work:
            shutil.rmtree(bench.settings.home, ignore_errors=True)
    meta = {
        "command": shown_command(argv, placeholders),
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "java": java_version,
        "load_before": load_before,
        "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "native": {t.label: native_note(t, args.native_module) for t in trees},
    }
    text = report(bench, meta) + analysis_of(args.out)
    print(text)
    if args.out:
        args.out.write_text(text)
    say(f"run folders (results, configs, logs) in {args.work / 'runs'}")
    return 0 if all(r.check.get("complete_and_correct") for r in bench.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
