"""`cdc worker` on a secured Kafka (SASL_SSL, SCRAM-SHA-512, the local CA), as an operator runs it.

The module starts its own secured broker (`cdc infra up --secure`, Kafka only), under its own home and on
its own ports, so it never meets the session's plaintext services; the ports sit below 32768, outside the
kernel's ephemeral range. The broker is stopped when the module ends.

The worker reads its password from a file (`file:` in the config), merges raw events into change events,
and is stopped; a worker given a wrong password then ends at once with the key to fix and no secret in
its message; restarted with the right one, it emits every change of the events that came meanwhile, and
the clean topic holds each change exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.config import KafkaConfig, load_config
from runtime.kafka_clients import make_producer, start_kafka_client
from runtime.kafka_topics import TopicSpec, ensure_topics
from schemas.schema_event import schema_event
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, worker_config
from tests.unit.app.support import raw_record, replica_copy

PORTS = {
    "kafka_port": 26392,
    "kafka_controller_port": 26393,
    "cql_port": 26342,
    "storage_port": 26300,
    "jmx_base_port": 26499,
}
RAW_PARTITIONS = 2
TOKEN = "rest-token-" + uuid.uuid4().hex
WRONG_PASSWORD = "not-the-password-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureMaterial]:
    home = tmp_path_factory.mktemp("cdc-secure-worker-home")
    stack = LocalStack(InfraSettings.from_env(home=home, secure=True, **PORTS))
    try:
        stack.up(cassandra=False, report=lambda _msg: None)
        yield stack.secure_material()
    finally:
        stack.down(report=lambda _msg: None)


def security(material: SecureMaterial, password_file: Path) -> dict[str, Any]:
    return {
        "protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": material.kafka_user,
        "password": f"file:{password_file}",
        "ca_file": str(material.ca_file),
    }


def kafka_of(config: dict[str, Any], path: Path) -> KafkaConfig:
    """The kafka section as the worker reads it (the password resolved from its file)."""
    path.write_text(yaml.safe_dump(config))
    return load_config(path, environ={}).kafka


async def publish(kafka: KafkaConfig, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = make_producer(kafka, acks="all")
    await start_kafka_client(producer, kafka)
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def changes(kafka: KafkaConfig, topic: str) -> list[tuple[int, str, dict[str, Any] | None]]:
    """(id, op, after) of the committed change events (no tombstones here), per key in offset order."""
    records = asyncio.run(read_topic_records(kafka, topic, stable_wait_s=30))
    out = []
    for _, _, _, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        assert value is not None, "no deletes were written: no tombstone expected"
        event = json.loads(value)
        out.append((json.loads(key)["id"], event["op"], event["after"]))
    return sorted(out, key=lambda c: c[0])


def raw_events(schema: TableSchema, writes: list[Write], copies: int = 2) -> list[tuple[bytes | None, bytes]]:
    """The raw records of ``writes`` as ``copies`` replicas publish them (one change per write)."""
    builder = EventBuilder(schema)
    out = []
    for write in writes:
        event = builder.event(write)
        for n in range(copies):
            record = raw_record(0, 0, schema, event if n == 0 else replica_copy(event, f"n{n + 1}"))
            assert record.value is not None
            out.append((record.key, record.value))
    return out


def test_worker_on_sasl_ssl_kafka_survives_a_wrong_password_with_every_change_once(
    material: SecureMaterial, tmp_path: Path
) -> None:
    keyspace = unique_name("secure")
    ddl = f"CREATE TABLE {keyspace}.users (id int PRIMARY KEY, v int, w text) WITH ID = {uuid.uuid4()}"
    schema = load_schema_from_cql(ddl).by_name(keyspace, "users")
    assert schema is not None
    token_file, wrong_file = tmp_path / "web-token", tmp_path / "wrong-password"
    token_file.write_text(TOKEN + "\n")
    wrong_file.write_text(WRONG_PASSWORD + "\n")
    password = material.kafka_password()
    raw_topic, schema_topic, prefix = unique_name("raw"), unique_name("schemas"), unique_name("clean")
    app_id = unique_name("app")

    def config(password_file: Path) -> dict[str, Any]:
        return worker_config(
            bootstrap=material.kafka_bootstrap,
            raw_topic=raw_topic,
            schema_topic=schema_topic,
            raw_partitions=RAW_PARTITIONS,
            data_directory=tmp_path / "data",
            app_id=app_id,
            worker_id="w1",
            topic_prefix=prefix,
            worker={"web_token": f"file:{token_file}", "startup_timeout_s": 60},
            kafka={"security": security(material, password_file)},
        )

    good = config(material.kafka_password_file)
    kafka = kafka_of(good, tmp_path / "reader.yaml")
    clean_topic = f"{prefix}.{keyspace}.users"
    event = schema_event("c", keyspace, "users", str(schema.table_id), cdc=True, dropped=False, cql=ddl)

    async def setup() -> None:
        await ensure_topics(
            kafka,
            [
                TopicSpec(raw_topic, RAW_PARTITIONS, 1),
                TopicSpec(schema_topic, 1, 1, {"cleanup.policy": "compact"}),
            ],
        )
        await publish(kafka, schema_topic, [(event.key, event.encode())])
        inserts = [Write(k, (), {"v": k, "w": f"row {k}"}, ts=10, insert=True) for k in range(20)]
        await publish(kafka, raw_topic, raw_events(schema, inserts))

    asyncio.run(setup())
    worker = WorkerProcess(tmp_path / "w1", good, "worker")
    wrong = WorkerProcess(tmp_path / "w1", config(wrong_file), "wrong-password")
    try:
        # 1. the worker logs in with the password from its file and merges the first events
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: len(changes(kafka, clean_topic)) >= 20, 60, lambda: worker.log_tail())
        assert worker.rest("/stats")[0] == 401, "the REST token (a secret now) is not asked for"
        status, text = worker.rest_text("/stats", TOKEN)
        assert status == 200 and password not in text and TOKEN not in text
        status, text = worker.rest_text("/metrics", TOKEN)
        assert status == 200 and password not in text and TOKEN not in text
        assert worker.stop() == 0, worker.log_tail()

        # 2. more events arrive while no worker runs: updates, new rows, a late replica copy
        updates = [Write(k, (), {"v": 100 + k}, ts=20) for k in range(10)]
        inserts = [Write(k, (), {"v": k, "w": f"row {k}"}, ts=30, insert=True) for k in range(20, 30)]
        asyncio.run(publish(kafka, raw_topic, raw_events(schema, updates + inserts)))

        # 3. a wrong password: the worker ends at once, naming the key, showing no secret
        started = time.monotonic()
        wrong.start()
        assert wrong.process is not None
        code = wrong.process.wait(60)
        took = time.monotonic() - started
        log = wrong.log_text()
        assert code != 0, log
        errors = [line for line in log.splitlines() if line.startswith("cdc: error:")]
        assert errors, f"no `cdc: error:` line:\n{log[-3000:]}"
        assert "kafka.security.password" in errors[-1] and "wrong password or unknown user" in errors[-1], (
            errors
        )
        assert str(wrong_file) in errors[-1], "the message does not say where the password came from"
        assert took < 40, f"an authentication failure was retried for {took:.0f} s"
        assert len(changes(kafka, clean_topic)) == 20, "the refused worker emitted something"

        # 4. the right password again: every change exactly once, none lost, none repeated
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: len(changes(kafka, clean_topic)) >= 40, 60, lambda: worker.log_tail())
        time.sleep(1.0)  # a repeated batch would show up now
        history = changes(kafka, clean_topic)
        assert Counter((key, op) for key, op, _ in history) == Counter(
            [(k, "c") for k in range(30)] + [(k, "u") for k in range(10)]
        ), history
        per_key = {key: [after for k, _, after in history if k == key] for key in range(30)}
        assert all(per_key[k][-1] == {"id": k, "v": 100 + k, "w": f"row {k}"} for k in range(10)), per_key
        assert worker.stop() == 0, worker.log_tail()
    finally:
        worker.ensure_stopped()
        wrong.ensure_stopped()

    # no secret in any log line or message of any worker
    for path in (tmp_path / "w1").glob("*.log"):
        text = path.read_text(errors="replace")
        for secret in (password, WRONG_PASSWORD, TOKEN):
            assert secret not in text, f"a secret is in {path}"


def _exits_with_error(worker: WorkerProcess, timeout_s: float = 60) -> tuple[str, float]:
    """Start ``worker``, which must stop by itself with one `cdc: error:` line: that line, and how long
    it took."""
    started = time.monotonic()
    worker.start()
    assert worker.process is not None
    code = worker.process.wait(timeout_s)
    took = time.monotonic() - started
    log = worker.log_text()
    errors = [line for line in log.splitlines() if line.startswith("cdc: error:")]
    assert code != 0 and errors, f"exit {code}, no `cdc: error:` line:\n{log[-3000:]}"
    return errors[-1], took


def test_tls_without_sasl_on_a_sasl_ssl_listener_and_a_wrong_key_password_stop_the_worker_at_once(
    material: SecureMaterial, tmp_path: Path
) -> None:
    """`protocol: SSL` reaches the SASL_SSL listener's TLS, and the broker then closes the connection at
    the first request: the worker names kafka.security.protocol within seconds, not Kafka's address after
    minutes. A client key password that does not decrypt the key is named with where it came from."""

    def worker(name: str, security_section: dict[str, Any]) -> WorkerProcess:
        return WorkerProcess(
            tmp_path / name,
            worker_config(
                bootstrap=material.kafka_bootstrap,
                raw_topic=unique_name("raw"),
                schema_topic=unique_name("schemas"),
                raw_partitions=RAW_PARTITIONS,
                data_directory=tmp_path / name / "data",
                app_id=unique_name("app"),
                worker_id=name,
                topic_prefix=unique_name("clean"),
                worker={"startup_timeout_s": 120},
                kafka={"security": security_section},
            ),
            name,
        )

    tls_only = worker("tls-only", {"protocol": "SSL", "ca_file": str(material.ca_file)})
    try:
        error, took = _exits_with_error(tls_only)
    finally:
        tls_only.ensure_stopped()
    assert "Kafka refused the worker:" in error and "kafka.security.protocol" in error, error
    assert "SASL_SSL" in error, error
    assert took < 30, f"took {took:.0f} s"

    wrong = tmp_path / "wrong-key-password"
    wrong.write_text(WRONG_PASSWORD + "\n")
    keyed = worker(
        "wrong-key",
        {
            **security(material, material.kafka_password_file),
            "cert_file": str(material.client_cert),
            "key_file": str(material.client_key),
            "key_password": f"file:{wrong}",
        },
    )
    try:
        error, took = _exits_with_error(keyed)
    finally:
        keyed.ensure_stopped()
    assert error.startswith("cdc: error: Kafka refused the worker:"), error
    assert "kafka.security.key_password" in error and f"file {wrong}" in error, error
    assert WRONG_PASSWORD not in error and took < 30, (error, took)
