"""The agent stops with an actionable AccessError when Kafka or Cassandra refuses it for a reason only its
config can fix, names the config key, shows no secret, and loses nothing: it reads no segment and moves
no offset before both clients are up.

Servers are local sockets doing a TLS handshake (tests/unit/test_client_security.py), and a refused
Cassandra login is the driver's own error handed in; no Kafka or Cassandra runs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.errors import KafkaConnectionError
from cassandra import AuthenticationFailed
from cassandra.cluster import NoHostAvailable

import agents.publisher as publisher_module
from agents.errors import ACCESS_REFUSALS_BEFORE_EXIT, AccessError, AgentError
from agents.metrics import AgentMetrics
from agents.node_agent import NodeAgent
from agents.offset_store import OffsetStore
from agents.publisher import RawPublisher
from agents.schema_source import SchemaSource
from runtime.config import (
    AgentConfig,
    CassandraConfig,
    CassandraTlsConfig,
    CdcConfig,
    KafkaConfig,
    KafkaSecurityConfig,
)
from runtime.kafka_clients import KafkaAccessError
from runtime.secrets import Secret
from runtime.service_process import environment_without_cdc_overrides, free_port
from tests.unit.tls_material import TlsMaterial, loopback_server, make_tls_material, tls_handler

PASSWORD = "s3cret-Pa55word-do-not-print"
SEGMENT = "CommitLog-7-1700000000001.log"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def _sasl_ssl(bootstrap: str, ca_file: Path | None, **more: Any) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=bootstrap,
        request_timeout_ms=3000,
        security=KafkaSecurityConfig(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username="cdc",
            password=Secret(PASSWORD),
            ca_file=ca_file,
            **more,
        ),
    )


def _start(kafka: KafkaConfig, metrics: AgentMetrics | None = None) -> bool:
    async def scenario() -> bool:
        publisher = RawPublisher(kafka, max_in_flight_bytes=2**20, metrics=metrics or AgentMetrics())
        try:
            return await publisher.start(asyncio.Event())
        finally:
            await publisher.stop()

    return asyncio.run(scenario())


# --- Kafka: the publisher's start -----------------------------------------------------------------------


def test_untrusted_broker_certificate_stops_the_publisher(
    tls: TlsMaterial, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = AgentMetrics()
    with (
        loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port,
        pytest.raises(AccessError) as caught,
    ):
        _start(_sasl_ssl(f"127.0.0.1:{port}", tls.ca), metrics)
    message = str(caught.value)
    assert re.search(
        r"^Kafka refuses the agent: the TLS certificate of 127\.0\.0\.1:\d+ is not trusted: .*"
        r"set kafka\.security\.ca_file \(.*ca\.pem\) to the CA",
        message,
    )
    assert PASSWORD not in message and PASSWORD not in caplog.text
    refused = metrics.registry.get_sample_value("cdc_agent_send_errors_total")
    assert refused == ACCESS_REFUSALS_BEFORE_EXIT - 1, "each refusal before the last is counted and retried"


def test_plaintext_publisher_on_a_tls_port_is_told_to_set_the_protocol(tls: TlsMaterial) -> None:
    tls_port = loopback_server(tls_handler(tls.server_cert, tls.server_key))
    with (
        tls_port as port,
        pytest.raises(AccessError, match=r"set kafka\.security\.protocol \(now PLAINTEXT\)"),
    ):
        _start(KafkaConfig(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=3000))


def test_key_file_that_does_not_load_stops_the_publisher_at_once(tls: TlsMaterial, tmp_path: Path) -> None:
    """A config made in code skips the load-time file checks: the client builder names the key."""
    kafka = _sasl_ssl(
        f"127.0.0.1:{free_port()}", tls.ca, cert_file=tls.client_cert, key_file=tmp_path / "gone.key"
    )
    with pytest.raises(AccessError, match=r"kafka\.security\.key_file: file .*gone\.key does not exist"):
        _start(kafka)


def test_refusals_below_the_limit_and_an_absent_broker_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker restarting may refuse once or twice, and one that is down is waited for: neither ends the
    agent."""
    failures: list[Exception] = [
        *[KafkaAccessError("refused (kafka.security.password)")] * (ACCESS_REFUSALS_BEFORE_EXIT - 1),
        KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1, <AddressFamily.AF_INET: 2>)]"),
        *[KafkaAccessError("refused (kafka.security.password)")] * (ACCESS_REFUSALS_BEFORE_EXIT - 1),
    ]

    async def ensure_topics(self: RawPublisher) -> None:
        if failures:
            raise failures.pop(0)

    class Producer:
        async def start(self) -> None:
            pass

        async def stop(self) -> None:
            pass

    monkeypatch.setattr(RawPublisher, "_ensure_topics", ensure_topics)
    monkeypatch.setattr(publisher_module, "make_producer", lambda kafka, **_: Producer())
    monkeypatch.setattr(publisher_module, "MAX_BACKOFF_S", 0.01)
    assert _start(KafkaConfig())
    assert not failures


# --- Cassandra: the first schema load -------------------------------------------------------------------


