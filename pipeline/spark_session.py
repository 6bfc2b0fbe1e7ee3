"""One way to start Spark for every job: loopback only, the venv's Python on the workers, Delta Lake and
the Kafka connector on the classpath.

The PySpark wheel ships no Kafka connector and no Delta jars; `cdc infra fetch` downloads them from Maven
Central into the shared cache (infra/maven/spark/pom.xml), and only the jars PySpark does not already have
are added, so Spark's own copies of shared libraries (Jackson, Hadoop, Parquet, ...) stay first.

Every session masks the secrets of the jobs' Kafka options wherever Spark shows a setting or a plan
(REDACTION_CONF, set last so ``pipeline.spark_conf`` cannot weaken it): with Spark's default patterns the
PEM client key of ``kafka.ssl.keystore.key`` shows, line for line, in the bootstrap's Kafka write as the
UI's SQL tab and the event log keep it, on a cluster as in ``local[N]``
(tests/integration/test_pipeline_security.py searches both, and the executors' logs).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from infra.artifacts import ensure_spark_connectors
from infra.settings import InfraSettings
from pipeline.errors import ConnectorJarsMissing, PipelineError, ServiceUnreachable
from pipeline.executor_code import executor_code_zip
from runtime.config import PipelineConfig
from runtime.spark_kafka import SPARK_REDACTION_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_VERSIONED_JAR = re.compile(r"^(?P<name>.+)-\d+(\.\d+)+[\w.\-]*\.jar$")

#: the Delta and Kafka classes each job relies on; named in the error when they are missing
REQUIRED_JARS = ("spark-sql-kafka-0-10", "delta-spark", "kafka-clients")

#: Spark's own secret pattern (its default) widened to the Kafka options that hold secrets without saying
#: so in their key: the JAAS line and the inline PEM key. Spark masks, with it, the SparkConf and
#: environment in logs and event logs, and the Kafka connector the consumer and producer parameters it logs
#: (KafkaRedactionUtil; it always masks the JAAS line's password); plan strings use it besides
#: `spark.sql.redaction.options.regex` (SPARK_REDACTION_CONF). Set when the SparkContext starts.
SECRET_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|keystore[.]key"

#: every session: plans, logs and dumps show the Kafka options that hold secrets as `*********(redacted)`
REDACTION_CONF: dict[str, str] = {**SPARK_REDACTION_CONF, "spark.redaction.regex": SECRET_REDACTION_REGEX}


#: how long a job on a cluster waits for its first executor before it gives up with a clear error
EXECUTOR_WAIT_S = 120.0


def _artifact(jar: Path) -> str:
    match = _VERSIONED_JAR.match(jar.name)
    return match["name"] if match else jar.stem


def connector_jars(settings: InfraSettings | None = None) -> list[Path]:
    """The downloaded connector jars that PySpark's own `jars/` folder does not already hold."""
    import pyspark

    settings = settings or InfraSettings.from_env()
    if pyspark.__version__ != settings.spark_version:
        raise PipelineError(
            f"pyspark {pyspark.__version__} is installed but the connector jars are for Spark "
            f"{settings.spark_version}; reinstall with `make setup` (pyproject.toml pins pyspark)"
        )
    folder = ensure_spark_connectors(settings)  # fetched from Maven Central on a job's first run
    jars = sorted(folder.glob("*.jar"))
    missing = [name for name in REQUIRED_JARS if not any(_artifact(j).startswith(name) for j in jars)]
    if missing:
        raise ConnectorJarsMissing(
            f"no {', '.join(missing)} jar in {folder}; run `cdc infra fetch` (downloads them from Maven "
            "Central once)"
        )
    bundled = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if _artifact(j) not in bundled]


def is_local(master: str) -> bool:
    """Whether a master runs the job in this process (``local``, ``local[N]``), not on a cluster."""
    return master == "local" or master.startswith("local[")


def check_master(master: str, timeout_s: float = 5.0) -> None:
    """For a standalone master (``spark://host:port[,host:port]``), that one of them accepts a connection:
    Spark itself would retry for a minute and then leave the job hanging without executors."""
    if not master.startswith("spark://"):
        return
    endpoints = master.removeprefix("spark://").split(",")
    reasons = []
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise PipelineError(
                f"config key pipeline.master: {master!r} is not spark://host:port[,host:port]"
            )
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except OSError as exc:
            reasons.append(f"{endpoint}: {exc.strerror or exc}")
    raise ServiceUnreachable(
        f"cannot reach the Spark master {master} (config pipeline.master): {'; '.join(reasons)}; is it "
        "running (`cdc infra up --spark` starts a local one; `cdc infra status` shows its address)?"
    )


