"""Benchmark of `cdc pipeline lake`: clean change events per second merged into a Delta table on local[2].

The input is made here, not by a worker: JSON change events for one table (inserts, then updates and
deletes of random keys, a share of keys changing several times) are written to a clean topic of a Kafka
broker this script starts, with the table's schema event on a schema topic, exactly as workers and agents
write them. The lake job then takes the whole backlog with `availableNow` in micro-batches of
`--max-offsets` events. The result is checked against the final image per key the generator computed.
The lake job is a long-running stream, so the measured run comes after `--warmup-rounds` runs over a copy of
the backlog in the same JVM (the first of them, on a cold JVM, is reported too).

With ``--populate N`` it measures what a running stream does most: update-heavy micro-batches into a
populated table. The table's first micro-batch creates it with N rows (and remembers some deletes); then
``--changes`` changes, mostly updates of those rows, are merged, each round into a fresh copy of the
populated table and its stream checkpoint, and only those rounds are timed. ``--alternate KEY=VALUE``
runs every second measured round with a SQL setting changed, so two variants are compared in one JVM.

    .venv/bin/python bench/lake_pipeline.py --changes 1000000 --keys 250000 --out bench/lake_pipeline.md
    .venv/bin/python bench/lake_pipeline.py --populate 600000 --changes 400000 --rounds 4
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
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from report_analysis import analysis_of

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


class _Changes:
    """Change events of the bench table as the workers write them: (key, value) records in topic order,
    a tombstone after each delete, and the version of every live key."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.schema = table_schema()
        self.codec = JsonChangeCodec()
        self.live: dict[int, dict[str, Any]] = {}
        self.versions: dict[int, int] = {}
        self.n = 0

    def emit(self, key: int, delete: bool, out: list[tuple[bytes, bytes | None]]) -> None:
        before = self.live.get(key)
        if delete:
            op, after = "d", None
        else:
            op = "u" if before is not None else "c"
            version = self.versions.get(key, 0) + 1
            after = _row(key, version, self.rng)
            self.versions[key] = version
        n = self.n
        self.n += 1
        source = ChangeSource("bench", KEYSPACE, TABLE, 1_700_000_000_000_000 + n, "node1", 1, n)
        envelope = {"before": before, "after": after, "op": op, "source": source.as_dict(n), "ts_ms": n}
        record_key = self.codec.encode_key(self.schema, {"id": key})
        out.append((record_key, self.codec.encode_value(self.schema, envelope)))
        if after is None:
            self.live.pop(key, None)
            self.versions.pop(key, None)
            out.append((record_key, None))
        else:
            self.live[key] = after

    def final(self) -> dict[int, int]:
        return {k: self.versions[k] for k in self.live}


def changes(count: int, keys: int, seed: int) -> tuple[list[tuple[bytes, bytes | None]], dict[int, int]]:
    """(key, value) records in topic order, and the final version per live key: the first ``keys`` changes
    insert keys 0.., the rest change random keys (5% deletes; a deleted key comes back as an insert)."""
    made = _Changes(seed)
    out: list[tuple[bytes, bytes | None]] = []
    for n in range(count):
        key = n if n < keys else made.rng.randrange(keys)
        made.emit(key, key in made.live and made.rng.random() < 0.05, out)
    return out, made.final()


