"""`pipeline.lake_merge.LakeWriter` on real Spark and Delta: a table's first micro-batch creates it with its
rows in one write, later ones MERGE, and a table another writer created meanwhile is merged into."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from pipeline.lake_merge import LakeWriter, existing_table
from pipeline.lake_schema import KEY_COLUMN, OFFSET_COLUMN, PARTITION_COLUMN, lake_struct, lake_table_path
from schemas.change_event import ChangeSource
from schemas.change_json import JsonChangeCodec

_LATEST = StructType(
    [
        StructField(KEY_COLUMN, StringType()),
        StructField("value", BinaryType()),
        StructField(PARTITION_COLUMN, IntegerType()),
        StructField(OFFSET_COLUMN, LongType()),
        StructField("_record_ms", LongType()),
    ]
)


def _schema() -> TableSchema:
    catalog = load_schema_from_cql(
        "CREATE KEYSPACE shop WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};\n"
        "CREATE TABLE shop.items (id int PRIMARY KEY, name text, qty int) "
        "WITH ID = 5d6c4e2a-0000-4000-8000-00000000a001 AND cdc = true;"
    )
    schema = catalog.by_name("shop", "items")
    assert schema is not None
    return schema


def _latest(spark: Any, schema: TableSchema, changes: list[tuple[int, int, dict[str, Any] | None]]) -> Any:
    """A frame shaped like `latest_records`: (offset, id, row after the change or None for a delete)."""
    codec = JsonChangeCodec()
    rows = []
    for offset, key, after in changes:
        source = ChangeSource("test", schema.keyspace, schema.table, 1_000 + offset, "node1", 1, offset)
        envelope = {"before": None, "after": after, "op": "d" if after is None else "u", "ts_ms": offset}
        value = codec.encode_value(schema, envelope | {"source": source.as_dict(offset)})
        key_text = codec.encode_key(schema, {"id": key}).decode()
        rows.append((key_text, bytearray(value), 0, offset, offset))
    return spark.createDataFrame(rows, _LATEST)


def _rows(spark: Any, path: Path) -> dict[int, tuple[str, int, int]]:
    frame = spark.read.format("delta").load(str(path))
    return {r.id: (r.name, r.qty, r[OFFSET_COLUMN]) for r in frame.collect()}


def _operations(spark: Any, path: Path) -> list[str]:
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [r.operation for r in history]


def test_the_first_batch_creates_the_table_with_its_rows_and_later_batches_merge(
    spark: Any, tmp_path: Path
) -> None:
    schema = _schema()
    writer = LakeWriter(spark, tmp_path)
    path = lake_table_path(tmp_path, schema.keyspace, schema.table)
    first = [(1, 1, {"id": 1, "name": "a", "qty": 1}), (2, 2, {"id": 2, "name": "b", "qty": 2}), (3, 3, None)]
    created = writer.merge(_latest(spark, schema, first), schema, 3)
    assert (created.inserted, created.updated, created.deleted, created.unapplied) == (2, 0, 0, 1)
    assert _rows(spark, path) == {1: ("a", 1, 1), 2: ("b", 2, 2)}
    assert _operations(spark, path) == ["WRITE"], "the first batch should create the table in one commit"
    table = DeltaTable.forPath(spark, str(path)).toDF()
    assert [(f.name, f.dataType) for f in table.schema.fields] == [
        (f.name, f.dataType) for f in lake_struct(schema).fields
    ], "the table's schema should be the one an empty table would have been created with"

    # key 3's change at offset 0 is older than its delete at 3 (remembered as a tombstone): stale; key 2
    # is updated and key 1 deleted by newer changes
    second = [
        (0, 3, {"id": 3, "name": "c", "qty": 3}),
        (4, 2, {"id": 2, "name": "b2", "qty": 5}),
        (5, 1, None),
    ]
    merged = writer.merge(_latest(spark, schema, second), schema, 3)
    assert (merged.inserted, merged.updated, merged.deleted) == (0, 1, 1), merged
    assert _rows(spark, path) == {2: ("b2", 5, 4)}, "key 3's offset 0 is older than its delete at 3"
    assert "MERGE" in _operations(spark, path)[1:]


def test_a_table_another_writer_created_meanwhile_is_merged_into(spark: Any, tmp_path: Path) -> None:
    schema = _schema()
    path = lake_table_path(tmp_path, schema.keyspace, schema.table)
    other = LakeWriter(spark, tmp_path)
    writer = LakeWriter(spark, tmp_path)
    writer._table(schema)  # it has looked: no table yet
    newer = [(9, 1, {"id": 1, "name": "newer", "qty": 9})]
    assert other.merge(_latest(spark, schema, newer), schema, 1).inserted == 1
    assert existing_table(spark, path, lake_struct(schema)) is not None

    older = [(4, 1, {"id": 1, "name": "older", "qty": 4}), (5, 2, {"id": 2, "name": "two", "qty": 2})]
    result = writer.merge(_latest(spark, schema, older), schema, 2)
    assert (result.inserted, result.updated, result.unapplied) == (1, 0, 1), result
    assert _rows(spark, path) == {1: ("newer", 9, 9), 2: ("two", 2, 5)}, "key 1 must not go back"
    assert spark.read.format("delta").load(str(path)).count() == 2, "a key was written twice"
    operations = _operations(spark, path)
    assert operations[0] == "WRITE" and "MERGE" in operations[1:], operations


def test_a_table_made_again_beside_its_tombstones_takes_no_change_older_than_a_delete(
    spark: Any, tmp_path: Path
) -> None:
    schema = _schema()
    path = lake_table_path(tmp_path, schema.keyspace, schema.table)
    LakeWriter(spark, tmp_path).merge(_latest(spark, schema, [(5, 1, None)]), schema, 1)
    shutil.rmtree(path)  # the lake table is gone, its tombstone table stays

    older = [(3, 1, {"id": 1, "name": "gone", "qty": 3}), (4, 2, {"id": 2, "name": "two", "qty": 2})]
    result = LakeWriter(spark, tmp_path).merge(_latest(spark, schema, older), schema, 2)
    assert (result.inserted, result.unapplied) == (1, 1), result
    assert _rows(spark, path) == {2: ("two", 2, 4)}, "key 1 was deleted at offset 5, after offset 3"
    assert _operations(spark, path) == ["WRITE"]
