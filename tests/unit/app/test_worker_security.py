"""The worker on a secured Kafka, without a broker: every client it makes carries `kafka.security`, the REST
token is a secret, and a Kafka that refuses the worker ends its start at once with the setting to fix.

The refusals come from real TLS handshakes with loopback servers (tests/unit/tls_material.py); a wrong
password needs a real SCRAM broker and is in tests/integration/test_worker_security.py.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faust.auth import SASLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

import runtime.kafka_topics
import schemas.schema_topic
from app import group_offsets, owner_directory, partition_states, raw_consumer, transactional_sink
from app.errors import WorkerError
from app.rest_api import authorized
from app.worker import Worker, run_worker
from runtime.config import (
    CdcConfig,
    KafkaConfig,
    KafkaSecurityConfig,
    WorkerConfig,
    dump_config,
    load_config,
)
from runtime.secrets import Secret
from runtime.service_process import free_port
from tests.unit.tls_material import TlsMaterial, loopback_server, make_tls_material, tls_handler

PASSWORD = "s3cr3t-Pa55word"
TOKEN = "t0ken-Value-42"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def secured(bootstrap: str, tls: TlsMaterial, **security: Any) -> KafkaConfig:
    values: dict[str, Any] = {
        "protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "cdc",
        "password": Secret(PASSWORD),
        "ca_file": tls.ca,
        **security,
    }
    return KafkaConfig(
        bootstrap_servers=bootstrap, request_timeout_ms=3000, security=KafkaSecurityConfig(**values)
    )


def worker_config(kafka: KafkaConfig, data: Path, **worker: Any) -> CdcConfig:
    settings = WorkerConfig(data_directory=data, app_id="app", worker_id="w1", web_port=free_port(), **worker)
    return CdcConfig(kafka=kafka, worker=settings)


# --- every client of the worker -------------------------------------------------------------------------


class _NotStarted(Exception):
    pass


def test_every_kafka_client_of_the_worker_carries_the_security_config(
    tls: TlsMaterial, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each client the worker makes, as its owner makes it, stopped where it would connect."""
    kafka = secured("127.0.0.1:1", tls)
    made: list[tuple[str, Any]] = []

    def recorder(where: str) -> Callable[[Any, KafkaConfig], Any]:
        async def start(client: Any, config: KafkaConfig) -> None:
            assert config is kafka, f"{where} started a client with another config"
            made.append((where, client))
            if not isinstance(client, AIOKafkaProducer):
                raise _NotStarted  # a consumer or admin client would connect at once

        return start

    for module in (transactional_sink, owner_directory, raw_consumer, partition_states, group_offsets,
                   runtime.kafka_topics, schemas.schema_topic):  # fmt: skip
        monkeypatch.setattr(module, "start_kafka_client", recorder(module.__name__))

    async def scenario() -> None:
        worker = Worker(worker_config(kafka, tmp_path))
        await worker.producers.register({0})
        for start in (
            worker.owners.start,
            lambda: worker.group_offsets.read({0}),
            worker.consumer.start,
            worker.schemas.start,
            lambda: worker.partitions._catch_up({}),
            lambda: worker.loop._ensure_clean_topics({"cdc.ks.t"}),
            worker._prepare,  # its first step: the worker's topics
        ):
            with pytest.raises(_NotStarted):
                await start()
        for _, client in made:  # close what the builders opened (nothing is connected)
            inner = client.client if isinstance(client, AIOKafkaProducer) else client._client
            await inner.close()
        worker.partitions.close()

    asyncio.run(scenario())
    kinds = {(where.rsplit(".", 1)[-1], type(client).__name__) for where, client in made}
    assert kinds == {
        ("transactional_sink", "AIOKafkaProducer"),
        ("owner_directory", "AIOKafkaProducer"),
        ("owner_directory", "AIOKafkaConsumer"),
        ("raw_consumer", "AIOKafkaConsumer"),
        ("schema_topic", "AIOKafkaConsumer"),
        ("partition_states", "AIOKafkaConsumer"),
        ("group_offsets", "AIOKafkaAdminClient"),
        ("kafka_topics", "AIOKafkaAdminClient"),
    }
    for where, client in made:
        inner = client.client if isinstance(client, AIOKafkaProducer) else client._client
        assert inner._security_protocol == "SASL_SSL", where
        assert (inner._sasl_mechanism, inner._sasl_plain_username) == ("SCRAM-SHA-512", "cdc"), where
        assert inner._sasl_plain_password == PASSWORD, where
        assert isinstance(inner._ssl_context, ssl.SSLContext), where
        assert inner._ssl_context.get_ca_certs(), f"{where}: the CA of kafka.security.ca_file is not trusted"
    # the call sites' own settings are kept
    sink = next(c for w, c in made if w.endswith("transactional_sink"))
    assert sink._txn_manager.transactional_id == "app-0" and sink.client._request_timeout_ms == 3000
    consumers = {w.rsplit(".", 1)[-1]: c for w, c in made if isinstance(c, AIOKafkaConsumer)}
    assert consumers["raw_consumer"]._group_id == "app" and not consumers["raw_consumer"]._enable_auto_commit
    assert consumers["partition_states"]._isolation_level == "read_committed"


