"""Lake tables read back as the clean topics' JSON form, keyed like the oracle keys rows.

The one way jobs and tests compare a Delta table with Cassandra or with the workers: each row through
``json_form_columns`` and ``to_json`` in Spark, then ``normalize_json_form`` in Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cassandra_model.table_schema import TableSchema
from pipeline.errors import PipelineError
from pipeline.lake_schema import json_form_columns, normalize_json_form
from schemas.driver_rows import key_text


def lake_json(
    spark: SparkSession, path: Path, schema: TableSchema, *, version: int | None = None
) -> DataFrame:
    """One column ``json``: each row of the Delta table at ``path`` as its JSON form (text)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise PipelineError(f"{schema.name}: no Delta table at {path} (has the lake job run?)")
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(str(path))
    columns = json_form_columns(schema, frame.columns)
    return frame.select(F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}).alias("json"))


def image_of(schema: TableSchema, text: str) -> tuple[str, dict[str, Any]]:
    """(key text, normalized JSON-form row) of one ``lake_json`` value."""
    row = normalize_json_form(schema, json.loads(text))
    key = {c.name: row[c.name] for c in (*schema.partition_key, *schema.clustering)}
    return key_text(key), row


def collect_lake_images(
    spark: SparkSession, path: Path, schema: TableSchema, *, version: int | None = None
) -> dict[str, dict[str, Any]]:
    """Every row of a (small) lake table, keyed by primary key, normalized for comparison."""
    return dict(image_of(schema, r.json) for r in lake_json(spark, path, schema, version=version).collect())
