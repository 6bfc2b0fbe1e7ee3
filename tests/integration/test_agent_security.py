"""The node agent against a secured deployment: Kafka on SASL_SSL (SCRAM) and Cassandra with a password and
TLS (`cdc infra up --secure`).

The module starts its own broker and node, under its own home and on its own ports (below 32768, see
test_secure_infra.py), so it never meets the session's plaintext services; they are stopped at the end.

One agent runs through: writes of a CDC table arrive on the raw topic; a restart with a wrong Kafka
password, then one with a wrong Cassandra password, each end with `cdc: error:` naming the config key and
a non-zero exit, leaving the offsets as they were; after each fix a restart publishes everything written
meanwhile. At the end every write is on the topic exactly once (one event per digest), and no log line of
any start holds a password. `cdc segment dump --config` reads the node's schema the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cql import Login, connect
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.config import KafkaConfig, KafkaSecurityConfig
from runtime.secrets import Secret
from runtime.service_process import START_MARKER, environment_without_cdc_overrides
from tests.integration.agent_harness import (
    AgentProcess,
    RawTopic,
    Write,
    cell,
    execute_writes,
    expected_counter,
    int_bytes,
    multiset_difference,
    new_agent,
    row,
    running_agents,
    text_bytes,
    unique_name,
    update,
    wait_until,
)

PORTS = {
    "kafka_port": 25392,
    "kafka_controller_port": 25393,
    "cql_port": 25342,
    "storage_port": 25300,
    "jmx_base_port": 25499,
}
WRITES_PER_ROUND = 40


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    home = tmp_path_factory.mktemp("cdc-agent-secure-home")
    stack = LocalStack(InfraSettings.from_env(home=home, secure=True, **PORTS))
    try:
        stack.up(report=lambda _msg: None)
        yield stack
    finally:
        stack.down(report=lambda _msg: None)


@pytest.fixture(scope="module")
def material(secure_stack: LocalStack) -> SecureMaterial:
    return secure_stack.secure_material()


@pytest.fixture(scope="module")
def session(material: SecureMaterial) -> Iterator[Any]:
    login = Login(material.cassandra_user, material.cassandra_password(), material.ssl_context())
    cluster = connect(material.cassandra_host, material.cql_port, login=login)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def kafka_yaml(material: SecureMaterial, password_file: Path) -> dict[str, Any]:
    return {
        "request_timeout_ms": 10_000,
        "security": {
            "protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "username": material.kafka_user,
            "password": f"file:{password_file}",
            "ca_file": str(material.ca_file),
        },
    }


def cassandra_yaml(material: SecureMaterial, password_file: Path) -> dict[str, Any]:
    return {
        "port": material.cql_port,
        "username": material.cassandra_user,
        "password": f"file:{password_file}",
        "tls": {"enabled": True, "ca_file": str(material.ca_file)},
    }


def reader_config(material: SecureMaterial) -> KafkaConfig:
    """The test's own consumer of the raw topic, with the right credentials."""
    return KafkaConfig(
        bootstrap_servers=material.kafka_bootstrap,
        security=KafkaSecurityConfig(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username=material.kafka_user,
            password=Secret(material.kafka_password()),
            ca_file=material.ca_file,
        ),
    )


def kv_writes(keyspace: str, first_key: int, count: int) -> list[Write]:
    ts = int(time.time() * 1e6)
    writes = []
    for i in range(count):
        key, value, at = first_key + i, f"v-{first_key + i}", ts + i
        w = Write(f"INSERT INTO {keyspace}.kv (id, v) VALUES (?, ?) USING TIMESTAMP ?", (key, value, at))
        w.expected.append(
            update(
                keyspace,
                "kv",
                int_bytes(key),
                rows=[row(liveness=(at, 0), cells=[cell("v", text_bytes(value), at)])],
            )
        )
        writes.append(w)
    return writes


