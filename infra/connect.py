"""A Kafka Connect standalone worker on loopback, with connectors from plugin folders (Debezium's JDBC sink).

The worker is Kafka's own `ConnectStandalone` from Maven Central jars (infra/artifacts.py
`ensure_connect`); connectors and converters other than Kafka's JsonConverter are plugins, each in a
`plugin.path` folder (`connect_plugin_path`). Standalone mode keeps source offsets in a file and needs
no internal topics; a sink's offsets are its consumer group's (`connect-<connector name>`), in Kafka.

Connectors are given at start (properties files on the command line) or, when their converters are
Kafka's own, added to a running worker over its REST API (`put_connector`). Either way the worker is
ready for a connector only when the connector and every one of its tasks report RUNNING; a FAILED one
raises at once with its stack trace and the worker's log tail, instead of a timeout.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.artifacts import ensure_apicurio_converter, ensure_connect, ensure_jdbc_sink
from infra.errors import InfraError, ServiceStartError
from infra.process import ManagedProcess, require_free_ports, wait_until_ready
from infra.settings import InfraSettings
from infra.toolchain import find_java

HOST = "127.0.0.1"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
JDBC_SINK_CONNECTOR = "io.debezium.connector.jdbc.JdbcSinkConnector"
APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"

_LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.common.config=WARN
log4j.logger.org.reflections=ERROR
log4j.logger.org.hibernate=WARN
log4j.logger.com.mchange=WARN
log4j.logger.org.eclipse.jetty=WARN
"""


@dataclass(slots=True, frozen=True)
class Connector:
    """One connector: its name and its configuration (`connector.class`, `topics`, ...)."""

    name: str
    config: Mapping[str, str]


@dataclass(slots=True, frozen=True)
class ConnectSpec:
    root: Path
    """Worker and connector properties, the offsets file, the log and the pid file."""
    bootstrap: str
    port: int = 8083
    """The REST API, on 127.0.0.1."""
    heap_mb: int = 256
    plugin_path: tuple[Path, ...] = ()
    worker: Mapping[str, str] = field(default_factory=dict)
    """More worker properties, over the defaults of `worker_properties` (e.g. `consumer.security.protocol`)."""

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.root / "connect.log"

    @property
    def marker(self) -> str:
        """A system property naming this folder, so the pid file never matches another worker."""
        return f"-Dcdc.connect.home={self.root}"


def connect_plugin_path(settings: InfraSettings) -> tuple[Path, ...]:
    """The project's plugin folders (Debezium's JDBC sink, the registry's converters), fetched on first use."""
    return ensure_jdbc_sink(settings), ensure_apicurio_converter(settings)


def jdbc_sink(
    name: str, *, topics_regex: str, jdbc_url: str, username: str, password: str = "", **overrides: str
) -> Connector:
    """Debezium's JDBC sink applying change events as upserts and deletes, keyed by the record key.

    Each topic `a.b.c` becomes table `a_b_c`, created and widened from the events' schemas
    (`schema.evolution=basic`). The consumer reads committed records only (an aborted transaction's events
    must never reach the table), sees new topics within seconds (`metadata.max.age.ms`) and starts at the
    beginning. `overrides` replace or add properties (key and value converters, batch sizes).
    """
    config = {
        "connector.class": JDBC_SINK_CONNECTOR,
        "tasks.max": "1",
        "topics.regex": topics_regex,
        "connection.url": jdbc_url,
        "connection.username": username,
        "connection.password": password,
        "insert.mode": "upsert",
        "delete.enabled": "true",
        "primary.key.mode": "record_key",
        "schema.evolution": "basic",
        "collection.name.format": "${topic}",
        "use.time.zone": "UTC",
        "consumer.override.isolation.level": "read_committed",
        "consumer.override.auto.offset.reset": "earliest",
        "consumer.override.metadata.max.age.ms": "2000",
    }
    config.update(overrides)
    return Connector(name, config)


