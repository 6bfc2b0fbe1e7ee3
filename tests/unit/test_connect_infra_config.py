"""The Kafka Connect and PostgreSQL test services' configuration, without starting them."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from cdc.cli import build_parser
from infra.artifacts import APICURIO_CONVERTERS, ensure_apicurio_converter, ensure_debezium_cassandra
from infra.connect import (
    APICURIO_AVRO_CONVERTER,
    JDBC_SINK_CONNECTOR,
    JSON_CONVERTER,
    ConnectSpec,
    apicurio_avro_converters,
    jdbc_sink,
    render_properties,
    worker_properties,
)
from infra.errors import ArtifactDownloadError, ToolchainError
from infra.postgres import PostgresSpec, find_postgres_bin
from infra.settings import InfraSettings


def test_worker_properties_bind_loopback_and_let_connectors_override_their_consumer(tmp_path: Path) -> None:
    spec = ConnectSpec(
        root=tmp_path,
        bootstrap="127.0.0.1:24092",
        port=24183,
        plugin_path=(Path("/a"), Path("/b")),
        worker={"consumer.security.protocol": "SSL"},
    )
    props = worker_properties(spec)
    assert props["listeners"] == "http://127.0.0.1:24183"
    assert props["plugin.path"] == "/a,/b"
    assert props["connector.client.config.override.policy"] == "All"
    assert props["key.converter"] == props["value.converter"] == JSON_CONVERTER
    assert props["value.converter.schemas.enable"] == "true"
    assert props["offset.storage.file.filename"] == str(tmp_path / "offsets")
    assert props["consumer.security.protocol"] == "SSL"  # extra worker properties win
    assert spec.rest_url == "http://127.0.0.1:24183"


def test_properties_escape_backslashes() -> None:
    assert render_properties({"topics.regex": r"a\.b|c"}) == "topics.regex=a\\\\.b|c\n"


def test_the_jdbc_sink_upserts_deletes_and_reads_committed_records_only() -> None:
    sink = jdbc_sink(
        "s",
        topics_regex=r"p\.ks\.t",
        jdbc_url="jdbc:postgresql://127.0.0.1:1/db",
        username="u",
        **{"batch.size": "9"},
    )
    config = sink.config
    assert config["connector.class"] == JDBC_SINK_CONNECTOR
    assert config["insert.mode"] == "upsert" and config["delete.enabled"] == "true"
    assert config["primary.key.mode"] == "record_key" and config["schema.evolution"] == "basic"
    assert config["consumer.override.isolation.level"] == "read_committed"
    assert config["batch.size"] == "9"  # overrides are added


def test_avro_converters_read_confluent_frames_by_content_id() -> None:
    config = apicurio_avro_converters("http://127.0.0.1:24081/")
    for side in ("key", "value"):
        assert config[f"{side}.converter"] == APICURIO_AVRO_CONVERTER
        assert config[f"{side}.converter.apicurio.registry.url"] == "http://127.0.0.1:24081/apis/registry/v2"
        assert config[f"{side}.converter.apicurio.registry.as-confluent"] == "true"
        assert config[f"{side}.converter.apicurio.registry.use-id"] == "contentId"
        assert config[f"{side}.converter.apicurio.registry.headers.enabled"] == "false"


def test_the_converter_plugin_declares_its_converters_for_service_loading(tmp_path: Path) -> None:
    """A plugin folder already downloaded (stamped) gets the ServiceLoader manifest Connect looks for."""
    settings = InfraSettings(home=tmp_path / "home", cache=tmp_path / "cache")
    folder = settings.apicurio_converter_plugin / "apicurio-converter"
    folder.mkdir(parents=True)
    (folder / ".complete").write_text("1 jars\n")
    assert ensure_apicurio_converter(settings) == settings.apicurio_converter_plugin
    with zipfile.ZipFile(folder / "cdc-service-manifests.jar") as jar:
        listed = jar.read("META-INF/services/org.apache.kafka.connect.storage.Converter").decode().split()
    assert listed == list(APICURIO_CONVERTERS)


def test_postgres_urls() -> None:
    spec = PostgresSpec(root=Path("/x"), port=24432)
    assert spec.jdbc_url == "jdbc:postgresql://127.0.0.1:24432/postgres"
    assert spec.conninfo == "host=127.0.0.1 port=24432 user=postgres dbname=postgres"


def test_missing_postgres_binaries_name_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("infra.postgres._SEARCH_DIRS", "/nonexistent/postgresql/*/bin")
    with pytest.raises(ToolchainError, match="apt-get install postgresql"):
        find_postgres_bin()


def test_fetch_can_skip_connect() -> None:
    parser = build_parser()
    assert parser.parse_args(["infra", "fetch"]).no_connect is False
    assert parser.parse_args(["infra", "fetch", "--no-connect"]).no_connect is True


def test_the_debezium_connector_is_its_one_runnable_jar_once_downloaded(tmp_path: Path) -> None:
    """A stamped folder is used as it is (no Maven); one without the jar says how to get it again."""
    settings = InfraSettings(home=tmp_path / "home", cache=tmp_path / "cache")
    folder = settings.debezium_cassandra_dist
    folder.mkdir(parents=True)
    (folder / ".complete").write_text("x\n")
    with pytest.raises(ArtifactDownloadError, match="delete the folder"):
        ensure_debezium_cassandra(settings)
    jar = (
        folder
        / f"debezium-connector-cassandra-5-{settings.debezium_cassandra_version}-jar-with-dependencies.jar"
    )
    jar.write_bytes(b"PK")
    assert ensure_debezium_cassandra(settings) == jar
