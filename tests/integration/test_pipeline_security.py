"""The Spark jobs against secured services (`cdc infra up --secure`): Kafka on SASL_SSL (SCRAM-SHA-512, the
local CA) and Cassandra with a password over TLS, configured as an operator does it (YAML, passwords as
`file:` references).

The module starts its own broker and node, under its own home and on its own ports below 32768 (outside
the kernel's ephemeral range), so it never meets the session's plaintext services; both are stopped when it
ends. Rows are written to a CDC table; the bootstrap reads them over TLS with the password and publishes
one snapshot row per row to the raw topic (read back with the client builders); the replay reads them
back with Spark's batch Kafka source, and the lake job a clean topic filled here, both over SASL_SSL, into
Delta tables equal to Cassandra's SELECT at ALL, which the reconcile confirms with its own scans at ALL. A wrong
Cassandra or Kafka password stops `cdc pipeline bootstrap` with `cdc: error:` naming the key to fix, and
no password shows in any output of the jobs (Python, Spark's JVM, Kafka and Cassandra clients). Run by
`cdc pipeline` on the session's standalone cluster with mutual TLS besides, the lake and bootstrap jobs
leave no password, JAAS line or key in Spark's UI, event logs, or driver, daemon and executor logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.schema_cql import table_to_cql
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc import cli
from cdc.verify.oracle import select_rows
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.spark_cluster import SparkCluster
from infra.stack import LocalStack
from pipeline import bootstrap_job
from pipeline.errors import PipelineError
from pipeline.lake_job import LakeJob
from pipeline.lake_reader import collect_lake_images
from pipeline.lake_schema import lake_table_path, normalize_json_form
from pipeline.reconcile_job import ReconcileJob
from pipeline.replay_job import ReplayJob
from runtime.cassandra_session import cassandra_cluster
from runtime.config import CdcConfig, KafkaConfig, load_config
from runtime.kafka_clients import make_consumer, make_producer, start_kafka_client
from runtime.kafka_topics import TopicSpec, ensure_topics, topic_partitions
from runtime.spark_kafka import jaas_config
from schemas.change_event import clean_topic_name
from schemas.raw_event import decode_raw_event, is_snapshot_source
from schemas.schema_event import schema_event
from tests.integration.spark_traces import Traces, recording_ui

PORTS = {
    "kafka_port": 27392,
    "kafka_controller_port": 27393,
    "cql_port": 27342,
    "storage_port": 27300,
    "jmx_base_port": 27499,
}
TABLE = "items"
PARTITIONS = 6
ROWS_PER_PARTITION = 4
WRONG_PASSWORD = "wrong-password-" + uuid.uuid4().hex


@dataclass(slots=True)
class Secured:
    material: SecureMaterial
    folder: Path
    keyspace: str
    raw: dict[str, Any]
    """The config as YAML data (passwords as `file:` references)."""
    config: CdcConfig
    schema: TableSchema
    session: Any

    @property
    def table(self) -> str:
        return f"{self.keyspace}.{TABLE}"

    def config_file(self, name: str, **overrides: dict[str, Any]) -> Path:
        data = json.loads(json.dumps(self.raw))
        for section, values in overrides.items():
            _merge(data[section], values)
        path = self.folder / name
        path.write_text(yaml.safe_dump(data))
        return path

    def expected_images(self) -> dict[str, dict[str, Any]]:
        """Cassandra's SELECT * at ALL, keyed and normalized as lake images are."""
        rows = select_rows(self.session, self.schema)
        return {key: normalize_json_form(self.schema, image) for key, image in rows.items()}

    def secrets(self) -> list[str]:
        return [self.material.kafka_password(), self.material.cassandra_password(), WRONG_PASSWORD]


def _merge(target: dict[str, Any], values: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict):
            _merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