def _agent_config(
    tmp_path: Path, *, cassandra: CassandraConfig, kafka: KafkaConfig | None = None
) -> CdcConfig:
    return CdcConfig(
        kafka=kafka or KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}"),
        cassandra=cassandra,
        agent=AgentConfig(
            cdc_raw_directory=tmp_path / "cdc_raw", state_directory=tmp_path / "state", metrics_port=0
        ),
    )


def _refused_login(session: SchemaSource) -> Any:
    raise NoHostAvailable(
        "Unable to connect to any servers",
        {
            "127.0.0.1:9042": AuthenticationFailed(
                "Failed to authenticate to 127.0.0.1:9042: Error from server: code=0100 [Bad credentials] "
                'message="Provided username cdc and/or password are incorrect"'
            )
        },
    )


def test_refused_cassandra_login_stops_the_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(SchemaSource, "_connect", _refused_login)
    config = _agent_config(
        tmp_path,
        cassandra=CassandraConfig(username="cdc", password=Secret(PASSWORD, "file /run/cassandra.pw")),
    )
    with pytest.raises(AccessError) as caught:
        asyncio.run(NodeAgent(config).run())
    assert str(caught.value) == (
        "Cassandra refuses the agent: Cassandra at 127.0.0.1:9042 refused the login of role 'cdc': wrong "
        "password or unknown role; check cassandra.username and cassandra.password (its value comes from "
        "file /run/cassandra.pw)"
    )
    assert isinstance(caught.value, AgentError)
    assert PASSWORD not in caplog.text


def test_expired_node_certificate_stops_the_agent(tls: TlsMaterial, tmp_path: Path) -> None:
    with loopback_server(tls_handler(tls.expired_cert, tls.expired_key)) as port:
        config = _agent_config(
            tmp_path,
            cassandra=CassandraConfig(port=port, tls=CassandraTlsConfig(enabled=True, ca_file=tls.ca)),
        )
        with pytest.raises(AccessError, match=r"certificate of 127\.0\.0\.1:\d+ has expired"):
            asyncio.run(NodeAgent(config).run())


def test_nothing_is_read_or_released_when_kafka_refuses(
    tls: TlsMaterial, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schema loads, Kafka refuses: the segment in cdc_raw stays, unread, and its offset unchanged."""
    cdc_raw = tmp_path / "cdc_raw"
    cdc_raw.mkdir()
    segment = cdc_raw / SEGMENT
    segment.write_bytes(b"\0" * 4096)
    offsets = OffsetStore(tmp_path / "state" / "offsets.json")
    offsets.advance(1700000000001, 100)
    offsets.flush()
    before = offsets.path.read_bytes()
    monkeypatch.setattr(SchemaSource, "reload", lambda self: True)
    read: list[NodeAgent] = []

    async def cycle(self: NodeAgent) -> None:
        read.append(self)

    monkeypatch.setattr(NodeAgent, "cycle", cycle)

    with loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port:
        config = _agent_config(
            tmp_path, cassandra=CassandraConfig(), kafka=_sasl_ssl(f"127.0.0.1:{port}", tls.ca)
        )
        with pytest.raises(AccessError, match=r"kafka\.security\.ca_file"):
            asyncio.run(NodeAgent(config).run())
    assert not read, "a cycle ran although nothing could be published"
    assert segment.exists() and segment.stat().st_size == 4096
    assert offsets.path.read_bytes() == before


# --- `cdc agent`: the message and the exit status -------------------------------------------------------


def test_cdc_agent_prints_the_reason_and_exits_non_zero(tls: TlsMaterial, tmp_path: Path) -> None:
    password_file = tmp_path / "cassandra.password"
    password_file.write_text(PASSWORD + "\n")
    with loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port:
        config = {
            "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"},
            "cassandra": {
                "port": port,
                "username": "cdc",
                "password": f"file:{password_file}",
                "tls": {"enabled": True, "ca_file": str(tls.ca)},
            },
            "agent": {
                "cdc_raw_directory": str(tmp_path / "cdc_raw"),
                "state_directory": str(tmp_path / "state"),
                "metrics_port": 0,
            },
        }
        path = tmp_path / "agent.yaml"
        path.write_text(yaml.safe_dump(config))
        done = subprocess.run(
            [sys.executable, "-m", "cdc", "agent", "--config", str(path), "--log-format", "text"],
            capture_output=True,
            text=True,
            timeout=60,
            env=environment_without_cdc_overrides(),
            check=False,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"cdc: error: Cassandra refuses the agent: the TLS certificate of 127\.0\.0\.1:\d+ is not trusted: .*"
        r"set cassandra\.tls\.ca_file \(.*ca\.pem\) to the CA that signed the server's certificate",
        last,
    ), output
    assert PASSWORD not in output


def test_no_log_line_of_a_refused_start_holds_the_password(
    tls: TlsMaterial, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port, pytest.raises(AccessError):
        _start(_sasl_ssl(f"127.0.0.1:{port}", tls.stranger_cert))
    assert caplog.records, "the refusals were not logged"
    assert PASSWORD not in caplog.text
