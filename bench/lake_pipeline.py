"""Benchmark of `cdc pipeline lake`: clean change events per second merged into a Delta table on local[2].

The input is made here, not by a worker: JSON change events for one table (inserts, then updates and
deletes of random keys, a share of keys changing several times) are written to a clean topic of a Kafka
broker this script starts, with the table's schema event on a schema topic, exactly as workers and agents
write them. The lake job then takes the whole backlog with `availableNow` in micro-batches of
`--max-offsets` events. The result is checked against the final image per key the generator computed.
The lake job is a long-running stream, so the measured run comes after `--warmup-rounds` runs over a copy of
the backlog in the same JVM (the first of them, on a cold JVM, is reported too).

    .venv/bin/python bench/lake_pipeline.py --changes 1000000 --keys 250000 --out bench/lake_pipeline.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import decimal
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from infra.kafka import KafkaBroker, broker_spec
from infra.settings import InfraSettings
from runtime.config import CdcConfig, KafkaConfig, PipelineConfig
from schemas.change_event import ChangeSource, clean_topic_name
from schemas.change_json import JsonChangeCodec
from schemas.schema_event import schema_event

KAFKA_PORT = 29192
KAFKA_CONTROLLER_PORT = 29193
KEYSPACE, TABLE, PREFIX = "bench", "orders", "benchclean"
WARMUP_PREFIX = "benchwarmup"
ANALYSIS_HEADING = "What the numbers say:"
TABLE_ID = uuid.UUID("6c1d0d3e-1111-4b7a-9a55-00000000b0b0")
DDL = (
    f"CREATE TABLE {KEYSPACE}.{TABLE} (id bigint PRIMARY KEY, customer text, amount decimal, qty int, "
    f"placed timestamp, tags set<text>, note text) WITH ID = {TABLE_ID} AND cdc = true;"
)


def table_schema() -> TableSchema:
    catalog = load_schema_from_cql(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = {{'class': 'SimpleStrategy', "
        f"'replication_factor': 1}};\n{DDL}"
    )
    schema = catalog.by_name(KEYSPACE, TABLE)
    assert schema is not None
    return schema


def _row(key: int, version: int, rng: random.Random) -> dict[str, Any]:
    return {
        "id": key,
        "customer": f"customer-{rng.randrange(10_000)}",
        "amount": decimal.Decimal(rng.randrange(1, 10**7)) / 100,
        "qty": rng.randrange(1, 50),
        "placed": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=key + version),
        "tags": sorted({f"t{rng.randrange(8)}" for _ in range(rng.randrange(3))}),
        "note": f"version {version}",
    }


def changes(count: int, keys: int, seed: int) -> tuple[list[tuple[bytes, bytes | None]], dict[int, int]]:
    """(key, value) records in topic order, and the final version per live key."""
    rng = random.Random(seed)
    schema = table_schema()
    codec = JsonChangeCodec()
    live: dict[int, dict[str, Any]] = {}
    versions: dict[int, int] = {}
    out: list[tuple[bytes, bytes | None]] = []
    for n in range(count):
        key = n if n < keys else rng.randrange(keys)
        before = live.get(key)
        if before is not None and rng.random() < 0.05:
            op, after = "d", None
        else:
            op = "u" if before is not None else "c"
            version = versions.get(key, 0) + 1
            after = _row(key, version, rng)
            versions[key] = version
        source = ChangeSource("bench", KEYSPACE, TABLE, 1_700_000_000_000_000 + n, "node1", 1, n)
        envelope = {"before": before, "after": after, "op": op, "source": source.as_dict(n), "ts_ms": n}
        record_key = codec.encode_key(schema, {"id": key})
        out.append((record_key, codec.encode_value(schema, envelope)))
        if after is None:
            live.pop(key, None)
            versions.pop(key, None)
            out.append((record_key, None))
        else:
            live[key] = after
    return out, {k: versions[k] for k in live}


async def publish(
    bootstrap: str, topics: list[str], records: list[tuple[bytes, bytes | None]], partitions: int
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, partitions, 1, topic_configs={"cleanup.policy": "compact"}) for t in topics]
            + [NewTopic("bench.schemas", 1, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        event = schema_event("bench", KEYSPACE, TABLE, str(TABLE_ID), cdc=True, dropped=False, cql=DDL)
        await producer.send_and_wait("bench.schemas", event.encode(), key=event.key)
        pending = []
        for topic in topics:
            for key, value in records:
                pending.append(await producer.send(topic, value, key=key))
                if len(pending) >= 20_000:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def _topic_bytes(data: Path, topics: list[str]) -> int:
    return sum(
        f.stat().st_size
        for topic in topics
        for folder in data.glob(f"{topic}-*")
        for f in folder.iterdir()
        if f.is_file()
    )


def wait_for_log_cleaner(
    data: Path, topics: list[str], quiet_s: float = 30.0, limit_s: float = 900.0
) -> tuple[int, int, float]:
    """Waits until the broker's log cleaner has left the compacted topics alone for ``quiet_s``:
    (bytes before, bytes after, seconds). The broker shares this machine's cores with Spark here, where a
    real one would not; and a job that starts mid-compaction reads a different number of records each time."""
    began = time.monotonic()
    before = last = _topic_bytes(data, topics)
    still_since = began
    while time.monotonic() - still_since < quiet_s:
        if time.monotonic() - began > limit_s:
            raise SystemExit(f"the broker's log cleaner was still compacting {topics} after {limit_s:.0f} s")
        time.sleep(2)
        now = _topic_bytes(data, topics)
        if now != last:
            last, still_since = now, time.monotonic()
    seconds = time.monotonic() - began
    print(f"log cleaner done: {before / 1e6:,.0f} MB -> {last / 1e6:,.0f} MB in {seconds:.0f} s", flush=True)
    return before, last, seconds


def run(args: argparse.Namespace) -> str:
    home = Path(tempfile.mkdtemp(prefix="cdc-bench-lake-"))
    settings = InfraSettings.from_env(
        home=home / "services", kafka_port=KAFKA_PORT, kafka_controller_port=KAFKA_CONTROLLER_PORT
    )
    broker = KafkaBroker(broker_spec(settings), settings)
    broker.start()
    try:
        bootstrap = broker.spec.bootstrap
        topics = [clean_topic_name(PREFIX, KEYSPACE, TABLE)]
        if args.warmup_rounds:
            topics.append(clean_topic_name(WARMUP_PREFIX, KEYSPACE, TABLE))
        began = time.monotonic()
        records, final = changes(args.changes, args.keys, args.seed)
        made_s = time.monotonic() - began
        began = time.monotonic()
        asyncio.run(publish(bootstrap, topics, records, args.partitions))
        published_s = time.monotonic() - began
        print(
            f"made {args.changes:,} changes in {made_s:.1f} s, published in {published_s:.1f} s", flush=True
        )
        del records
        cleaned = wait_for_log_cleaner(broker.spec.data, topics)

        from pipeline.lake_job import LakeJob
        from pipeline.lake_merge import tombstone_path
        from pipeline.lake_schema import OP_COLUMN, lake_table_path
        from pipeline.spark_session import build_spark_session

        def config(lake: Path, prefix: str) -> CdcConfig:
            return CdcConfig(
                cluster="bench",
                kafka=KafkaConfig(bootstrap_servers=bootstrap, schema_topic="bench.schemas"),
                pipeline=PipelineConfig(
                    lake_directory=lake,
                    clean_topic_prefix=prefix,
                    max_offsets_per_trigger=args.max_offsets,
                    shuffle_partitions=args.shuffle_partitions,
                    driver_memory=args.driver_memory,
                ),
            )

        lake = home / "lake"
        began = time.monotonic()
        measured = config(lake, PREFIX)
        assert measured.pipeline is not None
        extra = dict(item.split("=", 1) for item in args.spark_conf)
        spark = build_spark_session(measured.pipeline, "cdc-bench-lake", extra=extra)
        spark_s = time.monotonic() - began
        warmups = []
        for round_ in range(args.warmup_rounds):  # the same backlog on its own topic, into a scratch lake
            scratch = home / f"warmup-{round_}"
            warmups.append(LakeJob(spark, config(scratch, WARMUP_PREFIX), once=True).run())
            print(f"warm-up round {round_ + 1}: {warmups[-1].describe()}", flush=True)
            shutil.rmtree(scratch, ignore_errors=True)
        summary = LakeJob(spark, measured, once=True).run()
        table = spark.read.format("delta").load(str(lake_table_path(lake, KEYSPACE, TABLE)))
        rows = table.count()
        versions = {r.id: int(r.note.split()[-1]) for r in table.select("id", "note").collect()}
        wrong = sum(1 for k, v in final.items() if versions.get(k) != v) + len(set(versions) - set(final))
        ops = {r[OP_COLUMN]: r["count"] for r in table.groupBy(OP_COLUMN).count().collect()}
        files = {
            name: _files_and_compactions(spark, path)
            for name, path in (
                ("the table", lake_table_path(lake, KEYSPACE, TABLE)),
                ("its tombstone table", tombstone_path(lake, table_schema())),
            )
        }
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    rate = summary.changes / summary.seconds
    rounds = "; ".join(
        f"round {n}: {w.changes:,} records in {w.seconds:.1f} s, **{w.changes / w.seconds:,.0f}/s**"
        for n, w in enumerate(warmups, 1)
    )
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    cmd = " ".join([".venv/bin/python bench/lake_pipeline.py", *sys.argv[1:]])
    return f"""# `cdc pipeline lake` throughput

