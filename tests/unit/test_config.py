"""The shared YAML config: defaults, environment overrides, and errors that name the key and its source."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from runtime.config import (
    AgentConfig,
    CassandraConfig,
    CassandraTlsConfig,
    CdcConfig,
    ConfigError,
    KafkaConfig,
    KafkaSecurityConfig,
    PipelineConfig,
    WorkerConfig,
    load_config,
    parse_size,
)

MINIMAL = "agent:\n  cdc_raw_directory: /var/lib/cassandra/cdc_raw\n  state_directory: /var/lib/cdc-agent\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(text)
    return path


def test_defaults_and_file_values(tmp_path: Path) -> None:
    config = load_config(
        _write(tmp_path, MINIMAL + "  cdc_total_space: 4GiB\nkafka:\n  raw_partitions: 24\n"), environ={}
    )
    assert config.agent is not None
    assert config.agent.cdc_raw_directory == Path("/var/lib/cassandra/cdc_raw")
    assert config.agent.cdc_total_space == 4 * 2**30
    assert config.kafka.raw_partitions == 24
    assert config.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert config.agent.metrics_bind == "127.0.0.1", "metrics are served on loopback unless asked otherwise"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    env = {
        "CDC__KAFKA__BOOTSTRAP_SERVERS": "broker-a:9092,broker-b:9092",
        "CDC__AGENT__POLL_INTERVAL_MS": "20",
        "CDC__CASSANDRA__CONTACT_POINTS": "10.1.0.1,10.1.0.2",
        "OTHER": "ignored",
    }
    config = load_config(_write(tmp_path, MINIMAL), environ=env)
    assert config.kafka.bootstrap_servers == "broker-a:9092,broker-b:9092"
    assert config.agent is not None and config.agent.poll_interval_ms == 20
    assert config.cassandra.contact_points == ["10.1.0.1", "10.1.0.2"]


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (
            MINIMAL + "  poll_interval_ms: fast\n",
            {},
            r"agent\.poll_interval_ms \(file .*cdc\.yaml\): expected a whole number",
        ),
        (
            MINIMAL,
            {"CDC__AGENT__POLL_INTERVAL_MS": "-5"},
            r"agent\.poll_interval_ms \(environment variable CDC__AGENT__POLL_INTERVAL_MS\)",
        ),
        (
            MINIMAL + "  processed_segments: shred\n",
            {},
            r"agent\.processed_segments .*expected one of delete, archive",
        ),
        (MINIMAL + "  processed_segments: archive\n", {}, r"agent\.archive_directory is required"),
        (
            MINIMAL + "kafak: {}\n",
            {},
            r"unknown config key kafak .*valid keys under the top level: cluster, kafka",
        ),
        ("agent:\n  cdc_raw_directory: /x\n", {}, r"missing required config key agent\.state_directory"),
        (
            MINIMAL + "  cdc_total_space: lots\n",
            {},
            r"agent\.cdc_total_space .*expected a size such as 1024MiB",
        ),
        ("- a list\n", {}, r"must hold a mapping of sections"),
        (MINIMAL + "  metrics_port: 70000\n", {}, r"metrics_port: 70000 is not a TCP port"),
        (
            "worker:\n  data_directory: /w\n",
            {"CDC__WORKER__MEMTABLE_BUDGET": "0MiB"},
            r"worker\.memtable_budget \(environment variable CDC__WORKER__MEMTABLE_BUDGET\): expected a positive size",
        ),
        (
            "worker:\n  data_directory: /w\n  batch_max_events: 0\n",
            {},
            r"worker\.batch_max_events must be greater than 0 \(file",
        ),
        (
            "worker:\n  data_directory: /w\n",
            {"CDC__WORKER__OUTAGE_TIMEOUT_S": "0"},
            r"worker\.outage_timeout_s must be greater than 0 \(environment variable CDC__WORKER__OUTAGE_TIMEOUT_S",
        ),
        (
            "worker:\n  data_directory: /w\n  standby_replicas: 2\n",
            {},
            r"worker\.standby_replicas: 2 is not 0 \(no copies\) or 1 .*\(file ",
        ),
    ],
)
def test_bad_values_name_key_and_source(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text), environ=env)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*absent\.yaml"):
        load_config(tmp_path / "absent.yaml", environ={})


@pytest.mark.parametrize(
    ("text", "size"), [("1024MiB", 2**30), ("512", 512), ("2GiB", 2**31), (" 8 kib ", 8192)]
)
def test_sizes_use_cassandra_units(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_docker_config_is_valid() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "config" / "cdc.docker.yaml", environ={})
    assert config.kafka.bootstrap_servers == "kafka:9092"


def test_security_defaults_keep_plaintext_without_auth(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, MINIMAL), environ={})
    security = config.kafka.security
    assert (security.protocol, security.sasl_mechanism, security.username, security.password) == (
        "PLAINTEXT", None, None, None,
    )  # fmt: skip
    assert security.check_hostname is True
    assert (config.cassandra.username, config.cassandra.password) == (None, None)
    assert config.cassandra.tls.enabled is False and config.cassandra.tls.check_hostname is True


def _pem(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    return path


def test_security_from_file_and_environment(tmp_path: Path) -> None:
    ca = _pem(tmp_path, "ca.pem")
    key_password = tmp_path / "key.password"
    key_password.write_text("kp\n")
    text = (
        f"kafka:\n  security:\n    protocol: SSL\n    ca_file: {ca}\n    cert_file: {_pem(tmp_path, 'c.pem')}\n"
        f"    key_file: {_pem(tmp_path, 'c.key')}\n    key_password: file:{key_password}\n"
        f"cassandra:\n  tls:\n    enabled: true\n    ca_file: {ca}\n    check_hostname: false\n"
    )
    env = {
        "CDC__KAFKA__SECURITY__PROTOCOL": "SASL_SSL",
        "CDC__KAFKA__SECURITY__SASL_MECHANISM": "SCRAM-SHA-256",
        "CDC__KAFKA__SECURITY__USERNAME": "cdc",
        "CDC__KAFKA__SECURITY__PASSWORD": "007",  # text as given, not the YAML integer 7
        "CDC__CASSANDRA__USERNAME": "cdc",
        "CDC__CASSANDRA__PASSWORD": "${CASSANDRA_PW}",
        "CASSANDRA_PW": "c-pw",
    }
    config = load_config(_write(tmp_path, text), environ=env)
    security = config.kafka.security
    assert (security.protocol, security.sasl_mechanism, security.username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "cdc",
    )
    assert security.password is not None and security.password.reveal() == "007"
    assert security.key_password is not None and security.key_password.reveal() == "kp"
    assert security.ca_file == ca
    assert config.cassandra.password is not None and config.cassandra.password.reveal() == "c-pw"
    assert config.cassandra.password.source == "environment variable CASSANDRA_PW"
    assert config.cassandra.tls.enabled and not config.cassandra.tls.check_hostname


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (
            "kafka:\n  security:\n    protocol: TLS\n",
            {},
            r"kafka\.security\.protocol \(file .*\): expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, "
            r"got 'TLS'",
        ),
        (
            "kafka:\n  security:\n    protocol: SASL_SSL\n    sasl_mechanism: GSSAPI\n",
            {},
            r"kafka\.security\.sasl_mechanism .*expected one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            "kafka:\n  security:\n    protocol: SASL_SSL\n",
            {},
            r"kafka\.security\.sasl_mechanism is required when kafka\.security\.protocol is 'SASL_SSL' "
            r"\(one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512\)",
        ),
        (
            "kafka:\n  security:\n    sasl_mechanism: PLAIN\n    username: u\n",
            {"CDC__KAFKA__SECURITY__PROTOCOL": "SASL_PLAINTEXT"},
            r"kafka\.security\.password is required when kafka\.security\.protocol is 'SASL_PLAINTEXT' "
            r".*\(environment variable CDC__KAFKA__SECURITY__PROTOCOL\)",
        ),
        (
            "kafka:\n  security:\n    username: u\n",
            {},
            r"kafka\.security\.username is set but kafka\.security\.protocol is 'PLAINTEXT', which does not "
            r"authenticate",
        ),
        (
            "kafka:\n  security:\n    protocol: SASL_PLAINTEXT\n    sasl_mechanism: PLAIN\n    username: u\n"
            "    password: p\n    ca_file: /etc/ca.pem\n",
            {},
            r"kafka\.security\.ca_file is set but kafka\.security\.protocol is 'SASL_PLAINTEXT', which does "
            r"not use TLS",
        ),
        (
            "kafka:\n  security:\n    protocol: SSL\n    ca_file: /nonexistent/ca.pem\n",
            {},
            r"config key kafka\.security\.ca_file \(file .*\): file /nonexistent/ca\.pem does not exist",
        ),
        (
            "kafka:\n  security:\n    protocol: SSL\n    cert_file: /c.pem\n",
            {},
            r"kafka\.security\.key_file is required with kafka\.security\.cert_file",
        ),
        (
            "cassandra:\n  tls:\n    enabled: true\n    key_file: /k.pem\n",
            {},
            r"cassandra\.tls\.cert_file is required with cassandra\.tls\.key_file",
        ),
        (
            "cassandra:\n  tls:\n    ca_file: /ca.pem\n",
            {},
            r"cassandra\.tls\.ca_file is set but cassandra\.tls\.enabled is false",
        ),
        (
            "cassandra:\n  username: cdc\n",
            {},
            r"cassandra\.password is required with cassandra\.username",
        ),
        (
            "cassandra:\n  username: cdc\n  password: ${NOT_SET_ANYWHERE}\n",
            {},
            r"config key cassandra\.password \(file .*\): environment variable NOT_SET_ANYWHERE is not set",
        ),
        (
            "cassandra:\n  username: cdc\n",
            {"CDC__CASSANDRA__PASSWORD": "file:/nonexistent/pw"},
            r"config key cassandra\.password \(environment variable CDC__CASSANDRA__PASSWORD\): secret file "
            r"/nonexistent/pw does not exist",
        ),
        (
            "kafka:\n  security:\n    protcol: SSL\n",
            {},
            r"unknown config key kafka\.security\.protcol .*valid keys under kafka\.security: protocol, "
            r"sasl_mechanism",
        ),
        (
            "cassandra:\n  tls:\n    enabled: yes please\n",
            {},
            r"cassandra\.tls\.enabled \(file .*\): expected true or false",
        ),
    ],
)
def test_bad_security_settings_name_the_key(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text), environ=env)


def test_unreadable_certificate_file_names_key_and_path(tmp_path: Path) -> None:
    import os

    key = _pem(tmp_path, "client.key")
    key.chmod(0)
    if os.access(key, os.R_OK):
        pytest.skip("running as root: permissions do not stop reads")
    text = f"kafka:\n  security:\n    protocol: SSL\n    cert_file: {_pem(tmp_path, 'c.pem')}\n    key_file: {key}\n"
    with pytest.raises(ConfigError, match=rf"kafka\.security\.key_file .*: file {key} is not readable"):
        load_config(_write(tmp_path, text), environ={})


def test_secured_example_is_valid(tmp_path: Path) -> None:
    """Every key of config/secured.example.yaml loads, with its files and variables provided."""
    example = Path(__file__).resolve().parents[2] / "config" / "secured.example.yaml"
    text = example.read_text()
    files = sorted(set(re.findall(r"(/run/secrets/[\w./-]+|/etc/cdc/tls/[\w./-]+)", text)))
    assert files, "the example names its files"
    for name in files:
        local = tmp_path / name.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text("-----BEGIN CERTIFICATE-----\nsecret\n")
        text = text.replace(name, str(local))
    variables = set(re.findall(r"\$\{(\w+)\}", text))
    config = load_config(_write(tmp_path, text), environ=dict.fromkeys(variables, "from-env"))
    assert config.kafka.security.protocol == "SASL_SSL" and config.cassandra.tls.enabled
    assert config.kafka.security.password is not None and config.cassandra.password is not None


def test_every_config_key_is_in_the_readmes_reference() -> None:
    """The README's configuration reference names every key of every section, so a new key cannot be
    added without saying what it does (`section.key`, or `.key` after a key of the same section)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    reference = readme.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for line in reference.splitlines():
        if not line.startswith("| `"):
            continue
        keys = re.findall(r"`([a-z_.]+)`", line.split("|")[1])
        section = ""
        for key in keys:
            if key.startswith("."):
                key = section + key
            section = key.rsplit(".", 1)[0] if "." in key else ""
            named.add(key)
    sections = {
        "": CdcConfig,
        "kafka": KafkaConfig,
        "kafka.security": KafkaSecurityConfig,
        "cassandra": CassandraConfig,
        "cassandra.tls": CassandraTlsConfig,
        "agent": AgentConfig,
        "worker": WorkerConfig,
        "pipeline": PipelineConfig,
    }
    nested = {"kafka", "cassandra", "agent", "worker", "pipeline", "source", "security", "tls"}
    missing = [
        f"{prefix + '.' if prefix else ''}{f.name}"
        for prefix, cls in sections.items()
        for f in dataclasses.fields(cls)
        if f.name not in nested and f"{prefix + '.' if prefix else ''}{f.name}" not in named
    ]
    assert not missing, f"config keys the README's reference does not name: {missing}"