def update_heavy_changes(
    populate: int, count: int, seed: int, update_share: float, delete_share: float
) -> tuple[list[tuple[bytes, bytes | None]], list[tuple[bytes, bytes | None]], dict[int, int]]:
    """The records that populate a table (inserts of keys 0..``populate``-1, and ``populate`` / 20 more
    keys inserted and deleted, so the lake knows deletes, as a running stream's does), then ``count``
    changes of it: an update of a random live key (``update_share``), a delete of one (``delete_share``),
    else an insert of a new key; and the final version per live key."""
    made = _Changes(seed)
    first: list[tuple[bytes, bytes | None]] = []
    for key in range(populate):
        made.emit(key, False, first)
    gone = range(populate, populate + populate // 20)
    for key in gone:
        made.emit(key, False, first)
    for key in gone:
        made.emit(key, True, first)
    keys = list(range(populate))  # the live keys, for a uniform pick
    where = {k: i for i, k in enumerate(keys)}
    later: list[tuple[bytes, bytes | None]] = []
    new_key = gone.stop
    for _ in range(count):
        draw = made.rng.random()
        if draw >= update_share + delete_share or not keys:
            key, new_key = new_key, new_key + 1
            where[key] = len(keys)
            keys.append(key)
            made.emit(key, False, later)
            continue
        key = keys[made.rng.randrange(len(keys))]
        delete = draw >= update_share
        if delete:  # swap the last live key into its place
            last = keys.pop()
            at = where.pop(key)
            if last != key:
                keys[at], where[last] = last, at
        made.emit(key, delete, later)
    return first, later, made.final()


async def publish(
    bootstrap: str,
    topics: list[str],
    records: list[tuple[bytes, bytes | None]],
    partitions: int,
    *,
    create: bool = True,
) -> None:
    """``records`` to each of ``topics``; ``create``: make the topics and write the schema event first."""
    if create:
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
        if create:
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


def _broker_settings(home: Path) -> InfraSettings:
    """The bench's own broker: on CDC_KAFKA_PORT and CDC_KAFKA_CONTROLLER_PORT when they are set (a
    machine shared with other services), else on ports of its own."""
    return InfraSettings.from_env(
        home=home / "services",
        kafka_port=None if "CDC_KAFKA_PORT" in os.environ else KAFKA_PORT,
        kafka_controller_port=None if "CDC_KAFKA_CONTROLLER_PORT" in os.environ else KAFKA_CONTROLLER_PORT,
    )


def _lake_config(
    args: argparse.Namespace, bootstrap: str, lake: Path, prefix: str, max_offsets: int = 0
) -> CdcConfig:
    return CdcConfig(
        cluster="bench",
        kafka=KafkaConfig(bootstrap_servers=bootstrap, schema_topic="bench.schemas"),
        pipeline=PipelineConfig(
            lake_directory=lake,
            clean_topic_prefix=prefix,
            max_offsets_per_trigger=max_offsets or args.max_offsets,
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        ),
    )


def _wrong_rows(spark: Any, lake: Path, final: dict[int, int]) -> tuple[int, int]:
    """(rows in the lake table, rows whose version differs from the generator's or that should not be)."""
    from pipeline.lake_schema import lake_table_path

    table = spark.read.format("delta").load(str(lake_table_path(lake, KEYSPACE, TABLE)))
    versions = {r.id: int(r.note.split()[-1]) for r in table.select("id", "note").collect()}
    wrong = sum(1 for k, v in final.items() if versions.get(k) != v) + len(set(versions) - set(final))
    return len(versions), wrong


def run(args: argparse.Namespace) -> str:
    if args.populate:
        return run_update_heavy(args)
    return run_backlog(args)


@contextmanager
def _bench_broker() -> Iterator[tuple[Path, KafkaBroker]]:
    """A Kafka broker of the benchmark's own in a scratch home, removed once the broker has stopped."""
    home = Path(tempfile.mkdtemp(prefix="cdc-bench-lake-"))
    settings = _broker_settings(home)
    broker = KafkaBroker(broker_spec(settings), settings)
    broker.start()
    try:
        yield home, broker
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


def run_backlog(args: argparse.Namespace) -> str:
    with _bench_broker() as (home, broker):
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


def run_update_heavy(args: argparse.Namespace) -> str:
    """``--populate`` rows as the table's first micro-batch (not measured), then ``--changes`` changes,
    mostly updates of those rows, merged into a copy of the populated table per round: warm-up rounds,
    then ``--rounds`` measured ones (alternating with ``--alternate`` settings when given)."""
    from pipeline.lake_job import LakeJob
    from pipeline.spark_session import build_spark_session

    with _bench_broker() as (home, broker):
        bootstrap = broker.spec.bootstrap
        topics = [clean_topic_name(PREFIX, KEYSPACE, TABLE)]
        began = time.monotonic()
        first, later, final = update_heavy_changes(
            args.populate, args.changes, args.seed, args.update_share, args.delete_share
        )
        made_s = time.monotonic() - began
        asyncio.run(publish(bootstrap, topics, first, args.partitions))
        extra = dict(item.split("=", 1) for item in args.spark_conf)
        template = home / "populated"
        # the whole populating backlog in one micro-batch: the one that creates the table
        populate_config = _lake_config(args, bootstrap, template, PREFIX, max(len(first), args.max_offsets))
        assert populate_config.pipeline is not None
        began = time.monotonic()
        spark = build_spark_session(populate_config.pipeline, "cdc-bench-lake", extra=extra)
        spark_s = time.monotonic() - began
        del first
        populated = LakeJob(spark, populate_config, once=True).run()
        print(f"populated: {populated.describe()}", flush=True)
        began = time.monotonic()
        asyncio.run(publish(bootstrap, topics, later, args.partitions, create=False))
        print(
            f"made all changes in {made_s:.1f} s, published the measured ones in "
            f"{time.monotonic() - began:.1f} s",
            flush=True,
        )
        del later
        cleaned = wait_for_log_cleaner(broker.spec.data, topics)
        variant = dict(item.split("=", 1) for item in args.alternate)
        rounds: list[tuple[str, Any, int, int, float]] = []
        jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        for n in range(args.warmup_rounds + args.rounds):
            label = "warm-up" if n < args.warmup_rounds else "base"
            if label == "base" and variant and (n - args.warmup_rounds) % 2 == 1:
                label = "variant"
            lake = home / f"round-{n}"
            shutil.copytree(template, lake)  # the table and the stream's checkpoint after populating
            before = {k: spark.conf.get(k, None) for k in variant}
            if label == "variant":
                for key, value in variant.items():
                    spark.conf.set(key, value)
            try:
                cpu = _cpu_seconds(jvm)
                summary = LakeJob(spark, _lake_config(args, bootstrap, lake, PREFIX), once=True).run()
                cpu = _cpu_seconds(jvm) - cpu
            finally:
                for key, value in before.items():
                    spark.conf.unset(key) if value is None else spark.conf.set(key, value)
            rows, wrong = _wrong_rows(spark, lake, final)
            rounds.append((label, summary, rows, wrong, cpu))
            print(f"round {n + 1} ({label}): {summary.describe()}; {wrong} rows wrong", flush=True)
            shutil.rmtree(lake, ignore_errors=True)
        spark.stop()
    measured = [r for r in rounds if r[0] != "warm-up"]
    base = [s for label, s, _, _, _ in measured if label == "base"]
    rate = sum(s.changes / s.seconds for s in base) / len(base)
    last = base[-1]

    def described(label: str) -> str:
        return ", ".join(
            f"{s.changes / s.seconds:,.0f}/s ({s.seconds:.1f} s, {cpu / s.changes * 1e6:.1f} µs)"
            for lb, s, _, _, cpu in rounds
            if lb == label
        )

    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    cmd = " ".join([".venv/bin/python bench/lake_pipeline.py", *sys.argv[1:]])
    alternate = (
        f"| the same rounds with {', '.join(f'`{k}={v}`' for k, v in variant.items())}, alternating with "
        f"the base ones | {described('variant')} |\n"
        if variant
        else ""
    )
    return f"""# `cdc pipeline lake` throughput

Update-heavy micro-batches merged into a populated Delta table by the lake job on Spark `local[2]`, from a
real Kafka 3.9 broker (one table of 7 columns: bigint key, text, decimal, int, timestamp, set<text>, text).
The table's first micro-batch creates it with `--populate` rows (not measured); then `--changes` changes
({args.update_share:.0%} updates of random live keys, {args.delete_share:.0%} deletes, the rest inserts of
new keys) are published and merged, in every round into a fresh copy of the populated table and its
stream checkpoint. Made with:

```
{cmd}
```

| what | value |
|---|---|
| rows in the table before the measured batches (its first micro-batch, not measured; it also deletes {args.populate // 20:,} keys it inserts, so the lake has tombstones to screen changes against, as a running stream has) | {populated.inserted:,} in {populated.seconds:.1f} s |
| changes published after them | {args.changes:,} and a tombstone after each delete |
| the broker's log cleaner, left to finish before the job starts (the topic is compacted, as clean topics are) | {cleaned[0] / 1e6:,.0f} MB -> {cleaned[1] / 1e6:,.0f} MB in {cleaned[2]:.0f} s |
| clean records a round read (c/u/d events and tombstones the cleaner left) | {last.changes:,} |
| micro-batches a round (`maxOffsetsPerTrigger` {args.max_offsets:,}) | {last.batches} |
| rows inserted / updated / deleted by a round's MERGEs | {last.inserted:,} / {last.updated:,} / {last.deleted:,} |
| warm-up rounds, in the same JVM (round 1 right after the populating batch) | {described("warm-up") or "none"} |
| measured rounds, first offset to last commit (rate, seconds, the Spark JVM's CPU per record) | {described("base")} |
{alternate}| **clean records per second into Delta** (mean of the measured rounds) | **{rate:,.0f}** |
| rows in the table at the end of each round (live keys expected: {len(final):,}) | {", ".join(f"{r:,}" for _, _, r, _, _ in rounds)} |
| rows whose final version differs from the generator's, each round | {", ".join(str(w) for _, _, _, w, _ in rounds)} |
| Spark settings besides the job's own | {", ".join(f"`{k}={v}`" for k, v in extra.items()) or "none"} |
| Spark session start (JVM, jars) | {spark_s:.1f} s |
| peak RSS of a child process (the Spark JVM) | {peak_mb:,.0f} MB |
| machine | {os.cpu_count()} cores; Kafka broker on the same machine; `uptime` before: {args.load_before} |
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
    parser.add_argument(
        "--populate",
        type=int,
        default=0,
        help="update-heavy mode: the table's first micro-batch inserts this many rows (not measured), then "
        "--changes changes of it are measured",
    )
    parser.add_argument("--update-share", type=float, default=0.65, help="with --populate")
    parser.add_argument("--delete-share", type=float, default=0.05, help="with --populate")
    parser.add_argument("--rounds", type=int, default=1, help="measured rounds, with --populate")
    parser.add_argument(
        "--alternate",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --populate: every second measured round runs with this SQL setting (repeatable)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if bad := [c for c in args.spark_conf + args.alternate if "=" not in c]:
        parser.error(f"--spark-conf and --alternate take KEY=VALUE, got {bad[0]!r}")
    if args.populate and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not 0 <= args.delete_share <= args.update_share + args.delete_share <= 1:
        parser.error("--update-share and --delete-share must be shares (0..1) adding up to at most 1")
    args.load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report = run(args)
    print(report)
    if args.out:
        args.out.write_text(report + analysis_of(args.out, ANALYSIS_HEADING))
    return 0


def _cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (its threads included), from /proc: less sensitive than
    the wall clock to the other work on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _files_and_compactions(spark: Any, path: Path) -> tuple[int, int]:
    if not path.exists():
        return 0, 0
    files = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().numFiles
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'OPTIMIZE'").count()
    return int(files), int(history)


if __name__ == "__main__":
    sys.exit(main())
