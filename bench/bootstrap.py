"""Bootstrap throughput: rows/s read from Cassandra with write times, built into raw events and published,
for this checkout and (``--baseline``) an earlier one, measured side by side in one run.

Uses running services (`cdc infra up`; their ports from the CDC_* variables, or --kafka/--cassandra):
writes --rows rows to a keyspace of its own (`bench_boot_<id>.readings`, --rows-per-partition rows per
partition, one row in ten with a TTL; --table ten: the 10-column table of the other benchmarks, uuid
partition key, timestamp clustering and 8 regular cells; --table collections: int keys, a text, a double,
a set<text> of 2 and a map<text, int> of 2, 6 cells) and creates a raw topic of its own (12 partitions). Then, --rounds times, alternating, each checkout in a process of its own (its own Spark JVM
on local[2]):

  build      the raw-event building of the whole table in one process, no Spark: the scan's rows
             read first, then timed (CPU s of that process)
  bootstrap  `bootstrap_table` twice in one SparkSession, the job as `cdc pipeline bootstrap` runs it
             (scan, build, publish); the first includes the Python workers' start, the second
             is reported as the rate (no worker consumes the topic)

With --build-only, only the build alone, for this checkout: the Python encoder (pipeline.core python) and the
native one (cdc_native.SnapshotEncoder) alternating --rounds times in one process over the same result
pages (the Python one cuts their rows first, as the bootstrap does), CPU s of each run (no Spark, no Kafka
topic written).

With --master spark://HOST:PORT (the cluster of `cdc infra up --spark`), this checkout also runs the
bootstrap there with spark.cores.max 1 and then 2 (one executor on one 1-core worker, then one on each
of two). The keyspace and topic are dropped at the end.

    .venv/bin/python bench/bootstrap.py --rows 30000 --baseline /tmp/base --master spark://127.0.0.1:7077 \\
        --out bench/bootstrap.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import decimal
import inspect
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

from report_analysis import analysis_of

REPO = Path(__file__).resolve().parents[1]
RAW_PARTITIONS = 12
ANALYSIS_HEADING = "What the numbers say:"


def _env_port(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


async def _topic(bootstrap: str, name: str, create: bool) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if create:
            await admin.create_topics([NewTopic(name, RAW_PARTITIONS, 1)])
        else:
            await admin.delete_topics([name])
    finally:
        await admin.close()


TABLES = {
    # the 10-column table of the other benchmarks (bench/decoder_throughput.py): 8 regular cells a row
    "ten": (
        "(device uuid, at timestamp, kind text, value double, count int, total bigint, ok boolean, "
        "note text, price decimal, tags text, PRIMARY KEY (device, at))",
        "device, at, kind, value, count, total, ok, note, price, tags",
        8,
    ),
    # collections: a set and a map of 2 elements each, 6 cells a row
    "collections": (
        "(pk int, ck int, name text, value double, tags set<text>, attrs map<text, int>, PRIMARY KEY (pk, ck))",
        "pk, ck, name, value, tags, attrs",
        6,
    ),
}


TABLE_TEXT = {
    "ten": "uuid, timestamp, text, double, int, bigint, boolean, text, decimal, text",
    "collections": "int, int, text, double, set<text> of 2, map<text, int> of 2",
}


def _row(table: str, i: int, per_partition: int) -> tuple[Any, ...]:
    if table == "collections":
        return (
            i // per_partition,
            i % per_partition,
            f"sensor {i}",
            i * 0.5,
            {f"t{i % 7}", "all"},
            {"a": i, "b": 1},
        )
    device = uuid.UUID(int=(i // per_partition) * 0x9E3779B97F4A7C15 % (1 << 128))
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=i % per_partition)
    return (
        device, at, f"kind-{i % 13}", i * 0.25, i % 1000, i * 1_000_003, bool(i % 2), f"note {i}",
        decimal.Decimal(i) / 100, f"tag-{i % 7},tag-{i % 11}",
    )  # fmt: skip


def write_rows(session: Any, keyspace: str, table: str, rows: int, per_partition: int) -> float:
    from cassandra.concurrent import execute_concurrent_with_args

    ddl, columns, _ = TABLES[table]
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.readings {ddl}")
    marks = ", ".join("?" for _ in columns.split(","))
    plain = session.prepare(f"INSERT INTO {keyspace}.readings ({columns}) VALUES ({marks})")
    ttl = session.prepare(f"INSERT INTO {keyspace}.readings ({columns}) VALUES ({marks}) USING TTL 86400")
    started = time.monotonic()
    args = [_row(table, i, per_partition) for i in range(rows)]
    execute_concurrent_with_args(session, plain, [a for i, a in enumerate(args) if i % 10], concurrency=64)
    execute_concurrent_with_args(session, ttl, [a for i, a in enumerate(args) if not i % 10], concurrency=64)
    return time.monotonic() - started


# ---------------------------------------------------------------------------------------------------------
# one measurement, in a process of its own with the checkout's modules first on the path


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The build and bootstrap of one checkout (``args.tree``), as JSON-able numbers."""
    sys.path.insert(0, str(args.tree))
    from cassandra.cluster import Cluster

    import pipeline
    from cassandra_model.system_schema import load_schema_from_session
    from pipeline.bootstrap_job import bootstrap_table
    from pipeline.cassandra_scan import scan_spec, token_ranges
    from runtime.config import CassandraConfig, CdcConfig, KafkaConfig, PipelineConfig

    host, _, port = args.cassandra.partition(":")
    cluster = Cluster([host], port=int(port))
    session = cluster.connect()
    schema = load_schema_from_session(session, [args.keyspace], with_system_schema=False).by_name(
        args.keyspace, "readings"
    )
    cluster.shutdown()
    assert schema is not None
    spark_conf = dict(item.split("=", 1) for item in args.spark_conf)
    pipeline_config: dict[str, Any] = {
        "lake_directory": Path("/nonexistent-bench-lake"),
        "bootstrap_splits": args.splits,
        "master": args.master,
    }
    if spark_conf:
        pipeline_config["spark_conf"] = spark_conf
    config = CdcConfig(
        cluster="bench",
        kafka=KafkaConfig(bootstrap_servers=args.kafka, raw_topic=args.topic, raw_partitions=RAW_PARTITIONS),
        cassandra=CassandraConfig(contact_points=[host], port=int(port)),
        pipeline=PipelineConfig(**pipeline_config),
    )
    out: dict[str, Any] = {"code": str(Path(pipeline.__file__).parent.parent)}
    spec = scan_spec(config, schema, with_write_times=True)
    if args.build_only:
        out["builds"] = _build_cores(schema, spec, token_ranges(1), args.rounds)
        return out
    if not args.master.startswith("spark://"):
        out["build_cpu_s"] = _build_cpu(schema, spec, token_ranges(1))
    from pipeline.spark_session import build_spark_session

    began = time.monotonic()
    spark = build_spark_session(config.pipeline, "bench-bootstrap")  # type: ignore[arg-type]
    out["session_s"] = time.monotonic() - began
    if not args.master.startswith("spark://"):  # a cluster's executors run the zip the driver ships
        workers = spark.sparkContext.parallelize([0], 1).mapPartitions(_code_of_worker).collect()
        if Path(workers[0]).resolve() != Path(out["code"]).resolve():
            raise SystemExit(
                f"Spark's Python workers imported the project from {workers[0]}, not {out['code']}"
            )
    runs = []
    roots = [("job", os.getpid())] + [
        (role, int(pid)) for role, _, pid in (s.partition("=") for s in args.service)
    ]
    # checkouts from the one whose tasks publish themselves on: they take the raw topic's partition count
    publishing = {"raw_partitions": RAW_PARTITIONS}
    if "raw_partitions" not in inspect.signature(bootstrap_table).parameters:
        publishing = {}
    for _ in range(2):
        before = cpu_by_role(roots)
        summary = bootstrap_table(
            spark, config, schema, published_at_ms=int(time.time() * 1000), **publishing
        )
        after = cpu_by_role(roots)
        assert summary.rows == args.rows, summary
        by_role = {role: (after[role] - before.get(role, 0.0)) * 1e6 / summary.rows for role in after}
        runs.append(
            {
                "seconds": summary.seconds,
                "rows_per_s": summary.rows_per_s,
                "events": summary.events,
                "cpu_us_per_row": sum(by_role.values()),
                "cpu_us_per_row_by_role": by_role,
            }
        )
    out["runs"] = runs
    spark.stop()
    return out


