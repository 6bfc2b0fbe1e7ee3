"""One Apache Kafka 3.9 broker in KRaft mode (combined broker and controller), from Maven Central jars."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra import kafka_sasl
from infra.artifacts import ensure_kafka
from infra.errors import ServiceStartError
from infra.process import ManagedProcess, can_connect, require_free_ports, wait_until_ready
from infra.secret_files import private_folder, write_private
from infra.secure import SecureLayout, ensure_kafka_keystore, material
from infra.settings import InfraSettings
from infra.toolchain import find_java

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
HOST = "127.0.0.1"

_LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=INFO
"""


@dataclass(slots=True, frozen=True)
class BrokerSpec:
    root: Path
    log_file: Path
    port: int = 9092
    controller_port: int = 9093
    heap_mb: int = 512

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def data(self) -> Path:
        return self.root / "data"


def broker_spec(settings: InfraSettings) -> BrokerSpec:
    return BrokerSpec(
        root=settings.home / "kafka",
        log_file=settings.logs / "kafka.log",
        port=settings.kafka_port,
        controller_port=settings.kafka_controller_port,
        heap_mb=settings.kafka_heap_mb,
    )


def render_properties(spec: BrokerSpec, security: dict[str, str] | None = None) -> str:
    """server.properties for a single loopback broker; replication settings sized for one node.

    `security` (secure mode) replaces the PLAINTEXT client listener by SASL_SSL: see infra.kafka_sasl.
    """
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{spec.controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{spec.port},CONTROLLER://{HOST}:{spec.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{spec.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(spec.data),
        "num.partitions": "1",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "8",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "log.retention.hours": "168",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    props.update(security or {})
    return "".join(f"{k}={_escape(v)}\n" for k, v in props.items())


def _escape(value: str) -> str:
    """A java.util.Properties value: backslash is its escape character."""
    return value.replace("\\", "\\\\")


class KafkaBroker:
    """Start, check and stop the broker; in secure mode (settings.secure) its client listener is SASL_SSL."""

    def __init__(self, spec: BrokerSpec, settings: InfraSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.process = ManagedProcess(
            name="kafka",
            pid_file=spec.root / "kafka.pid",
            log_file=spec.log_file,
            marker=f"{MAIN_CLASS} {spec.root / 'server.properties'}",
        )

    def is_running(self) -> bool:
        return self.process.is_running()

    def metadata_answers(self) -> bool:
        """The broker answers a metadata request (an open port alone is not enough).

        In secure mode the probe logs in over SASL_SSL with SCRAM-SHA-512, the way clients will: it
        proves the TLS certificate, the SCRAM users in the metadata and the listener all work.
        """
        if not can_connect(HOST, self.spec.port):
            return False
        options = kafka_sasl.client_options(material(self.settings)) if self.settings.secure else {}
        return asyncio.run(_list_topics(self.spec.bootstrap, options)) is not None

    def start(self) -> float | None:
        """Format storage on first start, start the broker, wait for metadata; None if already running."""
        if self.is_running():
            wait_until_ready(
                self.process,
                self.metadata_answers,
                timeout_s=self.settings.start_timeout_s,
                what=self._what(),
            )
            return None
        spec = self.spec
        require_free_ports(self._what(), [(HOST, spec.port), (HOST, spec.controller_port)])
        java = find_java()
        libs = ensure_kafka(self.settings)
        spec.root.mkdir(parents=True, exist_ok=True)
        properties = spec.root / "server.properties"
        if self.settings.secure:
            private_folder(spec.root)  # data and configs: the metadata log holds the SCRAM verifiers
            kafka_sasl.require_scram_storage(spec.root, spec.data)
            ensure_kafka_keystore(self.settings)
            security = kafka_sasl.listener_properties(HOST, spec.port, spec.controller_port, self._layout())
            write_private(properties, render_properties(spec, security))
        else:
            properties.write_text(render_properties(spec))
        (spec.root / "log4j.properties").write_text(_LOG4J)
        base = [
            str(java.executable),
            "-cp",
            f"{libs}/*",
            f"-Dlog4j.configuration=file:{spec.root / 'log4j.properties'}",
        ]
        if not (spec.data / "meta.properties").is_file():
            self._format(base, properties)
        argv = [
            base[0], f"-Xms{spec.heap_mb}m", f"-Xmx{spec.heap_mb}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dkafka.logs.dir={spec.log_file.parent}", *base[1:],
            MAIN_CLASS, str(properties),
        ]  # fmt: skip
        self.process.start(argv, env=dict(os.environ), cwd=spec.root)
        return wait_until_ready(
            self.process, self.metadata_answers, timeout_s=self.settings.start_timeout_s, what=self._what()
        )

    def _format(self, base: list[str], properties: Path) -> None:
        def run(argv: list[str], what: str) -> str:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                if self.settings.secure:
                    output = kafka_sasl.redact(output, self._layout())
                raise ServiceStartError(
                    f"Kafka storage tool `{what}` failed (exit {done.returncode}) for {self.spec.data}:\n{output}"
                )
            return done.stdout.strip()

        cluster_id = run([*base, STORAGE_TOOL, "random-uuid"], "random-uuid").splitlines()[-1].strip()
        format_args = [STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(properties), "--ignore-formatted"]
        if not self.settings.secure:
            run([*base, *format_args], "format")
            return
        layout = self._layout()
        argv = [*base[1:], *format_args, *kafka_sasl.scram_format_arguments(layout)]
        with kafka_sasl.java_argument_file(layout, argv) as argument_file:
            run([base[0], f"@{argument_file}"], "format --add-scram")
        (self.spec.root / kafka_sasl.SCRAM_MARKER).write_text(kafka_sasl.scram_marker_text())

    def _layout(self) -> SecureLayout:
        return SecureLayout.of(self.settings)

    def stop(self) -> bool:
        return self.process.stop()

    def _what(self) -> str:
        listener = f"{kafka_sasl.LISTENER} " if self.settings.secure else ""
        return f"Kafka broker ({listener}{self.spec.bootstrap})"


async def _list_topics(bootstrap: str, options: dict[str, object]) -> set[str] | None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000, **options)
    try:
        await admin.start()
        return set(await admin.list_topics())
    except Exception:
        return None
    finally:
        await admin.close()
