"""A secured Kafka source or sink of the Spark jobs shows its secrets nowhere Spark prints a plan: `explain`,
the query execution's strings, `EXPLAIN` in SQL, and the plan of an executed write as the SQL status store
(the UI's SQL tab, event logs) keeps it. They show as Spark's `*********(redacted)`.

A local SparkSession (local[1], no service); Kafka sources are lazy, so no query runs against a broker,
and the write has no partition, so no producer is made. Skipped when Java or the connector jars are
missing (`cdc infra fetch`).
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import PipelineError
from pipeline.kafka_source import kafka_format
from pipeline.spark_session import SECRET_REDACTION_REGEX, build_spark_session
from runtime.config import KafkaConfig, KafkaSecurityConfig, PipelineConfig
from runtime.secrets import Secret
from runtime.spark_kafka import SPARK_REDACTION_CONF
from tests.unit.tls_material import KEY_PASSWORD, TlsMaterial, make_tls_material

PASSWORD = "spark-plan-Pa55word-" + "q" * 6
REDACTED = "*********(redacted)"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from infra.errors import InfraError

    running = SparkSession.getActiveSession()
    config = PipelineConfig(
        lake_directory=tmp_path_factory.mktemp("lake"), master="local[1]", shuffle_partitions=1
    )
    try:
        session = build_spark_session(config, "cdc-unit-redaction")
    except (PipelineError, InfraError) as exc:
        pytest.skip(f"no local Spark: {exc}")
    yield session
    if running is None:  # a session the whole run shares (integration tests) is left to its owner
        session.stop()


@pytest.fixture(scope="module")
def kafka(tls: TlsMaterial) -> KafkaConfig:
    """SASL_SSL with mutual TLS: the JAAS line, the inline PEM key and its password all in the options."""
    return KafkaConfig(
        bootstrap_servers="127.0.0.1:9",
        security=KafkaSecurityConfig(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username="cdc",
            password=Secret(PASSWORD),
            ca_file=tls.ca,
            cert_file=tls.client_cert,
            key_file=tls.client_key_3des,
            key_password=Secret(KEY_PASSWORD),
        ),
    )


def _assert_clean(text: str, tls: TlsMaterial) -> None:
    key_lines = [line for line in tls.client_key_3des.read_text().splitlines() if "-----" not in line]
    assert PASSWORD not in text
    assert KEY_PASSWORD not in text
    assert not any(line in text for line in key_lines), "the PEM private key shows in a plan"


def test_the_session_masks_the_secret_options(spark: Any) -> None:
    options_regex = SPARK_REDACTION_CONF["spark.sql.redaction.options.regex"]
    assert spark.conf.get("spark.sql.redaction.options.regex") == options_regex
    # the core pattern is fixed when the SparkContext starts: ours unless a session was running already
    assert spark.sparkContext.getConf().get("spark.redaction.regex") in (SECRET_REDACTION_REGEX, None)


def test_streaming_source_plans_show_no_secret(spark: Any, kafka: KafkaConfig, tls: TlsMaterial) -> None:
    stream = kafka_format(spark.readStream, kafka).option("subscribePattern", "cdc[.].*").load()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        stream.explain(True)
    explained = printed.getvalue()
    assert "StreamingRelationV2" in explained and "kafka.bootstrap.servers=127.0.0.1:9" in explained
    for key in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password"):
        assert f"{key}={REDACTED}" in explained, key
    _assert_clean(explained, tls)
    _assert_clean(stream._jdf.queryExecution().toString(), tls)
    stream.createOrReplaceTempView("secured_source")
    rows = spark.sql("EXPLAIN EXTENDED SELECT key, value FROM secured_source").collect()
    sql_plan = "\n".join(row[0] for row in rows)
    assert REDACTED in sql_plan
    _assert_clean(sql_plan, tls)


def test_batch_source_plans_show_no_secret(spark: Any, kafka: KafkaConfig, tls: TlsMaterial) -> None:
    batch = kafka_format(spark.read, kafka).option("subscribe", "cdc.raw").load()
    execution = batch._jdf.queryExecution()
    for plan in (execution.logical(), execution.analyzed(), execution.optimizedPlan()):
        _assert_clean(plan.treeString(), tls)
    assert "KafkaRelation(strategy=Subscribe[cdc.raw]" in execution.analyzed().treeString()


def test_an_executed_sink_keeps_a_redacted_plan(spark: Any, kafka: KafkaConfig, tls: TlsMaterial) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)  # no partition: no producer
    kafka_format(empty.write, kafka).option("topic", "cdc.raw").save()
    store = spark._jsparkSession.sharedState().statusStore()
    plan = ""
    deadline = time.monotonic() + 30
    while "SaveIntoDataSourceCommand" not in plan and time.monotonic() < deadline:
        time.sleep(0.2)  # the SQL listener hears of the execution asynchronously
        executions = store.executionsList()
        plans = [executions.apply(i).physicalPlanDescription() for i in range(executions.size())]
        plan = next((p for p in reversed(plans) if "KafkaSourceProvider" in p), "")
    assert "SaveIntoDataSourceCommand" in plan
    assert f"kafka.sasl.jaas.config={REDACTED}" in plan and f"kafka.ssl.keystore.key={REDACTED}" in plan
    _assert_clean(plan, tls)


def test_the_core_pattern_alone_masks_them_too(spark: Any, kafka: KafkaConfig, tls: TlsMaterial) -> None:
    """Plans mask an option that either pattern matches: with the options pattern back at Spark's default,
    `spark.redaction.regex` (set when the session's context started) still hides the key and the JAAS line.
    (With both at Spark's defaults the PEM key would print: tests/unit/test_client_security.py.)"""
    if spark.sparkContext.getConf().get("spark.redaction.regex") != SECRET_REDACTION_REGEX:
        pytest.skip("the SparkContext was started elsewhere, without the pipeline's core pattern")
    key = "spark.sql.redaction.options.regex"
    try:
        spark.conf.set(key, "(?i)url")
        stream = kafka_format(spark.readStream, kafka).option("subscribe", "t").load()
        text = stream._jdf.queryExecution().analyzed().treeString()
    finally:
        spark.conf.set(key, SPARK_REDACTION_CONF[key])
    assert "kafka.ssl.truststore.location=" in text, "a plan with the options"
    assert f"kafka.ssl.keystore.key={REDACTED}" in text and f"kafka.sasl.jaas.config={REDACTED}" in text
    _assert_clean(text, tls)


def test_the_lake_stream_is_secured_and_redacted(
    spark: Any, tmp_path: Path, kafka: KafkaConfig, tls: TlsMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lake job's own source (not a copy of it) carries the security options, redacted."""
    from pipeline import lake_job
    from runtime.config import CdcConfig

    monkeypatch.setattr(lake_job, "load_table_schemas", lambda _kafka: {})
    config = CdcConfig(kafka=kafka, pipeline=PipelineConfig(lake_directory=tmp_path))
    stream = lake_job.LakeJob(spark, config)._stream()
    text = stream._jdf.queryExecution().analyzed().treeString()
    assert "kafka.security.protocol=SASL_SSL" in text and "kafka.isolation.level=read_committed" in text
    assert f"kafka.sasl.jaas.config={REDACTED}" in text
    _assert_clean(text, tls)