def apicurio_avro_converters(registry_base_url: str) -> dict[str, str]:
    """Key and value converter settings that read our Avro: Confluent framing, ids from the ccompat API.

    The worker registers schemas through the registry's Confluent-compatible API, whose ids are Apicurio
    content ids (`ccompat.legacy-id-mode` off, the default), and writes `0x00 + 4-byte id + Avro` with no
    headers. Apicurio's converter is told exactly that: its own REST API (`/apis/registry/v2`), 4-byte ids
    (`as-confluent`), read as content ids (`use-id`; its default, global ids, names another number as soon
    as a registry's two sequences part), from the payload (`headers.enabled=false`).
    """
    settings = {
        "apicurio.registry.url": registry_base_url.rstrip("/") + "/apis/registry/v2",
        "apicurio.registry.as-confluent": "true",
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
    }
    config = {"key.converter": APICURIO_AVRO_CONVERTER, "value.converter": APICURIO_AVRO_CONVERTER}
    for side in ("key", "value"):
        config.update({f"{side}.converter.{k}": v for k, v in settings.items()})
    return config


def worker_properties(spec: ConnectSpec) -> dict[str, str]:
    """Standalone worker properties: JSON with schemas for keys and values unless a connector says otherwise.

    `connector.client.config.override.policy=All` lets a connector set its own consumer properties
    (`consumer.override.isolation.level=read_committed`); `plugin.discovery=service_load` reads the
    plugins' ServiceLoader manifests instead of scanning every class of every jar (half the start time).
    """
    props = {
        "bootstrap.servers": spec.bootstrap,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "offset.storage.file.filename": str(spec.root / "offsets"),
        "offset.flush.interval.ms": "2000",
        "plugin.path": ",".join(str(p) for p in spec.plugin_path),
        "plugin.discovery": "service_load",
        "listeners": f"http://{HOST}:{spec.port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": str(spec.port),
        "connector.client.config.override.policy": "All",
        "task.shutdown.graceful.timeout.ms": "5000",
    }
    props.update(spec.worker)
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """A java.util.Properties file (backslash is its escape character)."""
    return "".join(f"{k}={str(v).replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())


class ConnectWorker:
    """Start, configure, check and stop one standalone Connect worker."""

    def __init__(self, spec: ConnectSpec, settings: InfraSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.process = ManagedProcess(
            name="connect", pid_file=spec.root / "connect.pid", log_file=spec.log_file, marker=spec.marker
        )

    def is_running(self) -> bool:
        return self.process.is_running()

    def start(self, connectors: Sequence[Connector] = ()) -> float:
        """Start the worker with `connectors`; wait until its REST API answers and each one RUNS."""
        if self.is_running():
            raise ServiceStartError(
                f"{self._what()} already runs (pid {self.process.pid()}); stop it first, or add connectors "
                "to it with put_connector"
            )
        spec = self.spec
        require_free_ports(self._what(), [(HOST, spec.port)])
        java = find_java()
        libs = ensure_connect(self.settings)
        spec.root.mkdir(parents=True, exist_ok=True)
        worker_file = spec.root / "worker.properties"
        worker_file.write_text(render_properties(worker_properties(spec)))
        (spec.root / "log4j.properties").write_text(_LOG4J)
        connector_files = []
        for connector in connectors:
            path = spec.root / f"connector-{connector.name}.properties"
            path.write_text(render_properties({"name": connector.name, **connector.config}))
            connector_files.append(str(path))
        argv = [
            str(java.executable), spec.marker, "-Xms64m", f"-Xmx{spec.heap_mb}m", "-XX:+UseSerialGC",
            "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{spec.root / 'log4j.properties'}",
            "-cp", f"{libs}/*", MAIN_CLASS, str(worker_file), *connector_files,
        ]  # fmt: skip
        self.process.start(argv, env=dict(os.environ), cwd=spec.root)
        took = wait_until_ready(
            self.process, self._rest_answers, timeout_s=self.settings.start_timeout_s, what=self._what()
        )
        for connector in connectors:
            took += self.wait_running(connector.name)
        return took

    def put_connector(self, connector: Connector) -> float:
        """Create or reconfigure a connector over REST; wait until it and its tasks run. Seconds waited.

        Only for connectors whose converters are on the worker's classpath (JsonConverter): Kafka 3.9's
        standalone worker starts a connector PUT over REST with a converter from plugin.path (Apicurio's
        AvroConverter) but never creates its tasks, and the PUT answers 500 after 90 s. Give such
        connectors to `start`.
        """
        self._request("PUT", f"/connectors/{_quote(connector.name)}/config", dict(connector.config))
        return self.wait_running(connector.name)

    def delete_connector(self, name: str) -> None:
        """Stop and remove a connector (its consumer group and offsets stay in Kafka)."""
        self._request("DELETE", f"/connectors/{_quote(name)}")

    def status(self, name: str) -> dict[str, Any] | None:
        """`GET /connectors/<name>/status`; None while the worker does not know the connector yet."""
        try:
            return self._request("GET", f"/connectors/{_quote(name)}/status")
        except ConnectRestError as exc:
            if exc.status == 404:
                return None
            raise

    def failures(self, name: str) -> list[str]:
        """The connector's and its tasks' FAILED states with their traces (empty while all is well)."""
        status = self.status(name)
        if status is None:
            return []
        found = []
        parts = [("connector", status.get("connector", {}))]
        parts += [(f"task {t.get('id')}", t) for t in status.get("tasks", [])]
        for what, state in parts:
            if state.get("state") == "FAILED":
                found.append(
                    f"{what} FAILED on {state.get('worker_id')}:\n{state.get('trace', '(no trace)')}"
                )
        return found

    def running(self, name: str) -> bool:
        """The connector and at least one task RUNNING, every task RUNNING; raises if one FAILED."""
        failures = self.failures(name)
        if failures:
            raise ServiceStartError(
                f"Kafka Connect connector {name!r} on {self.spec.rest_url} failed:\n"
                + "\n".join(f[:4000] for f in failures)
                + f"\nLast lines of {self.spec.log_file}:\n{self.process.log_tail(40)}"
            )
        status = self.status(name)
        if status is None:
            return False
        tasks = status.get("tasks", [])
        return (
            status.get("connector", {}).get("state") == "RUNNING"
            and bool(tasks)
            and all(t.get("state") == "RUNNING" for t in tasks)
        )

    def wait_running(self, name: str, timeout_s: float | None = None) -> float:
        """Seconds until connector `name` and its tasks run; ServiceStartError when one FAILED or time ran out."""
        return wait_until_ready(
            self.process,
            lambda: self.running(name),
            timeout_s=timeout_s if timeout_s is not None else self.settings.start_timeout_s,
            what=f"Kafka Connect connector {name!r} on {self.spec.rest_url}",
        )

    def stop(self) -> bool:
        return self.process.stop(timeout_s=30)

    # -- REST

    def _rest_answers(self) -> bool:
        try:
            self._request("GET", "/connectors")
        except (ConnectRestError, OSError):
            return False
        return True

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.spec.rest_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ConnectRestError(method, self.spec.rest_url + path, exc.code, exc.read().decode()) from None
        except urllib.error.URLError as exc:
            raise OSError(f"{method} {self.spec.rest_url}{path}: {exc.reason}") from None
        return json.loads(text) if text.strip() else None

    def _what(self) -> str:
        return f"Kafka Connect worker ({self.spec.rest_url}, Kafka {self.spec.bootstrap})"


class ConnectRestError(InfraError):
    """The worker's REST API answered with an error status (a bad connector config: 400 with the reason)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"Kafka Connect answered {method} {url} with HTTP {status}: {body[:2000]}")
        self.status = status


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")
