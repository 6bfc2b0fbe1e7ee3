"""`cdc pipeline replay`: the raw topic merged again in batch, with the workers' merge code, into row images.

The raw topic is read from its beginning to the end offsets taken when the job starts, grouped by Kafka key
(one Cassandra partition of one table: every replica's copy of an update carries the same key) and each
group is merged in a Spark task by ``pipeline.raw_replay``. Images are read at one ``now`` for the whole
job. With ``--output DIR`` they become Delta tables ``DIR/<keyspace>/<table>`` in the lake layout (``_cdc_op``
``r``, no clean-topic position); with ``--compare`` they are checked against the workers' clean topics.

Comparing with the clean topics, and time: the clean topics' end offsets are taken after the raw topic's,
and ``now`` after both, so the clean side holds nothing newer than the replayed side. A TTL that ran out
shortly before ``now`` may not have been emitted by the workers yet (their expiry timer runs every
``worker.expiry_interval_ms``, and a batch takes a moment), so rows whose image an expiry changed in the
last ``settle_s`` seconds before ``now`` are counted as skipped instead of compared; rows expiring after
``now`` are live on both sides. The comparison is meaningful only when the workers have caught up with the
raw topic (no consumer lag): a change still in flight shows as a difference, which is the truth at that
moment. Workers purge tombstones after gc_grace_seconds and replay never does; both give the same images
unless a replica's copy arrives later than gc_grace_seconds, which Cassandra does not guarantee either.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.errors import KafkaError
from py4j.protocol import Py4JJavaError
from pyspark import RDD, StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cassandra_model.table_schema import TableSchema
from pipeline.errors import PipelineError, spark_failure_line
from pipeline.kafka_source import BACKLOG_READ_OPTIONS, kafka_failure, kafka_format, spark_kafka_failure
from pipeline.lake_schema import (
    EMITTED_COLUMN,
    KEY_COLUMN,
    META_COLUMNS,
    OFFSET_COLUMN,
    OP_COLUMN,
    PARTITION_COLUMN,
    WRITE_TIME_COLUMN,
    json_struct,
    lake_columns,
    lake_table_path,
    normalize_json_form,
)
from pipeline.raw_replay import clean_key_text, replay_encoded
from pipeline.row_diff import TableDiff
from pipeline.spark_session import build_spark_session
from pipeline.table_catalog import load_table_schemas, select_tables
from runtime.config import CdcConfig, KafkaConfig
from runtime.kafka_clients import make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from runtime.tls import ClientSetupError
from schemas.change_event import clean_topic_name
from schemas.driver_rows import key_text
from schemas.raw_event import RawEventError, decode_raw_key

log = logging.getLogger(__name__)

#: rows an expiry changed this many seconds before ``now`` are not compared (see the module notes)
SETTLE_S = 10

#: one replayed row: (keyspace.table, key text, JSON image or None, write time µs, unsettled)
ReplayRecord = tuple[str, str, str | None, int | None, bool]

Offsets = dict[int, int]

_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------------------------
# Kafka


async def _end_offsets(kafka: KafkaConfig, topic: str, read_committed: bool) -> Offsets | None:
    consumer = make_consumer(
        kafka,
        enable_auto_commit=False,
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    await start_kafka_client(consumer, kafka)
    try:
        partitions = await topic_partitions(consumer, topic)
        if not partitions:
            return None
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


def end_offsets(config: CdcConfig, topic: str, *, read_committed: bool = False) -> Offsets | None:
    """The end offset of every partition of ``topic`` now (None: no such topic); with ``read_committed``
    the last stable offsets, what a read_committed consumer can read up to."""
    kafka = config.kafka
    try:
        return asyncio.run(_end_offsets(kafka, topic, read_committed))
    except (KafkaError, OSError, ClientSetupError) as exc:
        raise kafka_failure(exc, kafka, f"read the end offsets of {topic!r}") from exc


def kafka_batch(
    spark: SparkSession, config: CdcConfig, topic: str, ends: Offsets, *, read_committed: bool = False
) -> DataFrame:
    """The records of ``topic`` from the beginning up to ``ends`` (exclusive), as a batch DataFrame."""
    reader = (
        kafka_format(spark.read, config.kafka)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in sorted(ends.items())}}))
        .options(**BACKLOG_READ_OPTIONS)
    )
    if read_committed:
        # transactions leave offsets without records (markers, aborted batches) and clean topics are
        # compacted: a gap is expected there, not data loss
        reader = reader.option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "false")
    return reader.load()


# ---------------------------------------------------------------------------------------------------------
# Spark tasks (module functions, so tasks pickle them by reference)


def _keyed_records(
    rows: Iterable[Any], wanted: frozenset[tuple[str, str]], bad_keys: Any
) -> Iterator[tuple[bytes, bytes]]:
    for key, value in rows:
        if key is None or value is None:
            bad_keys.add(1)
            continue
        key = bytes(key)
        try:
            keyspace, table, _ = decode_raw_key(key)
        except RawEventError:
            bad_keys.add(1)
            continue
        if (keyspace, table) in wanted:
            yield key, bytes(value)


def _replay_group(
    item: tuple[bytes, Iterable[bytes]],
    schemas: dict[tuple[str, str], TableSchema],
    now_s: int,
    settle_s: int,
    counters: dict[str, Any],
) -> Iterator[ReplayRecord]:
    raw_key, values = item
    keyspace, table, _ = decode_raw_key(raw_key)
    schema = schemas[(keyspace, table)]
    result = replay_encoded(values, schema, now_s, settle_s=settle_s)
    counters["partitions"].add(1)
    counters["events"].add(result.events)
    counters["skipped"].add(result.skipped)
    counters["undecodable"].add(result.undecodable)
    name = schema.name
    unsettled = set(result.unsettled)
    for row in result.rows:
        yield name, row.key, row.json(), row.write_time_us, row.key in unsettled
    for key in sorted(unsettled - {row.key for row in result.rows}):
        yield name, key, None, None, True


def _clean_record(row: Any) -> tuple[str, tuple[tuple[int, int], dict[str, Any] | None]]:
    """(key text, ((partition, offset), after image or None)) of one clean-topic record."""
    key = key_text(json.loads(bytes(row.key)))
    after = None
    if row.value is not None:
        after = json.loads(bytes(row.value)).get("after")
    return key, ((row.partition, row.offset), after)


def _later(a: tuple[tuple[int, int], Any], b: tuple[tuple[int, int], Any]) -> tuple[tuple[int, int], Any]:
    return a if a[0] > b[0] else b


def _tally(schema: TableSchema) -> Any:
    def add(diff: TableDiff, item: tuple[str, tuple[Any, Any]]) -> TableDiff:
        key, (replayed, clean) = item
        if replayed is not None and replayed[1]:
            diff.skip(key)
            return diff
        expected = None if replayed is None or replayed[0] is None else json.loads(replayed[0])
        after = None if clean is None else clean[1]
        if expected is None and after is None:
            return diff
        diff.add(
            schema,
            key,
            None if expected is None else normalize_json_form(schema, expected),
            None if after is None else normalize_json_form(schema, after),
        )
        return diff

    return add


def _lake_row(schema: TableSchema, item: tuple[str, int | None]) -> tuple[str, str, int | None]:
    text, write_time = item
    return clean_key_text(schema, json.loads(text)), text, write_time


def write_lake_table(
    spark: SparkSession, schema: TableSchema, rows: RDD[tuple[str, int | None]], path: Path, now_s: int
) -> None:
    """JSON-form images (text, write time µs) as the Delta table at ``path`` in the lake layout, replacing
    what is there: parsed with ``json_struct`` and laid out by ``lake_columns`` like the lake job's rows,
    ``_cdc_op`` ``r`` (a read, as bootstrap's), no clean-topic position."""
    frame = spark.createDataFrame(
        rows.map(lambda item: _lake_row(schema, item)), "key string, json string, write_time long"
    )
    image = frame.select(
        F.from_json("json", json_struct(schema)).alias("image"), F.col("key"), F.col("write_time")
    )
    meta = {
        KEY_COLUMN: F.col("key"),
        OP_COLUMN: F.lit("r"),
        WRITE_TIME_COLUMN: F.col("write_time"),
        EMITTED_COLUMN: F.lit(now_s * 1000),
        PARTITION_COLUMN: F.lit(None),
        OFFSET_COLUMN: F.lit(None),
    }
    types = dict(META_COLUMNS)
    columns = lake_columns(schema, F.col("image")) + [v.cast(types[c]).alias(c) for c, v in meta.items()]
    writer = image.select(*columns).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    writer.save(str(path))


# ---------------------------------------------------------------------------------------------------------
# the job


@dataclass(slots=True)
class ReplaySummary:
    now_s: int
    raw_records: int = 0
    partitions: int = 0
    events: int = 0
    skipped_events: int = 0
    undecodable: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    written: dict[str, Path] = field(default_factory=dict)
    compared: list[TableDiff] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return all(d.clean for d in self.compared)

    def describe(self) -> str:
        lines = [
            f"replay: {self.raw_records:,} raw records, {self.events:,} events of {self.partitions:,} "
            f"partitions merged in {self.seconds:.1f} s, images at now={self.now_s}"
        ]
        if self.skipped_events or self.undecodable:
            lines.append(
                f"  left out: {self.skipped_events:,} events of a dropped table with the same name, "
                f"{self.undecodable:,} undecodable records"
            )
        for name, count in sorted(self.rows.items()):
            where = f" -> {self.written[name]}" if name in self.written else ""
            lines.append(f"  {name}: {count:,} rows{where}")
        for diff in self.compared:
            lines.append("  compare " + diff.describe("replay", "clean topic"))
        if self.compared:
            lines.append("replay: the clean topics match" if self.clean else "replay: DIFFERENCES found")
        return "\n".join(lines)


def settle_seconds(config: CdcConfig) -> int:
    """The TTL settle window: SETTLE_S, or more when the workers' expiry timer is slower."""
    if config.worker is None:
        return SETTLE_S
    return max(SETTLE_S, math.ceil(config.worker.expiry_interval_ms / 1000) * 3)


class ReplayJob:
    """Replay of some tables; ``run`` replays, then writes and compares as asked."""

    def __init__(
        self,
        spark: SparkSession,
        config: CdcConfig,
        tables: list[TableSchema],
        *,
        settle_s: int | None = None,
    ) -> None:
        if config.pipeline is None:
            raise PipelineError("the replay job needs a pipeline section (pipeline.lake_directory)")
        if not tables:
            raise PipelineError(
                f"no CDC table on the schema topic {config.kafka.schema_topic!r}: nothing to replay"
            )
        self.spark = spark
        self.config = config
        self.tables = tables
        self.settle_s = settle_seconds(config) if settle_s is None else settle_s
        self._replayed: RDD[ReplayRecord] | None = None

    def _topic_name(self, schema: TableSchema) -> str:
        assert self.config.pipeline is not None
        return clean_topic_name(self.config.pipeline.clean_topic_prefix, schema.keyspace, schema.table)

    def run(self, *, output: Path | None = None, compare: bool = False) -> ReplaySummary:
        started = time.monotonic()
        raw_topic = self.config.kafka.raw_topic
        raw_ends = end_offsets(self.config, raw_topic)
        if raw_ends is None:
            raise PipelineError(
                f"the raw topic {raw_topic!r} (config kafka.raw_topic) does not exist on "
                f"{self.config.kafka.bootstrap_servers}"
            )
        clean_ends: dict[str, Offsets | None] = {}
        if compare:  # after the raw topic's ends and before now: see the module notes
            for schema in self.tables:
                clean_ends[schema.name] = end_offsets(
                    self.config, self._topic_name(schema), read_committed=True
                )
        summary = ReplaySummary(now_s=int(time.time()))
        summary.raw_records = sum(raw_ends.values())  # an upper bound: retention may have removed some
        names = ", ".join(t.name for t in self.tables)
        print(
            f"replay: {raw_topic} ({len(raw_ends)} partitions, offsets up to {summary.raw_records:,}) for "
            f"{names} at now={summary.now_s}",
            flush=True,
        )
        try:
            replayed = self._spark_step(lambda: self.replay(raw_ends, summary))
            if output is not None:
                for schema in self.tables:
                    summary.written[schema.name] = self.write_table(replayed, schema, output, summary.now_s)
                    print(f"replay: wrote {schema.name} to {summary.written[schema.name]}", flush=True)
            for schema in self.tables if compare else []:
                diff = self._spark_step(lambda s=schema: self.compare_table(replayed, s, clean_ends[s.name]))
                print("replay: compared " + diff.describe("replay", "clean topic"), flush=True)
                summary.compared.append(diff)
        finally:
            if self._replayed is not None:
                self._replayed.unpersist()
                self._replayed = None
        summary.seconds = time.monotonic() - started
        return summary

    def _spark_step(self, step: Callable[[], _T]) -> _T:
        """A step that reads Kafka in Spark: a failure of Spark's (Java) Kafka client, which the aiokafka
        checks before did not meet (a key the Java client cannot read...), as a PipelineError."""
        try:
            return step()
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_kafka_failure(spark_failure_line(exc), self.config.kafka)
            raise PipelineError(f"replay failed: {reason}") from exc

    def replay(self, raw_ends: Offsets, summary: ReplaySummary) -> RDD[ReplayRecord]:
        """Every live row of the chosen tables (and the unsettled keys), persisted for the later steps."""
        sc = self.spark.sparkContext
        counters = {
            name: sc.accumulator(0) for name in ("partitions", "events", "skipped", "undecodable", "bad_keys")
        }
        schemas = {(t.keyspace, t.table): t for t in self.tables}
        wanted = frozenset(schemas)
        now_s, settle_s = summary.now_s, self.settle_s
        bad_keys = counters["bad_keys"]
        frame = kafka_batch(self.spark, self.config, self.config.kafka.raw_topic, raw_ends)
        groups = max(len(raw_ends), self.spark.sparkContext.defaultParallelism)
        replayed = (
            frame.select("key", "value")
            .rdd.mapPartitions(lambda rows: _keyed_records(rows, wanted, bad_keys))
            .groupByKey(groups)
            .flatMap(lambda item: _replay_group(item, schemas, now_s, settle_s, counters))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self._replayed = replayed
        started = time.monotonic()
        counts = dict(
            replayed.map(lambda r: (r[0], 1 if r[2] is not None else 0)).reduceByKey(int.__add__).collect()
        )
        summary.rows = {t.name: counts.get(t.name, 0) for t in self.tables}
        summary.partitions = counters["partitions"].value
        summary.events = counters["events"].value
        summary.skipped_events = counters["skipped"].value
        summary.undecodable = counters["undecodable"].value + bad_keys.value
        print(
            f"replay: merged {summary.events:,} events of {summary.partitions:,} partitions into "
            f"{sum(summary.rows.values()):,} rows in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        return replayed

    def table_images(self, replayed: RDD[ReplayRecord], schema: TableSchema) -> dict[str, dict[str, Any]]:
        """The replayed rows of one table on the driver, normalized, by key text (small tables: tests)."""
        name = schema.name
        rows = (
            replayed.filter(lambda r: r[0] == name and r[2] is not None).map(lambda r: (r[1], r[2])).collect()
        )
        return {key: normalize_json_form(schema, json.loads(text)) for key, text in rows}

    def write_table(self, replayed: RDD[ReplayRecord], schema: TableSchema, output: Path, now_s: int) -> Path:
        """One table's images as a Delta table in the lake layout under ``output`` (replaced if there)."""
        name = schema.name
        rows = replayed.filter(lambda r: r[0] == name and r[2] is not None).map(lambda r: (r[2], r[3]))
        path = lake_table_path(output, schema.keyspace, schema.table)
        write_lake_table(self.spark, schema, rows, path, now_s)
        return path

    def clean_images(self, schema: TableSchema, ends: Offsets | None) -> RDD[tuple[str, Any]]:
        """(key text, ((partition, offset), after or None)) of the last clean event of every key."""
        if ends is None or not any(ends.values()):
            return self.spark.sparkContext.emptyRDD()
        frame = kafka_batch(self.spark, self.config, self._topic_name(schema), ends, read_committed=True)
        return frame.select("key", "value", "partition", "offset").rdd.map(_clean_record).reduceByKey(_later)

    def compare_table(
        self, replayed: RDD[ReplayRecord], schema: TableSchema, ends: Offsets | None
    ) -> TableDiff:
        """The replayed images of one table against the final images of its clean topic."""
        if self.config.worker is not None and self.config.worker.encoding != "json":
            raise PipelineError(
                "replay --compare reads JSON clean topics; "
                f"worker.encoding is {self.config.worker.encoding!r}"
            )
        name = schema.name
        mine = replayed.filter(lambda r: r[0] == name).map(lambda r: (r[1], (r[2], r[4])))
        joined = mine.fullOuterJoin(self.clean_images(schema, ends))
        return joined.aggregate(TableDiff(name), _tally(schema), TableDiff.merge)


def run(config: CdcConfig, args: argparse.Namespace) -> int:
    assert config.pipeline is not None
    tables = select_tables(load_table_schemas(config.kafka), getattr(args, "tables", ""))
    spark = build_spark_session(config.pipeline, "cdc-replay")
    output: Path | None = getattr(args, "output", None)
    compare = bool(getattr(args, "compare", False))
    summary = ReplayJob(spark, config, tables).run(output=output, compare=compare)
    print(summary.describe(), flush=True)
    return 0 if summary.clean else 1
