"""Every pipeline job on a Spark standalone cluster (`cdc infra up --spark`: a master and two workers from
the installed PySpark), run as a user runs it: `cdc pipeline ... --config FILE` with
`pipeline.master: spark://...`.

Rows written before CDC was on, then live changes through a real agent and worker. On the cluster the
bootstrap feeds the old rows to the worker, the lake job takes the clean topic, the reconcile finds 0
differences with Cassandra at ALL and the replay's images equal the clean topic's. The same lake job on
local[2] (the session's in-process Spark) makes the same Delta table, and the same reconcile the same
report. The executors import the project's code from the zip the driver sends them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from cassandra_model.table_schema import TableSchema
from infra.cassandra import CassandraNode
from infra.spark_cluster import SparkCluster
from pipeline.lake_job import LakeJob
from pipeline.lake_schema import lake_table_path
from pipeline.reconcile_job import ReconcileJob
from pipeline.table_catalog import load_table_schemas
from runtime.config import load_config
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, worker_config

RAW_PARTITIONS = 6
TABLE = "items"


@dataclass(slots=True)
class Deployment:
    folder: Path
    keyspace: str
    config_file: Path
    schema: TableSchema
    worker: WorkerProcess
    idle: Any

    def cdc(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`cdc pipeline ...` with the deployment's config, as a user runs it."""
        command = [
            str(Path(sys.executable).parent / "cdc"),
            "pipeline",
            *args,
            "--config",
            str(self.config_file),
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)


def _rows_before_cdc(session: Any, ks: str) -> None:
    session.execute(f"CREATE TYPE {ks}.addr (street text, zip int)")
    session.execute(
        f"CREATE TABLE {ks}.{TABLE} (pk int, ck text, s text static, v int, tags set<text>, "
        "attrs map<text, int>, home addr, nums list<int>, PRIMARY KEY (pk, ck)) WITH cdc = false"
    )
    for pk in range(8):
        for ck in ("a", "b", "c"):
            session.execute(
                f"INSERT INTO {ks}.{TABLE} (pk, ck, s, v, tags, attrs, home, nums) VALUES (%s, %s, %s, %s, %s, "
                f"%s, {{street: 'street {pk}', zip: {pk}}}, %s)",
                (pk, ck, f"static{pk}", pk * 10, {f"t{pk}", ck}, {ck: pk}, [pk, 1]),
            )
    session.execute(f"UPDATE {ks}.{TABLE} USING TTL 86400 SET v = 11 WHERE pk = 0 AND ck = 'a'")


@pytest.fixture(scope="module")
def deployment(
    spark_cluster: SparkCluster,
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    ks = unique_name("cluster")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    folder = tmp_path_factory.mktemp("cluster")
    app_id, prefix = unique_name("cluster_w"), unique_name("cluster_clean")
    with running_agents() as agents:
        agent = new_agent(
            agents, folder, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks],
            agent={"schema_refresh_interval_s": 1},
        )  # fmt: skip
        agent.start()
        agent.wait_healthy()
        _rows_before_cdc(session, ks)
        session.execute(f"ALTER TABLE {ks}.{TABLE} WITH cdc = true")
        raw = worker_config(
            bootstrap=kafka_bootstrap, raw_topic=agent.raw_topic, schema_topic=agent.schema_topic,
            raw_partitions=RAW_PARTITIONS, data_directory=folder / "worker-data", app_id=app_id,
            worker_id="cluster1", topic_prefix=prefix,
        )  # fmt: skip
        worker = WorkerProcess(folder, raw, "worker")
        config = {
            **raw,
            "cassandra": {
                "contact_points": [cassandra_node.spec.address],
                "port": cassandra_node.spec.cql_port,
            },
            "pipeline": {
                "lake_directory": str(folder / "lake"),
                "clean_topic_prefix": prefix,
                "master": spark_cluster.spec.master_url,
                "shuffle_partitions": 2,
                "bootstrap_splits": 4,
                "spark_conf": {"spark.executor.memory": "768m"},
            },
        }
        del config["worker"]
        config_file = folder / "cluster.yaml"
        config_file.write_text(yaml.safe_dump(config))
        kafka = load_config(config_file).kafka
        wait_until(lambda: (ks, TABLE) in load_table_schemas(kafka), 60, "the table's schema", interval_s=1.0)
        try:
            worker.start()
            worker.wait_healthy(90)
            for pk in range(4, 10):  # live changes: some to rows the bootstrap brings, some to new ones
                session.execute(
                    f"UPDATE {ks}.{TABLE} SET v = %s, tags = tags + {{'live'}} WHERE pk = %s AND ck = 'b'",
                    (pk, pk),
                )
            session.execute(f"DELETE FROM {ks}.{TABLE} WHERE pk = 5 AND ck = 'c'")

            def idle() -> None:
                wait_until(
                    lambda: group_lag(kafka_bootstrap, app_id, agent.raw_topic) == 0,
                    120,
                    worker.log_tail,
                    0.5,
                )

            schema = load_table_schemas(kafka)[(ks, TABLE)]
            yield Deployment(folder, ks, config_file, schema, worker, idle)
        finally:
            worker.ensure_stopped()