Clean change events merged into a Delta table by the lake job on Spark `local[2]`, from a backlog on a real
Kafka 3.9 broker (one table of 7 columns: bigint key, text, decimal, int, timestamp, set<text>, text).
Made with:

```
{cmd}
```

| what | value |
|---|---|
| changes published (to each of the measured and the warm-up topic) | {args.changes:,} and a tombstone after each delete |
| the broker's log cleaner, left to finish before the job starts (the topics are compacted, as clean topics are) | {cleaned[0] / 1e6:,.0f} MB -> {cleaned[1] / 1e6:,.0f} MB in {cleaned[2]:.0f} s |
| clean records the job read (c/u/d events and tombstones the cleaner left) | {summary.changes:,} |
| distinct keys | {args.keys:,} |
| micro-batches (`maxOffsetsPerTrigger` {args.max_offsets:,}) | {summary.batches} |
| warm-up runs before it, in the same JVM (the same backlog on its own topic, each into a scratch lake; round 1 is a cold JVM) | {rounds or "none"} |
| lake job, first offset to last commit | {summary.seconds:.1f} s |
| **clean records per second into Delta** (after {len(warmups)} warm-up runs) | **{rate:,.0f}** |
| rows inserted / updated / deleted (the first micro-batch creates the table, the MERGEs after it) | {summary.inserted:,} / {summary.updated:,} / {summary.deleted:,} |
| rows in the table at the end (live keys expected: {len(final):,}) | {rows:,} |
| rows whose final version differs from the generator's | {wrong} |
| rows by last op | {", ".join(f"{k} {v:,}" for k, v in sorted(ops.items()))} |
| data files at the end, and the auto compactions that made them | {"; ".join(f"{name}: {n:,} files, auto compactions: {c}" for name, (n, c) in files.items())} |
| Spark settings besides the job's own | {", ".join(f"`{k}={v}`" for k, v in extra.items()) or "none"} |
| Spark session start (JVM, jars) | {spark_s:.1f} s |
| peak RSS of a child process (the Spark JVM) | {peak_mb:,.0f} MB |
| machine | {os.cpu_count()} cores; Kafka broker on the same machine |
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--partitions", type=int, default=4, help="clean topic partitions")
    parser.add_argument("--max-offsets", type=int, default=500_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="one per core of local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=2,
        help="lake runs over a copy of the backlog before the measured one, in the same JVM (0: cold)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting on top of the job's (repeatable), e.g. to measure without one of them",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if bad := [c for c in args.spark_conf if "=" not in c]:
        parser.error(f"--spark-conf takes KEY=VALUE, got {bad[0]!r}")
    report = run(args)
    print(report)
    if args.out:
        args.out.write_text(report + _analysis_of(args.out))
    return 0


def _files_and_compactions(spark: Any, path: Path) -> tuple[int, int]:
    if not path.exists():
        return 0, 0
    files = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().numFiles
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'OPTIMIZE'").count()
    return int(files), int(history)


def _analysis_of(report: Path) -> str:
    """The hand-written analysis below the table of an earlier report, kept when the table is remade."""
    text = report.read_text() if report.exists() else ""
    at = text.find(ANALYSIS_HEADING)
    return "\n" + text[at:] if at >= 0 else ""


if __name__ == "__main__":
    sys.exit(main())
