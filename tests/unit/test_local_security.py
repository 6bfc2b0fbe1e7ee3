"""cdc/local_security.py: secure mode's files as client config, typed and as YAML, without any service."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc.local_security import (
    cassandra_config,
    cassandra_yaml,
    kafka_config,
    kafka_security,
    kafka_yaml,
    local_material,
    with_security,
)
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.cassandra_session import SecretAuthProvider, cassandra_cluster
from runtime.config import CassandraConfig, KafkaConfig, dump_config, load_config
from runtime.kafka_clients import kafka_client_options
from runtime.secrets import Secret


def _settings(home: Path, *, secure: bool) -> InfraSettings:
    return InfraSettings(home=home, cache=home / "cache", secure=secure, kafka_port=28392, cql_port=28342)


@pytest.fixture(scope="module")
def secure_settings(tmp_path_factory: pytest.TempPathFactory) -> InfraSettings:
    return _settings(tmp_path_factory.mktemp("home"), secure=True)


@pytest.fixture(scope="module")
def material(secure_settings: InfraSettings) -> SecureMaterial:
    found = local_material(LocalStack(secure_settings))
    assert found is not None
    return found


@pytest.fixture(scope="module")
def passwords(material: SecureMaterial) -> list[str]:
    return [material.kafka_password(), material.cassandra_password(), material.key_password()]


def _child_config(tmp_path: Path) -> dict[str, Any]:
    """What cdc verify / cdc demo write for an agent, before security."""
    return {
        "cluster": "verify",
        "kafka": {"bootstrap_servers": "127.0.0.1:28392", "raw_topic": "verify.x.raw", "raw_partitions": 3},
        "cassandra": {"contact_points": ["127.0.0.2"], "port": 28342, "keyspaces": ["ks"]},
        "agent": {"cdc_raw_directory": str(tmp_path / "cdc_raw"), "state_directory": str(tmp_path / "state")},
    }


def test_plaintext_services_have_no_material(tmp_path: Path) -> None:
    assert local_material(LocalStack(_settings(tmp_path, secure=False))) is None
    assert not (tmp_path / "tls").exists() and not (tmp_path / "secure").exists()


def test_plaintext_config_is_left_exactly_as_it_is(tmp_path: Path) -> None:
    config = _child_config(tmp_path)
    copy = with_security(config, None)
    assert copy == config and copy is not config
    assert kafka_config(None, bootstrap_servers="h:1", raw_topic="r") == KafkaConfig(
        bootstrap_servers="h:1", raw_topic="r"
    )
    assert cassandra_config(None, contact_points=["h"], port=1) == CassandraConfig(
        contact_points=["h"], port=1
    )


def test_yaml_fragment_names_files_and_holds_no_secret(
    material: SecureMaterial, passwords: list[str], tmp_path: Path
) -> None:
    config = _child_config(tmp_path)
    secured = with_security(config, material)
    assert config == _child_config(tmp_path), "the input is not changed"
    assert secured["kafka"] == {**config["kafka"], "security": kafka_yaml(material)}
    assert secured["cassandra"] == {**config["cassandra"], **cassandra_yaml(material)}
    assert secured["kafka"]["security"]["password"] == f"file:{material.kafka_password_file}"
    assert secured["cassandra"]["password"] == f"file:{material.cassandra_password_file}"
    text = yaml.safe_dump(secured, sort_keys=False)
    assert not [p for p in passwords if p in text]
    assert "file:" in text and str(material.ca_file) in text


def test_worker_config_without_cassandra_section_gets_only_kafka_security(
    material: SecureMaterial, tmp_path: Path
) -> None:
    worker = {"kafka": {"bootstrap_servers": "127.0.0.1:28392"}, "worker": {"data_directory": str(tmp_path)}}
    secured = with_security(worker, material)
    assert set(secured) == {"kafka", "worker"}
    assert secured["kafka"]["security"]["protocol"] == "SASL_SSL"


def test_loaded_yaml_equals_the_typed_sections(
    material: SecureMaterial, passwords: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(with_security(_child_config(tmp_path), material)))
    loaded = load_config(path, environ={})
    assert loaded.kafka.security == kafka_security(material)
    expected = {"bootstrap_servers": "127.0.0.1:28392", "raw_topic": "verify.x.raw", "raw_partitions": 3}
    assert loaded.kafka == kafka_config(material, **expected)
    assert loaded.cassandra == cassandra_config(material, contact_points=["127.0.0.2"], keyspaces=["ks"])
    security = loaded.kafka.security
    assert (security.protocol, security.sasl_mechanism, security.username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "cdc",
    )
    assert security.password is not None and security.password.reveal() == material.kafka_password()
    assert security.password.source == f"file {material.kafka_password_file}"
    assert loaded.cassandra.password is not None
    assert loaded.cassandra.password.reveal() == material.cassandra_password()
    assert loaded.cassandra.tls.enabled and loaded.cassandra.tls.ca_file == material.ca_file
    dumped = repr(loaded) + yaml.safe_dump(dump_config(loaded))
    assert not [p for p in passwords if p in dumped]


def test_typed_sections_read_the_password_files(material: SecureMaterial) -> None:
    security = kafka_security(material)
    assert security.password == Secret(material.kafka_password())
    assert security.password.source == f"file {material.kafka_password_file}"
    assert security.ca_file == material.ca_file and security.check_hostname
    assert kafka_config(material).bootstrap_servers == material.kafka_bootstrap == "127.0.0.1:28392"
    cassandra = cassandra_config(material)
    assert (cassandra.contact_points, cassandra.port) == ([material.cassandra_host], material.cql_port)
    assert cassandra.username == "cdc" and cassandra.password == Secret(material.cassandra_password())
    assert cassandra.password.source == f"file {material.cassandra_password_file}"


def test_builders_apply_the_typed_sections(material: SecureMaterial) -> None:
    options = kafka_client_options(kafka_config(material))
    assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "cdc" and options["ssl_context"] is not None
    assert material.kafka_password() not in repr(options)
    cluster = cassandra_cluster(cassandra_config(material, contact_points=["127.0.0.2"], port=28342))
    try:
        assert isinstance(cluster.auth_provider, SecretAuthProvider)
        assert cluster.ssl_context is not None and cluster.ssl_context.check_hostname
        assert cluster.port == 28342 and cluster.contact_points == ["127.0.0.2"]
    finally:
        cluster.shutdown()


def test_a_missing_password_file_is_named_without_a_value(material: SecureMaterial, tmp_path: Path) -> None:
    missing = replace(material, kafka_password_file=tmp_path / "gone.password")
    with pytest.raises(ValueError, match=r"gone\.password does not exist"):
        kafka_security(missing)


# --- the configs cdc verify and cdc demo write for their children ----------------------------------------


def test_verify_writes_secured_configs_for_agents_and_workers(
    secure_settings: InfraSettings, material: SecureMaterial, tmp_path: Path
) -> None:
    from cdc.verify.runner import VerifyOptions, VerifyRun

    run = VerifyRun(secure_settings, VerifyOptions(workdir=tmp_path / "secure"), say=lambda _m: None)
    run.material = material
    agent, worker = run._agent(2), run._worker(1)
    text = agent.config_path.read_text() + worker.config_path.read_text()
    assert agent.config["kafka"]["security"] == worker.config["kafka"]["security"] == kafka_yaml(material)
    assert agent.config["cassandra"]["password"] == f"file:{material.cassandra_password_file}"
    assert agent.config["cassandra"]["contact_points"] == ["127.0.0.2"]
    assert "cassandra" not in worker.config
    assert material.kafka_password() not in text and material.cassandra_password() not in text
    assert load_config(agent.config_path, environ={}).cassandra.tls.enabled

    plain = VerifyRun(_settings(tmp_path, secure=False), VerifyOptions(workdir=tmp_path / "plain"))
    agent, worker = plain._agent(1), plain._worker(1)
    assert "security" not in agent.config["kafka"] and "security" not in worker.config["kafka"]
    assert set(agent.config["cassandra"]) == {"contact_points", "port", "keyspaces"}
    assert load_config(agent.config_path, environ={}).kafka.security.protocol == "PLAINTEXT"


def test_demo_clients_follow_the_services_mode(
    secure_settings: InfraSettings, material: SecureMaterial, tmp_path: Path
) -> None:
    from cdc.demo.processes import DemoRun

    stack = LocalStack(secure_settings)
    secure = DemoRun(secure_settings, stack, [stack.node(1)], material)
    assert secure.kafka.security == kafka_security(material)
    assert secure.kafka.bootstrap_servers == "127.0.0.1:28392"
    assert secure.cassandra == cassandra_config(material, contact_points=["127.0.0.1"], port=28342)

    plain_settings = _settings(tmp_path, secure=False)
    plain_stack = LocalStack(plain_settings)
    plain = DemoRun(plain_settings, plain_stack, [plain_stack.node(1)])
    assert plain.kafka == KafkaConfig(bootstrap_servers="127.0.0.1:28392")
    assert plain.cassandra == CassandraConfig(contact_points=["127.0.0.1"], port=28342)