def _code_of_worker(_: Any) -> Any:
    import pipeline as worker_pipeline

    yield str(Path(worker_pipeline.__file__).parent.parent)


def _build_cpu(schema: Any, spec: Any, ranges: list[tuple[int, int]]) -> float:
    """CPU seconds of building the whole table's events in this process, after the scan (with the
    encoder ``pipeline.core: auto`` chooses, where the checkout has that choice). Where the scan hands
    whole result pages to the encoder, the build includes cutting them, which the scan did before."""
    try:
        from pipeline.cassandra_scan import scan_raw_ranges
        from pipeline.snapshot_encoder import SnapshotEncoder
    except ImportError:  # the checkout before the raw scan: decoded rows and snapshot_events
        from pipeline.cassandra_scan import scan_ranges
        from pipeline.snapshot_events import table_events

        rows = list(scan_ranges(spec, ranges))
        started = time.process_time()
        sum(len(e) for _, e in table_events(schema, rows, cluster="bench", published_at_ms=1))
        return time.process_time() - started
    import pipeline

    # asked of the checkout's files, not of an import: the installed project's editable finder would
    # answer a module the measured checkout lacks from the installed one
    tree = Path(pipeline.__file__).parent
    if "def scan_raw_pages" in (tree / "cassandra_scan.py").read_text():  # the encoder cuts the pages
        from pipeline.cassandra_scan import scan_raw_pages
        from pipeline.snapshot_core import AVAILABLE, snapshot_encoder

        pages = list(scan_raw_pages(spec, ranges))
        encoder = snapshot_encoder(schema, core=AVAILABLE, cluster="bench", published_at_ms=1)
        started = time.process_time()
        sum(len(e) for _, e in encoder.events_of_pages(pages))
        return time.process_time() - started
    raw = list(scan_raw_ranges(spec, ranges))
    if not (tree / "snapshot_core.py").exists():  # before the native encoder
        encoder: Any = SnapshotEncoder(schema, cluster="bench", published_at_ms=1)
    else:
        from pipeline.snapshot_core import AVAILABLE, snapshot_encoder

        encoder = snapshot_encoder(schema, core=AVAILABLE, cluster="bench", published_at_ms=1)
    started = time.process_time()
    sum(len(e) for _, e in encoder.events(raw))
    return time.process_time() - started