def _config_data(material: SecureMaterial, folder: Path, keyspace: str) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    return {
        "cluster": "secure-pipeline",
        "kafka": {
            "bootstrap_servers": material.kafka_bootstrap,
            "raw_topic": f"secure_raw_{suffix}",
            "schema_topic": f"secure_schemas_{suffix}",
            "raw_partitions": 3,
            "request_timeout_ms": 15_000,
            "security": {
                "protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "username": material.kafka_user,
                "password": f"file:{material.kafka_password_file}",
                "ca_file": str(material.ca_file),
            },
        },
        "cassandra": {
            "contact_points": [material.cassandra_host],
            "port": material.cql_port,
            "keyspaces": [keyspace],
            "username": material.cassandra_user,
            "password": f"file:{material.cassandra_password_file}",
            "tls": {"enabled": True, "ca_file": str(material.ca_file)},
        },
        "pipeline": {
            "lake_directory": str(folder / "lake"),
            "clean_topic_prefix": f"secure_clean_{suffix}",
            "bootstrap_splits": 4,
            "scan_page_size": 5,
            "shuffle_partitions": 2,
        },
    }


async def _publish_schema(config: CdcConfig, schema: TableSchema) -> None:
    kafka = config.kafka
    await ensure_topics(
        kafka,
        [
            TopicSpec(kafka.raw_topic, kafka.raw_partitions),
            TopicSpec(kafka.schema_topic, 1, configs={"cleanup.policy": "compact"}),
        ],
    )
    event = schema_event(
        config.cluster, schema.keyspace, schema.table, str(schema.table_id), cdc=True, dropped=False,
        cql=table_to_cql(schema),
    )  # fmt: skip
    producer = make_producer(kafka, acks="all")
    await start_kafka_client(producer, kafka)
    try:
        await producer.send_and_wait(kafka.schema_topic, event.encode(), key=event.key)
    finally:
        await producer.stop()


def _close_cached_producers() -> None:
    """Spark keeps the Kafka sink's producers for 10 minutes; closed here, before the broker stops, so they
    do not log reconnection attempts through the rest of the session."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None or context._jvm is None:
        return
    jvm = context._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    name = "org.apache.spark.sql.kafka010.producer.InternalKafkaProducerPool$"
    pool = jvm.java.lang.Class.forName(name, True, loader).getField("MODULE$").get(None)
    pool.reset()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    home = tmp_path_factory.mktemp("cdc-secure-pipeline-home")
    folder = tmp_path_factory.mktemp("secure-pipeline")
    stack = LocalStack(InfraSettings.from_env(home=home, secure=True, **PORTS))
    try:
        stack.up(report=lambda _msg: None)
        material = stack.secure_material()
        keyspace = f"secure_{uuid.uuid4().hex[:8]}"
        raw = _config_data(material, folder, keyspace)
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        config = load_config(path, environ={})
        cluster = cassandra_cluster(config.cassandra, connect_timeout=15, control_connection_timeout=15)
        try:
            session = cluster.connect()
            session.execute(
                f"CREATE KEYSPACE {keyspace} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(
                f"CREATE TABLE {keyspace}.{TABLE} (pk int, ck int, v text, tags set<text>, "
                "PRIMARY KEY (pk, ck)) WITH cdc = true"
            )
            for pk in range(PARTITIONS):
                for ck in range(ROWS_PER_PARTITION):
                    session.execute(
                        f"INSERT INTO {keyspace}.{TABLE} (pk, ck, v, tags) VALUES (%s, %s, %s, %s)",
                        (pk, ck, f"value {pk}.{ck}", {f"t{pk}", "all"}),
                    )
            catalog = load_schema_from_session(session, [keyspace], with_system_schema=False)
            schema = next(t for t in catalog.tables() if t.table == TABLE)
            asyncio.run(_publish_schema(config, schema))
            yield Secured(material, folder, keyspace, raw, config, schema, session)
        finally:
            cluster.shutdown()
            _close_cached_producers()
    finally:
        stack.down(report=lambda _msg: None)


async def _read_topic(kafka: KafkaConfig, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of `topic` (key, value), read with the builders' consumer."""
    consumer = make_consumer(kafka, enable_auto_commit=False)
    await start_kafka_client(consumer, kafka)
    try:
        partitions = await topic_partitions(consumer, topic, timeout_s=10)
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            assert time.monotonic() < deadline, f"{topic} was not read to its end"
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records.extend((r.key, r.value) for r in batch)
        return records
    finally:
        await consumer.stop()


