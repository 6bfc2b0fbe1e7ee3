"""The shared YAML config: defaults, environment overrides, and errors that name the key and its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ConfigError, load_config, parse_size

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
