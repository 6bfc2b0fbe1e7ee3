"""One way to start Spark for every job: loopback only, the venv's Python on the workers, Delta Lake and
the Kafka connector on the classpath.

The PySpark wheel ships no Kafka connector and no Delta jars; `cdc infra fetch` downloads them from Maven
Central into the shared cache (infra/maven/spark/pom.xml), and only the jars PySpark does not already have
are added, so Spark's own copies of shared libraries (Jackson, Hadoop, Parquet, ...) stay first.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infra.artifacts import ensure_spark_connectors
from infra.settings import InfraSettings
from pipeline.errors import ConnectorJarsMissing, PipelineError
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


def build_spark_session(
    config: PipelineConfig, app_name: str, *, extra: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession for one job (or the one a test session shares); reuses a running one."""
    from pyspark.sql import SparkSession

    from infra.toolchain import find_java
    from pipeline.lake_schema import UNIQUE_META_COLUMNS

    java = find_java()
    os.environ.setdefault("JAVA_HOME", str(Path(java.executable).resolve().parent.parent))
    os.environ["PYSPARK_PYTHON"] = sys.executable
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
    for key, value in {**(extra or {}), **REDACTION_CONF}.items():  # no caller may weaken the redaction
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM failed to start; py4j says little, so say what was tried
        raise PipelineError(f"Spark ({config.master}) did not start: {exc}") from exc
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
