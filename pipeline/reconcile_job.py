"""`cdc pipeline reconcile`: a lake table (or replayed images) against Cassandra, key by key.

Cassandra is read at consistency ALL, in parallel by token range (``pipeline.cassandra_scan``), and each
row is put in the clean topics' JSON form as the oracle of ``cdc verify`` does; the Delta table is read
back into the same form (``pipeline.lake_reader``). A full outer join by primary key gives, per table: rows
on each side, rows missing in the lake, extra rows in the lake, rows with different values and which
columns differ, with the smallest example keys. The ``_cdc_*`` columns of the lake are not compared.

Both sides are read while the system runs: a change that reached Cassandra but not yet the lake (worker or
lake job lag), or a TTL that runs out during the scan, shows as a difference. Run it when the pipeline is
idle, or run it again and look at the keys that stay.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import RDD
from pyspark.sql import SparkSession

from cassandra_model.table_schema import TableSchema
from pipeline.cassandra_scan import check_table, scan_spec, scan_table
from pipeline.errors import PipelineError
from pipeline.lake_reader import image_of, lake_json
from pipeline.lake_schema import lake_table_path, normalize_json_form
from pipeline.row_diff import TableDiff
from pipeline.spark_session import build_spark_session
from pipeline.table_catalog import load_table_schemas, select_tables
from runtime.config import CdcConfig
from schemas.driver_rows import driver_row_image, key_text

log = logging.getLogger(__name__)


def cassandra_image(schema: TableSchema, row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(key text, normalized JSON-form row) of one row a scan returned (cassandra-driver values)."""
    _, image = driver_row_image(schema, row)
    normalized = normalize_json_form(schema, json.loads(json.dumps(image, allow_nan=False)))
    key = {c.name: normalized[c.name] for c in (*schema.partition_key, *schema.clustering)}
    return key_text(key), normalized


def _tally(schema: TableSchema) -> Any:
    def add(diff: TableDiff, item: tuple[str, tuple[Any, Any]]) -> TableDiff:
        key, (cassandra, lake) = item
        diff.add(schema, key, cassandra, lake)
        return diff

    return add


@dataclass(slots=True)
class TableReport:
    diff: TableDiff
    path: Path
    present: bool
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.diff.as_dict("cassandra", "lake"),
            "lake_table": str(self.path),
            "lake_table_exists": self.present,
            "seconds": round(self.seconds, 1),
        }


@dataclass(slots=True)
class ReconcileReport:
    against: Path
    started_at: str
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return all(t.diff.clean for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "against": str(self.against),
            "consistency": "ALL",
            "started_at": self.started_at,
            "seconds": round(self.seconds, 1),
            "clean": self.clean,
            "tables": [t.as_dict() for t in self.tables],
        }

    def describe(self) -> str:
        lines = [f"reconcile: {len(self.tables)} tables against {self.against} in {self.seconds:.1f} s"]
        for table in self.tables:
            absent = "" if table.present else " (no Delta table there)"
            lines.append("  " + table.diff.describe("cassandra", "lake") + absent)
        lines.append("reconcile: lake and Cassandra agree" if self.clean else "reconcile: DIFFERENCES found")
        return "\n".join(lines)


class ReconcileJob:
    """Reconcile of some tables against the Delta tables under ``directory`` (``<ks>/<table>``)."""

    def __init__(
        self, spark: SparkSession, config: CdcConfig, tables: list[TableSchema], directory: Path
    ) -> None:
        if not tables:
            raise PipelineError(
                f"no CDC table on the schema topic {config.kafka.schema_topic!r}: nothing to reconcile"
            )
        self.spark = spark
        self.config = config
        self.tables = tables
        self.directory = directory

    def _present(self, schema: TableSchema) -> bool:
        from delta.tables import DeltaTable

        path = lake_table_path(self.directory, schema.keyspace, schema.table)
        return DeltaTable.isDeltaTable(self.spark, str(path))

    def run(self) -> ReconcileReport:
        started = time.monotonic()
        report = ReconcileReport(self.directory, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        present = {t.name: self._present(t) for t in self.tables}
        if not any(present.values()):
            raise PipelineError(
                f"no Delta table of {', '.join(t.name for t in self.tables)} under {self.directory} "
                "(<keyspace>/<table>): has the lake job run, or is --against the right folder?"
            )
        for schema in self.tables:
            table_started = time.monotonic()
            print(f"reconcile: {schema.name}: scanning Cassandra at ALL and the lake table", flush=True)
            diff = self.compare_table(schema, present[schema.name])
            table = TableReport(
                diff,
                lake_table_path(self.directory, schema.keyspace, schema.table),
                present[schema.name],
                time.monotonic() - table_started,
            )
            print(f"reconcile: {diff.describe('cassandra', 'lake')} ({table.seconds:.1f} s)", flush=True)
            report.tables.append(table)
        report.seconds = time.monotonic() - started
        return report

    def cassandra_rows(self, schema: TableSchema) -> RDD[tuple[str, dict[str, Any]]]:
        rows = scan_table(self.spark, self.config, schema, with_write_times=False, consistency="ALL")
        return rows.map(lambda row: cassandra_image(schema, row))

    def lake_rows(self, schema: TableSchema, present: bool) -> RDD[tuple[str, dict[str, Any]]]:
        if not present:
            return self.spark.sparkContext.emptyRDD()
        path = lake_table_path(self.directory, schema.keyspace, schema.table)
        return lake_json(self.spark, path, schema).rdd.map(lambda r: image_of(schema, r.json))

    def compare_table(self, schema: TableSchema, present: bool = True) -> TableDiff:
        joined = self.cassandra_rows(schema).fullOuterJoin(self.lake_rows(schema, present))
        return joined.aggregate(TableDiff(schema.name), _tally(schema), TableDiff.merge)


def write_report(report: ReconcileReport, target: Path) -> None:
    """The report as JSON (``--report``): per table the counts, differing columns and example keys."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report.as_dict(), indent=2) + "\n")


def run(config: CdcConfig, args: argparse.Namespace) -> int:
    assert config.pipeline is not None
    tables = select_tables(load_table_schemas(config.kafka), getattr(args, "tables", ""))
    against = getattr(args, "against", "lake") or "lake"
    directory = config.pipeline.lake_directory if against == "lake" else Path(against)
    for schema in tables:  # before Spark starts: a refused login or certificate fails within seconds
        check_table(scan_spec(config, schema, with_write_times=False, consistency="ALL"))
    spark = build_spark_session(config.pipeline, "cdc-reconcile")
    report = ReconcileJob(spark, config, tables, directory).run()
    print(report.describe(), flush=True)
    target: Path | None = getattr(args, "report", None)
    if target is not None:
        write_report(report, target)
        print(f"reconcile: report written to {target}", flush=True)
    return 0 if report.clean else 1
