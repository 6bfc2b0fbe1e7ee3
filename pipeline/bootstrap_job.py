"""`cdc pipeline bootstrap`: the rows that existed before CDC, fed to the workers through the raw topic.

Each table is scanned from Cassandra by token range with the write time and TTL of every cell
(``pipeline.cassandra_scan``), each partition becomes raw events of the agents' shape
(``pipeline.snapshot_events``), and the task that built them publishes them to the raw topic with the
agents' key (``pipeline.raw_topic_writer``), in the partition Kafka's default murmur2 partitioner gives it:
the same as the partition's live events.
The workers merge them with last-write-wins like any write and emit ``op = r`` for rows they did not
know, so later changes carry full before images. Safe while the stream runs: a live write newer than
the snapshot wins whichever arrives first; a second run repeats the digests and emits nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka.errors import KafkaError

from cassandra_model.table_schema import TableSchema
from pipeline.cassandra_scan import RawPage, check_table, scan_spec, scan_table
from pipeline.errors import PipelineError, spark_failure_line
from pipeline.job_phases import JobPhases
from pipeline.kafka_source import kafka_failure, spark_kafka_failure
from pipeline.raw_topic_writer import RawTopicWriter
from pipeline.snapshot_core import NativeSnapshotEncoder, chosen_core, core_words, snapshot_encoder
from pipeline.spark_session import build_spark_session
from pipeline.table_catalog import load_table_schemas, select_tables
from runtime.config import CdcConfig
from runtime.kafka_clients import make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from runtime.tls import ClientSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 5.0


@dataclass(slots=True)
class TableSummary:
    """What the bootstrap of one table read and published."""

    table: str
    ranges: int = 0
    partitions: int = 0
    rows: int = 0
    cells: int = 0
    events: int = 0
    seconds: float = 0.0
    fallback_rows: int = 0
    """Rows whose events an executor built with the Python encoder although the native one was chosen:
    that executor's Python has no native core (same events, several times the CPU)."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class BootstrapSummary:
    tables: list[TableSummary] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(getattr(t, name) for t in self.tables)

    def text(self) -> str:
        rows = self.total("rows")
        rate = rows / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"bootstrap: {len(self.tables)} tables, {self.total('partitions')} partitions, {rows} rows, "
            f"{self.total('cells')} cells, {self.total('events')} raw events published in "
            f"{self.seconds:.1f} s ({rate:.0f} rows/s)"
        ]
        lines += [
            f"  {t.table}: {t.partitions} partitions, {t.rows} rows, {t.cells} cells, {t.events} events, "
            f"{t.seconds:.1f} s ({t.rows_per_s:.0f} rows/s)"
            for t in self.tables
        ]
        lines += [f"  {name}: skipped (counter table, no WRITETIME on counters)" for name in self.skipped]
        lines += [
            f"  warning: {t.table}: {t.fallback_rows} rows built by the Python encoder on executors whose "
            "Python has no native core (same events, several times the CPU; see pipeline.executor_python)"
            for t in self.tables
            if t.fallback_rows
        ]
        return "\n".join(lines)


async def _raw_partitions(config: CdcConfig) -> int:
    kafka = config.kafka
    consumer = make_consumer(kafka)
    await start_kafka_client(consumer, kafka)
    try:
        return len(await topic_partitions(consumer, kafka.raw_topic))
    finally:
        await consumer.stop()


def check_raw_topic(config: CdcConfig) -> int:
    """The raw topic's partition count. It must exist: a topic Kafka auto-created on the first write
    would have the broker's default count, and keys would land apart from the agents' events."""
    kafka = config.kafka
    try:
        partitions = asyncio.run(_raw_partitions(config))
    except (KafkaError, OSError, ClientSetupError) as exc:
        raise kafka_failure(exc, kafka, f"read the partitions of raw topic {kafka.raw_topic!r}") from exc
    if partitions == 0:
        raise PipelineError(
            f"raw topic {kafka.raw_topic!r} (config kafka.raw_topic) does not exist on "
            f"{kafka.bootstrap_servers}; start the agents (they create it) before the bootstrap"
        )
    return partitions


class _Progress(threading.Thread):
    """Prints ranges done / total, rows and rows/s of the running table every few seconds."""

    def __init__(self, spark: SparkSession, group: str, summary: TableSummary, rows: Any) -> None:
        super().__init__(daemon=True, name=f"progress-{group}")
        self.tracker = spark.sparkContext.statusTracker()
        self.group = group
        self.summary = summary
        self.rows = rows
        self.started = time.monotonic()
        self.stopped = threading.Event()

    def ranges_done(self) -> int:
        done = 0
        for job_id in self.tracker.getJobIdsForGroup(self.group):
            job = self.tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = self.tracker.getStageInfo(stage_id)
                if stage is not None:
                    done = max(done, stage.numCompletedTasks)
        return done

    def run(self) -> None:
        while not self.stopped.wait(PROGRESS_INTERVAL_S):
            rows = self.rows.value
            elapsed = time.monotonic() - self.started
            print(
                f"bootstrap {self.summary.table}: ranges {self.ranges_done()}/{self.summary.ranges}, "
                f"{rows} rows, {rows / elapsed:.0f} rows/s",
                flush=True,
            )


