"""One micro-batch of clean events into the Delta tables: the latest change per key, merged in order.

Order is the clean topic's (partition, offset). The workers emit a key's changes in order into one
partition (the key is the primary key), so a later offset is always the later state of the row. The
change's Cassandra write time cannot order them: a write with an older timestamp can still be a new
change (it fills a column nobody had written), so it is kept as information only (``_cdc_write_time_us``).

A MERGE applies a change only when it is newer than what the table holds, so a batch that runs twice
(a restart between the Delta commit and the checkpoint) or a replay from an earlier offset cannot regress
a row. Deleted keys are remembered with their position in a tombstone table beside the lake table
(``_cdc_tombstones``) for ``tombstone_retention_s``, so an older upsert replayed after the delete cannot
bring the row back either. A table's first micro-batch has nothing to merge into: it creates the table
with its rows in one write.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cassandra_model.table_schema import TableSchema
from pipeline.errors import PipelineError
from pipeline.lake_schema import (
    EMITTED_COLUMN,
    KEY_COLUMN,
    OFFSET_COLUMN,
    OP_COLUMN,
    PARTITION_COLUMN,
    WRITE_TIME_COLUMN,
    json_struct,
    lake_columns,
    lake_struct,
    lake_table_path,
)
from pipeline.pinned_frame import pinned

log = logging.getLogger(__name__)

TOMBSTONE_FOLDER = "_cdc_tombstones"
_DELETED = "_cdc_deleted"
RECORDS_COLUMN = "_records"
_MATERIALIZE_SOURCE_CONF = "spark.databricks.delta.merge.materializeSource"
#: rows per file when a table's first micro-batch creates it: a batch of up to this many is one file (Delta
#: would compact several small ones at once), a larger one is written as several files in parallel
FIRST_WRITE_ROWS_PER_FILE = 1_000_000


@dataclass(slots=True)
class TableBatchResult:
    table: str
    changes: int = 0
    """Clean records of the table in the batch (tombstones included)."""
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unapplied: int = 0
    """Latest-per-key changes that changed nothing: the table had a newer one, or a delete found no row."""


@dataclass(slots=True)
class BatchResult:
    batch_id: int
    seconds: float = 0.0
    tables: list[TableBatchResult] = field(default_factory=list)
    skipped_topics: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return sum(t.changes for t in self.tables)


def _envelope(schema: TableSchema) -> StructType:
    source = StructType([StructField("write_time_us", LongType())])
    return StructType(
        [
            StructField("after", json_struct(schema)),
            StructField("op", StringType()),
            StructField("source", source),
            StructField("ts_ms", LongType()),
        ]
    )


def tombstone_path(lake_directory: Path, schema: TableSchema) -> Path:
    return lake_directory / TOMBSTONE_FOLDER / schema.keyspace / schema.table


def _newer(a: str, b: str) -> str:
    """SQL: the change in ``a`` comes after the one in ``b`` (same key, so the same partition unless the
    topic was repartitioned, which clean topics must never be)."""
    return (
        f"({a}.{PARTITION_COLUMN} > {b}.{PARTITION_COLUMN} OR ({a}.{PARTITION_COLUMN} = {b}.{PARTITION_COLUMN} "
        f"AND {a}.{OFFSET_COLUMN} > {b}.{OFFSET_COLUMN}))"
    )


def latest_records(batch: DataFrame) -> DataFrame:
    """The last record per (topic, key) of a micro-batch of clean records, still unparsed, with
    ``_records``: how many records of the batch that key had (so per-topic counts need no second pass).

    Only these are parsed and pinned: the rest are superseded within the batch."""
    key = F.col("key").cast("string")
    # the window sorts by its partition columns first, and Spark's sort settles most comparisons on a
    # 64-bit prefix of the first column alone: the topic's is the same for every row of a one-table batch,
    # so each comparison fell through to the whole row. A hash of (topic, key) in front settles them
    per_key = Window.partitionBy(F.xxhash64("topic", key), "topic", key).orderBy(
        F.col("partition").desc(), F.col("offset").desc()
    )
    whole = per_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = batch.select(
        "topic",
        key.alias(KEY_COLUMN),
        "value",
        F.col("partition").alias(PARTITION_COLUMN),
        F.col("offset").alias(OFFSET_COLUMN),
        F.unix_millis(F.col("timestamp")).alias("_record_ms"),
        F.row_number().over(per_key).alias("_n"),
        F.count(F.lit(1)).over(whole).alias(RECORDS_COLUMN),
    )
    return ranked.where("_n = 1").drop("_n")


def parse_changes(latest: DataFrame, schema: TableSchema) -> DataFrame:
    """One table's ``latest_records`` in the lake layout plus a ``_cdc_deleted`` flag and a ``_bad`` flag
    for a value that is not a JSON change event.

    A tombstone record (null value) deletes its key: log compaction may have removed the ``d`` event it
    followed, and then the tombstone is all a reader gets of the delete."""
    tombstone = F.col("value").isNull()
    parsed = latest.select(
        KEY_COLUMN,
        PARTITION_COLUMN,
        OFFSET_COLUMN,
        "_record_ms",
        tombstone.alias("_tombstone"),
        F.from_json(F.col("value").cast("string"), _envelope(schema)).alias("e"),
    )
    deleted = F.col("_tombstone") | (F.col("e.op") == "d")
    meta: list[Column] = [
        F.col(KEY_COLUMN),
        F.when(F.col("_tombstone"), F.lit("d")).otherwise(F.col("e.op")).alias(OP_COLUMN),
        F.col("e.source.write_time_us").alias(WRITE_TIME_COLUMN),
        F.coalesce(F.col("e.ts_ms"), F.col("_record_ms")).alias(EMITTED_COLUMN),
        F.col(PARTITION_COLUMN),
        F.col(OFFSET_COLUMN),
        deleted.alias(_DELETED),
    ]
    # Spark's JSON reader gives a struct of nulls for text that is not JSON: every change event has an op
    bad = ~F.col("_tombstone") & (F.col("e").isNull() | F.col("e.op").isNull())
    return parsed.select(*lake_columns(schema, F.col("e.after")), *meta, bad.alias("_bad"))


def existing_table(spark: SparkSession, path: Path, schema: StructType) -> DeltaTable | None:
    """The Delta table at ``path`` widened to ``schema`` (a column added in Cassandra arrives as a new
    nullable column; existing rows read null there, as in Cassandra), or None when there is none yet."""
    if not DeltaTable.isDeltaTable(spark, str(path)):
        return None
    table = DeltaTable.forPath(spark, str(path))
    have = set(table.toDF().columns)
    if all(f.name in have for f in schema.fields):
        return table
    empty = spark.createDataFrame([], schema)
    empty.write.format("delta").mode("append").option("mergeSchema", "true").save(str(path))
    return DeltaTable.forPath(spark, str(path))


def _metric(metrics: DataFrame, name: str) -> int:
    row = metrics.first()
    return int(row[name]) if row is not None and name in row.asDict() and row[name] is not None else 0


@dataclass(slots=True)
class ParsedChanges:
    """One table's latest changes of a micro-batch, parsed, checked and pinned, ready to be written."""

    schema: TableSchema
    changes: DataFrame
    count: int
    """Clean records of the table in the batch."""
    latest: int
    """Keys with a change (the rows of ``changes``)."""
    deletes: int


