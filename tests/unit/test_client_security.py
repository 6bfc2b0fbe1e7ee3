"""Client builders (aiokafka, Faust, Spark, cassandra-driver) apply the security config, and the errors
of real TLS handshakes and refused logins come back naming the setting to fix, never a secret.

The TLS material is made with `openssl`; the servers are local sockets on 127.0.0.1 that do a TLS
handshake (or refuse to), so no Kafka or Cassandra is needed.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from dataclasses import replace
from typing import Any

import pytest
from aiokafka.errors import SaslAuthenticationFailed, UnsupportedSaslMechanismError
from cassandra import AuthenticationFailed
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import NoHostAvailable
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from runtime.cassandra_session import cassandra_cluster, explain_cassandra_error
from runtime.config import CassandraConfig, CassandraTlsConfig, KafkaConfig, KafkaSecurityConfig
from runtime.kafka_clients import (
    KafkaAccessError,
    diagnose_kafka,
    explain_kafka_error,
    faust_broker,
    kafka_client_options,
    make_admin,
    make_consumer,
    make_producer,
    start_kafka_client,
)
from runtime.secrets import Secret
from runtime.spark_kafka import SPARK_REDACTION_CONF, jaas_config, spark_kafka_options
from runtime.tls import ClientSetupError, client_ssl_context
from tests.unit.tls_material import KEY_PASSWORD, TlsMaterial, loopback_server, make_tls_material, tls_handler

PASSWORD = 'p"w\\rd-42'


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def _kafka(bootstrap: str = "127.0.0.1:9093", **security: Any) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, security=KafkaSecurityConfig(**security)
    )


def _sasl(protocol: str = "SASL_SSL", mechanism: str = "SCRAM-SHA-512", **more: Any) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "sasl_mechanism": mechanism,
        "username": "cdc",
        "password": Secret(PASSWORD),
        **more,
    }


# --- aiokafka and Faust -------------------------------------------------------------------------------


def test_plaintext_options_carry_no_security() -> None:
    options = kafka_client_options(_kafka())
    assert options == {
        "bootstrap_servers": "127.0.0.1:9093",
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
    }


def test_sasl_plaintext_options() -> None:
    options = kafka_client_options(_kafka(**_sasl("SASL_PLAINTEXT", "PLAIN")))
    assert options["security_protocol"] == "SASL_PLAINTEXT" and "ssl_context" not in options
    assert (options["sasl_mechanism"], options["sasl_plain_username"]) == ("PLAIN", "cdc")
    assert options["sasl_plain_password"] == PASSWORD
    assert PASSWORD not in repr(options) and PASSWORD not in str(options) and "***" in repr(options)


def test_ssl_context_trusts_the_ca_and_checks_hostnames(tls: TlsMaterial) -> None:
    options = kafka_client_options(_kafka(protocol="SSL", ca_file=tls.ca))
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "ca"),),)]
    assert "sasl_mechanism" not in options
    relaxed = kafka_client_options(_kafka(protocol="SSL", ca_file=tls.ca, check_hostname=False))
    assert not relaxed["ssl_context"].check_hostname
    assert relaxed["ssl_context"].verify_mode == ssl.CERT_REQUIRED, "the chain is still checked"


def test_sasl_ssl_with_mutual_tls_and_encrypted_key(tls: TlsMaterial) -> None:
    security = _sasl(
        ca_file=tls.ca,
        cert_file=tls.client_cert,
        key_file=tls.client_key_encrypted,
        key_password=Secret(KEY_PASSWORD),
    )
    options = kafka_client_options(_kafka(**security))
    assert options["security_protocol"] == "SASL_SSL"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["sasl_mechanism"] == "SCRAM-SHA-512" and options["sasl_plain_password"] == PASSWORD


def test_client_constructors_apply_security_and_refuse_overrides() -> None:
    kafka = _kafka(**_sasl("SASL_PLAINTEXT", "SCRAM-SHA-256"))

    async def scenario() -> None:
        producer = make_producer(kafka, acks="all")
        consumer = make_consumer(kafka, "topic-a", group_id="g", enable_auto_commit=False)
        admin = make_admin(kafka, request_timeout_ms=1000)
        for client in (producer.client, consumer._client, admin._client):
            assert client._security_protocol == "SASL_PLAINTEXT"
            assert client._sasl_mechanism == "SCRAM-SHA-256"
            assert client._sasl_plain_password == PASSWORD
        assert consumer.subscription() == {"topic-a"}
        with pytest.raises(TypeError, match=r"security_protocol come from kafka\.security"):
            make_producer(kafka, security_protocol="PLAINTEXT")
        await producer.client.close()
        await consumer._client.close()
        await admin.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_faust_credentials_give_aiokafka_the_same_settings(tls: TlsMaterial, protocol: str) -> None:
    if protocol.startswith("SASL"):
        kafka = _kafka(
            "a:9093, b:9093", **_sasl(protocol, ca_file=tls.ca if protocol == "SASL_SSL" else None)
        )
    else:
        kafka = _kafka("a:9093, b:9093", protocol=protocol, ca_file=tls.ca if protocol == "SSL" else None)
    broker = faust_broker(kafka)
    assert broker.urls == ["kafka://a:9093", "kafka://b:9093"]
    faust_auth = credentials_to_aiokafka_auth(broker.credentials)
    ours = kafka_client_options(kafka)
    assert faust_auth["security_protocol"] == protocol
    for key in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password"):
        assert faust_auth.get(key) == ours.get(key)
    assert (faust_auth.get("ssl_context") is None) == (protocol in ("PLAINTEXT", "SASL_PLAINTEXT"))
    assert PASSWORD not in repr(broker)


# --- Spark ----------------------------------------------------------------------------------------------


def _spark_redacts(key: str, value: str) -> bool:
    """SQLConf.redactOptions: an option is masked when the regex finds a match in its key or its value."""
    pattern = re.compile(SPARK_REDACTION_CONF["spark.sql.redaction.options.regex"])
    return bool(pattern.search(key) or pattern.search(value))


def test_spark_plaintext_options() -> None:
    assert spark_kafka_options(_kafka()) == {
        "kafka.bootstrap.servers": "127.0.0.1:9093",
        "kafka.security.protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_spark_sasl_options(mechanism: str, module: str) -> None:
    options = spark_kafka_options(_kafka(**_sasl("SASL_PLAINTEXT", mechanism)))
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert options["kafka.sasl.mechanism"] == mechanism
    assert options["kafka.sasl.jaas.config"] == f'{module} required username="cdc" password="p\\"w\\\\rd-42";'
    assert not any(k.startswith("kafka.ssl.") for k in options)


def test_spark_tls_options_with_pem_keystore(tls: TlsMaterial) -> None:
    security = _sasl(
        ca_file=tls.ca,
        cert_file=tls.client_cert,
        key_file=tls.client_key_3des,
        key_password=Secret(KEY_PASSWORD),
        check_hostname=False,
    )
    options = spark_kafka_options(_kafka(**security))
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == str(tls.ca)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == tls.client_cert.read_text()
    assert options["kafka.ssl.keystore.key"] == tls.client_key_3des.read_text()
    assert options["kafka.ssl.key.password"] == KEY_PASSWORD
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    checked = spark_kafka_options(_kafka(protocol="SSL", ca_file=tls.ca))
    assert checked["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert "kafka.ssl.keystore.key" not in checked and "kafka.ssl.key.password" not in checked
    unencrypted = spark_kafka_options(
        _kafka(protocol="SSL", cert_file=tls.client_cert, key_file=tls.client_key, key_password=Secret("x"))
    )
    assert "kafka.ssl.key.password" not in unencrypted, "Kafka would try to decrypt an unencrypted key"


def test_spark_redaction_covers_every_secret_option(tls: TlsMaterial) -> None:
    security = _sasl(
        ca_file=tls.ca,
        cert_file=tls.client_cert,
        key_file=tls.client_key_3des,
        key_password=Secret(KEY_PASSWORD),
    )
    options = spark_kafka_options(_kafka(**security))
    secret_keys = {"kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password"}
    assert secret_keys <= set(options)
    # every secret option is masked by its key alone, whatever its value (a value can match by chance:
    # base64 key material holds "url" now and then, so only the keys are a stable test)
    ours = re.compile(SPARK_REDACTION_CONF["spark.sql.redaction.options.regex"])
    assert {k for k in options if ours.search(k)} >= secret_keys
    assert all(_spark_redacts(k, options[k]) for k in secret_keys)
    # Spark's default, `(?i)url` plus `spark.redaction.regex`, does not mask the inline key by its name
    # (checked on Spark 4.2.0), and its PEM value matches only by chance
    default = re.compile(r"(?i)url|(?i:secret|password|token|access[.]?key)")
    assert not default.search("kafka.ssl.keystore.key")


def test_spark_refuses_keys_the_java_client_cannot_read(tls: TlsMaterial) -> None:
    with pytest.raises(
        ClientSetupError, match=r"kafka\.security\.key_file: .*client-rsa\.key is not a PKCS#8"
    ):
        spark_kafka_options(_kafka(protocol="SSL", cert_file=tls.client_cert, key_file=tls.client_key_pkcs1))
    with pytest.raises(ClientSetupError, match=r"is encrypted; set kafka\.security\.key_password"):
        spark_kafka_options(_kafka(protocol="SSL", cert_file=tls.client_cert, key_file=tls.client_key_3des))
    with pytest.raises(ClientSetupError, match=r"client-enc\.key is encrypted with PBES2"):
        spark_kafka_options(
            _kafka(
                protocol="SSL",
                cert_file=tls.client_cert,
                key_file=tls.client_key_encrypted,
                key_password=Secret(KEY_PASSWORD),
            )
        )


def test_jaas_line_quotes_awkward_passwords() -> None:
    assert jaas_config("PLAIN", "u", 'a"b\\c;') == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="a\\"b\\\\c;";'
    )


# --- cassandra-driver -----------------------------------------------------------------------------------


def test_cassandra_cluster_plain_keeps_call_site_arguments() -> None:
    cluster = cassandra_cluster(
        CassandraConfig(contact_points=["10.0.0.1"], port=9142), protocol_version=5, connect_timeout=3
    )
    assert cluster.contact_points == ["10.0.0.1"] and cluster.port == 9142
    assert cluster.protocol_version == 5 and cluster.connect_timeout == 3
    assert cluster.auth_provider is None and cluster.ssl_context is None


def test_cassandra_cluster_with_login_and_tls(tls: TlsMaterial) -> None:
    config = CassandraConfig(
        username="cdc",
        password=Secret(PASSWORD),
        tls=CassandraTlsConfig(
            enabled=True,
            ca_file=tls.ca,
            cert_file=tls.client_cert,
            key_file=tls.client_key_encrypted,
            key_password=Secret(KEY_PASSWORD),
        ),
    )
    cluster = cassandra_cluster(config, contact_points=["127.0.0.2"], port=19042)
    assert cluster.contact_points == ["127.0.0.2"] and cluster.port == 19042
    provider = cluster.auth_provider
    assert isinstance(provider, PlainTextAuthProvider)
    assert PASSWORD not in repr(provider) and provider.password is None
    authenticator = provider.new_authenticator("127.0.0.2")
    assert authenticator.initial_response() == f"\x00cdc\x00{PASSWORD}".encode()
    assert cluster.ssl_context.check_hostname and cluster.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert cluster.ssl_options is None, "the driver names each node itself when check_hostname is on"
    with pytest.raises(TypeError, match=r"auth_provider come from the cassandra section"):
        cassandra_cluster(config, auth_provider=None)


# --- TLS material -------------------------------------------------------------------------------------


def _context(tls: TlsMaterial, **overrides: Any) -> ssl.SSLContext:
    settings: dict[str, Any] = {
        "prefix": "kafka.security.",
        "ca_file": tls.ca,
        "cert_file": tls.client_cert,
        "key_file": tls.client_key_encrypted,
        "key_password": Secret(KEY_PASSWORD),
        "check_hostname": True,
        **overrides,
    }
    return client_ssl_context(**settings)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"key_password": Secret("wrong", "file /etc/cdc/key.password")},
         r"kafka\.security\.key_password \(its value comes from file /etc/cdc/key\.password\) does not decrypt kafka\.security\.key_file"),
        ({"key_password": None}, r"kafka\.security\.key_file: .*client-enc\.key is encrypted; set kafka\.security\.key_password"),
        ({"key_file": "other_key"}, r"kafka\.security\.key_file: .*other\.key is not the private key of kafka\.security\.cert_file"),
        ({"key_file": "absent"}, r"config key kafka\.security\.key_file: file .*absent\.key does not exist"),
        ({"cert_file": "absent"}, r"config key kafka\.security\.cert_file: file .*absent\.key does not exist"),
        ({"cert_file": "client_key"}, r"kafka\.security\.cert_file: .*client\.key holds no PEM certificate"),
        ({"ca_file": "client_key"}, r"kafka\.security\.ca_file: .*client\.key holds no PEM CA certificate"),
        ({"ca_file": "absent"}, r"config key kafka\.security\.ca_file: file .*absent\.key does not exist"),
    ],
)  # fmt: skip
def test_unloadable_tls_files_name_the_key(tls: TlsMaterial, overrides: dict[str, Any], message: str) -> None:
    for name, value in overrides.items():
        if value == "absent":
            overrides[name] = tls.folder / "absent.key"
        elif isinstance(value, str):
            overrides[name] = getattr(tls, value)
    with pytest.raises(ClientSetupError, match=message) as caught:
        _context(tls, **overrides)
    assert KEY_PASSWORD not in str(caught.value)


def test_traditional_rsa_key_is_fine_for_python_clients(tls: TlsMaterial) -> None:
    assert isinstance(_context(tls, key_file=tls.client_key_pkcs1, key_password=None), ssl.SSLContext)


# --- real handshakes against local servers --------------------------------------------------------------


def _plaintext_handler(conn: socket.socket) -> None:
    """A plaintext listener that reads a (TLS hello) frame size and hangs up, as a Kafka broker does."""
    conn.recv(4)


def _diagnose(kafka: KafkaConfig) -> str:
    message = asyncio.run(diagnose_kafka(kafka))
    assert message is not None
    assert PASSWORD not in message
    return message


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("stranger", r"certificate of 127\.0\.0\.1:\d+ is not trusted: it is not signed by a CA this client "
                     r"trusts .* set kafka\.security\.ca_file \(.*ca\.pem\) to the CA"),
        ("expired", r"certificate of 127\.0\.0\.1:\d+ has expired \(certificate has expired\)"),
    ],
)  # fmt: skip
def test_kafka_untrusted_and_expired_broker_certificates(tls: TlsMaterial, server: str, message: str) -> None:
    cert, key = getattr(tls, f"{server}_cert"), getattr(tls, f"{server}_key")
    with loopback_server(tls_handler(cert, key)) as port:
        assert re.search(message, _diagnose(_kafka(f"127.0.0.1:{port}", **_sasl(ca_file=tls.ca))))


def test_kafka_certificate_for_another_name(tls: TlsMaterial) -> None:
    with loopback_server(tls_handler(tls.misnamed_cert, tls.misnamed_key)) as port:
        message = _diagnose(_kafka(f"127.0.0.1:{port}", protocol="SSL", ca_file=tls.ca))
    assert re.search(
        r"certificate of 127\.0\.0\.1:\d+ does not name the address it was reached at \(IP address mismatch.*\); "
        r"connect by a name the certificate lists, or set kafka\.security\.check_hostname: false",
        message,
    )
    with loopback_server(tls_handler(tls.misnamed_cert, tls.misnamed_key)) as port:
        relaxed = _kafka(f"127.0.0.1:{port}", protocol="SSL", ca_file=tls.ca, check_hostname=False)
        # the handshake passes; the server then hangs up at the first request, as a SASL_SSL listener
        # does to a client without SASL: no certificate problem, the protocol is the key to change
        relaxed_message = asyncio.run(diagnose_kafka(relaxed))
    assert relaxed_message is not None and "certificate" not in relaxed_message
    assert re.search(r"after the TLS handshake: that listener requires SASL; set kafka\.security\.protocol "
                     r"\(now SSL\) to SASL_SSL", relaxed_message)  # fmt: skip


def test_kafka_tls_client_on_plaintext_port(tls: TlsMaterial) -> None:
    with loopback_server(_plaintext_handler) as port:
        message = _diagnose(_kafka(f"127.0.0.1:{port}", protocol="SSL", ca_file=tls.ca))
    assert re.search(
        r"did not answer the TLS handshake .*plaintext port, while kafka\.security\.protocol asks", message
    )


def test_kafka_plaintext_client_on_tls_port(tls: TlsMaterial) -> None:
    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port:
        message = _diagnose(_kafka(f"127.0.0.1:{port}"))
    assert re.search(
        r"closed the connection at the first request: .* set kafka\.security\.protocol \(now PLAINTEXT\)",
        message,
    )


def test_started_client_fails_with_the_reason(tls: TlsMaterial) -> None:
    """aiokafka only says "Unable to bootstrap"; start_kafka_client says why."""
    with loopback_server(tls_handler(tls.stranger_cert, tls.stranger_key)) as port:
        kafka = _kafka(f"127.0.0.1:{port}", **_sasl(ca_file=tls.ca))

        async def scenario() -> None:
            await start_kafka_client(make_producer(kafka), kafka)

        with pytest.raises(KafkaAccessError, match=r"is not trusted.*kafka\.security\.ca_file") as caught:
            asyncio.run(scenario())
    assert PASSWORD not in str(caught.value)


def test_kafka_errors_built_by_aiokafka(tls: TlsMaterial) -> None:
    kafka = _kafka(**_sasl(password=Secret(PASSWORD, "environment variable KAFKA_PW")))
    refused = explain_kafka_error(
        SaslAuthenticationFailed(
            f"Authentication failed during authentication due to invalid credentials {PASSWORD}"
        ),
        kafka,
        "b1:9093",
    )
    assert refused is not None and PASSWORD not in refused
    assert re.search(r"b1:9093 refused the credentials of user 'cdc' \(SCRAM-SHA-512\): wrong password or unknown "
                     r"user; check kafka\.security\.username and kafka\.security\.password \(its value comes from "
                     r"environment variable KAFKA_PW\)", refused)  # fmt: skip
    mechanism = explain_kafka_error(
        UnsupportedSaslMechanismError(
            "Kafka broker does not support SCRAM-SHA-512 sasl mechanism. Enabled: ['PLAIN']"
        ),
        kafka,
    )
    assert mechanism is not None and "set kafka.security.sasl_mechanism" in mechanism
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed: Hostname mismatch")
    mismatch.verify_code, mismatch.verify_message = (
        62,
        "Hostname mismatch, certificate is not valid for 'b1'.",
    )
    hostname = explain_kafka_error(mismatch, kafka, "b1:9093")
    assert hostname is not None and "set kafka.security.check_hostname: false" in hostname
    assert explain_kafka_error(ValueError("unrelated"), kafka) is None


# --- Cassandra: the real driver against local servers -------------------------------------------------


def _cassandra_connect(config: CassandraConfig) -> str:
    cluster = cassandra_cluster(config, protocol_version=5, connect_timeout=3, control_connection_timeout=3)
    try:
        with pytest.raises(NoHostAvailable) as caught:
            cluster.connect()
    finally:
        cluster.shutdown()
    message = explain_cassandra_error(caught.value, config)
    assert message is not None, caught.value
    assert PASSWORD not in message
    return message


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("stranger", r"certificate of 127\.0\.0\.1:\d+ is not trusted: it is not signed by a CA this client trusts "
                     r".* set cassandra\.tls\.ca_file \(.*ca\.pem\)"),
        ("expired", r"certificate of 127\.0\.0\.1:\d+ has expired"),
        ("misnamed", r"does not name the address .* set cassandra\.tls\.check_hostname: false"),
    ],
)  # fmt: skip
def test_cassandra_certificate_problems(tls: TlsMaterial, server: str, message: str) -> None:
    """cassandra-driver keeps only the SSL error's text (OSError "Last error: [SSL: ...]"): still told apart."""
    cert, key = getattr(tls, f"{server}_cert"), getattr(tls, f"{server}_key")
    with loopback_server(tls_handler(cert, key)) as port:
        config = CassandraConfig(
            port=port,
            username="cdc",
            password=Secret(PASSWORD),
            tls=CassandraTlsConfig(enabled=True, ca_file=tls.ca),
        )
        assert re.search(message, _cassandra_connect(config))