def bootstrap_table(
    spark: SparkSession, config: CdcConfig, schema: TableSchema, *, raw_partitions: int, published_at_ms: int
) -> TableSummary:
    """Scan one table and publish its raw events to the raw topic of ``raw_partitions`` partitions from
    the tasks that build them; returns the counts."""
    splits = config.pipeline.bootstrap_splits if config.pipeline else 64
    summary = TableSummary(schema.name, ranges=splits)
    started = time.monotonic()
    context = spark.sparkContext
    counters = {
        name: context.accumulator(0) for name in ("partitions", "rows", "cells", "events", "fallback_rows")
    }
    cluster = config.cluster
    kafka = config.kafka
    core = chosen_core(config)

    def publish(pages: Iterable[RawPage]) -> None:
        counted = _Counted(pages)
        encoder = snapshot_encoder(schema, core=core, cluster=cluster, published_at_ms=published_at_ms)
        writer = RawTopicWriter(kafka, raw_partitions, what=f"raw events of {schema.name}")
        partitions = cells = events = 0
        for _, built in encoder.events_of_pages(counted):
            partitions += 1
            for event in built:
                cells += event.cells
                events += 1
                writer.write(event.key, event.value)
        writer.finish()
        for name, count in (("partitions", partitions), ("cells", cells), ("events", events)):
            counters[name].add(count)
        counters["rows"].add(counted.count)
        if core == "native" and not isinstance(encoder, NativeSnapshotEncoder):
            counters["fallback_rows"].add(counted.count)

    pages = scan_table(spark, config, schema, with_write_times=True, splits=splits, raw_pages=True)
    group = f"cdc-bootstrap-{schema.keyspace}.{schema.table}-{published_at_ms}"
    context.setJobGroup(group, f"bootstrap of {schema.name}")
    progress = _Progress(spark, group, summary, counters["rows"])
    progress.start()
    try:
        pages.foreachPartition(publish)
    except Exception as exc:  # Py4JJavaError / PythonException from a task: keep the useful line
        raise PipelineError(
            f"bootstrap of {schema.name} to raw topic {kafka.raw_topic!r} failed: "
            f"{spark_kafka_failure(spark_failure_line(exc), kafka)}"
        ) from exc
    finally:
        progress.stopped.set()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    for name, accumulator in counters.items():
        setattr(summary, name, accumulator.value)
    summary.seconds = time.monotonic() - started
    return summary


class _Counted:
    """Counts the rows of the pages a task's encoder pulls from the scan."""

    __slots__ = ("count", "pages")

    def __init__(self, pages: Iterable[RawPage]) -> None:
        self.pages = iter(pages)
        self.count = 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> RawPage:
        page = next(self.pages)
        self.count += page.count
        return page


def run(config: CdcConfig, args: argparse.Namespace) -> int:
    """The job: every CDC table named by ``--tables`` (default all), one after another."""
    if config.pipeline is None:
        raise PipelineError(f"{config.source} has no pipeline section (needs pipeline.lake_directory)")
    phases = JobPhases("bootstrap")
    started = time.monotonic()
    wanted = getattr(args, "tables", "") or ""
    with phases.timed("schema topic"):
        schemas = select_tables(load_table_schemas(config.kafka), wanted)
    summary = BootstrapSummary()
    chosen = []
    for schema in schemas:
        if schema.is_counter:
            if wanted:
                raise PipelineError(
                    f"{schema.name} is a counter table: Cassandra allows no WRITETIME on counters, so it "
                    "cannot be bootstrapped; leave it out of --tables"
                )
            summary.skipped.append(schema.name)
            continue
        chosen.append(schema)
    if not chosen:
        print("bootstrap: no CDC table to read (is an agent running? do the tables have cdc = true?)")
        return 0
    with phases.timed("raw topic metadata"):
        partitions = check_raw_topic(config)
    with phases.timed("Cassandra check"):
        for schema in chosen:  # before Spark starts: a refused login or certificate fails within seconds
            check_table(scan_spec(config, schema, with_write_times=True))
    print(
        f"bootstrap: {len(chosen)} tables from Cassandra {','.join(config.cassandra.contact_points)}:"
        f"{config.cassandra.port} to raw topic {config.kafka.raw_topic} ({partitions} partitions), "
        f"{config.pipeline.bootstrap_splits} token ranges per table, events built by the "
        f"{core_words(chosen_core(config))}",
        flush=True,
    )
    with phases.timed("Spark session"):
        spark = build_spark_session(config.pipeline, "cdc-bootstrap")
    published_at_ms = int(time.time() * 1000)
    for schema in chosen:
        with phases.timed("table scans and publishing"):
            table = bootstrap_table(
                spark, config, schema, raw_partitions=partitions, published_at_ms=published_at_ms
            )
        print(
            f"bootstrap {table.table}: {table.ranges}/{table.ranges} ranges, {table.rows} rows, "
            f"{table.events} events, {table.rows_per_s:.0f} rows/s",
            flush=True,
        )
        summary.tables.append(table)
    summary.seconds = time.monotonic() - started
    print(summary.text(), flush=True)
    print(phases.line(), flush=True)
    return 0
