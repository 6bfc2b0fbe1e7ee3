"""The Spark jobs reach Kafka and Cassandra only through the builders, with the config's security, and a
refused client becomes a PipelineError naming the setting to fix, never showing a secret. No services:
local sockets stand in for the servers."""

from __future__ import annotations

import ast
import asyncio
import pickle
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from cassandra import AuthenticationFailed
from cassandra.cluster import Cluster, NoHostAvailable

from cassandra_model.ddl_parser import load_schema_from_cql
from pipeline.cassandra_scan import ScanSpec, connect, scan_spec
from pipeline.errors import PipelineError, ServiceUnreachable, spark_failure_line
from pipeline.kafka_source import kafka_failure, kafka_format, spark_kafka_failure
from runtime.config import (
    CassandraConfig,
    CassandraTlsConfig,
    CdcConfig,
    KafkaConfig,
    KafkaSecurityConfig,
    PipelineConfig,
)
from runtime.kafka_clients import KafkaAccessError
from runtime.secrets import Secret
from runtime.spark_kafka import check_spark_client_key
from runtime.tls import ClientSetupError
from tests.unit.tls_material import KEY_PASSWORD, TlsMaterial, loopback_server, make_tls_material, tls_handler

PIPELINE = Path(__file__).resolve().parents[3] / "pipeline"
PASSWORD = "pipeline-Pa55-" + "x" * 8
SCHEMA = load_schema_from_cql(
    "CREATE TABLE shop.items (pk int, ck text, v text, PRIMARY KEY (pk, ck)) "
    "WITH ID = 5a1c7e3e-0000-4000-8000-000000000001;"
).tables()[0]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def _kafka(bootstrap: str = "127.0.0.1:9", **security: Any) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=bootstrap, request_timeout_ms=3000, security=KafkaSecurityConfig(**security)
    )


def _sasl(protocol: str, **more: Any) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "cdc",
        "password": Secret(PASSWORD, "file /run/secrets/kafka"),
        **more,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Recorder:
    """Stands in for DataStreamReader / DataFrameReader / DataFrameWriter: records format and options."""

    def __init__(self) -> None:
        self.source: str | None = None
        self.options_set: dict[str, str] = {}

    def format(self, source: str) -> _Recorder:
        self.source = source
        return self

    def options(self, **options: str) -> _Recorder:
        self.options_set.update(options)
        return self


# --- Spark's Kafka source and sink --------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_format_sets_servers_and_security_for_each_protocol(tls: TlsMaterial, protocol: str) -> None:
    security: dict[str, Any] = {"protocol": protocol}
    if "SASL" in protocol:
        security = _sasl(protocol)
    if "SSL" in protocol:
        security.update(
            ca_file=tls.ca,
            cert_file=tls.client_cert,
            key_file=tls.client_key_3des,
            key_password=Secret(KEY_PASSWORD),
        )
    target = _Recorder()
    assert kafka_format(target, _kafka("broker-1:9093,broker-2:9093", **security)) is target
    options = target.options_set
    assert target.source == "kafka"
    assert options["kafka.bootstrap.servers"] == "broker-1:9093,broker-2:9093"
    assert options["kafka.security.protocol"] == protocol
    if "SASL" in protocol:
        assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
        assert options["kafka.sasl.jaas.config"].startswith(
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="cdc"'
        )
    else:
        assert not any(k.startswith("kafka.sasl.") for k in options)
    if "SSL" in protocol:
        assert options["kafka.ssl.truststore.location"] == str(tls.ca)
        assert options["kafka.ssl.keystore.key"] == tls.client_key_3des.read_text()
        assert options["kafka.ssl.key.password"] == KEY_PASSWORD
        assert options["kafka.ssl.endpoint.identification.algorithm"] == "https"
    else:
        assert not any(k.startswith("kafka.ssl.") for k in options)


def test_a_config_that_makes_no_client_is_a_pipeline_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match=r"kafka\.security\.ca_file: file .*nowhere\.pem does not exist"):
        kafka_format(_Recorder(), _kafka(protocol="SSL", ca_file=tmp_path / "nowhere.pem"))
    without_password = _sasl("SASL_SSL", password=None)
    with pytest.raises(PipelineError, match=r"kafka\.security\.password are required"):
        kafka_format(_Recorder(), _kafka(**without_password))


