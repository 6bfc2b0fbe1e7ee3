"""Download each service's runtime jars from Maven Central once, into the shared cache, when first needed.

One POM per service (infra/maven/<service>/pom.xml) so Maven's version mediation never mixes the
dependency trees of Cassandra and Kafka. A folder is used only after a complete copy, marked by a stamp
file, so an interrupted download is redone rather than half-used. Each artifact is fetched under a lock
file of its own (``<folder>.lock``): two checkouts sharing the cache that need one artifact at once fetch it
once, the second waiting for the first. Nothing is fetched before a command needs it (``cdc infra fetch``
fetches everything ahead, for an offline machine); a first use says what it downloads and how big it is.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from infra.errors import ArtifactDownloadError
from infra.settings import InfraSettings
from infra.toolchain import find_maven

log = logging.getLogger(__name__)

POM_DIR = Path(__file__).resolve().parent / "maven"
#: sends the extra repositories some parent POMs declare (Spark's) to Maven Central itself
GLOBAL_SETTINGS = POM_DIR / "settings.xml"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_STAMP = ".complete"


#: roughly how much each artifact brings (MB), said before its first download
APPROXIMATE_MB = {
    "cassandra": 70,
    "kafka": 50,
    "spark": 105,
    "connect": 30,
    "apicurio-converter": 10,
    "io.apicurio:apicurio-registry-app": 150,
    "io.debezium:debezium-connector-jdbc": 40,
}


@contextmanager
def _artifact_lock(target: Path) -> Iterator[None]:
    """Hold ``<target>.lock`` (an exclusive flock): one process fetches an artifact, the others wait."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(target.with_name(target.name + ".lock"), "a")  # noqa: SIM115 (held across the yield)
    except OSError as exc:
        raise ArtifactDownloadError(f"cannot lock {target} in the cache: {exc}; check CDC_CACHE_DIR") from exc
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process fetching %s", target.name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _announce(what: str, target: Path) -> None:
    size = APPROXIMATE_MB.get(what)
    about = f", about {size} MB" if size else ""
    log.info("first use: downloading %s from Maven Central into %s (once%s)", what, target, about)


def _downloaded(what: str, target: Path, started: float) -> None:
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    log.info("downloaded %s: %.0f MB in %.1f s", what, size / 2**20, time.monotonic() - started)


def _copy_dependencies(pom: Path, target: Path, properties: dict[str, str]) -> float:
    if (target / _STAMP).is_file():
        return 0.0
    with _artifact_lock(target):
        if (target / _STAMP).is_file():  # another process fetched it while this one waited
            return 0.0
        try:
            return _copy_dependencies_locked(pom, target, properties)
        except OSError as exc:
            raise ArtifactDownloadError(
                f"cannot write the {pom.parent.name} jars into {target}: {exc}; check CDC_CACHE_DIR"
            ) from exc


def _copy_dependencies_locked(pom: Path, target: Path, properties: dict[str, str]) -> float:
    mvn = find_maven()
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        str(mvn), "-B", "-q", "-gs", str(GLOBAL_SETTINGS), "-f", str(pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
        *(f"-D{k}={v}" for k, v in properties.items()),
    ]  # fmt: skip
    _announce(pom.parent.name, target)
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as exc:
        raise ArtifactDownloadError(f"Maven did not finish resolving {pom} within 30 minutes") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise ArtifactDownloadError(
            f"Maven failed to download the jars of {pom.parent.name} (exit {done.returncode}); "
            f"check that Maven Central is reachable and ~/.m2/settings.xml. Last output:\n{tail}"
        )
    jars = list(staging.glob("*.jar"))
    if not jars:
        raise ArtifactDownloadError(f"Maven succeeded for {pom} but copied no jars into {staging}")
    (staging / _STAMP).write_text(f"{len(jars)} jars\n")
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    _downloaded(pom.parent.name, target, started)
    return time.monotonic() - started


def ensure_cassandra(settings: InfraSettings) -> Path:
    """The folder of Cassandra's runtime jars, downloading them on first use."""
    _copy_dependencies(
        POM_DIR / "cassandra" / "pom.xml",
        settings.cassandra_lib,
        {"cassandra.version": settings.cassandra_version},
    )
    return settings.cassandra_lib