def rewrite_config(agent: AgentProcess, section: str, password: Path) -> None:
    """Point the agent's `section` password at another file (the agent reads its config at start)."""
    if section == "cassandra":
        agent.config["cassandra"]["password"] = f"file:{password}"
    else:
        agent.config["kafka"]["security"]["password"] = f"file:{password}"
    agent.config_path.write_text(yaml.safe_dump(agent.config, sort_keys=False))


def last_start_log(agent: AgentProcess) -> str:
    return agent.log_text().rsplit(START_MARKER, 1)[-1]


def fails_with(agent: AgentProcess, key: str) -> str:
    """Start the agent, which must exit non-zero with `cdc: error: ...` naming `key`; offsets untouched."""
    offsets_before = agent.offsets_path.read_bytes() if agent.offsets_path.exists() else None
    agent.start()
    assert agent.process is not None
    try:
        code = agent.process.wait(90)
    except Exception:
        agent.kill()
        raise AssertionError(
            f"{agent.name} did not exit with a wrong password:\n{agent.log_tail()}"
        ) from None
    log = last_start_log(agent)
    assert code == 2, f"exit code {code}:\n{log}"
    errors = [line for line in log.splitlines() if line.startswith("cdc: error: ")]
    assert len(errors) == 1 and key in errors[0], f"no `cdc: error:` naming {key}:\n{log}"
    after = agent.offsets_path.read_bytes() if agent.offsets_path.exists() else None
    assert after == offsets_before, "offsets moved although nothing could be published"
    return errors[0]


def test_agent_publishes_over_sasl_ssl_and_tls_and_stops_on_wrong_passwords(
    secure_stack: LocalStack, material: SecureMaterial, session: Any, tmp_path: Path
) -> None:
    keyspace = unique_name("agent_secure")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.kv (id int PRIMARY KEY, v text) WITH cdc = true")
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password-4711\n")
    secrets = [material.kafka_password(), material.cassandra_password(), "not-the-password-4711"]
    node = secure_stack.node(1)

    with running_agents() as agents:
        agent = new_agent(
            agents,
            tmp_path,
            cdc_raw=node.spec.cdc_raw,
            bootstrap=material.kafka_bootstrap,
            keyspaces=[keyspace],
            contact_points=[material.cassandra_host],
            raw_partitions=3,
            kafka=kafka_yaml(material, material.kafka_password_file),
            cassandra=cassandra_yaml(material, material.cassandra_password_file),
        )
        written: list[Write] = []
        with RawTopic(material.kafka_bootstrap, agent.raw_topic, kafka=reader_config(material)) as topic:

            def round_of_writes() -> None:
                batch = kv_writes(keyspace, len(written), WRITES_PER_ROUND)
                execute_writes(session, batch)
                written.extend(batch)

            def all_arrive() -> None:
                expected = expected_counter(written)
                topic.wait_for(expected, 90, what=f"{sum(expected.values())} writes on the raw topic")

            # 1. secured end to end
            agent.start()
            agent.wait_healthy(90)
            round_of_writes()
            all_arrive()
            assert agent.stop() == 0, agent.log_tail()

            # 2. a wrong Kafka password: an actionable error, nothing lost
            round_of_writes()
            rewrite_config(agent, "kafka", wrong)
            kafka_error = fails_with(agent, "kafka.security.password")
            assert "refused the credentials of user 'cdc'" in kafka_error, kafka_error
            rewrite_config(agent, "kafka", material.kafka_password_file)
            agent.start()
            agent.wait_healthy(90)
            all_arrive()
            assert agent.stop() == 0, agent.log_tail()

            # 3. a wrong Cassandra password: the same
            round_of_writes()
            rewrite_config(agent, "cassandra", wrong)
            cassandra_error = fails_with(agent, "cassandra.password")
            assert "refused the login of role 'cdc'" in cassandra_error, cassandra_error
            rewrite_config(agent, "cassandra", material.cassandra_password_file)
            agent.start()
            agent.wait_healthy(90)
            all_arrive()
            assert agent.stop() == 0, agent.log_tail()

            # 4. TLS without SASL on the SASL_SSL listener, and a client key password that does not open
            # the key: each ends within seconds, naming the key to change (and where the password came from)
            good_security = dict(agent.config["kafka"]["security"])
            agent.config["kafka"]["security"] = {"protocol": "SSL", "ca_file": str(material.ca_file)}
            agent.config_path.write_text(yaml.safe_dump(agent.config, sort_keys=False))
            started = time.monotonic()
            protocol_error = fails_with(agent, "kafka.security.protocol")
            assert "Kafka refuses the agent:" in protocol_error and "SASL_SSL" in protocol_error, (
                protocol_error
            )
            assert time.monotonic() - started < 30, "a listener that requires SASL was retried for long"
            agent.config["kafka"]["security"] = {
                **good_security,
                "cert_file": str(material.client_cert),
                "key_file": str(material.client_key),
                "key_password": f"file:{wrong}",
            }
            agent.config_path.write_text(yaml.safe_dump(agent.config, sort_keys=False))
            key_error = fails_with(agent, "kafka.security.key_password")
            assert key_error.startswith("cdc: error: Kafka refuses the agent:"), key_error
            assert f"file {wrong}" in key_error, key_error
            agent.config["kafka"]["security"] = good_security
            agent.config_path.write_text(yaml.safe_dump(agent.config, sort_keys=False))

            topic.drain(quiet_s=1.5)
            expected = expected_counter(written)
            assert sum(expected.values()) == 3 * WRITES_PER_ROUND
            difference = multiset_difference(expected, topic.signatures())
            assert not difference, f"the raw topic differs from the writes: {difference}"
            digests = Counter(r.digest for r in topic.records)
            repeated = {d.hex(): n for d, n in digests.items() if n > 1}
            assert not repeated and len(digests) == 3 * WRITES_PER_ROUND, (
                f"events not exactly once: {repeated}"
            )

        log = agent.log_text()
        assert log.count(START_MARKER) == 7
        leaked = [i for i, secret in enumerate(secrets) if secret in log]
        assert not leaked, f"secret(s) {leaked} appear in the agent's log"