def _calls(tree: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            yield name, node


def test_every_client_of_the_jobs_goes_through_the_builders() -> None:
    """No job makes a Spark Kafka source or sink, an aiokafka client or a driver Cluster of its own: those
    would miss kafka.security or the cassandra login and TLS."""
    found: list[str] = []
    for path in sorted(PIPELINE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for name, call in _calls(tree):
            where = f"{path.name}:{call.lineno}"
            literals = [a.value for a in call.args if isinstance(a, ast.Constant)]
            if name == "format" and "kafka" in literals and path.name != "kafka_source.py":
                found.append(f"{where}: format('kafka') outside kafka_format")
            if name in ("option", "options") and any(
                str(v).startswith("kafka.bootstrap") or str(v).startswith("kafka.s") for v in literals
            ):
                found.append(f"{where}: a server or security option set by hand")
            if name in ("AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient", "Cluster"):
                found.append(f"{where}: {name}(...) instead of the runtime builders")
    assert not found, found


# --- aiokafka failures --------------------------------------------------------------------------------


def test_refused_credentials_name_the_key_and_not_the_password() -> None:
    kafka = _kafka(**_sasl("SASL_SSL"))
    error = kafka_failure(
        SaslAuthenticationFailed("Authentication failed"), kafka, "read the schema topic 's'"
    )
    assert type(error) is PipelineError
    text = str(error)
    assert text.startswith("cannot read the schema topic 's' from Kafka at 127.0.0.1:9: Kafka at")
    assert "kafka.security.password (its value comes from file /run/secrets/kafka)" in text
    assert PASSWORD not in text


def test_a_started_client_keeps_its_reason() -> None:
    reason = "the TLS certificate of b:9093 is not trusted; set kafka.security.ca_file"
    error = kafka_failure(KafkaAccessError(reason), _kafka(protocol="SSL"), "read the end offsets of 't'")
    assert type(error) is PipelineError and str(error).endswith(reason)


def test_an_unanswered_bootstrap_is_service_unreachable() -> None:
    kafka = _kafka(f"127.0.0.1:{_free_port()}", **_sasl("SASL_PLAINTEXT"))
    error = kafka_failure(KafkaConnectionError(f"Unable to bootstrap from {PASSWORD}"), kafka, "read 't'")
    assert isinstance(error, ServiceUnreachable)
    assert "(config kafka.bootstrap_servers)" in str(error)
    assert PASSWORD not in str(error), "a library's message is scrubbed of the config's secrets"


def test_a_tls_listener_reached_in_plaintext_is_diagnosed(tls: TlsMaterial) -> None:
    """aiokafka raises only "Unable to bootstrap"; the failure is asked again to find the reason."""
    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port:
        kafka = _kafka(f"127.0.0.1:{port}")
        error = kafka_failure(KafkaConnectionError("Unable to bootstrap from ..."), kafka, "read 't'")
    assert type(error) is PipelineError
    assert "set kafka.security.protocol (now PLAINTEXT)" in str(error)


# --- Spark failures -----------------------------------------------------------------------------------


def test_spark_failures_are_scrubbed_and_explained(tls: TlsMaterial) -> None:
    kafka = _kafka(f"127.0.0.1:{_free_port()}", **_sasl("SASL_PLAINTEXT"))
    text = spark_kafka_failure(f"org.apache.kafka.common.KafkaException: jaas password={PASSWORD}", kafka)
    assert PASSWORD not in text and "password=***" in text
    pem = _kafka(
        protocol="SSL", cert_file=tls.client_cert, key_file=tls.client_key_encrypted, key_password=Secret("x")
    )
    hint = spark_kafka_failure(
        "java.security.NoSuchAlgorithmException: PBES2 SecretKeyFactory not available", pem
    )
    assert hint.startswith("config key kafka.security.key_file: the Java Kafka client of the Spark jobs")
    assert "-v1 PBE-SHA1-3DES" in hint


def _pbes2_config(folder: Path, tls: TlsMaterial, key: Path) -> Path:
    config = folder / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {
                    "bootstrap_servers": f"127.0.0.1:{_free_port()}",
                    "security": {
                        "protocol": "SSL",
                        "ca_file": str(tls.ca),
                        "cert_file": str(tls.client_cert),
                        "key_file": str(key),
                        "key_password": KEY_PASSWORD,
                    },
                },
                "pipeline": {"lake_directory": str(folder / "lake")},
            }
        )
    )
    return config