def ensure_kafka(settings: InfraSettings) -> Path:
    """The folder of Kafka's runtime jars (with a logging backend), downloading them on first use."""
    _copy_dependencies(
        POM_DIR / "kafka" / "pom.xml", settings.kafka_libs, {"kafka.version": settings.kafka_version}
    )
    return settings.kafka_libs


def ensure_spark_connectors(settings: InfraSettings) -> Path:
    """The folder of the Kafka connector and Delta Lake jars for PySpark, downloading them on first use."""
    _copy_dependencies(
        POM_DIR / "spark" / "pom.xml",
        settings.spark_connector_jars,
        {"spark.version": settings.spark_version, "delta.version": settings.delta_version},
    )
    return settings.spark_connector_jars


def find_jar(lib: Path, prefix: str) -> Path:
    """The one jar in `lib` whose name starts with `prefix` (e.g. the jamm agent)."""
    matches = sorted(lib.glob(f"{prefix}*.jar"))
    if not matches:
        raise ArtifactDownloadError(
            f"no {prefix}*.jar in {lib}; delete {lib.parent} and run `cdc infra fetch`"
        )
    return matches[-1]


def ensure_registry(settings: InfraSettings) -> Path:
    """The unpacked Apicurio Registry (runner jar + lib/), downloading and extracting it on first use.

    Maven Central serves the whole application as `apicurio-registry-app-<v>-all.tar.gz` (about 140 MB);
    Maven fetches it (into ~/.m2 as well, so a cleared cache re-extracts without downloading) and it is
    unpacked under the cache folder, behind the same stamp file as the jar folders.
    """
    artifact = f"io.apicurio:apicurio-registry-app:{settings.registry_version}:tar.gz:all"
    return _fetch_archive(artifact, settings.registry_dist, lambda staging: registry_runner(staging).name)


def _maven_copy(artifact: str, staging: Path) -> None:
    """Download one artifact (groupId:artifactId:version:type[:classifier]) with Maven into `staging`."""
    cmd = [
        str(find_maven()), "-B", "-q", "-gs", str(GLOBAL_SETTINGS),
        f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    try:
        # No POM: run from the staging folder so Maven never picks up a pom.xml of the current directory.
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=staging)
    except subprocess.TimeoutExpired as exc:
        raise ArtifactDownloadError(f"Maven did not finish downloading {artifact} within 30 minutes") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise ArtifactDownloadError(
            f"Maven failed to download {artifact} (exit {done.returncode}); check that Maven Central is "
            f"reachable and ~/.m2/settings.xml. Last output:\n{tail}"
        )


def _staged(artifact: str, target: Path, fill: Callable[[Path], str]) -> Path:
    """`target`, filled once (behind the stamp, one process at a time): `fill` puts the files into an
    empty staging folder and returns the line for the stamp; the folder replaces `target` only when
    complete, so an interrupted download is redone."""
    if (target / _STAMP).is_file():
        return target
    with _artifact_lock(target):
        if (target / _STAMP).is_file():  # another process fetched it while this one waited
            return target
        what = artifact.split(":tar.gz")[0].rsplit(":", 1)[0]
        _announce(what, target)
        started = time.monotonic()
        try:
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            (staging / _STAMP).write_text(f"{fill(staging)}\n")
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        except OSError as exc:
            raise ArtifactDownloadError(
                f"cannot write {artifact} into {target}: {exc}; check CDC_CACHE_DIR"
            ) from exc
        _downloaded(what, target, started)
        return target


def _fetch_archive(artifact: str, target: Path, check: Callable[[Path], str]) -> Path:
    """Download one `.tar.gz` artifact with Maven and unpack it into `target`, once (behind the stamp).

    `check` looks at the unpacked staging folder, raises if it lacks what the caller needs, and returns
    the line written into the stamp.
    """

    def fill(staging: Path) -> str:
        _maven_copy(artifact, staging)
        archives = list(staging.glob("*.tar.gz"))
        if len(archives) != 1:
            raise ArtifactDownloadError(f"Maven succeeded for {artifact} but left {archives} in {staging}")
        try:
            with tarfile.open(archives[0]) as archive:
                # the "data" filter (no absolute paths, links out of the folder or devices) where Python has it
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                archive.extractall(staging, **safe)
        except (tarfile.TarError, OSError) as exc:
            raise ArtifactDownloadError(
                f"cannot unpack {archives[0]}: {exc}; run `cdc infra fetch` again"
            ) from exc
        archives[0].unlink()
        return check(staging)

    return _staged(artifact, target, fill)


