"""Where a small pipeline job's time goes: `cdc pipeline bootstrap` of a few hundred rows and one
`cdc pipeline lake --once` of a few dozen changes, run as a user runs them.

Uses the running services of CDC_HOME (`cdc infra up`, or `cdc infra up --secure`: Kafka on SASL_SSL,
Cassandra with a login and TLS; the config then names the local CA and password files as a user's would).
It creates a CDC table `bench_small_<id>.orders` with --rows rows, the agents' raw and schema topics (the
table's schema event on it, as an agent writes it) and a clean topic with --changes JSON change events (as a
worker writes them). Then, --runs times, each job is a `cdc` process of its own: the bootstrap, then the lake
job into a new lake directory (so its first micro-batch creates the Delta table, as a new user's does).
The jobs print where their time went (pipeline/job_phases.py); the table shows the median of each phase.

    .venv/bin/python bench/pipeline_small_jobs.py --rows 523 --changes 47 --runs 3 --out bench/pipeline_small_jobs.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import decimal
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

import yaml
from report_analysis import analysis_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka.admin import NewTopic  # noqa: E402

from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from cdc.demo.table import connect_cluster  # noqa: E402
from cdc.local_security import cassandra_config, kafka_config, local_material, with_security  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from infra.stack import LocalStack  # noqa: E402
from runtime.kafka_clients import make_admin, make_producer, start_kafka_client  # noqa: E402
from schemas.change_event import ChangeSource, clean_topic_name  # noqa: E402
from schemas.change_json import JsonChangeCodec  # noqa: E402
from schemas.schema_event import schema_event  # noqa: E402

TABLE = "orders"
COLUMNS = "(id bigint PRIMARY KEY, customer text, amount decimal, qty int, placed timestamp, tags set<text>, note text)"
ANALYSIS_HEADING = "What the numbers say:"
PART = re.compile(r"([^,]+?) (\d+\.\d) s(?:, |$)")
PHASES = re.compile(r"^(?P<job>bootstrap|lake): (?P<total>[\d.]+) s: (?P<parts>.+)$")


def _parse_parts(parts: str) -> dict[str, float]:
    return {name: float(seconds) for name, seconds in PART.findall(parts)}


def phase_times(output: str, job: str) -> dict[str, float]:
    """{phase: seconds, "total": seconds} from the last ``<job>: N s: a 1.0 s, b 2.0 s`` line of a run."""
    for line in reversed(output.splitlines()):
        match = PHASES.match(line.strip())
        if match and match["job"] == job:
            return {"total": float(match["total"]), **_parse_parts(match["parts"])}
    raise SystemExit(f"no phase line from the {job} job in its output:\n{output[-3000:]}")


async def _topics(kafka: Any, topics: list[NewTopic], delete: list[str] | None = None) -> None:
    admin = make_admin(kafka)
    await start_kafka_client(admin, kafka)
    try:
        if delete:
            await admin.delete_topics(delete)
        else:
            await admin.create_topics(topics)
    finally:
        await admin.close()


async def _publish(kafka: Any, records: list[tuple[str, bytes, bytes | None]]) -> None:
    producer = make_producer(kafka, linger_ms=5)
    await start_kafka_client(producer, kafka)
    try:
        for topic, key, value in records:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def prepare(session: Any, keyspace: str, rows: int) -> str:
    """The table with ``rows`` rows; its id."""
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.{TABLE} {COLUMNS} WITH cdc = true")
    insert = session.prepare(
        f"INSERT INTO {keyspace}.{TABLE} (id, customer, amount, qty, placed, tags, note) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    for i in range(rows):
        placed = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
        session.execute(
            insert, (i, f"customer-{i % 97}", decimal.Decimal(i) / 100, i % 50, placed, {"a"}, "v1")
        )
    found = session.execute(
        "SELECT id FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (keyspace, TABLE)
    ).one()
    return str(found[0])


def clean_changes(keyspace: str, table_id: str, count: int) -> list[tuple[bytes, bytes | None]]:
    """``count`` JSON change events of the table, as workers write them: an insert of each of two thirds of
    the keys, then updates of the first keys."""
    catalog = load_schema_from_cql(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}};\n"
        f"CREATE TABLE {keyspace}.{TABLE} {COLUMNS} WITH ID = {table_id} AND cdc = true;"
    )
    schema = catalog.by_name(keyspace, TABLE)
    assert schema is not None
    codec = JsonChangeCodec()
    keys = max(1, count * 2 // 3)
    images: dict[int, dict[str, Any]] = {}
    out: list[tuple[bytes, bytes | None]] = []
    for n in range(count):
        key = n if n < keys else n - keys
        before = images.get(key)
        after = {
            "id": key, "customer": f"customer-{key % 97}", "amount": decimal.Decimal(n) / 100, "qty": n % 50,
            "placed": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=n), "tags": ["a"],
            "note": f"version {n}",
        }  # fmt: skip
        source = ChangeSource("bench", keyspace, TABLE, 1_700_000_000_000_000 + n, "node1", 1, n)
        op = "u" if before is not None else "c"
        envelope = {"before": before, "after": after, "op": op, "source": source.as_dict(n), "ts_ms": n}
        out.append((codec.encode_key(schema, {"id": key}), codec.encode_value(schema, envelope)))
        images[key] = after
    return out


def _pipeline_section(section: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """``section`` with each ``KEY=VALUE`` (``spark_conf.NAME=VALUE`` into its spark_conf) set in it."""
    for item in settings:
        key, _, value = item.partition("=")
        if key.startswith("spark_conf."):
            section.setdefault("spark_conf", {})[key.removeprefix("spark_conf.")] = value
        else:
            section[key] = yaml.safe_load(value)
    return section


def run_job(cmd: list[str], job: str) -> dict[str, float]:
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return {"process wall": wall, **phase_times(done.stdout, job)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=523)
    parser.add_argument("--changes", type=int, default=47)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--pipeline", action="append", default=[], metavar="KEY=VALUE",
        help="a pipeline config key for both jobs (e.g. bootstrap_splits=4, spark_conf.spark.eventLog.enabled=true)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    stack = LocalStack(InfraSettings.from_env())
    material = local_material(stack)
    host = "127.0.0.1"
    kafka = kafka_config(material, bootstrap_servers=stack.kafka.spec.bootstrap)
    cassandra = cassandra_config(material, contact_points=[host], port=stack.settings.cql_port)
    suffix = uuid.uuid4().hex[:8]
    keyspace = f"bench_small_{suffix}"
    raw, schemas, prefix = f"bench_small_raw_{suffix}", f"bench_small_schemas_{suffix}", f"bsmall{suffix}"
    clean = clean_topic_name(prefix, keyspace, TABLE)
    work = Path(tempfile.mkdtemp(prefix="cdc-small-jobs-"))
    cluster = connect_cluster(cassandra)
    session = cluster.connect()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    results: dict[str, list[dict[str, float]]] = {"bootstrap": [], "lake": []}
    try:
        table_id = prepare(session, keyspace, args.rows)
        ddl = f"CREATE TABLE {keyspace}.{TABLE} {COLUMNS} WITH ID = {table_id} AND cdc = true;"
        compact = {"cleanup.policy": "compact"}
        asyncio.run(
            _topics(
                kafka,
                [NewTopic(raw, 12, 1), NewTopic(schemas, 1, 1, topic_configs=compact), NewTopic(clean, 4, 1)],
            )
        )
        event = schema_event("bench", keyspace, TABLE, table_id, cdc=True, dropped=False, cql=ddl)
        records = [(schemas, event.key, event.encode())] + [
            (clean, key, value) for key, value in clean_changes(keyspace, table_id, args.changes)
        ]
        asyncio.run(_publish(kafka, records))
        base = {
            "cluster": "bench",
            "kafka": {
                "bootstrap_servers": stack.kafka.spec.bootstrap,
                "raw_topic": raw,
                "schema_topic": schemas,
            },
            "cassandra": {"contact_points": [host], "port": stack.settings.cql_port},
        }
        cdc = str(Path(sys.executable).parent / "cdc")
        for n in range(args.runs):
            lake = work / f"lake-{n}"
            config = with_security(
                {
                    **base,
                    "pipeline": {
                        "lake_directory": str(lake),
                        "clean_topic_prefix": prefix,
                        "master": args.master,
                    },
                },
                material,
            )
            path = work / f"config-{n}.yaml"
            path.write_text(yaml.safe_dump(config))
            for job, extra in (("bootstrap", []), ("lake", ["--once"])):
                result = run_job([cdc, "pipeline", job, "--config", str(path), *extra], job)
                results[job].append(result)
                print(f"run {n + 1} {job}: {result}", flush=True)
            shutil.rmtree(lake, ignore_errors=True)
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()
        try:
            asyncio.run(_topics(kafka, [], delete=[raw, schemas, clean]))
        except Exception as exc:  # the topics may not exist when setup failed early
            print(f"could not delete the topics: {exc}")
        shutil.rmtree(work, ignore_errors=True)
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    report = _report(args, material is not None, results, load_before, load_after)
    print(report)
    if args.out:
        args.out.write_text(report + analysis_of(args.out, ANALYSIS_HEADING))
    return 0


def _report(
    args: argparse.Namespace,
    secure: bool,
    results: dict[str, list[dict[str, float]]],
    load_before: str,
    load_after: str,
) -> str:
    cmd = " ".join([".venv/bin/python bench/pipeline_small_jobs.py", *sys.argv[1:]])
    services = (
        "Kafka on SASL_SSL (SCRAM-SHA-512, mutual TLS) and Cassandra with a login and TLS (`cdc infra up --secure`)"
        if secure
        else "plaintext Kafka and Cassandra (`cdc infra up`)"
    )
    lines = [
        "# small pipeline jobs: where the time goes",
        "",
        f"`bench/pipeline_small_jobs.py`: `cdc pipeline bootstrap` of a {args.rows}-row table and "
        f"`cdc pipeline lake --once` of {args.changes} clean changes into a new lake, on {args.master}"
        f"{''.join(f', pipeline.{item}' for item in args.pipeline)}, "
        f"against {services}: one Kafka 3.9 broker and one Cassandra 5.0 node on the same machine. "
        f"{args.runs} runs, each job a `cdc` process of its own; the seconds are the median of the runs "
        "(each run's in brackets), from the phase line each job prints.",
        "",
        "```",
        cmd,
        "```",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; load "
        f"average (1, 5, 15 min) {load_before} before, {load_after} after.",
    ]
    for job, runs in results.items():
        names = ["process wall", "total"] + [n for n in runs[0] if n not in ("process wall", "total")]
        lines += ["", f"`cdc pipeline {job}`:", "", "| phase | seconds |", "|---|---:|"]
        for name in names:
            values = [r.get(name, 0.0) for r in runs]
            label = {
                "process wall": "**the process, as the user waits**",
                "total": "the job's own total",
            }.get(name, name)
            lines.append(f"| {label} | {median(values):.1f} ({', '.join(f'{v:.1f}' for v in values)}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
