"""Secure mode's files without any service: certificates, password files, configs, status lines."""

from __future__ import annotations

import ssl
import stat
import subprocess
from pathlib import Path

import pytest

from infra import kafka_sasl
from infra.errors import InfraError, SecurityMaterialError
from infra.kafka import broker_spec, render_properties
from infra.secret_files import ensure_password, read_secret
from infra.secure import (
    SecureLayout,
    ensure_cassandra_keystore,
    ensure_kafka_keystore,
    ensure_shared_material,
)
from infra.settings import InfraSettings
from infra.stack import LocalStack, ServiceStatus, format_status


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> InfraSettings:
    settings = InfraSettings.from_env(home=tmp_path_factory.mktemp("secure-home"), secure=True)
    ensure_shared_material(settings)
    ensure_kafka_keystore(settings)
    ensure_cassandra_keystore(settings, "127.0.0.2")
    return settings


def _openssl_text(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_files_are_private_and_certificates_chain_to_the_ca(settings: InfraSettings) -> None:
    layout = SecureLayout.of(settings)
    for folder in (layout.tls, layout.secrets):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for secret in (layout.ca.key, layout.client_key, layout.kafka_keystore, layout.keystore_password):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    kafka_pem = layout.kafka_keystore.with_suffix(".pem")
    node_pem = layout.cassandra_keystore("127.0.0.2").with_suffix(".pem")
    verified = _openssl_text("verify", "-CAfile", str(layout.ca.cert), str(kafka_pem), str(node_pem))
    assert verified.count(": OK") == 2
    kafka_text = _openssl_text("x509", "-in", str(kafka_pem), "-noout", "-text")
    assert "IP Address:127.0.0.1, IP Address:127.0.0.2, IP Address:127.0.0.3, DNS:localhost" in kafka_text
    assert "IP Address:127.0.0.2" in _openssl_text("x509", "-in", str(node_pem), "-noout", "-text")


def test_keystore_opens_with_the_keystore_password_only(settings: InfraSettings) -> None:
    layout = SecureLayout.of(settings)
    listing = _openssl_text(
        "pkcs12", "-in", str(layout.kafka_keystore), "-passin", f"file:{layout.keystore_password}", "-nokeys"
    )
    assert "BEGIN CERTIFICATE" in listing
    wrong = subprocess.run(
        ["openssl", "pkcs12", "-in", str(layout.kafka_keystore), "-passin", "pass:wrong", "-nokeys"],
        capture_output=True,
        check=False,
    )
    assert wrong.returncode != 0


def test_client_key_is_encrypted_with_the_key_password(settings: InfraSettings) -> None:
    material = ensure_shared_material(settings)
    assert material.client_key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    material.ssl_context(client_certificate=True)  # opens with key.password
    with pytest.raises(ssl.SSLError):
        ssl.create_default_context().load_cert_chain(
            str(material.client_cert), str(material.client_key), password="wrong"
        )


def test_second_ensure_reuses_every_file(settings: InfraSettings) -> None:
    layout = SecureLayout.of(settings)
    files = [p for p in (*layout.tls.iterdir(), *layout.secrets.iterdir()) if p.is_file()]
    before = {p: p.read_bytes() for p in files}
    ensure_shared_material(settings)
    ensure_kafka_keystore(settings)
    ensure_cassandra_keystore(settings, "127.0.0.2")
    assert {p: p.read_bytes() for p in files} == before
    assert not [p for p in layout.tls.iterdir() if p.name.startswith(".work-")]


def test_a_secret_file_readable_by_others_is_refused_without_showing_it(tmp_path: Path) -> None:
    path = ensure_password(tmp_path / "secure" / "x.password")
    secret = read_secret(path)
    path.chmod(0o644)
    with pytest.raises(SecurityMaterialError, match=r"x\.password is accessible to other users") as caught:
        read_secret(path)
    assert secret not in str(caught.value)


def test_secure_broker_properties_have_no_plaintext_client_listener(settings: InfraSettings) -> None:
    spec = broker_spec(settings)
    layout = SecureLayout.of(settings)
    security = kafka_sasl.listener_properties("127.0.0.1", spec.port, spec.controller_port, layout)
    props = dict(line.split("=", 1) for line in render_properties(spec, security).splitlines())
    assert (
        props["listeners"]
        == f"SASL_SSL://127.0.0.1:{spec.port},CONTROLLER://127.0.0.1:{spec.controller_port}"
    )
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"
    assert props["ssl.truststore.location"] == str(layout.ca.cert)
    assert "PLAINTEXT://" not in props["advertised.listeners"]


def test_format_arguments_travel_in_a_private_file_that_is_removed(settings: InfraSettings) -> None:
    layout = SecureLayout.of(settings)
    argv = ["-cp", "/libs dir/*", *kafka_sasl.scram_format_arguments(layout)]
    assert argv.count("--add-scram") == 2
    with kafka_sasl.java_argument_file(layout, argv) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().splitlines()[1] == '"/libs dir/*"'
    assert not path.exists()
    password = read_secret(layout.kafka_password)
    assert (
        kafka_sasl.redact(f"bad spec name=cdc,password={password}", layout)
        == "bad spec name=cdc,password=***"
    )


def test_plaintext_formatted_kafka_data_is_refused_in_secure_mode(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("version=1\n")
    with pytest.raises(SecurityMaterialError, match="formatted in plaintext mode"):
        kafka_sasl.require_scram_storage(tmp_path, tmp_path / "data")
    (tmp_path / kafka_sasl.SCRAM_MARKER).write_text(kafka_sasl.scram_marker_text())
    kafka_sasl.require_scram_storage(tmp_path, tmp_path / "data")


def test_cdc_secure_environment_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CDC_SECURE", "1")
    assert InfraSettings.from_env(home=tmp_path).secure
    monkeypatch.setenv("CDC_SECURE", "0")
    assert not InfraSettings.from_env(home=tmp_path).secure
    monkeypatch.setenv("CDC_SECURE", "maybe")
    with pytest.raises(ValueError, match="CDC_SECURE"):
        InfraSettings.from_env(home=tmp_path)


def test_secure_material_needs_secure_mode(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match="CDC_SECURE=1"):
        LocalStack(InfraSettings.from_env(home=tmp_path, secure=False)).secure_material()


def test_plaintext_status_is_unchanged_but_for_the_security_column() -> None:
    row = ServiceStatus("kafka", True, 1, "127.0.0.1:9092", "/d", "/l")
    text = format_status([row])
    assert "plaintext" in text and "secure mode" not in text
    secured = ServiceStatus(
        "kafka", True, 1, "127.0.0.1:9092", "/d", "/l", security="SASL_SSL",
        credentials={"ca_file": "/h/tls/ca.pem", "client_cert": "/c", "client_key": "/k", "key_password_file": "/kp",
                     "sasl_mechanisms": "SCRAM-SHA-512", "user": "cdc", "password_file": "/h/secure/kafka.password"},
    )  # fmt: skip
    lines = format_status([secured]).splitlines()
    assert "secure mode: clients trust the CA /h/tls/ca.pem" in lines
    assert "  kafka: SASL_SSL SCRAM-SHA-512, user cdc, password in /h/secure/kafka.password" in lines


def test_cli_secure_flag_turns_secure_mode_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cdc.cli import _infra_settings, build_parser

    monkeypatch.setenv("CDC_HOME", str(tmp_path))
    monkeypatch.delenv("CDC_SECURE", raising=False)
    parser = build_parser()
    assert _infra_settings(parser.parse_args(["infra", "up", "--secure"])).secure
    assert not _infra_settings(parser.parse_args(["infra", "up"])).secure
    monkeypatch.setenv("CDC_SECURE", "1")  # the flag's absence does not switch the environment's choice off
    assert _infra_settings(parser.parse_args(["infra", "up"])).secure