def _ok(done: subprocess.CompletedProcess[str], what: str) -> str:
    assert done.returncode == 0, (
        f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(str(path))
    return sorted(tuple(repr(v) for v in row) for row in frame.select(*sorted(frame.columns)).collect())


@pytest.mark.timeout(2400)
def test_every_job_on_the_cluster_matches_cassandra_and_local(
    deployment: Deployment, spark_cluster: SparkCluster, spark: Any
) -> None:
    tables = f"{deployment.keyspace}.{TABLE}"
    out = _ok(deployment.cdc("bootstrap", "--tables", tables), "bootstrap on the cluster")
    assert "bootstrap: 1 tables" in out and " 25 rows" in out, out
    time.sleep(1)
    deployment.idle()
    out = _ok(deployment.cdc("lake", "--once"), "lake on the cluster")
    assert "lake: " in out, out
    report = deployment.folder / "reconcile.json"
    out = _ok(deployment.cdc("reconcile", "--report", str(report)), "reconcile on the cluster")
    assert "reconcile: lake and Cassandra agree" in out, out
    cluster_report = json.loads(report.read_text())
    (table,) = cluster_report["tables"]
    differences = table["missing_in_lake"] + table["extra_in_lake"] + table["different"]
    assert differences == 0 and table["rows_in_cassandra"] == table["rows_in_lake"] > 20, table
    out = _ok(
        deployment.cdc("replay", "--compare", "--output", str(deployment.folder / "replayed")), "replay"
    )
    assert "replay: compared" in out, out

    # the applications ran on the cluster, each with executors on its workers
    state = spark_cluster.state() or {}
    names = [app["name"] for app in state.get("completedapps", [])]
    for job in ("cdc-bootstrap", "cdc-lake", "cdc-reconcile", "cdc-replay"):
        assert job in names, f"{job} did not run on {spark_cluster.spec.master_url}: {names}"
    logs = "".join(
        p.read_text(errors="replace") for p in spark_cluster.spec.root.glob("worker-*/app-*/*/stderr")
    )
    assert "cassandra_cdc-" in logs and ".zip" in logs, "the executors did not receive the project's code"

    # local[2] makes the same table from the same topic, and the same reconcile report
    config = load_config(deployment.config_file)
    local = deployment.folder / "lake-local"
    assert config.pipeline is not None
    local_config = replace(config, pipeline=replace(config.pipeline, lake_directory=local, master="local[2]"))
    LakeJob(spark, local_config, once=True).run()
    cluster_lake = lake_table_path(deployment.folder / "lake", deployment.keyspace, TABLE)
    assert _rows(spark, lake_table_path(local, deployment.keyspace, TABLE)) == _rows(spark, cluster_lake)
    local_report = ReconcileJob(spark, local_config, [deployment.schema], local).run().as_dict()
    for key in ("rows_in_cassandra", "rows_in_lake", "missing_in_lake", "extra_in_lake", "different"):
        assert local_report["tables"][0].get(key) == table.get(key), (key, local_report, table)