def test_a_pbes2_key_stops_the_pipeline_cli_before_spark_starts(tls: TlsMaterial, tmp_path: Path) -> None:
    """The Java Kafka client of the Spark jobs cannot decrypt PBES2 (openssl's default): the config load
    says so, naming the key and both openssl steps, and no JVM starts (its output would follow)."""
    config = _pbes2_config(tmp_path, tls, tls.client_key_encrypted)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "cdc"), "pipeline", "lake", "--once", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"only the error, no Spark start-up: {done.stderr}"
    assert lines[0].startswith(
        f"cdc: error: config key kafka.security.key_file: {tls.client_key_encrypted} is encrypted with PBES2"
    )
    assert f"openssl pkcs8 -in {tls.client_key_encrypted} -out <plain key>" in lines[0]
    assert "openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in <plain key> -out <new key>" in lines[0]
    assert KEY_PASSWORD not in done.stderr + done.stdout


def test_the_readme_steps_turn_a_pbes2_key_into_one_the_spark_jobs_take(
    tls: TlsMaterial, tmp_path: Path
) -> None:
    kafka = _kafka(
        protocol="SSL",
        cert_file=tls.client_cert,
        key_file=tls.client_key_encrypted,
        key_password=Secret(KEY_PASSWORD),
    )
    with pytest.raises(ClientSetupError, match="encrypted with PBES2"):
        check_spark_client_key(kafka)
    with pytest.raises(PipelineError, match="encrypted with PBES2"):
        kafka_format(_Recorder(), kafka)
    plain, converted = tmp_path / "plain.key", tmp_path / "client.key"
    password = f"pass:{KEY_PASSWORD}"
    for step in (
        ["pkcs8", "-in", str(tls.client_key_encrypted), "-passin", password, "-out", str(plain)],
        ["pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(plain), "-passout", password, "-out",
         str(converted)],
    ):  # fmt: skip
        subprocess.run(["openssl", *step], check=True, capture_output=True, timeout=60)
    for key in (converted, tls.client_key_3des, tls.client_key):
        accepted = replace(kafka, security=replace(kafka.security, key_file=key))
        check_spark_client_key(accepted)
        assert kafka_format(_Recorder(), accepted).options_set["kafka.ssl.keystore.key"] == key.read_text()


def test_spark_failure_line_finds_the_useful_line() -> None:
    python = (
        "An error occurred while calling o81.save.\n: org.apache.spark.SparkException: Job aborted\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "pipeline.errors.PipelineError: cannot scan shop.items: refused\n\tat org.apache.spark.X.y(X.scala:1)"
    )
    # our own error's message, without its class: it is what a user reads after `cdc: error:`
    assert spark_failure_line(Exception(python)) == "cannot scan shop.items: refused"
    java = (
        "An error occurred while calling o101.save.\n: org.apache.spark.SparkException: Job aborted\n"
        "\tat org.apache.spark.X.y(X.scala:1)\nCaused by: org.apache.kafka.common.KafkaException: Failed\n"
        "\t... 29 more\nCaused by: org.apache.kafka.common.errors.SaslAuthenticationException: bad login\n"
    )
    assert spark_failure_line(Exception(java)) == (
        "org.apache.kafka.common.errors.SaslAuthenticationException: bad login"
    )
    assert spark_failure_line(Exception("just this\nand that")) == "just this"


# --- Cassandra scans ----------------------------------------------------------------------------------


def _cassandra(port: int, **more: Any) -> CdcConfig:
    cassandra = CassandraConfig(
        contact_points=["127.0.0.1"],
        port=port,
        username="cdc",
        password=Secret(PASSWORD, "file /run/secrets/cassandra"),
        **more,
    )
    return CdcConfig(cassandra=cassandra, pipeline=PipelineConfig(lake_directory=Path("/tmp/lake")))


