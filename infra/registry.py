"""A Confluent-compatible schema registry: Apicurio Registry 2.6 with in-memory storage, on loopback.

Maven Central serves the whole application (infra/artifacts.py `ensure_registry`); it runs on Java 17
with a small heap. Its Confluent-compatible API answers under `/apis/ccompat/v7`, so Confluent clients
(and schemas.registry_client.HttpSchemaRegistryClient) use `http://127.0.0.1:<port>/apis/ccompat/v7`.
Storage is in memory: schemas live as long as the process, which suits tests and local runs.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.artifacts import ensure_registry, registry_runner
from infra.process import ManagedProcess, require_free_ports, wait_until_ready
from infra.settings import InfraSettings
from infra.toolchain import find_java

HOST = "127.0.0.1"
CCOMPAT_PATH = "/apis/ccompat/v7"
READY_PATH = "/health/ready"


@dataclass(slots=True, frozen=True)
class RegistrySpec:
    root: Path
    log_file: Path
    port: int = 8081
    heap_mb: int = 256

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def ccompat_url(self) -> str:
        """The Confluent-compatible API: the URL to give Confluent serializers and our registry client."""
        return self.base_url + CCOMPAT_PATH

    @property
    def marker(self) -> str:
        """A system property naming this home, so the pid file never matches another registry."""
        return f"-Dcdc.registry.home={self.root}"


def registry_spec(settings: InfraSettings) -> RegistrySpec:
    return RegistrySpec(
        root=settings.home / "registry",
        log_file=settings.logs / "registry.log",
        port=settings.registry_port,
        heap_mb=settings.registry_heap_mb,
    )


def registry_argv(java: Path, runner: Path, spec: RegistrySpec) -> list[str]:
    """The JVM command line: loopback only, a small heap and a quick-starting JIT (a test service)."""
    return [
        str(java), spec.marker, "-Xms64m", f"-Xmx{spec.heap_mb}m", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
        f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={spec.port}",
        "-jar", str(runner),
    ]  # fmt: skip


class SchemaRegistry:
    """Start, check and stop the registry. Plaintext HTTP on loopback in every mode (no secure variant)."""

    def __init__(self, spec: RegistrySpec, settings: InfraSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.process = ManagedProcess(
            name="registry", pid_file=spec.root / "registry.pid", log_file=spec.log_file, marker=spec.marker
        )

    def is_running(self) -> bool:
        return self.process.is_running()

    def ready(self) -> bool:
        """Quarkus reports every readiness check UP (an open port alone is not enough)."""
        try:
            with urllib.request.urlopen(self.spec.base_url + READY_PATH, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self) -> float | None:
        """Start the registry and wait for readiness; None if it was already running."""
        if self.is_running():
            wait_until_ready(
                self.process, self.ready, timeout_s=self.settings.start_timeout_s, what=self._what()
            )
            return None
        require_free_ports(self._what(), [(HOST, self.spec.port)])
        java = find_java()
        runner = registry_runner(ensure_registry(self.settings))
        self.spec.root.mkdir(parents=True, exist_ok=True)
        self.process.start(
            registry_argv(java.executable, runner, self.spec), env=dict(os.environ), cwd=self.spec.root
        )
        return wait_until_ready(
            self.process, self.ready, timeout_s=self.settings.start_timeout_s, what=self._what()
        )

    def stop(self) -> bool:
        return self.process.stop()

    def _what(self) -> str:
        return f"schema registry ({self.spec.ccompat_url})"