@dataclass(slots=True)
class _TableState:
    """What the writer knows of one table between micro-batches, so a batch runs few Spark jobs."""

    path: Path
    struct: StructType
    target: DeltaTable | None
    """None until the table's first micro-batch creates it with its rows."""
    tombstones: Path
    """Made by the first append of a delete, so a table that never had one has none."""
    has_tombstones: bool


class LakeWriter:
    """Merges micro-batches into the Delta tables under ``lake_directory``."""

    def __init__(self, spark: SparkSession, lake_directory: Path) -> None:
        # the MERGE's source is a pinned frame (a local checkpoint) or that joined with a Delta scan:
        # nothing in it can change between the MERGE's scans, so Delta need not copy it to disk first
        spark.conf.set(_MATERIALIZE_SOURCE_CONF, "none")
        self.spark = spark
        self.lake_directory = lake_directory
        self._tables: dict[tuple[str, str], _TableState] = {}

    def _table(self, schema: TableSchema) -> _TableState:
        struct = lake_struct(schema)
        known = self._tables.get((schema.keyspace, schema.table))
        if known is not None and known.struct == struct:
            return known
        path = lake_table_path(self.lake_directory, schema.keyspace, schema.table)
        target = existing_table(self.spark, path, struct)
        tombstones = tombstone_path(self.lake_directory, schema)
        # reading the tombstone table costs a Delta snapshot and a job (0.97 s in a warm run's event log):
        # once per table, not again when the table gained a column
        if known is not None:
            has_tombstones = known.has_tombstones
        else:
            has_tombstones = DeltaTable.isDeltaTable(self.spark, str(tombstones)) and bool(
                self.spark.read.format("delta").load(str(tombstones)).limit(1).count()
            )
        state = _TableState(path, struct, target, tombstones, has_tombstones)
        self._tables[(schema.keyspace, schema.table)] = state
        return state

    def merge(self, latest: DataFrame, schema: TableSchema, count: int) -> TableBatchResult:
        """Apply one table's ``latest_records`` (of ``count`` clean records) to its Delta table."""
        with ExitStack() as stack:
            return self.apply(self.parse(latest, schema, count, stack))

    def parse(self, latest: DataFrame, schema: TableSchema, count: int, stack: ExitStack) -> ParsedChanges:
        """One table's ``latest_records`` (JSON change events) parsed into the lake layout, pinned until
        ``stack`` closes, and checked: a record that is not a JSON change event stops the batch here,
        before ``apply`` writes anything, with an error naming its topic, partition and offset."""
        changes = stack.enter_context(pinned(parse_changes(latest, schema)))
        totals = changes.agg(
            F.count(F.lit(1)).alias("latest"),
            F.sum(F.col("_bad").cast("int")).alias("bad"),
            F.sum(F.col(_DELETED).cast("int")).alias("deletes"),
        ).first()
        assert totals is not None
        if totals["bad"]:
            raise self._not_json(latest, changes, schema, totals["bad"])
        return ParsedChanges(schema, changes, count, totals["latest"], totals["deletes"] or 0)

    @staticmethod
    def _not_json(latest: DataFrame, changes: DataFrame, schema: TableSchema, bad: int) -> PipelineError:
        from pipeline.clean_records import wrong_encoding

        first = (
            changes.where("_bad")
            .orderBy(PARTITION_COLUMN, OFFSET_COLUMN)
            .select(PARTITION_COLUMN, OFFSET_COLUMN)
            .first()
        )
        assert first is not None
        partition, offset = first[PARTITION_COLUMN], first[OFFSET_COLUMN]
        record = latest.where(
            (F.col(PARTITION_COLUMN) == partition) & (F.col(OFFSET_COLUMN) == offset)
        ).first()
        topic = record["topic"] if record is not None else schema.name
        value = bytes(record["value"]) if record is not None and record["value"] is not None else None
        return PipelineError(
            f"lake: {topic} partition {partition} offset {offset} ({bad} such records in the batch): "
            f"{wrong_encoding('value', value, 'json')}"
        )

    def apply(self, parsed: ParsedChanges) -> TableBatchResult:
        """Write one table's parsed changes of the batch into its Delta table."""
        schema, changes = parsed.schema, parsed.changes
        result = TableBatchResult(schema.name, changes=parsed.count)
        table = self._table(schema)
        fresh = changes
        screened = table.has_tombstones
        if screened:  # a change older than a delete the lake already applied is stale
            known = self.spark.read.format("delta").load(str(table.tombstones))
            fresh = changes.alias("s").join(
                known.alias("t"),
                F.expr(f"s.{KEY_COLUMN} = t.{KEY_COLUMN} AND {_newer('t', 's')}"),
                "left_anti",
            )
        if table.target is None and self._create(table, fresh, parsed.latest):
            # nothing to match in a table that did not exist: every change that is not a delete is
            # a row of it. Counted here only when no tombstone could have held a change back
            result.inserted = (
                fresh.where(~F.col(_DELETED)).count() if screened else parsed.latest - parsed.deletes
            )
        else:
            result.inserted, result.updated, result.deleted = self._merge_into(table, fresh)
        applied = result.inserted + result.updated + result.deleted
        result.unapplied = max(0, parsed.latest - applied)
        if parsed.deletes:
            # appended, not merged: the anti-join above only asks whether some tombstone of the key
            # is newer than the change, so older or repeated tombstones are harmless until purged.
            # One file a batch (a batch's deletes are few): each file is one more for auto compaction
            # to rewrite and for every snapshot of the table to list
            changes.where(F.col(_DELETED)).select(
                KEY_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN, EMITTED_COLUMN
            ).coalesce(1).write.format("delta").mode("append").save(str(table.tombstones))
            table.has_tombstones = True
        return result

    def _create(self, table: _TableState, fresh: DataFrame, rows: int) -> bool:
        """Create the Delta table with the rows of its first micro-batch, in one commit. The MERGE into a
        table created empty took 2.3 s more of a warm run's 8.8 s first batch (bench/lake_pipeline.md).
        False when another writer created the table meanwhile: the batch is then merged into it.

        One file per ``FIRST_WRITE_ROWS_PER_FILE`` rows: Delta compacts the small files of a table it has
        not compacted yet in this JVM after its first commit, so files of a few MB each would be read and
        written again at once."""
        upserts = fresh.where(~F.col(_DELETED)).select(
            *(F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in table.struct.fields)
        )
        files = max(1, -(-rows // FIRST_WRITE_ROWS_PER_FILE))
        try:
            upserts.coalesce(files).write.format("delta").mode("errorifexists").save(str(table.path))
        except AnalysisException:
            if not DeltaTable.isDeltaTable(self.spark, str(table.path)):
                raise
            log.warning("lake: %s was created by another writer; merging into it", table.path)
            table.target = existing_table(self.spark, table.path, table.struct)
            return False
        table.target = DeltaTable.forPath(self.spark, str(table.path))
        return True

    def _merge_into(self, table: _TableState, fresh: DataFrame) -> tuple[int, int, int]:
        """MERGE the changes into the table: (rows inserted, updated, deleted)."""
        assert table.target is not None
        values = {f"`{f.name}`": f"s.`{f.name}`" for f in table.struct.fields}
        metrics = (
            table.target.alias("t")
            .merge(fresh.alias("s"), f"t.{KEY_COLUMN} = s.{KEY_COLUMN}")
            .whenMatchedDelete(condition=f"s.{_DELETED} AND {_newer('s', 't')}")
            .whenMatchedUpdate(condition=f"NOT s.{_DELETED} AND {_newer('s', 't')}", set=values)
            .whenNotMatchedInsert(condition=f"NOT s.{_DELETED}", values=values)
            .execute()
        )
        return (
            _metric(metrics, "num_inserted_rows"),
            _metric(metrics, "num_updated_rows"),
            _metric(metrics, "num_deleted_rows"),
        )

    def forget_old_tombstones(self, schema: TableSchema, retention_s: int) -> None:
        """Drop tombstones older than the retention, so the tombstone table stays small."""
        table = self._tables.get((schema.keyspace, schema.table))
        if table is not None and table.has_tombstones:
            horizon = int(time.time() * 1000) - retention_s * 1000
            DeltaTable.forPath(self.spark, str(table.tombstones)).delete(
                F.col(EMITTED_COLUMN) < F.lit(horizon)
            )
