"""The one way a Spark job reads or writes Kafka, and the consumer settings with which it reads a backlog.

``kafka_format(spark.read | spark.readStream | df.write | df.writeStream, config.kafka)`` is every Spark
Kafka source and sink of the jobs: format ``kafka`` with the bootstrap servers and the ``kafka.security``
options (``runtime.spark_kafka``: protocol, SASL JAAS line, PEM trust and key stores), so no job can reach
a secured cluster without them. Those options hold secrets: the SparkSession masks them in plan strings
(``pipeline.spark_session`` sets ``SPARK_REDACTION_CONF``); the jobs never print them.

Backlog reads: Spark's Kafka reader asks the broker for the partition's earliest and latest offsets after
every poll (two ListOffsets round trips), and a poll hands back at most ``max.poll.records`` records, 500 by
default: a task of 100k records then made some 600 round trips, and a warm lake batch's Kafka stage ran 2.1 s
for 1.3 s of CPU (bench/lake_pipeline.md). Large fetches, and polls that return all of a fetch, leave a few.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaError

from pipeline.errors import PipelineError, ServiceUnreachable
from runtime.config import KafkaConfig
from runtime.kafka_clients import KafkaAccessError, diagnose_kafka, explain_kafka_error
from runtime.secrets import Secret, scrub
from runtime.spark_kafka import pbes2_advice, spark_kafka_options
from runtime.tls import ClientSetupError

#: options of ``spark.read(Stream).format("kafka")``, passed to the executors' consumers
BACKLOG_READ_OPTIONS: dict[str, str] = {
    "kafka.max.partition.fetch.bytes": str(16 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
    "kafka.max.poll.records": "100000",
}


_Target = TypeVar("_Target")


def kafka_options(kafka: KafkaConfig) -> dict[str, str]:
    """Servers and security options of Spark's Kafka source and sink; holds secrets, never print it.

    A config that cannot make a client (unreadable CA or key file, missing SASL keys) is a PipelineError
    naming the key."""
    try:
        return spark_kafka_options(kafka)
    except ClientSetupError as exc:
        raise PipelineError(str(exc)) from None


def kafka_format(target: _Target, kafka: KafkaConfig) -> _Target:
    """``target.format("kafka")`` with the servers and the security options of ``kafka``: every Spark Kafka
    source (``spark.read``, ``spark.readStream``) and sink (``df.write``, ``df.writeStream``) of the jobs."""
    configurable: Any = target  # DataFrameReader, DataStreamReader, DataFrameWriter or DataStreamWriter
    return configurable.format("kafka").options(**kafka_options(kafka))  # type: ignore[no-any-return]


def kafka_failure(exc: BaseException, kafka: KafkaConfig, doing: str, *, at: str = "from") -> PipelineError:
    """The PipelineError for an aiokafka client that failed while ``doing`` (e.g. "read the schema topic
    'cdc.schemas'"; ``at`` Kafka: "from", or "on" for what is written): the actionable reason (naming
    the ``kafka.security`` key) when security is at fault, else ServiceUnreachable naming
    kafka.bootstrap_servers. Never holds a secret."""
    if isinstance(exc, KafkaAccessError):  # start_kafka_client found out why already
        reason: str | None = str(exc.args[0]) if exc.args else str(exc)  # str() adds the class name
    else:
        reason = explain_kafka_error(exc, kafka)
    if reason is None and isinstance(exc, KafkaConnectionError):
        # aiokafka logs why a bootstrap failed and raises only "Unable to bootstrap from ...": ask again
        reason = _diagnose(kafka)
    if reason is not None:
        return PipelineError(f"cannot {doing} {at} Kafka at {kafka.bootstrap_servers}: {reason}")
    text = scrub(str(exc) or type(exc).__name__, _secrets(kafka))
    return ServiceUnreachable(
        f"cannot {doing} {at} Kafka at {kafka.bootstrap_servers} (config kafka.bootstrap_servers): {text}"
    )


def spark_kafka_failure(text: str, kafka: KafkaConfig) -> str:
    """A failed Spark job's error text with the config's secrets masked and, when the Kafka cluster refuses
    this client (credentials, certificates, protocol: asked again with `diagnose_kafka`), the reason naming
    the setting to fix."""
    text = scrub(text, _secrets(kafka))
    key_file = kafka.security.key_file
    if "PBES2" in text and key_file is not None:  # seen with Java 17 and kafka-clients 3.9
        return (
            f"config key kafka.security.key_file: the Java Kafka client of the Spark jobs cannot decrypt "
            f"{key_file}, encrypted with PBES2 (openssl pkcs8's default), which this Java does not support; "
            f"{pbes2_advice(key_file)} ({text})"
        )
    reason = _diagnose(kafka)  # the Java client's own words seldom name the setting at fault
    return text if reason is None else f"{reason} ({text})"


def _secrets(kafka: KafkaConfig) -> tuple[Secret | None, ...]:
    return (kafka.security.password, kafka.security.key_password)


def _diagnose(kafka: KafkaConfig) -> str | None:
    """`diagnose_kafka` from synchronous code (the jobs' drivers run no event loop)."""
    try:
        return asyncio.run(diagnose_kafka(kafka))
    except (KafkaError, OSError, RuntimeError):
        return None