def test_cassandra_plaintext_client_on_tls_port(tls: TlsMaterial) -> None:
    with loopback_server(tls_handler(tls.server_cert, tls.server_key)) as port:
        message = _cassandra_connect(CassandraConfig(port=port))
    assert "set cassandra.tls.enabled: true" in message


def test_cassandra_tls_client_on_plaintext_port(tls: TlsMaterial) -> None:
    def answer_garbage(conn: socket.socket) -> None:  # Cassandra answers a TLS hello with a protocol error
        conn.recv(64)
        conn.sendall(b"\x84\x00\x00\x00\x00\x00\x00\x00\x10garbage-not-tls!")

    with loopback_server(answer_garbage) as port:
        message = _cassandra_connect(
            CassandraConfig(port=port, tls=CassandraTlsConfig(enabled=True, ca_file=tls.ca))
        )
    assert re.search(
        r"did not answer the TLS handshake \(WRONG_VERSION_NUMBER\).*cassandra\.tls\.enabled", message
    )


def test_cassandra_refused_login() -> None:
    config = CassandraConfig(username="cdc", password=Secret(PASSWORD, "file /run/secrets/cassandra"))
    refused = NoHostAvailable(
        "Unable to connect to any servers",
        {
            "10.0.0.1:9042": AuthenticationFailed(
                "Failed to authenticate to 10.0.0.1:9042: Error from server: code=0100 [Bad credentials] "
                'message="Provided username cdc and/or password are incorrect"'
            )
        },
    )
    message = explain_cassandra_error(refused, config)
    assert message == (
        "Cassandra at 10.0.0.1:9042 refused the login of role 'cdc': wrong password or unknown role; check "
        "cassandra.username and cassandra.password (its value comes from file /run/secrets/cassandra)"
    )
    anonymous = explain_cassandra_error(
        AuthenticationFailed("Remote end requires authentication"),
        replace(config, username=None, password=None),
    )
    assert anonymous is not None and "set cassandra.username and cassandra.password" in anonymous
