"""The local-services layer fails early and says what, where and what to do."""

from __future__ import annotations

import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from infra import artifacts
from infra.errors import ArtifactDownloadError, PortInUseError, ServiceStartError, ToolchainError
from infra.kafka import KafkaBroker, broker_spec
from infra.process import ephemeral_port_warnings
from infra.settings import InfraSettings
from infra.toolchain import find_java, parse_java_version
from runtime.service_process import free_port


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" x', 21),
    ],
)
def test_java_version_parsing(text: str, major: int) -> None:
    assert parse_java_version(text)[0] == major


def test_missing_java_home_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(ToolchainError, match=r"JAVA_HOME=.*no-jdk has no bin/java.*openjdk-17"):
        find_java()


def test_java_absent_from_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="Java not found on PATH"):
        find_java()


def test_wrong_java_version_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "jdk21" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'openjdk version \"21.0.2\" 2024-01-16' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk21"))
    with pytest.raises(ToolchainError, match=r"is Java 21\.0\.2; .*need Java 17"):
        find_java()


def test_port_in_use_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = InfraSettings.from_env(home=tmp_path, kafka_port=port, kafka_controller_port=free_port())
        broker = KafkaBroker(broker_spec(settings), settings)
        with pytest.raises(PortInUseError, match=rf"127\.0\.0\.1:{port} already in use"):
            broker.start()
    assert not broker.is_running()


def test_failed_download_names_the_service_and_shows_maven_output(tmp_path: Path) -> None:
    settings = InfraSettings.from_env(
        home=tmp_path, cache=tmp_path / "cache", kafka_version="0.0.0-no-such-release"
    )
    with pytest.raises(
        ArtifactDownloadError, match=r"failed to download the jars of kafka(.|\n)*0\.0\.0-no-such"
    ):
        artifacts.ensure_kafka(settings)
    assert not settings.kafka_libs.exists(), "a failed download must not leave a folder that looks usable"


def test_not_ready_in_time_shows_log_tail(tmp_path: Path) -> None:
    """A broker given one second to start is stopped with the tail of its own log in the error."""
    settings = InfraSettings.from_env(
        home=tmp_path, kafka_port=free_port(), kafka_controller_port=free_port(), start_timeout_s=1
    )
    broker = KafkaBroker(broker_spec(settings), settings)
    try:
        with pytest.raises(ServiceStartError, match=r"did not become ready within 1 s") as info:
            broker.start()
    finally:
        broker.stop()
    assert not broker.is_running()
    # the tail is the broker's own log, however many lines it wrote in that second
    head, _, tail = str(info.value).partition(f"Last lines of {broker.spec.log_file}:\n")
    assert head and tail.strip()
    log = broker.spec.log_file.read_text()
    assert all(line in log for line in tail.splitlines())


def test_ports_in_the_ephemeral_range_are_warned_about(tmp_path: Path) -> None:
    """A service port among the kernel's ephemeral ports can be taken by a client's outgoing connection
    while the service restarts (seen with Kafka on 39092): `cdc infra up` says so before it starts."""
    span = tmp_path / "ip_local_port_range"
    span.write_text("32768\t60999\n")
    warnings = ephemeral_port_warnings({"kafka_port": 39092, "cql_port": 9042, "registry_port": 60999}, span)
    assert len(warnings) == 2
    assert "kafka_port port 39092 lies in the kernel's ephemeral port range 32768-60999" in warnings[0]
    assert "choose a port below 32768" in warnings[0]
    assert "registry_port port 60999" in warnings[1]
    assert ephemeral_port_warnings({"kafka_port": 39092}, tmp_path / "absent") == []


def test_infra_up_warns_of_ephemeral_ports_before_starting(tmp_path: Path) -> None:
    from infra.process import ephemeral_port_range
    from infra.stack import LocalStack

    span = ephemeral_port_range()
    if span is None:
        pytest.skip("the kernel's ephemeral port range cannot be read here")
    inside = span[0] + 7
    settings = InfraSettings.from_env(home=tmp_path / "home", kafka_port=inside)
    messages: list[str] = []
    # nothing is asked to start, so only the check runs; the ports it checks are those of what starts
    LocalStack(settings).up(kafka=False, cassandra=False, registry=False, report=messages.append)
    assert not any("ephemeral" in m for m in messages)
    assert LocalStack(settings)._ports(kafka=True, cassandra=False, registry=False) == {
        "kafka_port": inside,
        "kafka_controller_port": settings.kafka_controller_port,
    }
    assert ephemeral_port_warnings(LocalStack(settings)._ports(kafka=True, cassandra=False, registry=False))


def test_kill_ends_a_process_without_its_shutdown_handlers(tmp_path: Path) -> None:
    """`cdc verify`'s node_kill: SIGKILL, so a process's handlers (a JVM's shutdown hooks) never run;
    SIGTERM would let them flush and close cleanly."""
    from infra.process import ManagedProcess

    flag = tmp_path / "terminated-cleanly"
    script = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(flag)!r}).touch(), sys.exit(0)))\n"
        "time.sleep(60)\n"
    )
    process = ManagedProcess(
        "sleeper", tmp_path / "sleeper.pid", tmp_path / "sleeper.log", "kill-test-marker"
    )
    process.start([sys.executable, "-c", script, "kill-test-marker"])
    assert process.is_running()
    time.sleep(0.5)  # the handler is installed
    assert process.kill() is True
    assert not process.is_running() and not process.pid_file.exists()
    assert not flag.exists(), "the process ran its SIGTERM handler: it was not killed with -9"
    assert process.kill() is False  # nothing left to kill
