"""`cdc pipeline lake`: the clean topics into one Delta table per CDC table, as a Structured Stream.

Kafka offsets live in the stream's checkpoint; each micro-batch is merged with ``lake_merge`` (latest change
per key, applied only when newer than the row the table holds), so a restart at any point, which replays
the batch that was running, leaves every table correct. Clean topics are read with read_committed
isolation: the workers write them in Kafka transactions, and an aborted change never happened.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cassandra_model.table_schema import TableSchema
from pipeline.clean_records import CleanTopics, as_json_keys, as_json_values
from pipeline.errors import PipelineError, spark_failure_line
from pipeline.job_phases import JobPhases
from pipeline.kafka_source import BACKLOG_READ_OPTIONS, kafka_format, spark_kafka_failure
from pipeline.lake_merge import RECORDS_COLUMN, BatchResult, LakeWriter, latest_records
from pipeline.pinned_frame import pinned
from pipeline.spark_session import build_spark_session
from pipeline.table_catalog import load_table_schemas, select_tables
from runtime.config import CdcConfig, PipelineConfig
from schemas.change_event import clean_topic_name

log = logging.getLogger(__name__)

#: how many micro-batches pass between two purges of old tombstones
TOMBSTONE_PURGE_EVERY = 50


@dataclass(slots=True)
class LakeSummary:
    batches: int = 0
    changes: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    seconds: float = 0.0
    per_table: dict[str, int] = field(default_factory=dict)

    def add(self, batch: BatchResult) -> None:
        self.batches += 1
        for t in batch.tables:
            self.changes += t.changes
            self.inserted += t.inserted
            self.updated += t.updated
            self.deleted += t.deleted
            self.per_table[t.table] = self.per_table.get(t.table, 0) + t.changes

    def describe(self) -> str:
        rate = self.changes / self.seconds if self.seconds else 0.0
        tables = ", ".join(f"{name} {n:,}" for name, n in sorted(self.per_table.items())) or "none"
        return (
            f"lake: {self.batches} micro-batches, {self.changes:,} changes ({rate:,.0f}/s) in {self.seconds:.1f} s; "
            f"rows inserted {self.inserted:,}, updated {self.updated:,}, deleted {self.deleted:,}; "
            f"per table: {tables}"
        )


def topic_pattern(prefix: str, tables: list[TableSchema] | None) -> str:
    """The Kafka subscription pattern (Java regex) for the clean topics of ``tables``, or of every table."""
    if tables:
        return "|".join(re.escape(clean_topic_name(prefix, t.keyspace, t.table)) for t in tables)
    return re.escape(prefix) + r"\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+"


class LakeJob:
    """One streaming query over the clean topics; `run` blocks until it ends (``once``) or is stopped."""

    def __init__(
        self,
        spark: SparkSession,
        config: CdcConfig,
        *,
        tables: str = "",
        once: bool = False,
        phases: JobPhases | None = None,
    ) -> None:
        if config.pipeline is None:
            raise PipelineError("the lake job needs a pipeline section (pipeline.lake_directory)")
        self.encoding, self.registry_url = clean_encoding(config)
        self.spark = spark
        self.config = config
        self.pipeline: PipelineConfig = config.pipeline
        self.once = once
        self.summary = LakeSummary()
        self.phases = phases or JobPhases("lake")
        self._last_step = time.monotonic()
        self.writer = LakeWriter(spark, self.pipeline.lake_directory)
        with self.phases.timed("schema topic"):
            schemas = load_table_schemas(config.kafka)
        chosen = select_tables(schemas, tables) if tables else None
        self.table_filter = {(t.keyspace, t.table) for t in chosen} if chosen else None
        self.pattern = topic_pattern(self.pipeline.clean_topic_prefix, chosen)
        name = "lake" if not tables else "lake-" + hashlib.sha1(self.pattern.encode()).hexdigest()[:12]
        self.checkpoint = (
            self.pipeline.checkpoint_directory or self.pipeline.lake_directory / "_checkpoints"
        ) / name

    def _stream(self) -> DataFrame:
        return (
            kafka_format(self.spark.readStream, self.config.kafka)
            .option("subscribePattern", self.pattern)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(self.pipeline.max_offsets_per_trigger))
            .option("kafka.isolation.level", "read_committed")
            # compaction removes offsets from clean topics; a gap is expected, not data loss
            .option("failOnDataLoss", "false")
            .options(**BACKLOG_READ_OPTIONS)
            .load()
        )

    def _table_of(self, topic: str, schemas: dict[tuple[str, str], TableSchema]) -> TableSchema | None:
        prefix = self.pipeline.clean_topic_prefix + "."
        keyspace, _, table = topic[len(prefix) :].partition(".")
        if self.table_filter is not None and (keyspace, table) not in self.table_filter:
            return None
        return schemas.get((keyspace, table))

    def _clean_topics(self, schemas: dict[tuple[str, str], TableSchema]) -> CleanTopics:
        tables = {
            clean_topic_name(self.pipeline.clean_topic_prefix, t.keyspace, t.table): t
            for key, t in schemas.items()
            if self.table_filter is None or key in self.table_filter
        }
        return CleanTopics(self.encoding, self.registry_url, tables)

    def merge_batch(self, batch: DataFrame, batch_id: int) -> BatchResult:
        """foreachBatch: every table's changes of the micro-batch into its Delta table."""
        started = time.monotonic()
        # before the first batch: the query's start (Kafka offsets, planning); between two: the stream's own
        self.phases.add(
            "stream start" if self.summary.batches == 0 else "between micro-batches",
            started - self._last_step,
        )
        result = BatchResult(batch_id)
        # the newest columns, read from the schema topic while Spark reads the batch (0.2-0.3 s a batch
        # against the bench's broker); the batch's records were on their topics before this started, so
        # the schemas read are as new as the ones that were current when those records were emitted
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lake-schemas") as reader:
            newest = reader.submit(load_table_schemas, self.config.kafka)
            topics = None
            if self.encoding != "json":  # keys decoded before the latest record of each is found
                topics = self._clean_topics(newest.result())
                batch = as_json_keys(batch, topics)
            # tombstones too: after compaction one may be all that is left of a delete
            with pinned(latest_records(batch)) as latest:
                totals = latest.groupBy("topic").agg(F.sum(RECORDS_COLUMN).alias("records")).collect()
                schemas = newest.result()
                self._merge_topics(latest, {r.topic: r.records for r in totals}, schemas, topics, result)
        result.seconds = time.monotonic() - started
        self._last_step = started + result.seconds
        self.phases.add("micro-batches", result.seconds)
        self.summary.add(result)
        if result.tables:
            detail = ", ".join(f"{t.table} +{t.inserted} ~{t.updated} -{t.deleted}" for t in result.tables)
            print(
                f"lake: batch {batch_id}: {result.changes:,} changes in {result.seconds:.1f} s ({detail})",
                flush=True,
            )
        return result

    def _merge_topics(
        self,
        latest: DataFrame,
        counts: dict[str, int],
        schemas: dict[tuple[str, str], TableSchema],
        topics: CleanTopics | None,
        result: BatchResult,
    ) -> None:
        """Each topic's latest records into its table; a topic with no table on the schema topic is skipped.

        Every table's changes are parsed and checked before the first is written, so a bad record stops
        the batch with nothing of it in the lake (the stream's checkpoint still points before it)."""
        with ExitStack() as stack:
            parsed = []
            for topic, count in sorted(counts.items()):
                schema = self._table_of(topic, schemas)
                if schema is None:
                    result.skipped_topics.append(topic)
                    log.warning(
                        "lake: %s has no table on the schema topic (dropped?); its records skipped", topic
                    )
                    continue
                records = latest.where(F.col("topic") == topic)
                if topics is not None:
                    records = as_json_values(records, topics)
                parsed.append(self.writer.parse(records, schema, count, stack))
            for changes in parsed:
                result.tables.append(self.writer.apply(changes))
                if result.batch_id % TOMBSTONE_PURGE_EVERY == TOMBSTONE_PURGE_EVERY - 1:
                    self.writer.forget_old_tombstones(changes.schema, self.pipeline.tombstone_retention_s)

    def run(self) -> LakeSummary:
        started = time.monotonic()
        writer = (
            self._stream()
            .writeStream.foreachBatch(self.merge_batch)
            .option("checkpointLocation", str(self.checkpoint))
            .queryName("cdc-lake")
        )
        writer = (
            writer.trigger(availableNow=True)
            if self.once
            else writer.trigger(processingTime=f"{self.pipeline.trigger_interval_s} seconds")
        )
        print(
            f"lake: {self.pattern} -> Delta tables under {self.pipeline.lake_directory} "
            f"(checkpoint {self.checkpoint}){'; stops when caught up' if self.once else '; Ctrl-C stops'}",
            flush=True,
        )
        self._last_step = time.monotonic()
        query = writer.start()
        try:
            while query.isActive:
                query.awaitTermination(10)
        except KeyboardInterrupt:
            query.stop()
        except StreamingQueryException:
            pass  # the query's exception, below, says why
        self.summary.seconds = time.monotonic() - started
        self.phases.add("stream end", time.monotonic() - self._last_step)
        error: Any = query.exception()
        if error is not None:
            text = str(getattr(error, "desc", None) or error)
            raise PipelineError(
                f"the lake stream failed, nothing of its last micro-batch is in the lake: "
                f"{spark_kafka_failure(spark_failure_line(text), self.config.kafka)}"
            )
        return self.summary


def clean_encoding(config: CdcConfig) -> tuple[str, str | None]:
    """The clean topics' encoding and (for Avro) the registry URL: ``pipeline.encoding`` and
    ``pipeline.schema_registry_url``, else the worker section's, else JSON."""
    assert config.pipeline is not None
    worker = config.worker
    encoding = config.pipeline.encoding or (worker.encoding if worker is not None else "json")
    url = config.pipeline.schema_registry_url or (worker.schema_registry_url if worker is not None else None)
    if encoding == "avro" and not url:
        raise PipelineError(
            "config key pipeline.schema_registry_url is required to read Avro clean topics (pipeline.encoding "
            "or worker.encoding is 'avro'): the registry the workers write their schemas to"
        )
    return encoding, url


def run(config: CdcConfig, args: argparse.Namespace) -> int:
    assert config.pipeline is not None
    phases = JobPhases("lake")
    with phases.timed("Spark session"):
        spark = build_spark_session(config.pipeline, "cdc-lake")
    summary = LakeJob(spark, config, tables=args.tables, once=args.once, phases=phases).run()
    print(summary.describe())
    print(phases.line(), flush=True)
    return 0
