"""`cdc infra up --secure`: Kafka on SASL_SSL (SCRAM, PLAIN) and Cassandra with passwords and TLS.

The module starts its own broker and node, under its own home and on its own ports, so it never meets
the session's plaintext services or another checkout's. The ports sit below 32768: above it is the
kernel's ephemeral range, where a client socket of any process can take a port between two starts.
Every service is stopped when the module ends.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import stat
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from cassandra import AuthenticationFailed
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, NoHostAvailable

from infra.errors import InfraError
from infra.kafka_sasl import client_options
from infra.secure import KAFKA_SASL_MECHANISMS, SecureLayout, SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack, format_status

PORTS = {
    "kafka_port": 24392,
    "kafka_controller_port": 24393,
    "cql_port": 24342,
    "storage_port": 24300,
    "jmx_base_port": 24499,
}


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    home = tmp_path_factory.mktemp("cdc-secure-home")
    stack = LocalStack(InfraSettings.from_env(home=home, secure=True, **PORTS))
    try:
        stack.up(report=lambda _msg: None)
        yield stack
    finally:
        stack.down(report=lambda _msg: None)


@pytest.fixture(scope="module")
def material(secure_stack: LocalStack) -> SecureMaterial:
    return secure_stack.secure_material()


# --- Kafka -----------------------------------------------------------------------------------------


async def _round_trip(material: SecureMaterial, mechanism: str, context: ssl.SSLContext) -> list[bytes]:
    options = {**client_options(material, mechanism), "ssl_context": context}
    topic = f"secure-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=material.kafka_bootstrap, **options)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=material.kafka_bootstrap, **options)
    await producer.start()
    try:
        for n in range(3):
            await producer.send_and_wait(topic, f"event-{n}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=material.kafka_bootstrap, auto_offset_reset="earliest", **options
    )
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=15_000, max_records=10)
        return [record.value for records in batches.values() for record in records]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", KAFKA_SASL_MECHANISMS)
def test_kafka_client_creates_produces_and_consumes(material: SecureMaterial, mechanism: str) -> None:
    values = asyncio.run(_round_trip(material, mechanism, material.ssl_context()))
    assert values == [b"event-0", b"event-1", b"event-2"]


def test_kafka_accepts_the_client_certificate(material: SecureMaterial) -> None:
    """Mutual TLS: the broker asks for a certificate; the encrypted client key opens with key.password."""
    context = material.ssl_context(client_certificate=True)
    values = asyncio.run(_round_trip(material, "SCRAM-SHA-512", context))
    assert len(values) == 3


def test_kafka_refuses_a_plaintext_client(material: SecureMaterial) -> None:
    async def connect() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=material.kafka_bootstrap, request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(connect())


def test_kafka_refuses_a_wrong_password(material: SecureMaterial) -> None:
    async def connect() -> None:
        options = {**client_options(material), "sasl_plain_password": "not-the-password"}
        conn = await create_conn("127.0.0.1", PORTS["kafka_port"], request_timeout_ms=5000, **options)
        conn.close()

    with pytest.raises(SaslAuthenticationFailed):
        asyncio.run(connect())


def test_kafka_certificate_is_not_trusted_without_the_local_ca(material: SecureMaterial) -> None:
    async def connect() -> None:
        options = {**client_options(material), "ssl_context": ssl.create_default_context()}
        conn = await create_conn("127.0.0.1", PORTS["kafka_port"], request_timeout_ms=5000, **options)
        conn.close()

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(connect())


# --- Cassandra -------------------------------------------------------------------------------------


def _cluster(material: SecureMaterial, **options: object) -> Cluster:
    return Cluster(
        [material.cassandra_host],
        port=material.cql_port,
        protocol_version=5,
        connect_timeout=10,
        control_connection_timeout=10,
        **options,
    )


def _refusal(material: SecureMaterial, **options: object) -> Exception:
    cluster = _cluster(material, **options)
    try:
        with pytest.raises(NoHostAvailable) as caught:
            cluster.connect()
    finally:
        cluster.shutdown()
    (error,) = caught.value.errors.values()
    return error


@pytest.mark.parametrize("client_certificate", [False, True], ids=["server-tls", "mutual-tls"])
def test_cassandra_runs_cql_with_password_over_tls(
    material: SecureMaterial, client_certificate: bool
) -> None:
    cluster = _cluster(
        material,
        auth_provider=PlainTextAuthProvider(material.cassandra_user, material.cassandra_password()),
        ssl_context=material.ssl_context(client_certificate=client_certificate),
    )
    try:
        session = cluster.connect()
        session.execute(
            "CREATE KEYSPACE IF NOT EXISTS secure_check "
            "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute("CREATE TABLE IF NOT EXISTS secure_check.t (k int PRIMARY KEY, v text)")
        session.execute("INSERT INTO secure_check.t (k, v) VALUES (%s, %s)", (int(client_certificate), "ok"))
        row = session.execute("SELECT v FROM secure_check.t WHERE k = %s", (int(client_certificate),)).one()
        assert row.v == "ok"
    finally:
        cluster.shutdown()


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        (None, "requires authentication"),
        (("cdc", "not-the-password"), "are incorrect"),
        # the well-known default superuser was retired when role cdc was made
        (("cassandra", "cassandra"), "not permitted to log in"),
    ],
    ids=["no-credentials", "wrong-password", "default-superuser"],
)
def test_cassandra_refuses_missing_or_wrong_credentials(
    material: SecureMaterial, credentials: tuple[str, str] | None, message: str
) -> None:
    auth = {"auth_provider": PlainTextAuthProvider(*credentials)} if credentials else {}
    error = _refusal(material, ssl_context=material.ssl_context(), **auth)
    assert isinstance(error, AuthenticationFailed)
    assert message in str(error)


def test_cassandra_refuses_a_client_without_tls(material: SecureMaterial) -> None:
    auth = PlainTextAuthProvider(material.cassandra_user, material.cassandra_password())
    error = _refusal(material, auth_provider=auth)
    assert not isinstance(error, AuthenticationFailed)  # refused before any login: no TLS handshake


# --- files, secrets, status, idempotence -----------------------------------------------------------


def _secrets(layout: SecureLayout) -> dict[Path, str]:
    files = [
        layout.kafka_password,
        layout.kafka_broker_password,
        layout.cassandra_password,
        layout.key_password,
        layout.keystore_password,
    ]
    return {path: path.read_text().strip() for path in files}


def test_secrets_live_only_in_private_files(secure_stack: LocalStack, material: SecureMaterial) -> None:
    settings = secure_stack.settings
    layout = SecureLayout.of(settings)
    secrets = _secrets(layout)
    assert all(len(value) >= 32 for value in secrets.values())
    for folder in (layout.tls, layout.secrets, secure_stack.kafka.spec.root, secure_stack.node(1).spec.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    holders: dict[Path, set[Path]] = {}
    for folder, _dirs, names in os.walk(settings.home):
        for name in names:
            path = Path(folder) / name
            if not path.is_file():
                continue
            content = path.read_bytes()
            found = {secret for secret, value in secrets.items() if value.encode() in content}
            if found:
                holders[path] = found
    # No log line carries a secret: neither Kafka's nor Cassandra's.
    assert not [p for p in holders if p.is_relative_to(settings.logs)], holders
    # Besides its own file, a secret sits only in the configs that must hold it, each 0600.
    configs = {
        secure_stack.kafka.spec.root / "server.properties",
        secure_stack.node(1).spec.conf / "cassandra.yaml",
    }
    assert set(holders) - set(secrets) <= configs
    for path in holders:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(material.client_key.stat().st_mode) == 0o600
    assert material.client_key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")


def test_status_shows_secure_mode_and_where_the_files_are(
    secure_stack: LocalStack, material: SecureMaterial
) -> None:
    rows = {row.service: row for row in secure_stack.status()}
    assert rows["kafka"].running and rows["kafka"].security == "SASL_SSL"
    assert rows["kafka"].credentials["password_file"] == str(material.kafka_password_file)
    assert rows["cassandra-node1"].security == "TLS+password"
    assert rows["cassandra-node1"].credentials["ca_file"] == str(material.ca_file)
    text = format_status(list(rows.values()))
    for path in (material.ca_file, material.kafka_password_file, material.cassandra_password_file):
        assert str(path) in text
    assert not any(secret in text for secret in _secrets(SecureLayout.of(secure_stack.settings)).values())


def test_second_up_reuses_services_and_material(secure_stack: LocalStack, material: SecureMaterial) -> None:
    layout = SecureLayout.of(secure_stack.settings)
    before = {path: path.read_bytes() for path in (*_secrets(layout), layout.ca.cert, layout.kafka_keystore)}
    pids = (secure_stack.kafka.process.pid(), secure_stack.node(1).process.pid())
    timings = secure_stack.up(report=lambda _msg: None)
    assert timings == {"kafka": None, "cassandra-node1": None}
    assert (secure_stack.kafka.process.pid(), secure_stack.node(1).process.pid()) == pids
    assert {path: path.read_bytes() for path in before} == before
    assert secure_stack.secure_material() == material


def test_plaintext_up_is_refused_while_secure_services_run(secure_stack: LocalStack) -> None:
    plaintext = LocalStack(replace(secure_stack.settings, secure=False))
    with pytest.raises(InfraError, match=r"already run in secure mode .* `cdc infra down`"):
        plaintext.up(report=lambda _msg: None)
    with pytest.raises(InfraError, match="secure mode is off"):
        plaintext.secure_material()