def test_faust_gets_the_broker_credentials(tls: TlsMaterial, tmp_path: Path) -> None:
    """Faust's own consumer and producer are off; were they on, they would log in as the others do."""
    kafka = secured("a:9093,b:9093", tls)

    async def scenario() -> None:
        worker = Worker(worker_config(kafka, tmp_path))
        conf = worker.app.conf
        assert [str(url) for url in conf.broker] == ["kafka://a:9093", "kafka://b:9093"]
        assert isinstance(conf.broker_credentials, SASLCredentials)
        auth = credentials_to_aiokafka_auth(conf.broker_credentials)
        assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == "SCRAM-SHA-512"
        assert auth["sasl_plain_password"] == PASSWORD and isinstance(auth["ssl_context"], ssl.SSLContext)
        assert PASSWORD not in repr(conf.broker_credentials)
        worker.partitions.close()

    asyncio.run(scenario())


# --- the REST token -------------------------------------------------------------------------------------


def test_web_token_is_a_secret_from_yaml_environment_or_file(tmp_path: Path) -> None:
    path = tmp_path / "cdc.yaml"
    path.write_text(f"worker:\n  data_directory: {tmp_path}\n  web_token: '{TOKEN}'\n")
    config = load_config(path, environ={})
    assert config.worker is not None and isinstance(config.worker.web_token, Secret)
    assert config.worker.web_token.reveal() == TOKEN
    for text in (repr(config), str(config), repr(dump_config(config))):
        assert TOKEN not in text and "***" in text
    overridden = load_config(path, environ={"CDC__WORKER__WEB_TOKEN": "0123"})  # text, not YAML's 123
    assert overridden.worker is not None and overridden.worker.web_token == Secret("0123")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    from_file = load_config(path, environ={"CDC__WORKER__WEB_TOKEN": f"file:{token_file}"})
    assert from_file.worker is not None and from_file.worker.web_token == Secret(TOKEN)
    unset = load_config(None, environ={"CDC__WORKER__DATA_DIRECTORY": str(tmp_path)}).worker
    assert unset is not None and unset.web_token is None


def test_rest_requests_need_the_bearer_token() -> None:
    token = Secret(TOKEN)
    assert authorized(token, f"Bearer {TOKEN}")
    assert not authorized(token, "")
    assert not authorized(token, f"Bearer {TOKEN}x")
    assert not authorized(token, TOKEN)
    assert not authorized(token, "Bearer ***")
    assert authorized(None, "") and authorized(None, "Bearer anything")


# --- a Kafka that refuses the worker --------------------------------------------------------------------


def prepare_fails(config: CdcConfig) -> tuple[str, float]:
    """The WorkerError message of a worker's start, and how long the start took."""

    async def scenario() -> None:
        worker = Worker(config)
        try:
            await worker.prepare()
        finally:
            await worker.shutdown()

    started = time.monotonic()
    with pytest.raises(WorkerError) as failed:
        asyncio.run(scenario())
    return str(failed.value), time.monotonic() - started


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("stranger", r"Kafka refused the worker: the TLS certificate of 127\.0\.0\.1:\d+ is not trusted.* "
                     r"set kafka\.security\.ca_file"),
        ("expired", r"Kafka refused the worker: the TLS certificate of 127\.0\.0\.1:\d+ has expired"),
    ],
)  # fmt: skip
def test_an_untrusted_or_expired_broker_certificate_ends_the_start_at_once(
    tls: TlsMaterial, tmp_path: Path, server: str, message: str
) -> None:
    with loopback_server(tls_handler(getattr(tls, f"{server}_cert"), getattr(tls, f"{server}_key"))) as port:
        text, took = prepare_fails(worker_config(secured(f"127.0.0.1:{port}", tls), tmp_path))
    assert re.search(message, text), text
    assert PASSWORD not in text
    assert took < 30, f"a certificate error was retried for {took:.0f} s (startup_timeout_s is 120)"


def test_a_plaintext_worker_on_a_tls_port_ends_the_start_at_once(tls: TlsMaterial, tmp_path: Path) -> None:
    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port:
        text, took = prepare_fails(
            worker_config(KafkaConfig(bootstrap_servers=f"127.0.0.1:{port}"), tmp_path)
        )
    assert re.search(r"closed the connection at the first request.*set kafka\.security\.protocol", text), text
    assert took < 30


def test_a_tls_worker_on_a_plaintext_port_ends_the_start_at_once(tls: TlsMaterial, tmp_path: Path) -> None:
    with loopback_server(lambda conn: conn.recv(4) and None) as port:
        text, took = prepare_fails(worker_config(secured(f"127.0.0.1:{port}", tls), tmp_path))
    assert re.search(r"did not answer the TLS handshake.*kafka\.security\.protocol", text), text
    assert took < 30


def test_a_kafka_that_does_not_answer_is_waited_for_until_startup_timeout(
    tls: TlsMaterial, tmp_path: Path
) -> None:
    """Nothing listens: that may be a broker starting, so it is retried, for startup_timeout_s."""
    with socket.create_server(("127.0.0.1", 0)) as reserved:
        port = reserved.getsockname()[1]
    config = worker_config(secured(f"127.0.0.1:{port}", tls), tmp_path, startup_timeout_s=3)
    text, took = prepare_fails(config)
    assert "kafka.bootstrap_servers" in text and "startup_timeout_s" in text, text
    assert took >= 3


def test_a_missing_key_file_ends_the_worker_naming_the_key(tls: TlsMaterial, tmp_path: Path) -> None:
    kafka = secured("127.0.0.1:1", tls, cert_file=tls.client_cert, key_file=tmp_path / "gone.pem")
    with pytest.raises(WorkerError, match=r"kafka\.security\.key_file: file .*gone\.pem does not exist"):
        run_worker(worker_config(kafka, tmp_path))
    unreadable = replace(kafka, security=replace(kafka.security, key_file=tmp_path))
    with pytest.raises(WorkerError, match=r"kafka\.security\.key_file"):
        run_worker(worker_config(unreadable, tmp_path))
