"""`cdc segment dump` reads a node's schema with the config's Cassandra login and TLS (`--config`), and says
what to fix when the node refuses it; `--host`/`--port` keep working alone and override the config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cassandra import AuthenticationFailed
from cassandra.cluster import NoHostAvailable

import cdc.segment_dump as segment_dump
from cassandra_model.table_schema import SchemaCatalog
from cdc.cli import main
from cdc.segment_dump import SchemaLoadError, load_catalog
from runtime.config import CassandraConfig
from runtime.secrets import Secret
from runtime.service_process import free_port
from tests.unit.tls_material import TlsMaterial, loopback_server, make_tls_material, tls_handler

PASSWORD = "dump-pa55word-never-shown"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def _config_file(tmp_path: Path, cassandra: dict[str, Any]) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(yaml.safe_dump({"cassandra": cassandra}))
    return path


@pytest.fixture
def node_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[CassandraConfig, str, int]]:
    calls: list[tuple[CassandraConfig, str, int]] = []

    def fake(cassandra: CassandraConfig, host: str, port: int) -> SchemaCatalog:
        calls.append((cassandra, host, port))
        return SchemaCatalog()

    monkeypatch.setattr(segment_dump, "load_catalog_from_node", fake)
    return calls


def test_the_node_comes_from_the_config_unless_host_and_port_say_otherwise(
    tmp_path: Path, node_calls: list[tuple[CassandraConfig, str, int]]
) -> None:
    config = _config_file(
        tmp_path, {"contact_points": ["10.0.0.7"], "port": 19042, "username": "cdc", "password": PASSWORD}
    )
    load_catalog(None, config_file=config)
    load_catalog(None, "10.0.0.8", config_file=config)
    load_catalog(None, "10.0.0.9", 29042, config_file=config)
    load_catalog(None, "10.0.0.10")  # the old way: no config, no login, port 9042
    assert [(host, port) for _, host, port in node_calls] == [
        ("10.0.0.7", 19042),
        ("10.0.0.8", 19042),
        ("10.0.0.9", 29042),
        ("10.0.0.10", 9042),
    ]
    with_config = node_calls[0][0]
    assert with_config.username == "cdc" and with_config.password is not None
    assert with_config.password.reveal() == PASSWORD
    assert node_calls[3][0] == CassandraConfig()


def test_a_schema_source_is_required_and_schema_cql_stands_alone(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --schema-cql FILE, --host HOST or --config FILE"):
        load_catalog(None)
    with pytest.raises(ValueError, match="--schema-cql reads no node"):
        load_catalog(tmp_path / "schema.cql", config_file=_config_file(tmp_path, {}))


def test_untrusted_node_certificate_is_reported_by_cdc_segment_dump(
    tls: TlsMaterial, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port:
        config = _config_file(
            tmp_path,
            {
                "contact_points": ["127.0.0.1"],
                "port": port,
                "username": "cdc",
                "password": PASSWORD,
                "tls": {"enabled": True, "ca_file": str(tls.ca)},
            },
        )
        status = main(["segment", "dump", str(tmp_path), "--config", str(config)])
    _, err = capsys.readouterr()
    assert status == 2, err
    assert re.search(
        r"cdc: error: cannot read the schema from Cassandra at 127\.0\.0\.1:\d+: the TLS certificate of "
        r"127\.0\.0\.1:\d+ is not trusted.*set cassandra\.tls\.ca_file",
        err,
    ), err
    assert PASSWORD not in err


def test_refused_login_names_the_config_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    class RefusingCluster:
        def connect(self) -> Any:
            raise NoHostAvailable(
                "Unable to connect to any servers",
                {
                    "127.0.0.1:9042": AuthenticationFailed(
                        'message="Provided username cdc and/or password are incorrect"'
                    )
                },
            )

        def shutdown(self) -> None:
            pass

    monkeypatch.setattr(segment_dump, "cassandra_cluster", lambda *args, **kwargs: RefusingCluster())
    cassandra = CassandraConfig(username="cdc", password=Secret(PASSWORD))
    with pytest.raises(SchemaLoadError) as caught:
        segment_dump.load_catalog_from_node(cassandra, "127.0.0.1", 9042)
    message = str(caught.value)
    assert "refused the login of role 'cdc'" in message and "cassandra.password" in message
    assert PASSWORD not in message


def test_plaintext_node_that_does_not_answer_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = free_port()
    assert main(["segment", "dump", str(tmp_path), "--host", "127.0.0.1", "--port", str(port)]) == 2
    _, err = capsys.readouterr()
    assert f"cdc: error: cannot read the schema from Cassandra at 127.0.0.1:{port}: NoHostAvailable" in err