def _spec(config: CdcConfig) -> ScanSpec:
    return replace(scan_spec(config, SCHEMA, with_write_times=True), connect_timeout_s=3.0)


def test_the_scan_shipped_to_executors_carries_the_login_and_prints_none(tls: TlsMaterial) -> None:
    tls_config = CassandraTlsConfig(enabled=True, ca_file=tls.ca, key_password=Secret(KEY_PASSWORD))
    spec = _spec(_cassandra(9042, tls=tls_config))
    assert PASSWORD not in repr(spec) and KEY_PASSWORD not in repr(spec) and "***" in repr(spec)
    shipped = pickle.loads(pickle.dumps(spec))
    assert shipped == spec
    assert shipped.cassandra.password is not None and shipped.cassandra.password.reveal() == PASSWORD
    assert shipped.cassandra.tls.ca_file == tls.ca


def test_executor_clusters_get_the_login_tls_and_the_scan_arguments(
    tls: TlsMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Cluster] = []

    def refuse(cluster: Cluster) -> Any:
        made.append(cluster)
        raise NoHostAvailable("Unable to connect to any servers", {})

    monkeypatch.setattr(Cluster, "connect", refuse)
    spec = _spec(_cassandra(19042, tls=CassandraTlsConfig(enabled=True, ca_file=tls.ca)))
    with pytest.raises(ServiceUnreachable, match=r"cannot reach Cassandra at 127\.0\.0\.1:19042"):
        connect(spec)
    (cluster,) = made
    assert cluster.port == 19042 and cluster.connect_timeout == 3.0
    assert cluster.auth_provider is not None and cluster.auth_provider.username == "cdc"
    assert isinstance(cluster.ssl_context, ssl.SSLContext)
    assert PASSWORD not in repr(cluster.auth_provider)


def test_a_refused_login_names_the_password_key_and_not_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cluster: Cluster) -> Any:
        raise NoHostAvailable(
            "Unable to connect to any servers",
            {"127.0.0.1:9042": AuthenticationFailed("Provided username cdc and/or password are incorrect")},
        )

    monkeypatch.setattr(Cluster, "connect", refuse)
    with pytest.raises(PipelineError) as caught:
        connect(_spec(_cassandra(9042)))
    assert type(caught.value) is PipelineError
    text = str(caught.value)
    assert text.startswith(
        "cannot scan shop.items: Cassandra at 127.0.0.1:9042 refused the login of role 'cdc'"
    )
    assert "cassandra.password (its value comes from file /run/secrets/cassandra)" in text
    assert PASSWORD not in text


def test_an_untrusted_node_certificate_names_the_ca_key(tls: TlsMaterial) -> None:
    with loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port:
        spec = _spec(_cassandra(port, tls=CassandraTlsConfig(enabled=True, ca_file=tls.ca)))
        with pytest.raises(PipelineError, match=r"is not trusted.*set cassandra\.tls\.ca_file") as caught:
            connect(spec)
    assert PASSWORD not in str(caught.value)


def test_a_node_that_does_not_answer_is_service_unreachable() -> None:
    port = _free_port()
    with pytest.raises(
        ServiceUnreachable, match=rf"cannot reach Cassandra at 127\.0\.0\.1:{port} \(config"
    ) as caught:
        connect(_spec(_cassandra(port)))
    assert PASSWORD not in str(caught.value)


def test_unreadable_tls_files_are_a_pipeline_error(tmp_path: Path) -> None:
    spec = _spec(_cassandra(9042, tls=CassandraTlsConfig(enabled=True, ca_file=tmp_path / "ca.pem")))
    with pytest.raises(PipelineError, match=r"cassandra\.tls\.ca_file: file .*ca\.pem does not exist"):
        connect(spec)


# --- local servers ------------------------------------------------------------------------------------


def test_local_server_helper_answers_tls(tls: TlsMaterial) -> None:
    """The stand-in server really speaks TLS (else the tests above would prove nothing)."""

    async def hello(port: int) -> None:
        context = ssl.create_default_context(cafile=str(tls.ca))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.close()

    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port:
        asyncio.run(hello(port))