def _snapshot_rows(secured: Secured) -> list[tuple[int, int, str]]:
    """(pk, ck, v) of every row of every snapshot event on the raw topic."""
    rows = []
    for _, value in asyncio.run(_read_topic(secured.config.kafka, secured.config.kafka.raw_topic)):
        assert value is not None
        event = decode_raw_event(value)
        if not is_snapshot_source(event["source"]) or event["table"] != TABLE:
            continue
        pk = int.from_bytes(event["partition_key"], "big", signed=True)
        for row in event["rows"]:
            (ck,) = (int.from_bytes(c, "big", signed=True) for c in row["clustering"])
            (v,) = (c["value"].decode() for c in row["cells"] if c["column"] == "v")
            rows.append((pk, ck, v))
    return rows


def _assert_no_secret(secured: Secured, *texts: str) -> None:
    for text in texts:
        for secret in secured.secrets():
            assert secret not in text, "a password shows in the jobs' output"


def test_bootstrap_reads_over_tls_with_a_password_and_publishes_over_sasl_ssl(
    secured: Secured, spark: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    code = bootstrap_job.run(secured.config, argparse.Namespace(tables=secured.table))
    out, err = capfd.readouterr()  # the driver's and the JVM's output (fd level: Spark logs included)
    assert code == 0, err[-3000:]
    _assert_no_secret(secured, out, err)

    rows = _snapshot_rows(secured)
    statement = SimpleStatement(
        f"SELECT pk, ck, v FROM {secured.table}", consistency_level=ConsistencyLevel.ALL
    )
    expected = sorted((r.pk, r.ck, r.v) for r in secured.session.execute(statement))
    assert len(expected) == PARTITIONS * ROWS_PER_PARTITION
    assert sorted(rows) == expected, "one snapshot row per row of Cassandra, each exactly once"

    # the replay reads them back with Spark's batch Kafka source over SASL_SSL, and the reconcile scans
    # Cassandra at ALL in the executors, over TLS with the password: the images equal Cassandra's rows
    output = secured.folder / "replayed"
    replayed = ReplayJob(spark, secured.config, [secured.schema]).run(output=output)
    assert replayed.rows == {secured.table: len(expected)}
    images = collect_lake_images(spark, lake_table_path(output, secured.keyspace, TABLE), secured.schema)
    assert images == secured.expected_images()
    report = ReconcileJob(spark, secured.config, [secured.schema], output).run()
    assert report.clean, report.describe()
    out, err = capfd.readouterr()
    _assert_no_secret(secured, out, err)


async def _fill_clean_topic(secured: Secured, topic: str) -> int:
    """Cassandra's rows as `r` change events (the workers' JSON form) on a clean topic."""
    kafka = secured.config.kafka
    await ensure_topics(kafka, [TopicSpec(topic, 2)])
    producer = make_producer(kafka, acks="all")
    await start_kafka_client(producer, kafka)
    now_ms = int(time.time() * 1000)
    try:
        images = select_rows(secured.session, secured.schema)
        for image in images.values():
            key = {c.name: image[c.name] for c in (*secured.schema.partition_key, *secured.schema.clustering)}
            envelope = {
                "before": None,
                "after": image,
                "op": "r",
                "source": {"write_time_us": now_ms * 1000, "snapshot": "true"},
                "ts_ms": now_ms,
            }
            await producer.send(
                topic,
                json.dumps(envelope).encode(),
                key=json.dumps(key, sort_keys=True, separators=(",", ":")).encode(),
            )
        await producer.flush()
        return len(images)
    finally:
        await producer.stop()


def test_lake_job_reads_a_clean_topic_over_sasl_ssl(
    secured: Secured, spark: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    config = secured.config
    assert config.pipeline is not None
    topic = clean_topic_name(config.pipeline.clean_topic_prefix, secured.keyspace, TABLE)
    assert asyncio.run(_fill_clean_topic(secured, topic)) == PARTITIONS * ROWS_PER_PARTITION
    summary = LakeJob(spark, config, tables=secured.table, once=True).run()
    out, err = capfd.readouterr()
    _assert_no_secret(secured, out, err)
    assert summary.changes == PARTITIONS * ROWS_PER_PARTITION

    path = lake_table_path(config.pipeline.lake_directory, secured.keyspace, TABLE)
    assert collect_lake_images(spark, path, secured.schema) == secured.expected_images()
    report = ReconcileJob(spark, config, [secured.schema], config.pipeline.lake_directory).run()
    assert report.clean, report.describe()


@pytest.mark.parametrize(
    ("section", "key"),
    [("cassandra", "cassandra.password"), ("kafka", "kafka.security.password")],
)
def test_a_wrong_password_stops_the_cli_with_the_key_to_fix(
    secured: Secured,
    spark: Any,
    section: str,
    key: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = secured.folder / f"wrong-{section}.password"
    wrong.write_text(WRONG_PASSWORD + "\n")
    override: dict[str, Any] = {"password": f"file:{wrong}"}
    if section == "kafka":
        override = {"security": override}
    path = secured.config_file(f"wrong-{section}.yaml", **{section: override})
    monkeypatch.setattr(cli, "configure_logging", lambda **_kw: None)  # keep pytest's log handlers

    started = time.monotonic()
    code = cli.main(["pipeline", "bootstrap", "--config", str(path), "--tables", secured.table])
    out, err = capfd.readouterr()
    assert code == 2, err[-3000:]
    (line,) = [line for line in err.splitlines() if line.startswith("cdc: error: ")]
    assert key in line and f"its value comes from file {wrong}" in line, line
    _assert_no_secret(secured, out, err)
    assert time.monotonic() - started < 60, "refused before any Spark job ran"

    config = load_config(path, environ={})
    with pytest.raises(PipelineError, match=key.replace(".", r"\.")):
        bootstrap_job.run(config, argparse.Namespace(tables=secured.table))


def _free_port(start: int) -> int:
    from infra.process import port_is_free

    return next(port for port in range(start, start + 200) if port_is_free("127.0.0.1", port))


def _triple_des_key(secured: Secured) -> tuple[Path, Path]:
    """The client key again, encrypted the old way (the Java client's only way) under a new random
    password: (key file, password file)."""
    password_file = secured.folder / "spark-key.password"
    password_file.write_text(f"spark-key-{uuid.uuid4().hex}\n")
    password_file.chmod(0o600)
    key = secured.folder / "client-3des.key"
    subprocess.run(
        ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(secured.material.client_key),
         "-passin", f"file:{secured.material.key_password_file}", "-passout", f"file:{password_file}",
         "-out", str(key)],
        check=True, capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return key, password_file


@pytest.mark.timeout(1200)
def test_no_secret_shows_in_spark_ui_logs_or_event_log_on_a_cluster(
    secured: Secured, spark_cluster: SparkCluster
) -> None:
    """`cdc pipeline lake --once` and `cdc pipeline bootstrap` on the standalone cluster, over SASL_SSL with
    mutual TLS (the JAAS line, the PEM key and its password in the Kafka options) and to Cassandra with a
    password and a client key: no password, JAAS line or key line shows in the driver UI's REST API (polled
    while each job runs), the event logs, the driver's output, or the cluster's daemon and executor logs.
    The secured settings do reach the executors: the lake's log its Kafka consumer's config, the JAAS line
    hidden; the bootstrap's publish with the project's own Kafka client, its secrets inside the serialized
    tasks."""
    material = secured.material
    kafka_key, kafka_key_password = _triple_des_key(secured)
    events = secured.folder / "spark-events"
    events.mkdir()
    ui_port = _free_port(int(os.environ.get("CDC_TEST_SPARK_PORT", "23077")) + 10)
    suffix = uuid.uuid4().hex[:8]
    prefix = f"traced_clean_{suffix}"
    path = secured.config_file(
        "traced.yaml",
        kafka={
            "raw_topic": f"traced_raw_{suffix}",
            "security": {
                "cert_file": str(material.client_cert),
                "key_file": str(kafka_key),
                "key_password": f"file:{kafka_key_password}",
            },
        },
        cassandra={
            "tls": {
                "cert_file": str(material.client_cert),
                "key_file": str(material.client_key),
                "key_password": f"file:{material.key_password_file}",
            }
        },
        pipeline={
            "master": spark_cluster.spec.master_url,
            "lake_directory": str(secured.folder / "traced-lake"),
            "clean_topic_prefix": prefix,
            "spark_conf": {
                "spark.executor.memory": "768m",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events.as_uri(),
                "spark.eventLog.compress": "false",  # searched as text (compression hides nothing)
                "spark.ui.enabled": "true",
                "spark.ui.port": str(ui_port),
            },
        },
    )
    config = load_config(path, environ={})
    raw_topic = config.kafka.raw_topic
    asyncio.run(ensure_topics(config.kafka, [TopicSpec(raw_topic, 2)]))
    changes = asyncio.run(_fill_clean_topic(secured, clean_topic_name(prefix, secured.keyspace, TABLE)))
    traces = Traces()
    apps: set[str] = set()
    outputs = []
    for job in (["lake", "--once"], ["bootstrap", "--tables", secured.table]):
        command = [str(Path(sys.executable).parent / "cdc"), "pipeline", *job, "--config", str(path)]
        with recording_ui(ui_port, traces) as seen:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        apps |= seen
        traces.add(f"stdout of cdc pipeline {job[0]}", done.stdout)
        traces.add(f"stderr of cdc pipeline {job[0]}", done.stderr)
        assert done.returncode == 0, (
            f"{job} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        outputs.append(done.stdout)
    lake, bootstrap = outputs
    assert f"{changes:,} changes" in lake, lake
    assert f" {changes} rows" in bootstrap, bootstrap

    assert len(apps) == 2, f"the driver UI on port {ui_port} answered for {apps}"
    event_logs = sorted(p for p in events.rglob("*") if p.is_file())  # a folder per application
    for app in apps:
        assert any(app in str(p) for p in event_logs), f"no event log of {app}: {event_logs}"
    traces.add_files(event_logs)
    spec = spark_cluster.spec
    executor_logs = [p for app in apps for p in spec.root.glob(f"worker-*/{app}/*/std*")]
    assert executor_logs, f"no executor log of {apps} under {spec.root}"
    traces.add_files(executor_logs)
    traces.add_files(spec.logs.glob("spark-*"))

    key_lines = [line for line in kafka_key.read_text().splitlines() if "-----" not in line]
    secrets = {
        "kafka.security.password": material.kafka_password(),
        "the JAAS line": jaas_config("SCRAM-SHA-512", material.kafka_user, material.kafka_password()),
        "kafka.security.key_password": kafka_key_password.read_text().strip(),
        "cassandra.password": material.cassandra_password(),
        "cassandra.tls.key_password": material.key_password(),
        **{f"line {n} of the Kafka client key": line for n, line in enumerate(key_lines, 1)},
    }
    leaks = traces.leaks(secrets)
    assert not leaks, "secrets show in Spark's traces:\n" + "\n".join(f"{k}: {v}" for k, v in leaks.items())

    # the test looks where the secured settings surface: the lake's executors log their Kafka consumer's
    # config, the JAAS line hidden (the bootstrap's tasks publish with the project's own client: its rows
    # above reached a broker that takes only SASL_SSL with a client certificate)
    hidden = "sasl.jaas.config = [hidden]"
    assert any(p.endswith("/stderr") for p in traces.containing(hidden)), (
        "no executor logged its consumer's config"
    )