def _build_cores(
    schema: Any, spec: Any, ranges: list[tuple[int, int]], rounds: int
) -> dict[str, list[float]]:
    """CPU seconds of each build of the whole table's events, the Python and the native encoder
    alternating over the same scanned result pages (``--build-only``)."""
    from pipeline.cassandra_scan import scan_raw_pages
    from pipeline.snapshot_core import AVAILABLE, snapshot_encoder

    if AVAILABLE != "native":
        raise SystemExit("--build-only compares the encoders: build the native core first (make setup)")
    pages = list(scan_raw_pages(spec, ranges))
    out: dict[str, list[float]] = {"python": [], "native": []}
    for round_ in range(rounds):
        for core in ("python", "native") if round_ % 2 == 0 else ("native", "python"):
            encoder = snapshot_encoder(schema, core=core, cluster="bench", published_at_ms=1)
            started = time.process_time()
            events = sum(len(e) for _, e in encoder.events_of_pages(pages))
            out[core].append(time.process_time() - started)
            assert events > 0
    return out


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children of each of its threads, recursively)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found.extend(_descendants(int(child)))
    return found


def cpu_by_role(roots: list[tuple[str, int]]) -> dict[str, float]:
    """CPU seconds so far of the processes under each root (their own and their reaped children's), by
    role: Kafka and Cassandra by their root; the job's own tree and the cluster's workers split into the
    Spark JVMs (driver, executors, workers) and the Python processes (driver and Spark's Python workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for role, root in roots:
        for pid in _descendants(root):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if role in ("job", "spark worker"):
                where = "Spark JVMs" if comm == "java" else "Python"
            else:
                where = role
            totals[where] = totals.get(where, 0.0) + sum(int(f) for f in fields[11:15]) / ticks
    return totals


def _run_measure(
    tree: Path, args: argparse.Namespace, keyspace: str, topic: str, master: str, conf: list[str]
) -> dict[str, Any]:
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--measure", "--tree", str(tree),
        "--keyspace", keyspace, "--topic", topic, "--rows", str(args.rows), "--splits", str(args.splits),
        "--kafka", args.kafka, "--cassandra", args.cassandra, "--master", master,
        *(f"--spark-conf={c}" for c in conf),
        *(["--build-only", "--rounds", str(args.rounds)] if args.build_only else []),
        *(f"--service={role}={pid}" for role, pid in _service_pids(master)),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # run from the tree: Spark's Python workers start in this folder, which comes first on their path, so
    # they import the measured checkout's modules (from elsewhere they would import this checkout's, the
    # installed project, whatever the driver imported)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"measurement of {tree} ({master}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    if Path(result["code"]).resolve() != tree.resolve():
        raise SystemExit(f"the measurement of {tree} imported the project from {result['code']}")
    return result


def _service_pids(master: str) -> list[tuple[str, int]]:
    """Kafka's and Cassandra's processes (CDC_HOME's services), and on a cluster its workers (whose
    children are the executors), by role: their CPU is the job's too."""
    from infra.settings import InfraSettings
    from infra.stack import LocalStack

    stack = LocalStack(InfraSettings.from_env())
    processes = [("Kafka", stack.kafka.process), ("Cassandra", stack.node(1).process)]
    if master.startswith("spark://"):
        processes += [("spark worker", stack.spark.worker(i)) for i in (1, 2)]
    return [(role, pid) for role, pid in ((r, p.pid()) for r, p in processes) if pid is not None]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--rows-per-partition", type=int, default=10)
    parser.add_argument("--splits", type=int, default=16)
    parser.add_argument(
        "--table", choices=sorted(TABLES), default="ten",
        help="ten: the 10-column table of the other benchmarks; collections: a set and a map",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each checkout")
    parser.add_argument("--kafka", default=f"127.0.0.1:{_env_port('CDC_KAFKA_PORT', 9092)}")
    parser.add_argument("--cassandra", default=f"127.0.0.1:{_env_port('CDC_CQL_PORT', 9042)}")
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to measure beside this one")
    parser.add_argument("--master", default="local[2]", help="a spark:// master for the cluster runs")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--build-only", action="store_true",
        help="only the build alone: the Python and the native encoder alternating in one process",
    )  # fmt: skip
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=REPO, help=argparse.SUPPRESS)
    parser.add_argument("--keyspace", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--spark-conf", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--service", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print("RESULT " + json.dumps(measure(args)), flush=True)
        return 0

    sys.path.insert(0, str(REPO))
    from cassandra.cluster import Cluster

    host, _, port = args.cassandra.partition(":")
    suffix = uuid.uuid4().hex[:8]
    keyspace, topic = f"bench_boot_{suffix}", f"bench_boot_raw_{suffix}"
    cluster = Cluster([host], port=int(port))
    session = cluster.connect()
    trees = [("this checkout", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    clustered: dict[int, dict[str, Any]] = {}
    load_before = _load()
    try:
        write_s = write_rows(session, keyspace, args.table, args.rows, args.rows_per_partition)
        print(f"wrote {args.rows} rows in {write_s:.1f} s", flush=True)
        if args.build_only:
            builds = _run_measure(REPO, args, keyspace, topic, "local[2]", [])["builds"]
            print(f"builds: {json.dumps(builds)}", flush=True)
            report = _build_report(args, builds, load_before, _load())
            print(report)
            if args.out:
                args.out.write_text(report)
            return 0
        asyncio.run(_topic(args.kafka, topic, create=True))
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else list(reversed(trees))
            for name, tree in order:
                result = _run_measure(tree, args, keyspace, topic, "local[2]", [])
                results[name].append(result)
                print(f"round {round_ + 1} {name}: {json.dumps(result)}", flush=True)
        if args.master.startswith("spark://"):
            for cores in (1, 2):
                clustered[cores] = _run_measure(
                    REPO, args, keyspace, topic, args.master, [f"spark.cores.max={cores}"]
                )
                print(f"cluster, {cores} cores: {json.dumps(clustered[cores])}", flush=True)
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()
        try:
            asyncio.run(_topic(args.kafka, topic, create=False))
        except Exception as exc:  # the topic may not exist when setup failed early
            print(f"could not delete topic {topic}: {exc}")
    report = _report(args, trees, results, clustered, load_before, _load())
    print(report)
    if args.out:
        args.out.write_text(report + analysis_of(args.out, ANALYSIS_HEADING))
    return 0


def _command_and_machine(load_before: str, load_after: str) -> list[str]:
    """The report lines of this run's command and the machine it ran on, its load before and after."""
    cmd = " ".join([".venv/bin/python bench/bootstrap.py", *sys.argv[1:]])
    return [
        "```",
        cmd,
        "```",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; load "
        f"average (1, 5, 15 min) {load_before} before, {load_after} after (other work shared the machine).",
    ]


def _build_report(
    args: argparse.Namespace, builds: dict[str, list[float]], load_before: str, load_after: str
) -> str:
    lines = [
        "# bootstrap event building, Python and native encoder",
        "",
        f"`bench/bootstrap.py --build-only`: {args.rows:,} rows of the `{args.table}` table ({TABLE_TEXT[args.table]}; "
        f"{args.rows_per_partition} per partition, {TABLES[args.table][2]} cells each, one row in ten with a "
        "TTL) scanned once from one Cassandra 5.0 node as result pages (pipeline.cassandra_scan.scan_raw_pages), "
        "then built into raw events in the same process by each encoder (the Python one cuts the pages' rows "
        "first, as the bootstrap does), alternating, "
        f"{args.rounds} times each: CPU s of the build alone (no scan, no Spark, no Kafka).",
        "",
        *_command_and_machine(load_before, load_after),
        "",
        "| encoder | CPU s for the table (median) | runs | CPU µs per row | rows/s, one core |",
        "|---|---|---|---|---|",
    ]
    for core, name in (
        ("python", "Python (pipeline/snapshot_encoder.py)"),
        ("native", "native (cdc_native.SnapshotEncoder)"),
    ):
        runs = builds[core]
        m = median(runs)
        lines.append(
            f"| {name} | {m:.3f} s | {', '.join(f'{r:.3f}' for r in runs)} | {m * 1e6 / args.rows:.1f} µs | "
            f"{args.rows / m:,.0f} |"
        )
    ratio = median(builds["python"]) / median(builds["native"])
    lines += ["", f"The native encoder builds the same events with {ratio:.1f}x less CPU.", ""]
    return "\n".join(lines)


def _report(
    args: argparse.Namespace,
    trees: list[tuple[str, Path]],
    results: dict[str, list[dict[str, Any]]],
    clustered: dict[int, dict[str, Any]],
    load_before: str,
    load_after: str,
) -> str:
    lines = [
        "# bootstrap rows/s",
        "",
        f"`bench/bootstrap.py`: {args.rows:,} rows of the `{args.table}` table ({TABLE_TEXT[args.table]}; "
        f"{args.rows_per_partition} per partition, {TABLES[args.table][2]} cells each, one "
        f"row in ten with a TTL), {args.splits} token ranges, raw topic of {RAW_PARTITIONS} partitions; Kafka "
        "3.9 and one Cassandra 5.0 node on the same machine. Each run is a process of its own with its own "
        "Spark JVM; the checkouts alternate.",
        "",
        *_command_and_machine(load_before, load_after),
        "",
        "Rates are wall clock. The CPU per row is that of every process the job used while it ran (the "
        "Spark JVM and its Python workers, Cassandra, Kafka; on the cluster the executors), so it does not "
        "depend on what else ran; 2 cores divided by it is the rate the job would reach with both cores "
        "to itself. The build alone includes cutting the result pages into values where the checkout's "
        "encoder does that (before, the scan did).",
        "",
        "| checkout | build alone, one process: CPU s for the table | bootstrap on local[2], first run in "
        "the JVM | **bootstrap on local[2], second run** | its CPU per row, all processes | 2 cores / CPU "
        "per row |",
        "|---|---|---|---|---|---|",
    ]
    for name, _ in trees:
        runs = results[name]
        builds = [r["build_cpu_s"] for r in runs]
        build = median(builds)
        first = [r["runs"][0]["rows_per_s"] for r in runs]
        second = [r["runs"][1]["rows_per_s"] for r in runs]
        cpu = [r["runs"][1]["cpu_us_per_row"] for r in runs]
        lines.append(
            f"| {name} | {build:.2f} s ({args.rows / build:,.0f} rows/s); runs "
            f"{', '.join(f'{b:.2f}' for b in builds)} | "
            f"{', '.join(f'{v:,.0f}' for v in first)} rows/s | "
            f"**{median(second):,.0f} rows/s** (median of {', '.join(f'{v:,.0f}' for v in second)}) | "
            f"{median(cpu):,.0f} µs ({', '.join(f'{v:,.0f}' for v in cpu)}) | {2e6 / median(cpu):,.0f} rows/s |"
        )
    roles = ["Python", "Spark JVMs", "Cassandra", "Kafka"]
    lines += [
        "",
        "The second run's CPU per row by process (median of the rounds): the Python processes (the driver "
        "and Spark's Python workers: the scan's protocol reading and the event building), the Spark JVMs "
        "(rows from Python, the Kafka producer), Cassandra (the read with WRITETIME and TTL of every "
        "column) and the Kafka broker:",
        "",
        "| checkout | " + " | ".join(roles) + " |",
        "|---|" + "---|" * len(roles),
    ]
    for name, _ in trees:
        by_role = [r["runs"][1].get("cpu_us_per_row_by_role", {}) for r in results[name]]
        cells = [f"{median(b.get(role, 0.0) for b in by_role):,.0f} µs" for role in roles]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if clustered:
        lines += [
            "",
            f"On the standalone cluster ({args.master}, workers of 1 core and 1 GB each), this checkout, one "
            "run each:",
            "",
            "| executors of 1 core (spark.cores.max) | first run | second run | its CPU per row |",
            "|---|---|---|---|",
        ]
        for cores, result in clustered.items():
            first, second = (r["rows_per_s"] for r in result["runs"])
            cpu = result["runs"][1]["cpu_us_per_row"]
            lines.append(f"| {cores} | {first:,.0f} rows/s | {second:,.0f} rows/s | {cpu:,.0f} µs |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