def registry_runner(dist: Path) -> Path:
    """The Quarkus runner jar of an unpacked Apicurio Registry (it loads lib/ by its manifest)."""
    matches = sorted(dist.glob("apicurio-registry-app-*-runner.jar"))
    if not matches or not (dist / "lib").is_dir():
        raise ArtifactDownloadError(
            f"no apicurio-registry-app-*-runner.jar and lib/ in {dist}; delete it and run "
            "`cdc infra fetch --registry`"
        )
    return matches[-1]


def ensure_debezium_cassandra(settings: InfraSettings) -> Path:
    """Debezium's Cassandra 5 connector as one runnable jar (its jar-with-dependencies), downloaded on first
    use; only `bench/agent_vs_debezium.py` runs it, so `cdc infra fetch` leaves it out."""
    artifact = f"io.debezium:debezium-connector-cassandra-5:{settings.debezium_cassandra_version}:jar:jar-with-dependencies"

    def fill(staging: Path) -> str:
        _maven_copy(artifact, staging)
        return debezium_cassandra_jar(staging).name

    return debezium_cassandra_jar(_staged(artifact, settings.debezium_cassandra_dist, fill))


def debezium_cassandra_jar(dist: Path) -> Path:
    """The connector's runnable jar in its downloaded folder."""
    jars = sorted(dist.glob("debezium-connector-cassandra-5-*-jar-with-dependencies.jar"))
    if not jars:
        raise ArtifactDownloadError(
            f"no debezium-connector-cassandra-5-*-jar-with-dependencies.jar in {dist}; delete the folder "
            "and run the benchmark again to download it"
        )
    return jars[-1]


# -- Kafka Connect: the worker's classpath and the plugin.path folders of infra/connect.py

#: the folder inside each plugin.path entry holding one plugin's jars (Connect isolates each child folder)
JDBC_SINK_FOLDER = "debezium-connector-jdbc"
APICURIO_CONVERTER_FOLDER = "apicurio-converter"
#: the registry's Connect converters, listed for Connect's ServiceLoader discovery (plugin.discovery=
#: service_load skips the slow class scan, but finds only plugins whose jars declare them; these do not)
APICURIO_CONVERTERS = (
    "io.apicurio.registry.utils.converter.AvroConverter",
    "io.apicurio.registry.utils.converter.ExtJsonConverter",
)
_MANIFEST_JAR = "cdc-service-manifests.jar"


def ensure_connect(settings: InfraSettings) -> Path:
    """The Kafka Connect worker's jars (runtime, JsonConverter, reload4j), downloading them on first use."""
    _copy_dependencies(
        POM_DIR / "connect" / "pom.xml", settings.connect_libs, {"kafka.version": settings.kafka_version}
    )
    return settings.connect_libs


def ensure_jdbc_sink(settings: InfraSettings) -> Path:
    """The plugin.path entry of Debezium's JDBC sink (its tar.gz plugin unpacked; PostgreSQL driver included)."""
    artifact = f"io.debezium:debezium-connector-jdbc:{settings.jdbc_sink_version}:tar.gz:plugin"

    def check(staging: Path) -> str:
        jars = sorted((staging / JDBC_SINK_FOLDER).glob("debezium-connector-jdbc-*.jar"))
        if not jars:
            raise ArtifactDownloadError(f"{artifact} unpacked without {JDBC_SINK_FOLDER}/*.jar in {staging}")
        return jars[-1].name

    return _fetch_archive(artifact, settings.jdbc_sink_plugin, check)


def ensure_apicurio_converter(settings: InfraSettings) -> Path:
    """The plugin.path entry of the registry's Connect converters, with their dependencies, on first use."""
    folder = settings.apicurio_converter_plugin / APICURIO_CONVERTER_FOLDER
    _copy_dependencies(
        POM_DIR / "apicurio-converter" / "pom.xml", folder, {"apicurio.version": settings.registry_version}
    )
    manifest = folder / _MANIFEST_JAR
    if not manifest.is_file():
        with _artifact_lock(manifest):
            if not manifest.is_file():
                partial = manifest.with_name(manifest.name + ".partial")
                with zipfile.ZipFile(partial, "w") as jar:
                    jar.writestr(
                        "META-INF/services/org.apache.kafka.connect.storage.Converter",
                        "".join(f"{name}\n" for name in APICURIO_CONVERTERS),
                    )
                partial.rename(manifest)
    return settings.apicurio_converter_plugin
