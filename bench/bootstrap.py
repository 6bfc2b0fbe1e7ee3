"""Bootstrap throughput: rows/s read from Cassandra with write times, built into raw events and published.

Uses running services (Kafka and Cassandra addresses as options, the `cdc infra up` defaults otherwise):
writes --rows rows to a keyspace of its own (`bench_boot_<id>.readings`: int partition key, int
clustering, --rows-per-partition rows per partition, a text, a double, a set<text> and a map<text, int>,
one row in ten with a TTL), creates a raw topic of its own (12 partitions), then times with a local[2]
SparkSession:
  scan       `scan_table(with_write_times=True).count()`: the Cassandra read alone
  build      `table_events` over the scanned rows in this process: event building alone, one core
  bootstrap  `bootstrap_table`: scan + build + Spark's Kafka sink, the job as `cdc pipeline bootstrap`
             runs it (no worker consumes the topic)
The keyspace and topic are dropped at the end.

    nice -n 15 .venv/bin/python bench/bootstrap.py [--rows 100000] [--rows-per-partition 10] [--splits 16]
        [--kafka 127.0.0.1:9092] [--cassandra 127.0.0.1:9042] [--out bench/bootstrap.md]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from cassandra.cluster import Cluster  # noqa: E402
from cassandra.concurrent import execute_concurrent_with_args  # noqa: E402

from cassandra_model.system_schema import load_schema_from_session  # noqa: E402
from pipeline.bootstrap_job import bootstrap_table  # noqa: E402
from pipeline.cassandra_scan import scan_table  # noqa: E402
from pipeline.snapshot_events import table_events  # noqa: E402
from pipeline.spark_session import build_spark_session  # noqa: E402
from runtime.config import CassandraConfig, CdcConfig, KafkaConfig, PipelineConfig  # noqa: E402

RAW_PARTITIONS = 12


async def _topic(bootstrap: str, name: str, create: bool) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if create:
            await admin.create_topics([NewTopic(name, RAW_PARTITIONS, 1)])
        else:
            await admin.delete_topics([name])
    finally:
        await admin.close()


def write_rows(session: Any, keyspace: str, rows: int, per_partition: int) -> float:
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(
        f"CREATE TABLE {keyspace}.readings (pk int, ck int, name text, value double, tags set<text>, "
        "attrs map<text, int>, PRIMARY KEY (pk, ck))"
    )
    plain = session.prepare(
        f"INSERT INTO {keyspace}.readings (pk, ck, name, value, tags, attrs) VALUES (?, ?, ?, ?, ?, ?)"
    )
    ttl = session.prepare(
        f"INSERT INTO {keyspace}.readings (pk, ck, name, value, tags, attrs) VALUES (?, ?, ?, ?, ?, ?) "
        "USING TTL 86400"
    )
    started = time.monotonic()
    args = [
        (
            i // per_partition,
            i % per_partition,
            f"sensor {i}",
            i * 0.5,
            {f"t{i % 7}", "all"},
            {"a": i, "b": 1},
        )
        for i in range(rows)
    ]
    execute_concurrent_with_args(session, plain, [a for i, a in enumerate(args) if i % 10], concurrency=64)
    execute_concurrent_with_args(session, ttl, [a for i, a in enumerate(args) if not i % 10], concurrency=64)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rows-per-partition", type=int, default=10)
    parser.add_argument("--splits", type=int, default=16)
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    parser.add_argument("--cassandra", default="127.0.0.1:9042")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    host, _, port = args.cassandra.partition(":")
    suffix = uuid.uuid4().hex[:8]
    keyspace, topic = f"bench_boot_{suffix}", f"bench_boot_raw_{suffix}"
    cluster = Cluster([host], port=int(port or 9042))
    session = cluster.connect()
    results: list[tuple[str, float, str]] = []
    try:
        write_s = write_rows(session, keyspace, args.rows, args.rows_per_partition)
        print(f"wrote {args.rows} rows in {write_s:.1f} s", flush=True)
        schema = load_schema_from_session(session, [keyspace], with_system_schema=False).by_name(
            keyspace, "readings"
        )
        assert schema is not None
        asyncio.run(_topic(args.kafka, topic, create=True))
        lake = Path(tempfile.mkdtemp(prefix="bench-boot-"))
        config = CdcConfig(
            cluster="bench",
            kafka=KafkaConfig(bootstrap_servers=args.kafka, raw_topic=topic, raw_partitions=RAW_PARTITIONS),
            cassandra=CassandraConfig(contact_points=[host], port=int(port or 9042)),
            pipeline=PipelineConfig(lake_directory=lake, bootstrap_splits=args.splits),
        )
        spark = build_spark_session(config.pipeline, "bench-bootstrap")  # type: ignore[arg-type]

        started = time.monotonic()
        scanned = scan_table(spark, config, schema, with_write_times=True).count()
        scan_s = time.monotonic() - started
        assert scanned == args.rows, f"scan read {scanned} rows of {args.rows}"
        results.append(
            ("scan (Spark, Cassandra read with WRITETIME/TTL)", scan_s, f"{scanned / scan_s:,.0f} rows/s")
        )

        rows = scan_table(spark, config, schema, with_write_times=True).collect()
        started = time.monotonic()
        events = sum(len(e) for _, e in table_events(schema, rows, cluster="bench", published_at_ms=1))
        build_s = time.monotonic() - started
        results.append(
            ("build (one process, no I/O)", build_s, f"{len(rows) / build_s:,.0f} rows/s, {events} events")
        )

        summary = bootstrap_table(spark, config, schema, published_at_ms=int(time.time() * 1000))
        assert summary.rows == args.rows, summary
        results.append(
            (
                "bootstrap (scan + build + Kafka sink)",
                summary.seconds,
                f"{summary.rows_per_s:,.0f} rows/s, {summary.events} events, {summary.cells} cells",
            )
        )
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        cluster.shutdown()
        try:
            asyncio.run(_topic(args.kafka, topic, create=False))
        except Exception as exc:  # the topic may not exist when setup failed early
            print(f"could not delete topic {topic}: {exc}")
    lines = [
        f"rows {args.rows}, {args.rows_per_partition} per partition, splits {args.splits}, local[2]; "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
        "",
        "| phase | seconds | rate |",
        "|---|---|---|",
        *[f"| {name} | {seconds:.1f} | {rate} |" for name, seconds, rate in results],
    ]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