def build_spark_session(
    config: PipelineConfig, app_name: str, *, extra: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession for one job (or the one a test session shares); reuses a running one.

    On a cluster (any master but ``local[N]``) the project's code goes to the executors with the job
    (``pipeline.executor_code``), and the job waits until it has an executor before it starts work."""
    from pyspark.sql import SparkSession

    from infra.toolchain import find_java
    from pipeline.lake_schema import UNIQUE_META_COLUMNS

    local = is_local(config.master)
    check_master(config.master)
    java = find_java()
    os.environ.setdefault("JAVA_HOME", str(Path(java.executable).resolve().parent.parent))
    # the executors' interpreter: PySpark takes it from this variable when the context starts
    os.environ["PYSPARK_PYTHON"] = config.executor_python or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(config.master)
        .config("spark.jars", ",".join(str(j) for j in connector_jars()))
        .config("spark.driver.memory", config.driver_memory)
        # the throughput collector: jobs here are batch-like (bench/lake_pipeline.md: compared with G1 only
        # across separate JVMs, where it warmed up somewhat faster)
        .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
        .config("spark.executor.extraJavaOptions", "-XX:+UseParallelGC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # jobs print their own progress
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        # lake tables get deletion vectors: a MERGE then marks the rows it replaces instead of rewriting
        # every file that holds one (updates are spread over the whole table)
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "true")
        # every MERGE of the lake stream adds files to the table (one for a small batch, up to one per
        # shuffle partition for a large one), and a batch with deletes one to the tombstone table, without
        # end: Delta's auto compaction rewrites small files (dropping the rows deletion vectors hide) once
        # 50 pile up (bench/lake_pipeline.md)
        .config("spark.databricks.delta.autoCompact.enabled", "true")
        # Delta reads its log with 50 tasks by default: on a few cores that is mostly task overhead
        .config("spark.databricks.delta.snapshotPartitions", str(config.shuffle_partitions))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    for column in UNIQUE_META_COLUMNS:  # no dictionary: every value would enter it (lake_schema)
        builder = builder.config(f"parquet.enable.dictionary#{column}", "false")
    settings = {**config.spark_conf, **(extra or {}), **REDACTION_CONF}  # no one may weaken the redaction
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM failed to start; py4j says little, so say what was tried
        raise PipelineError(f"Spark ({config.master}) did not start: {exc}") from exc
    if not local:
        _ship_code(spark)
        _wait_for_executors(spark, config.master)
    for key, value in SPARK_REDACTION_CONF.items():  # a session that was running already gets it too
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    # releasing a local checkpoint (pinned_frame's, or the copy of a MERGE source Delta makes when it is
    # let to) warns that its lineage is gone and it cannot be recomputed: that is what it is for, and the
    # lake stream would log it every micro-batch
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.rdd.MapPartitionsRDD", jvm.org.apache.logging.log4j.Level.ERROR
    )
    # py4j logs every connection it closes at INFO, the last ones after the process's streams are gone
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return spark


def _ship_code(spark: SparkSession) -> None:
    """The project's code to every executor of the application (once per SparkContext)."""
    context = spark.sparkContext
    archive = executor_code_zip()
    if archive.name not in getattr(context, "_python_includes", []):
        context.addPyFile(str(archive))


def _wait_for_executors(spark: SparkSession, master: str, timeout_s: float = EXECUTOR_WAIT_S) -> None:
    """Return once the cluster gave the application an executor; a clear error when it gives none (no
    worker registered, or none with the cores and memory the job asks for), where Spark would wait without
    end, warning that the job "has not accepted any resources"."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    while len(tracker.getExecutorInfos()) < 2:  # the driver is one of them
        if time.monotonic() > deadline:
            memory = spark.conf.get("spark.executor.memory", "1g")
            spark.stop()
            raise PipelineError(
                f"the Spark master {master} (config pipeline.master) gave this job no executor within "
                f"{timeout_s:.0f} s: does it have a worker alive (its web UI lists them; `cdc infra status` "
                f"for the local cluster) with a free core and {memory} of memory (spark.executor.memory, "
                "set in pipeline.spark_conf)?"
            )
        time.sleep(0.2)