def test_segment_dump_reads_the_schema_from_the_secured_node(
    secure_stack: LocalStack, material: SecureMaterial, session: Any, tmp_path: Path
) -> None:
    """`cdc segment dump --config` logs in with the config's password over TLS; a wrong one is named."""
    keyspace = unique_name("dump_secure")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {keyspace}.kv (id int PRIMARY KEY, v text) WITH cdc = true")
    execute_writes(session, kv_writes(keyspace, 0, 5))
    cdc_raw = secure_stack.node(1).spec.cdc_raw
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password-4711\n")

    def dump(password_file: Path) -> subprocess.CompletedProcess[str]:
        config = tmp_path / "dump.yaml"
        cassandra = {"contact_points": [material.cassandra_host], **cassandra_yaml(material, password_file)}
        config.write_text(yaml.safe_dump({"cassandra": cassandra}))
        return subprocess.run(
            [sys.executable, "-m", "cdc", "segment", "dump", str(cdc_raw), "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment_without_cdc_overrides(),
            check=False,
        )

    def dumped_keys() -> set[int]:
        done = dump(material.cassandra_password_file)
        assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: damage elsewhere in cdc_raw, reported
        objects = [json.loads(line) for line in done.stdout.splitlines()]
        return {o["partition_key"]["id"] for o in objects if o["keyspace"] == keyspace}

    wait_until(lambda: dumped_keys() == set(range(5)), 30, "the five writes in the dump")
    refused = dump(wrong)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "cdc: error: cannot read the schema from Cassandra" in refused.stderr
    assert "cassandra.password" in refused.stderr
    assert "not-the-password-4711" not in refused.stderr + refused.stdout
