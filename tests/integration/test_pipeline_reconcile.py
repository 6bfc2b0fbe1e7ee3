"""Acceptance of `cdc pipeline reconcile`: a Delta table in the lake layout against a real Cassandra.

The lake table is built from Cassandra's own rows (through the same writer as `replay --output`), so the
first reconcile must find nothing; then a row is deleted from the lake, a lake value changed, a lake row
added and a Cassandra row updated, and reconcile must name exactly those keys and columns.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import select_rows
from infra.cassandra import CassandraNode
from pipeline.errors import ServiceUnreachable
from pipeline.lake_schema import KEY_COLUMN, lake_table_path
from pipeline.reconcile_job import ReconcileJob, write_report
from pipeline.replay_job import write_lake_table
from runtime.config import CassandraConfig, CdcConfig, PipelineConfig
from tests.integration.agent_harness import unique_name


@pytest.fixture(scope="module")
def table(session: Any) -> TableSchema:
    ks = unique_name("rep_rec")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(
        f"CREATE TABLE {ks}.things (pk int, ck text, f float, d double, ts timestamp, day date, b blob, "
        "tags set<text>, m map<int, text>, tp frozen<tuple<int, text>>, l list<float>, s text static, "
        "PRIMARY KEY (pk, ck))"
    )
    insert = session.prepare(
        f"INSERT INTO {ks}.things (pk, ck, f, d, ts, day, b, tags, m, tp, l, s) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    for pk in range(6):
        for c in range(5):
            session.execute(
                insert,
                (
                    pk,
                    f"c{c}",
                    pk + c / 10 + 0.1,
                    pk * 1.5 + c,
                    dt.datetime(2024, 1, 1 + c, 12, 0, 0, 123000),
                    dt.date(2020 + pk, 2, 1 + c),
                    bytes([pk, c]),
                    {f"t{c}", "x"},
                    {c: f"m{pk}"},
                    (pk, f"tp{c}"),
                    [0.1 * c, 2.5],
                    f"static{pk}",
                ),
            )
    session.execute(f"UPDATE {ks}.things SET s = 'alone' WHERE pk = 100")  # a static-only row
    catalog = load_schema_from_session(session, [ks], with_system_schema=False)
    schema = catalog.by_name(ks, "things")
    assert schema is not None
    return schema


def _config(node: CassandraNode, lake: Path, port: int | None = None) -> CdcConfig:
    return CdcConfig(
        cassandra=CassandraConfig(contact_points=[node.spec.address], port=port or node.spec.cql_port),
        pipeline=PipelineConfig(lake_directory=lake, shuffle_partitions=2, bootstrap_splits=8),
    )


def test_reconcile_reports_exactly_the_introduced_differences(
    spark: Any, session: Any, cassandra_node: CassandraNode, table: TableSchema, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    path = lake_table_path(lake, table.keyspace, table.table)
    rows = select_rows(session, table)
    images = spark.sparkContext.parallelize([(json.dumps(r), None) for r in rows.values()], 2)
    write_lake_table(spark, table, images, path, 0)
    job = ReconcileJob(spark, _config(cassandra_node, lake), [table], lake)

    first = job.run()
    print(first.describe())
    (diff,) = [t.diff for t in first.tables]
    assert diff.clean, diff.describe("cassandra", "lake")
    assert diff.expected_rows == diff.actual_rows == len(rows) == 31

    from delta.tables import DeltaTable

    delta = DeltaTable.forPath(spark, str(path))
    delta.delete("pk = 1 AND ck = 'c1'")
    delta.update("pk = 2 AND ck = 'c2'", {"d": F.lit(99.5), "f": F.lit(0.5).cast("float")})
    extra = spark.read.format("delta").load(str(path)).where("pk = 3 AND ck = 'c3'")
    extra.withColumn("pk", F.lit(1000)).withColumn(KEY_COLUMN, F.lit('{"ck":"c3","pk":1000}')).write.format(
        "delta"
    ).mode("append").save(str(path))
    session.execute(f"UPDATE {table.keyspace}.things SET tags = tags + {{'new'}} WHERE pk = 4 AND ck = 'c4'")

    second = job.run()
    print(second.describe())
    (diff,) = [t.diff for t in second.tables]
    assert not second.clean
    assert (diff.expected_rows, diff.actual_rows) == (31, 31)
    assert diff.missing_keys == ['{"ck": "c1", "pk": 1}']
    assert diff.extra_keys == ['{"ck": "c3", "pk": 1000}']
    assert diff.different_keys == [
        {"key": '{"ck": "c2", "pk": 2}', "columns": ["d", "f"]},
        {"key": '{"ck": "c4", "pk": 4}', "columns": ["tags"]},
    ]
    assert (diff.missing, diff.extra, diff.different) == (1, 1, 2)
    assert diff.columns == {"d": 1, "f": 1, "tags": 1}

    report_path = tmp_path / "report" / "reconcile.json"
    write_report(second, report_path)
    report = json.loads(report_path.read_text())
    (entry,) = report["tables"]
    assert report["clean"] is False and report["consistency"] == "ALL"
    assert entry["missing_in_lake"] == 1 and entry["extra_in_lake"] == 1 and entry["different"] == 2
    assert entry["examples"]["missing_in_lake"] == ['{"ck": "c1", "pk": 1}']
    assert entry["different_columns"] == {"d": 1, "f": 1, "tags": 1}


def test_unreachable_cassandra_is_a_clear_error(
    spark: Any, cassandra_node: CassandraNode, table: TableSchema, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    rows = spark.sparkContext.parallelize([], 1)
    write_lake_table(spark, table, rows, lake_table_path(lake, table.keyspace, table.table), 0)
    job = ReconcileJob(spark, _config(cassandra_node, lake, port=1), [table], lake)
    with pytest.raises(ServiceUnreachable, match="cannot reach Cassandra"):
        job.run()
